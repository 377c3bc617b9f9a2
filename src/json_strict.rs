//! JSON as every reader of it agrees: an object with the same key twice is refused, not read as its last value
//! (`{"confirm": false, "confirm": true}` must not mean `true` to one reader and `false` to another). Used for the
//! bodies of both fronts (the gateway's JSON-RPC guard and the admin API's body extractor). And JSON as every writer
//! of it agrees: [`canonical`], the one form that hashes of JSON are taken of (shared-cache fingerprints, tool pins,
//! audit records).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// `value` as JSON text with every object's keys sorted, at every depth: equal values give equal bytes on every
/// instance, whatever order they were built or read in.
pub fn canonical(value: &Value) -> String {
    let mut text = Vec::with_capacity(128);
    write_canonical(value, &mut text);
    // serde_json writes UTF-8 only; the lossy form is never taken.
    String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// [`canonical`] appended to `out`, written as it is walked (no sorted copy of the value is built: this runs for
/// each audit record and each pin).
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            if map.keys().is_sorted() {
                write_entries(map.iter(), out);
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                write_entries(entries.into_iter(), out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        // Writing a scalar into a Vec cannot fail.
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

fn write_entries<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) {
    for (i, (key, value)) in entries.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut *out, key);
        out.push(b':');
        write_canonical(value, out);
    }
}

/// A JSON object of `fields`, the values moved in. `serde_json::json!` serialises every value it is given into a new
/// one, a deep copy: for an upstream's result on the path of every call that is dozens of allocations.
pub fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(key, value)| (key.to_owned(), value)).collect())
}

/// Why a body is not strict JSON.
#[derive(Debug)]
pub enum StrictError {
    /// Not JSON at all (syntax, end of input, encoding).
    Syntax(serde_json::Error),
    /// JSON with a key repeated in one object.
    DuplicateKey(String),
}

impl fmt::Display for StrictError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrictError::Syntax(e) => write!(f, "{e}"),
            StrictError::DuplicateKey(key) => {
                let shown: String = key.chars().take(64).collect();
                write!(f, "duplicate key {shown:?} in an object")
            }
        }
    }
}

const DUPLICATE: &str = "\u{0}duplicate key\u{0}";

/// Parses `bytes` as one JSON value, refusing duplicate keys at any depth.
pub fn parse(bytes: &[u8]) -> Result<Value, StrictError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue.deserialize(&mut deserializer).map_err(classify)?;
    deserializer.end().map_err(StrictError::Syntax)?;
    Ok(value)
}

fn classify(error: serde_json::Error) -> StrictError {
    let text = error.to_string();
    match text.strip_prefix(DUPLICATE) {
        Some(rest) => StrictError::DuplicateKey(rest.split(DUPLICATE).next().unwrap_or("").to_string()),
        None => StrictError::Syntax(error),
    }
}

/// Builds a [`Value`] like serde_json's own visitor, but refuses a key seen before in the same object.
#[derive(Clone, Copy)]
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(StrictValue)?;
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                Entry::Occupied(seen) => {
                    return Err(de::Error::custom(format!("{DUPLICATE}{}{DUPLICATE}", seen.key())));
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_text_sorts_keys_at_every_depth_and_escapes_as_serde_json_does() {
        // What `canonical` was first: a sorted deep copy of the value, written by serde_json.
        fn sorted(value: &Value) -> Value {
            match value {
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&map[k]))).collect())
                }
                Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
                other => other.clone(),
            }
        }
        let odd = "quote \" backslash \\ newline \n nul \u{0} \u{1f} é 日本 \u{1F600}";
        let values = [
            json!(null),
            json!(-1.5e300),
            json!({}),
            json!([]),
            json!({"b": 1, "a": [{"z": null, "y": [true, false]}, 2.25, u64::MAX, i64::MIN], "é": odd, odd: {}}),
            json!([{"b": {"d": 1, "c": 2}}, "x", [[]], {"a": {}}]),
            json!({"a": 1, "b": {"c": 2, "d": 3}}),
        ];
        for value in values {
            assert_eq!(canonical(&value), sorted(&value).to_string(), "{value}");
        }
        assert_eq!(canonical(&json!({"b": 1, "a": {"d": [], "c": "x"}})), r#"{"a":{"c":"x","d":[]},"b":1}"#);
    }

    #[test]
    fn values_read_as_serde_json_reads_them() {
        for text in [r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":"\u00e9"}"#, "[]", "7", r#""s""#, "null"] {
            let ours = parse(text.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
        }
        assert_eq!(parse(br#"{"big": 18446744073709551615}"#).unwrap(), json!({"big": u64::MAX}));
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        for text in [r#"{"confirm": false, "confirm": true}"#, r#"{"a": [{"x": 1, "x": 1}]}"#, r#"{"a":{"b":1,"b":2}}"#]
        {
            match parse(text.as_bytes()) {
                Err(StrictError::DuplicateKey(key)) => assert!(["confirm", "x", "b"].contains(&key.as_str()), "{key}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let error = parse(br#"{"k\"ey": 1, "k\"ey": 2}"#).unwrap_err();
        assert_eq!(error.to_string(), r#"duplicate key "k\"ey" in an object"#);
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        for text in ["{", "not json", r#"{"a":1} x"#, ""] {
            assert!(matches!(parse(text.as_bytes()), Err(StrictError::Syntax(_))), "{text}");
        }
    }
}
