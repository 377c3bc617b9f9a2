//! Every string a client would receive from an upstream (contract 13, "output guardrails see every string").
//!
//! An upstream can hide text anywhere in what it answers: a content item's text, an embedded resource's text or URI,
//! a `resource_link`'s name, description or URI, annotations, `structuredContent`, `_meta`, fields no revision of MCP
//! defines, prompt messages, resource contents. The output stage does not know these shapes and must not need to: it
//! reads the answer through this module, which visits every string value of a JSON value (object keys are not visited:
//! they are names, not text the client shows) in document order. The same walk serves the output policy check (the
//! strings joined into one text), PII restoration (each string rewritten in place) and any later relay of prompts or
//! resources.
//!
//! The walks keep their own stack instead of recursing, so depth costs heap, never the thread's stack. Nothing is
//! cloned: [`joined`] copies the strings once into the text a check reads, and [`rewrite`] touches only the strings
//! its function changes.

use serde_json::Value;

/// The most an upstream error's text may take on its way to a client, in bytes.
pub const UPSTREAM_ERROR_LIMIT: usize = 1024;

/// Calls `visit` with every string value in `value`, in document order.
pub fn visit<'v>(value: &'v Value, mut visit: impl FnMut(&'v str)) {
    let mut pending: Vec<&'v Value> = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) => visit(text),
            // Reversed, so that the first item is taken first.
            Value::Array(items) => pending.extend(items.iter().rev()),
            Value::Object(fields) => pending.extend(fields.values().rev()),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// Every string value in `value`, one per line: the text the output checks read. A result of one text item (the
/// common case) costs one copy of that text.
pub fn joined(value: &Value) -> String {
    let mut text = String::new();
    let mut first = true;
    visit(value, |string| {
        if !first {
            text.push('\n');
        }
        first = false;
        text.push_str(string);
    });
    text
}

/// Replaces every string value in `value` for which `change` answers `Some` with that answer; other strings, and the
/// shape of `value`, stay as they are.
pub fn rewrite(value: &mut Value, mut change: impl FnMut(&str) -> Option<String>) {
    let mut pending: Vec<&mut Value> = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) => {
                if let Some(changed) = change(text) {
                    *text = changed;
                }
            }
            Value::Array(items) => pending.extend(items.iter_mut().rev()),
            Value::Object(fields) => pending.extend(fields.values_mut().rev()),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// `text` cut to at most `limit` bytes, on a character boundary.
pub fn cut(text: &mut String, limit: usize) {
    if text.len() <= limit {
        return;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hiding_places() -> Value {
        json!({
            "content": [
                {"type": "text", "text": "one", "annotations": {"audience": ["two"]}},
                {"type": "resource", "resource": {"uri": "three://", "text": "four"}},
                {"type": "resource_link", "name": "five", "description": "six", "uri": "seven://"},
            ],
            "structuredContent": {"deep": [[[{"eight": "eight"}]]]},
            "_meta": {"nine": "nine"},
            "unknown": ["ten"],
            "isError": false,
            "count": 11,
        })
    }

    #[test]
    fn every_string_value_is_visited_in_document_order_and_keys_are_not() {
        let mut seen = Vec::new();
        visit(&hiding_places(), |s| seen.push(s.to_string()));
        let expected = [
            "text",
            "one",
            "two",
            "resource",
            "three://",
            "four",
            "resource_link",
            "five",
            "six",
            "seven://",
            "eight",
            "nine",
            "ten",
        ];
        assert_eq!(seen, expected);
        assert_eq!(joined(&json!({"a": "x", "b": ["y"]})), "x\ny");
        assert_eq!(joined(&json!(42)), "");
    }

    #[test]
    fn rewrite_changes_only_the_strings_it_answers_for() {
        let mut value = hiding_places();
        rewrite(&mut value, |s| s.contains('e').then(|| s.to_uppercase()));
        assert_eq!(value["content"][1]["resource"]["uri"], json!("THREE://"));
        assert_eq!(value["content"][0]["text"], json!("ONE"));
        assert_eq!(value["content"][0]["type"], json!("TEXT"));
        assert_eq!(value["content"][2]["name"], json!("FIVE"));
        assert_eq!(value["content"][2]["description"], json!("six"), "untouched");
        assert_eq!(value["count"], json!(11));
        assert_eq!(value["structuredContent"]["deep"][0][0][0]["eight"], json!("EIGHT"));
    }

    #[test]
    fn a_deep_value_costs_no_stack() {
        let mut value = json!("bottom");
        for _ in 0..100_000 {
            value = Value::Array(vec![value]);
        }
        assert_eq!(joined(&value), "bottom");
        rewrite(&mut value, |_| Some("changed".into()));
        let mut found = String::new();
        visit(&value, |s| found.push_str(s));
        assert_eq!(found, "changed");
        // Dropping a value this deep recurses in serde_json; take it apart level by level.
        while let Value::Array(mut items) = value {
            value = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn cut_keeps_whole_characters() {
        let mut ascii = "x".repeat(2000);
        cut(&mut ascii, UPSTREAM_ERROR_LIMIT);
        assert_eq!(ascii.len(), UPSTREAM_ERROR_LIMIT);
        let mut wide = "é".repeat(1000);
        cut(&mut wide, 1023);
        assert_eq!(wide.len(), 1022);
        let mut short = String::from("short");
        cut(&mut short, UPSTREAM_ERROR_LIMIT);
        assert_eq!(short, "short");
    }
}
