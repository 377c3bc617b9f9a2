//! A `per_user` server's start recipe for one user (contract 16): the entry's spec with the user's values put in
//! place of its `${user.NAME}` references (in `env` values, `args` and a remote server's `headers` values), the
//! values added to what is masked in the server's output, and the user bound into the spec.
//!
//! The binding keeps the spec as the configuration wrote it (the template): a reload compares that with the live
//! entry, so a user's pool is retired when the entry changes and kept when only the configuration around it did
//! ([`super::UpstreamPool::retain`]). The pool key of such a server names the user too ([`PoolKey::for_user`]), so a
//! user's calls never share a process or a remote session with another user's.

use std::collections::HashMap;
use std::sync::Arc;

use super::{PoolKey, ServerSpec};
use crate::config::model::ServerEntry;
use crate::config::server_credentials::{ACCESS_TOKEN, substitute};

/// The user a spec was made for, and the spec before their values were put in.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UserBinding {
    pub user_id: Arc<str>,
    /// [`ServerSpec::from_entry`] of the entry: what the live configuration is compared with.
    pub template: Arc<ServerSpec>,
    /// The user's values, masked wherever the server's output is shown.
    values: Vec<String>,
}

impl std::fmt::Debug for UserBinding {
    /// Never the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserBinding").field("user_id", &self.user_id).finish_non_exhaustive()
    }
}

impl UserBinding {
    /// The values to mask.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }
}

impl ServerSpec {
    /// The start recipe of `entry` for `user_id`, whose values are `values` (every name the entry declares).
    pub fn for_user(entry: &ServerEntry, user_id: &str, values: &HashMap<String, String>) -> ServerSpec {
        let template = ServerSpec::from_entry(entry);
        let mut spec = template.clone();
        for (_, value) in &mut spec.env {
            *value = substitute(value, values);
        }
        for arg in &mut spec.args {
            *arg = substitute(arg, values);
        }
        if let Some(remote) = &mut spec.remote {
            let reference = format!("${{user.{ACCESS_TOKEN}}}");
            let referenced = remote.headers.iter().any(|(_, value)| value.contains(&reference));
            for (_, value) in &mut remote.headers {
                *value = substitute(value, values);
            }
            // A user's token (kinds `oauth`, `token_exchange`) that no header places goes as a bearer credential.
            if let (false, Some(token), false) =
                (referenced, values.get(ACCESS_TOKEN), entry.user_secret_names().is_some())
            {
                remote.headers.retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
                remote.headers.push(("Authorization".to_string(), format!("Bearer {token}")));
            }
        }
        let mut masked: Vec<String> = values.values().filter(|value| !value.is_empty()).cloned().collect();
        masked.sort();
        spec.per_user = Some(UserBinding { user_id: Arc::from(user_id), template: Arc::new(template), values: masked });
        spec
    }

    /// The spec as the configuration wrote it: the template of a user's spec, else the spec itself.
    pub fn template(&self) -> &ServerSpec {
        self.per_user.as_ref().map_or(self, |binding| &binding.template)
    }
}

impl PoolKey {
    /// The pool of `user_id`'s own processes of (config, server): a `per_user` server's.
    pub fn for_user(mcp_config_id: impl Into<String>, server_name: impl Into<String>, user_id: &str) -> PoolKey {
        PoolKey { user: Some(Arc::from(user_id)), ..PoolKey::new(mcp_config_id, server_name) }
    }

    /// The key of the server itself, whoever the user: what the live configuration and the per-server budget know.
    pub fn server_key(&self) -> PoolKey {
        PoolKey { user: None, ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::ServerCommand;
    use indexmap::IndexMap;

    fn entry(url: Option<&str>) -> ServerEntry {
        let remote = url.is_some();
        ServerEntry {
            server_name: "github".into(),
            config: ServerCommand {
                command: if remote { String::new() } else { "srv".into() },
                url: url.map(str::to_string),
                args: if remote { vec![] } else { vec!["--org=${user.ORG}".into()] },
                env: (!remote).then(|| IndexMap::from([("TOKEN".to_string(), "${user.TOKEN}".to_string())])),
                headers: remote
                    .then(|| IndexMap::from([("Authorization".to_string(), "Bearer ${user.TOKEN}".to_string())])),
                ..ServerCommand::default()
            },
            ..ServerEntry::default()
        }
    }

    fn values(token: &str) -> HashMap<String, String> {
        HashMap::from([("TOKEN".to_string(), token.to_string()), ("ORG".into(), "acme".into())])
    }

    #[test]
    fn a_users_spec_carries_their_values_masks_them_and_keeps_the_template() {
        let entry = entry(None);
        let spec = ServerSpec::for_user(&entry, "u1", &values("tok-1"));
        assert_eq!(spec.env, [("TOKEN".to_string(), "tok-1".to_string())]);
        assert_eq!(spec.args, ["--org=acme"]);
        let masked: Vec<&str> = spec.masked_values().collect();
        assert!(masked.contains(&"tok-1") && masked.contains(&"acme"), "{masked:?}");
        assert_eq!(*spec.template(), ServerSpec::from_entry(&entry));
        assert!(!format!("{:?}", spec.per_user).contains("tok-1"), "the binding's Debug shows no values");
        let other = ServerSpec::for_user(&entry, "u2", &values("tok-2"));
        assert_ne!(spec, other);
        assert_eq!(spec.template(), other.template());
    }

    #[test]
    fn a_remote_servers_headers_get_the_values() {
        let spec = ServerSpec::for_user(&entry(Some("https://mcp.example/mcp")), "u1", &values("tok-1"));
        let remote = spec.remote.as_ref().unwrap();
        assert_eq!(remote.headers, [("Authorization".to_string(), "Bearer tok-1".to_string())]);
    }

    #[test]
    fn a_users_token_goes_to_a_remote_server_as_a_bearer_credential_unless_a_header_places_it() {
        use crate::config::model::ServerCredentials;
        let mut entry = entry(Some("https://mcp.example/mcp"));
        entry.config.headers = Some(IndexMap::from([("authorization".to_string(), "Basic shared".to_string())]));
        entry.credentials = Some(ServerCredentials {
            mode: Some("per_user".into()),
            kind: Some("oauth".into()),
            ..ServerCredentials::default()
        });
        let token = HashMap::from([(ACCESS_TOKEN.to_string(), "tok-1".to_string())]);
        let spec = ServerSpec::for_user(&entry, "u1", &token);
        assert_eq!(spec.remote.as_ref().unwrap().headers, [("Authorization".to_string(), "Bearer tok-1".to_string())]);
        entry.config.headers = Some(IndexMap::from([("X-Token".to_string(), "${user.ACCESS_TOKEN}".to_string())]));
        let spec = ServerSpec::for_user(&entry, "u1", &token);
        assert_eq!(spec.remote.as_ref().unwrap().headers, [("X-Token".to_string(), "tok-1".to_string())]);
    }

    #[test]
    fn a_users_pool_key_differs_from_the_servers_and_comes_back_to_it() {
        let key = PoolKey::for_user("c", "github", "u1");
        assert_ne!(key, PoolKey::new("c", "github"));
        assert_ne!(key, PoolKey::for_user("c", "github", "u2"));
        assert_eq!(key.server_key(), PoolKey::new("c", "github"));
    }
}
