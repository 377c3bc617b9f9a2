//! The normal form keyword matching compares (contract 13): text spelled around a keyword is the keyword.
//!
//! A keyword and every text it is searched in pass through the same steps: default-ignorable code points removed
//! (zero-width characters, soft hyphen, bidi controls, tag characters, variation selectors, Hangul fillers), Unicode
//! NFKC (fullwidth and other compatibility letters to plain ones, no-break and other spaces to U+0020), case folding
//! (lowercase, final sigma to sigma, `ß` to `ss`), Greek and Cyrillic letters that look like Latin ones mapped to
//! those, and every run of whitespace made one space. The result only feeds the matcher: the text forwarded to the
//! upstream is never altered.
//!
//! [`for_search`] normalises a text to be searched. Most texts are ASCII, and ASCII text needs nothing but whitespace
//! collapsing, usually not even that, so it comes back borrowed: ASCII letters keep their case there because the
//! matcher compares ASCII case-insensitively. So does other text that the steps would leave as it is (accented
//! lowercase letters, in NFKC); the rest takes the full path, where the NFKC quick check spares the full normalisation
//! for the common text that is already in NFKC. [`spellings`] normalises a keyword into every form
//! its own letters can take: the look-alike table depends on case (capital `Η` looks like `H`, small `η` like `n`), so
//! a Greek or Cyrillic keyword gets one form per case spelling of such letters and still matches in either case.

use std::borrow::Cow;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

use crate::unicode::is_default_ignorable;

/// At most this many forms per keyword; past it, the letters left keep the form they are written in.
const MAX_SPELLINGS: usize = 16;

/// The normal form of `text` for searching, ASCII letters in their own case. Borrowed when `text` is ASCII without a
/// run of whitespace to collapse, which is the common case and costs one read of the text.
pub fn for_search(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        if !ascii_needs_collapsing(text.as_bytes()) {
            return Cow::Borrowed(text);
        }
        let mut folder = Folder::new(text.len(), Case::KeepAscii);
        text.chars().for_each(|c| folder.push(c));
        return Cow::Owned(folder.out);
    }
    if is_already_normal(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(fold(text, Case::Fold))
}

/// Text the steps leave as it is but for ASCII case: no whitespace run to collapse, in NFKC, and every non-ASCII
/// character one that folding keeps (a lowercase letter that is neither hidden, a space nor a look-alike, such as the
/// `é` and `ü` of ordinary European text). Two reads of the text spare most of it a folded copy.
fn is_already_normal(text: &str) -> bool {
    !ascii_needs_collapsing(text.as_bytes())
        && text.chars().all(|c| c.is_ascii() || kept_by_folding(c))
        && is_nfkc_quick(text.chars()) == IsNormalized::Yes
}

fn kept_by_folding(c: char) -> bool {
    let mut lower = c.to_lowercase();
    lower.next() == Some(c)
        && lower.next().is_none()
        && !is_default_ignorable(c)
        && !c.is_whitespace()
        && latin_look_alike(c).is_none()
        && !matches!(c, 'ς' | 'ß')
}

/// The full normal form of `text`: ASCII letters lowercased too, leading and trailing space removed.
pub fn normalise(text: &str) -> String {
    let folded = fold(text, Case::Fold);
    let trimmed = folded.trim_matches(' ');
    if trimmed.len() == folded.len() { folded } else { trimmed.to_owned() }
}

/// Every normal form `keyword` can take when its letters are written in another case; the first is
/// [`normalise`]`(keyword)`. Empty when the keyword is nothing but space and ignorable code points.
pub fn spellings(keyword: &str) -> Vec<String> {
    if keyword.is_ascii() {
        // ASCII letters look alike in both cases: one form (the usual keyword, and a matcher is built per call).
        let normal = normalise(keyword);
        return if normal.is_empty() { Vec::new() } else { vec![normal] };
    }
    let mut characters = Vec::with_capacity(keyword.len());
    for_each_visible_nfkc(keyword, |c| characters.push(c));
    let mut forms = vec![String::new()];
    for c in characters {
        // The forms of this one character: as written, in capitals, in small letters (duplicates dropped).
        let mut options: Vec<String> = Vec::with_capacity(3);
        for variant in [c.to_string(), c.to_uppercase().collect(), c.to_lowercase().collect()] {
            let mut folder = Folder::new(variant.len(), Case::Fold);
            variant.chars().for_each(|v| folder.push(v));
            if !options.contains(&folder.out) {
                options.push(folder.out);
            }
        }
        if options.len() > 1 && forms.len() * options.len() <= MAX_SPELLINGS {
            forms = forms.iter().flat_map(|form| options.iter().map(move |option| format!("{form}{option}"))).collect();
        } else if let Some(as_written) = options.first() {
            forms.iter_mut().for_each(|form| form.push_str(as_written));
        }
    }
    let mut spellings: Vec<String> = Vec::with_capacity(forms.len());
    for form in forms {
        // Each character was folded on its own: runs of space across them are collapsed here.
        let mut folder = Folder::new(form.len(), Case::Fold);
        form.chars().for_each(|c| folder.push(c));
        let trimmed = folder.out.trim_matches(' ');
        if !trimmed.is_empty() && !spellings.iter().any(|s| s == trimmed) {
            spellings.push(trimmed.to_owned());
        }
    }
    spellings
}

/// Whether ASCII letters are lowercased too (keywords) or left to the matcher (texts to search).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Fold,
    KeepAscii,
}

/// Hands `f` the characters of `text` without default-ignorable code points, in NFKC. They are removed before NFKC so
/// that one between a letter and its accent does not keep the two from composing.
fn for_each_visible_nfkc(text: &str, f: impl FnMut(char)) {
    let visible = || text.chars().filter(|c| !is_default_ignorable(*c)).map(common_compatibility_form);
    if is_nfkc_quick(visible()) == IsNormalized::Yes {
        visible().for_each(f);
    } else {
        visible().nfkc().for_each(f);
    }
}

/// The NFKC form of the compatibility characters common in ordinary text, taken before the quick check so that a text
/// holding them does not need the full normalisation: fullwidth ASCII (CJK text is full of it) and the spaces NFKC
/// makes U+0020. Replacing a character with its compatibility decomposition is NFKC's own first step, so the result is
/// the same.
fn common_compatibility_form(c: char) -> char {
    match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(u32::from(c) - 0xFEE0).unwrap_or(c),
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        _ => c,
    }
}

fn fold(text: &str, case: Case) -> String {
    let mut folder = Folder::new(text.len(), case);
    for_each_visible_nfkc(text, |c| folder.push(c));
    folder.out
}

/// A run of whitespace that is not one single space: the only change ASCII text can need for searching.
fn ascii_needs_collapsing(bytes: &[u8]) -> bool {
    let mut after_space = false;
    for &b in bytes {
        match b {
            b' ' if after_space => return true,
            b' ' => after_space = true,
            b'\t' | b'\n' | 0x0B | 0x0C | b'\r' => return true,
            _ => after_space = false,
        }
    }
    false
}

/// The per-character steps, after NFKC: ignorable code points dropped (NFKC can make one, such as the Hangul filler),
/// look-alikes mapped, case folded, whitespace runs collapsed.
struct Folder {
    out: String,
    case: Case,
    after_space: bool,
}

impl Folder {
    fn new(capacity: usize, case: Case) -> Self {
        Self { out: String::with_capacity(capacity), case, after_space: false }
    }

    fn push(&mut self, c: char) {
        if c.is_ascii() {
            if c.is_ascii_whitespace() || c == '\u{0B}' {
                self.space();
            } else {
                self.after_space = false;
                self.out.push(if self.case == Case::Fold { c.to_ascii_lowercase() } else { c });
            }
            return;
        }
        if is_default_ignorable(c) {
            return;
        }
        if c.is_whitespace() {
            self.space();
            return;
        }
        self.after_space = false;
        if let Some(latin) = latin_look_alike(c) {
            self.out.push(latin);
            return;
        }
        match c {
            'ς' => self.out.push('σ'),
            'ß' | 'ẞ' => self.out.push_str("ss"),
            _ => self.out.extend(c.to_lowercase()),
        }
    }

    fn space(&mut self) {
        if !self.after_space {
            self.out.push(' ');
            self.after_space = true;
        }
    }
}

/// The lowercase Latin letter a Greek or Cyrillic letter looks like, in the case it is written in (after NFKC, so the
/// mathematical and other compatibility forms of these letters are covered too; the lunate sigmas, which look like
/// `c`, are not here because NFKC makes them sigmas).
fn latin_look_alike(c: char) -> Option<char> {
    // Greek letters first, then Cyrillic ones, by the Latin letter they look like.
    let latin = match c {
        'Α' | 'α' | 'А' | 'а' => 'a',
        'Β' | 'В' | 'в' => 'b',
        'С' | 'с' => 'c',
        'Ԁ' | 'ԁ' => 'd',
        'Ε' | 'ε' | 'Е' | 'е' => 'e',
        'Η' | 'Н' | 'н' | 'Һ' | 'һ' => 'h',
        'Ι' | 'ι' | 'І' | 'і' | 'Ӏ' => 'i',
        'Ϳ' | 'ϳ' | 'Ј' | 'ј' => 'j',
        'Κ' | 'κ' | 'К' | 'к' => 'k',
        'ӏ' => 'l',
        'Μ' | 'М' | 'м' => 'm',
        'Ν' | 'η' | 'п' => 'n',
        'Ο' | 'ο' | 'О' | 'о' => 'o',
        'Ρ' | 'ρ' | 'Р' | 'р' => 'p',
        'Ԛ' | 'ԛ' => 'q',
        'г' => 'r',
        'Ѕ' | 'ѕ' => 's',
        'Τ' | 'τ' | 'Т' | 'т' => 't',
        'υ' => 'u',
        'ν' => 'v',
        'Ԝ' | 'ԝ' => 'w',
        'Χ' | 'χ' | 'Х' | 'х' => 'x',
        'Υ' | 'γ' | 'У' | 'у' | 'Ү' | 'ү' => 'y',
        'Ζ' => 'z',
        _ => return None,
    };
    Some(latin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn search(text: &str) -> String {
        for_search(text).to_lowercase()
    }

    #[test]
    fn ascii_text_without_runs_of_whitespace_is_borrowed_as_it_is() {
        assert!(matches!(for_search("Drop Table users"), Cow::Borrowed("Drop Table users")));
        assert!(matches!(for_search(""), Cow::Borrowed("")));
        assert_eq!(for_search("Drop  Table"), "Drop Table");
        assert_eq!(for_search("drop\ttable\r\n\x0B\x0Cx"), "drop table x");
    }

    #[test]
    fn whitespace_of_every_kind_is_one_space() {
        for space in ["\u{00A0}", "\t", "\n", "  ", "\u{2003}", "\u{3000}", "\u{202F}", " \u{00A0}\t\n ", "\u{2028}"] {
            assert_eq!(search(&format!("drop{space}table")), "drop table", "{space:?}");
        }
        assert_eq!(normalise("  Drop \u{00A0} Table\n"), "drop table");
    }

    #[test]
    fn default_ignorable_code_points_are_removed() {
        for hidden in ["\u{200B}", "\u{200C}", "\u{200D}", "\u{2060}", "\u{FEFF}", "\u{00AD}", "\u{202E}", "\u{2066}"] {
            assert_eq!(search(&format!("dr{hidden}op table")), "drop table", "{hidden:?}");
        }
        let tagged: String = "drop".chars().flat_map(|c| [c, '\u{E0041}']).chain(" table\u{E007F}".chars()).collect();
        assert_eq!(search(&tagged), "drop table", "tag characters");
        assert_eq!(search("drop \u{200B} table"), "drop table", "a space either side of a hidden character");
        assert_eq!(search("dro\u{FE0F}p table"), "drop table", "variation selector");
    }

    #[test]
    fn nfkc_turns_compatibility_forms_into_plain_letters() {
        assert_eq!(search("ｄｒｏｐ　ｔａｂｌｅ"), "drop table", "fullwidth letters and ideographic space");
        assert_eq!(search("ＤＲＯＰ ＴＡＢＬＥ"), "drop table");
        assert_eq!(search("𝐝𝐫𝐨𝐩 𝕥𝕒𝕓𝕝𝕖"), "drop table", "mathematical letters");
        assert_eq!(search("ﬁle"), "file", "ligature");
        assert_eq!(search("\u{212A}ill"), "kill", "Kelvin sign");
        assert_eq!(search("e\u{0301}cole"), "école", "a combining accent composes");
        assert_eq!(search("e\u{200B}\u{0301}cole"), "école", "even across a hidden character");
    }

    #[test]
    fn the_shortcut_for_common_compatibility_forms_is_nfkc() {
        for c in ('\u{00A0}'..='\u{3000}').chain('\u{FF00}'..='\u{FF60}') {
            let shortcut = common_compatibility_form(c);
            if shortcut != c {
                assert_eq!(shortcut.to_string(), c.to_string().nfkc().collect::<String>(), "{c:?}");
            }
        }
        assert_eq!(search("Ａ\u{0301}"), "á", "a fullwidth letter still takes its accent");
    }

    #[test]
    fn ordinary_non_ascii_text_is_borrowed_too() {
        assert!(matches!(for_search("Un Café à Zürich"), Cow::Borrowed(_)), "ASCII case is the matcher's");
        for changed in ["CAFÉ", "café\u{00A0}x", "ca\u{200B}fé", "café  x", "cafe\u{0301}", "drοp", "ｃａｆé", "οδος"]
        {
            assert!(matches!(for_search(changed), Cow::Owned(_)), "{changed:?}");
        }
    }

    proptest! {
        /// The shortcuts (borrowed text) give what the full path gives, but for ASCII case.
        #[test]
        fn shortcuts_agree_with_the_full_path(
            text in prop_oneof![
                any::<String>(),
                "[a-zA-Z \t\néüßςΣΟοАаÉ\u{00A0}\u{200B}\u{0301}\u{FF41}]{0,40}",
            ],
        ) {
            prop_assert_eq!(for_search(&text).to_ascii_lowercase(), fold(&text, Case::Fold));
        }
    }

    #[test]
    fn case_is_folded() {
        assert_eq!(normalise("DROP Table"), "drop table");
        assert_eq!(normalise("ÉCOLE"), "école");
        assert_eq!(normalise("STRAẞE"), normalise("straße"));
        assert_eq!(normalise("Straße"), "strasse");
        assert_eq!(normalise("ΟΔΟΣ"), normalise("οδος"));
        assert_eq!(for_search("Drop"), "Drop", "ASCII text keeps its case: the matcher ignores ASCII case");
        assert_eq!(for_search("ÉCOLE Drop"), "école drop");
    }

    #[test]
    fn greek_and_cyrillic_look_alikes_are_latin() {
        assert_eq!(search("drοp table"), "drop table", "Greek omicron");
        assert_eq!(search("drор tаblе"), "drop table", "Cyrillic o, p, a, e");
        assert_eq!(search("ΤΑΒΙΕ"), "tabie", "Greek capitals");
        assert_eq!(search("DRОР ТАВLЕ"), "drop table", "Cyrillic capitals");
        assert_eq!(search("ѕесrеt"), "secret");
        assert_eq!(search("ηνυ ΗΝΥ"), "nvu hny", "the look depends on the case");
        assert_eq!(search("δλπ"), "δλπ", "letters that look like no Latin one stay");
    }

    #[test]
    fn every_look_alike_maps_to_a_lowercase_ascii_letter_and_survives_nfkc() {
        for c in '\u{0370}'..='\u{052F}' {
            if let Some(latin) = latin_look_alike(c) {
                assert!(latin.is_ascii_lowercase(), "{c:?}");
                assert!(unicode_normalization::is_nfkc(&c.to_string()), "{c:?} never reaches the table");
            }
        }
    }

    #[test]
    fn spellings_cover_both_cases_of_case_dependent_look_alikes_up_to_a_bound() {
        assert_eq!(spellings("  Drop  TABLE "), vec!["drop table"]);
        assert_eq!(spellings("ΗΝ"), vec!["hn", "hv", "nn", "nv"]);
        for text in ["ΗΝ", "ην", "Ην", "ηΝ"] {
            assert!(spellings("ην").contains(&normalise(text)), "{text}");
        }
        assert!(spellings("\u{200B} \u{00AD}").is_empty());
        assert!(spellings("").is_empty());
        let long = spellings("ηνυηνυηνυηνυηνυ");
        assert_eq!((long.len(), long[0].as_str()), (MAX_SPELLINGS, "nvunvunvunvunvu"), "bounded, as written first");
    }

    #[test]
    fn normalising_twice_changes_nothing() {
        for text in ["Drop\u{00A0}\u{00A0}TABLE", "ｄｒｏｐ", "drοp", "Straße", "e\u{0301}", "a \u{200B} b"] {
            let once = normalise(text);
            assert_eq!(normalise(&once), once, "{text:?}");
        }
    }
}
