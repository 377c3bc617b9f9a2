//! The placeholder vault: redaction of PII into placeholders, and restoration of the originals.
//!
//! One [`PiiVault`] lives for one tool call. `redact_value` (or `redact_text`) replaces what `detect.rs` finds with
//! placeholders numbered per kind. The vault keeps both directions of the mapping; `restore_value` (or `restore_text`)
//! puts the originals back wherever the upstream echoed a placeholder, also inside longer strings and inside JSON text
//! (originals are made only of ASCII characters JSON never escapes).
//!
//! Object keys are redacted like string values (contract 14: an e-mail address can be a key as well as a value), and
//! restored wherever a key holds a placeholder. A card number sent as a JSON number, whole or as a float with nothing
//! after the point (`4111111111111111.0`, `4.111111111111111e15`: serde_json reads both as the same `f64`, exact below
//! 2^53, which every 16-digit card number is), becomes its placeholder string, and is restored as the number it was.
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
use serde_json::{Number, Value};

use super::detect::{PiiKind, Span, detect};
use crate::guardrails::{Violation, compile_builtin as compile, strings};

// What a placeholder looks like, both when restoring and when spotting literals in an input. It can hold no `[`
// after its first character, which is what keeps literals and inserted placeholders from ever running together.
pub(super) const PLACEHOLDER_PATTERN: &str = r"\[(?:EMAIL|PHONE|CARD_NUMBER|SSN|IP_ADDRESS|IBAN)_[1-9][0-9]{0,9}\]";
static PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| compile(PLACEHOLDER_PATTERN));

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
    /// Placeholders that stand for a JSON number (a card number sent as one): restored as that number, as it was
    /// written (integer or float).
    numbers: HashMap<String, Number>,
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

    /// `value` with every string inside it redacted, at any depth, object keys included, and every whole number
    /// that is a card number. A key without personal data (a parameter name, the usual key) stays as it is.
    pub fn redact_value(&mut self, value: &Value) -> Value {
        match value {
            Value::Number(number) => match card_digits(number).map(|digits| (self.redact_text(&digits), digits)) {
                Some((redacted, digits)) if redacted != digits => {
                    self.numbers.entry(redacted.clone()).or_insert_with(|| number.clone());
                    Value::String(redacted)
                }
                _ => value.clone(),
            },
            Value::String(text) => Value::String(self.redact_text(text)),
            Value::Array(items) => Value::Array(items.iter().map(|item| self.redact_value(item)).collect()),
            Value::Object(fields) => Value::Object(
                fields.iter().map(|(key, field)| (self.redact_text(key), self.redact_value(field))).collect(),
            ),
            other => other.clone(),
        }
    }

    /// `text` with every placeholder this vault handed out replaced by its original, wherever it appears.
    pub fn restore_text(&self, text: &str) -> String {
        self.restored(text).unwrap_or_else(|| text.to_owned())
    }

    /// `text` restored as [`Self::restore_text`] does, or `None` when it holds no placeholder this vault handed out
    /// (then nothing needs to be copied).
    pub fn restored(&self, text: &str) -> Option<String> {
        if self.originals.is_empty() {
            return None;
        }
        let mut restored: Option<String> = None;
        let mut copied = 0;
        for found in PLACEHOLDER.find_iter(text) {
            if let Some(original) = self.originals.get(found.as_str()) {
                let restored = restored.get_or_insert_with(|| String::with_capacity(text.len()));
                restored.push_str(&text[copied..found.start()]);
                restored.push_str(original);
                copied = found.end();
            }
        }
        let mut restored = restored?;
        restored.push_str(&text[copied..]);
        Some(restored)
    }

    /// Restores `value` where it is: every string value inside it (`strings.rs`'s walk, so the same strings the output
    /// checks read), at any depth, and every key; strings without a placeholder are not copied.
    pub fn restore_in_place(&self, value: &mut Value) {
        if self.originals.is_empty() {
            return;
        }
        if !self.numbers.is_empty() {
            // A placeholder that stands for a number changes the value's kind: the rare case takes the copying walk.
            *value = self.restore_value(value);
            return;
        }
        strings::rewrite(value, |text| self.restored(text));
        self.restore_keys(value);
    }

    /// Puts the originals back into the keys of every object in `value`; an object is rebuilt only when one of its
    /// keys holds a placeholder. Iterative, as the other walks.
    fn restore_keys(&self, value: &mut Value) {
        let mut pending: Vec<&mut Value> = vec![value];
        while let Some(value) = pending.pop() {
            match value {
                Value::Object(fields) => {
                    if fields.keys().any(|key| PLACEHOLDER.is_match(key)) {
                        *fields = std::mem::take(fields)
                            .into_iter()
                            .map(|(key, field)| (self.restore_key(key), field))
                            .collect();
                    }
                    pending.extend(fields.values_mut());
                }
                Value::Array(items) => pending.extend(items.iter_mut()),
                Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
            }
        }
    }

    fn restore_key(&self, key: String) -> String {
        self.restored(&key).unwrap_or(key)
    }

    /// `value` with every string inside it restored, at any depth, keys included.
    pub fn restore_value(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => match self.numbers.get(text) {
                Some(number) => Value::Number(number.clone()),
                None => Value::String(self.restore_text(text)),
            },
            Value::Array(items) => Value::Array(items.iter().map(|item| self.restore_value(item)).collect()),
            Value::Object(fields) => Value::Object(
                fields.iter().map(|(key, field)| (self.restore_text(key), self.restore_value(field))).collect(),
            ),
            other => other.clone(),
        }
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

/// The digits of `number` when it may be a card number, whole or a float with nothing after the point: 15 to 19
/// digits starting with a card network's 2-6, so that epoch timestamps (13 digits in ms, or 16 and 19 starting with 1)
/// stay numbers. A float is taken as the integer it holds (exact below 2^53; above, the digits are those of the
/// number the upstream would be sent, which is what could leak).
fn card_digits(number: &Number) -> Option<String> {
    let digits = match number.as_u64() {
        Some(whole) => whole.to_string(),
        None => {
            let float = number.as_f64().filter(|f| f.is_finite() && f.fract() == 0.0 && (1e14..1e19).contains(f))?;
            // In range and whole: the cast is exact.
            (float as u64).to_string()
        }
    };
    ((15..=19).contains(&digits.len()) && digits.starts_with(['2', '3', '4', '5', '6'])).then_some(digits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn card_numbers_given_as_json_numbers_are_redacted_and_timestamps_are_not() {
        let mut vault = PiiVault::new();
        let value = serde_json::json!({"card": 4111111111111111u64, "at": 1764086400123u64, "us": 1764086400123456u64});
        let redacted = vault.redact_value(&value);
        assert_eq!(redacted["card"], serde_json::json!("[CARD_NUMBER_1]"));
        assert_eq!(redacted["at"], value["at"], "an epoch in milliseconds stays a number");
        assert_eq!(redacted["us"], value["us"], "an epoch in microseconds stays a number");
        assert_eq!(vault.restore_value(&redacted), value, "restored as the number it was");
    }
    use serde_json::json;

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
    fn values_and_keys_are_redacted_at_any_depth() {
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
                "[EMAIL_2]": ["call [PHONE_1]", {"card": "[CARD_NUMBER_1]", "n": 5, "ok": true, "none": null}],
            })
        );
        assert_eq!(vault.restore_value(&redacted), args);
        assert_eq!(vault.restore_value(&json!({"echo": ["[EMAIL_1]!"]})), json!({"echo": ["john@example.com!"]}));
    }

    #[test]
    fn keys_are_restored_in_place_wherever_the_upstream_puts_them() {
        let mut vault = PiiVault::new();
        let args = json!({"bob@example.com": {"ssn 123-45-6789": true}, "text": "hi"});
        let redacted = vault.redact_value(&args);
        assert_eq!(redacted, json!({"[EMAIL_1]": {"ssn [SSN_1]": true}, "text": "hi"}));
        let mut answer = json!({"structuredContent": {"[EMAIL_1]": {"ssn [SSN_1]": true}, "seen": "[EMAIL_1]"}});
        vault.restore_in_place(&mut answer);
        assert_eq!(
            answer,
            json!({"structuredContent": {"bob@example.com": {"ssn 123-45-6789": true}, "seen": "bob@example.com"}})
        );
        let mut untouched = json!({"[EMAIL_9]": 1, "plain": {"k": "v"}});
        vault.restore_in_place(&mut untouched);
        assert_eq!(untouched, json!({"[EMAIL_9]": 1, "plain": {"k": "v"}}), "not a placeholder of this vault");
    }

    #[test]
    fn card_numbers_given_as_json_floats_are_redacted_and_restored_as_written() {
        for written in ["4111111111111111.0", "4.111111111111111e15", "4111111111111111e0", "5555555555554444.00"] {
            let args: Value =
                serde_json::from_str(&format!(r#"{{"card": {written}, "price": 12.5, "n": 1.0}}"#)).expect("JSON");
            let mut vault = PiiVault::new();
            let redacted = vault.redact_value(&args);
            assert_eq!(redacted["card"], json!("[CARD_NUMBER_1]"), "{written}");
            assert_eq!((&redacted["price"], &redacted["n"]), (&args["price"], &args["n"]), "other floats stay");
            let restored = vault.restore_value(&redacted);
            assert_eq!(restored, args, "{written}: restored as the float it was");
            assert!(restored["card"].is_f64());
            let mut in_place = redacted.clone();
            vault.restore_in_place(&mut in_place);
            assert_eq!(in_place, args);
        }
        let mut vault = PiiVault::new();
        for not_a_card in
            [json!(4111111111111112.0), json!(1764086400123456.0), json!(4.5e15), json!(-4.111111111111111e15)]
        {
            assert_eq!(vault.redact_value(&not_a_card), not_a_card, "{not_a_card}");
        }
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
