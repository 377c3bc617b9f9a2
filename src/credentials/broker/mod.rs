//! The broker of each user's own upstream tokens (contract 16): kinds `oauth` and `token_exchange` of a `per_user`
//! server entry.
//!
//! Kind `oauth`, an OAuth 2.1 authorization-code client with PKCE acting for each user:
//! 1. A call of the server by a user without a token asks [`Broker::connect_url`] for the URL to hand back with
//!    `CREDENTIALS_REQUIRED`: `{public_url}/oauth/connect/{state}`, the state sealed (`state.rs`).
//! 2. The user's browser opens it; [`Broker::authorization_redirect`] sends it straight on to the authorization
//!    server with `response_type=code`, `client_id`, `redirect_uri` (`{public_url}/oauth/callback`), `scope`,
//!    `state`, the S256 `code_challenge` and, when configured, `resource` (RFC 8707).
//! 3. The authorization server sends the browser back to the callback; [`Broker::callback`] opens the state (the
//!    user and server it names are the only ones the token will be stored for), uses it up, checks `iss` (RFC 9207)
//!    against the expected issuer (the entry's `issuer`, else the RFC 8414 metadata's), redeems the code with the
//!    verifier and stores the tokens sealed (`tokens.rs`).
//! 4. Each later call gets the token from [`Broker::access_token`], refreshed (one refresh per slot at a time) once
//!    it is within [`REFRESH_MARGIN`] of its expiry; a refused refresh removes it, and the next call asks again.
//! 5. [`Broker::revoke`] calls the revocation endpoint (RFC 7009) before an admin's `DELETE` removes the tokens.
//!
//! Kind `token_exchange` ([`Broker::exchange`]): the token of a client authenticated by OAuth (contract 10) is
//! exchanged (RFC 8693) for one meant for the upstream, cached per (user, server) in memory until [`REFRESH_MARGIN`]
//! before it expires. The client's own token is only ever sent to the configured token endpoint.
//!
//! No token, code, verifier or client secret is ever logged or put in an error; the answers of the token endpoint are
//! read by `outbound/token_endpoint.rs`.

pub mod metadata;
pub mod state;
pub mod tokens;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::model::{ServerCredentials, ServerEntry};
use crate::config::server_credentials::{OAUTH, TOKEN_EXCHANGE};
use crate::config::{ConfigStore, Snapshot, WriteError};
use crate::credentials::SecretValue;
use crate::outbound::token_endpoint::{self, TokenAnswer, TokenEndpointError};
use crate::secrets::RandomError;
use state::{State, UsedStates};
pub use tokens::SlotKey;

/// How long before its expiry a token is refreshed (or an exchanged one exchanged again).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// The path of the connect route on the gateway listener; the state follows.
pub const CONNECT_PATH: &str = "/oauth/connect/";
/// The path of the callback route on the gateway listener.
pub const CALLBACK_PATH: &str = "/oauth/callback";
/// The most exchanged tokens kept at once; past it, expired ones are dropped, then the cache is cleared.
const MAX_EXCHANGED: usize = 100_000;
/// The most refresh locks kept at once (one per slot being refreshed; pruned when unused).
const MAX_REFRESH_LOCKS: usize = 10_000;
const TOKEN_SUBJECT_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// Why the broker could not do what was asked. Messages never hold a token, code, verifier or secret.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A `state` that does not open, has expired, or was used already.
    #[error("{0}")]
    BadState(String),
    /// Too many callbacks in flight to remember more used states.
    #[error("too many connections are being completed at once; try again in a few minutes")]
    Busy,
    /// The authorization server (or the user) refused: its `error` code.
    #[error("the authorization server did not grant access ({0})")]
    Denied(String),
    /// The `iss` of the answer is not the expected issuer (RFC 9207), or is missing where the issuer sends it.
    #[error("{0}")]
    Issuer(String),
    /// The token endpoint failed or refused.
    #[error(transparent)]
    Endpoint(#[from] TokenEndpointError),
    /// The server is not (or no longer) configured for this, or the gateway lacks `public_url` or `secrets_key`.
    #[error("{0}")]
    NotConfigured(String),
    /// Storing the tokens failed.
    #[error("the tokens could not be stored: {0}")]
    Store(String),
    #[error(transparent)]
    Random(#[from] RandomError),
    #[error("{0}")]
    Internal(String),
}

impl From<WriteError> for BrokerError {
    fn from(error: WriteError) -> BrokerError {
        BrokerError::Store(error.to_string())
    }
}

/// Who a connection was completed for.
#[derive(Debug, Clone)]
pub struct Connected {
    pub user_id: String,
    pub config_id: String,
    pub server_name: String,
}

/// An exchanged token and until when it is handed out.
struct Exchanged {
    token: SecretValue,
    until: Instant,
}

/// The broker; one per process, shared by the gateway's calls, its OAuth routes and the admin API.
pub struct Broker {
    /// Built at the first request (building one can fail; a context cannot).
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
    timeout: Duration,
    used: UsedStates,
    metadata: metadata::MetadataCache,
    refreshing: Mutex<HashMap<SlotKey, Arc<tokio::sync::Mutex<()>>>>,
    exchanged: Mutex<HashMap<SlotKey, Exchanged>>,
    /// `mcpgw_user_credential_events_total`.
    metrics: Arc<crate::telemetry::metrics::Metrics>,
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// RFC 9207: an `iss` sent must be `expected`; one missing is refused when the issuer's metadata says it sends it
/// (`sent`). Without an expected issuer there is nothing to check.
pub fn check_iss(iss: Option<&str>, expected: Option<&str>, sent: bool) -> Result<(), BrokerError> {
    match (iss, expected) {
        (Some(iss), Some(expected)) if iss == expected => Ok(()),
        (Some(iss), Some(expected)) => Err(BrokerError::Issuer(format!(
            "the answer comes from issuer {:?}, not the expected {expected:?} (RFC 9207): refused",
            token_endpoint::error_code(iss)
        ))),
        (None, _) if sent => Err(BrokerError::Issuer(
            "the answer has no iss, which the authorization server's metadata says it sends (RFC 9207): refused".into(),
        )),
        _ => Ok(()),
    }
}

/// The `credentials` of `entry` when it is of kind `kind`.
fn settings_of<'e>(entry: &'e ServerEntry, kind: &str) -> Result<&'e ServerCredentials, BrokerError> {
    let credentials = entry.credentials.as_ref().filter(|_| entry.credential_kind() == kind);
    credentials.ok_or_else(|| {
        BrokerError::NotConfigured(format!("server {:?} does not take credentials of kind {kind:?}", entry.server_name))
    })
}

/// The server entry `slot` names in `snapshot`.
fn entry_of<'s>(snapshot: &'s Snapshot, slot: &SlotKey) -> Result<&'s ServerEntry, BrokerError> {
    let config = snapshot.file.mcp_configs.get(&slot.config_id);
    config.and_then(|c| c.mcp_config.iter().find(|e| e.server_name == slot.server_name)).ok_or_else(|| {
        BrokerError::NotConfigured(format!("server {:?} is no longer in the configuration", slot.server_name))
    })
}

/// The client's authentication fields (client_secret_post: GitHub's way, accepted by Keycloak, Okta, Auth0 and
/// Entra ID alike).
fn client_fields<'c>(credentials: &'c ServerCredentials, form: &mut Vec<(&'static str, &'c str)>) {
    form.push(("client_id", credentials.client_id.as_deref().unwrap_or_default()));
    if let Some(secret) = credentials.client_secret.as_deref() {
        form.push(("client_secret", secret));
    }
    if let Some(resource) = credentials.resource.as_deref() {
        form.push(("resource", resource));
    }
}

fn token_url(credentials: &ServerCredentials) -> &str {
    credentials.token_url.as_deref().unwrap_or_default()
}

impl Broker {
    /// A broker whose requests to authorization servers take at most `timeout` each.
    pub fn new(timeout: Duration, metrics: Arc<crate::telemetry::metrics::Metrics>) -> Broker {
        Broker {
            metrics,
            client: std::sync::OnceLock::new(),
            timeout,
            used: UsedStates::default(),
            metadata: metadata::MetadataCache::default(),
            refreshing: Mutex::default(),
            exchanged: Mutex::default(),
        }
    }

    /// The HTTP client for authorization servers.
    pub fn http(&self) -> Result<&reqwest::Client, BrokerError> {
        let built = self.client.get_or_init(|| {
            crate::outbound::client(self.timeout).map_err(|e| format!("HTTP client: {}", crate::outbound::describe(e)))
        });
        built.as_ref().map_err(|why| BrokerError::Internal(why.clone()))
    }

    /// The URL that connects `slot`'s user to its server (kind `oauth`): `{public_url}/oauth/connect/{state}`.
    pub fn connect_url(&self, snapshot: &Snapshot, slot: &SlotKey) -> Result<String, BrokerError> {
        let (key, base) = broker_settings(snapshot)?;
        settings_of(entry_of(snapshot, slot)?, OAUTH)?;
        let state = State::new(&slot.user_id, &slot.config_id, &slot.server_name, unix_now())?;
        Ok(format!("{base}{CONNECT_PATH}{}", state.seal(key)?))
    }

    /// Where the connect route sends the browser: the authorization server's authorization endpoint with the
    /// request of `state_text`'s connection.
    pub fn authorization_redirect(&self, snapshot: &Snapshot, state_text: &str) -> Result<String, BrokerError> {
        let (key, base) = broker_settings(snapshot)?;
        let state = State::open(key, state_text, unix_now())?;
        let slot = slot_of(&state);
        let credentials = settings_of(entry_of(snapshot, &slot)?, OAUTH)?;
        let mut url = reqwest::Url::parse(credentials.authorization_url.as_deref().unwrap_or_default())
            .map_err(|e| BrokerError::NotConfigured(format!("authorization_url: {e}")))?;
        let scope = credentials.scopes.as_deref().unwrap_or_default().join(" ");
        let redirect_uri = format!("{base}{CALLBACK_PATH}");
        let challenge = state.challenge();
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", credentials.client_id.as_deref().unwrap_or_default())
                .append_pair("redirect_uri", &redirect_uri)
                .append_pair("state", state_text)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256");
            if !scope.is_empty() {
                query.append_pair("scope", &scope);
            }
            if let Some(resource) = credentials.resource.as_deref() {
                query.append_pair("resource", resource);
            }
        }
        Ok(url.into())
    }

    /// Completes a connection from the callback's query parameters: checks the state and `iss`, redeems the code
    /// and stores the tokens for the state's user and server.
    pub async fn callback(
        &self,
        store: &Arc<ConfigStore>,
        params: &HashMap<String, String>,
    ) -> Result<Connected, BrokerError> {
        let outcome = self.complete(store, params).await;
        let event = if outcome.is_ok() { "connected" } else { "connect_refused" };
        self.metrics.user_credential_event(OAUTH, event);
        outcome
    }

    async fn complete(
        &self,
        store: &Arc<ConfigStore>,
        params: &HashMap<String, String>,
    ) -> Result<Connected, BrokerError> {
        let snapshot = store.snapshot();
        let (key, base) = broker_settings(&snapshot)?;
        let state_text = params.get("state").ok_or_else(|| BrokerError::BadState("the answer has no state".into()))?;
        let now = unix_now();
        let state = State::open(key, state_text, now)?;
        self.used.take(&state, now)?;
        let slot = slot_of(&state);
        let credentials = settings_of(entry_of(&snapshot, &slot)?, OAUTH)?;
        if let Some(error) = params.get("error") {
            return Err(BrokerError::Denied(token_endpoint::error_code(error)));
        }
        self.check_issuer(credentials, params.get("iss").map(String::as_str)).await?;
        let code = params.get("code").filter(|code| !code.is_empty());
        let code = code.ok_or_else(|| BrokerError::Denied("the answer has no code".into()))?;
        let redirect_uri = format!("{base}{CALLBACK_PATH}");
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", redirect_uri.as_str()),
            ("code_verifier", state.verifier.as_str()),
        ];
        client_fields(credentials, &mut form);
        let answer = token_endpoint::request(self.http()?, token_url(credentials), &form, self.timeout).await?;
        tokens::write(store, &slot, &answer, None).await?;
        tracing::info!(user_id = %slot.user_id, mcp_config_id = %slot.config_id, server_name = %slot.server_name,
            "a user connected their account for a server (OAuth broker)");
        Ok(Connected { user_id: slot.user_id, config_id: slot.config_id, server_name: slot.server_name })
    }

    /// RFC 9207: an `iss` sent must be the expected issuer; one missing is refused when the issuer's metadata says it
    /// sends it. The expected issuer is the entry's `issuer`, else the metadata's; without either, nothing to check.
    async fn check_issuer(&self, credentials: &ServerCredentials, iss: Option<&str>) -> Result<(), BrokerError> {
        let authorization_url = credentials.authorization_url.as_deref().unwrap_or_default();
        let found = self.metadata.get(self.http()?, authorization_url).await;
        let expected = credentials.issuer.as_deref().or(found.as_ref().and_then(|m| m.issuer.as_deref()));
        check_iss(iss, expected, found.as_ref().is_some_and(|m| m.iss_parameter_supported))
    }

    /// The RFC 8414 (or OpenID) metadata of `issuer`, cached as the broker's own (the console's sign-in).
    pub async fn issuer_metadata(&self, issuer: &str) -> Result<Arc<metadata::Metadata>, BrokerError> {
        let found = self.metadata.of_issuer(self.http()?, issuer).await;
        found.ok_or_else(|| {
            BrokerError::NotConfigured(format!(
                "the issuer {issuer:?} publishes no metadata (.well-known/oauth-authorization-server or \
                 openid-configuration) naming itself"
            ))
        })
    }

    /// The broker's timeout for one request to an authorization server.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `slot`'s access token for its `entry` (kind `oauth`), refreshed first when it is within [`REFRESH_MARGIN`]
    /// of its expiry; `Ok(None)` when the user has none (or its refresh was refused: the tokens are then removed).
    pub async fn access_token(
        &self,
        store: &Arc<ConfigStore>,
        snapshot: &Snapshot,
        slot: &SlotKey,
        entry: &ServerEntry,
    ) -> Result<Option<SecretValue>, BrokerError> {
        let Some(stored) = tokens::read(snapshot, slot) else { return Ok(None) };
        if !due(&stored) {
            return Ok(Some(stored.access));
        }
        let credentials = settings_of(entry, OAUTH)?;
        let lock = self.refresh_lock(slot);
        let _refreshing = lock.lock().await;
        // Another call (or replica) may have refreshed while this one waited.
        let Some(stored) = tokens::read(&store.snapshot(), slot) else { return Ok(None) };
        if !due(&stored) {
            return Ok(Some(stored.access));
        }
        let expired = stored.expires_at.is_some_and(|at| at <= chrono::Utc::now());
        let Some(refresh) = &stored.refresh else {
            // Nothing to refresh with: usable until it expires, then the user connects again.
            return Ok((!expired).then_some(stored.access));
        };
        let mut form = vec![("grant_type", "refresh_token"), ("refresh_token", refresh.expose())];
        client_fields(credentials, &mut form);
        match token_endpoint::request(self.http()?, token_url(credentials), &form, self.timeout).await {
            Ok(answer) => {
                tokens::write(store, slot, &answer, Some(refresh)).await?;
                self.metrics.user_credential_event(OAUTH, "refreshed");
                tracing::info!(user_id = %slot.user_id, server_name = %slot.server_name,
                    "a user's upstream token was refreshed (OAuth broker)");
                Ok(Some(SecretValue::from(answer.access_token)))
            }
            Err(TokenEndpointError::Rejected { status, error }) if status < 500 && status != 429 => {
                tracing::info!(user_id = %slot.user_id, server_name = %slot.server_name, status,
                    error = error.as_deref().unwrap_or_default(),
                    "the authorization server refused to refresh a user's token: the user connects again");
                self.metrics.user_credential_event(OAUTH, "refresh_refused");
                tokens::remove(store, slot).await?;
                Ok(None)
            }
            // A passing failure: the token is used while it lasts.
            Err(failure) if !expired => {
                tracing::warn!(server_name = %slot.server_name, error = %failure,
                    "a user's upstream token could not be refreshed yet; the current one is used while it lasts");
                Ok(Some(stored.access))
            }
            Err(failure) => Err(failure.into()),
        }
    }

    fn refresh_lock(&self, slot: &SlotKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.refreshing.lock().unwrap_or_else(PoisonError::into_inner);
        if locks.len() >= MAX_REFRESH_LOCKS {
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        Arc::clone(locks.entry(slot.clone()).or_default())
    }

    /// Revokes `slot`'s tokens at the authorization server (RFC 7009: the refresh token, which takes its access
    /// tokens with it, else the access token), when it has a revocation endpoint (the entry's `revocation_url`,
    /// else the RFC 8414 metadata's). `Ok(false)`: nothing to revoke, or no endpoint. The caller removes the tokens
    /// whatever this answers.
    pub async fn revoke(&self, snapshot: &Snapshot, slot: &SlotKey) -> Result<bool, BrokerError> {
        let Some(stored) = tokens::read(snapshot, slot) else { return Ok(false) };
        let credentials = settings_of(entry_of(snapshot, slot)?, OAUTH)?;
        let authorization_url = credentials.authorization_url.as_deref().unwrap_or_default();
        let endpoint = match &credentials.revocation_url {
            Some(url) => Some(url.clone()),
            None => {
                self.metadata.get(self.http()?, authorization_url).await.and_then(|m| m.revocation_endpoint.clone())
            }
        };
        let Some(endpoint) = endpoint else { return Ok(false) };
        let (token, hint) = match &stored.refresh {
            Some(refresh) => (refresh.expose(), tokens::REFRESH),
            None => (stored.access.expose(), tokens::ACCESS),
        };
        let mut form = vec![("token", token), ("token_type_hint", hint)];
        client_fields(credentials, &mut form);
        form.retain(|(name, _)| *name != "resource");
        let sent = self.http()?.post(&endpoint).form(&form).send().await;
        let status = sent
            .map_err(|e| BrokerError::Endpoint(TokenEndpointError::Unreachable(crate::outbound::describe(e))))?
            .status();
        if !status.is_success() {
            return Err(BrokerError::Endpoint(TokenEndpointError::Rejected { status: status.as_u16(), error: None }));
        }
        Ok(true)
    }

    /// A token for `entry` (kind `token_exchange`) in exchange for the client's own `subject` token (RFC 8693),
    /// cached per `slot` until [`REFRESH_MARGIN`] before it expires.
    pub async fn exchange(
        &self,
        slot: &SlotKey,
        entry: &ServerEntry,
        subject: &SecretValue,
    ) -> Result<SecretValue, BrokerError> {
        let credentials = settings_of(entry, TOKEN_EXCHANGE)?;
        let now = Instant::now();
        {
            let cached = self.exchanged.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(hit) = cached.get(slot).filter(|hit| hit.until > now) {
                return Ok(hit.token.clone());
            }
        }
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("subject_token", subject.expose()),
            ("subject_token_type", TOKEN_SUBJECT_TYPE),
            ("requested_token_type", TOKEN_SUBJECT_TYPE),
        ];
        let scope = credentials.scopes.as_deref().unwrap_or_default().join(" ");
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        if let Some(audience) = credentials.audience.as_deref() {
            form.push(("audience", audience));
        }
        client_fields(credentials, &mut form);
        let answer: TokenAnswer =
            token_endpoint::request(self.http()?, token_url(credentials), &form, self.timeout).await?;
        let token = SecretValue::from(answer.access_token);
        if let Some(keep) = answer.expires_in.and_then(|lifetime| lifetime.checked_sub(REFRESH_MARGIN)) {
            let mut cached = self.exchanged.lock().unwrap_or_else(PoisonError::into_inner);
            if cached.len() >= MAX_EXCHANGED {
                cached.retain(|_, hit| hit.until > now);
                if cached.len() >= MAX_EXCHANGED {
                    cached.clear();
                }
            }
            cached.insert(slot.clone(), Exchanged { token: token.clone(), until: now + keep });
        }
        Ok(token)
    }

    /// Forgets the exchanged tokens of `user_id` (or everyone's): the next calls exchange again.
    pub fn forget_exchanged(&self, user_id: Option<&str>) {
        let mut cached = self.exchanged.lock().unwrap_or_else(PoisonError::into_inner);
        cached.retain(|slot, _| user_id.is_some_and(|user| slot.user_id != user));
    }
}

/// Whether a stored token is due for a refresh: within [`REFRESH_MARGIN`] of its expiry, or past half its life when
/// that comes first (a token that lives less than twice the margin would otherwise be refreshed at every use).
fn due(stored: &tokens::Stored) -> bool {
    let Some(expires_at) = stored.expires_at else { return false };
    let mut margin = chrono::Duration::from_std(REFRESH_MARGIN).unwrap_or_default();
    if let Some(issued) = stored.issued_at {
        margin = margin.min((expires_at - issued) / 2);
    }
    expires_at - margin <= chrono::Utc::now()
}

fn slot_of(state: &State) -> SlotKey {
    SlotKey {
        user_id: state.user_id.clone(),
        config_id: state.config_id.clone(),
        server_name: state.server_name.clone(),
    }
}

/// The `secrets_key` states are sealed under and the `public_url` the broker's routes are reached at.
fn broker_settings(snapshot: &Snapshot) -> Result<(&crate::config::secrets_key::SecretsKey, &str), BrokerError> {
    let key = snapshot.settings.secrets_key.as_ref().ok_or_else(|| {
        BrokerError::NotConfigured("the OAuth broker needs common_mcp_gateway_config.secrets_key".into())
    })?;
    let base = snapshot.settings.public_url.as_deref().ok_or_else(|| {
        BrokerError::NotConfigured("the OAuth broker needs common_mcp_gateway_config.public_url".into())
    })?;
    Ok((key, base))
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::config::secrets_key::{KeySource, SecretsKey};

    pub(crate) fn other_key() -> SecretsKey {
        SecretsKey::from_text("another-key-0123456789abcdefghijklmnopqrstuv", KeySource::Config)
    }
}
