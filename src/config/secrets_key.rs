//! `secrets_key`: what each user's stored upstream credentials are sealed under (contract 16).
//!
//! The key is text (`mcpgw init` writes 32 random bytes in URL-safe base64, 43 characters) and comes from, in this
//! order: the environment variable `MCPGW_SECRETS_KEY`, the file named by `common_mcp_gateway_config.
//! secrets_key_file` (an absolute path, e.g. a mounted Kubernetes Secret), `common_mcp_gateway_config.secrets_key`.
//! It is read at every load (so a rotated Secret is picked up by the next reload) and checked like `session_secret`:
//! at least [`MIN_SECRETS_KEY_CHARS`] characters, surrounding whitespace ignored (a mounted file ends with a newline).
//! The AES-256-GCM key itself is derived from the text with HMAC-SHA256 under a label of its own, so the same text
//! used elsewhere never yields this key. `MCPGW_SECRETS_KEY_PREVIOUS`, when set, is a second key values may still be
//! sealed under during a rotation: they open with either and are sealed again under the current one on the next
//! write (or at once by `mcpgw secrets rotate-key`). Neither key is ever shown: `Debug` names only where it came from.

use std::path::PathBuf;

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::decode::Problems;
use super::model::CommonConfig;

/// The environment variable that supplies the key, ahead of the file and the configuration.
pub const SECRETS_KEY_ENV: &str = "MCPGW_SECRETS_KEY";
/// The environment variable that supplies the key values may still be sealed under during a rotation.
pub const SECRETS_KEY_PREVIOUS_ENV: &str = "MCPGW_SECRETS_KEY_PREVIOUS";
/// The shortest key accepted, in characters.
pub const MIN_SECRETS_KEY_CHARS: usize = 32;
/// The label of the derivation: a key for sealing user credentials and nothing else.
const DERIVATION_LABEL: &str = "mcpgw/1 user_credentials secrets_key";

/// Where the key in effect came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// `MCPGW_SECRETS_KEY`.
    Environment,
    /// The file named by `secrets_key_file`.
    File(PathBuf),
    /// `common_mcp_gateway_config.secrets_key`.
    Config,
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::Environment => write!(f, "the environment variable {SECRETS_KEY_ENV}"),
            KeySource::File(path) => write!(f, "the file {} (secrets_key_file)", path.display()),
            KeySource::Config => f.write_str("common_mcp_gateway_config.secrets_key"),
        }
    }
}

/// The derived AES-256-GCM keys: the current one and, during a rotation, the previous one. Wiped when dropped.
#[derive(Clone)]
pub struct SecretsKey {
    current: Zeroizing<[u8; 32]>,
    previous: Option<Zeroizing<[u8; 32]>>,
    /// Where the current key came from (for messages and for `mcpgw secrets rotate-key`).
    pub source: KeySource,
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsKey")
            .field("key", &"[redacted]")
            .field("previous", &self.previous.as_ref().map(|_| "[redacted]"))
            .field("source", &self.source)
            .finish()
    }
}

impl PartialEq for SecretsKey {
    fn eq(&self, other: &SecretsKey) -> bool {
        let same_previous = match (&self.previous, &other.previous) {
            (None, None) => true,
            (Some(a), Some(b)) => bool::from(a.ct_eq(&**b)),
            _ => false,
        };
        bool::from(self.current.ct_eq(&*other.current)) && same_previous && self.source == other.source
    }
}

impl SecretsKey {
    /// A key from its text (no length check: for keys already checked, and for tests).
    pub fn from_text(text: &str, source: KeySource) -> SecretsKey {
        SecretsKey { current: derive(text), previous: None, source }
    }

    /// The key new values are sealed under.
    pub fn current(&self) -> &[u8; 32] {
        &self.current
    }

    /// Every key a stored value may be sealed under: the current one first, then the previous one.
    pub fn candidates(&self) -> impl Iterator<Item = &[u8; 32]> {
        std::iter::once(&*self.current).chain(self.previous.as_deref())
    }

    /// Whether a previous key is set (`MCPGW_SECRETS_KEY_PREVIOUS`).
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }
}

/// The AES-256-GCM key of a key's text: HMAC-SHA256(text, label), surrounding whitespace ignored.
pub fn derive(text: &str) -> Zeroizing<[u8; 32]> {
    Zeroizing::new(crate::secrets::derive_key(text.trim().as_bytes(), DERIVATION_LABEL))
}

/// The key of `common`, the environment of this process and `secrets_key_file`; every problem recorded.
pub fn resolve(c: &CommonConfig, problems: &mut Problems) -> Option<SecretsKey> {
    let env = |name: &str| std::env::var(name).ok().map(Zeroizing::new);
    resolve_from(c, env(SECRETS_KEY_ENV), env(SECRETS_KEY_PREVIOUS_ENV), problems)
}

/// [`resolve`] with the environment given (the tests' entry).
pub fn resolve_from(
    c: &CommonConfig,
    env: Option<Zeroizing<String>>,
    env_previous: Option<Zeroizing<String>>,
    problems: &mut Problems,
) -> Option<SecretsKey> {
    let p = "common_mcp_gateway_config";
    let long_enough = |text: &str| text.trim().chars().count() >= MIN_SECRETS_KEY_CHARS;
    // Never the value in a problem: problems are shown by `check-config`, in logs and in the health report.
    let too_short = |what: &str| {
        format!("{what}: must be at least {MIN_SECRETS_KEY_CHARS} characters (`mcpgw init` writes a random one)")
    };
    // Each source is checked even when a stronger one wins, so a bad value is found before it is needed.
    if let Some(text) = c.secrets_key.as_deref()
        && !long_enough(text)
    {
        problems.push(too_short(&format!("{p}.secrets_key")));
    }
    let from_file = c.secrets_key_file.as_deref().and_then(|path| read_key_file(path, problems));
    if let Some(text) = from_file.as_deref()
        && !long_enough(text)
    {
        problems.push(too_short(&format!("{p}.secrets_key_file")));
    }
    let env = env.filter(|text| !text.trim().is_empty());
    if let Some(text) = env.as_deref()
        && !long_enough(text)
    {
        problems.push(too_short(SECRETS_KEY_ENV));
    }
    let previous = env_previous.filter(|text| !text.trim().is_empty());
    if let Some(text) = previous.as_deref()
        && !long_enough(text)
    {
        problems.push(too_short(SECRETS_KEY_PREVIOUS_ENV));
    }
    let (text, source) = match (env, from_file, c.secrets_key.as_deref()) {
        (Some(text), _, _) => (text, KeySource::Environment),
        (None, Some(text), _) => (text, KeySource::File(PathBuf::from(c.secrets_key_file.clone().unwrap_or_default()))),
        (None, None, Some(text)) => (Zeroizing::new(text.to_string()), KeySource::Config),
        (None, None, None) => {
            if previous.is_some() {
                problems.push(format!(
                    "{SECRETS_KEY_PREVIOUS_ENV} is set but there is no current key ({SECRETS_KEY_ENV}, \
                     {p}.secrets_key_file or {p}.secrets_key)"
                ));
            }
            return None;
        }
    };
    if !long_enough(&text) {
        return None;
    }
    let previous = previous.filter(|text| long_enough(text)).map(|text| derive(&text));
    Some(SecretsKey { current: derive(&text), previous, source })
}

/// The key in `path` (absolute: it is read again at every load, whatever the current directory).
fn read_key_file(path: &str, problems: &mut Problems) -> Option<Zeroizing<String>> {
    let at = "common_mcp_gateway_config.secrets_key_file";
    if !std::path::Path::new(path).is_absolute() {
        problems.push(format!("{at}: must be an absolute path, found {path:?}"));
        return None;
    }
    match std::fs::read_to_string(path) {
        Ok(text) => Some(Zeroizing::new(text)),
        Err(e) => {
            problems.push(format!("{at}: cannot read {path:?}: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const KEY_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn common(key: Option<&str>, file: Option<&str>) -> CommonConfig {
        CommonConfig {
            secrets_key: key.map(str::to_string),
            secrets_key_file: file.map(str::to_string),
            ..Default::default()
        }
    }

    fn text(s: &str) -> Option<Zeroizing<String>> {
        Some(Zeroizing::new(s.to_string()))
    }

    #[test]
    fn environment_wins_over_file_wins_over_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, format!("{KEY_B}\n")).unwrap();
        let file = path.to_str().unwrap();
        let mut problems = Problems::new();
        let from_config = resolve_from(&common(Some(KEY_A), None), None, None, &mut problems).unwrap();
        assert_eq!(from_config.source, KeySource::Config);
        assert_eq!(from_config.current(), &*derive(KEY_A));
        let from_file = resolve_from(&common(Some(KEY_A), Some(file)), None, None, &mut problems).unwrap();
        assert_eq!(from_file.source, KeySource::File(path.clone()));
        assert_eq!(from_file.current(), &*derive(KEY_B), "the file's trailing newline is not part of the key");
        let from_env = resolve_from(&common(Some(KEY_A), Some(file)), text(KEY_B), None, &mut problems).unwrap();
        assert_eq!(from_env.source, KeySource::Environment);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(resolve_from(&common(None, None), None, None, &mut problems).is_none());
    }

    #[test]
    fn short_keys_and_bad_files_are_problems_that_never_show_the_key() {
        let mut problems = Problems::new();
        let short = "short-secret-value";
        assert!(resolve_from(&common(Some(short), None), None, None, &mut problems).is_none());
        assert!(resolve_from(&common(None, Some("relative/key")), text(short), text(short), &mut problems).is_none());
        assert!(resolve_from(&common(None, Some("/nonexistent/mcpgw/key")), None, None, &mut problems).is_none());
        let all = problems.join("\n");
        for expected in [
            "common_mcp_gateway_config.secrets_key: must be at least 32 characters",
            "secrets_key_file: must be an absolute path",
            "MCPGW_SECRETS_KEY: must be at least 32",
            "MCPGW_SECRETS_KEY_PREVIOUS: must be at least 32",
            "cannot read \"/nonexistent/mcpgw/key\"",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in\n{all}");
        }
        assert!(!all.contains(short), "a key leaked into a problem: {all}");
    }

    #[test]
    fn the_previous_key_is_a_second_candidate_and_debug_shows_neither() {
        let mut problems = Problems::new();
        let key = resolve_from(&common(None, None), text(KEY_A), text(KEY_B), &mut problems).unwrap();
        let candidates: Vec<[u8; 32]> = key.candidates().copied().collect();
        assert_eq!(candidates, vec![*derive(KEY_A), *derive(KEY_B)]);
        let shown = format!("{key:?}");
        assert!(shown.contains("[redacted]") && !shown.contains(KEY_A) && !shown.contains("97, 97"), "{shown}");
        assert_ne!(derive(KEY_A).as_slice(), KEY_A.as_bytes().get(..32).unwrap(), "the key is derived, not the text");
    }
}
