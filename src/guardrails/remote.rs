//! Provider `gw`: the remote guardrail API (contract 5), configured with `{base_url, api_key}`.
//!
//! Each check is one `POST` of a small JSON body to a path under `base_url`, with `apikey: <api_key>` and
//! `Content-Type: application/json`, bounded by the guardrail timeout. The answer is read into this module's types:
//! [`RemoteGuardrails::detect`] turns `summary.<detector>` into [`Violation`]s for the detectors a policy blocks,
//! [`RemoteGuardrails::relevancy`] and [`RemoteGuardrails::adherence`] give a score, [`RemoteGuardrails::pii`]
//! redacts or restores text, and [`RemoteGuardrails::hallucination`] gives a yes or no. Transport and format problems
//! become [`GuardrailError`]s; whether a check then fails open or closed is the caller's decision (contract 5).

#[cfg(test)]
pub(crate) mod test_server;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::{GuardrailError, Mode, Violation};
use crate::outbound::json_api::{CallError, JsonApi, MAX_MESSAGE_CHARS, required_string, truncate};

/// The `detector` of every violation this provider reports.
const DETECTOR: &str = "gw";

/// The outcome of a policy check.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DetectOutcome {
    /// One per fired detector that the policy blocks, in the order the remote listed them.
    pub violations: Vec<Violation>,
    /// Every fired detector, blocked or not, for logging.
    pub detected: Vec<String>,
}

/// The remote's answer to a PII request: the redacted (or restored) text and the handle to its redaction mapping.
#[derive(Clone, PartialEq)]
pub struct PiiAnswer {
    pub text: String,
    /// Passed back with the response-mode request so the remote can restore what it redacted.
    pub key: Option<String>,
}

impl fmt::Debug for PiiAnswer {
    // The text may still hold personal data (a restored answer does by design), and the key unlocks the mapping.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PiiAnswer")
            .field("text", &format_args!("<{} chars>", self.text.chars().count()))
            .field("key", &self.key.as_ref().map(|_| format_args!("<redacted>")))
            .finish()
    }
}

/// A client of the remote guardrail API. Cloning shares the connection pool.
#[derive(Clone)]
pub struct RemoteGuardrails {
    api: Arc<JsonApi>,
}

impl fmt::Debug for RemoteGuardrails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteGuardrails").field("base_url", &self.api.base_url()).finish_non_exhaustive()
    }
}

impl From<CallError> for GuardrailError {
    fn from(error: CallError) -> GuardrailError {
        match error {
            CallError::Timeout => GuardrailError::Timeout,
            CallError::Unreachable(reason) => GuardrailError::Unreachable(reason),
            CallError::Status { status, .. } => GuardrailError::Status(status),
            CallError::BadAnswer(reason) => GuardrailError::BadAnswer(reason),
        }
    }
}

impl RemoteGuardrails {
    /// A client for the provider config `{base_url, api_key}`; every call gives up after `timeout`.
    pub fn new(config: &Map<String, Value>, timeout: Duration) -> Result<RemoteGuardrails, GuardrailError> {
        let base_url = required_string(config, "base_url").map_err(GuardrailError::Config)?;
        let api_key = required_string(config, "api_key").map_err(GuardrailError::Config)?;
        let api = JsonApi::new(base_url, HeaderName::from_static("apikey"), api_key, timeout)
            .map_err(GuardrailError::Config)?;
        Ok(RemoteGuardrails { api: Arc::new(api) })
    }

    /// Runs policy `policy_name` on `text`; a detector that fired and is named in `block` is a violation.
    pub async fn detect(
        &self,
        policy_name: &str,
        mode: Mode,
        text: &str,
        block: &[String],
    ) -> Result<DetectOutcome, GuardrailError> {
        let policy = HeaderValue::from_str(policy_name)
            .map_err(|_| GuardrailError::Config("the policy name is not a valid HTTP header value".to_string()))?;
        let mode = HeaderValue::from_static(match mode {
            Mode::Prompt => "prompt",
            Mode::Response => "response",
        });
        let headers =
            [(HeaderName::from_static("x-gw-guardrail"), policy), (HeaderName::from_static("x-gw-mode"), mode)];
        let answer = self.api.post("/guardrails/guardrail/detect", &headers, &json!({ "text": text })).await?;
        read_detect(&answer, block)
    }

    /// How relevant `llm_answer` is to `question`, from 0 to 1 (a missing score counts as 1).
    pub async fn relevancy(&self, question: &str, llm_answer: &str) -> Result<f64, GuardrailError> {
        let body = json!({ "question": question, "llm_answer": llm_answer });
        read_score(&self.api.post("/guardrails/relevancy", &[], &body).await?)
    }

    /// How closely `llm_answer` keeps to `context`, from 0 to 1 (a missing score counts as 1).
    pub async fn adherence(&self, context: &str, llm_answer: &str) -> Result<f64, GuardrailError> {
        let body = json!({ "context": context, "llm_answer": llm_answer });
        read_score(&self.api.post("/guardrails/adherence", &[], &body).await?)
    }

    /// Redacts PII from `text` (`Mode::Prompt`, sent as mode `request`) or restores it (`Mode::Response`, with the
    /// `key` the redaction returned).
    pub async fn pii(&self, text: &str, mode: Mode, key: Option<&str>) -> Result<PiiAnswer, GuardrailError> {
        let mode = match mode {
            Mode::Prompt => "request",
            Mode::Response => "response",
        };
        let body = json!({ "text": text, "mode": mode, "key": key });
        let answer = self.api.post("/guardrails/pii", &[], &body).await?;
        let text = match answer.get("text") {
            Some(Value::String(text)) => text.clone(),
            Some(_) => return Err(bad("`text` is not a string")),
            None => return Err(bad("`text` is missing")),
        };
        let key = match answer.get("key") {
            None | Some(Value::Null) => None,
            Some(Value::String(key)) => Some(key.clone()),
            Some(_) => return Err(bad("`key` is not a string")),
        };
        Ok(PiiAnswer { text, key })
    }

    /// Whether `response_text` (the answer to `request_text`) is hallucinated given `context`.
    pub async fn hallucination(
        &self,
        request_text: &str,
        response_text: &str,
        context: &str,
    ) -> Result<bool, GuardrailError> {
        let body = json!({ "request_text": request_text, "response_text": response_text, "context": context });
        let answer = self.api.post("/guardrails/hallucination", &[], &body).await?;
        match answer.get("has_hallucination") {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(found)) => Ok(*found),
            Some(_) => Err(bad("`has_hallucination` is not a boolean")),
        }
    }
}

fn bad(reason: &str) -> GuardrailError {
    GuardrailError::BadAnswer(reason.to_string())
}

/// Reads a detect answer. Without a `summary` object the remote has not said what it found, and a policy check must
/// not pass on silence, so that is a bad answer.
fn read_detect(answer: &Map<String, Value>, block: &[String]) -> Result<DetectOutcome, GuardrailError> {
    let Some(Value::Object(summary)) = answer.get("summary") else {
        return Err(bad("`summary` is missing or not an object"));
    };
    let details = answer.get("details").and_then(Value::as_object);
    let mut outcome = DetectOutcome::default();
    for (detector, value) in summary {
        if !fired(value) {
            continue;
        }
        outcome.detected.push(detector.clone());
        if block.iter().any(|blocked| blocked == detector) {
            let message = details.and_then(|d| d.get(detector)).and_then(describe);
            outcome.violations.push(Violation {
                kind: detector.clone(),
                detector: DETECTOR.to_string(),
                message: message.unwrap_or_else(|| format!("{detector} detected")),
            });
        }
    }
    Ok(outcome)
}

/// A summary value that says the detector fired: a count of at least 1 (the API sends 1), `true`, or a non-empty
/// list of findings. Zero, `false`, an empty list and anything else mean it did not.
fn fired(value: &Value) -> bool {
    match value {
        Value::Bool(fired) => *fired,
        Value::Number(n) => n.as_f64().is_some_and(|n| n >= 1.0),
        Value::Array(findings) => !findings.is_empty(),
        _ => false,
    }
}

/// A short text for a detector's details: a string as it is, other JSON in compact form; nothing for empty values.
fn describe(details: &Value) -> Option<String> {
    let text = match details {
        Value::Null => return None,
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => return None,
        Value::Object(o) if o.is_empty() => return None,
        other => other.to_string(),
    };
    (!text.trim().is_empty()).then(|| truncate(&text, MAX_MESSAGE_CHARS))
}

/// The `score` of a relevancy or adherence answer; the API leaves it out when there is nothing to judge.
fn read_score(answer: &Map<String, Value>) -> Result<f64, GuardrailError> {
    match answer.get("score") {
        None | Some(Value::Null) => Ok(1.0),
        Some(Value::Number(n)) => n.as_f64().ok_or_else(|| bad("`score` is not a finite number")),
        Some(_) => Err(bad("`score` is not a number")),
    }
}

#[cfg(test)]
mod tests {
    use super::test_server::{MockServer, provider_config, refused_url};
    use super::*;

    const KEY: &str = "remote-guardrail-secret-key";

    fn config(base_url: &str) -> Map<String, Value> {
        provider_config(base_url, KEY)
    }

    fn client(base_url: &str) -> RemoteGuardrails {
        RemoteGuardrails::new(&config(base_url), Duration::from_secs(5)).unwrap()
    }

    fn blocks(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[tokio::test]
    async fn detect_sends_the_policy_and_blocks_only_fired_detectors_named_in_block() {
        let server = MockServer::json(json!({
            "summary": {
                "injection_attack": 1, "pii": true, "toxicity": ["hate"], "nsfw": [], "keyword_detector": 0,
                "policy_violation": false, "bias": 1, "topic": null
            },
            "details": { "injection_attack": "ignore previous instructions", "pii": {"email": ["a@b.c"]} }
        }))
        .await;
        let block = blocks(&["injection_attack", "pii", "toxicity", "nsfw", "keyword_detector", "policy_violation"]);
        let outcome = client(&server.url).detect("strict", Mode::Prompt, "hello", &block).await.unwrap();

        let request = server.only_request();
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/guardrails/guardrail/detect");
        assert_eq!(request.header("apikey"), KEY);
        assert_eq!(request.header("content-type"), "application/json");
        assert_eq!(request.header("x-gw-guardrail"), "strict");
        assert_eq!(request.header("x-gw-mode"), "prompt");
        assert_eq!(request.body, json!({ "text": "hello" }));

        let violation = |kind: &str, message: &str| Violation {
            kind: kind.to_string(),
            detector: "gw".to_string(),
            message: message.to_string(),
        };
        assert_eq!(
            outcome.violations,
            vec![
                violation("injection_attack", "ignore previous instructions"),
                violation("pii", r#"{"email":["a@b.c"]}"#),
                violation("toxicity", "toxicity detected"),
            ]
        );
        assert_eq!(outcome.detected, blocks(&["injection_attack", "pii", "toxicity", "bias"]));
    }

    #[tokio::test]
    async fn detect_in_response_mode_joins_a_base_url_with_a_trailing_slash() {
        let server = MockServer::json(json!({ "summary": { "pii": 0 } })).await;
        let outcome = client(&server.url_with_slash()).detect("p", Mode::Response, "out", &[]).await.unwrap();
        assert_eq!(outcome, DetectOutcome::default());
        let request = server.only_request();
        assert_eq!(request.path, "/guardrails/guardrail/detect");
        assert_eq!(request.header("x-gw-mode"), "response");
    }

    #[tokio::test]
    async fn detect_keeps_base_path_and_shortens_long_details() {
        let long = "x".repeat(500);
        let server = MockServer::json(json!({ "summary": { "pii": [1] }, "details": { "pii": long } })).await;
        let base = format!("{}/api/v1/", server.url);
        let outcome = client(&base).detect("p", Mode::Prompt, "t", &blocks(&["pii"])).await.unwrap();
        assert_eq!(server.only_request().path, "/api/v1/guardrails/guardrail/detect");
        let message = &outcome.violations[0].message;
        assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(message.ends_with('…'));
    }

    #[tokio::test]
    async fn detect_without_summary_is_a_bad_answer() {
        let server = MockServer::json(json!({ "details": {} })).await;
        let error = client(&server.url).detect("p", Mode::Prompt, "t", &[]).await.unwrap_err();
        assert!(matches!(error, GuardrailError::BadAnswer(_)), "{error:?}");
    }

    #[tokio::test]
    async fn detect_refuses_a_policy_name_that_cannot_be_a_header() {
        let error = client("http://127.0.0.1:9").detect("bad\nname", Mode::Prompt, "t", &[]).await.unwrap_err();
        assert!(matches!(error, GuardrailError::Config(_)), "{error:?}");
    }

    #[tokio::test]
    async fn relevancy_sends_question_and_answer_and_reads_the_score() {
        let server = MockServer::json(json!({ "score": 0.42 })).await;
        assert_eq!(client(&server.url).relevancy("q?", "a.").await.unwrap(), 0.42);
        let request = server.only_request();
        assert_eq!(request.path, "/guardrails/relevancy");
        assert_eq!(request.header("apikey"), KEY);
        assert_eq!(request.body, json!({ "question": "q?", "llm_answer": "a." }));
    }

    #[tokio::test]
    async fn adherence_sends_context_and_answer_and_reads_the_score() {
        let server = MockServer::json(json!({ "score": 1 })).await;
        assert_eq!(client(&server.url_with_slash()).adherence("ctx", "a.").await.unwrap(), 1.0);
        let request = server.only_request();
        assert_eq!(request.path, "/guardrails/adherence");
        assert_eq!(request.body, json!({ "context": "ctx", "llm_answer": "a." }));
    }

    #[tokio::test]
    async fn a_missing_score_counts_as_one_and_a_text_score_is_a_bad_answer() {
        let server = MockServer::json(json!({ "other": true })).await;
        assert_eq!(client(&server.url).relevancy("q", "a").await.unwrap(), 1.0);
        let server = MockServer::json(json!({ "score": null })).await;
        assert_eq!(client(&server.url).adherence("c", "a").await.unwrap(), 1.0);
        let server = MockServer::json(json!({ "score": "high" })).await;
        let error = client(&server.url).relevancy("q", "a").await.unwrap_err();
        assert!(matches!(error, GuardrailError::BadAnswer(_)), "{error:?}");
    }

    #[tokio::test]
    async fn pii_redacts_in_request_mode_without_a_key() {
        let server = MockServer::json(json!({ "text": "mail [EMAIL]", "key": "map-1" })).await;
        let answer = client(&server.url).pii("mail a@b.c", Mode::Prompt, None).await.unwrap();
        assert_eq!(answer, PiiAnswer { text: "mail [EMAIL]".to_string(), key: Some("map-1".to_string()) });
        let request = server.only_request();
        assert_eq!(request.path, "/guardrails/pii");
        assert_eq!(request.body, json!({ "text": "mail a@b.c", "mode": "request", "key": null }));
    }

    #[tokio::test]
    async fn pii_restores_in_response_mode_with_the_key() {
        let server = MockServer::json(json!({ "text": "mail a@b.c" })).await;
        let answer = client(&server.url).pii("mail [EMAIL]", Mode::Response, Some("map-1")).await.unwrap();
        assert_eq!(answer, PiiAnswer { text: "mail a@b.c".to_string(), key: None });
        assert_eq!(server.only_request().body, json!({ "text": "mail [EMAIL]", "mode": "response", "key": "map-1" }));
    }

    #[tokio::test]
    async fn pii_without_text_is_a_bad_answer() {
        let server = MockServer::json(json!({ "key": "map-1" })).await;
        let error = client(&server.url).pii("t", Mode::Prompt, None).await.unwrap_err();
        assert!(matches!(error, GuardrailError::BadAnswer(_)), "{error:?}");
    }

    #[test]
    fn pii_answer_debug_hides_text_and_key() {
        let answer = PiiAnswer { text: "jane@example.com".to_string(), key: Some("map-secret".to_string()) };
        let shown = format!("{answer:?}");
        assert!(!shown.contains("jane") && !shown.contains("map-secret"), "{shown}");
        assert!(shown.contains("16 chars"), "{shown}");
    }

    #[tokio::test]
    async fn hallucination_reads_the_flag_and_treats_missing_as_false() {
        let server = MockServer::json(json!({ "has_hallucination": true })).await;
        assert!(client(&server.url).hallucination("req", "resp", "ctx").await.unwrap());
        let request = server.only_request();
        assert_eq!(request.path, "/guardrails/hallucination");
        assert_eq!(request.body, json!({ "request_text": "req", "response_text": "resp", "context": "ctx" }));
        let server = MockServer::json(json!({})).await;
        assert!(!client(&server.url).hallucination("req", "resp", "ctx").await.unwrap());
    }

    #[tokio::test]
    async fn a_non_2xx_answer_is_a_status_error() {
        let server = MockServer::answer(503, r#"{"detail": "down"}"#).await;
        assert_eq!(client(&server.url).relevancy("q", "a").await, Err(GuardrailError::Status(503)));
        let server = MockServer::answer(401, "").await;
        let error = client(&server.url).detect("p", Mode::Prompt, "t", &[]).await.unwrap_err();
        assert_eq!(error, GuardrailError::Status(401));
    }

    #[tokio::test]
    async fn a_silent_server_is_a_timeout() {
        let server = MockServer::silent().await;
        let guard = RemoteGuardrails::new(&config(&server.url), Duration::from_millis(200)).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(guard.hallucination("q", "a", "c").await, Err(GuardrailError::Timeout));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_names_no_key() {
        let error = client(&refused_url().await).pii("t", Mode::Prompt, None).await.unwrap_err();
        assert!(matches!(error, GuardrailError::Unreachable(_)), "{error:?}");
        assert!(!error.to_string().contains(KEY));
    }

    #[tokio::test]
    async fn an_answer_that_is_not_a_json_object_is_a_bad_answer() {
        for body in ["not json", "[1, 2]", ""] {
            let server = MockServer::answer(200, body).await;
            let error = client(&server.url).relevancy("q", "a").await.unwrap_err();
            assert!(matches!(error, GuardrailError::BadAnswer(_)), "{body}: {error:?}");
        }
    }

    #[test]
    fn config_problems_are_config_errors_that_name_no_key() {
        let cases = [
            json!({ "api_key": KEY }),
            json!({ "base_url": "http://h" }),
            json!({ "base_url": 5, "api_key": KEY }),
            json!({ "base_url": "http://h", "api_key": ["k"] }),
            json!({ "base_url": "http://h", "api_key": "" }),
            json!({ "base_url": "ftp://h", "api_key": KEY }),
            json!({ "base_url": "http://h", "api_key": "bad\nkey-secret" }),
        ];
        for case in cases {
            let error = RemoteGuardrails::new(case.as_object().unwrap(), Duration::from_secs(1)).unwrap_err();
            assert!(matches!(error, GuardrailError::Config(_)), "{case}: {error:?}");
            assert!(!error.to_string().contains(KEY) && !error.to_string().contains("secret"), "{error}");
        }
    }

    #[test]
    fn debug_shows_the_url_but_not_the_key() {
        let shown = format!("{:?}", client("https://guard.example/"));
        assert!(shown.contains("https://guard.example"), "{shown}");
        assert!(!shown.contains(KEY), "{shown}");
    }
}
