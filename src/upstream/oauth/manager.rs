//! [`TokenManager`]: the token cache, one slot per [`TokenKey`]. A slot's async lock is held for a whole acquisition,
//! so concurrent callers of one key share it; the slot also remembers the last failure, whose cool-down makes later
//! calls fail fast (or keep using a token that has not expired yet) instead of hammering the issuer.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::request::{build_error, dedicated_client, request_token};
use super::{
    AccessToken, FIRST_COOL_DOWN, FIRST_RETRY_DELAY, MAX_ATTEMPTS, MAX_COOL_DOWN, MAX_RETRY_DELAY, OAuthError,
    OAuthSettings, TokenKey,
};
use crate::upstream::lock;

/// Obtains, caches and refreshes tokens; shared behind an `Arc` by everything that starts upstream servers.
pub struct TokenManager {
    request_timeout: Duration,
    /// The client for endpoints without mTLS or an extra CA, built on first use (building loads the system's roots).
    shared_client: std::sync::Mutex<Option<reqwest::Client>>,
    slots: std::sync::Mutex<HashMap<TokenKey, Arc<Slot>>>,
}

/// One key's state. The async lock is held for a whole acquisition: that is what makes concurrent callers share it.
#[derive(Default)]
struct Slot {
    state: tokio::sync::Mutex<SlotState>,
    /// Counts successful acquisitions, so a forced refresh that waited for another one can take its result.
    generation: AtomicU64,
}

#[derive(Default)]
struct SlotState {
    cached: Option<(Arc<AccessToken>, OAuthSettings)>,
    failure: Option<Failure>,
}

/// The last failed acquisition; it only holds back calls with the same settings.
struct Failure {
    settings: OAuthSettings,
    error: OAuthError,
    consecutive: u32,
    until: Instant,
}

impl TokenManager {
    /// A manager whose token requests each time out after `request_timeout`.
    pub fn new(request_timeout: Duration) -> TokenManager {
        TokenManager {
            request_timeout,
            shared_client: std::sync::Mutex::new(None),
            slots: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The token for `key`: the cached one until its refresh time (unless `settings` changed), else a new one. When
    /// the refresh fails but the cached token has not expired yet, the cached one is returned: the buffer exists to
    /// ride out an issuer outage.
    pub async fn token(&self, key: &TokenKey, settings: &OAuthSettings) -> Result<Arc<AccessToken>, OAuthError> {
        self.token_noting_acquisition(key, settings).await.map(|(token, _)| token)
    }

    /// [`Self::token`], and whether this call obtained it from the issuer (rather than from the cache): a token
    /// obtained for a request that the server then refuses would not be bettered by another one (contract 14).
    pub async fn token_noting_acquisition(
        &self,
        key: &TokenKey,
        settings: &OAuthSettings,
    ) -> Result<(Arc<AccessToken>, bool), OAuthError> {
        let slot = self.slot(key);
        let mut state = slot.state.lock().await;
        let now = Instant::now();
        let still_valid = match &state.cached {
            Some((token, obtained_with)) if obtained_with == settings => {
                if now < token.refresh_at {
                    return Ok((Arc::clone(token), false));
                }
                (now < token.expires_at).then(|| Arc::clone(token))
            }
            _ => None,
        };
        if let Some(failure) = state.failure.as_ref().filter(|f| f.settings == *settings && now < f.until) {
            return still_valid.map(|token| (token, false)).ok_or_else(|| OAuthError::CoolingDown {
                retry_after: failure.until - now,
                last: Box::new(failure.error.clone()),
            });
        }
        match self.acquire_into(&slot, &mut state, key, settings).await {
            Err(error) => still_valid.map(|token| (token, false)).ok_or(error),
            Ok(token) => Ok((token, true)),
        }
    }

    /// A new token for `key`, whatever the cache holds and ignoring the cool-down: for when the upstream rejected the
    /// cached one. Forced refreshes that arrive while one is running share its result.
    pub async fn refresh(&self, key: &TokenKey, settings: &OAuthSettings) -> Result<Arc<AccessToken>, OAuthError> {
        let slot = self.slot(key);
        let generation = slot.generation.load(Ordering::Acquire);
        let mut state = slot.state.lock().await;
        if slot.generation.load(Ordering::Acquire) != generation
            && let Some((token, obtained_with)) = &state.cached
            && obtained_with == settings
        {
            return Ok(Arc::clone(token));
        }
        self.acquire_into(&slot, &mut state, key, settings).await
    }

    /// Forgets `key`'s token and failure state (an acquisition running right now still completes for its callers).
    pub fn invalidate(&self, key: &TokenKey) {
        lock(&self.slots).remove(key);
    }

    /// Forgets every token.
    pub fn clear(&self) {
        lock(&self.slots).clear();
    }

    fn slot(&self, key: &TokenKey) -> Arc<Slot> {
        Arc::clone(lock(&self.slots).entry(key.clone()).or_default())
    }

    /// Acquires a token and records the outcome in the slot: the token, or the failure and its cool-down.
    async fn acquire_into(
        &self,
        slot: &Slot,
        state: &mut SlotState,
        key: &TokenKey,
        settings: &OAuthSettings,
    ) -> Result<Arc<AccessToken>, OAuthError> {
        match self.acquire(key, settings).await {
            Ok(token) => {
                let token = Arc::new(token);
                state.cached = Some((Arc::clone(&token), settings.clone()));
                state.failure = None;
                slot.generation.fetch_add(1, Ordering::AcqRel);
                Ok(token)
            }
            Err(error) => {
                let consecutive = match &state.failure {
                    Some(previous) if previous.settings == *settings => previous.consecutive.saturating_add(1),
                    _ => 1,
                };
                let cool_down = FIRST_COOL_DOWN.saturating_mul(1 << (consecutive - 1).min(16)).min(MAX_COOL_DOWN);
                tracing::warn!(server_name = %key.server_name, project_id = %key.project_id, %error,
                    cool_down_seconds = cool_down.as_secs(), "OAuth token acquisition failed");
                let until = Instant::now() + cool_down;
                state.failure = Some(Failure { settings: settings.clone(), error: error.clone(), consecutive, until });
                Err(error)
            }
        }
    }

    /// Up to [`MAX_ATTEMPTS`] token requests, with exponential backoff between transient failures.
    async fn acquire(&self, key: &TokenKey, settings: &OAuthSettings) -> Result<AccessToken, OAuthError> {
        let client = self.client_for(settings).await?;
        let mut delay = FIRST_RETRY_DELAY;
        let mut attempt = 1;
        loop {
            match request_token(&client, settings, self.request_timeout).await {
                Ok(token) => {
                    tracing::info!(server_name = %key.server_name, project_id = %key.project_id, attempt,
                        lifetime_seconds = (token.expires_at - Instant::now()).as_secs(), "OAuth token obtained");
                    return Ok(token);
                }
                Err(error) if error.is_transient() && attempt < MAX_ATTEMPTS => {
                    tracing::debug!(server_name = %key.server_name, attempt, %error, "OAuth token request failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RETRY_DELAY);
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The HTTP client for `settings`: the shared one, or a dedicated one when the endpoint needs a client certificate
    /// or extra trust roots.
    async fn client_for(&self, settings: &OAuthSettings) -> Result<reqwest::Client, OAuthError> {
        if settings.mtls.is_some() || settings.ca_bundle_path.is_some() {
            return dedicated_client(settings, self.request_timeout).await;
        }
        let mut shared = lock(&self.shared_client);
        if let Some(client) = shared.as_ref() {
            return Ok(client.clone());
        }
        let client = crate::outbound::client(self.request_timeout).map_err(build_error)?;
        Ok(shared.insert(client).clone())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::upstream::oauth::test_support::{Issuer, SECRET, config, key, manager, settings};

    #[tokio::test]
    async fn a_cached_token_is_reused() {
        let (issuer, url) = Issuer::default().start().await;
        let (manager, settings) = (manager(), settings(&url));
        let first = manager.token(&key("p1"), &settings).await.unwrap();
        let second = manager.token(&key("p1"), &settings).await.unwrap();
        assert_eq!((first.secret(), second.secret()), ("token-1", "token-1"));
        assert_eq!(issuer.count(), 1);
    }

    #[tokio::test]
    async fn a_token_is_replaced_five_minutes_before_it_expires() {
        let (issuer, url) = Issuer::default().start().await;
        issuer.then(200, json!({"access_token": "short", "expires_in": 400}));
        let (manager, settings) = (manager(), settings(&url));
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "short");
        // The clock only runs paused between requests, so the network never sees a jump in time.
        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(99)).await;
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "short");
        assert_eq!(issuer.count(), 1);
        tokio::time::advance(Duration::from_secs(2)).await;
        tokio::time::resume();
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "token-2");
        assert_eq!(issuer.count(), 2);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_the_token_that_has_not_expired_yet() {
        let (issuer, url) = Issuer::default().start().await;
        issuer.then(200, json!({"access_token": "short", "expires_in": 400}));
        let (manager, settings) = (manager(), settings(&url));
        manager.token(&key("p1"), &settings).await.unwrap();
        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(150)).await;
        tokio::time::resume();
        issuer.then(400, json!({"error": "invalid_request"}));
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "short");
        assert_eq!(issuer.count(), 2);
        // Within the cool-down the old token is still the answer, without asking the issuer.
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "short");
        assert_eq!(issuer.count(), 2);
        // Once it has expired, the failure is.
        tokio::time::pause();
        tokio::time::advance(Duration::from_secs(300)).await;
        tokio::time::resume();
        issuer.then(400, json!({"error": "invalid_request"}));
        let error = manager.token(&key("p1"), &settings).await.unwrap_err();
        assert!(matches!(error, OAuthError::Rejected { status: 400, .. }), "{error}");
        assert_eq!(issuer.count(), 3);
    }

    #[tokio::test]
    async fn a_forced_refresh_bypasses_the_cache() {
        let (issuer, url) = Issuer::default().start().await;
        let (manager, settings) = (manager(), settings(&url));
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "token-1");
        assert_eq!(manager.refresh(&key("p1"), &settings).await.unwrap().secret(), "token-2");
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "token-2");
        assert_eq!(issuer.count(), 2);
    }

    #[tokio::test]
    async fn each_server_config_and_project_has_its_own_token() {
        let (issuer, url) = Issuer::default().start().await;
        let (manager, settings) = (manager(), settings(&url));
        let keys =
            [key("p1"), key("p2"), TokenKey::new("weather", "config-2", "p1"), TokenKey::new("maps", "config-1", "p1")];
        for key in &keys {
            manager.token(key, &settings).await.unwrap();
        }
        let again: Vec<String> = {
            let mut tokens = Vec::new();
            for key in &keys {
                tokens.push(manager.token(key, &settings).await.unwrap().secret().to_string());
            }
            tokens
        };
        assert_eq!(again, ["token-1", "token-2", "token-3", "token-4"]);
        assert_eq!(issuer.count(), 4);
    }

    #[tokio::test]
    async fn changed_settings_get_a_new_token_and_invalidate_forgets_one() {
        let (issuer, url) = Issuer::default().start().await;
        let (manager, settings) = (manager(), settings(&url));
        manager.token(&key("p1"), &settings).await.unwrap();
        let mut config = config(&url);
        config["OAUTH_SCOPE"] = json!("read");
        let narrower = OAuthSettings::from_json(&config).unwrap().unwrap();
        assert_ne!(settings, narrower);
        assert_eq!(manager.token(&key("p1"), &narrower).await.unwrap().secret(), "token-2");
        manager.invalidate(&key("p1"));
        assert_eq!(manager.token(&key("p1"), &narrower).await.unwrap().secret(), "token-3");
        manager.clear();
        assert_eq!(manager.token(&key("p1"), &narrower).await.unwrap().secret(), "token-4");
        assert_eq!(issuer.form(3)["scope"], "read");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_share_one_acquisition() {
        let (issuer, url) = Issuer { delay: Duration::from_millis(200), ..Issuer::default() }.start().await;
        let (manager, settings) = (Arc::new(manager()), settings(&url));
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (manager, settings) = (Arc::clone(&manager), settings.clone());
            callers.spawn(async move { manager.token(&key("p1"), &settings).await.map(|t| t.secret().to_string()) });
        }
        let tokens = callers.join_all().await;
        assert!(tokens.iter().all(|token| token.as_deref() == Ok("token-1")), "{tokens:?}");
        assert_eq!(issuer.count(), 1);
        // Forced refreshes that queue behind one another take the one that ran while they waited.
        let mut refreshers = tokio::task::JoinSet::new();
        for _ in 0..5 {
            let (manager, settings) = (Arc::clone(&manager), settings.clone());
            refreshers
                .spawn(async move { manager.refresh(&key("p1"), &settings).await.map(|t| t.secret().to_string()) });
        }
        let refreshed = refreshers.join_all().await;
        assert!(refreshed.iter().all(|token| token.as_deref() == Ok("token-2")), "{refreshed:?}");
        assert_eq!(issuer.count(), 2);
    }

    #[tokio::test]
    async fn transient_failures_are_retried_with_backoff() {
        let (issuer, url) = Issuer::default().start().await;
        issuer.then(503, json!({})).then(429, json!({"error": "slow_down"}));
        let started = std::time::Instant::now();
        let token = manager().token(&key("p1"), &settings(&url)).await.unwrap();
        assert_eq!((token.secret(), issuer.count()), ("token-3", 3));
        // 250 ms, then 500 ms.
        assert!(started.elapsed() >= Duration::from_millis(750), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn an_acquisition_gives_up_after_four_attempts() {
        let (issuer, url) = Issuer::default().start().await;
        for _ in 0..5 {
            issuer.then(500, json!({"error": "server_error"}));
        }
        let error = manager().token(&key("p1"), &settings(&url)).await.unwrap_err();
        assert_eq!(error, OAuthError::Rejected { status: 500, error: Some("server_error".into()) });
        assert_eq!(issuer.count(), MAX_ATTEMPTS as usize);
    }

    #[tokio::test]
    async fn invalid_client_is_not_retried_and_the_error_hides_the_secret() {
        let (issuer, url) = Issuer::default().start().await;
        issuer.then(401, json!({"error": "invalid_client", "error_description": format!("bad secret {SECRET}")}));
        let error = manager().token(&key("p1"), &settings(&url)).await.unwrap_err();
        assert_eq!(error, OAuthError::Rejected { status: 401, error: Some("invalid_client".into()) });
        assert!(!error.is_transient());
        assert_eq!(issuer.count(), 1);
        let text = format!("{error} {error:?}");
        assert!(text.contains("401") && text.contains("invalid_client") && !text.contains(SECRET), "{text}");
    }

    #[tokio::test]
    async fn after_a_failure_calls_fail_fast_until_the_growing_cool_down_ends() {
        let (issuer, url) = Issuer::default().start().await;
        let (manager, settings) = (manager(), settings(&url));
        issuer.then(400, json!({"error": "invalid_scope"})).then(400, json!({"error": "invalid_scope"}));
        let first = manager.token(&key("p1"), &settings).await.unwrap_err();
        let OAuthError::CoolingDown { last, retry_after } = manager.token(&key("p1"), &settings).await.unwrap_err()
        else {
            panic!("not cooling down")
        };
        assert_eq!((*last, retry_after <= FIRST_COOL_DOWN), (first, true));
        assert_eq!(issuer.count(), 1);
        // A forced refresh asks anyway; its failure doubles the cool-down.
        assert!(matches!(manager.refresh(&key("p1"), &settings).await, Err(OAuthError::Rejected { status: 400, .. })));
        assert_eq!(issuer.count(), 2);
        tokio::time::pause();
        tokio::time::advance(FIRST_COOL_DOWN + Duration::from_secs(1)).await;
        assert!(matches!(manager.token(&key("p1"), &settings).await, Err(OAuthError::CoolingDown { .. })));
        tokio::time::advance(FIRST_COOL_DOWN).await;
        tokio::time::resume();
        assert_eq!(manager.token(&key("p1"), &settings).await.unwrap().secret(), "token-3");
        // Success ends the cool-down state altogether.
        assert_eq!(manager.refresh(&key("p1"), &settings).await.unwrap().secret(), "token-4");
    }
}
