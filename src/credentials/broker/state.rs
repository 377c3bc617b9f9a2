//! The broker's `state` (contract 16): what ties an authorization server's callback to the user and server a
//! connection was started for, and its PKCE verifier (RFC 7636, S256).
//!
//! The state is sealed (AES-256-GCM under the `secrets_key`, its own associated data so nothing else the key seals
//! opens as a state), so any replica that shares the key can open it, and nothing is kept until the callback comes:
//! a client that asks for a thousand connect URLs costs the gateway nothing. Inside: the user, configuration and
//! server, the verifier, an expiry 10 minutes out and a random nonce. The nonce makes it single-use: the callback
//! records it in [`UsedStates`] until the state would have expired anyway, and a second callback with it is refused.
//! The verifier never leaves the gateway in clear; the authorization server sees only its S256 challenge.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::BrokerError;
use crate::config::secrets_key::SecretsKey;

/// How long a connect URL (and the state in it) is good for.
pub const STATE_LIFETIME_SECONDS: u64 = 600;
/// The most states a replica remembers as used at once: past it, callbacks are refused until some expire (each needs
/// a state the gateway sealed, and an answer of the authorization server, so reaching it takes a flood).
const MAX_USED_STATES: usize = 65_536;
/// The longest state accepted in a URL.
const MAX_STATE_CHARS: usize = 2048;
/// The associated data of a sealed state.
const LABEL: &str = "mcpgw oauth broker state/1";

/// What a state carries.
#[derive(Clone, Serialize, Deserialize)]
pub struct State {
    #[serde(rename = "u")]
    pub user_id: String,
    #[serde(rename = "c")]
    pub config_id: String,
    #[serde(rename = "s")]
    pub server_name: String,
    /// The PKCE code verifier.
    #[serde(rename = "v")]
    pub verifier: String,
    /// Seconds since the epoch after which the state is refused.
    #[serde(rename = "e")]
    pub expires: u64,
    #[serde(rename = "n")]
    nonce: String,
}

/// Never the verifier.
impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("user_id", &self.user_id)
            .field("config_id", &self.config_id)
            .field("server_name", &self.server_name)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

impl State {
    /// A new state for (user, configuration, server), good for [`STATE_LIFETIME_SECONDS`] from `now`.
    pub fn new(user_id: &str, config_id: &str, server_name: &str, now: u64) -> Result<State, BrokerError> {
        Ok(State {
            user_id: user_id.to_string(),
            config_id: config_id.to_string(),
            server_name: server_name.to_string(),
            verifier: crate::secrets::random_token()?,
            expires: now + STATE_LIFETIME_SECONDS,
            nonce: crate::secrets::random_token()?,
        })
    }

    /// The state sealed under `key`, as it travels in URLs.
    pub fn seal(&self, key: &SecretsKey) -> Result<String, BrokerError> {
        let plain =
            zeroize::Zeroizing::new(serde_json::to_vec(self).map_err(|e| BrokerError::Internal(e.to_string()))?);
        Ok(URL_SAFE_NO_PAD.encode(crate::secrets::seal(key.current(), &plain, LABEL)?))
    }

    /// The state `text` holds, when it opens under `key` (the current key or the previous one) and has not expired.
    pub fn open(key: &SecretsKey, text: &str, now: u64) -> Result<State, BrokerError> {
        let refused = || BrokerError::BadState("the link is not one this gateway issued".into());
        if text.len() > MAX_STATE_CHARS {
            return Err(refused());
        }
        let sealed = URL_SAFE_NO_PAD.decode(text).map_err(|_| refused())?;
        let plain = key
            .candidates()
            .find_map(|candidate| crate::secrets::open(candidate, &sealed, LABEL))
            .map(zeroize::Zeroizing::new)
            .ok_or_else(refused)?;
        let state: State = serde_json::from_slice(&plain).map_err(|_| refused())?;
        if now > state.expires {
            return Err(BrokerError::BadState(
                "the link has expired (links are good for 10 minutes): call the tool again for a new one".into(),
            ));
        }
        Ok(state)
    }

    /// The PKCE code challenge (S256) of the verifier.
    pub fn challenge(&self) -> String {
        pkce_challenge(&self.verifier)
    }
}

/// The PKCE code challenge (S256, RFC 7636) of `verifier`; the console's sign-in uses it too.
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The nonces of the states a callback used, until they expire.
#[derive(Default)]
pub struct UsedStates(Mutex<HashMap<String, u64>>);

impl UsedStates {
    /// Records `state` as used; an error when it was already (a replay) or too many are remembered.
    pub fn take(&self, state: &State, now: u64) -> Result<(), BrokerError> {
        let mut used = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if used.len() >= MAX_USED_STATES {
            used.retain(|_, expires| *expires >= now);
        }
        if used.contains_key(&state.nonce) {
            return Err(BrokerError::BadState("the link was used already: call the tool again for a new one".into()));
        }
        if used.len() >= MAX_USED_STATES {
            return Err(BrokerError::Busy);
        }
        used.insert(state.nonce.clone(), state.expires);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::secrets_key::KeySource;

    fn key(text: &str) -> SecretsKey {
        SecretsKey::from_text(text, KeySource::Config)
    }

    #[test]
    fn a_state_opens_under_its_key_until_it_expires_and_only_once() {
        let key = key("state-test-key-0123456789abcdefghijklmnopqr");
        let state = State::new("u1", "c1", "gh", 1000).unwrap();
        let sealed = state.seal(&key).unwrap();
        assert!(!sealed.contains(&state.verifier));
        let opened = State::open(&key, &sealed, 1000 + STATE_LIFETIME_SECONDS).unwrap();
        assert_eq!((opened.user_id.as_str(), opened.server_name.as_str()), ("u1", "gh"));
        assert_eq!(opened.challenge(), state.challenge());
        assert!(matches!(State::open(&key, &sealed, 1001 + STATE_LIFETIME_SECONDS), Err(BrokerError::BadState(_))));
        let other = super::super::tests::other_key();
        assert!(State::open(&other, &sealed, 1000).is_err());
        assert!(State::open(&key, "garbage!", 1000).is_err());
        let used = UsedStates::default();
        used.take(&opened, 1000).unwrap();
        assert!(matches!(used.take(&opened, 1000), Err(BrokerError::BadState(why)) if why.contains("used already")));
    }

    #[test]
    fn the_challenge_is_s256_of_the_verifier() {
        // RFC 7636 appendix B.
        let state = State {
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
            ..State::new("u", "c", "s", 0).unwrap()
        };
        assert_eq!(state.challenge(), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert!(!format!("{state:?}").contains("dBjft"));
    }
}
