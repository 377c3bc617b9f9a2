//! One record's text, built by the caller before the log's lock is taken: every field but the three that only the
//! writer knows (`seq`, `prev_hash` and `timestamp`, which follow the chain and its order), in the form its hash is
//! taken of (JSON, keys sorted, no spaces: [`crate::json_strict::canonical`] of the record without `hash`). The text
//! up to `prev_hash` is hashed here too, so the writer hashes only what follows it, once it knows the previous hash.
//!
//! The line written is that same text with `"hash":"…",` in its sorted place (after `event`): the record as stored is
//! in canonical form, and [`super::verify()`] takes it apart and hashes it again the same way.
//!
//! Sorted keys, the optional ones in brackets: `args_hmac`, `config_revision`, [`count`], [`credential`],
//! `error_code`, `event`, (`hash`), `key_id`, `outcome`, [`policy_rule`], `prev_hash`, [`principal`], `project_id`,
//! `seq`, `server_name`, [`source_address`], [`suppressed`], [`target`], `timestamp`, `tool_name`, `user_id`.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::Event;
use crate::json_text::push_str;
use crate::secrets::push_hex;

/// A record but for its place in the chain.
pub(super) struct Prepared {
    /// The record's canonical text with the three chained values left out (their keys are in it).
    text: String,
    /// SHA-256 of `text` up to the value of `prev_hash`.
    head: Sha256,
    /// Where, in `text`, `"hash"` goes (in the line only), and the values of `prev_hash`, `seq` and `timestamp`.
    at_hash: usize,
    at_prev: usize,
    at_seq: usize,
    at_timestamp: usize,
}

impl Prepared {
    pub fn new(event: Event<'_>) -> Prepared {
        let mut text = String::with_capacity(512);
        text.push('{');
        string(&mut text, "args_hmac", event.args_hmac.as_deref());
        string(&mut text, "config_revision", event.config_revision.as_deref());
        if let Some(count) = event.count {
            number(&mut text, "count", count);
        }
        if let Some(credential) = event.credential {
            string(&mut text, "credential", Some(credential));
        }
        string(&mut text, "error_code", event.error_code);
        string(&mut text, "event", Some(event.event));
        let at_hash = text.len();
        string(&mut text, "key_id", event.key_id);
        string(&mut text, "outcome", event.outcome);
        if let Some(rule) = event.policy_rule {
            string(&mut text, "policy_rule", Some(rule));
        }
        text.push_str("\"prev_hash\":");
        let at_prev = text.len();
        text.push(',');
        if let Some(principal) = &event.principal {
            raw_field(&mut text, "principal", principal);
        }
        string(&mut text, "project_id", event.project_id);
        text.push_str("\"seq\":");
        let at_seq = text.len();
        text.push(',');
        string(&mut text, "server_name", event.server_name);
        if let Some(source) = event.source_address {
            key(&mut text, "source_address");
            let _ = write!(text, "\"{source}\",");
        }
        if let Some(suppressed) = event.suppressed {
            number(&mut text, "suppressed", suppressed);
        }
        if let Some(target) = &event.target {
            raw_field(&mut text, "target", target);
        }
        text.push_str("\"timestamp\":\"");
        let at_timestamp = text.len();
        text.push_str("\",");
        string(&mut text, "tool_name", event.tool_name);
        string(&mut text, "user_id", event.user_id);
        // The last field's comma closes the object instead.
        text.pop();
        text.push('}');
        let head = Sha256::new_with_prefix(&text.as_bytes()[..at_prev]);
        Prepared { text, head, at_hash, at_prev, at_seq, at_timestamp }
    }

    /// Puts the record in the chain: appends its line (with its newline) to `line` and returns its `hash` as the JSON
    /// string the next record's `prev_hash` holds. `prev` is the previous record's hash as a JSON string, `timestamp`
    /// the time of the write (digits and separators only).
    pub fn chain(&self, seq: u64, prev: &str, timestamp: &str, line: &mut Vec<u8>) -> String {
        let text = self.text.as_bytes();
        let seq = seq.to_string();
        let (before_seq, before_timestamp) = (&text[self.at_prev..self.at_seq], &text[self.at_seq..self.at_timestamp]);
        let mut hasher = self.head.clone();
        for part in [prev.as_bytes(), before_seq, seq.as_bytes(), before_timestamp, timestamp.as_bytes()] {
            hasher.update(part);
        }
        hasher.update(&text[self.at_timestamp..]);
        // The hash as a JSON string, quotes included: the next record's `prev_hash`.
        let mut hash = String::with_capacity(66);
        hash.push('"');
        push_hex(&mut hash, &hasher.finalize());
        hash.push('"');
        line.extend_from_slice(&text[..self.at_hash]);
        for part in [b"\"hash\":", hash.as_bytes(), b","] {
            line.extend_from_slice(part);
        }
        line.extend_from_slice(&text[self.at_hash..self.at_prev]);
        for part in [prev.as_bytes(), before_seq, seq.as_bytes(), before_timestamp, timestamp.as_bytes()] {
            line.extend_from_slice(part);
        }
        line.extend_from_slice(&text[self.at_timestamp..]);
        line.push(b'\n');
        hash
    }
}

/// `"key":`.
fn key(text: &mut String, key: &str) {
    text.push('"');
    text.push_str(key);
    text.push_str("\":");
}

/// `"key":"value",` escaped as serde_json (and the canonical form) escapes strings, or `"key":null,`.
fn string(text: &mut String, name: &str, value: Option<&str>) {
    key(text, name);
    match value {
        Some(value) => push_str(text, value),
        None => text.push_str("null"),
    }
    text.push(',');
}

/// `"key":value,` for a count.
fn number(text: &mut String, name: &str, value: u64) {
    key(text, name);
    let _ = write!(text, "{value}");
    text.push(',');
}

/// `"key":value,` with `value` already canonical JSON text (its objects' keys sorted: [`super::Event::target`]).
fn raw_field(text: &mut String, name: &str, value: &str) {
    key(text, name);
    text.push_str(value);
    text.push(',');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_strict::canonical;
    use serde_json::{Value, json};

    fn chained(event: Event<'_>) -> (Value, String, String) {
        let mut line = Vec::new();
        let prev = format!("\"{}\"", super::super::FIRST_PREV);
        let next = Prepared::new(event).chain(7, &prev, "2026-12-02T10:00:00.123456", &mut line);
        let text = String::from_utf8(line).unwrap();
        (crate::json_strict::parse(text.trim_end().as_bytes()).unwrap(), next, text)
    }

    #[test]
    fn the_line_is_the_canonical_record_and_its_hash_is_the_one_verify_computes() {
        let (record, next, text) = chained(Event { event: "tool_call", ..Event::default() });
        assert!(text.ends_with("}\n") && text.lines().count() == 1, "{text}");
        assert_eq!(record["seq"], json!(7));
        assert_eq!(record["prev_hash"], json!(super::super::FIRST_PREV));
        assert_eq!(record["timestamp"], json!("2026-12-02T10:00:00.123456"));
        assert_eq!(record["tool_name"], Value::Null);
        assert_eq!(next, format!("\"{}\"", record["hash"].as_str().unwrap()));
        assert_eq!(super::super::hash_of(&record), record["hash"].as_str().unwrap());
        assert_eq!(text.trim_end(), canonical(&record), "stored in canonical form");

        // Every field, with strings that need escapes and nested objects whose keys are not in order.
        let odd = "quote \" backslash \\ newline \n tab \t nul \u{0} é 日本 \u{1F600} </script>";
        let (record, next, text) = chained(Event {
            event: "tool_call",
            project_id: Some(odd),
            user_id: Some("u"),
            key_id: Some("k"),
            server_name: Some("s"),
            tool_name: Some(odd),
            args_hmac: Some("ab".repeat(32)),
            outcome: Some("success"),
            error_code: Some("E"),
            config_revision: Some("cd".repeat(32)),
            source_address: Some("2001:db8::1".parse().unwrap()),
            suppressed: Some(3),
            count: Some(u64::MAX),
            credential: Some("secret"),
            policy_rule: Some(odd),
            target: Some(canonical(&json!({"z": 1, "a": {"y": [true, null, 1.5, "x"], "b": odd}})).into()),
            principal: Some(canonical(&json!({"scopes": ["b", "a"], "auth": "api_key"})).into()),
        });
        assert_eq!(super::super::hash_of(&record), record["hash"].as_str().unwrap(), "{text}");
        assert_eq!(text.trim_end(), canonical(&record));
        assert_eq!(next, format!("\"{}\"", record["hash"].as_str().unwrap()));
        assert_eq!(record["tool_name"], json!(odd));
        assert_eq!(record["source_address"], json!("2001:db8::1"));
        assert_eq!(record["count"], json!(u64::MAX));
        assert_eq!(record["target"]["a"]["b"], json!(odd));
    }
}
