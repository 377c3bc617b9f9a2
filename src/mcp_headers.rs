//! SEP-2243's standard headers of a 2026-07-28 request over streamable HTTP (contract 15, "Parameter headers"), both
//! ways and in one place: the gateway sets them on what it sends to a 2026-07-28 upstream (`upstream/http_client.rs`)
//! and checks a client's `Mcp-Param-*` against the body (`gateway/middleware/param_headers.rs`).
//!
//! `Mcp-Method` names the method; `Mcp-Name` the `name` of `tools/call` and `prompts/get`, the `uri` of
//! `resources/read` (and of the legacy subscribe pair), the `taskId` of `tasks/get`, `tasks/update`, `tasks/cancel`.
//! For every property reached from a tool's `inputSchema` root through `properties` that carries
//! `"x-mcp-header": NAME`, a primitive argument (string, number, boolean; `null` is absent) travels as
//! `Mcp-Param-NAME` too. A value that would not survive as a header (leading or trailing blanks, control or non-ASCII
//! characters, or one that looks encoded) is sent as `=?base64?…?=`, strict Base64 of its UTF-8.

use axum::http::HeaderMap;
use base64::Engine;
use serde_json::Value;

/// The first revision with the standard headers.
pub const STANDARD_HEADERS: &str = "2026-07-28";

const ENCODED_PREFIX: &str = "=?base64?";
const ENCODED_SUFFIX: &str = "?=";

/// Every `x-mcp-header` annotation of `schema`: the property's path from the root and the header's name.
pub fn annotations(schema: &Value) -> Vec<(Vec<&str>, &str)> {
    fn walk<'a>(properties: Option<&'a Value>, path: &mut Vec<&'a str>, out: &mut Vec<(Vec<&'a str>, &'a str)>) {
        let Some(Value::Object(properties)) = properties else { return };
        for (name, property) in properties {
            path.push(name);
            if let Some(Value::String(header)) = property.get("x-mcp-header")
                && !header.is_empty()
            {
                out.push((path.clone(), header));
            }
            walk(property.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

/// A primitive argument as its header carries it; `None` for absent, `null` or not a primitive.
pub fn as_header_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// A header's value as the client meant it: literal, or strict Base64 of UTF-8 between `=?base64?` and `?=`.
pub fn decoded(raw: &str) -> Option<String> {
    match raw.strip_prefix(ENCODED_PREFIX).and_then(|inner| inner.strip_suffix(ENCODED_SUFFIX)) {
        Some(inner) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(inner).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(raw.to_string()),
    }
}

/// Checks `headers` against `arguments` for the annotations of `schema`; the reason of the first mismatch.
pub fn check(headers: &HeaderMap, arguments: Option<&Value>, schema: &Value) -> Result<(), String> {
    for (path, header) in annotations(schema) {
        let full = format!("Mcp-Param-{header}");
        let mut values = headers.get_all(full.as_str()).iter();
        let sent = values.next();
        if values.next().is_some() {
            return Err(format!("duplicate {full} header"));
        }
        let sent = match sent {
            None => None,
            Some(value) => {
                let text = value.to_str().map_err(|_| format!("{full} header contains invalid characters"))?;
                Some(
                    decoded(text.trim_matches([' ', '\t']))
                        .ok_or_else(|| format!("{full} header is not valid Base64"))?,
                )
            }
        };
        let argument =
            arguments.and_then(|args| path.iter().try_fold(args, |value, key| value.get(key))).and_then(as_header_text);
        let property = path.join(".");
        match (sent, argument) {
            (None, None) => {}
            (Some(_), None) => return Err(format!("unexpected {full} header for absent or null `{property}`")),
            (None, Some(_)) => return Err(format!("missing {full} header for `{property}`")),
            (Some(sent), Some(argument)) if sent != argument => {
                return Err(format!("{full} header does not match the body's `{property}`"));
            }
            (Some(_), Some(_)) => {}
        }
    }
    Ok(())
}

/// A header's value for `text`: itself, or `=?base64?…?=` when it would not survive as one (see the module).
pub fn encoded(text: &str) -> String {
    let blank = |c: Option<char>| matches!(c, Some(' ' | '\t'));
    let unsafe_text = blank(text.chars().next())
        || blank(text.chars().last())
        || text.chars().any(|c| !(' '..='~').contains(&c))
        || (text.starts_with(ENCODED_PREFIX) && text.ends_with(ENCODED_SUFFIX));
    if unsafe_text {
        format!("{ENCODED_PREFIX}{}{ENCODED_SUFFIX}", base64::engine::general_purpose::STANDARD.encode(text))
    } else {
        text.to_string()
    }
}

/// The `Mcp-Name` of a request of `method` with `params`, when the method has one.
pub fn name_of<'a>(method: &str, params: &'a Value) -> Option<&'a str> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params.get(field)?.as_str()
}

/// A tool's `x-mcp-header` annotations, owned: each property's path from the root and its header's name.
pub type Annotations = Vec<(Vec<String>, String)>;

/// [`annotations`] of `schema`, owned (to keep per tool).
pub fn owned_annotations(schema: &Value) -> Annotations {
    annotations(schema)
        .into_iter()
        .map(|(path, header)| (path.into_iter().map(str::to_string).collect(), header.to_string()))
        .collect()
}

/// The standard headers of a request to a 2026-07-28 server: `Mcp-Method`, `Mcp-Name`, and for a `tools/call` the
/// `Mcp-Param-*` of the called tool's `annotations`.
pub fn request_headers(method: &str, params: &Value, annotations: &Annotations) -> Vec<(String, String)> {
    let mut headers = vec![("mcp-method".to_string(), method.to_string())];
    if let Some(name) = name_of(method, params) {
        headers.push(("mcp-name".to_string(), encoded(name)));
    }
    if method == "tools/call"
        && let Some(arguments) = params.get("arguments")
    {
        for (path, header) in annotations {
            let argument = path.iter().try_fold(arguments, |value, key| value.get(key)).and_then(as_header_text);
            if let Some(argument) = argument {
                headers.push((format!("mcp-param-{header}"), encoded(&argument)));
            }
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn headers_must_say_what_the_body_says() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limits": {"type": "object", "properties": {"max": {"type": "integer", "x-mcp-header": "Max"}}},
            "query": {"type": "string"}}});
        let args = json!({"region": "Hello", "limits": {"max": 5}, "query": "q"});
        let ok = |pairs: &[(&str, &str)], args: &Value| check(&headers(pairs), Some(args), &schema);
        assert_eq!(ok(&[("mcp-param-region", "Hello"), ("Mcp-Param-Max", "5")], &args), Ok(()));
        assert_eq!(ok(&[("mcp-param-region", "=?base64?SGVsbG8=?="), ("mcp-param-max", "5")], &args), Ok(()));
        assert_eq!(ok(&[("mcp-param-region", " Hello "), ("mcp-param-max", "5")], &args), Ok(()), "OWS trimmed");
        assert_eq!(
            ok(
                &[("mcp-param-region", "=?base64?SGVsbG8"), ("mcp-param-max", "5")],
                &json!({"region": "=?base64?SGVsbG8", "limits": {"max": 5}})
            ),
            Ok(()),
            "literal without the suffix"
        );
        for (pairs, why) in [
            (vec![("mcp-param-region", "=?base64?SGVsbG8?="), ("mcp-param-max", "5")], "padding"),
            (vec![("mcp-param-region", "=?base64?SGVs!!!bG8=?="), ("mcp-param-max", "5")], "alphabet"),
            (vec![("mcp-param-max", "5")], "missing"),
            (vec![("mcp-param-region", "Bye"), ("mcp-param-max", "5")], "different"),
            (vec![("mcp-param-region", "Hello"), ("mcp-param-region", "Hello"), ("mcp-param-max", "5")], "twice"),
        ] {
            assert!(ok(&pairs, &args).is_err(), "{why}");
        }
        let absent = json!({"query": "q"});
        assert_eq!(ok(&[], &absent), Ok(()));
        assert!(ok(&[("mcp-param-region", "x")], &absent).is_err(), "a header for an absent argument");
        assert_eq!(ok(&[], &json!({"region": null})), Ok(()), "null is absent");
    }

    #[test]
    fn what_is_sent_is_what_is_checked() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limits": {"type": "object", "properties": {"max": {"type": "integer", "x-mcp-header": "Max"}}},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"}}});
        let annotations = owned_annotations(&schema);
        for region in ["Hello", " padded ", "Zürich", "=?base64?SGk=?=", ""] {
            let args = json!({"region": region, "limits": {"max": 5}, "flag": null});
            let params = json!({"name": "t", "arguments": args});
            let sent = request_headers("tools/call", &params, &annotations);
            assert!(sent.contains(&("mcp-method".into(), "tools/call".into())), "{sent:?}");
            assert!(sent.contains(&("mcp-name".into(), "t".into())), "{sent:?}");
            assert!(!sent.iter().any(|(name, _)| name == "mcp-param-flag"), "null is absent: {sent:?}");
            let pairs: Vec<(&str, &str)> = sent.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            assert_eq!(check(&headers(&pairs), Some(&args), &schema), Ok(()), "{region:?}: {sent:?}");
        }
        assert_eq!(encoded("Zürich"), "=?base64?WsO8cmljaA==?=");
        let read = request_headers("resources/read", &json!({"uri": "file:///a b"}), &Vec::new());
        assert_eq!(
            read,
            vec![("mcp-method".into(), "resources/read".into()), ("mcp-name".into(), "file:///a b".into())]
        );
        assert_eq!(request_headers("tools/list", &json!({}), &Vec::new()).len(), 1);
    }
}
