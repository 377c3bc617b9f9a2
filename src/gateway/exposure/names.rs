//! Exposed names of upstream tools and prompts (contract section 8).
//!
//! A tool `tool` of server `server` is exposed as `{server}{sep}{tool}` (`sep`: `tool_name_separator`, default `__`),
//! or as `{tool_prefix}{tool}` when the server entry sets `tool_prefix` (`""`: the upstream's own name). Calls are
//! routed by looking the exact exposed name up, never by splitting it at `sep`.
//!
//! **The rule for names MCP would not accept** (over [`MAX_NAME`] characters, or a character outside
//! `[A-Za-z0-9_.-]`): every character outside that set becomes `_`, the result is cut to 119 characters, and `_` and
//! the first 8 hexadecimal digits of the SHA-256 of the name as composed are appended. The name depends on nothing
//! but the composed name, so it is the same on every replica and after every restart, and two names that only differ
//! where they were changed still get two names.
//!
//! **Names claimed twice**: when two upstream tools end up with one exposed name, or a tool's name is one of the
//! gateway's own (`gw_*`), every claimant is left out and reported, so no server can shadow another's tool (or the
//! gateway's) and a call never reaches a server the client did not mean.

use std::collections::{HashMap, HashSet};

use sha2::{Digest, Sha256};

/// The longest tool name MCP clients accept.
pub const MAX_NAME: usize = 128;
/// Characters kept of a name that had to be changed, before `_` and the 8 digits of its hash.
const KEPT: usize = MAX_NAME - 9;

/// Whether `name` is a tool name MCP accepts: 1 to 128 characters of `[A-Za-z0-9_.-]`.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The exposed name of `tool` under `prefix` (`{server}{sep}` or the server's `tool_prefix`), made valid by the rule
/// of the module documentation when it is not.
pub fn exposed_name(prefix: &str, tool: &str) -> String {
    let composed = format!("{prefix}{tool}");
    if is_valid(&composed) {
        return composed;
    }
    let mut name: String = composed
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .take(KEPT)
        .collect();
    let digest = Sha256::digest(composed.as_bytes());
    name.push('_');
    for byte in &digest[..4] {
        name.push_str(&format!("{byte:02x}"));
    }
    name
}

/// Whether `tool` under `prefix` is exposed as `name`: [`exposed_name`] without composing the name, for the common
/// case of a valid one (a lookup asks this of every candidate tool).
pub fn exposes(prefix: &str, tool: &str, name: &str) -> bool {
    let valid_part = |part: &str| part.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    let composed_len = prefix.len() + tool.len();
    if composed_len > 0 && composed_len <= MAX_NAME && valid_part(prefix) && valid_part(tool) {
        return name.len() == composed_len && name.starts_with(prefix) && name.ends_with(tool);
    }
    exposed_name(prefix, tool) == name
}

/// The prefix of a server's exposed names: its `tool_prefix` when set, else `{server}{sep}`.
pub fn prefix_of(server: &str, tool_prefix: Option<&str>, separator: &str) -> String {
    match tool_prefix {
        Some(prefix) => prefix.to_string(),
        None => format!("{server}{separator}"),
    }
}

/// One upstream tool (or prompt) as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposed {
    pub name: String,
    pub server: String,
    pub tool: String,
}

/// An exposed name claimed more than once (or a `gw_*` name): every claimant, none of them exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub name: String,
    /// `(server, tool)` of each claimant, in the order given; empty server for the gateway's own tool.
    pub claimants: Vec<(String, String)>,
}

/// Of `names` (one per claim), those nobody may have: names claimed more than once, and names in `reserved` (the
/// gateway's own tools). The one rule of the module documentation's "names claimed twice", for [`expose`] and for the
/// listing that names its tools without it (`gateway/transparent/tool_list.rs`).
pub fn refused<'a>(names: impl IntoIterator<Item = &'a str>, reserved: &[&str]) -> HashSet<&'a str> {
    // foldhash (seeded per process), not SipHash: a listing of 5,000 tools counts 5,000 names.
    let mut claims: HashMap<&str, usize, foldhash::fast::RandomState> = HashMap::default();
    for name in names {
        *claims.entry(name).or_default() += 1;
    }
    claims.into_iter().filter(|(name, claims)| *claims > 1 || reserved.contains(name)).map(|(name, _)| name).collect()
}

/// The exposed names of `tools` (`(server, prefix, tool)` in config order), with names in `reserved` (the gateway's own
/// tools) and names claimed twice left out; the order of the rest is kept.
pub fn expose<'a>(
    tools: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    reserved: &[&str],
) -> (Vec<Exposed>, Vec<Collision>) {
    let all: Vec<Exposed> = tools
        .into_iter()
        .map(|(server, prefix, tool)| Exposed {
            name: exposed_name(prefix, tool),
            server: server.to_string(),
            tool: tool.to_string(),
        })
        .collect();
    let refused = refused(all.iter().map(|exposed| exposed.name.as_str()), reserved);
    let mut collisions: Vec<Collision> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for exposed in &all {
        if !refused.contains(exposed.name.as_str()) {
            continue;
        }
        let gateway_name = reserved.contains(&exposed.name.as_str());
        let at = *seen.entry(exposed.name.clone()).or_insert_with(|| {
            let mut claimants = Vec::new();
            if gateway_name {
                claimants.push((String::new(), exposed.name.clone()));
            }
            collisions.push(Collision { name: exposed.name.clone(), claimants });
            collisions.len() - 1
        });
        collisions[at].claimants.push((exposed.server.clone(), exposed.tool.clone()));
    }
    let exposed = all.into_iter().filter(|e| !seen.contains_key(&e.name)).collect();
    (exposed, collisions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_are_server_separator_tool_or_the_servers_prefix() {
        assert_eq!(exposed_name(&prefix_of("github", None, "__"), "create_issue"), "github__create_issue");
        assert_eq!(exposed_name(&prefix_of("github", Some("gh."), "__"), "create_issue"), "gh.create_issue");
        assert_eq!(exposed_name(&prefix_of("github", Some(""), "__"), "create_issue"), "create_issue");
        assert_eq!(exposed_name(&prefix_of("fs", None, "-"), "read"), "fs-read");
    }

    #[test]
    fn names_mcp_would_refuse_are_changed_by_one_stable_rule() {
        let spaced = exposed_name("my server__", "read file");
        assert!(spaced.starts_with("my_server__read_file_"), "{spaced}");
        assert_eq!(spaced.len(), "my_server__read_file_".len() + 8);
        assert_eq!(spaced, exposed_name("my server__", "read file"), "the same every time");
        // Two names that differ only where they were changed stay apart.
        assert_ne!(exposed_name("a__", "x y"), exposed_name("a__", "x/y"));
        // A valid name that looks like a changed one is not touched.
        assert_eq!(exposed_name("a__", "x_y"), "a__x_y");
        let long = exposed_name("server__", &"t".repeat(200));
        assert_eq!(long.len(), MAX_NAME);
        assert!(is_valid(&long));
        // A fixed value (`printf 's__é' | sha256sum`), so the rule cannot change unnoticed between releases.
        assert_eq!(exposed_name("s__", "é"), "s____70683a74");
    }

    #[test]
    fn a_name_claimed_twice_or_a_gateway_name_is_left_out_for_every_claimant() {
        let tools = [
            ("a", "", "search"),
            ("b", "", "search"),
            ("b", "", "fetch"),
            ("c", "c__", "fetch"),
            ("evil", "", "gw_secure_call_tools"),
        ];
        let (exposed, collisions) = expose(tools, &["gw_secure_call_tools"]);
        let names: Vec<&str> = exposed.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fetch", "c__fetch"]);
        assert_eq!(collisions.len(), 2);
        assert_eq!(collisions[0].name, "search");
        assert_eq!(collisions[0].claimants, [("a".into(), "search".into()), ("b".into(), "search".into())]);
        assert_eq!(collisions[1].name, "gw_secure_call_tools");
        assert_eq!(collisions[1].claimants[0], (String::new(), "gw_secure_call_tools".into()));
        assert_eq!(collisions[1].claimants[1], ("evil".into(), "gw_secure_call_tools".into()));
    }

    proptest! {
        #[test]
        fn exposes_agrees_with_exposed_name(prefix in "[a-z_ é]{0,6}", tool in "[a-z_. /]{0,8}", other in "[a-z_]{0,10}") {
            let name = exposed_name(&prefix, &tool);
            prop_assert!(exposes(&prefix, &tool, &name));
            prop_assert_eq!(exposes(&prefix, &tool, &other), other == name);
        }

        #[test]
        fn every_exposed_name_is_valid_and_the_same_input_gives_the_same_name(
            prefix in "\\PC{0,80}", tool in "\\PC{0,200}"
        ) {
            let name = exposed_name(&prefix, &tool);
            prop_assert!(is_valid(&name), "{name:?}");
            prop_assert_eq!(name.clone(), exposed_name(&prefix, &tool));
            if is_valid(&format!("{prefix}{tool}")) {
                prop_assert_eq!(name, format!("{prefix}{tool}"));
            }
        }
    }
}
