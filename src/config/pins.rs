//! Tool pins (contract section 11): what a tool definition is pinned by, and what the last live discovery of each
//! server found against its pins, for the admin API's review (`GET …/tool-pins`).
//!
//! A pin is `sha256:` and the hex SHA-256 of the tool's definition (name, title, description, inputSchema,
//! outputSchema, annotations) as JSON with its object keys sorted at every depth, so the same definition pins the same
//! whatever order a server writes its keys in.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The fields of a tool definition a pin covers.
pub const PINNED_FIELDS: [&str; 6] = ["name", "title", "description", "inputSchema", "outputSchema", "annotations"];

/// The pin of one tool definition.
pub fn pin_of(tool: &Value) -> String {
    let mut covered = Map::new();
    for field in PINNED_FIELDS {
        if let Some(value) = tool.get(field) {
            covered.insert(field.to_string(), value.clone());
        }
    }
    let digest = Sha256::digest(crate::json_strict::canonical(&Value::Object(covered)).as_bytes());
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
#[derive(Clone, Debug, serde::Serialize)]
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
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pins_ignore_key_order_and_other_fields_but_see_every_covered_change() {
        let a = json!({"name": "t", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}});
        let b = json!({"inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"}, "description": "d", "name": "t", "_meta": {"z": 1}});
        assert_eq!(pin_of(&a), pin_of(&b));
        assert!(is_pin(&pin_of(&a)));
        let changed = json!({"name": "t", "description": "d!", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}});
        assert_ne!(pin_of(&a), pin_of(&changed));
        assert!(!is_pin("sha256:XYZ") && !is_pin("md5:00"));
    }
}
