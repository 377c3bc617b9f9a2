//! The `custom_keyword` provider (contract 5): a search for blocked keywords in a text, not fooled by spelling
//! (contract 13).
//!
//! The keywords come from the guardrail config and are compiled once, when [`KeywordMatcher::new`] runs: each is
//! normalised (`normalise.rs`: NFKC, case folding, ignorable code points dropped, whitespace runs made one space,
//! Greek and Cyrillic look-alikes made Latin) into its spellings, and all of them go into one Aho-Corasick automaton.
//! A check normalises the text the same way (usually borrowing it as it is) and reads it in a single pass whatever the
//! number of keywords; each keyword found becomes one [`Violation`]. The stage hands the output check the upstream's
//! text, and the input check the arguments' JSON, their string values joined by one space (so `{"a": "drop", "b":
//! "table"}` holds `drop table`) and their keys. Only which keywords occur matters, never where, so the normalised
//! text may differ from the original in length; offsets are never reported.

use std::collections::HashSet;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use serde_json::{Map, Value};

use super::Violation;
use super::normalise;

/// The blocked keywords of one guardrail config, ready to search many texts. Cheap to clone (the automaton is shared).
#[derive(Debug, Clone)]
pub struct KeywordMatcher {
    /// The keywords as configured (trimmed, duplicates by normal form removed), as violations name them.
    keywords: Vec<String>,
    /// The normal forms of every keyword's spellings; pattern `i` of the automaton is `patterns[i]`.
    patterns: Vec<String>,
    /// Pattern `i` is a spelling of `keywords[owners[i]]`.
    owners: Vec<usize>,
    /// `None` when there is nothing to search for, or in the fallback case.
    automaton: Option<AhoCorasick>,
}

impl KeywordMatcher {
    /// Compiles `keywords`. Each is normalised; keywords that are empty once normalised are dropped, because an empty
    /// keyword would match every text and block every call. Keywords with the same normal form are kept once (first
    /// spelling).
    pub fn new<I, S>(keywords: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let (mut configured, mut patterns, mut owners) = (Vec::new(), Vec::new(), Vec::new());
        let mut known: HashSet<String> = HashSet::new();
        for keyword in keywords {
            let spellings = normalise::spellings(keyword.as_ref());
            // The first spelling is the keyword's normal form as written.
            let Some(normal) = spellings.first() else { continue };
            // Already a spelling of an earlier keyword: the same keyword, written another way.
            if known.contains(normal) {
                continue;
            }
            for spelling in spellings {
                known.insert(spelling.clone());
                patterns.push(spelling);
                owners.push(configured.len());
            }
            configured.push(keyword.as_ref().trim().to_owned());
        }
        // ASCII case-insensitivity lets an ASCII text be searched as it is, without a lowercased copy: the patterns
        // are in lowercase, and the normaliser leaves ASCII letters of ASCII text in their case.
        let automaton = if patterns.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new().ascii_case_insensitive(true).match_kind(MatchKind::Standard).build(&patterns).ok()
        };
        Self { keywords: configured, patterns, owners, automaton }
    }

    /// True when no keyword is configured: every text passes.
    pub fn is_empty(&self) -> bool {
        self.keywords.is_empty()
    }

    /// The distinct configured keywords occurring in `text`, in order of first occurrence, spelled as configured.
    pub fn find_all(&self, text: &str) -> Vec<String> {
        self.find_all_in([text])
    }

    /// The distinct configured keywords occurring in any of `texts` (each searched on its own), in order of first
    /// occurrence (by text, then by position), spelled as configured.
    pub fn find_all_in<'t>(&self, texts: impl IntoIterator<Item = &'t str>) -> Vec<String> {
        if self.is_empty() {
            return Vec::new();
        }
        let mut seen = vec![false; self.keywords.len()];
        // (text, position of first occurrence, keyword index)
        let mut first_seen: Vec<(usize, usize, usize)> = Vec::new();
        for (text_index, text) in texts.into_iter().enumerate() {
            let mut found = |position, index: usize| {
                if !seen[index] {
                    seen[index] = true;
                    first_seen.push((text_index, position, index));
                }
                first_seen.len() == seen.len()
            };
            self.scan(&normalise::for_search(text), &mut found);
            // What comments hold is searched too: removing them must not hide a keyword written inside one.
            if let Some(kept) = normalise::with_comments_kept(text) {
                self.scan(&kept, &mut found);
            }
            if first_seen.len() == seen.len() {
                break;
            }
        }
        first_seen.sort_unstable();
        first_seen.into_iter().map(|(_, _, index)| self.keywords[index].clone()).collect()
    }

    /// Reports `(position, keyword index)` of every pattern found in the normalised `haystack` to `found`, until it
    /// answers true (every keyword seen).
    fn scan(&self, haystack: &str, found: &mut dyn FnMut(usize, usize) -> bool) {
        match &self.automaton {
            Some(automaton) => {
                // Overlapping search, so that "drop" is still reported inside "drop table". A pattern's matches come
                // in order of end and so, its length being fixed, of start.
                for hit in automaton.find_overlapping_iter(haystack) {
                    if found(hit.start(), self.owners[hit.pattern().as_usize()]) {
                        return;
                    }
                }
            }
            // Only reached when the automaton could not be built (far beyond any sane keyword list): slower, but
            // still correct, because a keyword check must not silently pass everything.
            None => {
                let lowered = haystack.to_ascii_lowercase();
                for (pattern, owner) in self.patterns.iter().zip(&self.owners) {
                    if let Some(position) = lowered.find(pattern.as_str())
                        && found(position, *owner)
                    {
                        return;
                    }
                }
            }
        }
    }

    /// One `keyword_detector` violation per keyword found in `text`.
    pub fn violations(&self, text: &str) -> Vec<Violation> {
        Self::to_violations(self.find_all(text))
    }

    /// One `keyword_detector` violation per keyword found in a call's arguments: in `json` (the arguments as the
    /// providers see them), in all string values of `arguments` (recursively, in order) joined by one space, and in
    /// their keys joined by one space.
    pub fn argument_violations(&self, json: &str, arguments: &Map<String, Value>) -> Vec<Violation> {
        if self.is_empty() {
            return Vec::new();
        }
        let (mut values, mut keys) = (String::new(), String::new());
        collect_strings(arguments, &mut values, &mut keys);
        Self::to_violations(self.find_all_in([json, values.as_str(), keys.as_str()]))
    }

    /// The violations of a policy check: [`Self::argument_violations`] on input (`arguments` given, `text` their
    /// JSON), [`Self::violations`] of `text` on output.
    pub fn check(&self, text: &str, arguments: Option<&Map<String, Value>>) -> Vec<Violation> {
        match arguments {
            Some(arguments) => self.argument_violations(text, arguments),
            None => self.violations(text),
        }
    }

    fn to_violations(keywords: Vec<String>) -> Vec<Violation> {
        keywords
            .into_iter()
            .map(|keyword| Violation {
                kind: "keyword_detector".to_owned(),
                detector: "custom_keyword".to_owned(),
                message: format!("blocked keyword {keyword:?} found"),
            })
            .collect()
    }
}

/// Appends every string value under `arguments` to `values` and every key to `keys`, each string after one space when
/// it is not the first. Values come in document order; iterative, so that nesting cannot exhaust the stack.
fn collect_strings(arguments: &Map<String, Value>, values: &mut String, keys: &mut String) {
    let mut pending: Vec<&Value> = Vec::new();
    push_object(arguments, &mut pending, keys);
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) => append(values, text),
            Value::Array(items) => pending.extend(items.iter().rev()),
            Value::Object(map) => push_object(map, &mut pending, keys),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
}

/// An object's keys to `keys`, its values to the stack (reversed, so that the first is taken first).
fn push_object<'v>(map: &'v Map<String, Value>, pending: &mut Vec<&'v Value>, keys: &mut String) {
    map.keys().for_each(|key| append(keys, key));
    pending.extend(map.values().rev());
}

fn append(to: &mut String, text: &str) {
    if !to.is_empty() {
        to.push(' ');
    }
    to.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn keywords_are_found_however_they_are_spelled() {
        let matcher = KeywordMatcher::new(["drop table"]);
        for text in [
            "DROP\u{00A0}TABLE",
            "drop\ttable",
            "drop\ntable",
            "drop  table",
            "dr\u{200B}op table",
            "drop \u{200B} table",
            "dr\u{00AD}op table",
            "ｄｒｏｐ ｔａｂｌｅ",
            "drοp table",
            "DRОР ТАВLЕ",
        ] {
            assert_eq!(matcher.find_all(text), vec!["drop table"], "{text:?}");
        }
        assert!(matcher.find_all("drop the table").is_empty());
    }

    #[test]
    fn contract_14_spellings_are_found() {
        let matcher = KeywordMatcher::new(["drop table"]);
        for text in [
            "drop_table",
            "drop-table",
            "drop/**/table",
            "DROP/*x*/TABLE",
            "drop.table",
            "drop\u{2800}table",
            "drop\u{3164}table",
            "drop\u{115F}table",
            "drop\u{FFA0}table",
            "drop\u{180E}table",
            "drop\u{1680}table",
            "drop_-_table",
            "ԁгор tаblе",
            "ᎠᏒꓳᏢ ꓔꓮꓐꓡꓰ",
            "/* drop table */",
            "select 1 /*drop table*/",
        ] {
            assert_eq!(matcher.find_all(text), vec!["drop table"], "{text:?}");
        }
        assert!(matcher.find_all("drop the_table").is_empty());
        assert!(matcher.find_all("drop/* the */ chairs; drop*table").is_empty());
    }

    #[test]
    fn keywords_with_separators_match_their_own_spelling_and_the_others() {
        let matcher = KeywordMatcher::new(["rm -rf", "api_key", ".env", "/etc/passwd"]);
        for (text, keyword) in [
            ("run rm -rf /", "rm -rf"),
            ("RM  -RF", "rm -rf"),
            ("rm_rf", "rm -rf"),
            ("the api_key is", "api_key"),
            ("API-KEY", "api_key"),
            ("api key", "api_key"),
            ("cat .env", ".env"),
            ("x.env", ".env"),
            ("cat /etc/passwd", "/etc/passwd"),
            ("cat etc_passwd", "/etc/passwd"),
        ] {
            assert_eq!(matcher.find_all(text), vec![keyword], "{text:?}");
        }
        assert!(matcher.find_all("myenv, rmrf, apikey").is_empty(), "`.env` is ` env`, which `myenv` does not hold");
        assert!(KeywordMatcher::new(["-", "_ . /", "\u{2800}"]).is_empty(), "blank keywords are dropped");
    }

    #[test]
    fn configured_keywords_are_normalised_too() {
        let matcher = KeywordMatcher::new(["  DROP  Table ", "ｓｅｃｒｅｔ", "pass\u{200B}word"]);
        assert_eq!(
            matcher.find_all("drop table; secret password"),
            vec!["  DROP  Table ".trim(), "ｓｅｃｒｅｔ", "pass\u{200B}word"]
        );
        let greek = KeywordMatcher::new(["ΗΝΥ"]);
        for text in ["ηνυ", "ΗΝΥ", "Ηνυ", "hnu", "nvu"] {
            assert_eq!(greek.find_all(text), vec!["ΗΝΥ"], "{text:?}: either case of a Greek keyword");
        }
    }

    #[test]
    fn arguments_are_matched_string_by_string_and_joined() {
        let matcher = KeywordMatcher::new(["drop table", "secret key"]);
        let arguments = |value: Value| match value {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let check = |value: Value| {
            let args = arguments(value);
            matcher.argument_violations(&Value::Object(args.clone()).to_string(), &args).len()
        };
        assert_eq!(check(json!({"a": "drop", "b": "table"})), 1, "split over two arguments");
        assert_eq!(check(json!({"q": {"list": ["x", "drop"], "n": 3, "t": "table"}})), 1, "nested, in order");
        assert_eq!(check(json!({"text": "drop\ttable"})), 1, "JSON escapes the tab; the value holds it");
        assert_eq!(check(json!({"drop\ntable": 1})), 1, "keys are strings too");
        assert_eq!(check(json!({"a": "drop", "b": "", "c": "table"})), 1);
        assert_eq!(check(json!({"a": "secret", "b": "key", "c": "drop"})), 1);
        assert_eq!(check(json!({"a": "table", "b": "drop"})), 0, "joined in order");
        assert_eq!(check(json!({"a": "drop", "n": 1})), 0);
        assert_eq!(check(json!({})), 0);
        let mut deep = json!("drop table");
        for _ in 0..200 {
            deep = json!([deep]);
        }
        assert_eq!(matcher.argument_violations("", &arguments(json!({"deep": deep}))).len(), 1, "deeply nested");
    }

    #[test]
    fn ascii_keywords_are_found_in_non_ascii_text_without_folding_and_through_folding_to_ascii() {
        let matcher = KeywordMatcher::new(["drop table", "kill"]);
        assert_eq!(matcher.find_all("café: DROP Table users; üs"), vec!["drop table"]);
        assert_eq!(matcher.find_all("\u{212A}ILL the process, café"), vec!["kill"], "KELVIN SIGN folds to k");
        assert!(matcher.find_all("école élève").is_empty());
    }

    #[test]
    fn matches_ignoring_ascii_case() {
        let matcher = KeywordMatcher::new(["DROP TABLE", "secret"]);
        assert_eq!(matcher.find_all("please drop table users"), vec!["DROP TABLE"]);
        assert_eq!(matcher.find_all("{\"q\":\"SeCrEt\"}"), vec!["secret"]);
        assert!(matcher.find_all("drop the table").is_empty());
    }

    #[test]
    fn matches_ignoring_non_ascii_case() {
        let matcher = KeywordMatcher::new(["ÉCOLE", "straße", "ΟΔΟΣ"]);
        assert_eq!(matcher.find_all("une école ici"), vec!["ÉCOLE"]);
        assert_eq!(matcher.find_all("DIE STRAßE"), vec!["straße"]);
        assert_eq!(matcher.find_all("στην οδος"), vec!["ΟΔΟΣ"]);
        assert_eq!(matcher.find_all("στην ΟΔΟΣ"), vec!["ΟΔΟΣ"]);
    }

    #[test]
    fn ascii_keyword_found_in_non_ascii_text() {
        let matcher = KeywordMatcher::new(["password"]);
        assert_eq!(matcher.find_all("le PASSWORD est « 1234 » — né"), vec!["password"]);
    }

    #[test]
    fn reports_distinct_keywords_in_order_of_first_occurrence() {
        let matcher = KeywordMatcher::new(["beta", "alpha", "gamma"]);
        assert_eq!(matcher.find_all("alpha beta ALPHA beta alpha"), vec!["alpha", "beta"]);
    }

    #[test]
    fn reports_keywords_nested_in_other_keywords() {
        let matcher = KeywordMatcher::new(["drop table", "drop", "table"]);
        assert_eq!(matcher.find_all("DROP TABLE x"), vec!["drop table", "drop", "table"]);
    }

    #[test]
    fn trims_and_ignores_blank_keywords() {
        let matcher = KeywordMatcher::new(["", "   ", "\t\n"]);
        assert!(matcher.is_empty());
        assert!(matcher.find_all("anything at all").is_empty());
        let matcher = KeywordMatcher::new(["  rm -rf  ", ""]);
        assert!(!matcher.is_empty());
        assert_eq!(matcher.find_all("run RM -RF /"), vec!["rm -rf"]);
        assert!(matcher.find_all("").is_empty());
    }

    #[test]
    fn duplicate_keywords_are_reported_once() {
        let matcher = KeywordMatcher::new(["Secret", "secret", "SECRET "]);
        assert_eq!(matcher.find_all("a secret"), vec!["Secret"]);
    }

    #[test]
    fn violations_name_the_keyword_and_detector() {
        let matcher = KeywordMatcher::new(["drop table"]);
        let violations = matcher.violations("DROP TABLE users; drop table x");
        assert_eq!(
            violations,
            vec![Violation {
                kind: "keyword_detector".to_owned(),
                detector: "custom_keyword".to_owned(),
                message: "blocked keyword \"drop table\" found".to_owned(),
            }]
        );
        assert!(matcher.violations("select 1").is_empty());
        let json = serde_json::to_value(&violations[0]).expect("a violation serialises");
        assert_eq!(json["type"], "keyword_detector");
    }

    #[test]
    fn many_keywords_on_a_large_text() {
        let keywords: Vec<String> = (0..2000).map(|i| format!("kw{i}x")).collect();
        let matcher = KeywordMatcher::new(&keywords);
        let mut text = "lorem ipsum dolor sit amet ".repeat(40_000);
        text.push_str("KW1999X and kw7x");
        assert_eq!(matcher.find_all(&text), vec!["kw1999x", "kw7x"]);
    }

    #[test]
    fn is_send_sync_and_clone() {
        fn assert_traits<T: Send + Sync + Clone + std::fmt::Debug>() {}
        assert_traits::<KeywordMatcher>();
    }

    proptest! {
        #[test]
        fn never_panics(keywords in prop::collection::vec(any::<String>(), 0..5), text in any::<String>()) {
            let matcher = KeywordMatcher::new(&keywords);
            let found = matcher.find_all(&text);
            prop_assert!(found.len() <= keywords.len());
        }

        #[test]
        fn embedded_keyword_is_found(
            keywords in prop::collection::vec("[a-zA-Z]{1,6}( [a-zA-Z]{1,6})?", 1..6),
            pick in any::<prop::sample::Index>(),
            flips in prop::collection::vec(any::<bool>(), 16),
            prefix in any::<String>(),
            suffix in any::<String>(),
        ) {
            let matcher = KeywordMatcher::new(&keywords);
            let keyword = pick.get(&keywords);
            let mixed: String = keyword
                .chars()
                .zip(flips.iter().cycle())
                .map(|(c, flip)| if *flip { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() })
                .collect();
            // Spaces around: a combining mark right after the keyword would make another letter of its last one.
            let text = format!("{prefix} {mixed} {suffix}");
            let found = matcher.find_all(&text);
            prop_assert!(
                found.iter().any(|k| k.eq_ignore_ascii_case(keyword)),
                "{keyword:?} not found in {text:?}: {found:?}"
            );
        }

        #[test]
        fn text_without_keyword_characters_is_never_flagged(
            keywords in prop::collection::vec("[a-mA-M]{1,8}", 1..6),
            text in "[n-zN-Z0-9 ,.!?éßΣΩ€\n]{0,200}",
        ) {
            let matcher = KeywordMatcher::new(&keywords);
            prop_assert!(matcher.find_all(&text).is_empty());
            prop_assert!(matcher.violations(&text).is_empty());
        }
    }
}
