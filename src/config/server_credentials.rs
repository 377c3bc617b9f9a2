//! The rules of a server entry's `credentials` (contract 16) and of the `${user.NAME}` references that a `per_user`
//! entry of kind `secret` places in its `env` values, `args` and `headers` values.
//!
//! Checked once, at load (a problem names the entry): the mode and kind are known ones; a `secret` entry declares a
//! non-empty list of distinct, environment-like names; every `${user.NAME}` names a declared name and every declared
//! name is used at least once (a name nobody references would be asked of every user for nothing); a `${user.` that
//! is not a well-formed reference is refused rather than sent as it is; references need a `per_user` entry; and a
//! `per_user` entry has no enabled `oauth_config` (two sources of credentials for one server). The kinds `oauth` and
//! `token_exchange` carry one value per user, the access token, referenced as `${user.ACCESS_TOKEN}`: a local
//! server must reference it (in `env` or `args`: nothing else would hand it the token); a remote server that does not
//! reference it in a header gets it as `Authorization: Bearer`. Their URLs must be URLs and their required fields set.
//!
//! At a call, [`substitute`] puts the calling user's values in place of the references (`upstream/per_user.rs`).

use std::collections::{BTreeSet, HashMap};

use super::decode::Problems;
use super::model::{ServerCredentials, ServerEntry};

/// `credentials.mode` values.
pub const SHARED: &str = "shared";
pub const PER_USER: &str = "per_user";
/// `credentials.kind` values: each user's own secret values; the OAuth broker; RFC 8693 token exchange.
pub const SECRET: &str = "secret";
pub const OAUTH: &str = "oauth";
pub const TOKEN_EXCHANGE: &str = "token_exchange";

/// What opens a reference.
const OPEN: &str = "${user.";

/// The one name of kinds `oauth` and `token_exchange`: the user's access token for the server.
pub const ACCESS_TOKEN: &str = "ACCESS_TOKEN";

/// The longest name of a user's value.
const MAX_NAME: usize = 128;

impl ServerEntry {
    /// The names of the calling user's values this entry's calls need: `Some` for `per_user` entries of kind
    /// `secret` (the only per-user kind served so far), `None` for shared credentials.
    pub fn user_secret_names(&self) -> Option<&[String]> {
        let credentials = self.credentials.as_ref()?;
        let secret = credentials.mode.as_deref() == Some(PER_USER) && credentials.kind.as_deref() == Some(SECRET);
        secret.then(|| credentials.names.as_deref().unwrap_or_default())
    }

    /// Whether the entry's calls carry each user's own credentials (`mode: "per_user"`, any kind): such a server's
    /// processes, sessions and caches are the user's own.
    pub fn is_per_user(&self) -> bool {
        self.credentials.as_ref().is_some_and(|c| c.mode.as_deref() == Some(PER_USER))
    }

    /// Whose credentials the entry's calls carry, as the audit log records it: `"shared"` or the per-user kind.
    pub fn credential_kind(&self) -> &'static str {
        let per_user = self.credentials.as_ref().filter(|c| c.mode.as_deref() == Some(PER_USER));
        match per_user.and_then(|c| c.kind.as_deref()) {
            Some(SECRET) => SECRET,
            Some(OAUTH) => OAUTH,
            Some(TOKEN_EXCHANGE) => TOKEN_EXCHANGE,
            _ => SHARED,
        }
    }
}

/// The names `text` references as `${user.NAME}`, in order; a `${user.` that does not make a well-formed reference
/// is an error (its text is not shown: it may be a secret).
pub fn references(text: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('}') else {
            return Err("a `${user.` reference is not closed with `}`".to_string());
        };
        let name = &after[..end];
        check_name(name).map_err(|why| format!("a `${{user.NAME}}` reference: {why}"))?;
        names.push(name);
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// `text` with each `${user.NAME}` replaced by `values[NAME]`; a name without a value stays as written (validation
/// makes every reference a declared name, and a call runs only when the user has a value for each).
pub fn substitute(text: &str, values: &HashMap<String, String>) -> String {
    if !text.contains(OPEN) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('}') else { break };
        match values.get(&after[..end]) {
            Some(value) => out.push_str(value),
            None => out.push_str(&rest[at..at + OPEN.len() + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The name of a user's value: an environment variable's shape (letters, digits and `_`, not starting with a digit).
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= MAX_NAME;
    if well_formed {
        Ok(())
    } else {
        let shown: String = name.chars().take(MAX_NAME).collect();
        Err(format!("{shown:?} is not a name of letters, digits and _ (at most {MAX_NAME}, not starting with a digit)"))
    }
}

/// Checks `entry`'s `credentials` and its references (at `path`, as `mcp_configs.<id>.mcp_config[i]`).
pub fn check(entry: &ServerEntry, path: &str, problems: &mut Problems) {
    let at = format!("{path} (server {:?})", entry.server_name);
    let used = used_names(entry, &at, problems);
    let Some(credentials) = &entry.credentials else {
        refuse_references(&used, &at, problems);
        return;
    };
    let here = format!("{path}.credentials");
    match credentials.mode.as_deref().unwrap_or(SHARED) {
        SHARED => {
            let set = kind_fields(credentials);
            if credentials.kind.is_some() || !set.is_empty() {
                problems.push(format!("{here}: kind, names and the OAuth fields are only for mode \"per_user\""));
            }
            refuse_references(&used, &at, problems);
        }
        PER_USER => check_per_user(entry, credentials, &used, &here, &at, problems),
        other => problems.push(format!("{here}.mode: must be \"shared\" or \"per_user\", found {other:?}")),
    }
}

fn check_per_user(
    entry: &ServerEntry,
    credentials: &ServerCredentials,
    used: &BTreeSet<String>,
    here: &str,
    at: &str,
    problems: &mut Problems,
) {
    if entry.oauth_config.as_ref().is_some_and(|oauth| oauth.enabled == Some(true)) {
        problems.push(format!(
            "{here}: mode \"per_user\" and an enabled oauth_config are two sources of credentials for one server; \
             keep one"
        ));
    }
    let kind = credentials.kind.as_deref();
    let allowed: &[&str] = match kind {
        Some(SECRET) => &["names"],
        Some(OAUTH) => &[
            "authorization_url",
            "token_url",
            "client_id",
            "client_secret",
            "scopes",
            "resource",
            "issuer",
            "revocation_url",
        ],
        Some(TOKEN_EXCHANGE) => &["token_url", "client_id", "client_secret", "audience", "resource", "scopes"],
        Some(other) => {
            problems.push(format!("{here}.kind: must be \"secret\", \"oauth\" or \"token_exchange\", found {other:?}"));
            return;
        }
        None => {
            problems.push(format!(
                "{here}.kind: is required with mode \"per_user\" (\"secret\", \"oauth\" or \"token_exchange\")"
            ));
            return;
        }
    };
    for field in kind_fields(credentials) {
        if !allowed.contains(&field) {
            problems.push(format!("{here}.{field}: not a field of kind {:?}", kind.unwrap_or_default()));
        }
    }
    match kind {
        Some(SECRET) => check_secret(credentials, used, here, at, problems),
        Some(kind) => {
            check_broker(credentials, kind, here, problems);
            check_token_references(entry, kind, used, at, problems);
        }
        None => {}
    }
}

fn check_secret(
    credentials: &ServerCredentials,
    used: &BTreeSet<String>,
    here: &str,
    at: &str,
    problems: &mut Problems,
) {
    let names = credentials.names.as_deref().unwrap_or_default();
    if names.is_empty() {
        problems.push(format!("{here}.names: kind \"secret\" needs a non-empty list of names"));
    }
    let mut declared = BTreeSet::new();
    for name in names {
        if let Err(why) = check_name(name) {
            problems.push(format!("{here}.names: {why}"));
        } else if !declared.insert(name.as_str()) {
            problems.push(format!("{here}.names: {name:?} is listed twice"));
        }
    }
    for name in used.iter().filter(|name| !declared.contains(name.as_str())) {
        problems.push(format!("{at}: ${{user.{name}}} is not in credentials.names"));
    }
    for name in declared.iter().filter(|name| !used.contains(**name)) {
        problems.push(format!(
            "{at}: credentials.names lists {name:?} but nothing uses it (write ${{user.{name}}} in config.env, \
             config.args or config.headers)"
        ));
    }
}

/// A server of kind `oauth` or `token_exchange` references only `${user.ACCESS_TOKEN}`, and a local one must.
fn check_token_references(entry: &ServerEntry, kind: &str, used: &BTreeSet<String>, at: &str, problems: &mut Problems) {
    for name in used.iter().filter(|name| name.as_str() != ACCESS_TOKEN) {
        problems.push(format!(
            "{at}: ${{user.{name}}}: a server of kind {kind:?} has one value per user, ${{user.{ACCESS_TOKEN}}}"
        ));
    }
    let remote = entry.config.url.as_deref().is_some_and(|url| !url.is_empty());
    if !remote && !used.contains(ACCESS_TOKEN) {
        problems.push(format!(
            "{at}: a local server of kind {kind:?} needs the user's token handed to it: write ${{user.{ACCESS_TOKEN}}} \
             in config.env (or config.args)"
        ));
    }
}

/// The fields of the kinds `oauth` and `token_exchange`: the required ones present, the URLs URLs.
fn check_broker(credentials: &ServerCredentials, kind: &str, here: &str, problems: &mut Problems) {
    let mut required =
        vec![("token_url", credentials.token_url.is_some()), ("client_id", credentials.client_id.is_some())];
    if kind == OAUTH {
        required.push(("authorization_url", credentials.authorization_url.is_some()));
        required.push(("scopes", credentials.scopes.is_some()));
    }
    for (field, present) in required {
        if !present {
            problems.push(format!("{here}.{field}: is required with kind {kind:?}"));
        }
    }
    for (field, url) in [
        ("authorization_url", &credentials.authorization_url),
        ("token_url", &credentials.token_url),
        ("revocation_url", &credentials.revocation_url),
    ] {
        if let Some(url) = url
            && let Err(why) = super::remote::check_url(url)
        {
            problems.push(format!("{here}.{field}: {why}"));
        }
    }
}

/// What the OAuth broker needs of the whole configuration, for each entry of kind `oauth`: a `secrets_key` to seal
/// the users' tokens (and the broker's `state`) under, and `public_url`, the base of its connect and callback URLs.
pub fn check_broker_settings(file: &super::ConfigFile, settings: &super::settings::Settings, problems: &mut Problems) {
    let brokered = file.mcp_configs.iter().find_map(|(id, config)| {
        let entry = config.mcp_config.iter().find(|entry| entry.credential_kind() == OAUTH)?;
        Some(format!("mcp_configs.{id} (server {:?})", entry.server_name))
    });
    let Some(at) = brokered else { return };
    if settings.public_url.is_none() {
        problems.push(format!(
            "{at}: kind \"oauth\" needs common_mcp_gateway_config.public_url, the gateway's URL as users' browsers \
             reach it ({{public_url}}/oauth/callback is the redirect URI to register with the authorization server)"
        ));
    }
    if settings.secrets_key.is_none() {
        problems.push(format!(
            "{at}: kind \"oauth\" stores each user's tokens sealed under common_mcp_gateway_config.secrets_key (or \
             secrets_key_file, MCPGW_SECRETS_KEY), and none is set (`mcpgw init` writes one)"
        ));
    }
}

/// The fields besides `mode` and `kind` that are set.
fn kind_fields(c: &ServerCredentials) -> Vec<&'static str> {
    [
        ("names", c.names.is_some()),
        ("authorization_url", c.authorization_url.is_some()),
        ("token_url", c.token_url.is_some()),
        ("client_id", c.client_id.is_some()),
        ("client_secret", c.client_secret.is_some()),
        ("scopes", c.scopes.is_some()),
        ("resource", c.resource.is_some()),
        ("audience", c.audience.is_some()),
        ("issuer", c.issuer.is_some()),
        ("revocation_url", c.revocation_url.is_some()),
    ]
    .into_iter()
    .filter_map(|(field, set)| set.then_some(field))
    .collect()
}

/// Every name referenced in the entry's `env` values, `args` and `headers` values; a malformed reference, or one in
/// a variable's or a header's name, is a problem.
fn used_names(entry: &ServerEntry, at: &str, problems: &mut Problems) -> BTreeSet<String> {
    let config = &entry.config;
    let mut places: Vec<(String, &str)> = Vec::new();
    for (name, value) in config.env.iter().flatten() {
        places.push((format!("config.env.{name}"), value));
    }
    for (i, arg) in config.args.iter().enumerate() {
        places.push((format!("config.args[{i}]"), arg));
    }
    for (name, value) in config.headers.iter().flatten() {
        places.push((format!("config.headers.{name}"), value));
    }
    let keys = config.env.iter().flatten().chain(config.headers.iter().flatten()).map(|(name, _)| name);
    for name in keys.filter(|name| name.contains(OPEN)) {
        problems.push(format!("{at}: {name:?}: a ${{user.NAME}} reference goes in a value, not in a name"));
    }
    let mut used = BTreeSet::new();
    for (place, text) in places {
        match references(text) {
            Ok(names) => used.extend(names.into_iter().map(str::to_string)),
            Err(why) => problems.push(format!("{at}: {place}: {why}")),
        }
    }
    used
}

fn refuse_references(used: &BTreeSet<String>, at: &str, problems: &mut Problems) {
    if let Some(name) = used.iter().next() {
        problems.push(format!(
            "{at}: ${{user.{name}}} needs credentials {{\"mode\": \"per_user\", \"kind\": \"secret\", \"names\": [...]}}"
        ));
    }
}

#[cfg(test)]
mod tests;
