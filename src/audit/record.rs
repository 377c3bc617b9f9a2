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

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::Event;
use crate::secrets::hex;

/// A record but for its place in the chain.
pub(super) struct Prepared {
    /// The record's canonical text with the three chained values left out (their keys are in it).
    text: Vec<u8>,
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
        let mut text = Vec::with_capacity(512);
        text.push(b'{');
        field(&mut text, "args_hmac", &event.args_hmac);
        field(&mut text, "config_revision", &event.config_revision);
        if let Some(count) = event.count {
            field(&mut text, "count", &count);
        }
        if let Some(credential) = event.credential {
            field(&mut text, "credential", &credential);
        }
        field(&mut text, "error_code", &event.error_code);
        field(&mut text, "event", &event.event);
        let at_hash = text.len();
        field(&mut text, "key_id", &event.key_id);
        field(&mut text, "outcome", &event.outcome);
        if let Some(rule) = event.policy_rule {
            field(&mut text, "policy_rule", &rule);
        }
        text.extend_from_slice(b"\"prev_hash\":");
        let at_prev = text.len();
        text.push(b',');
        if let Some(principal) = &event.principal {
            raw_field(&mut text, "principal", principal);
        }
        field(&mut text, "project_id", &event.project_id);
        text.extend_from_slice(b"\"seq\":");
        let at_seq = text.len();
        text.push(b',');
        field(&mut text, "server_name", &event.server_name);
        if let Some(source) = event.source_address {
            field(&mut text, "source_address", &source.to_string());
        }
        if let Some(suppressed) = event.suppressed {
            field(&mut text, "suppressed", &suppressed);
        }
        if let Some(target) = &event.target {
            raw_field(&mut text, "target", target);
        }
        text.extend_from_slice(b"\"timestamp\":\"");
        let at_timestamp = text.len();
        text.extend_from_slice(b"\",");
        field(&mut text, "tool_name", &event.tool_name);
        field(&mut text, "user_id", &event.user_id);
        // The last field's comma closes the object instead.
        text.pop();
        text.push(b'}');
        let head = Sha256::new_with_prefix(&text[..at_prev]);
        Prepared { text, head, at_hash, at_prev, at_seq, at_timestamp }
    }

    /// Puts the record in the chain: appends its line (with its newline) to `line` and returns its `hash` as the JSON
    /// string the next record's `prev_hash` holds. `prev` is the previous record's hash as a JSON string, `timestamp`
    /// the time of the write (digits and separators only).
    pub fn chain(&self, seq: u64, prev: &str, timestamp: &str, line: &mut Vec<u8>) -> String {
        let text = &self.text;
        let seq = seq.to_string();
        let (before_seq, before_timestamp) = (&text[self.at_prev..self.at_seq], &text[self.at_seq..self.at_timestamp]);
        let mut hasher = self.head.clone();
        for part in [prev.as_bytes(), before_seq, seq.as_bytes(), before_timestamp, timestamp.as_bytes()] {
            hasher.update(part);
        }
        hasher.update(&text[self.at_timestamp..]);
        let hash = hex(&hasher.finalize());
        line.extend_from_slice(&text[..self.at_hash]);
        for part in [b"\"hash\":\"", hash.as_bytes(), b"\","] {
            line.extend_from_slice(part);
        }
        line.extend_from_slice(&text[self.at_hash..self.at_prev]);
        for part in [prev.as_bytes(), before_seq, seq.as_bytes(), before_timestamp, timestamp.as_bytes()] {
            line.extend_from_slice(part);
        }
        line.extend_from_slice(&text[self.at_timestamp..]);
        line.push(b'\n');
        format!("\"{hash}\"")
    }
}

/// `"key":value,` with the value as serde_json writes it (the escapes `canonical` uses).
fn field(text: &mut Vec<u8>, key: &str, value: &impl Serialize) {
    text.push(b'"');
    text.extend_from_slice(key.as_bytes());
    text.extend_from_slice(b"\":");
    // Writing a string, a number or null into a Vec cannot fail; `null` keeps the text JSON if it ever did.
    if serde_json::to_writer(&mut *text, value).is_err() {
        text.extend_from_slice(b"null");
    }
    text.push(b',');
}

/// `"key":value,` with `value` already canonical JSON text (its objects' keys sorted: [`super::Event::target`]).
fn raw_field(text: &mut Vec<u8>, key: &str, value: &str) {
    text.push(b'"');
    text.extend_from_slice(key.as_bytes());
    text.extend_from_slice(b"\":");
    text.extend_from_slice(value.as_bytes());
    text.push(b',');
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
