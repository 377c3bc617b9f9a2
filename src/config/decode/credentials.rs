//! The decoder of `user_credentials` (contract 16): three levels of objects keyed by user id, MCP configuration id
//! and server name, then one slot `{kind, values, set_at}`. Each value must already be sealed (`enc:v1:…`) and each
//! name an environment variable's; a problem names the slot and the name, never the value (a value written in clear
//! by mistake stays out of `check-config`'s output and the logs).

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::fields::{Fields, Problems, type_name};
use crate::config::user_credentials::{
    CredentialSlot, KIND_OAUTH, KIND_SECRET, UserCredentials, check_name, is_sealed,
};

/// `user_credentials`; a missing section is empty.
pub(super) fn decode_user_credentials(f: &mut Fields<'_>) -> UserCredentials {
    let Some(users) = f.object("user_credentials") else { return UserCredentials::new() };
    let mut out = UserCredentials::with_capacity(users.len());
    for (user_id, configs) in users {
        let Some(configs) = object_at(configs, || format!("user_credentials.{user_id}"), f.problems()) else {
            continue;
        };
        let mut by_config = IndexMap::with_capacity(configs.len());
        for (config_id, servers) in configs {
            let path = || format!("user_credentials.{user_id}.{config_id}");
            let Some(servers) = object_at(servers, path, f.problems()) else { continue };
            let mut by_server = IndexMap::with_capacity(servers.len());
            for (server_name, slot) in servers {
                let path = || format!("user_credentials.{user_id}.{config_id}.{server_name}");
                if let Some(slot) = Fields::record(slot, f.problems(), path, decode_slot) {
                    by_server.insert(server_name, slot);
                }
            }
            by_config.insert(config_id, by_server);
        }
        out.insert(user_id, by_config);
    }
    out
}

fn object_at(value: Value, path: impl FnOnce() -> String, problems: &mut Problems) -> Option<Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map),
        other => {
            problems.push(format!("{}: must be an object, found {}", path(), type_name(&other)));
            None
        }
    }
}

fn decode_slot(mut f: Fields<'_>) -> Option<CredentialSlot> {
    let kind = f.required_string("kind");
    if let Some(kind) = kind.as_deref()
        && kind != KIND_SECRET
        && kind != KIND_OAUTH
    {
        f.problem("kind", format!("must be \"{KIND_SECRET}\" or \"{KIND_OAUTH}\", found {kind:?}"));
    }
    let values = f.string_map("values").unwrap_or_default();
    for (name, value) in &values {
        if let Err(why) = check_name(name) {
            f.problem("values", why);
        }
        if !is_sealed(value) {
            f.problem(
                "values",
                format!(
                    "{name:?}: must be a sealed value (\"enc:v1:…\"); set values with the admin API or `mcpgw user \
                     set-credential`, never in clear in the file"
                ),
            );
        }
    }
    let set_at = f.string_map("set_at").unwrap_or_default();
    for name in set_at.keys().filter(|name| !values.contains_key(*name)) {
        f.problem("set_at", format!("{name:?}: has no value"));
    }
    let expires_at = f.string("expires_at");
    let extra = f.rest();
    Some(CredentialSlot { kind: kind?, values, set_at, expires_at, extra })
}

#[cfg(test)]
mod tests {
    use crate::config::ConfigFile;
    use serde_json::json;

    #[test]
    fn values_in_clear_and_bad_names_are_refused_without_showing_the_value() {
        let sealed = format!("enc:v1:{}", "A".repeat(40));
        let bad = json!({"user_credentials": {
            "u1": {"c1": {
                "github": {"kind": "secret", "values": {"TOKEN": "plain-marker-value", "1BAD": sealed},
                           "set_at": {"OTHER": "2026-01-01T00:00:00Z"}},
                "oauthy": {"kind": "oauht", "values": {}, "valus": {}}}},
            "u2": []
        }});
        let text = ConfigFile::from_value(bad).unwrap_err().join("\n");
        for expected in [
            "user_credentials.u1.c1.github.values: \"TOKEN\": must be a sealed value",
            "user_credentials.u1.c1.github.values: \"1BAD\" is not a credential name",
            "user_credentials.u1.c1.github.set_at: \"OTHER\": has no value",
            "user_credentials.u1.c1.oauthy.kind: must be \"secret\" or \"oauth\"",
            "user_credentials.u1.c1.oauthy.valus: unknown key; did you mean `values`?",
            "user_credentials.u2: must be an object",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert!(!text.contains("plain-marker-value"), "a value leaked into a problem: {text}");
    }

    #[test]
    fn the_section_round_trips() {
        let sealed = format!("enc:v1:{}", "A".repeat(40));
        let original = json!({"mcp_configs": {}, "projects": {}, "users": {}, "apikeys": {}, "user_credentials": {
            "u1": {"c1": {"github": {"kind": "secret", "values": {"TOKEN": sealed},
                                     "set_at": {"TOKEN": "2026-01-01T00:00:00Z"}, "_note": 1}}}}});
        let file = ConfigFile::from_value(original.clone()).unwrap();
        let written: serde_json::Value = serde_json::from_slice(&file.to_bytes()).unwrap();
        assert_eq!(written, original);
    }
}
