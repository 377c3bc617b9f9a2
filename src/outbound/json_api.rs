//! One JSON-over-HTTP(S) service the gateway calls: the remote guardrail API, the moderation API and the remote auth
//! service all speak it the same way, so the plumbing lives here once.
//!
//! A [`JsonApi`] is built from a provider's `base_url` and its credential header (checked once, when the provider is
//! configured). [`JsonApi::post`] joins a path onto the base, sends a JSON body with the credential and any extra
//! headers, waits at most the configured timeout for the whole exchange, reads a bounded body and returns the parsed
//! JSON of a 2xx answer. Every failure becomes a [`CallError`] whose text names what went wrong but never the URL's
//! secrets, the credential or the body that was sent; each provider maps it onto its own error enum.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

/// The most of an answer that is read; a guardrail or auth answer is small, and a service that sends more is broken
/// (or hostile) and must not make the gateway buffer without bound.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// How long a remote's explanation may be when it is put into an error or a violation message.
pub(crate) const MAX_MESSAGE_CHARS: usize = 200;

/// Why a call did not produce a usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The exchange did not finish within the timeout.
    Timeout,
    /// No connection (refused, DNS, TLS): the reason, without the URL.
    Unreachable(String),
    /// A non-2xx answer, with the `detail` or `message` text of its JSON body when it has one.
    Status { status: u16, detail: Option<String> },
    /// A 2xx answer that is not a JSON object.
    BadAnswer(String),
}

/// A configured JSON service: a base URL and the credential every request carries.
#[derive(Clone)]
pub(crate) struct JsonApi {
    client: reqwest::Client,
    /// Without a trailing slash, so a path starting with `/` joins onto it directly.
    base_url: String,
    credential_name: HeaderName,
    credential_value: HeaderValue,
    timeout: Duration,
}

impl fmt::Debug for JsonApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonApi")
            .field("base_url", &self.base_url)
            .field("credential", &format_args!("{}: <redacted>", self.credential_name))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A required, non-empty string field of a provider config; the error names the field, never its value.
pub(crate) fn required_string<'a>(config: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    match config.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(Value::String(_)) => Err(format!("`{field}` is empty")),
        Some(_) => Err(format!("`{field}` must be a string")),
        None => Err(format!("`{field}` is missing")),
    }
}

impl JsonApi {
    /// A service at `base_url` (http or https, no query or fragment) whose requests carry `credential_name:
    /// credential_value`. The error text is a config problem that names no secret.
    pub(crate) fn new(
        base_url: &str,
        credential_name: HeaderName,
        credential_value: &str,
        timeout: Duration,
    ) -> Result<JsonApi, String> {
        let parsed = reqwest::Url::parse(base_url).map_err(|e| format!("`base_url` is not a URL ({e})"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err("`base_url` must be an http:// or https:// URL".to_string());
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err("`base_url` has no host".to_string());
        }
        // A query or fragment would end up in the middle of every joined URL.
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err("`base_url` must not have a query or fragment".to_string());
        }
        let mut credential_value = HeaderValue::from_str(credential_value)
            .map_err(|_| "the API key contains characters not allowed in an HTTP header".to_string())?;
        // Keeps the value out of reqwest's and hyper's own Debug output.
        credential_value.set_sensitive(true);
        let client = crate::outbound::client(timeout).map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(JsonApi {
            client,
            base_url: base_url.trim_end_matches('/').to_string(),
            credential_name,
            credential_value,
            timeout,
        })
    }

    /// The base URL as configured, without a trailing slash.
    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `POST {base_url}{path}` with `body` as JSON; the answer's JSON object when the status is 2xx.
    pub(crate) async fn post(
        &self,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: &Value,
    ) -> Result<Map<String, Value>, CallError> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base_url))
            .header(self.credential_name.clone(), self.credential_value.clone())
            .json(body);
        for (name, value) in headers {
            request = request.header(name.clone(), value.clone());
        }
        // reqwest's own timeout covers the same span; this outer bound also holds if a future reqwest changes what
        // its timeout includes.
        let (status, bytes) = tokio::time::timeout(self.timeout, async {
            let mut response = request.send().await.map_err(classify)?;
            let status = response.status();
            let bytes = crate::outbound::read_body(&mut response, MAX_ANSWER_BYTES).await.map_err(|e| match e {
                crate::outbound::BodyReadError::Transport(e) => classify(e),
                crate::outbound::BodyReadError::TooLarge(limit) => {
                    CallError::BadAnswer(format!("answer larger than {limit} bytes"))
                }
            })?;
            Ok((status, bytes))
        })
        .await
        .map_err(|_| CallError::Timeout)??;

        let parsed = serde_json::from_slice::<Value>(&bytes);
        if !status.is_success() {
            let detail = parsed.ok().as_ref().and_then(explanation);
            return Err(CallError::Status { status: status.as_u16(), detail });
        }
        match parsed {
            Ok(Value::Object(object)) => Ok(object),
            Ok(_) => Err(CallError::BadAnswer("the answer is not a JSON object".to_string())),
            // serde's message gives line and column only, never the content.
            Err(e) => Err(CallError::BadAnswer(format!("the answer is not JSON ({e})"))),
        }
    }
}

/// The `detail` or `message` text a service puts in an error answer, whole: a caller that shows it removes any
/// secret first and shortens it afterwards (shortening first could leave half a secret behind).
pub(crate) fn explanation(answer: &Value) -> Option<String> {
    ["detail", "message"]
        .iter()
        .find_map(|field| answer.get(field).and_then(Value::as_str))
        .filter(|text| !text.trim().is_empty())
        .map(str::to_string)
}

/// `text` cut to at most `max` characters (on a character boundary), with an ellipsis when it was cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Sorts a reqwest failure into timeout, unreachable or unreadable, describing it without the URL (which may carry
/// credentials in its user-info) by walking the error's sources.
fn classify(error: reqwest::Error) -> CallError {
    if error.is_timeout() {
        return CallError::Timeout;
    }
    let connect = error.is_connect() || error.is_request();
    let reason = super::describe(error);
    if connect { CallError::Unreachable(reason) } else { CallError::BadAnswer(reason) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_on_character_boundaries() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééééé", 3), "ééé…");
        assert_eq!(truncate("exactly", 7), "exactly");
    }

    #[test]
    fn explanation_prefers_detail_then_message() {
        let both = serde_json::json!({"detail": "d", "message": "m"});
        assert_eq!(explanation(&both).as_deref(), Some("d"));
        assert_eq!(explanation(&serde_json::json!({"message": "m"})).as_deref(), Some("m"));
        assert_eq!(explanation(&serde_json::json!({"detail": 3})), None);
        assert_eq!(explanation(&serde_json::json!({"detail": "  "})), None);
    }

    #[test]
    fn rejects_base_urls_that_cannot_be_joined() {
        let name = HeaderName::from_static("apikey");
        let timeout = Duration::from_secs(1);
        for bad in ["ftp://host", "not a url", "http://host/?q=1", "http://host/#f", "file:///etc"] {
            assert!(JsonApi::new(bad, name.clone(), "k", timeout).is_err(), "{bad}");
        }
        let api = JsonApi::new("http://host/api/", name, "k", timeout).unwrap();
        assert_eq!(api.base_url(), "http://host/api");
    }
}
