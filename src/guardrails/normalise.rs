//! The normal form keyword matching compares (contracts 13 and 14): text spelled around a keyword is the keyword.
//!
//! A keyword and every text it is searched in pass through the same steps:
//!
//! 1. comments `/*...*/` (whatever they hold) become one space, as SQL and C readers take them;
//! 2. default-ignorable code points are removed (zero-width characters, soft hyphen, bidi controls, tag characters,
//!    variation selectors);
//! 3. Unicode NFKC (fullwidth and other compatibility letters to plain ones);
//! 4. look-alikes become the letters they look like: first the Greek and Cyrillic letters of our own table, in the case
//!    they are written in, then every character whose confusable skeleton (Unicode TS #39, from the
//!    `unicode-security` crate) is made of ASCII characters becomes that skeleton (`ɑ` is `a`, Cherokee `Ꭰ` is `d`,
//!    `ı` is `i`), tried as written and again after case folding;
//! 5. case folding (lowercase, final sigma to sigma, `ß` to `ss`);
//! 6. every run of space is one space, where space is any White_Space character, the fillers that show as blank
//!    (Braille blank U+2800, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, the Mongolian vowel separator
//!    U+180E) and the separators `_`, `-`, `/` and `.` (so `drop_table`, `drop-table` and `drop/**/table` are all
//!    `drop table`).
//!
//! ASCII characters are never replaced by their skeleton: `0` stays `0` and `rn` stays `rn`, because ordinary text is
//! full of them; only characters outside ASCII are taken for the ASCII letters they look like. The result only feeds
//! the matcher: the text forwarded to the upstream is never altered.
//!
//! A comment can hide a keyword as well as split one: `/* drop table */` reads as nothing once comments are removed,
//! yet an upstream that is not SQL shows it. So a text holding a comment is also searched in the form that keeps what
//! comments hold ([`with_comments_kept`]), and a keyword written with a comment matches either form.
//!
//! [`for_search`] normalises a text to be searched. Most texts are ASCII, and ASCII text needs nothing but the spaces
//! (and comments) seen to, usually not even that, so it comes back borrowed: ASCII letters keep their case there
//! because the matcher compares ASCII case-insensitively. So does other text that the steps would leave as it is
//! (accented lowercase letters, in NFKC); the rest takes the full path, where the NFKC quick check spares the full
//! normalisation for the common text that is already in NFKC. [`spellings`] normalises a keyword into every form its
//! own letters can take: the look-alike table depends on case (capital `Η` looks like `H`, small `η` like `n`), so a
//! Greek or Cyrillic keyword gets one form per case spelling of such letters and still matches in either case.
//!
//! The work is linear in the text: a comment's end is searched for once from each comment's start, and once none is
//! left no later start searches again.

use std::borrow::Cow;
use std::sync::LazyLock;

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfkc_quick};

use crate::unicode::is_default_ignorable;

/// At most this many forms per keyword; past it, the letters left keep the form they are written in.
const MAX_SPELLINGS: usize = 16;

/// The normal form of `text` for searching, ASCII letters in their own case, comments removed. Borrowed when `text` is
/// ASCII without a separator or a run of whitespace, which is the common case and costs one read of the text.
pub fn for_search(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        if !ascii_needs_rewriting(text.as_bytes()) {
            return Cow::Borrowed(text);
        }
        return Cow::Owned(fold(text, Case::KeepAscii, Comments::Remove));
    }
    if is_already_normal(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(fold(text, Case::Fold, Comments::Remove))
}

/// The normal form of `text` for searching with what its comments hold kept (their `/` as spaces), or `None` when it
/// holds no comment: then [`for_search`] is the only form.
pub fn with_comments_kept(text: &str) -> Option<String> {
    if !has_comment(text) {
        return None;
    }
    let case = if text.is_ascii() { Case::KeepAscii } else { Case::Fold };
    Some(fold(text, case, Comments::Keep))
}

/// Text the steps leave as it is but for ASCII case: no separator or whitespace run to rewrite, in NFKC, and every
/// non-ASCII character one that folding keeps (a lowercase letter that is neither hidden, a space nor a look-alike,
/// such as the `é` and `ü` of ordinary European text). Two reads of the text spare most of it a folded copy.
fn is_already_normal(text: &str) -> bool {
    !ascii_needs_rewriting(text.as_bytes())
        && text.chars().all(|c| c.is_ascii() || kept_by_folding(c))
        && is_nfkc_quick(text.chars()) == IsNormalized::Yes
}

fn kept_by_folding(c: char) -> bool {
    let mut lower = c.to_lowercase();
    lower.next() == Some(c)
        && lower.next().is_none()
        && !is_blank(c)
        && latin_look_alike(c).is_none()
        && !may_have_ascii_skeleton(c)
        && !matches!(c, 'ς' | 'ß')
}

/// The normal form of a keyword: white space and hidden characters around it dropped, ASCII letters lowercased too.
/// Spaces that separators at its ends stand for are kept (`.env` is ` env`, which `myenv` does not hold).
pub fn normalise(text: &str) -> String {
    fold(text.trim_matches(is_blank), Case::Fold, Comments::Remove)
}

/// Every normal form `keyword` can take when its letters are written in another case, and, when it holds a comment,
/// with the comment kept as well; the first is [`normalise`]`(keyword)`. Empty when the keyword is nothing but space,
/// separators and ignorable code points (it would match every text).
pub fn spellings(keyword: &str) -> Vec<String> {
    let keyword = keyword.trim_matches(is_blank);
    let mut spellings = Vec::new();
    let without_comments = strip_comments(keyword);
    case_spellings(&without_comments, &mut spellings);
    if matches!(without_comments, Cow::Owned(_)) {
        case_spellings(keyword, &mut spellings);
    }
    spellings
}

/// The forms of `keyword` (comments already seen to) in every case of its case-dependent look-alikes, up to
/// [`MAX_SPELLINGS`], added to `spellings` unless already there or blank.
fn case_spellings(keyword: &str, spellings: &mut Vec<String>) {
    if keyword.is_ascii() {
        // ASCII letters look alike in both cases: one form (the usual keyword, and a matcher is built per call).
        add_spelling(spellings, fold(keyword, Case::Fold, Comments::Keep));
        return;
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
    for form in forms {
        // Each character was folded on its own: runs of space across them are collapsed here.
        let mut folder = Folder::new(form.len(), Case::Fold);
        form.chars().for_each(|c| folder.push(c));
        add_spelling(spellings, folder.out);
    }
}

fn add_spelling(spellings: &mut Vec<String>, form: String) {
    if !form.trim_matches(' ').is_empty() && !spellings.contains(&form) {
        spellings.push(form);
    }
}

/// Whether ASCII letters are lowercased too (keywords) or left to the matcher (texts to search).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Fold,
    KeepAscii,
}

/// Whether comments become one space (the usual form) or keep what they hold (the second form of a text with one).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Comments {
    Remove,
    Keep,
}

/// Hands `f` the characters of `text` without default-ignorable code points, in NFKC. They are removed before NFKC so
/// that one between a letter and its accent does not keep the two from composing. The blank fillers, default-ignorable
/// too, stay: they are spaces.
fn for_each_visible_nfkc(text: &str, f: impl FnMut(char)) {
    let visible = || text.chars().filter(|c| is_filler(*c) || !is_default_ignorable(*c)).map(common_compatibility_form);
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

fn fold(text: &str, case: Case, comments: Comments) -> String {
    let text = match comments {
        Comments::Remove => strip_comments(text),
        Comments::Keep => Cow::Borrowed(text),
    };
    let mut folder = Folder::new(text.len(), case);
    if text.is_ascii() {
        text.chars().for_each(|c| folder.push(c));
    } else {
        for_each_visible_nfkc(&text, |c| folder.push(c));
    }
    folder.out
}

/// `text` with every comment `/*...*/` made one space. A `/*` without a `*/` after it is no comment (and neither is
/// any later one, so the search stops there): each byte is read at most twice.
fn strip_comments(text: &str) -> Cow<'_, str> {
    let mut stripped: Option<String> = None;
    let mut copied = 0;
    let bytes = text.as_bytes();
    while let Some(open) = find_pair(&bytes[copied..], *b"/*").map(|at| copied + at) {
        let Some(close) = find_pair(&bytes[open + 2..], *b"*/").map(|at| open + 2 + at) else { break };
        let out = stripped.get_or_insert_with(|| String::with_capacity(text.len()));
        out.push_str(&text[copied..open]);
        out.push(' ');
        copied = close + 2;
    }
    match stripped {
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

fn has_comment(text: &str) -> bool {
    let bytes = text.as_bytes();
    find_pair(bytes, *b"/*").is_some_and(|open| find_pair(&bytes[open + 2..], *b"*/").is_some())
}

/// Where the two bytes `pair` first stand together in `bytes`: `memchr`'s vectorised search for the first byte,
/// without the set-up `str::find` pays for each search (about 3,800 instructions a guarded call, most texts being
/// short) or a byte-by-byte scan's cost on long ones.
fn find_pair(bytes: &[u8], pair: [u8; 2]) -> Option<usize> {
    memchr::memchr_iter(pair[0], bytes).find(|&at| bytes.get(at + 1) == Some(&pair[1]))
}

/// An ASCII character that counts as a space: whitespace and the separators `_`, `-`, `/`, `.`.
fn is_ascii_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b'_' | b'-' | b'/' | b'.')
}

/// A separator, or a run of whitespace that is not one single space: what ASCII text can need rewritten for
/// searching (a comment starts with a separator).
fn ascii_needs_rewriting(bytes: &[u8]) -> bool {
    let mut after_space = false;
    for &b in bytes {
        match b {
            b' ' if after_space => return true,
            b' ' => after_space = true,
            _ if is_ascii_space(b) => return true,
            _ => after_space = false,
        }
    }
    false
}

/// The per-character steps, after NFKC: ignorable code points dropped (NFKC can make one), look-alikes mapped, case
/// folded, spaces collapsed.
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
            self.push_ascii(c, self.case);
            return;
        }
        if is_filler(c) || c.is_whitespace() {
            self.space();
            return;
        }
        if is_default_ignorable(c) {
            return;
        }
        // As written first: the look of a letter depends on its case (Cherokee capitals look like Latin ones, their
        // small letters do not).
        if self.look_alike(c) {
            return;
        }
        match c {
            'ß' | 'ẞ' => self.out.push_str("ss"),
            _ => {
                // Then each folded character, as it is written in the keywords' normal form.
                let final_sigma = c == 'ς';
                for lower in c.to_lowercase() {
                    let lower = if final_sigma { 'σ' } else { lower };
                    if !self.look_alike(lower) {
                        self.kept(lower);
                    }
                }
                return;
            }
        }
        self.after_space = false;
    }

    /// Pushes what `c` looks like when it looks like Latin or ASCII characters; false when it does not.
    fn look_alike(&mut self, c: char) -> bool {
        if let Some(latin) = latin_look_alike(c) {
            self.push_ascii(latin, Case::Fold);
            return true;
        }
        match ascii_skeleton(c) {
            Some(skeleton) => {
                skeleton.as_str().chars().for_each(|s| self.push_ascii(s, Case::Fold));
                true
            }
            None => false,
        }
    }

    fn kept(&mut self, c: char) {
        self.after_space = false;
        self.out.push(c);
    }

    fn push_ascii(&mut self, c: char, case: Case) {
        if u8::try_from(c).is_ok_and(is_ascii_space) {
            self.space();
        } else {
            self.after_space = false;
            self.out.push(if case == Case::Fold { c.to_ascii_lowercase() } else { c });
        }
    }

    fn space(&mut self) {
        if !self.after_space {
            self.out.push(' ');
            self.after_space = true;
        }
    }
}

/// A character that shows as blank and counts as a space, though Unicode calls it default-ignorable rather than
/// White_Space: Braille blank, the Hangul fillers and the Mongolian vowel separator.
fn is_filler(c: char) -> bool {
    matches!(c, '\u{2800}' | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{180E}')
}

/// A character a keyword may be surrounded by without it mattering: space, filler or hidden.
fn is_blank(c: char) -> bool {
    c.is_whitespace() || is_filler(c) || is_default_ignorable(c)
}

/// The TS #39 skeleton of one non-ASCII character when it is made of ASCII characters only (at most
/// [`AsciiSkeleton::CAPACITY`] of them; empty for a character that shows nothing). `rn` in it is `m`, because `rn`
/// is the skeleton of `m` itself and we never take ASCII characters for their skeleton.
fn ascii_skeleton(c: char) -> Option<AsciiSkeleton> {
    if c.is_ascii() || !may_have_ascii_skeleton(c) {
        return None;
    }
    let mut skeleton = AsciiSkeleton::default();
    let mut buffer = [0; 4];
    for part in unicode_security::skeleton(c.encode_utf8(&mut buffer)) {
        let byte = u8::try_from(part).ok().filter(u8::is_ascii)?;
        if byte == b'n' && skeleton.len > 0 && skeleton.bytes[skeleton.len - 1] == b'r' {
            skeleton.bytes[skeleton.len - 1] = b'm';
        } else {
            *skeleton.bytes.get_mut(skeleton.len)? = byte;
            skeleton.len += 1;
        }
    }
    Some(skeleton)
}

/// An ASCII skeleton, without allocating.
#[derive(Default)]
struct AsciiSkeleton {
    bytes: [u8; AsciiSkeleton::CAPACITY],
    len: usize,
}

impl AsciiSkeleton {
    /// Longer skeletons (`(20)`, `rad/s`, abbreviations drawn in one character) are not letters anyone takes for a
    /// keyword's; they stay as they are.
    const CAPACITY: usize = 8;

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// Characters of the Basic Multilingual Plane whose skeleton may be ASCII, one bit each (8 KiB), found once by asking
/// the skeleton of each: so that text in other scripts, which has none, costs a bit test per character rather than a
/// skeleton (about 5 ms the first time, in an optimised build).
static BMP_ASCII_SKELETONS: LazyLock<Vec<u64>> = LazyLock::new(|| {
    let mut bits = vec![0u64; 0x10000 / 64];
    for code in 0x80..0x10000u32 {
        let Some(c) = char::from_u32(code) else { continue };
        let mut buffer = [0; 4];
        if unicode_security::skeleton(c.encode_utf8(&mut buffer)).all(|part| part.is_ascii()) {
            bits[code as usize / 64] |= 1 << (code % 64);
        }
    }
    bits
});

/// False when `c`'s skeleton is surely not ASCII; true may still be false (the other planes are not tabled).
fn may_have_ascii_skeleton(c: char) -> bool {
    let code = u32::from(c);
    if code >= 0x10000 {
        return true;
    }
    BMP_ASCII_SKELETONS.get(code as usize / 64).is_some_and(|word| word & (1 << (code % 64)) != 0)
}

/// The lowercase Latin letter a Greek or Cyrillic letter looks like, in the case it is written in (after NFKC, so the
/// mathematical and other compatibility forms of these letters are covered too; the lunate sigmas, which look like
/// `c`, are not here because NFKC makes them sigmas). Asked before the TS #39 skeleton, which takes some of these for
/// other letters (capital iota for `l`, where a reader of a lowercase keyword sees `i`).
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
        /// Normalising a normal form changes nothing, whatever the text.
        #[test]
        fn normalising_is_idempotent(text in any::<String>()) {
            let once = fold(&text, Case::Fold, Comments::Remove);
            prop_assert_eq!(fold(&once, Case::Fold, Comments::Remove), once.clone());
            let searched = for_search(&text).to_lowercase();
            prop_assert_eq!(for_search(&searched).to_lowercase(), searched);
        }

        /// The shortcuts (borrowed text) give what the full path gives, but for ASCII case.
        #[test]
        fn shortcuts_agree_with_the_full_path(
            text in prop_oneof![
                any::<String>(),
                "[a-zA-Z \t\n_./*éüßςΣΟοАаÉɑᎠ\u{00A0}\u{200B}\u{2800}\u{3164}\u{0301}\u{FF41}]{0,40}",
            ],
        ) {
            prop_assert_eq!(for_search(&text).to_ascii_lowercase(), fold(&text, Case::Fold, Comments::Remove));
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
    fn separators_and_comments_are_one_space() {
        for spelling in [
            "drop_table",
            "drop-table",
            "drop/table",
            "drop.table",
            "drop/**/table",
            "drop/* any thing, even drop table */table",
            "drop /**/ _-/. table",
            "drop\u{2800}table",
            "drop\u{3164}table",
            "drop\u{115F}table",
            "drop\u{1160}table",
            "drop\u{FFA0}table",
            "drop\u{180E}table",
            "drop\u{1680}table",
            "drop\u{2029}table",
            "drop\u{85}table",
            "drop\u{2010}table",
            "drop\u{FF3F}table",
            "DROP\u{2800}\u{3164} _TABLE",
        ] {
            assert_eq!(search(spelling), "drop table", "{spelling:?}");
            assert_eq!(normalise(spelling), "drop table", "{spelling:?}");
        }
        assert_eq!(search("a/*b"), "a *b", "no end: no comment");
        assert_eq!(search("a/*/b"), "a * b", "the `*` of `/*` does not end it");
        assert_eq!(search("a/*x*/b/*y"), "a b *y");
        assert_eq!(search("/**/"), " ");
        assert!(matches!(for_search("drop table"), Cow::Borrowed(_)));
        assert!(matches!(for_search("drop*table"), Cow::Borrowed(_)));
    }

    #[test]
    fn what_comments_hold_is_the_second_form() {
        assert_eq!(with_comments_kept("drop table"), None);
        assert_eq!(with_comments_kept("a/*b"), None, "not a comment");
        assert_eq!(with_comments_kept("/*Drop Table*/").as_deref(), Some(" *Drop Table* "));
        assert_eq!(with_comments_kept("/*ＤＲＯＰ table*/").as_deref(), Some(" *drop table* "));
        assert_eq!(search("/*drop table*/"), " ");
    }

    #[test]
    fn comments_cost_linear_time() {
        let started = std::time::Instant::now();
        for text in ["/*".repeat(200_000), "/*a*/".repeat(100_000), format!("{}*/", "/*".repeat(200_000))] {
            let _ = for_search(&text);
            let _ = with_comments_kept(&text);
            let _ = spellings(&text[..1000]);
        }
        // Generous, because tests run unoptimised; a quadratic search would take minutes.
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
    }

    #[test]
    fn keywords_are_normalised_by_the_same_steps_their_own_spelling_included() {
        assert_eq!(spellings("rm -rf"), vec!["rm rf"]);
        assert_eq!(spellings("api_key"), vec!["api key"]);
        assert_eq!(spellings("/etc/passwd"), vec![" etc passwd"]);
        assert_eq!(spellings(" .env "), vec![" env"], "a separator at an end stays: `.env` is not `myenv`");
        assert_eq!(spellings("drop/**/table"), vec!["drop table", "drop ** table"], "both forms of a comment");
        for blank in ["-", "_ . /", "\u{2800}", "\u{3164}\u{180E}"] {
            assert!(spellings(blank).is_empty(), "{blank:?} would match every text");
        }
        for text in ["rm -rf", "rm  -rf", "RM_-RF", "rm\u{2800}rf"] {
            assert!(search(text).contains(&spellings("rm -rf")[0]), "{text:?}");
        }
    }

    #[test]
    fn confusables_take_the_ascii_letters_of_their_skeleton() {
        // Latin, Armenian, Cherokee and Lisu letters, and symbols, that read as ASCII ones (TS #39 confusables).
        assert_eq!(search("ɑdmın"), "admin", "Latin alpha, dotless i");
        assert_eq!(search("ɡооɡlе"), "google", "script g and Cyrillic o, e");
        assert_eq!(search("օսt"), "out", "Armenian o and u");
        assert_eq!(search("ᎠᎬᎪ ᏒꓳᏢ"), "dea rop", "Cherokee and Lisu capitals, as written");
        assert_eq!(search("ꓔꓮꓐ"), "tab", "Lisu letters");
        assert_eq!(search("ǀs ℓs"), "ls ls");
        assert_eq!(search("3×4"), "3x4");
        assert_eq!(search("ϲat"), "oat", "NFKC makes the lunate sigma a sigma, whose skeleton is `o`");
        assert_eq!(search("ꜱudo ꜱu"), "sudo su", "small capital s");
        // `rn` is the skeleton of `m`; ASCII text itself is never taken for its skeleton.
        assert_eq!(search("rm \u{FF4D} rn 0 O 1 l I"), "rm m rn 0 o 1 l i");
        // Letters that read as no ASCII one keep their own (case-folded) form.
        assert_eq!(search("δλπ ж 日本"), "δλπ ж 日本");
        assert_eq!(search("École Straße"), "école strasse");
    }

    #[test]
    fn the_table_of_ascii_skeletons_agrees_with_the_skeletons() {
        for c in ('\u{80}'..='\u{FFFF}').step_by(7) {
            if !may_have_ascii_skeleton(c) {
                let mut buffer = [0; 4];
                let skeleton: String = unicode_security::skeleton(c.encode_utf8(&mut buffer)).collect();
                assert!(!skeleton.is_ascii(), "{c:?} has the ASCII skeleton {skeleton:?}");
            }
        }
    }

    #[test]
    fn normalising_twice_changes_nothing() {
        for text in [
            "Drop\u{00A0}\u{00A0}TABLE",
            "ｄｒｏｐ",
            "drοp",
            "Straße",
            "e\u{0301}",
            "a \u{200B} b",
            "ΟΔΟΣ οδος",
            "ᎠᎬᎪ ꭰ",
            "Γ γ",
            "x/*y*/z_w",
            "a\u{2800}\u{3164}b",
        ] {
            let once = normalise(text);
            assert_eq!(normalise(&once), once, "{text:?}");
        }
    }
}
