//! Built-in PII redaction (contract 5): personal data in a tool call's arguments is swapped for placeholders such as
//! `[EMAIL_1]` before the upstream sees them, and the placeholders in the upstream's answer are swapped back before
//! the client sees it.
//!
//! One [`PiiVault`] lives for one tool call. `redact_value` (or `redact_text`) finds e-mail addresses, IBANs, card
//! numbers, US SSNs, IPv4 addresses and phone numbers, in that order of priority, so a card number is never also taken
//! for a phone; each kind has a regex for the shape and a check for what a regex cannot see (Luhn, mod-97, SSN number
//! ranges, octets, the characters around a match). The vault keeps both directions of the mapping; `restore_value`
//! (or `restore_text`) puts the originals back wherever the upstream echoed a placeholder, also inside longer strings
//! and inside JSON text (originals are made only of ASCII characters JSON never escapes).
//!
//! Restoring is exact: `restore(redact(x)) == x` for every `x`. A placeholder-looking literal already present in an
//! input would otherwise be "restored" into someone's data, so the vault remembers every such literal it has read and
//! never hands out that placeholder; a literal equal to a placeholder the vault already handed out (in an earlier
//! input) is itself replaced by a fresh placeholder that restores to the literal. The originals never leave the vault:
//! it is neither `Serialize` nor `Clone`, and its `Debug` shows only counts.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::Violation;

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
    /// Every kind, in declaration order (the order of [`PiiVault::counts`]).
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

    fn from_label(label: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.label() == label)
    }

    fn index(self) -> usize {
        self as usize
    }

    fn noun(self, count: usize) -> &'static str {
        let (one, many) = match self {
            PiiKind::Email => ("e-mail address", "e-mail addresses"),
            PiiKind::Phone => ("phone number", "phone numbers"),
            PiiKind::CardNumber => ("card number", "card numbers"),
            PiiKind::Ssn => ("US social security number", "US social security numbers"),
            PiiKind::Ipv4 => ("IPv4 address", "IPv4 addresses"),
            PiiKind::Iban => ("IBAN", "IBANs"),
        };
        if count == 1 { one } else { many }
    }
}

/// Who wins when two kinds claim overlapping text: the earlier one. The strictly shaped kinds come first, so the
/// loose phone shapes only ever see what nothing else claimed.
const PRIORITY: [PiiKind; 6] =
    [PiiKind::Email, PiiKind::Iban, PiiKind::CardNumber, PiiKind::Ssn, PiiKind::Ipv4, PiiKind::Phone];

fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("the PII patterns are literals that compile")
}

// ASCII classes throughout (`[0-9]`, not `\d`): a Unicode digit is not part of a phone or card number.
static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"));
// Only the country code and check digits: the rest is read by `iban_end`, which knows the country's length and so
// stops where the IBAN does (a regex would swallow a following group-like word, or rescan long runs of them).
static IBAN: LazyLock<Regex> = LazyLock::new(|| compile(r"[A-Za-z]{2}[0-9]{2}"));
// 13-19 digits in one run, or in groups of 3-6 as printed on cards (4-4-4-4, 4-6-5, 4-4-4-4-3), spaces or dashes.
static CARD: LazyLock<Regex> =
    LazyLock::new(|| compile(r"[0-9]{13,19}|[0-9]{4,6}(?:[ -][0-9]{3,6}){1,4}(?:[ -][0-9]{1,3})?"));
static SSN: LazyLock<Regex> = LazyLock::new(|| compile(r"[0-9]{3}-[0-9]{2}-[0-9]{4}"));
static IPV4: LazyLock<Regex> = LazyLock::new(|| compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}"));
// International: `+`, country code, groups (a trunk prefix such as `(0)` allowed). North American: 3-3-4 with the
// area code in parentheses or followed by a separator, optionally after a leading `1`. Bare digit runs are not
// phones: without a `+` or separators they are as likely an order number.
static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    compile(concat!(
        r"\+[1-9][0-9]{0,2}(?:[ -]?(?:\([0-9]{1,4}\)|[0-9]{1,12})){1,6}",
        r"|(?:1[ .-])?(?:\([0-9]{3}\) ?|[0-9]{3}[ .-])[0-9]{3}[ .-][0-9]{4}",
    ))
});
// What a placeholder looks like, both when restoring and when spotting literals in an input. It can hold no `[`
// after its first character, which is what keeps literals and inserted placeholders from ever running together.
static PLACEHOLDER: LazyLock<Regex> =
    LazyLock::new(|| compile(r"\[(?:EMAIL|PHONE|CARD_NUMBER|SSN|IP_ADDRESS|IBAN)_[1-9][0-9]{0,9}\]"));

/// The PII mapping of one tool call. Create one per call, redact the arguments, restore the answer, drop it.
#[derive(Default)]
pub struct PiiVault {
    /// Placeholder -> original, for restoring.
    originals: HashMap<String, String>,
    /// Original -> placeholder, so the same value always gets the same placeholder.
    placeholders: HashMap<String, String>,
    /// Placeholder-looking literals read in some input and never handed out: those must survive restoring untouched.
    reserved: HashSet<String>,
    /// The last number handed out, per kind (index = `PiiKind::index`).
    last_number: [u64; 6],
    /// Distinct values redacted, per kind; escaped literals are not personal data and are not counted.
    redacted: [usize; 6],
}

/// A stretch of an input to replace.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    kind: PiiKind,
    /// A literal equal to a placeholder already handed out, replaced so that restoring cannot mistake it.
    literal: bool,
}

impl PiiVault {
    pub fn new() -> Self {
        Self::default()
    }

    /// `text` with every PII value replaced by its placeholder.
    pub fn redact_text(&mut self, text: &str) -> String {
        // Literals first: reserving them before any number is handed out keeps this call from issuing them.
        let mut literals = Vec::new();
        for found in PLACEHOLDER.find_iter(text) {
            let literal = found.as_str();
            if self.originals.contains_key(literal) {
                if let Some(kind) = PiiKind::from_label(&literal[1..literal.rfind('_').unwrap_or(1)]) {
                    literals.push(Span { start: found.start(), end: found.end(), kind, literal: true });
                }
            } else if !self.reserved.contains(literal) {
                self.reserved.insert(literal.to_owned());
            }
        }
        let spans = detect(text, literals);
        if spans.is_empty() {
            return text.to_owned();
        }
        let mut redacted = String::with_capacity(text.len());
        let mut copied = 0;
        for span in spans {
            redacted.push_str(&text[copied..span.start]);
            self.push_placeholder(&mut redacted, &text[span.start..span.end], span.kind, span.literal);
            copied = span.end;
        }
        redacted.push_str(&text[copied..]);
        redacted
    }

    /// `value` with every string inside it redacted, at any depth. Object keys are left alone: they are the tool's
    /// parameter names, which the upstream needs.
    pub fn redact_value(&mut self, value: &Value) -> Value {
        map_strings(value, &mut |text| self.redact_text(text))
    }

    /// `text` with every placeholder this vault handed out replaced by its original, wherever it appears.
    pub fn restore_text(&self, text: &str) -> String {
        if self.originals.is_empty() {
            return text.to_owned();
        }
        let mut restored = String::with_capacity(text.len());
        let mut copied = 0;
        for found in PLACEHOLDER.find_iter(text) {
            if let Some(original) = self.originals.get(found.as_str()) {
                restored.push_str(&text[copied..found.start()]);
                restored.push_str(original);
                copied = found.end();
            }
        }
        restored.push_str(&text[copied..]);
        restored
    }

    /// `value` with every string inside it restored, at any depth (keys left alone, as in [`Self::redact_value`]).
    pub fn restore_value(&self, value: &Value) -> Value {
        map_strings(value, &mut |text| self.restore_text(text))
    }

    /// True when nothing was redacted: restoring is then a no-op.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of distinct values redacted.
    pub fn len(&self) -> usize {
        self.redacted.iter().sum()
    }

    /// Distinct values redacted per kind, kinds with none left out: for logs and metrics, without the values.
    pub fn counts(&self) -> Vec<(PiiKind, usize)> {
        PiiKind::ALL
            .into_iter()
            .map(|kind| (kind, self.redacted[kind.index()]))
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    /// One `pii` violation per kind redacted, for the call's report; messages carry counts, never values.
    pub fn violations(&self) -> Vec<Violation> {
        self.counts()
            .into_iter()
            .map(|(kind, count)| Violation {
                kind: "pii".to_owned(),
                detector: "pii_redaction".to_owned(),
                message: format!("{count} {} redacted", kind.noun(count)),
            })
            .collect()
    }

    /// Appends the placeholder of `original` to `out`, handing out the next free number of `kind` the first time.
    fn push_placeholder(&mut self, out: &mut String, original: &str, kind: PiiKind, literal: bool) {
        if let Some(placeholder) = self.placeholders.get(original) {
            out.push_str(placeholder);
            return;
        }
        let index = kind.index();
        // Skipping reserved numbers terminates: the reserved set is finite. The number cannot outgrow the ten digits
        // `PLACEHOLDER` reads; that would take more values than any memory holds.
        let placeholder = loop {
            self.last_number[index] += 1;
            let candidate = format!("[{}_{}]", kind.label(), self.last_number[index]);
            if !self.reserved.contains(&candidate) {
                break candidate;
            }
        };
        if !literal {
            self.redacted[index] += 1;
        }
        out.push_str(&placeholder);
        self.originals.insert(placeholder.clone(), original.to_owned());
        self.placeholders.insert(original.to_owned(), placeholder);
    }
}

/// Counts only: the originals must not reach a log line through `{:?}`.
impl fmt::Debug for PiiVault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<(&str, usize)> = self.counts().into_iter().map(|(kind, n)| (kind.label(), n)).collect();
        f.debug_struct("PiiVault").field("redacted", &counts).field("reserved_literals", &self.reserved.len()).finish()
    }
}

fn map_strings(value: &Value, transform: &mut impl FnMut(&str) -> String) -> Value {
    match value {
        Value::String(text) => Value::String(transform(text)),
        Value::Array(items) => Value::Array(items.iter().map(|item| map_strings(item, transform)).collect()),
        Value::Object(fields) => {
            Value::Object(fields.iter().map(|(key, field)| (key.clone(), map_strings(field, transform))).collect())
        }
        other => other.clone(),
    }
}

/// The spans to replace in `text`, sorted and disjoint: `literals` first, then each kind in [`PRIORITY`] order,
/// each only where nothing earlier claimed the text.
fn detect(text: &str, literals: Vec<Span>) -> Vec<Span> {
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
    // A `+` before digits makes them a phone number's, never a card's.
    let after_plus = start.checked_sub(1).and_then(|i| bytes.get(i)) == Some(&b'+');
    if !clear_before(bytes, start, glue(kind)) || (kind == PiiKind::CardNumber && after_plus) {
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

/// What the regex of a numeric kind cannot check.
fn number_valid(kind: PiiKind, candidate: &str) -> bool {
    match kind {
        PiiKind::CardNumber => luhn_valid(candidate.as_bytes()),
        // Area 000, 666 and 900-999, group 00 and serial 0000 are never issued.
        PiiKind::Ssn => {
            let (area, group, serial) = (&candidate[0..3], &candidate[4..6], &candidate[7..11]);
            area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
        }
        PiiKind::Ipv4 => candidate.split('.').all(|octet| octet.parse::<u16>().is_ok_and(|n| n <= 255)),
        PiiKind::Phone => !candidate.starts_with('+') || international_phone_valid(candidate),
        PiiKind::Email | PiiKind::Iban => true,
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
fn clear_after(bytes: &[u8], end: usize, glue: &[u8]) -> bool {
    let Some(&next) = bytes.get(end) else {
        return true;
    };
    let glued_number = glue.contains(&next) && bytes.get(end + 1).is_some_and(u8::is_ascii_digit);
    !is_word(next) && !glued_number
}

/// Where a number may end, longest first and not past `limit`: the whole match, then, if it is `grouped`, before each
/// separator. Lets `4111 1111 1111 1111 2024` yield the card and leave the year, and a phone stop where an SSN begins.
fn group_ends(bytes: &[u8], start: usize, end: usize, limit: usize, grouped: bool) -> impl Iterator<Item = usize> {
    let is_separator = |b: &u8| *b == b' ' || *b == b'-';
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

/// The Luhn checksum over the digits of `candidate`, which must number 13 to 19.
fn luhn_valid(candidate: &[u8]) -> bool {
    let digits = candidate.iter().rev().filter(|b| b.is_ascii_digit()).map(|b| u32::from(b - b'0'));
    let (count, sum) = digits.enumerate().fold((0, 0), |(_, sum), (i, digit)| {
        let doubled = if i % 2 == 1 { digit * 2 } else { digit };
        (i + 1, sum + if doubled > 9 { doubled - 9 } else { doubled })
    });
    (13..=19).contains(&count) && sum % 10 == 0
}

/// Enough digits for a dialable number (8 to 15, E.164's maximum; exactly 11 for the North American `+1`, which stops
/// a following year or count from being swallowed), and not a quantity in thousands such as `+10 000 000`.
fn international_phone_valid(candidate: &str) -> bool {
    let digits = candidate.bytes().filter(u8::is_ascii_digit).count();
    let dialable = if candidate.starts_with("+1") { digits == 11 } else { (8..=15).contains(&digits) };
    let groups = || candidate.split([' ', '-']).filter(|group| !group.is_empty()).skip(1);
    let thousands = groups().count() >= 2 && groups().all(|group| group.len() == 3 && !group.contains(['(', ')']));
    dialable && !thousands
}

/// Registered IBAN lengths per country (ISO 13616 registry).
const IBAN_LENGTHS: &str = "AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BI27 BR29 BY28 CH21 CR22 CY28 CZ24 DE22 DJ27 \
    DK18 DO28 EE20 EG29 ES24 FI18 FK18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 IS26 IT27 JO30 \
    KW30 KZ20 LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MN20 MR27 MT31 MU30 NI28 NL18 NO15 OM23 PK24 PL28 \
    PS29 QA29 RO24 RS22 RU33 SA24 SC31 SD18 SE24 SI19 SK24 SM27 SO23 ST25 SV28 TL23 TN24 TR26 UA29 VA22 VG24 XK20 YE30";

/// Where the IBAN starting at `start` (two letters, two digits) ends, if one does: it has exactly the length its
/// country registers, written compact or in groups of four with single spaces, stands alone, and passes mod-97.
fn iban_end(bytes: &[u8], start: usize) -> Option<usize> {
    let country = [bytes.get(start)?.to_ascii_uppercase(), bytes.get(start + 1)?.to_ascii_uppercase()];
    let entry = IBAN_LENGTHS.as_bytes().chunks(5).find(|entry| entry.get(..2) == Some(&country[..]))?;
    let length: usize = std::str::from_utf8(entry.get(2..4)?).ok()?.parse().ok()?;
    let spaced = bytes.get(start + 4) == Some(&b' ');
    let (mut cut, mut count) = (start, 0);
    while count < length {
        if spaced && count > 0 && count % 4 == 0 {
            if bytes.get(cut) != Some(&b' ') {
                return None;
            }
            cut += 1;
        }
        if !bytes.get(cut)?.is_ascii_alphanumeric() {
            return None;
        }
        (cut, count) = (cut + 1, count + 1);
    }
    if !clear_after(bytes, cut, b"") {
        return None;
    }
    // ISO 7064 mod 97-10: the first four characters move to the end, letters count as 10-35, remainder must be 1.
    let characters = || bytes[start..cut].iter().filter(|b| b.is_ascii_alphanumeric());
    let remainder = characters().skip(4).chain(characters().take(4)).fold(0u32, |acc, &b| match b {
        b'0'..=b'9' => (acc * 10 + u32::from(b - b'0')) % 97,
        _ => (acc * 100 + u32::from(b.to_ascii_uppercase() - b'A') + 10) % 97,
    });
    (remainder == 1).then_some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Redacts `text` in a fresh vault, checks the round trip, and returns the redacted text.
    fn redact(text: &str) -> String {
        let mut vault = PiiVault::new();
        let redacted = vault.redact_text(text);
        assert_eq!(vault.restore_text(&redacted), text, "round trip of {text:?}");
        redacted
    }

    fn assert_redacted_as(text: &str, placeholder: &str) {
        assert_eq!(redact(text), placeholder, "{text:?}");
    }

    fn assert_untouched(text: &str) {
        assert_eq!(redact(text), text, "{text:?} should not be redacted");
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
            "order 5551234567",
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
    fn card_numbers_are_luhn_checked() {
        for card in
            ["4111111111111111", "4111 1111 1111 1111", "4111-1111-1111-1111", "3782 822463 10005", "5555555555554444"]
        {
            assert_redacted_as(card, "[CARD_NUMBER_1]");
        }
        assert_eq!(redact("card 4111 1111 1111 1111 exp 2027"), "card [CARD_NUMBER_1] exp 2027");
        assert_eq!(redact("4111 1111 1111 1111 2024"), "[CARD_NUMBER_1] 2024");
        // Invalid Luhn is just a number, and not a phone either.
        for text in ["4111111111111112", "4111 1111 1111 1112", "4111-1111-1111-1112", "41111111111111111111"] {
            assert_untouched(text);
        }
    }

    #[test]
    fn ssns_reject_unissued_ranges() {
        assert_eq!(redact("SSN 123-45-6789."), "SSN [SSN_1].");
        assert_eq!(redact("(078-05-1120)"), "([SSN_1])");
        for text in ["000-12-3456", "666-12-3456", "900-12-3456", "999-12-3456", "123-00-4567", "123-45-0000"] {
            assert_untouched(text);
        }
        assert_untouched("1123-45-6789 and 123-45-67890");
    }

    #[test]
    fn ipv4_addresses() {
        assert_eq!(redact("from 192.168.1.20 and 8.8.8.8."), "from [IP_ADDRESS_1] and [IP_ADDRESS_2].");
        assert_eq!(redact("10.0.0.1:8080, 10.0.0.0/8"), "[IP_ADDRESS_1]:8080, [IP_ADDRESS_2]/8");
        assert_eq!(redact("10.0.0.1,10.0.0.2"), "[IP_ADDRESS_1],[IP_ADDRESS_2]");
        for text in [
            "999.1.1.1",
            "256.1.1.1",
            "1.2.3.256",
            "version 1.2.3.4.5",
            "1.2.3.4.5.6.7.8",
            "v1.2.3.4",
            "1.2.3",
            "1.2.3.4567",
        ] {
            assert_untouched(text);
        }
    }

    #[test]
    fn ibans_are_mod_97_checked() {
        for iban in [
            "DE89370400440532013000",
            "DE89 3704 0044 0532 0130 00",
            "GB82 WEST 1234 5698 7654 32",
            "GB82WEST12345698765432",
            "NL91ABNA0417164300",
            "FR14 2004 1010 0505 0001 3M02 606",
            "NO9386011117947",
            "de89370400440532013000",
        ] {
            assert_redacted_as(iban, "[IBAN_1]");
        }
        assert_eq!(redact("IBAN: DE89 3704 0044 0532 0130 00 THEN pay"), "IBAN: [IBAN_1] THEN pay");
        assert_eq!(redact("ES91 2100 0418 4502 0005 1332 ABCD"), "[IBAN_1] ABCD");
        for text in [
            "DE88370400440532013000",
            "DE89 3704 0044 0532 0130 02",
            "XX89370400440532013000",
            "DE8937040044053201300",
            "ID DE89370400440532013000X",
            "AB12CDEFGHIJKLMNOP",
            "AB12 CDEF GHIJ KLMN OP",
            "DE89 3704 0044 0532 013000",
        ] {
            assert_untouched(text);
        }
        // A failed IBAN is not a shield: digits inside it that make a Luhn-valid card are still redacted as one,
        // since hiding a number too many is safer than leaking one.
        assert_eq!(redact("DE89 3704 0044 0532 0130 01"), "DE89 [CARD_NUMBER_1]");
    }

    #[test]
    fn iban_length_table_is_well_formed() {
        let entries: Vec<&[u8]> = IBAN_LENGTHS.as_bytes().chunks(5).collect();
        assert!(entries.len() > 80);
        for entry in entries {
            let (country, length) = entry.split_at(2);
            assert!(country.iter().all(u8::is_ascii_uppercase), "{entry:?}");
            let length: usize = std::str::from_utf8(&length[..2]).expect("ascii").parse().expect("a length");
            assert!((15..=34).contains(&length), "{entry:?}");
            assert!(entry.len() == 4 || entry[4] == b' ', "{entry:?}");
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
    fn numbering_is_stable_and_per_kind() {
        let mut vault = PiiVault::new();
        let redacted = vault.redact_text("a@x.io, b@x.io, a@x.io, 555-123-4567");
        assert_eq!(redacted, "[EMAIL_1], [EMAIL_2], [EMAIL_1], [PHONE_1]");
        assert_eq!(vault.redact_text("again a@x.io and c@x.io"), "again [EMAIL_1] and [EMAIL_3]");
        assert_eq!(vault.len(), 4);
        assert_eq!(vault.counts(), vec![(PiiKind::Email, 3), (PiiKind::Phone, 1)]);
    }

    #[test]
    fn restores_inside_longer_strings_and_json_text() {
        let mut vault = PiiVault::new();
        vault.redact_text("john@example.com 555-123-4567");
        assert_eq!(vault.restore_text("Hello [EMAIL_1]!"), "Hello john@example.com!");
        assert_eq!(vault.restore_text("x[PHONE_1][EMAIL_1]y"), "x555-123-4567john@example.comy");
        assert_eq!(
            vault.restore_text("[EMAIL_2] [PHONE_10] [email_1] [EMAIL_01]"),
            "[EMAIL_2] [PHONE_10] [email_1] [EMAIL_01]"
        );
        let echoed = json!({"content": [{"type": "text", "text": "Sent to \"[EMAIL_1]\"\nat [PHONE_1]"}]});
        let json_text = serde_json::to_string(&echoed).expect("serialises");
        let restored: Value = serde_json::from_str(&vault.restore_text(&json_text)).expect("still JSON");
        assert_eq!(restored["content"][0]["text"], "Sent to \"john@example.com\"\nat 555-123-4567");
    }

    #[test]
    fn literal_placeholders_in_the_input_are_never_rewritten() {
        let mut vault = PiiVault::new();
        let text = "keep [EMAIL_1] and [PHONE_1], hide a@b.io";
        let redacted = vault.redact_text(text);
        assert_eq!(redacted, "keep [EMAIL_1] and [PHONE_1], hide [EMAIL_2]");
        assert_eq!(vault.restore_text(&redacted), text);
        // Later inputs can neither be handed [EMAIL_1] nor collide with [EMAIL_2].
        let later = "[EMAIL_2] c@d.io";
        let redacted_later = vault.redact_text(later);
        assert_eq!(redacted_later, "[EMAIL_3] [EMAIL_4]");
        assert_eq!(vault.restore_text(&redacted_later), later);
        assert_eq!(vault.restore_text(&redacted), text);
        // The escaped literal is not personal data.
        assert_eq!(vault.counts(), vec![(PiiKind::Email, 2)]);
    }

    #[test]
    fn values_are_redacted_at_any_depth_keys_untouched() {
        let mut vault = PiiVault::new();
        let args = json!({
            "to": "john@example.com",
            "a@b.io": ["call 555-123-4567", {"card": "4111111111111111", "n": 5, "ok": true, "none": null}],
        });
        let redacted = vault.redact_value(&args);
        assert_eq!(
            redacted,
            json!({
                "to": "[EMAIL_1]",
                "a@b.io": ["call [PHONE_1]", {"card": "[CARD_NUMBER_1]", "n": 5, "ok": true, "none": null}],
            })
        );
        assert_eq!(vault.restore_value(&redacted), args);
        assert_eq!(vault.restore_value(&json!({"echo": ["[EMAIL_1]!"]})), json!({"echo": ["john@example.com!"]}));
    }

    #[test]
    fn violations_and_debug_carry_counts_only() {
        let mut vault = PiiVault::new();
        assert!(vault.is_empty());
        assert!(vault.violations().is_empty());
        vault.redact_text("john@example.com jane@example.com 123-45-6789");
        assert!(!vault.is_empty());
        let messages: Vec<String> = vault.violations().into_iter().map(|v| v.message).collect();
        assert_eq!(messages, ["2 e-mail addresses redacted", "1 US social security number redacted"]);
        assert!(vault.violations().iter().all(|v| v.kind == "pii" && v.detector == "pii_redaction"));
        let debug = format!("{vault:?}");
        assert!(debug.contains("EMAIL") && debug.contains('2'), "{debug}");
        for secret in ["john", "jane", "example", "6789"] {
            assert!(!debug.contains(secret), "{debug}");
        }
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

    /// A valid card number (14 to 19 digits): a 4, random digits and the Luhn check digit.
    fn card() -> impl Strategy<Value = String> {
        (prop::collection::vec(0u8..10, 12..=17), any::<bool>()).prop_map(|(digits, grouped)| {
            let mut number: Vec<u8> = std::iter::once(4).chain(digits).collect();
            let sum: u32 = number
                .iter()
                .rev()
                .enumerate()
                .map(|(i, &d)| {
                    let d = u32::from(d);
                    if i % 2 == 0 { if d * 2 > 9 { d * 2 - 9 } else { d * 2 } } else { d }
                })
                .sum();
            number.push(u8::try_from((10 - sum % 10) % 10).expect("a digit"));
            let digits: String = number.iter().map(|d| char::from(b'0' + d)).collect();
            if grouped {
                digits
                    .as_bytes()
                    .chunks(4)
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                digits
            }
        })
    }

    /// A valid German IBAN: 18 random digits with computed check digits.
    fn iban() -> impl Strategy<Value = String> {
        prop::collection::vec(0u8..10, 18).prop_map(|digits| {
            let bban: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
            // D=13, E=14, check digits 00 while computing.
            let remainder = format!("{bban}131400").bytes().fold(0u32, |acc, b| (acc * 10 + u32::from(b - b'0')) % 97);
            format!("DE{:02}{bban}", 98 - remainder)
        })
    }

    fn pii() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}(\\.[a-z]{1,5})?@[a-z]{1,8}\\.(com|io|co\\.uk)",
            "\\+1 [2-9][0-9]{2}-[0-9]{3}-[0-9]{4}",
            "\\([2-9][0-9]{2}\\) [0-9]{3}-[0-9]{4}",
            "\\+44 20 [0-9]{4} [0-9]{4}",
            card(),
            "[1-5][0-9]{2}-[1-9][0-9]-[1-9][0-9]{3}",
            "(25[0-5]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|1[0-9]{2}|[1-9]?[0-9])){3}",
            iban(),
        ]
    }

    fn noise() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9 .,:@+()\\[\\]_\\-\\\\/é€\n]{0,12}",
            "\\[(EMAIL|PHONE|CARD_NUMBER|SSN|IP_ADDRESS|IBAN)_[1-9]\\]",
            any::<String>(),
        ]
    }

    fn mixed_text() -> impl Strategy<Value = String> {
        prop::collection::vec(prop_oneof![pii(), noise()], 0..12).prop_map(|parts| parts.concat())
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            mixed_text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((mixed_text(), inner), 0..6)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn round_trip_of_arbitrary_text(text in any::<String>()) {
            let mut vault = PiiVault::new();
            let redacted = vault.redact_text(&text);
            prop_assert_eq!(vault.restore_text(&redacted), text);
        }

        #[test]
        fn round_trip_of_text_with_pii_and_literals(text in mixed_text()) {
            let mut vault = PiiVault::new();
            let redacted = vault.redact_text(&text);
            prop_assert_eq!(vault.restore_text(&redacted), text);
        }

        #[test]
        fn round_trip_holds_for_every_input_of_a_shared_vault(texts in prop::collection::vec(mixed_text(), 1..5)) {
            let mut vault = PiiVault::new();
            let redacted: Vec<String> = texts.iter().map(|text| vault.redact_text(text)).collect();
            for (text, redacted) in texts.iter().zip(&redacted) {
                prop_assert_eq!(&vault.restore_text(redacted), text);
            }
        }

        #[test]
        fn separated_pii_never_reaches_the_upstream(values in prop::collection::vec(pii(), 1..8)) {
            let text = values.join(" ; ");
            let mut vault = PiiVault::new();
            let redacted = vault.redact_text(&text);
            for value in &values {
                prop_assert!(!redacted.contains(value.as_str()), "{} leaked in {}", value, redacted);
            }
            prop_assert_eq!(vault.restore_text(&redacted), text);
        }

        #[test]
        fn round_trip_of_json_values(value in json_value()) {
            let mut vault = PiiVault::new();
            let redacted = vault.redact_value(&value);
            prop_assert_eq!(vault.restore_value(&redacted), value);
        }
    }
}
