//! An OAuth token endpoint's protocol, for every grant the gateway sends (RFC 6749 3.2): one form POST with
//! `Accept: application/json` (GitHub answers form-encoded without it) and its answer, a success (5.1) or an error
//! (5.2). Used by the client credentials of a server's `oauth_config` (`upstream/oauth/`), and by the broker of each
//! user's own tokens: authorization code, refresh, RFC 8693 token exchange (`credentials/broker/`).
//!
//! Neither the answer's body nor a form value is ever quoted in an error: the one holds tokens, the other a client
//! secret, a code or a subject token. A hostile endpoint's `error` code is cut and filtered before it is shown.

use std::time::Duration;

use serde_json::{Map, Value};

/// A token answer is small; a larger body is a misbehaving endpoint and is not buffered.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why a token request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenEndpointError {
    /// The connection failed (refused, DNS, TLS handshake, reset).
    #[error("the token endpoint could not be reached: {0}")]
    Unreachable(String),
    #[error("the token endpoint did not answer within {} seconds", .0.as_secs_f64())]
    Timeout(Duration),
    /// The endpoint answered with an error status or an RFC 6749 5.2 error.
    #[error("the token endpoint rejected the request (status {status}{})",
        .error.as_deref().map(|code| format!(", error {code}")).unwrap_or_default())]
    Rejected { status: u16, error: Option<String> },
    /// A success answer without a usable token.
    #[error("the token endpoint gave an unusable answer: {0}")]
    BadAnswer(String),
}

/// A success answer (RFC 6749 5.1, RFC 8693 2.2.1). `Debug` shows no token.
#[derive(Clone)]
pub struct TokenAnswer {
    pub access_token: String,
    pub token_type: String,
    /// `expires_in`, when the endpoint sent it.
    pub expires_in: Option<Duration>,
    pub refresh_token: Option<String>,
    /// The scopes granted, when the endpoint said.
    pub scope: Option<String>,
}

impl std::fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAnswer")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| "***"))
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// POSTs `form` to `url` and reads the answer. `timeout` is the client's, named in a timeout error.
pub async fn request(
    client: &reqwest::Client,
    url: &str,
    form: &[(&str, &str)],
    timeout: Duration,
) -> Result<TokenAnswer, TokenEndpointError> {
    let transport_error = |error: reqwest::Error| {
        if error.is_timeout() {
            TokenEndpointError::Timeout(timeout)
        } else {
            TokenEndpointError::Unreachable(super::describe(error))
        }
    };
    let mut response = client
        .post(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .form(form)
        .send()
        .await
        .map_err(transport_error)?;
    let status = response.status();
    let body = super::read_body(&mut response, MAX_ANSWER_BYTES).await.map_err(|e| match e {
        super::BodyReadError::Transport(e) => transport_error(e),
        super::BodyReadError::TooLarge(limit) => {
            TokenEndpointError::BadAnswer(format!("the answer is longer than {limit} bytes"))
        }
    })?;
    let answer: Option<Map<String, Value>> = serde_json::from_slice(&body).ok();
    let field = |name: &str| answer.as_ref().and_then(|answer| answer.get(name));
    let error = field("error").and_then(Value::as_str).map(error_code);
    if !status.is_success() || error.is_some() {
        return Err(TokenEndpointError::Rejected { status: status.as_u16(), error });
    }
    let Some(answer) = &answer else {
        return Err(TokenEndpointError::BadAnswer("not a JSON object".into()));
    };
    let access_token = token_field(answer, "access_token")?
        .ok_or_else(|| TokenEndpointError::BadAnswer("access_token missing".into()))?;
    let refresh_token = token_field(answer, "refresh_token")?;
    let token_type = match answer.get("token_type") {
        None | Some(Value::Null) => "Bearer".to_string(),
        Some(Value::String(kind)) if !kind.is_empty() && kind.chars().all(|c| c.is_ascii_graphic()) => kind.clone(),
        Some(_) => return Err(TokenEndpointError::BadAnswer("token_type is not a token type".into())),
    };
    // Some issuers send the number as a string.
    let expires_in = match answer.get("expires_in") {
        None | Some(Value::Null) => None,
        Some(Value::Number(seconds)) => Some(seconds.as_f64().and_then(|s| Duration::try_from_secs_f64(s).ok())),
        Some(Value::String(seconds)) => {
            Some(seconds.trim().parse().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()))
        }
        Some(_) => Some(None),
    };
    let expires_in = match expires_in {
        Some(None) => return Err(TokenEndpointError::BadAnswer("expires_in is not a number of seconds".into())),
        Some(Some(lifetime)) => Some(lifetime),
        None => None,
    };
    let scope = answer.get("scope").and_then(Value::as_str).map(|scope| error_code(scope).trim().to_string());
    Ok(TokenAnswer { access_token, token_type, expires_in, refresh_token, scope })
}

/// A token field: absent, or a non-empty string without control characters (it goes into headers and environments).
fn token_field(answer: &Map<String, Value>, name: &str) -> Result<Option<String>, TokenEndpointError> {
    match answer.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(token)) if !token.is_empty() && !token.contains(|c: char| c.is_control()) => {
            Ok(Some(token.clone()))
        }
        Some(_) => {
            Err(TokenEndpointError::BadAnswer(format!("{name} is empty, not a string or has control characters")))
        }
    }
}

/// An issuer's `error` code as it may appear in our texts: RFC 6749 codes are short printable ASCII; anything else is
/// cut and filtered so a hostile endpoint cannot write into our logs.
pub fn error_code(code: &str) -> String {
    code.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(64).collect()
}
