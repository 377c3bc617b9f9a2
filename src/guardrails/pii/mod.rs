//! Built-in PII redaction (contract 5): personal data in a tool call's arguments is swapped for placeholders such as
//! `[EMAIL_1]` before the upstream sees them, and the placeholders in the upstream's answer are swapped back before
//! the client sees it.
//!
//! How data flows: one [`PiiVault`] (`vault.rs`) lives for one tool call. Redacting a string asks `detect.rs` which
//! spans of it are PII (a regex per kind for the shape, then `checks.rs` for what a regex cannot see in a number: Luhn,
//! mod-97, SSN ranges, octets, phone digit counts), and the vault swaps each span for a placeholder, keeping the
//! original. Restoring the upstream's answer swaps the placeholders back; the originals never leave the vault.

mod checks;
mod detect;
mod vault;

pub use detect::PiiKind;
pub use vault::PiiVault;

/// This folder's patterns, for the check at start ([`crate::guardrails::builtin_patterns_compile`]).
pub(super) const PATTERNS: [&str; 7] = detect::PATTERNS;

/// Helpers shared by the detector tests of `detect.rs` and `checks.rs`: they go through a vault, so every case also
/// checks the round trip.
#[cfg(test)]
mod testing {
    use super::PiiVault;

    /// Redacts `text` in a fresh vault, checks the round trip, and returns the redacted text.
    pub(super) fn redact(text: &str) -> String {
        let mut vault = PiiVault::new();
        let redacted = vault.redact_text(text);
        assert_eq!(vault.restore_text(&redacted), text, "round trip of {text:?}");
        redacted
    }

    pub(super) fn assert_redacted_as(text: &str, placeholder: &str) {
        assert_eq!(redact(text), placeholder, "{text:?}");
    }

    pub(super) fn assert_untouched(text: &str) {
        assert_eq!(redact(text), text, "{text:?} should not be redacted");
    }
}
