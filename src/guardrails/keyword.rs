//! The `custom_keyword` provider (contract 5): a case-insensitive search for blocked keywords in a text.
//!
//! The keywords come from the guardrail config and are compiled once, when [`KeywordMatcher::new`] runs, into one
//! Aho-Corasick automaton; a check then reads the text in a single pass whatever the number of keywords. The stage
//! that runs the input check hands it the JSON of the arguments, the output check hands it the upstream's text, and
//! each keyword found becomes one [`Violation`]. Only which keywords occur matters, never where, so the text may be
//! case-folded into a new string when it is not ASCII (folding can change byte lengths; offsets are never reported).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use super::Violation;

/// The blocked keywords of one guardrail config, ready to search many texts. Cheap to clone (the automaton is shared).
#[derive(Debug, Clone)]
pub struct KeywordMatcher {
    /// The keywords as configured (trimmed, duplicates by folded form removed); pattern `i` of the automaton is
    /// `keywords[i]`.
    keywords: Vec<String>,
    /// Folded keywords, kept for the rare fallback when the automaton cannot be built.
    folded: Vec<String>,
    /// `None` when there is nothing to search for, or in the fallback case.
    automaton: Option<AhoCorasick>,
    /// Every keyword is ASCII: then the ASCII-case-insensitive automaton finds them in any text as it is, because
    /// folding a non-ASCII character never yields an ASCII one (see [`FOLDS_TO_ASCII`] for the two that do).
    ascii_keywords: bool,
}

/// The characters whose lowercase form contains ASCII letters (KELVIN SIGN to `k`, LATIN CAPITAL LETTER I WITH DOT
/// ABOVE to `i` and a combining dot): a text holding one takes the folding path, so they cannot hide a keyword.
const FOLDS_TO_ASCII: [char; 2] = ['\u{212A}', '\u{0130}'];

impl KeywordMatcher {
    /// Compiles `keywords`. Each is trimmed; empty and whitespace-only entries are dropped, because an empty keyword
    /// would match every text and block every call. Keywords that fold to the same text are kept once (first spelling).
    pub fn new<I, S>(keywords: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut configured = Vec::new();
        let mut folded: Vec<String> = Vec::new();
        for keyword in keywords {
            let trimmed = keyword.as_ref().trim();
            if trimmed.is_empty() {
                continue;
            }
            let fold = case_fold(trimmed);
            if !folded.contains(&fold) {
                configured.push(trimmed.to_owned());
                folded.push(fold);
            }
        }
        // ASCII case-insensitivity lets an ASCII text be searched as it is, without a folded copy: for ASCII text,
        // folding is exactly ASCII lowercasing, which the automaton then does for free.
        let automaton = if folded.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new().ascii_case_insensitive(true).match_kind(MatchKind::Standard).build(&folded).ok()
        };
        let ascii_keywords = folded.iter().all(|k| k.is_ascii());
        Self { keywords: configured, folded, automaton, ascii_keywords }
    }

    /// True when no keyword is configured: every text passes.
    pub fn is_empty(&self) -> bool {
        self.keywords.is_empty()
    }

    /// The distinct configured keywords occurring in `text`, in order of first occurrence, spelled as configured.
    pub fn find_all(&self, text: &str) -> Vec<String> {
        if self.is_empty() {
            return Vec::new();
        }
        let folded_text;
        // Folding costs most of the time on non-ASCII text; with ASCII keywords it is needed only for the few
        // characters that fold to ASCII.
        let haystack = if text.is_ascii() || (self.ascii_keywords && !text.contains(FOLDS_TO_ASCII)) {
            text
        } else {
            folded_text = case_fold(text);
            folded_text.as_str()
        };
        // (position of first occurrence, keyword index)
        let mut first_seen: Vec<(usize, usize)> = Vec::new();
        match &self.automaton {
            Some(automaton) => {
                let mut seen = vec![false; self.keywords.len()];
                // Overlapping search, so that "drop" is still reported inside "drop table". A keyword's matches come
                // in order of end and so, its length being fixed, of start: the first one reported is its first.
                for found in automaton.find_overlapping_iter(haystack) {
                    let index = found.pattern().as_usize();
                    if !seen[index] {
                        seen[index] = true;
                        first_seen.push((found.start(), index));
                        if first_seen.len() == self.keywords.len() {
                            break;
                        }
                    }
                }
            }
            // Only reached when the automaton could not be built (far beyond any sane keyword list): slower, but
            // still correct, because a keyword check must not silently pass everything.
            None => {
                let lowered = haystack.to_ascii_lowercase();
                for (index, keyword) in self.folded.iter().enumerate() {
                    if let Some(position) = lowered.find(keyword.as_str()) {
                        first_seen.push((position, index));
                    }
                }
            }
        }
        first_seen.sort_unstable();
        first_seen.into_iter().map(|(_, index)| self.keywords[index].clone()).collect()
    }

    /// One `keyword_detector` violation per keyword found in `text`.
    pub fn violations(&self, text: &str) -> Vec<Violation> {
        self.find_all(text)
            .into_iter()
            .map(|keyword| Violation {
                kind: "keyword_detector".to_owned(),
                detector: "custom_keyword".to_owned(),
                message: format!("blocked keyword {keyword:?} found"),
            })
            .collect()
    }
}

/// Simple case folding: each character lowercased on its own (no context rules), and the final sigma folded into
/// the ordinary one, so that "ΟΔΟΣ", "οδος" and "οδοσ" all compare equal.
fn case_fold(text: &str) -> String {
    text.chars().flat_map(char::to_lowercase).map(|c| if c == 'ς' { 'σ' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            let text = format!("{prefix}{mixed}{suffix}");
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
