//! Kubernetes YAML in and out for `mcpgw inject`: a stream of documents read into order-keeping JSON values, and
//! written back in block style.
//!
//! Reading uses serde_norway (YAML 1.2) into `serde_json::Value`, whose maps keep their keys in order (the crate's
//! `preserve_order` feature), so a manifest comes back with its keys where they were. Comments and anchors do not
//! survive (an alias is expanded).
//!
//! Writing is our own, because the reader sees YAML 1.2 while Kubernetes (sigs.k8s.io/yaml) reads YAML 1.1: a string
//! `"yes"`, `"on"` or `"0440"` must come out quoted or `kubectl` reads a boolean or an octal number. So a string is
//! written plain only when it is unambiguous in both versions, as a literal block (`|`) when it has several lines, and
//! double-quoted otherwise. One YAML 1.1 reading the 1.2 reader cannot know is restored by hand: an unquoted octal file
//! mode (`defaultMode: 0440`, `mode: 0400`) is a number for Kubernetes, and is written as that number (`288`).

use serde::Deserialize;
use serde_json::{Map, Value};

/// The deepest nesting of mappings and sequences a document may have (contract 14). Kubernetes objects stay far
/// below it (a CRD's schema is some 20 levels); the writer and the walks over a document recurse once per level.
pub const MAX_DEPTH: usize = 64;

/// The documents of `text`, in order; empty documents (a lone `---`, only comments) are left out. A document nested
/// deeper than [`MAX_DEPTH`] is refused.
pub fn read_documents(text: &str) -> Result<Vec<Value>, String> {
    let too_deep = |index: usize| format!("document {}: nested deeper than {MAX_DEPTH} levels", index + 1);
    let mut documents = Vec::new();
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let mut value = Value::deserialize(document).map_err(|e| {
            // The reader stops at 128 levels on its own; past 64 the answer is the same whatever the depth.
            if e.to_string().contains("recursion limit exceeded") {
                return too_deep(index);
            }
            format!("document {}: not valid YAML: {e}", index + 1)
        })?;
        if depth(&value) > MAX_DEPTH {
            return Err(too_deep(index));
        }
        if value.is_null() {
            continue;
        }
        restore_octal_modes(&mut value);
        documents.push(value);
    }
    Ok(documents)
}

/// Levels of mappings and sequences in `value`: 0 for a scalar, 1 for a flat mapping. The reader holds documents to
/// 128 levels, so the recursion here is bounded.
fn depth(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Writes `documents` as one YAML stream, `---` between documents.
pub fn write_documents(documents: &[Value]) -> String {
    let mut out = String::new();
    for (index, document) in documents.iter().enumerate() {
        if index > 0 {
            out.push_str("---\n");
        }
        match document {
            Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0, false),
            Value::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0, false),
            scalar => {
                out.push_str(&scalar_text(scalar, 0));
                out.push('\n');
            }
        }
    }
    out
}

/// `defaultMode: 0440` (unquoted) is octal 288 for Kubernetes' YAML 1.1 but the string "0440" for a YAML 1.2 reader.
/// Both fields are integers in Kubernetes, so a string there can only have been such an octal number.
fn restore_octal_modes(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if let (true, Value::String(text)) = (key == "defaultMode" || key == "mode", &*field)
                    && let Some(mode) = octal(text)
                {
                    *field = Value::from(mode);
                } else {
                    restore_octal_modes(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(restore_octal_modes),
        _ => {}
    }
}

fn octal(text: &str) -> Option<u32> {
    let digits = text.strip_prefix('0')?;
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    u32::from_str_radix(digits, 8).ok()
}

fn indent(out: &mut String, width: usize) {
    out.extend(std::iter::repeat_n(' ', width));
}

/// A mapping at `width`; `inline` when its first key follows a `- ` already written.
fn write_map(out: &mut String, map: &Map<String, Value>, width: usize, inline: bool) {
    for (index, (key, value)) in map.iter().enumerate() {
        if index > 0 || !inline {
            indent(out, width);
        }
        out.push_str(&string_text(key, width, false));
        out.push(':');
        match value {
            Value::Object(inner) if !inner.is_empty() => {
                out.push('\n');
                write_map(out, inner, width + 2, false);
            }
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                write_seq(out, items, width + 2, false);
            }
            scalar => {
                out.push(' ');
                out.push_str(&scalar_text(scalar, width + 2));
                out.push('\n');
            }
        }
    }
}

/// A sequence at `width`, each item behind `- `.
fn write_seq(out: &mut String, items: &[Value], width: usize, inline: bool) {
    for (index, item) in items.iter().enumerate() {
        if index > 0 || !inline {
            indent(out, width);
        }
        out.push_str("- ");
        match item {
            Value::Object(map) if !map.is_empty() => write_map(out, map, width + 2, true),
            Value::Array(inner) if !inner.is_empty() => write_seq(out, inner, width + 2, true),
            scalar => {
                out.push_str(&scalar_text(scalar, width + 2));
                out.push('\n');
            }
        }
    }
}

/// A scalar or an empty collection; a multi-line string's block lines are indented by `width`.
fn scalar_text(value: &Value, width: usize) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string_text(s, width, true),
        Value::Array(_) => "[]".to_string(),
        Value::Object(_) => "{}".to_string(),
    }
}

fn string_text(text: &str, width: usize, block_allowed: bool) -> String {
    if is_safe_plain(text) {
        text.to_string()
    } else if block_allowed && let Some(block) = literal_block(text, width) {
        block
    } else {
        double_quoted(text)
    }
}

/// Plain only when no YAML 1.1 or 1.2 reader can take it for anything but this string: a conservative character set,
/// no leading indicator, and not a word or number either version resolves to another type.
fn is_safe_plain(text: &str) -> bool {
    let Some(first) = text.chars().next() else { return false };
    let chars_ok = text.chars().all(|c| c.is_ascii_alphanumeric() || " _-./@:+=,$()%~".contains(c));
    let shape_ok = !text.ends_with([' ', ':']) && !text.contains(": ") && !text.contains(" #");
    let keyword = matches!(
        text.to_ascii_lowercase().as_str(),
        "null" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "~"
    );
    let start_ok = if first.is_ascii_digit() {
        // Quantities and durations (100m, 64Mi, 30s) are safe; anything else starting with a digit may be a number,
        // a date or a YAML 1.1 sexagesimal.
        let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let unit = &text[digits_end..];
        // Not 0x1f, 0o17 or 0b1 (numbers in YAML 1.2 or 1.1) nor 1e (close enough to an exponent).
        let radix = text.starts_with('0') && unit.starts_with(['x', 'X', 'o', 'O', 'b', 'B']);
        !unit.is_empty() && unit.chars().all(|c| c.is_ascii_alphabetic()) && !radix && !unit.starts_with(['e', 'E'])
    } else {
        first.is_ascii_alphabetic() || first == '/' || first == '_'
    };
    chars_ok && shape_ok && !keyword && start_ok
}

/// `|`, `|-` or `|+` with the lines indented by `width`, when the text can be written that way exactly.
fn literal_block(text: &str, width: usize) -> Option<String> {
    let body = text.trim_end_matches('\n');
    let trailing = text.len() - body.len();
    let printable = text.chars().all(|c| c == '\n' || c == '\t' || (!c.is_control() && !is_special_break(c)));
    let first_line = body.lines().find(|line| !line.is_empty())?;
    if !text.contains('\n') || !printable || first_line.starts_with([' ', '\t']) || body.contains('\r') {
        return None;
    }
    let chomp = match trailing {
        0 => "-",
        1 => "",
        _ => "+",
    };
    let mut out = format!("|{chomp}");
    for line in text.strip_suffix('\n').unwrap_or(text).split('\n') {
        out.push('\n');
        if !line.is_empty() {
            indent(&mut out, width);
            out.push_str(line);
        }
    }
    Some(out)
}

/// Characters YAML treats as line breaks or refuses raw, which must be escaped.
fn is_special_break(c: char) -> bool {
    matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}')
}

fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || is_special_break(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        write_documents(&read_documents(text).unwrap())
    }

    #[test]
    fn keys_keep_their_order_and_plain_values_stay_plain() {
        let text = "kind: Pod\napiVersion: v1\nmetadata:\n  name: a\n  labels:\n    app.kubernetes.io/name: a\n";
        assert_eq!(round_trip(text), text);
    }

    #[test]
    fn strings_yaml_1_1_would_misread_are_quoted() {
        let out = round_trip("a: 'yes'\nb: 'on'\nc: '0440'\nd: '8000'\ne: 'true'\nf: '1:20'\ng: '2026-01-01'\n");
        assert_eq!(
            out,
            "a: \"yes\"\nb: \"on\"\nc: \"0440\"\nd: \"8000\"\ne: \"true\"\nf: \"1:20\"\ng: \"2026-01-01\"\n"
        );
        // And a second pass changes nothing.
        assert_eq!(round_trip(&out), out);
    }

    #[test]
    fn quantities_images_and_urls_read_back_the_same() {
        let text = "cpu: 100m\nmemory: 64Mi\nimage: nginx:1.25\nurl: http://localhost:8000/mcp/\nn: 3\nf: 0.5\n";
        let out = round_trip(text);
        assert_eq!(read_documents(&out).unwrap(), read_documents(text).unwrap());
        assert!(out.contains("cpu: 100m\n") && out.contains("image: nginx:1.25\n"), "{out}");
    }

    #[test]
    fn an_unquoted_octal_file_mode_stays_the_number_kubernetes_reads() {
        let out = round_trip("secret:\n  defaultMode: 0440\n  items:\n  - key: a\n    mode: 0400\n");
        assert_eq!(out, "secret:\n  defaultMode: 288\n  items:\n    - key: a\n      mode: 256\n");
    }

    #[test]
    fn multi_line_strings_become_literal_blocks_that_read_back_exactly() {
        for text in ["a\nb\n", "a\nb", "a\n\nb\n\n", "set -e\n  indented\n", " leading\nx\n", "tab\there\nx", "\n"] {
            let doc = Value::Object(Map::from_iter([("k".to_string(), Value::from(text))]));
            let out = write_documents(std::slice::from_ref(&doc));
            assert_eq!(read_documents(&out).unwrap(), vec![doc], "{out}");
        }
    }

    #[test]
    fn odd_characters_are_escaped() {
        let doc = Value::from("a\u{2028}b\u{7f}\"\\ #c");
        let out = write_documents(std::slice::from_ref(&doc));
        assert_eq!(read_documents(&out).unwrap(), vec![doc]);
    }

    #[test]
    fn empty_documents_are_dropped_and_bad_yaml_is_an_error() {
        assert_eq!(read_documents("---\n# only a comment\n---\na: 1\n---\n").unwrap().len(), 1);
        let err = read_documents("a: 1\n---\nb: [\n").unwrap_err();
        assert!(err.starts_with("document 2: not valid YAML"), "{err}");
    }
}
