//! Which spans of a text are PII: the kinds the redaction recognises and the detector of each.
//!
//! [`detect`] finds e-mail addresses, IBANs, card numbers, US SSNs, IP addresses (v4 and v6) and phone numbers, in that
//! order of priority, so a card number is never also taken for a phone; each kind has a regex for the shape and a check
//! for what a regex cannot see (Luhn, mod-97, SSN number ranges, octets, the characters around a match). The characters
//! around a match are judged here; the checks of the numbers themselves live in `checks.rs`.
//!
//! Fullwidth forms (`４１１１…`, `＋１ ５５５…`, `ｊｏｈｎ＠ｅｘａｍｐｌｅ．ｃｏｍ`) are read as the ASCII characters they stand
//! for (contract 14): a text holding any is searched in a copy where each is its ASCII character, and the spans found
//! are mapped back, so that the placeholder replaces the text as written and restoring gives it back as written.

use std::sync::LazyLock;

use regex::Regex;

use super::checks::{iban_end, number_valid};
use crate::guardrails::compile_builtin as compile;

/// A kind of personal data the redaction recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PiiKind {
    Email,
    Phone,
    CardNumber,
    Ssn,
    Ipv4,
    Iban,
}

impl PiiKind {
    /// Every kind, in declaration order (the order of [`PiiVault::counts`](super::PiiVault::counts)).
    pub const ALL: [PiiKind; 6] =
        [PiiKind::Email, PiiKind::Phone, PiiKind::CardNumber, PiiKind::Ssn, PiiKind::Ipv4, PiiKind::Iban];

    /// The name inside the placeholder: `[EMAIL_1]`, `[CARD_NUMBER_2]`, ...
    pub fn label(&self) -> &'static str {
        match self {
            PiiKind::Email => "EMAIL",
            PiiKind::Phone => "PHONE",
            PiiKind::CardNumber => "CARD_NUMBER",
            PiiKind::Ssn => "SSN",
            PiiKind::Ipv4 => "IP_ADDRESS",
            PiiKind::Iban => "IBAN",
        }
    }

    pub(super) fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.label() == label)
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn noun(self, count: usize) -> &'static str {
        let (one, many) = match self {
            PiiKind::Email => ("e-mail address", "e-mail addresses"),
            PiiKind::Phone => ("phone number", "phone numbers"),
            PiiKind::CardNumber => ("card number", "card numbers"),
            PiiKind::Ssn => ("US social security number", "US social security numbers"),
            PiiKind::Ipv4 => ("IP address", "IP addresses"),
            PiiKind::Iban => ("IBAN", "IBANs"),
        };
        if count == 1 { one } else { many }
    }
}

/// Who wins when two kinds claim overlapping text: the earlier one. The strictly shaped kinds come first, so the
/// loose phone shapes only ever see what nothing else claimed.
const PRIORITY: [PiiKind; 6] =
    [PiiKind::Email, PiiKind::Iban, PiiKind::CardNumber, PiiKind::Ssn, PiiKind::Ipv4, PiiKind::Phone];

// ASCII classes throughout (`[0-9]`, not `\d`): a Unicode digit is not part of a phone or card number.
// Addresses may carry non-ASCII letters and digits in both parts (`jürgen@müller.de`, internationalised mail): `\p{L}`
// and `\p{N}` need regex's `unicode-gencat` feature, which Cargo.toml names (a dev-dependency enables it for the
// tests whatever Cargo.toml says, so only [`PATTERNS`] checked at start catches a build without it).
const EMAIL_PATTERN: &str = r"[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.\p{L}{2,}";
// Only the country code and check digits: the rest is read by `iban_end`, which knows the country's length and so
// stops where the IBAN does (a regex would swallow a following group-like word, or rescan long runs of them).
const IBAN_PATTERN: &str = r"[A-Za-z]{2}[0-9]{2}";
// 13-19 digits in one run, or in groups of 3-6 as printed on cards (4-4-4-4, 4-6-5, 4-4-4-4-3), spaces, dashes or
// dots between them.
const CARD_PATTERN: &str = r"[0-9]{13,19}|[0-9]{4,6}(?:[ .-][0-9]{3,6}){1,4}(?:[ .-][0-9]{1,3})?";
// 3-2-4 with dashes, or 9 digits in a run of exactly nine (contract 14: SSNs without separators); `checks.rs` refuses
// the never-issued areas, groups and serials, which leaves out many 9-digit numbers that are not SSNs (those starting
// with 000, 666 or 9, or holding 00 or 0000 where group and serial sit), but not all: a 9-digit order number of the
// issued shape is taken for an SSN, the safe side to err on.
const SSN_PATTERN: &str = r"[0-9]{3}-[0-9]{2}-[0-9]{4}|[0-9]{9}";
// IPv4 dotted quads, and IPv6 in its colon forms (checked by parsing it, see `checks.rs`).
const IP_PATTERN: &str = r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}|(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}";
// International: `+`, country code, groups (a trunk prefix such as `(0)` allowed). North American: 3-3-4 with the
// area code in parentheses or followed by a separator, optionally after a leading `1`; or, without separators
// (contract 14), a run of exactly 10 digits, or 11 starting with `1`, of the North American shape: an area code whose
// first digit is 2-9, whose second is not 9 (reserved) and which is not an N11 service code (`checks.rs`). So a
// 10-digit epoch time (`1764086400`) is never a phone, while an order number of that shape is.
const PHONE_PATTERN: &str = concat!(
    r"\+[1-9][0-9]{0,2}(?:[ -]?(?:\([0-9]{1,4}\)|[0-9]{1,12})){1,6}",
    r"|(?:1[ .-])?(?:\([0-9]{3}\) ?|[0-9]{3}[ .-])[0-9]{3}[ .-][0-9]{4}",
    r"|1?[2-9][0-8][0-9]{8}",
);

/// Every pattern of this folder, the vault's placeholder too, for the check at start
/// ([`crate::guardrails::builtin_patterns_compile`]).
pub(super) const PATTERNS: [&str; 7] = [
    EMAIL_PATTERN,
    IBAN_PATTERN,
    CARD_PATTERN,
    SSN_PATTERN,
    IP_PATTERN,
    PHONE_PATTERN,
    super::vault::PLACEHOLDER_PATTERN,
];

static EMAIL: LazyLock<Regex> = LazyLock::new(|| compile(EMAIL_PATTERN));
static IBAN: LazyLock<Regex> = LazyLock::new(|| compile(IBAN_PATTERN));
static CARD: LazyLock<Regex> = LazyLock::new(|| compile(CARD_PATTERN));
static SSN: LazyLock<Regex> = LazyLock::new(|| compile(SSN_PATTERN));
static IPV4: LazyLock<Regex> = LazyLock::new(|| compile(IP_PATTERN));
static PHONE: LazyLock<Regex> = LazyLock::new(|| compile(PHONE_PATTERN));

/// A stretch of an input to replace.
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) kind: PiiKind,
    /// A literal equal to a placeholder already handed out, replaced so that restoring cannot mistake it.
    pub(super) literal: bool,
}

/// The spans to replace in `text`, sorted and disjoint: `literals` first, then each kind in [`PRIORITY`] order,
/// each only where nothing earlier claimed the text. Fullwidth forms are read as ASCII (see the module's text).
pub(super) fn detect(text: &str, literals: Vec<Span>) -> Vec<Span> {
    match AsciiForms::of(text) {
        None => detect_ascii_forms(text, literals),
        Some(forms) => {
            let literals = literals.into_iter().map(|span| forms.to_ascii_span(span)).collect();
            detect_ascii_forms(&forms.text, literals).into_iter().map(|span| forms.to_original_span(span)).collect()
        }
    }
}

/// A text with its fullwidth forms (U+FF01 to U+FF5E, and the ideographic space U+3000) made the ASCII characters they
/// stand for, and where each byte of it came from.
struct AsciiForms {
    text: String,
    /// `origins[i]` is the offset in the original text of the character byte `i` belongs to or is a byte of;
    /// `origins[text.len()]` is the original's length.
    origins: Vec<usize>,
}

impl AsciiForms {
    /// `None` when `text` holds no fullwidth form (always for ASCII text: one read).
    fn of(text: &str) -> Option<AsciiForms> {
        if text.is_ascii() || !text.chars().any(|c| ascii_form(c).is_some()) {
            return None;
        }
        let (mut ascii, mut origins) = (String::with_capacity(text.len()), Vec::with_capacity(text.len() + 1));
        for (offset, c) in text.char_indices() {
            match ascii_form(c) {
                Some(plain) => {
                    ascii.push(plain);
                    origins.push(offset);
                }
                None => {
                    ascii.push(c);
                    origins.extend(offset..offset + c.len_utf8());
                }
            }
        }
        origins.push(text.len());
        Some(AsciiForms { text: ascii, origins })
    }

    /// The offset in the ASCII form of the character at `offset` in the original.
    fn to_ascii(&self, offset: usize) -> usize {
        self.origins.partition_point(|&origin| origin < offset)
    }

    fn to_ascii_span(&self, span: Span) -> Span {
        Span { start: self.to_ascii(span.start), end: self.to_ascii(span.end), ..span }
    }

    fn to_original_span(&self, span: Span) -> Span {
        let end = self.origins.last().copied().unwrap_or_default();
        let origin = |offset: usize| self.origins.get(offset).copied().unwrap_or(end);
        Span { start: origin(span.start), end: origin(span.end), ..span }
    }
}

/// The ASCII character a fullwidth form stands for.
fn ascii_form(c: char) -> Option<char> {
    match c {
        '\u{FF01}'..='\u{FF5E}' => char::from_u32(u32::from(c) - 0xFEE0),
        '\u{3000}' => Some(' '),
        _ => None,
    }
}

fn detect_ascii_forms(text: &str, literals: Vec<Span>) -> Vec<Span> {
    let mut taken = literals;
    for kind in PRIORITY {
        let found = find_kind(text, kind, &taken);
        if !found.is_empty() {
            taken.extend(found);
            taken.sort_unstable_by_key(|span| span.start);
        }
    }
    taken
}

/// The accepted matches of one kind. After a rejected match the search resumes at the next position a match could
/// start at without being glued to what precedes it (not inside the same word or dotted number), so that runs like
/// `1.1.1.1.1...` are not searched again from every character.
fn find_kind(text: &str, kind: PiiKind, taken: &[Span]) -> Vec<Span> {
    let pattern: &Regex = match kind {
        PiiKind::Email => &EMAIL,
        PiiKind::Iban => &IBAN,
        PiiKind::CardNumber => &CARD,
        PiiKind::Ssn => &SSN,
        PiiKind::Ipv4 => &IPV4,
        PiiKind::Phone => &PHONE,
    };
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut position = 0;
    while let Some(candidate) = pattern.find_at(text, position) {
        let (start, end) = (candidate.start(), candidate.end());
        // A match must end before the next span a higher priority took (truncating where the shape allows it).
        let next_taken = taken.partition_point(|span| span.end <= start);
        let limit = taken.get(next_taken).map_or(text.len(), |span| span.start);
        let accepted = if limit <= start { None } else { accept(kind, text, start, end, limit) };
        match accepted {
            Some((start, end)) => {
                found.push(Span { start, end, kind, literal: false });
                position = end;
            }
            None => {
                position = start + 1;
                // Stopping before a non-ASCII byte keeps `position` on a character boundary.
                while bytes.get(position).is_some_and(u8::is_ascii) && !clear_before(bytes, position, glue(kind)) {
                    position += 1;
                }
            }
        }
    }
    found
}

/// Checks a regex match of `kind` at `start..end`, returning the span to redact, which ends at `limit` at the latest.
fn accept(kind: PiiKind, text: &str, start: usize, end: usize, limit: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    // A `+` before digits makes them a phone number's, never a card's or an SSN's.
    let after_plus = start.checked_sub(1).and_then(|i| bytes.get(i)) == Some(&b'+');
    if !clear_before(bytes, start, glue(kind)) || (matches!(kind, PiiKind::CardNumber | PiiKind::Ssn) && after_plus) {
        return None;
    }
    match kind {
        PiiKind::Email => (end <= limit).then(|| (skip_json_escape(bytes, start, end), end)),
        PiiKind::Iban => iban_end(bytes, start).filter(|&cut| cut <= limit).map(|cut| (start, cut)),
        _ => {
            // Card numbers and international phone numbers come in groups and may have run into a group not theirs.
            let grouped = kind == PiiKind::CardNumber || bytes.get(start) == Some(&b'+');
            group_ends(bytes, start, end, limit, grouped)
                .find(|&cut| clear_after(bytes, cut, glue(kind)) && number_valid(kind, &text[start..cut]))
                .map(|cut| (start, cut))
        }
    }
}

/// Separators that, between digits, make one longer number: a match next to one is part of something bigger.
fn glue(kind: PiiKind) -> &'static [u8] {
    match kind {
        PiiKind::Email | PiiKind::Iban => b"",
        // Not `-` for addresses: `10.0.0.1-10.0.0.9` is a range of two.
        PiiKind::Ipv4 => b".",
        PiiKind::CardNumber | PiiKind::Ssn | PiiKind::Phone => b".-",
    }
}

fn is_word(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// True when the match starting at `start` is not glued to what precedes it: no letter, digit or `_` right before,
/// and no `glue` character that itself follows a digit (the `1.` of `1.2.3.4.5`, the `2026-` of a date).
fn clear_before(bytes: &[u8], start: usize, glue: &[u8]) -> bool {
    let Some(&previous) = start.checked_sub(1).and_then(|i| bytes.get(i)) else {
        return true;
    };
    let glued_number =
        glue.contains(&previous) && start.checked_sub(2).and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit);
    !is_word(previous) && !glued_number
}

/// The mirror of [`clear_before`] for the text after `end`.
pub(super) fn clear_after(bytes: &[u8], end: usize, glue: &[u8]) -> bool {
    let Some(&next) = bytes.get(end) else {
        return true;
    };
    let glued_number = glue.contains(&next) && bytes.get(end + 1).is_some_and(u8::is_ascii_digit);
    !is_word(next) && !glued_number
}

/// Where a number may end, longest first and not past `limit`: the whole match, then, if it is `grouped`, before each
/// separator. Lets `4111 1111 1111 1111 2024` yield the card and leave the year, and a phone stop where an SSN begins.
fn group_ends(bytes: &[u8], start: usize, end: usize, limit: usize, grouped: bool) -> impl Iterator<Item = usize> {
    let is_separator = |b: &u8| *b == b' ' || *b == b'-' || *b == b'.';
    let separators = (start + 1..end).rev().filter(move |&cut| {
        grouped && bytes.get(cut).is_some_and(is_separator) && bytes.get(cut - 1).is_some_and(|b| !is_separator(b))
    });
    std::iter::once(end).chain(separators).filter(move |&cut| cut <= limit)
}

/// A JSON string escape (`\n`, `\t`, `\u00e9`, ...) right before an e-mail address is not part of it: redacting it
/// would leave a dangling backslash in JSON text.
fn skip_json_escape(bytes: &[u8], start: usize, end: usize) -> usize {
    let at = bytes[start..end].iter().position(|&b| b == b'@').map_or(end, |i| start + i);
    if start == 0 || bytes.get(start - 1) != Some(&b'\\') {
        return start;
    }
    let skip = match bytes.get(start) {
        Some(b'n' | b'r' | b't' | b'b' | b'f') => 1,
        Some(b'u') if bytes.get(start + 1..start + 5).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit)) => 5,
        _ => 0,
    };
    if start + skip < at { start + skip } else { start }
}

#[cfg(test)]
mod tests {
    use super::super::PiiVault;
    use super::super::testing::{assert_redacted_as, assert_untouched, redact};
    use super::*;

    #[test]
    fn contract_13_additions() {
        // Non-ASCII e-mail addresses, card numbers written with dots, IPv6 addresses.
        assert_eq!(redact("to jürgen.müller@beispiel.de or 山田@例え.jp"), "to [EMAIL_1] or [EMAIL_2]");
        assert_eq!(redact("card 4111.1111.1111.1111 ok"), "card [CARD_NUMBER_1] ok");
        assert_eq!(
            redact("from 2001:db8::8a2e:370:7334 and fe80::1ff:fe23:4567:890a"),
            "from [IP_ADDRESS_1] and [IP_ADDRESS_2]"
        );
        // Not addresses: code paths, times, a version, MAC-like text with too few groups.
        assert_untouched("use std::net::Ipv6Addr; at 12:30:45 on v1.2.3.4.5 a::b");
    }

    #[test]
    fn contract_14_phones_and_ssns_without_separators() {
        for phone in ["5551234567", "+15551234567", "15551234567", "2125551234", "12125551234"] {
            assert_redacted_as(phone, "[PHONE_1]");
            assert_eq!(redact(&format!("call {phone}, please")), "call [PHONE_1], please");
        }
        assert_eq!(redact(r#"{"phone":"5551234567"}"#), r#"{"phone":"[PHONE_1]"}"#, "in JSON text");
        for ssn in ["123456789", "078051120"] {
            assert_redacted_as(ssn, "[SSN_1]");
        }
        assert_eq!(redact("ssn:123456789."), "ssn:[SSN_1].");
        for text in [
            // An epoch time in seconds: its "area code" would start with 1.
            "at 1764086400",
            // N11 service codes and area codes with a 9 in the middle are not North American area codes.
            "2115551234",
            "9115551234",
            "5951234567",
            // Longer or shorter runs, and runs glued to other digits or letters.
            "55512345",
            "555123456789",
            "55512345678",
            "x5551234567",
            "5551234567x",
            "1.5551234567",
            // SSNs never issued: area 000, 666 or 9xx, group 00, serial 0000; a `+` makes digits a phone's.
            "000123456",
            "666123456",
            "912345678",
            "123004567",
            "123450000",
            "1234567890123",
            "+123456789",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn contract_14_fullwidth_digits_are_read_as_digits_and_redacted_as_written() {
        for (text, placeholder) in [
            ("４１１１１１１１１１１１１１１１", "[CARD_NUMBER_1]"),
            ("４１１１ １１１１ １１１１ １１１１", "[CARD_NUMBER_1]"),
            ("４１１１－１１１１－１１１１－１１１１", "[CARD_NUMBER_1]"),
            ("１２３-４５-６７８９", "[SSN_1]"),
            ("１２３４５６７８９", "[SSN_1]"),
            ("５５５１２３４５６７", "[PHONE_1]"),
            ("＋１ ５５５－１２３－４５６７", "[PHONE_1]"),
            ("（５５５） １２３－４５６７", "[PHONE_1]"),
            ("ｊｏｈｎ＠ｅｘａｍｐｌｅ．ｃｏｍ", "[EMAIL_1]"),
            ("１９２．１６８．１．２０", "[IP_ADDRESS_1]"),
        ] {
            assert_redacted_as(text, placeholder);
        }
        // The placeholder takes the place of the text as written, whatever stands around it.
        assert_eq!(redact("é ５５５１２３４５６７ ü 123-45-6789 ｘ"), "é [PHONE_1] ü [SSN_1] ｘ");
        assert_eq!(redact("電話５５５１２３４５６７です"), "電話[PHONE_1]です");
        assert_untouched("４１１１１１１１１１１１１１１２ and ５５５１２３");
        // A literal placeholder after fullwidth text is still seen as one.
        let mut vault = PiiVault::new();
        let first = vault.redact_text("a@b.io");
        let text = format!("４２ {first} ５５５１２３４５６７");
        let redacted = vault.redact_text(&text);
        assert_eq!(redacted, "４２ [EMAIL_2] [PHONE_1]");
        assert_eq!(vault.restore_text(&redacted), text);
    }

    #[test]
    fn emails() {
        assert_eq!(redact("mail john.doe+tag@example.co.uk now"), "mail [EMAIL_1] now");
        assert_eq!(redact("<a@b.io>, c_d@sub.example.org."), "<[EMAIL_1]>, [EMAIL_2].");
        assert_untouched("user@localhost and @handle and a@b");
    }

    #[test]
    fn email_after_a_json_escape_keeps_the_escape() {
        assert_eq!(redact(r#"{"to":"line\njohn@example.com"}"#), r#"{"to":"line\n[EMAIL_1]"}"#);
        assert_eq!(redact(r#""\u00e9bob@example.com""#), r#""\u00e9[EMAIL_1]""#);
    }

    #[test]
    fn phones() {
        for phone in [
            "+1 555-123-4567",
            "+1 (555) 123-4567",
            "(555) 123-4567",
            "555.123.4567",
            "555-123-4567",
            "555 123 4567",
            "1-800-555-1234",
            "+44 20 7946 0958",
            "+44 (0)20 7946 0958",
            "+49 30 1234567",
            "+33 1 23 45 67 89",
            "+15551234567",
        ] {
            assert_redacted_as(phone, "[PHONE_1]");
            assert_eq!(redact(&format!("call {phone}, please")), "call [PHONE_1], please");
        }
        assert_eq!(redact("call +1 555-123-4567 2024 times"), "call [PHONE_1] 2024 times");
        assert_eq!(redact("+7 495 123-45-67 or 1 (800) 555-1234"), "[PHONE_1] or [PHONE_2]");
    }

    #[test]
    fn numbers_that_are_not_phones() {
        for text in [
            "42",
            "in 2026",
            "order 1764086400",
            "id 0123456789 and 1234567890",
            "on 2026-11-22 at 12:30:45",
            "11/22/2026",
            "22.11.2026",
            "costs $1,234.56 or 1.234.567,00 EUR",
            "+1 000 000 users",
            "+10 000 000 users",
            "up +12%",
            "2+2=4",
            "version 10.555.123.4567",
            "ref 555-123-45678",
            "id x555-123-4567",
            "id 123e4567-e89b-12d3-a456-426614174000",
            "at 2026-11-22T10:30:00+01:00",
            "sha a3f1234567890123456bc9, 0x1234567890123456",
            "ISBN 978-3-16-148410-0",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn overlaps_go_to_the_stricter_kind() {
        assert_eq!(redact("4111-1111-1111-1111"), "[CARD_NUMBER_1]");
        assert_eq!(redact("123-45-6789"), "[SSN_1]");
        assert_eq!(redact("192.168.100.200"), "[IP_ADDRESS_1]");
        assert_eq!(redact("+44 20 7946 0958 123-45-6789"), "[PHONE_1] [SSN_1]");
        assert_eq!(redact("555-123-4567@example.com"), "[EMAIL_1]");
        let mut vault = PiiVault::new();
        vault.redact_text("a@b.io 4111111111111111 123-45-6789 1.2.3.4 555-123-4567 NO9386011117947");
        let kinds: Vec<PiiKind> = vault.counts().into_iter().map(|(kind, _)| kind).collect();
        assert_eq!(kinds, PiiKind::ALL);
        assert_eq!(vault.len(), 6);
    }

    #[test]
    fn labels() {
        let labels: Vec<&str> = PiiKind::ALL.iter().map(PiiKind::label).collect();
        assert_eq!(labels, ["EMAIL", "PHONE", "CARD_NUMBER", "SSN", "IP_ADDRESS", "IBAN"]);
    }

    #[test]
    fn large_text_is_linear() {
        let chunk = "Contact john.doe@example.com or +1 555-123-4567 about card 4111 1111 1111 1111, \
                     server 10.0.0.1, version 1.2.3.4.5, IBAN DE89 3704 0044 0532 0130 00, on 2026-11-22. ";
        let text = chunk.repeat((1 << 20) / chunk.len());
        let started = std::time::Instant::now();
        let mut vault = PiiVault::new();
        let redacted = vault.redact_text(&text);
        let restored = vault.restore_text(&redacted);
        let elapsed = started.elapsed();
        assert_eq!(restored, text);
        assert_eq!(vault.len(), 5);
        // Generous, because tests run unoptimised; a quadratic scan would take minutes.
        assert!(elapsed < std::time::Duration::from_secs(20), "{elapsed:?}");
    }
}
