//! [`Fields`]: the walk over one JSON object that records every problem, not only the first, and carries on.
//!
//! serde's derive stops at the first type error, which makes `check-config` tedious: fix one thing, run again, find
//! the next. [`Fields`] walks one JSON object instead: each accessor removes its key, checks its type, and on a
//! mismatch records a problem with the full path (`mcp_configs.<id>.mcp_config[0].config.args`) and carries on. What
//! no accessor took is an unknown key: a problem naming the nearest key the record knows ("did you mean
//! `output_guardrails_policy`?", contract 15), so a typo never switches a setting off in silence. Annotations, keys
//! that start with `_` or `x-`, are the exception: kept as they are and written back.

use indexmap::IndexMap;
use serde_json::{Map, Number, Value};

/// A list of problems, each `path: what is wrong`.
pub type Problems = Vec<String>;

/// The fields of one JSON object being decoded.
pub struct Fields<'p> {
    path: String,
    map: Map<String, Value>,
    problems: &'p mut Problems,
    /// The keys the decoder asked for, known or not present: the candidates of a "did you mean" (the first
    /// [`MAX_ASKED`]; kept on the stack, as a section of a million API keys decodes a million records).
    asked: [&'static str; MAX_ASKED],
    asked_len: usize,
}

/// The most fields a record's decoder asks for (the `limits` record has 24).
const MAX_ASKED: usize = 48;

/// Whether `key` is an annotation: a key no decoder reads, kept and written back (`_comment`, `x-owner`, `x_team`).
pub fn is_annotation(key: &str) -> bool {
    key.starts_with('_') || key.starts_with("x-") || key.starts_with("x_")
}

/// The known key nearest to `unknown`, when it is near enough to be a typo of it.
fn nearest<'k>(unknown: &str, known: &[&'k str]) -> Option<&'k str> {
    let (distance, best) = known
        .iter()
        .map(|candidate| (strsim::damerau_levenshtein(unknown, candidate), *candidate))
        .min_by_key(|(distance, _)| *distance)?;
    (distance <= 2 + unknown.chars().count() / 6).then_some(best)
}

/// Human name of a JSON value's type, for problem messages.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'p> Fields<'p> {
    /// Starts decoding `value`, which must be an object; otherwise records a problem and returns `None`.
    pub fn new(value: Value, path: impl Into<String>, problems: &'p mut Problems) -> Option<Self> {
        let path = path.into();
        match value {
            Value::Object(map) => Some(Fields { path, map, problems, asked: [""; MAX_ASKED], asked_len: 0 }),
            other => {
                problems.push(format!("{}: must be an object, found {}", display(&path), type_name(&other)));
                None
            }
        }
    }

    /// Decodes one record of a large section. Its path is made by `path` only when the record has a problem: sections
    /// hold thousands of records (one per API key) and formatting every path up front would dominate the load time.
    pub fn record<T>(
        value: Value,
        problems: &mut Problems,
        path: impl FnOnce() -> String,
        decode: impl FnOnce(Fields<'_>) -> Option<T>,
    ) -> Option<T> {
        let before = problems.len();
        let out = match value {
            Value::Object(map) => {
                decode(Fields { path: String::new(), map, problems, asked: [""; MAX_ASKED], asked_len: 0 })
            }
            other => {
                problems.push(format!(": must be an object, found {}", type_name(&other)));
                None
            }
        };
        if problems.len() > before {
            let prefix = path();
            for problem in &mut problems[before..] {
                let sep = if problem.starts_with(':') { "" } else { "." };
                *problem = format!("{prefix}{sep}{problem}");
            }
        }
        out
    }

    /// The path of a field of this object.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    /// The problem list, for nested decoders.
    pub fn problems(&mut self) -> &mut Problems {
        self.problems
    }

    /// Records a problem about field `key`.
    pub fn problem(&mut self, key: &str, message: impl std::fmt::Display) {
        let path = self.path_of(key);
        self.problems.push(format!("{path}: {message}"));
    }

    /// Removes and returns a field; `null` counts as absent.
    pub fn take(&mut self, key: &'static str) -> Option<Value> {
        if let Some(slot) = self.asked.get_mut(self.asked_len) {
            *slot = key;
            self.asked_len += 1;
        }
        match self.map.shift_remove(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A required non-empty string.
    pub fn required_string(&mut self, key: &'static str) -> Option<String> {
        match self.take(key) {
            None => {
                self.problem(key, "is required");
                None
            }
            Some(Value::String(s)) if s.trim().is_empty() => {
                self.problem(key, "must not be empty");
                None
            }
            Some(Value::String(s)) => Some(s),
            Some(other) => self.wrong(key, "a string", &other),
        }
    }

    /// An optional string.
    pub fn string(&mut self, key: &'static str) -> Option<String> {
        match self.take(key)? {
            Value::String(s) => Some(s),
            other => self.wrong(key, "a string", &other),
        }
    }

    /// An optional boolean.
    pub fn bool(&mut self, key: &'static str) -> Option<bool> {
        match self.take(key)? {
            Value::Bool(b) => Some(b),
            other => self.wrong(key, "a boolean", &other),
        }
    }

    /// An optional number (integer or not), kept as written.
    pub fn number(&mut self, key: &'static str) -> Option<Number> {
        match self.take(key)? {
            Value::Number(n) => Some(n),
            other => self.wrong(key, "a number", &other),
        }
    }

    /// An optional non-negative integer no larger than `max`.
    pub fn integer(&mut self, key: &'static str, max: u64) -> Option<u64> {
        match self.take(key)? {
            Value::Number(n) => match n.as_u64() {
                Some(v) if v <= max => Some(v),
                _ => {
                    self.problem(key, format!("must be an integer from 0 to {max}, found {n}"));
                    None
                }
            },
            other => self.wrong(key, "an integer", &other),
        }
    }

    /// An optional array of strings.
    pub fn string_list(&mut self, key: &'static str) -> Option<Vec<String>> {
        match self.take(key)? {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s),
                        other => {
                            let path = format!("{}[{i}]", self.path_of(key));
                            self.problems.push(format!("{path}: must be a string, found {}", type_name(&other)));
                        }
                    }
                }
                Some(out)
            }
            other => self.wrong(key, "an array of strings", &other),
        }
    }

    /// An optional object whose values are all strings.
    pub fn string_map(&mut self, key: &'static str) -> Option<IndexMap<String, String>> {
        match self.take(key)? {
            Value::Object(entries) => {
                let mut out = IndexMap::with_capacity(entries.len());
                for (name, item) in entries {
                    match item {
                        Value::String(s) => {
                            out.insert(name, s);
                        }
                        other => {
                            let path = format!("{}.{name}", self.path_of(key));
                            self.problems.push(format!("{path}: must be a string, found {}", type_name(&other)));
                        }
                    }
                }
                Some(out)
            }
            other => self.wrong(key, "an object of strings", &other),
        }
    }

    /// An optional object, raw.
    pub fn object(&mut self, key: &'static str) -> Option<Map<String, Value>> {
        match self.take(key)? {
            Value::Object(m) => Some(m),
            other => self.wrong(key, "an object", &other),
        }
    }

    /// An optional nested object, decoded by `decode` with this object's problem list.
    pub fn nested<T>(&mut self, key: &'static str, decode: impl FnOnce(Fields<'_>) -> T) -> Option<T> {
        let value = self.take(key)?;
        let path = self.path_of(key);
        Fields::new(value, path, self.problems).map(decode)
    }

    /// The fields nobody took: each unknown key is a problem (with the nearest known key, if one is near); the
    /// annotations ([`is_annotation`]) are returned, to be kept and written back.
    pub fn rest(mut self) -> Map<String, Value> {
        if self.map.is_empty() {
            return self.map;
        }
        let unknown: Vec<String> = self.map.keys().filter(|key| !is_annotation(key)).cloned().collect();
        for key in unknown {
            self.map.shift_remove(&key);
            let message = match nearest(&key, &self.asked[..self.asked_len]) {
                Some(known) => format!("unknown key; did you mean `{known}`?"),
                None => "unknown key (keys that start with `_`, `x-` or `x_` are kept as annotations)".to_string(),
            };
            let path = self.path_of(&key);
            self.problems.push(format!("{path}: {message}"));
        }
        self.map
    }

    fn wrong<T>(&mut self, key: &str, expected: &str, found: &Value) -> Option<T> {
        self.problem(key, format!("must be {expected}, found {}", type_name(found)));
        None
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "the file" } else { path }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collects_every_type_problem_and_keeps_annotations() {
        let mut problems = Problems::new();
        let value = json!({"a": 1, "b": "x", "c": [1, "y", true], "d": null, "_extra": {"k": 1}});
        let mut f = Fields::new(value, "root", &mut problems).unwrap();
        assert_eq!(f.string("a"), None);
        assert_eq!(f.integer("b", 10), None);
        assert_eq!(f.string_list("c"), Some(vec!["y".to_string()]));
        assert_eq!(f.required_string("d"), None);
        let rest = f.rest();
        assert_eq!(rest.keys().collect::<Vec<_>>(), vec!["_extra"]);
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].starts_with("root.a: must be a string"));
        assert!(problems.iter().any(|p| p == "root.d: is required"));
        assert!(problems.iter().any(|p| p.starts_with("root.c[2]")));
    }

    #[test]
    fn record_paths_are_added_only_to_problems() {
        let mut problems = Problems::new();
        let ok = Fields::record(json!({"a": "x"}), &mut problems, || unreachable!(), |mut f| f.string("a"));
        assert_eq!(ok.as_deref(), Some("x"));
        Fields::record(json!({"a": 1}), &mut problems, || "sec.id".into(), |mut f| f.string("a"));
        Fields::record(json!(3), &mut problems, || "sec.other".into(), |mut f| f.string("a"));
        assert_eq!(
            problems,
            vec!["sec.id.a: must be a string, found a number", "sec.other: must be an object, found a number"]
        );
    }

    #[test]
    fn a_non_object_is_one_problem() {
        let mut problems = Problems::new();
        assert!(Fields::new(json!([1]), "", &mut problems).is_none());
        assert_eq!(problems, vec!["the file: must be an object, found an array"]);
    }
}
