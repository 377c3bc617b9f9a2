//! The guardrail provider chosen by `plugins.guardrails.provider`, built once per configuration snapshot.
//!
//! A provider answers the policy checks (input and output); only `gw` also answers relevancy, adherence,
//! hallucination and remote PII redaction. Adding a provider means one new file (its client) and one arm here.

use super::keyword::KeywordMatcher;
use super::moderation::Moderation;
use super::remote::RemoteGuardrails;
use super::{GuardrailError, Mode, Violation};
use crate::config::Snapshot;
use crate::config::per_snapshot::PerSnapshot;
use serde_json::{Map, Value};

/// The configured provider.
#[derive(Debug, Clone)]
pub enum Provider {
    /// `custom_keyword` (also the choice when no guardrail plugin is configured): the keywords of its config.
    Keyword(KeywordMatcher),
    /// `gw`: the remote guardrail API.
    Remote(RemoteGuardrails),
    /// `thirdparty_moderation`: an OpenAI-compatible moderation API.
    Moderation(Moderation),
}

/// What the stage works with: the provider, or why it could not be built (policy checks then fail closed).
pub type ProviderChoice = Result<Provider, GuardrailError>;

impl Provider {
    /// The provider of a snapshot's settings.
    pub fn from_snapshot(snapshot: &Snapshot) -> ProviderChoice {
        let timeout = snapshot.settings.timeouts.guardrail;
        let Some(plugin) = &snapshot.settings.guardrails else {
            return Ok(Provider::Keyword(KeywordMatcher::new(Vec::<String>::new())));
        };
        match plugin.provider.as_str() {
            "custom_keyword" => {
                Ok(Provider::Keyword(KeywordMatcher::new(string_list(plugin.config.get("blocked_keywords")))))
            }
            "gw" => RemoteGuardrails::new(&plugin.config, timeout).map(Provider::Remote),
            "thirdparty_moderation" => Moderation::new(&plugin.config, timeout).map(Provider::Moderation),
            other => Err(GuardrailError::Config(format!("unknown guardrail provider {other:?}"))),
        }
    }

    /// The provider's name as violations and logs write it.
    pub fn name(&self) -> &'static str {
        match self {
            Provider::Keyword(_) => "custom_keyword",
            Provider::Remote(_) => "gw",
            Provider::Moderation(_) => "thirdparty_moderation",
        }
    }

    /// A policy check of `text`: the violations that block. On input, `arguments` are the call's arguments (`text` is
    /// their JSON), which the keyword check also reads string by string.
    pub async fn check(
        &self,
        policy_name: &str,
        mode: Mode,
        text: &str,
        arguments: Option<&Map<String, Value>>,
        block: &[String],
    ) -> Result<Vec<Violation>, GuardrailError> {
        match self {
            Provider::Keyword(matcher) => Ok(matcher.check(text, arguments)),
            Provider::Remote(remote) => Ok(remote.detect(policy_name, mode, text, block).await?.violations),
            Provider::Moderation(moderation) => moderation.check(text).await,
        }
    }

    /// The remote API, when the provider is `gw`.
    pub fn remote(&self) -> Option<&RemoteGuardrails> {
        match self {
            Provider::Remote(remote) => Some(remote),
            _ => None,
        }
    }
}

/// Strings of a JSON array (other values skipped).
pub fn string_list(value: Option<&Value>) -> Vec<String> {
    value.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// The provider of the current snapshot, rebuilt when the snapshot changes.
pub type ProviderCache = PerSnapshot<ProviderChoice>;
