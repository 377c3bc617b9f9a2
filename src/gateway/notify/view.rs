//! Whether a reload changed what a client sees: a digest per list of everything in the configuration that a
//! listing of that [`Scope`] depends on, taken in the old and in the new snapshot.
//!
//! A listing is the upstreams' offers (not in the configuration: their changes arrive as the upstreams' own
//! `list_changed`) seen through the configuration: the view (`tool_exposure`, narrowed by what the client asked), the
//! name separator, the servers of the client's MCP configuration (command, prefix, filters, guardrail policies),
//! `tool_scan` and `tool_pinning`, the project's `tool_filter`, and the pins of that list, which decide what is
//! quarantined: a pin changed or forgotten counts, a pin only added (trust on first use, by the listing that found the
//! item) does not, and the pins of one list change only that list. Cost: a pass over the configuration's server
//! entries per scope and snapshot, no upstream asked.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::{Lists, Scope};
use crate::config::Snapshot;
use crate::config::model::ServerEntry;

/// Which lists of `scope` differ between `old` and `new`.
pub fn changed(old: &Snapshot, new: &Snapshot, scope: &Scope) -> Lists {
    let (before, after) = (digests(old, scope), digests(new, scope));
    let mut lists =
        Lists { tools: before[0] != after[0], prompts: before[1] != after[1], resources: before[2] != after[2] };
    if sees_upstreams(new, scope) && sees_upstreams(old, scope) {
        let (was, now) = (entries(old, scope), entries(new, scope));
        lists.tools |= pins_changed(was, now, |entry| entry.pinned_tools.as_ref());
        lists.prompts |= pins_changed(was, now, |entry| entry.prompt_pins.as_ref());
        lists.resources |= pins_changed(was, now, |entry| entry.resource_pins.as_ref());
    }
    lists
}

fn sees_upstreams(snapshot: &Snapshot, scope: &Scope) -> bool {
    snapshot.tool_exposure(Some(&scope.config)).chosen(scope.asked).upstream()
}

fn entries<'a>(snapshot: &'a Snapshot, scope: &Scope) -> &'a [ServerEntry] {
    snapshot.file.mcp_configs.get(&scope.config).map_or(&[][..], |c| &c.mcp_config[..])
}

/// The digests of the tools, prompts and resources `scope` sees under `snapshot`, pins aside.
fn digests(snapshot: &Snapshot, scope: &Scope) -> [u64; 3] {
    let view = snapshot.tool_exposure(Some(&scope.config)).chosen(scope.asked);
    let mut lists = [DefaultHasher::new(), DefaultHasher::new(), DefaultHasher::new()];
    // The gateway's own tools are listed in the gateway and "both" views; everything else only with the upstreams.
    view.gateway_tools().hash(&mut lists[0]);
    for list in &mut lists {
        view.upstream().hash(list);
    }
    if view.upstream() {
        let separator = snapshot.exposure(Some(&scope.config)).separator;
        let project = snapshot.file.projects.get(&scope.project).and_then(|p| p.tool_filter.as_ref());
        let project = project.and_then(|filter| serde_json::to_string(filter).ok());
        let entries: Vec<String> = entries(snapshot, scope).iter().map(without_pins).collect();
        // What the review quarantines (contract 11): the scan and pinning modes.
        let common = snapshot.file.common_mcp_gateway_config.as_ref();
        let review = common.map(|c| (c.tool_scan.clone(), c.tool_pinning.clone()));
        for list in &mut lists {
            review.hash(list);
            separator.hash(list);
            project.hash(list);
            entries.hash(list);
        }
    }
    lists.map(|list| list.finish())
}

/// `entry` as a listing depends on it besides its pins (and its wait).
fn without_pins(entry: &ServerEntry) -> String {
    let mut seen = entry.clone();
    (seen.pinned_tools, seen.prompt_pins, seen.resource_pins, seen.discovery_timeout) = (None, None, None, None);
    serde_json::to_string(&seen).unwrap_or_default()
}

/// Whether a pin of a server in both lists changed or went (an approval, a pin forgotten): what decides a
/// quarantine. A pin only added (trust on first use, written by the listing that found the item) changes nothing the
/// client saw.
fn pins_changed(
    was: &[ServerEntry],
    now: &[ServerEntry],
    pins: impl Fn(&ServerEntry) -> Option<&indexmap::IndexMap<String, String>>,
) -> bool {
    was.iter().any(|old| {
        let Some(old_pins) = pins(old) else { return false };
        let new_pins = now.iter().find(|new| new.server_name == old.server_name).and_then(&pins);
        old_pins.iter().any(|(item, pin)| new_pins.and_then(|new| new.get(item)) != Some(pin))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot(exposure: &str, servers: serde_json::Value) -> Snapshot {
        let file = json!({
            "common_mcp_gateway_config": {"tool_exposure": exposure},
            "mcp_configs": {
                "c1": {"mcp_config_name": "one", "mcp_config": servers},
                "c2": {"mcp_config_name": "two", "mcp_config": []}
            },
            "projects": {}, "users": {}, "apikeys": {}
        });
        Snapshot::from_value(file, [0; 32]).expect("a valid configuration")
    }

    fn scope(config: &str) -> Scope {
        Scope { config: config.into(), project: "p".into(), asked: None }
    }

    #[test]
    fn a_reload_changes_only_the_lists_of_the_scopes_it_touches() {
        let server = json!({"server_name": "s", "config": {"command": "x"}});
        let gateway = snapshot("gateway", json!([server]));
        let both = snapshot("both", json!([server]));
        let everything = Lists { tools: true, prompts: true, resources: true };
        assert_eq!(changed(&gateway, &both, &scope("c1")), everything);
        assert_eq!(changed(&gateway, &gateway, &scope("c1")), Lists::default());
        // Another configuration's servers change nothing here.
        let other = snapshot("both", json!([server, {"server_name": "t", "config": {"command": "y"}}]));
        assert_eq!(changed(&both, &other, &scope("c2")), Lists::default());
        assert_eq!(changed(&both, &other, &scope("c1")), everything);
        // In the gateway view no upstream is listed: a new server changes nothing.
        let gateway_more = snapshot("gateway", json!([server, {"server_name": "t", "config": {"command": "y"}}]));
        assert_eq!(changed(&gateway, &gateway_more, &scope("c1")), Lists::default());
        // A client that asked for the gateway view keeps it.
        let asked = Scope { asked: Some(crate::config::exposure::ToolExposure::Gateway), ..scope("c1") };
        assert_eq!(changed(&gateway, &both, &asked), Lists::default());
    }

    #[test]
    fn a_changed_pin_changes_its_list_only_and_a_pin_added_nothing() {
        let pin = |c: &str| format!("sha256:{}", c.repeat(64));
        let with = |pins: serde_json::Value| {
            snapshot("transparent", json!([{"server_name": "s", "config": {"command": "x"}, "prompt_pins": pins}]))
        };
        let plain = snapshot("transparent", json!([{"server_name": "s", "config": {"command": "x"}}]));
        let first = with(json!({"greet": pin("a")}));
        assert_eq!(changed(&plain, &first, &scope("c1")), Lists::default(), "trust on first use");
        let approved = with(json!({"greet": pin("b")}));
        assert_eq!(changed(&first, &approved, &scope("c1")), Lists { prompts: true, ..Lists::default() });
        assert_eq!(changed(&first, &plain, &scope("c1")), Lists { prompts: true, ..Lists::default() }, "forgotten");
    }
}
