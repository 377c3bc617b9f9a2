//! The environment an upstream process starts with: the few variables every program needs, the names the server's
//! config lists in `inherit_env`, and the server's own `env`; nothing else of the gateway's environment, and never the
//! gateway's own `GW_*` settings and credentials.

use std::ffi::OsString;

use super::ServerSpec;

/// The variables of the gateway's environment every upstream gets (when set).
pub(crate) const BASE_ENV: [&str; 5] = ["PATH", "HOME", "LANG", "TZ", "TMPDIR"];

/// The environment of an upstream: [`BASE_ENV`] and the inherited names looked up with `lookup` (the gateway's
/// environment), then the server's own `env`, later entries replacing earlier ones. Names starting with `GW_` (the
/// gateway's own settings and credentials) are never inherited, even when listed.
pub(crate) fn child_environment(
    spec: &ServerSpec,
    lookup: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut set = |name: &str, value: OsString| {
        if name.is_empty() || name.contains(['=', '\0']) {
            tracing::warn!(name, "upstream environment variable with an invalid name skipped");
        } else if let Some(slot) = env.iter_mut().find(|(existing, _)| existing == name) {
            slot.1 = value;
        } else {
            env.push((name.into(), value));
        }
    };
    for name in BASE_ENV {
        if let Some(value) = lookup(name) {
            set(name, value);
        }
    }
    for name in &spec.inherit_env {
        if name.get(..3).is_some_and(|prefix| prefix.eq_ignore_ascii_case("GW_")) {
            tracing::warn!(name, "the gateway's own variables are never passed to upstream servers");
        } else if let Some(value) = lookup(name) {
            set(name, value);
        }
    }
    for (name, value) in &spec.env {
        set(name, value.into());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(env: &[(&str, &str)], inherit: &[&str]) -> ServerSpec {
        ServerSpec {
            command: "srv".into(),
            remote: None,
            args: vec![],
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            inherit_env: inherit.iter().map(|name| name.to_string()).collect(),
            per_session: false,
            masked_settings: vec![],
            per_user: None,
        }
    }

    fn gateway_env(name: &str) -> Option<OsString> {
        let vars = [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/gw"),
            ("TZ", "UTC"),
            ("GW_GATEWAY_KEY", "secret"),
            ("GW_ADMIN_APIKEY", "admin"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("HTTPS_PROXY", "http://proxy"),
        ];
        vars.iter().find(|(key, _)| *key == name).map(|(_, value)| OsString::from(value))
    }

    fn as_strings(env: Vec<(OsString, OsString)>) -> Vec<(String, String)> {
        env.into_iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())).collect()
    }

    #[test]
    fn only_the_base_variables_pass_by_default() {
        let env = as_strings(child_environment(&spec(&[], &[]), &gateway_env));
        let names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, vec!["PATH", "HOME", "TZ"]);
    }

    #[test]
    fn inherited_names_and_server_env_are_added_and_server_env_wins() {
        let env = as_strings(child_environment(
            &spec(&[("TOKEN", "t"), ("TZ", "Europe/Berlin")], &["HTTPS_PROXY", "NOT_SET"]),
            &gateway_env,
        ));
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://proxy".into())));
        assert!(env.contains(&("TOKEN".into(), "t".into())));
        assert!(env.contains(&("TZ".into(), "Europe/Berlin".into())));
        assert!(!env.iter().any(|(name, _)| name == "NOT_SET"));
        assert_eq!(env.iter().filter(|(name, _)| name == "TZ").count(), 1);
    }

    #[test]
    fn gateway_credentials_are_never_inherited() {
        let env =
            as_strings(child_environment(&spec(&[], &["GW_GATEWAY_KEY", "gw_admin_apikey", "GW_"]), &gateway_env));
        assert!(!env.iter().any(|(name, _)| name.to_ascii_uppercase().starts_with("GW_")));
        assert!(!env.iter().any(|(_, value)| value == "secret" || value == "admin"));
    }

    #[test]
    fn invalid_names_are_skipped() {
        let env = as_strings(child_environment(&spec(&[("A=B", "1"), ("", "2"), ("OK", "3")], &[]), &|_| None));
        assert_eq!(env, vec![("OK".to_string(), "3".to_string())]);
    }
}
