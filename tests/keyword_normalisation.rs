//! Properties of keyword matching against spelling (contracts 13 and 14): a blocked phrase written with any mix of the
//! transformations an attacker has (capitals, other whitespace, separators, comments and blank fillers, hidden
//! characters, fullwidth and mathematical letters, Greek and Cyrillic look-alikes, a split over several arguments) is
//! still found; a keyword configured with capitals or extra space still matches; ordinary text without a blocked
//! phrase is never flagged. The unit tests of the normaliser itself are in `src/guardrails/normalise.rs`.

use mcpgw::guardrails::keyword::KeywordMatcher;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Look-alikes of a lowercase Latin letter, written independently of the gateway's own table: Cyrillic and Greek
/// letters, small and capital, that a reader takes for it.
fn look_alikes(letter: char) -> &'static [char] {
    match letter {
        'a' => &['а', 'А', 'α', 'Α'],
        'b' => &['В', 'Β'],
        'c' => &['с', 'С'],
        'e' => &['е', 'Е', 'Ε'],
        'h' => &['һ', 'Н', 'Η'],
        'i' => &['і', 'І', 'Ι'],
        'j' => &['ј', 'Ј'],
        'k' => &['к', 'К', 'Κ', 'κ'],
        'm' => &['М', 'Μ'],
        'n' => &['Ν'],
        'o' => &['о', 'О', 'ο', 'Ο'],
        'p' => &['р', 'Р', 'ρ', 'Ρ'],
        's' => &['ѕ', 'Ѕ'],
        't' => &['Т', 'Τ'],
        'x' => &['х', 'Х', 'χ', 'Χ'],
        'y' => &['у', 'У', 'Υ'],
        'z' => &['Ζ'],
        _ => &[],
    }
}

/// Characters that show nothing: zero-width space, non-joiner and joiner, word joiner, byte order mark, soft hyphen,
/// bidi controls, a variation selector, tag characters.
const HIDDEN: [char; 12] = [
    '\u{200B}',
    '\u{200C}',
    '\u{200D}',
    '\u{2060}',
    '\u{FEFF}',
    '\u{00AD}',
    '\u{202E}',
    '\u{2066}',
    '\u{200F}',
    '\u{FE0F}',
    '\u{E0041}',
    '\u{E007F}',
];

/// What may stand for the one space between two words of a phrase: whitespace (contract 13), separators, comments
/// and blank fillers (contract 14).
const SPACES: [&str; 20] = [
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\u{00A0}",
    "\u{3000}",
    "\u{2003}",
    " \t\u{00A0}\n ",
    "\u{202F}",
    "_",
    "-",
    ".",
    "/",
    "/**/",
    "/* a comment */",
    "\u{2800}",
    "\u{3164}",
    "\u{180E}",
    " _\u{FFA0}-/**/ ",
];

/// One way of writing one letter.
fn letter_spelling(letter: char, how: u8, pick: usize) -> String {
    match how % 5 {
        0 => letter.to_string(),
        1 => letter.to_ascii_uppercase().to_string(),
        // Fullwidth, in either case.
        2 => {
            let base = if pick.is_multiple_of(2) { letter } else { letter.to_ascii_uppercase() };
            char::from_u32(u32::from(base) + 0xFEE0).map_or_else(|| letter.to_string(), String::from)
        }
        // Mathematical bold small letter.
        3 => char::from_u32(0x1D41A + (u32::from(letter) - u32::from('a')))
            .map_or_else(|| letter.to_string(), String::from),
        _ => {
            let others = look_alikes(letter);
            if others.is_empty() { letter.to_string() } else { others[pick % others.len()].to_string() }
        }
    }
}

/// `phrase` (lowercase ASCII words separated by single spaces) written with the transformations picked by `choices`.
fn disguise(phrase: &str, choices: &[(u8, usize, Option<usize>)]) -> String {
    let mut out = String::new();
    for (c, (how, pick, hidden)) in phrase.chars().zip(choices.iter().cycle()) {
        if c == ' ' {
            out.push_str(SPACES[pick % SPACES.len()]);
        } else {
            out.push_str(&letter_spelling(c, *how, *pick));
        }
        if let Some(h) = hidden {
            out.push(HIDDEN[h % HIDDEN.len()]);
        }
    }
    out
}

fn choices() -> impl Strategy<Value = Vec<(u8, usize, Option<usize>)>> {
    prop::collection::vec((any::<u8>(), any::<usize>(), prop::option::weighted(0.3, any::<usize>())), 1..40)
}

/// A phrase of one to three lowercase words.
fn phrase() -> impl Strategy<Value = String> {
    "[a-z]{2,8}( [a-z]{2,8}){0,2}"
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The input check's view of `arguments`.
fn blocks_arguments(matcher: &KeywordMatcher, arguments: &Map<String, Value>) -> bool {
    !matcher.argument_violations(&Value::Object(arguments.clone()).to_string(), arguments).is_empty()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_disguised_phrase_is_still_found(
        phrase in phrase(),
        choices in choices(),
        prefix in "[a-z0-9 ,.]{0,20}",
        suffix in "[a-z0-9 ,.]{0,20}",
    ) {
        let matcher = KeywordMatcher::new(["unrelated words", phrase.as_str()]);
        let text = format!("{prefix} {} {suffix}", disguise(&phrase, &choices));
        prop_assert_eq!(matcher.find_all(&text), vec![phrase.clone()], "{:?}", text);
        // In an argument, on input.
        let arguments = object(json!({"query": text, "n": 1}));
        prop_assert!(blocks_arguments(&matcher, &arguments), "{:?}", arguments);
    }

    #[test]
    fn a_phrase_split_over_arguments_is_found(phrase in phrase(), choices in choices(), nested in any::<bool>()) {
        let matcher = KeywordMatcher::new([phrase.as_str()]);
        let words: Vec<String> = phrase.split(' ').map(|word| disguise(word, &choices)).collect();
        let mut arguments = Map::new();
        for (i, word) in words.iter().enumerate() {
            let value = if nested && i % 2 == 1 { json!({"inner": [word]}) } else { json!(word) };
            arguments.insert(format!("arg{i}"), value);
        }
        prop_assert!(blocks_arguments(&matcher, &arguments), "{:?}", arguments);
    }

    #[test]
    fn a_keyword_configured_with_capitals_spaces_or_disguises_matches_plain_text(
        phrase in phrase(),
        choices in choices(),
    ) {
        let configured = format!("  {} ", disguise(&phrase, &choices));
        let matcher = KeywordMatcher::new([configured.as_str()]);
        prop_assert_eq!(matcher.find_all(&format!("say {phrase} now")), vec![configured.trim().to_owned()]);
    }

    #[test]
    fn ordinary_text_without_a_blocked_phrase_is_never_flagged(
        keywords in prop::collection::vec("[a-m]{2,8}( [a-m]{2,8})?", 1..6),
        // No letter a-m, nor anything that looks like one: other Latin letters, digits, punctuation, every kind of
        // space and hidden character, fullwidth n-z, accented letters, and look-alikes of n-z only.
        text in "[n-zN-Z0-9 ,.;:!?'()\t\n\u{00A0}\u{3000}\u{200B}\u{00AD}\u{202E}ｎ-ｚＮ-Ｚñøüß€日本пгтухѕονυτρχηγ]{0,200}",
    ) {
        let matcher = KeywordMatcher::new(&keywords);
        prop_assert!(matcher.find_all(&text).is_empty(), "{:?}", text);
        let arguments = object(json!({"a": text, "b": [text]}));
        prop_assert!(!blocks_arguments(&matcher, &arguments), "{:?}", arguments);
    }

    #[test]
    fn the_words_of_a_phrase_in_another_order_are_not_the_phrase(
        first in "[a-z]{2,8}",
        second in "[a-z]{2,8}",
        choices in choices(),
    ) {
        prop_assume!(first != second);
        let phrase = format!("{first} {second}");
        let matcher = KeywordMatcher::new([phrase.as_str()]);
        let text = format!("{} {}", disguise(&second, &choices), disguise(&first, &choices));
        prop_assert!(matcher.find_all(&text).is_empty(), "{:?}", text);
        let arguments = object(json!({"a": disguise(&second, &choices), "b": disguise(&first, &choices)}));
        prop_assert!(!blocks_arguments(&matcher, &arguments));
    }
}
