//! Tool pins (contract section 11): what a tool definition is pinned by, and what the last live discovery of each
//! server found against its pins, for the admin API's review (`GET …/tool-pins`). Prompts, resources and resource
//! templates are pinned the same way (contract 14); the last listing of each kind is kept here too
//! ([`OfferReview`], for `GET …/prompt-pins` and `…/resource-pins`).
//!
//! A pin is `sha256:` and the hex SHA-256 of the tool's whole definition as the upstream sent it (contract section
//! 14: every field, `_meta`, `icons` and fields this gateway does not know included), as JSON with its object keys
//! sorted at every depth (`json_strict::canonical`), so the same definition pins the same whatever order a server
//! writes its keys in, and no field can change unseen. A definition with only the fields section 11 named (name,
//! title, description, inputSchema, outputSchema, annotations) pins as it did when only those were covered: the
//! object hashed is the same.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The pin of one tool definition: over all of it.
pub fn pin_of(tool: &Value) -> String {
    let digest = Sha256::digest(crate::json_strict::canonical(tool).as_bytes());
    format!("sha256:{}", crate::secrets::hex(&digest))
}

/// Whether `value` has the form of a pin.
pub fn is_pin(value: &str) -> bool {
    value
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// How one tool stands against its pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PinStatus {
    Pinned,
    Changed,
    New,
    Missing,
}

/// One tool of the last discovery of a server against its pins.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PinRow {
    pub tool_name: String,
    pub pinned: Option<String>,
    pub current: Option<String>,
    pub status: PinStatus,
    /// The definition the pin was taken of, when this gateway saw it (at the first use, an approval, or a discovery
    /// that matched the pin since it started): shown beside the current one when they differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_definition: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_definition: Option<Value>,
}

/// What the last live discovery of each (configuration, server) found, and the pins kept in memory for servers whose
/// file could not be written (trust on first use with a read-only configuration).
#[derive(Default)]
pub struct PinBook {
    reviews: Mutex<HashMap<(String, String), Vec<PinRow>>>,
    /// Definitions seen with their pin, by pin (what a pin stands for, for the review).
    seen: Mutex<HashMap<String, Value>>,
    in_memory: Mutex<HashMap<(String, String), indexmap::IndexMap<String, String>>>,
    /// What the last listing of each (configuration, server, kind of offer) found against its pins (contract 14:
    /// prompts, resources, templates); a listing reports only what differs from the last one.
    offers: Mutex<HashMap<OfferKey, OfferReview>>,
    /// Pins of prompts and resources kept in memory, by (configuration, server, field: `prompt_pins`,
    /// `resource_pins`), for servers whose file could not be written.
    offers_in_memory: Mutex<HashMap<OfferKey, indexmap::IndexMap<String, String>>>,
    /// Per (configuration, server): since when, and how many items' records its reviews have written this minute.
    told: Mutex<HashMap<(String, String), (std::time::Instant, usize)>>,
}

/// (configuration, server, kind or field) of a server's prompts and resources in the pin book.
type OfferKey = (String, String, &'static str);

/// The last review of one kind of a server's offers (prompts, resources or templates).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OfferReview {
    /// Each item against its pin, in the order listed (missing ones last).
    pub rows: Vec<PinRow>,
    /// The poisoning findings, as `(item, kind, excerpt)`.
    pub findings: Vec<(String, &'static str, String)>,
    /// The items left out of service (by their key), so that a request for one answers `TOOL_QUARANTINED`.
    pub quarantined: Vec<String>,
}

impl PinBook {
    pub fn record(&self, config_id: &str, server: &str, rows: Vec<PinRow>) {
        lock(&self.reviews).insert((config_id.to_string(), server.to_string()), rows);
    }

    /// The rows of the last discovery of `server`, if there was one.
    pub fn last(&self, config_id: &str, server: &str) -> Option<Vec<PinRow>> {
        lock(&self.reviews).get(&(config_id.to_string(), server.to_string())).cloned()
    }

    /// Remembers that `definition` is what `pin` stands for.
    pub fn saw(&self, pin: &str, definition: &Value) {
        let mut seen = lock(&self.seen);
        if !seen.contains_key(pin) {
            seen.insert(pin.to_string(), definition.clone());
        }
    }

    /// The definition `pin` stands for, if this gateway saw it.
    pub fn definition_of(&self, pin: &str) -> Option<Value> {
        lock(&self.seen).get(pin).cloned()
    }

    /// Pins kept in memory for `server` (its file is read-only).
    pub fn in_memory(&self, config_id: &str, server: &str) -> Option<indexmap::IndexMap<String, String>> {
        lock(&self.in_memory).get(&(config_id.to_string(), server.to_string())).cloned()
    }

    pub fn keep_in_memory(&self, config_id: &str, server: &str, pins: indexmap::IndexMap<String, String>) {
        lock(&self.in_memory).insert((config_id.to_string(), server.to_string()), pins);
    }

    /// Records the review of `kind` (`prompt`, `resource`, `template`) of `server`; returns the one it replaces.
    pub fn record_offers(
        &self,
        config_id: &str,
        server: &str,
        kind: &'static str,
        review: OfferReview,
    ) -> Option<OfferReview> {
        lock(&self.offers).insert((config_id.to_string(), server.to_string(), kind), review)
    }

    /// Whether a review of `server` may write `items` records of one item each (else one summary): at most `budget`
    /// such records per server and minute, whatever the number of its reviews, so that a server changing its
    /// definitions at every listing cannot flood the audit log or the log (contract 14).
    pub fn may_tell(&self, config_id: &str, server: &str, items: usize, budget: usize) -> bool {
        let now = std::time::Instant::now();
        let mut told = lock(&self.told);
        told.retain(|_, (since, _)| now.duration_since(*since) < std::time::Duration::from_secs(60));
        let (_, used) = told.entry((config_id.to_string(), server.to_string())).or_insert((now, 0));
        if *used + items > budget {
            return false;
        }
        *used += items;
        true
    }

    /// Whether the last review of `kind` of `server` quarantined an item `held` picks out (by its key). Read in place:
    /// asked at every read, subscription and relayed update of an offer, it copies nothing.
    pub fn offer_quarantined(
        &self,
        config_id: &str,
        server: &str,
        kind: &'static str,
        held: impl Fn(&str) -> bool,
    ) -> bool {
        let offers = lock(&self.offers);
        let last = offers.get(&(config_id.to_string(), server.to_string(), kind));
        last.is_some_and(|review| review.quarantined.iter().any(|key| held(key)))
    }

    /// The last review of `kind` of `server`, if there was one.
    pub fn last_offers(&self, config_id: &str, server: &str, kind: &'static str) -> Option<OfferReview> {
        lock(&self.offers).get(&(config_id.to_string(), server.to_string(), kind)).cloned()
    }

    /// Pins of `field` (`prompt_pins`, `resource_pins`) kept in memory for `server` (its file is read-only).
    pub fn offers_in_memory(
        &self,
        config_id: &str,
        server: &str,
        field: &'static str,
    ) -> Option<indexmap::IndexMap<String, String>> {
        lock(&self.offers_in_memory).get(&(config_id.to_string(), server.to_string(), field)).cloned()
    }

    pub fn keep_offers_in_memory(
        &self,
        config_id: &str,
        server: &str,
        field: &'static str,
        pins: indexmap::IndexMap<String, String>,
    ) {
        lock(&self.offers_in_memory).insert((config_id.to_string(), server.to_string(), field), pins);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"x": {"type": "string"}}})
    }

    #[test]
    fn pins_ignore_key_order_but_see_every_change() {
        let a = json!({"name": "t", "description": "d", "inputSchema": schema()});
        let b = json!({"inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"}, "description": "d",
            "name": "t"});
        assert_eq!(pin_of(&a), pin_of(&b));
        assert!(is_pin(&pin_of(&a)));
        let changed = json!({"name": "t", "description": "d!", "inputSchema": schema()});
        assert_ne!(pin_of(&a), pin_of(&changed));
        assert!(!is_pin("sha256:XYZ") && !is_pin("md5:00"));
    }

    #[test]
    fn every_field_is_pinned_meta_icons_and_unknown_ones_included() {
        let base = json!({"name": "t", "description": "d", "inputSchema": schema()});
        let with = |field: &str, value: Value| {
            let mut tool = base.clone();
            tool[field] = value;
            pin_of(&tool)
        };
        let meta = with("_meta", json!({"note": "a"}));
        assert_ne!(meta, pin_of(&base), "adding _meta changes the pin");
        assert_ne!(meta, with("_meta", json!({"note": "b"})), "changing _meta changes the pin");
        let icon = with("icons", json!([{"src": "https://example.com/a.png"}]));
        assert_ne!(icon, pin_of(&base));
        assert_ne!(icon, with("icons", json!([{"src": "https://example.com/b.png"}])));
        assert_ne!(with("x-unknown", json!("a")), pin_of(&base), "a field no version of MCP defines is pinned too");
    }

    /// Pins taken when only section 11's fields were covered stay valid for definitions that have no other field:
    /// the hash is of the same object.
    #[test]
    fn a_definition_with_only_the_old_fields_keeps_its_old_pin() {
        let tool = json!({"name": "t", "title": "T", "description": "d", "inputSchema": schema(),
            "outputSchema": schema(), "annotations": {"readOnlyHint": true}});
        let old_fields = ["name", "title", "description", "inputSchema", "outputSchema", "annotations"];
        let covered: serde_json::Map<String, Value> =
            old_fields.iter().map(|f| (f.to_string(), tool[*f].clone())).collect();
        let old = Sha256::digest(crate::json_strict::canonical(&Value::Object(covered)).as_bytes());
        assert_eq!(pin_of(&tool), format!("sha256:{}", crate::secrets::hex(&old)));
    }
}
