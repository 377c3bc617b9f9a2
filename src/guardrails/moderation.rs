//! Provider `thirdparty_moderation`: an OpenAI-compatible moderation API (contract 5), configured with
//! `{base_url, api_key, model}` (`model` defaults to `omni-moderation-latest`).
//!
//! [`Moderation::check`] sends the text as `POST {base_url}/v1/moderations` with `Authorization: Bearer <api_key>`
//! and `{"input", "model"}`, bounded by the guardrail timeout, and reads `results[0]`: when `flagged` is true, each
//! category whose value is true becomes one [`Violation`] of that kind. Transport and format problems become
//! [`GuardrailError`]s, on which the caller fails closed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::AUTHORIZATION;
use serde_json::{Map, Value, json};

use super::{GuardrailError, Violation};
use crate::outbound::json_api::{JsonApi, required_string};

/// The model asked for when the config names none.
pub const DEFAULT_MODEL: &str = "omni-moderation-latest";

/// The `detector` of every violation this provider reports.
const DETECTOR: &str = "thirdparty_moderation";

/// A client of a moderation API. Cloning shares the connection pool.
#[derive(Clone)]
pub struct Moderation {
    api: Arc<JsonApi>,
    model: Arc<str>,
}

impl fmt::Debug for Moderation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Moderation")
            .field("base_url", &self.api.base_url())
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Moderation {
    /// A client for the provider config `{base_url, api_key, model}`; every check gives up after `timeout`.
    pub fn new(config: &Map<String, Value>, timeout: Duration) -> Result<Moderation, GuardrailError> {
        let base_url = required_string(config, "base_url").map_err(GuardrailError::Config)?;
        let api_key = required_string(config, "api_key").map_err(GuardrailError::Config)?;
        let model = match config.get("model") {
            None | Some(Value::Null) => DEFAULT_MODEL,
            Some(Value::String(model)) if !model.trim().is_empty() => model,
            Some(_) => return Err(GuardrailError::Config("`model` must be a non-empty string".to_string())),
        };
        let api = JsonApi::new(base_url, AUTHORIZATION, &format!("Bearer {api_key}"), timeout)
            .map_err(GuardrailError::Config)?;
        Ok(Moderation { api: Arc::new(api), model: Arc::from(model) })
    }

    /// The violations the moderation API finds in `text`; empty when it does not flag it.
    pub async fn check(&self, text: &str) -> Result<Vec<Violation>, GuardrailError> {
        let body = json!({ "input": text, "model": &*self.model });
        let answer = self.api.post("/v1/moderations", &[], &body).await?;
        read_results(&answer)
    }
}

/// Reads `results[0]`. A missing or malformed result is a bad answer rather than a pass: the check fails closed.
fn read_results(answer: &Map<String, Value>) -> Result<Vec<Violation>, GuardrailError> {
    let bad = |reason: &str| GuardrailError::BadAnswer(reason.to_string());
    let result = match answer.get("results") {
        Some(Value::Array(results)) => results.first().ok_or_else(|| bad("`results` is empty"))?,
        Some(_) => return Err(bad("`results` is not a list")),
        None => return Err(bad("`results` is missing")),
    };
    let flagged = match result.get("flagged") {
        Some(Value::Bool(flagged)) => *flagged,
        _ => return Err(bad("`results[0].flagged` is missing or not a boolean")),
    };
    if !flagged {
        return Ok(Vec::new());
    }
    let violation = |kind: &str| Violation {
        kind: kind.to_string(),
        detector: DETECTOR.to_string(),
        message: format!("content flagged as {kind}"),
    };
    let mut violations: Vec<Violation> = result
        .get("categories")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, value)| value.as_bool() == Some(true))
        .map(|(category, _)| violation(category))
        .collect();
    // Flagged without naming why: still a violation, or a flagged text would pass.
    if violations.is_empty() {
        violations.push(violation("flagged"));
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::super::remote::test_server::{MockServer, provider_config, refused_url};
    use super::*;

    const KEY: &str = "sk-moderation-secret-key";

    fn config(base_url: &str) -> Map<String, Value> {
        provider_config(base_url, KEY)
    }

    fn client(base_url: &str) -> Moderation {
        Moderation::new(&config(base_url), Duration::from_secs(5)).unwrap()
    }

    fn answer(flagged: bool, categories: Value) -> Value {
        json!({ "id": "modr-1", "model": "m", "results": [{ "flagged": flagged, "categories": categories }] })
    }

    #[tokio::test]
    async fn sends_an_openai_request_with_the_default_model() {
        let server = MockServer::json(answer(false, json!({ "violence": false }))).await;
        assert_eq!(client(&server.url).check("hello").await.unwrap(), vec![]);
        let request = server.only_request();
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/v1/moderations");
        assert_eq!(request.header("authorization"), format!("Bearer {KEY}"));
        assert_eq!(request.header("content-type"), "application/json");
        assert_eq!(request.body, json!({ "input": "hello", "model": "omni-moderation-latest" }));
    }

    #[tokio::test]
    async fn uses_the_configured_model_and_a_base_url_with_a_trailing_slash() {
        let server = MockServer::json(answer(false, json!({}))).await;
        let mut config = config(&server.url_with_slash());
        config.insert("model".to_string(), json!("text-moderation-stable"));
        Moderation::new(&config, Duration::from_secs(5)).unwrap().check("x").await.unwrap();
        let request = server.only_request();
        assert_eq!(request.path, "/v1/moderations");
        assert_eq!(request.body["model"], "text-moderation-stable");
    }

    #[tokio::test]
    async fn each_flagged_category_is_one_violation() {
        let categories = json!({ "harassment": true, "violence": false, "self-harm/intent": true, "sexual": null });
        let server = MockServer::json(answer(true, categories)).await;
        let violations = client(&server.url).check("bad").await.unwrap();
        let kinds: Vec<&str> = violations.iter().map(|v| v.kind.as_str()).collect();
        assert_eq!(kinds, ["harassment", "self-harm/intent"]);
        assert_eq!(
            violations[0],
            Violation {
                kind: "harassment".to_string(),
                detector: "thirdparty_moderation".to_string(),
                message: "content flagged as harassment".to_string(),
            }
        );
    }

    #[tokio::test]
    async fn flagged_without_a_true_category_is_one_flagged_violation() {
        let server = MockServer::json(answer(true, json!({ "violence": false }))).await;
        let violations = client(&server.url).check("bad").await.unwrap();
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].kind, "flagged");
    }

    #[tokio::test]
    async fn a_true_category_without_flagged_true_is_no_violation() {
        let server = MockServer::json(answer(false, json!({ "violence": true }))).await;
        assert!(client(&server.url).check("x").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn missing_or_empty_results_are_bad_answers() {
        for body in [json!({}), json!({ "results": [] }), json!({ "results": {} }), json!({ "results": [{}] })] {
            let server = MockServer::json(body.clone()).await;
            let error = client(&server.url).check("x").await.unwrap_err();
            assert!(matches!(error, GuardrailError::BadAnswer(_)), "{body}: {error:?}");
        }
        let server = MockServer::answer(200, "{ not json").await;
        assert!(matches!(client(&server.url).check("x").await, Err(GuardrailError::BadAnswer(_))));
    }

    #[tokio::test]
    async fn transport_failures_map_to_guardrail_errors() {
        let server = MockServer::answer(429, r#"{"error": {"message": "rate limited"}}"#).await;
        assert_eq!(client(&server.url).check("x").await, Err(GuardrailError::Status(429)));

        let silent = MockServer::silent().await;
        let moderation = Moderation::new(&config(&silent.url), Duration::from_millis(200)).unwrap();
        assert_eq!(moderation.check("x").await, Err(GuardrailError::Timeout));

        let error = client(&refused_url().await).check("x").await.unwrap_err();
        assert!(matches!(error, GuardrailError::Unreachable(_)), "{error:?}");
        assert!(!error.to_string().contains(KEY));
    }

    #[test]
    fn config_problems_are_config_errors() {
        for case in [
            json!({ "api_key": KEY }),
            json!({ "base_url": "http://h" }),
            json!({ "base_url": "http://h", "api_key": KEY, "model": 4 }),
            json!({ "base_url": "gopher://h", "api_key": KEY }),
        ] {
            let error = Moderation::new(case.as_object().unwrap(), Duration::from_secs(1)).unwrap_err();
            assert!(matches!(error, GuardrailError::Config(_)), "{case}: {error:?}");
            assert!(!error.to_string().contains(KEY));
        }
    }

    #[test]
    fn debug_hides_the_key() {
        let shown = format!("{:?}", client("https://moderation.example"));
        assert!(shown.contains("omni-moderation-latest") && shown.contains("moderation.example"), "{shown}");
        assert!(!shown.contains(KEY), "{shown}");
    }
}
