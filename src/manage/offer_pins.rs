//! The pins of what a server offers besides its tools (contract 14): its prompts (`prompt_pins`, by name) and its
//! resources and resource templates (`resource_pins`, by `uri` and `uriTemplate`), reviewed, approved and forgotten
//! as tool pins are (`configs.rs`). The review shows each item of the last listing of each kind against its pin (the
//! pin book of `config/pins.rs`, filled by `gateway/boundary/offer_review.rs`); an approval names the pin reviewed and
//! is refused when the last listing found another.

use indexmap::IndexMap;
use serde_json::{Value, json};

use super::configs::{resolve, reviewed_pin, server_entry_mut, server_index};
use super::{ManageError, ManageResult};
use crate::config::model::ServerEntry;
use crate::config::pins::{PinBook, PinRow, PinStatus};
use crate::config::{ConfigFile, Snapshot};

/// Which pins of a server entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offers {
    Prompts,
    Resources,
}

impl Offers {
    /// The kinds of the pin book's reviews these pins cover.
    fn kinds(self) -> &'static [&'static str] {
        match self {
            Offers::Prompts => &["prompt"],
            Offers::Resources => &["resource", "template"],
        }
    }

    /// The field a row names its item by.
    fn key(self) -> &'static str {
        match self {
            Offers::Prompts => "name",
            Offers::Resources => "uri",
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Offers::Prompts => "prompt",
            Offers::Resources => "resource",
        }
    }

    /// The entry's field, as the pin book keeps the pins it holds in memory.
    fn field(self) -> &'static str {
        match self {
            Offers::Prompts => "prompt_pins",
            Offers::Resources => "resource_pins",
        }
    }

    fn pins(self, entry: &mut ServerEntry) -> &mut Option<IndexMap<String, String>> {
        match self {
            Offers::Prompts => &mut entry.prompt_pins,
            Offers::Resources => &mut entry.resource_pins,
        }
    }

    /// The rows of the last listings of these kinds, each with its kind; `None` before any listing.
    fn last(self, book: &PinBook, config_id: &str, server: &str) -> Option<Vec<(&'static str, PinRow)>> {
        let mut found = None;
        for kind in self.kinds() {
            if let Some(review) = book.last_offers(config_id, server, kind) {
                let rows: &mut Vec<_> = found.get_or_insert_with(Vec::new);
                rows.extend(review.rows.into_iter().map(|row| (*kind, row)));
            }
        }
        found
    }

    /// A row as the API shows it: named by `name` (prompts) or `uri` (resources, with their `kind`).
    fn show(self, kind: &str, row: PinRow) -> Value {
        let mut value = serde_json::to_value(&row).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            fields.remove("tool_name");
            fields.insert(self.key().to_string(), Value::String(row.tool_name));
            if self == Offers::Resources {
                fields.insert("kind".to_string(), Value::String(kind.to_string()));
            }
        }
        value
    }
}

/// The pins of a server's prompts or resources: the list of rows itself, each item of the last listing against its
/// pin, or, before any listing, the pins alone.
pub fn list(snap: &Snapshot, book: &PinBook, ident: &str, server: &str, offers: Offers) -> ManageResult {
    let id = resolve(snap, ident)?;
    let index = server_index(&snap.file, &id, ident, server)?;
    let mut entry = snap.file.mcp_configs[&id].mcp_config[index].clone();
    let rows = match offers.last(book, &id, &entry.server_name) {
        Some(rows) => rows,
        None => {
            let kept = book.offers_in_memory(&id, &entry.server_name, offers.field());
            let pins = offers.pins(&mut entry).clone().or(kept).unwrap_or_default();
            pins.into_iter()
                .map(|(key, pin)| {
                    let kind = if offers == Offers::Prompts {
                        "prompt"
                    } else if key.contains('{') {
                        "template"
                    } else {
                        "resource"
                    };
                    let row = PinRow {
                        tool_name: key,
                        pinned: Some(pin),
                        current: None,
                        status: PinStatus::Pinned,
                        pinned_definition: None,
                        current_definition: None,
                    };
                    (kind, row)
                })
                .collect()
        }
    };
    Ok(Value::Array(rows.into_iter().map(|(kind, row)| offers.show(kind, row)).collect()))
}

/// Pins the definition of `item` that the last listing found, only if it is the one the operator reviewed (the body's
/// `sha256`); otherwise nothing changes and the answer is 409, as for tools.
#[allow(clippy::too_many_arguments)]
pub fn approve(
    file: &mut ConfigFile,
    snap: &Snapshot,
    book: &PinBook,
    ident: &str,
    server: &str,
    offers: Offers,
    item: &str,
    body: Value,
) -> ManageResult {
    let (id, entry) = server_entry_mut(file, snap, ident, server)?;
    let reviewed = reviewed_pin(body)?;
    let noun = offers.noun();
    let rows = offers.last(book, &id, &entry.server_name).ok_or_else(|| {
        ManageError::Conflict(format!(
            "the {noun}s of server {server:?} have not been listed since the gateway started: list them first"
        ))
    })?;
    let Some((_, row)) = rows.into_iter().find(|(_, row)| row.tool_name == item) else {
        return Err(ManageError::NotFound(format!("the last listing of server {server:?} has no {noun} {item:?}")));
    };
    let Some(current) = row.current else {
        return Err(ManageError::Conflict(format!("{noun} {item:?} is no longer offered by server {server:?}")));
    };
    if current != reviewed {
        return Err(ManageError::Conflict(format!(
            "the current definition of {noun} {item:?} is {current}, not the {reviewed} you approved: the server \
             changed it since; review it again (GET …/{noun}-pins)"
        )));
    }
    let kept = book.offers_in_memory(&id, &entry.server_name, offers.field());
    let pins = offers.pins(entry);
    let mut approved = pins.clone().or(kept).unwrap_or_default();
    // The pin written is the one reviewed (equal to the current one here), never a later listing's.
    approved.insert(item.to_string(), reviewed.clone());
    *pins = Some(approved);
    Ok(json!({"server_name": entry.server_name, offers.key(): item, "pinned": reviewed}))
}

/// Removes the pin of `item`: the next listing treats it as new.
pub fn forget(
    file: &mut ConfigFile,
    snap: &Snapshot,
    ident: &str,
    server: &str,
    offers: Offers,
    item: &str,
) -> ManageResult {
    let (_, entry) = server_entry_mut(file, snap, ident, server)?;
    let removed = offers.pins(entry).as_mut().and_then(|pins| pins.shift_remove(item));
    match removed {
        Some(pin) => Ok(json!({"server_name": entry.server_name, offers.key(): item, "removed": pin})),
        None => Err(ManageError::NotFound(format!("server {server:?} has no pin for {} {item:?}", offers.noun()))),
    }
}
