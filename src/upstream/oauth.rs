//! Upstream OAuth (spec 5.3): access tokens for upstream servers whose entry has an enabled `oauth_config`.
//!
//! Data flows in three steps. At load, a server entry's `oauth_config` becomes [`OAuthSettings`] (every problem
//! reported at once, the secret never echoed). Before a server starts, [`TokenManager::token`] returns an
//! [`AccessToken`] for a [`TokenKey`] (server, MCP config, project): the cached one while it is fresh, or a new one
//! from the issuer's token endpoint with the client credentials grant (RFC 6749 4.4, the secret sent in the form body
//! as `client_secret_post`; with mutual TLS, RFC 8705, the client also presents its certificate and may be public).
//! Callers of one key share one acquisition; transient failures are retried with exponential backoff, and after a
//! failed acquisition further calls fail fast for a cool-down instead of hammering the issuer. Finally [`inject`] puts
//! the token into the server's environment and into the arguments that ask for it with a placeholder. Neither the
//! client secret nor a token ever appears in a `Debug` output, an error text or a log record.
//!
//! Files: `config/oauth.rs` reads the configuration (it is validated with the rest of the file), `manager.rs` caches and single-flights acquisitions and keeps the
//! backoff and cool-down state, `request.rs` speaks the token endpoint's protocol (and builds mutual TLS clients); this
//! file holds the shared vocabulary and [`inject`].

mod manager;
mod request;
#[cfg(test)]
mod test_support;

use std::time::Duration;

use tokio::time::Instant;

pub use crate::config::oauth::{ClientCertificate, OAuthSettings};
pub use manager::TokenManager;

/// Spec 5.3 and 8: a token is replaced this long before it expires.
pub const REFRESH_BUFFER: Duration = Duration::from_secs(5 * 60);
/// A token is used at least this long (or half its lifetime when that is shorter), so that a token living barely longer
/// than [`REFRESH_BUFFER`] is not fetched anew on every call.
pub const MIN_USE: Duration = Duration::from_secs(60);
/// The lifetime assumed when the issuer does not send `expires_in` (RFC 6749 leaves it to the server's documentation).
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
/// Requests of one acquisition, and the delay before the second one; the delay doubles up to [`MAX_RETRY_DELAY`].
pub const MAX_ATTEMPTS: u32 = 4;
pub const FIRST_RETRY_DELAY: Duration = Duration::from_millis(250);
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);
/// After a failed acquisition, calls fail fast for this long, doubled per consecutive failure up to [`MAX_COOL_DOWN`].
pub const FIRST_COOL_DOWN: Duration = Duration::from_secs(5);
pub const MAX_COOL_DOWN: Duration = Duration::from_secs(60);
/// The environment variables a token is injected as, and the argument placeholders replaced by their values.
pub const TOKEN_ENV: &str = "OAUTH_ACCESS_TOKEN";
pub const TOKEN_TYPE_ENV: &str = "OAUTH_TOKEN_TYPE";
pub const TOKEN_PLACEHOLDER: &str = "${OAUTH_ACCESS_TOKEN}";
pub const TOKEN_TYPE_PLACEHOLDER: &str = "${OAUTH_TOKEN_TYPE}";
/// Longer lifetimes are cut to this (it also keeps `Instant` arithmetic far from overflow).
const MAX_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// An access token from the issuer. `Debug` hides the token itself.
#[derive(Clone)]
pub struct AccessToken {
    token: String,
    pub token_type: String,
    pub expires_at: Instant,
    /// When the cache stops handing the token out and fetches a new one (see [`usable_for`]).
    pub refresh_at: Instant,
}

impl AccessToken {
    /// A token obtained now that lives `lifetime`.
    pub fn new(token: String, token_type: String, lifetime: Duration) -> AccessToken {
        let now = Instant::now();
        let lifetime = lifetime.min(MAX_LIFETIME);
        AccessToken { token, token_type, expires_at: now + lifetime, refresh_at: now + usable_for(lifetime) }
    }

    /// The token itself, for injection.
    pub fn secret(&self) -> &str {
        &self.token
    }
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"***")
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("refresh_at", &self.refresh_at)
            .finish()
    }
}

/// One caller's access token for a remote server (contract section 9): taken from the manager's cache for each request,
/// and fetched anew, once, when the server answers 401. Two are equal when they name the same token (key and
/// settings), whatever the token is now: a refreshed token does not end the gateway's session with the server.
#[derive(Clone)]
pub struct Bearer {
    manager: std::sync::Arc<TokenManager>,
    key: TokenKey,
    settings: OAuthSettings,
    /// The token the caller's request obtained from the issuer just now, until the first request to the server
    /// takes it (see [`Bearer::take_new_token`]); shared by the clones that open the session.
    new_token: std::sync::Arc<std::sync::Mutex<Option<std::sync::Arc<AccessToken>>>>,
}

impl Bearer {
    pub fn new(manager: std::sync::Arc<TokenManager>, key: TokenKey, settings: OAuthSettings) -> Bearer {
        Bearer { manager, key, settings, new_token: Default::default() }
    }

    /// Notes that `token` was obtained from the issuer for the request this bearer serves: if the server refuses it,
    /// a new one is not fetched, so one request costs the issuer at most one token request (contract 14).
    pub fn obtained_now(self, token: std::sync::Arc<AccessToken>) -> Bearer {
        *super::lock(&self.new_token) = Some(token);
        self
    }

    /// The token obtained for this request, once: the first request to the server takes it, so a session that
    /// outlives the request refreshes a refused token as usual.
    pub fn take_new_token(&self) -> Option<std::sync::Arc<AccessToken>> {
        super::lock(&self.new_token).take()
    }

    /// The token to send now.
    pub async fn current(&self) -> Result<std::sync::Arc<AccessToken>, OAuthError> {
        self.manager.token(&self.key, &self.settings).await
    }

    /// A new token, after the server refused the current one.
    pub async fn refreshed(&self) -> Result<std::sync::Arc<AccessToken>, OAuthError> {
        self.manager.refresh(&self.key, &self.settings).await
    }
}

impl PartialEq for Bearer {
    fn eq(&self, other: &Bearer) -> bool {
        self.key == other.key && self.settings == other.settings
    }
}

impl Eq for Bearer {}

impl std::hash::Hash for Bearer {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bearer").field("key", &self.key).finish_non_exhaustive()
    }
}

/// How long a token of `lifetime` is handed out: until [`REFRESH_BUFFER`] before it expires (spec 5.3), but at least
/// half its lifetime or [`MIN_USE`], whichever is shorter. So 3600 s is used for 3300 s and 400 s for 100 s, while a
/// token of 301 s is used for 60 s instead of 1 s and one of 60 s for 30 s: short-lived tokens are not fetched anew on
/// every call, and are still replaced well before they expire.
pub fn usable_for(lifetime: Duration) -> Duration {
    lifetime.saturating_sub(REFRESH_BUFFER).max((lifetime / 2).min(MIN_USE))
}

/// Whose token: one per server, MCP configuration and project (spec 5.3).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TokenKey {
    pub server_name: String,
    pub mcp_config_id: String,
    pub project_id: String,
}

impl TokenKey {
    pub fn new(
        server_name: impl Into<String>,
        mcp_config_id: impl Into<String>,
        project_id: impl Into<String>,
    ) -> Self {
        TokenKey { server_name: server_name.into(), mcp_config_id: mcp_config_id.into(), project_id: project_id.into() }
    }
}

/// Why no token could be had. Texts name statuses and the issuer's error code, never a secret or a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OAuthError {
    /// A local problem: unreadable certificate files, an invalid CA bundle, a client that could not be built.
    #[error("OAuth configuration error: {0}")]
    Config(String),
    /// The connection failed (refused, DNS, TLS handshake, reset).
    #[error("the OAuth token endpoint could not be reached: {0}")]
    Unreachable(String),
    #[error("the OAuth token endpoint did not answer within {} seconds", .0.as_secs_f64())]
    Timeout(Duration),
    /// The endpoint answered with an error status or an RFC 6749 5.2 error.
    #[error("the OAuth token endpoint rejected the request (status {status}{})",
        .error.as_deref().map(|code| format!(", error {code}")).unwrap_or_default())]
    Rejected { status: u16, error: Option<String> },
    /// A success answer without a usable token.
    #[error("the OAuth token endpoint gave an unusable answer: {0}")]
    BadAnswer(String),
    /// A recent acquisition failed; calls fail fast until the cool-down ends (a forced refresh ignores it).
    #[error("OAuth token acquisition paused for {} more seconds after: {last}", .retry_after.as_secs())]
    CoolingDown { retry_after: Duration, last: Box<OAuthError> },
}

impl OAuthError {
    /// Whether another attempt may succeed: connection trouble, a timeout, a server error or rate limiting.
    pub fn is_transient(&self) -> bool {
        match self {
            OAuthError::Unreachable(_) | OAuthError::Timeout(_) => true,
            OAuthError::Rejected { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// Puts `token` into an upstream's start recipe: the environment variables [`TOKEN_ENV`] and [`TOKEN_TYPE_ENV`]
/// (replacing entries of the same name, so the token wins over a stale `config.env` value), and the placeholders
/// [`TOKEN_PLACEHOLDER`] and [`TOKEN_TYPE_PLACEHOLDER`] wherever an argument contains them. Only arguments that ask
/// for the token get it: command lines are visible to every local user in the process list, the environment is not.
pub fn inject(token: &AccessToken, env: &mut Vec<(String, String)>, args: &mut [String]) {
    for (name, value) in [(TOKEN_ENV, token.secret()), (TOKEN_TYPE_ENV, token.token_type.as_str())] {
        env.retain(|(existing, _)| existing != name);
        env.push((name.to_string(), value.to_string()));
    }
    for arg in args.iter_mut() {
        // The type first: the token is inserted last, so text inside it is never taken for a placeholder.
        if arg.contains(TOKEN_TYPE_PLACEHOLDER) {
            *arg = arg.replace(TOKEN_TYPE_PLACEHOLDER, &token.token_type);
        }
        if arg.contains(TOKEN_PLACEHOLDER) {
            *arg = arg.replace(TOKEN_PLACEHOLDER, token.secret());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_used_until_five_minutes_before_expiry_or_half_their_short_lifetime() {
        let usable = |seconds| usable_for(Duration::from_secs(seconds)).as_secs();
        assert_eq!(
            [usable(3600), usable(400), usable(360), usable(301), usable(120), usable(60)],
            [3300, 100, 60, 60, 60, 30]
        );
        assert_eq!(usable(0), 0);
    }

    #[test]
    fn debug_output_hides_the_token() {
        let token = AccessToken::new("eyJhbGciOi.secret-token".into(), "Bearer".into(), Duration::from_secs(60));
        let token = format!("{token:?}");
        assert!(token.contains("Bearer") && !token.contains("secret-token"), "{token}");
    }

    #[test]
    fn inject_sets_the_environment_and_fills_placeholders() {
        let token = AccessToken::new("tok-123".into(), "Bearer".into(), Duration::from_secs(60));
        let mut env = vec![("OAUTH_ACCESS_TOKEN".to_string(), "stale".to_string()), ("A".into(), "1".into())];
        let mut args = vec![
            "server.py".to_string(),
            "--header=Authorization: ${OAUTH_TOKEN_TYPE} ${OAUTH_ACCESS_TOKEN}".into(),
            "--token".into(),
            "${OAUTH_ACCESS_TOKEN}".into(),
            "$OAUTH_ACCESS_TOKEN".into(),
        ];
        inject(&token, &mut env, &mut args);
        assert_eq!(
            env,
            [
                ("A".to_string(), "1".to_string()),
                ("OAUTH_ACCESS_TOKEN".into(), "tok-123".into()),
                ("OAUTH_TOKEN_TYPE".into(), "Bearer".into())
            ]
        );
        assert_eq!(
            args,
            ["server.py", "--header=Authorization: Bearer tok-123", "--token", "tok-123", "$OAUTH_ACCESS_TOKEN"]
        );
    }
}
