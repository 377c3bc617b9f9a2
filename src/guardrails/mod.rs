//! Guardrails: the checks a tool call passes through on its way to an upstream and back (spec 4.1, contract 5).
//!
//! The per-call stack runs input check (and PII redaction) -> upstream call -> output check -> relevancy, adherence
//! and hallucination -> restoring redacted data. This module holds the vocabulary every provider speaks
//! ([`Violation`], [`GuardrailError`], [`Mode`]); each provider lives in its own file and turns its wire format into
//! these types, so the stage that runs them never sees a provider's protocol.

use serde::Serialize;

pub mod keyword;
pub mod moderation;
pub mod normalise;
pub mod pii;
pub mod provider;
pub mod remote;
pub mod stage;
pub mod strings;
pub mod tool_scan;

/// Compiles every built-in pattern (PII shapes, the tool scanner's rules) once, naming the first that fails. They are
/// literals, so only a build of `regex` without a feature they use can fail here: Cargo unifies the dev-dependencies'
/// features into test builds, so the tests pass while `cargo build --release` makes a binary whose first PII check
/// would panic. The gateway runs this when it starts and refuses to start with the reason.
pub fn builtin_patterns_compile() -> Result<(), String> {
    for pattern in pii::PATTERNS.iter().chain(&tool_scan::PATTERNS) {
        if let Err(e) = regex::Regex::new(pattern) {
            return Err(format!("this mcpgw build cannot compile its built-in pattern {pattern:?}: {e}"));
        }
    }
    Ok(())
}

/// Compiles one built-in pattern (a literal among those [`builtin_patterns_compile`] checks when the gateway starts).
pub(crate) fn compile_builtin(pattern: &str) -> regex::Regex {
    regex::Regex::new(pattern).expect("the built-in patterns are literals, checked when the gateway starts")
}

/// One finding of a check, as it appears in a blocked result's `violations` (contract 4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// What was found: `keyword_detector`, `pii`, `injection_attack`, a moderation category, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Who found it: `custom_keyword`, `gw`, `thirdparty_moderation`, `pii_redaction`.
    pub detector: String,
    /// A human-readable explanation; never the full offending text.
    pub message: String,
}

/// Which side of the call a text comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The arguments going to the upstream (`X-GW-Mode: prompt`, PII mode `request`).
    Prompt,
    /// The upstream's answer (`X-GW-Mode: response`, PII mode `response`).
    Response,
}

/// A provider could not give an answer. Policy checks fail closed on it (`GUARDRAIL_UNAVAILABLE`); relevancy,
/// adherence and hallucination fail open. The text never carries an API key or the checked text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardrailError {
    #[error("guardrail provider misconfigured: {0}")]
    Config(String),
    #[error("guardrail provider timed out")]
    Timeout,
    #[error("guardrail provider unreachable: {0}")]
    Unreachable(String),
    #[error("guardrail provider answered HTTP {0}")]
    Status(u16),
    #[error("guardrail provider gave an answer that could not be read: {0}")]
    BadAnswer(String),
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_built_in_patterns_compile() {
        assert_eq!(super::builtin_patterns_compile(), Ok(()));
    }
}
