//! The validated, indexed, immutable view of one configuration file.
//!
//! A [`Snapshot`] is built once per load: the cross-record rules are checked (every key points at an existing project
//! and user, names are unique, server names are well formed, ...), every problem is collected, and the indexes every
//! request needs are built (API key to project, user and MCP config; names to ids). Requests hold an `Arc<Snapshot>`
//! from start to end, so a reload never changes what a request in flight sees.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use super::decode::Problems;
use super::model::ConfigFile;
use super::settings::Settings;
use crate::{secrets, unicode};

/// What a gateway API key resolves to.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyEntry {
    pub key: String,
    pub key_id: String,
    pub project_id: String,
    pub user_id: String,
    pub mcp_config_id: Option<String>,
    pub disabled: bool,
}

/// The index hasher for SHA-256 digests: the digest is already uniformly distributed, so its first eight bytes are the
/// hash (hashing it again with SipHash would only cost time on the lookup path).
#[derive(Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().take(8).enumerate() {
            self.0 |= u64::from(*b) << (8 * i);
        }
    }
}

/// A map keyed by SHA-256 digests (API keys' digests), hashed by [`DigestHasher`].
pub type DigestMap<V> = HashMap<[u8; 32], V, BuildHasherDefault<DigestHasher>>;

/// A validated configuration with its indexes.
#[derive(Debug)]
pub struct Snapshot {
    pub file: ConfigFile,
    pub settings: Settings,
    /// SHA-256 of the bytes this snapshot was loaded from (all zero when built in memory).
    pub source_digest: [u8; 32],
    /// A number no other snapshot of this process has (from 1): what was once found true of this snapshot's entries
    /// (which never change) stays true for it (the tool cache's check of its entry, `gateway/tools/discovery.rs`).
    pub generation: u64,
    /// The authorization rules (contract 17), compiled.
    pub policies: super::policies::PolicyBook,
    keys: DigestMap<KeyEntry>,
    key_ids: HashMap<String, [u8; 32]>,
    config_names: HashMap<String, String>,
    project_names: HashMap<String, String>,
    user_emails: HashMap<String, String>,
}

/// The file and the indexes, the parts whose freeing grows with the configuration, are freed on the retiring thread
/// ([`super::retire`]): the last holder of a snapshot is often a tokio worker, which must not spend a large
/// configuration's hundreds of milliseconds of deallocations there.
impl Drop for Snapshot {
    fn drop(&mut self) {
        let parts = (
            std::mem::take(&mut self.file),
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.key_ids),
            std::mem::take(&mut self.config_names),
            std::mem::take(&mut self.project_names),
            std::mem::take(&mut self.user_emails),
        );
        super::retire::free_later(Box::new(parts));
    }
}

impl Snapshot {
    /// Validates `file` and builds its indexes; on failure returns every problem found.
    pub fn build(file: ConfigFile, source_digest: [u8; 32]) -> Result<Snapshot, Problems> {
        let mut problems = Problems::new();
        let settings = Settings::resolve(&file, &mut problems);
        let indexes = Indexes::build(&file, &mut problems);
        check_names_against_ids(&file, &mut problems);
        super::exposure::check(&file, &settings.exposure, &mut problems);
        super::user_credentials::check(&file, settings.secrets_key.as_ref(), &mut problems);
        super::server_credentials::check_broker_settings(&file, &settings, &mut problems);
        let policies = super::policies::PolicyBook::compile(&file, &mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        static GENERATIONS: AtomicU64 = AtomicU64::new(1);
        Ok(Snapshot {
            file,
            settings,
            source_digest,
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            policies,
            keys: indexes.keys,
            key_ids: indexes.key_ids,
            config_names: indexes.config_names,
            project_names: indexes.project_names,
            user_emails: indexes.user_emails,
        })
    }

    /// How MCP configuration `config_id` exposes its servers: `common_mcp_gateway_config`'s settings with the
    /// configuration's overrides (checked when the snapshot was built).
    pub fn exposure(&self, config_id: Option<&str>) -> super::exposure::Exposure {
        self.settings.exposure.of_config(config_id.and_then(|id| self.file.mcp_configs.get(id)))
    }

    /// What `tools/list` shows callers of MCP configuration `config_id` (the mode of [`Snapshot::exposure`], without
    /// building the rest).
    pub fn tool_exposure(&self, config_id: Option<&str>) -> super::exposure::ToolExposure {
        let set = config_id.and_then(|id| self.file.mcp_configs.get(id)).and_then(|c| c.tool_exposure.as_deref());
        set.and_then(super::exposure::ToolExposure::parse).unwrap_or(self.settings.exposure.mode)
    }

    /// Decodes and validates a whole configuration, listing type problems and rule problems together.
    pub fn from_value(value: serde_json::Value, source_digest: [u8; 32]) -> Result<Snapshot, Problems> {
        let (file, mut problems) = ConfigFile::from_value_partial(value);
        match Snapshot::build(file, source_digest) {
            Ok(snapshot) if problems.is_empty() => Ok(snapshot),
            Ok(_) => Err(problems),
            Err(more) => {
                problems.extend(more);
                Err(problems)
            }
        }
    }

    /// Looks a gateway API key up. The table is keyed by the key's SHA-256, so probing it compares digests of the
    /// presented key, never key bytes, and the final check is a constant-time comparison of the digests: the time
    /// taken reveals nothing useful about stored keys.
    pub fn lookup_key(&self, key: &str) -> Option<&KeyEntry> {
        let digest = secrets::digest(key);
        let (stored, entry) = self.keys.get_key_value(&digest)?;
        secrets::ct_eq_digest(stored, &digest).then_some(entry)
    }

    /// The full key for a key or a `key_id`.
    pub fn resolve_key(&self, key_or_id: &str) -> Option<&KeyEntry> {
        if let Some(digest) = self.key_ids.get(key_or_id) {
            return self.keys.get(digest);
        }
        self.lookup_key(key_or_id)
    }

    /// A config id from an id or a `mcp_config_name`.
    pub fn resolve_config(&self, id_or_name: &str) -> Option<&str> {
        resolve(&self.file.mcp_configs, &self.config_names, id_or_name)
    }

    /// A project id from an id or a `project_name`.
    pub fn resolve_project(&self, id_or_name: &str) -> Option<&str> {
        resolve(&self.file.projects, &self.project_names, id_or_name)
    }

    /// A user id from an id or an e-mail (case-insensitive).
    pub fn resolve_user(&self, id_or_email: &str) -> Option<&str> {
        resolve(&self.file.users, &self.user_emails, &id_or_email.to_lowercase())
            .or_else(|| self.file.users.get_key_value(id_or_email).map(|(k, _)| k.as_str()))
    }

    /// Number of API keys.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }
}

fn resolve<'a, V>(
    records: &'a indexmap::IndexMap<String, V>,
    names: &'a HashMap<String, String>,
    id_or_name: &str,
) -> Option<&'a str> {
    if let Some((id, _)) = records.get_key_value(id_or_name) {
        return Some(id.as_str());
    }
    names.get(id_or_name).map(String::as_str)
}

struct Indexes {
    keys: DigestMap<KeyEntry>,
    key_ids: HashMap<String, [u8; 32]>,
    config_names: HashMap<String, String>,
    project_names: HashMap<String, String>,
    user_emails: HashMap<String, String>,
}

impl Indexes {
    fn build(file: &ConfigFile, problems: &mut Problems) -> Indexes {
        if file.admin_apikey.as_deref().is_some_and(|k| k.trim().is_empty()) {
            problems.push("admin_apikey: must not be empty (remove it to disable the admin API)".to_string());
        }
        let mut config_names = HashMap::with_capacity(file.mcp_configs.len());
        for (id, config) in &file.mcp_configs {
            let name = &config.mcp_config_name;
            if let Err(why) = check_name(name) {
                problems.push(format!("mcp_configs.{id}.mcp_config_name: {why}"));
            }
            if config_names.insert(config.mcp_config_name.clone(), id.clone()).is_some() {
                problems.push(format!(
                    "mcp_configs.{id}.mcp_config_name: {:?} is used by another configuration",
                    config.mcp_config_name
                ));
            }
            let mut servers = HashSet::new();
            for (i, server) in config.mcp_config.iter().enumerate() {
                let path = format!("mcp_configs.{id}.mcp_config[{i}].server_name");
                if let Err(why) = check_server_name(&server.server_name) {
                    problems.push(format!("{path}: {why}"));
                }
                if !servers.insert(server.server_name.as_str()) {
                    problems.push(format!("{path}: {:?} appears twice in this configuration", server.server_name));
                }
                super::remote::check(&server.config, &format!("mcp_configs.{id}.mcp_config[{i}].config"), problems);
                for name in server.config.inherit_env.iter().flatten() {
                    if let Err(why) = check_variable_name(name) {
                        problems.push(format!("mcp_configs.{id}.mcp_config[{i}].config.inherit_env: {why}"));
                    }
                }
                if let Some(affinity) = &server.config.session_affinity
                    && ![crate::config::model::SHARED, crate::config::model::PER_SESSION].contains(&affinity.as_str())
                {
                    problems.push(format!(
                        "mcp_configs.{id}.mcp_config[{i}].config.session_affinity: must be \"shared\" or \
                         \"per_session\", found {affinity:?}"
                    ));
                }
                super::server_credentials::check(server, &format!("mcp_configs.{id}.mcp_config[{i}]"), problems);
                if let Some(oauth) = &server.oauth_config
                    && let Err(found) = super::oauth::OAuthSettings::from_config(oauth)
                {
                    let path = format!("mcp_configs.{id}.mcp_config[{i}].oauth_config");
                    problems.extend(found.into_iter().map(|why| format!("{path}: {why}")));
                }
            }
        }
        let mut user_emails = HashMap::with_capacity(file.users.len());
        for (id, user) in &file.users {
            if let Err(why) = check_email(&user.email) {
                problems.push(format!("users.{id}.email: {why}"));
            }
            if user_emails.insert(user.email.to_lowercase(), id.clone()).is_some() {
                problems.push(format!("users.{id}.email: {:?} is used by another user", user.email));
            }
        }
        let mut project_names = HashMap::with_capacity(file.projects.len());
        for (id, project) in &file.projects {
            let name = &project.project_name;
            if let Err(why) = check_name(name) {
                problems.push(format!("projects.{id}.project_name: {why}"));
            }
            if project_names.insert(project.project_name.clone(), id.clone()).is_some() {
                problems
                    .push(format!("projects.{id}.project_name: {:?} is used by another project", project.project_name));
            }
            if let Some(config_id) = &project.mcp_config_id
                && !file.mcp_configs.contains_key(config_id)
            {
                problems.push(format!("projects.{id}.mcp_config_id: no MCP configuration {config_id:?}"));
            }
            for user_id in &project.users {
                if !file.users.contains_key(user_id) {
                    problems.push(format!("projects.{id}.users: no user {user_id:?}"));
                }
            }
        }
        let mut keys = DigestMap::with_capacity_and_hasher(file.apikeys.len(), Default::default());
        let mut key_ids = HashMap::with_capacity(file.apikeys.len());
        for (key, record) in &file.apikeys {
            let digest = secrets::digest(key);
            let key_id = secrets::key_id_from_digest(&digest);
            let project = file.projects.get(&record.project_id);
            if project.is_none() {
                problems.push(format!("apikeys[key_id {key_id}].project_id: no project {:?}", record.project_id));
            }
            if !file.users.contains_key(&record.user_id) {
                problems.push(format!("apikeys[key_id {key_id}].user_id: no user {:?}", record.user_id));
            }
            key_ids.insert(key_id.clone(), digest);
            keys.insert(
                digest,
                KeyEntry {
                    key: key.clone(),
                    key_id,
                    project_id: record.project_id.clone(),
                    user_id: record.user_id.clone(),
                    mcp_config_id: project.and_then(|p| p.mcp_config_id.clone()),
                    disabled: record.is_disabled(),
                },
            );
        }
        Indexes { keys, key_ids, config_names, project_names, user_emails }
    }
}

/// Configuration and project names: 1 to 128 characters, none of them a control character (no NUL, no newline), a
/// bidi control or a line or paragraph separator, and at least one that shows (contract 14): a name is shown in
/// listings and logs and used in place of an id, so it must read as what it is.
pub fn check_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(64).collect();
    if name.is_empty() || name.chars().count() > 128 {
        return Err(format!("{shown:?} must be 1 to 128 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{shown:?} must not contain control characters (NUL, newline, tab, ...)"));
    }
    if name.chars().any(unicode::is_bidi_control) {
        return Err(format!(
            "{shown:?} must not contain bidi controls (U+202A-202E, U+2066-2069, U+200E, U+200F, U+061C)"
        ));
    }
    if name.chars().any(unicode::is_line_or_paragraph_separator) {
        return Err(format!("{shown:?} must not contain line or paragraph separators (U+2028, U+2029)"));
    }
    if name.chars().all(unicode::is_default_ignorable) {
        return Err(format!("{shown:?} must have a visible character, not only zero-width or other invisible ones"));
    }
    Ok(())
}

/// Contract 13: a configuration, project or server name is never another object's id (a configuration's, a
/// project's, a user's), so that an id in a request or a listing always means one object. An object may carry its
/// own id as its name.
fn check_names_against_ids(file: &ConfigFile, problems: &mut Problems) {
    let kind_of = |id: &str| -> Option<&'static str> {
        if file.mcp_configs.contains_key(id) {
            Some("configuration")
        } else if file.projects.contains_key(id) {
            Some("project")
        } else if file.users.contains_key(id) {
            Some("user")
        } else {
            None
        }
    };
    let mut refuse = |path: String, name: &str, own_id: Option<&str>| {
        if let Some(kind) = kind_of(name)
            && Some(name) != own_id
        {
            problems.push(format!("{path}: {name:?} is the id of another {kind}"));
        }
    };
    for (id, config) in &file.mcp_configs {
        refuse(format!("mcp_configs.{id}.mcp_config_name"), &config.mcp_config_name, Some(id));
        for (i, server) in config.mcp_config.iter().enumerate() {
            refuse(format!("mcp_configs.{id}.mcp_config[{i}].server_name"), &server.server_name, None);
        }
    }
    for (id, project) in &file.projects {
        refuse(format!("projects.{id}.project_name"), &project.project_name, Some(id));
    }
}

/// Server names: 1 to 128 characters of `[A-Za-z0-9_.-]`.
pub fn check_server_name(name: &str) -> Result<(), String> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if name.is_empty() || name.len() > 128 || !ok_chars {
        return Err(format!("{name:?} must be 1 to 128 characters of A-Z, a-z, 0-9, '_', '.' and '-'"));
    }
    Ok(())
}

/// A name `inherit_env` may list: an environment variable's name, and not one of the gateway's own `GW_*` (which are
/// never passed to upstream servers: `upstream/environment.rs` drops them whatever the file says).
pub fn check_variable_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed {
        return Err(format!("{name:?} is not an environment variable's name (letters, digits and _)"));
    }
    if name.get(..3).is_some_and(|prefix| prefix.eq_ignore_ascii_case("GW_")) {
        return Err(format!("{name:?}: the gateway's own GW_* variables are never passed to upstream servers"));
    }
    Ok(())
}

/// A plausible e-mail address: one `@`, a non-empty local part, a dotted domain, no spaces, at most 254 characters.
pub fn check_email(email: &str) -> Result<(), String> {
    let invalid = || Err(format!("{email:?} is not a valid e-mail address"));
    // U+2028 and U+2029 are whitespace; bidi controls are not, and would show the address as another (contract 14).
    if email.len() > 254 || email.chars().any(|c| c.is_whitespace() || c.is_control() || unicode::is_bidi_control(c)) {
        return invalid();
    }
    let Some((local, domain)) = email.split_once('@') else { return invalid() };
    let labels_ok = domain.split('.').all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-'));
    if local.is_empty() || domain.contains('@') || !domain.contains('.') || !labels_ok {
        return invalid();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file(value: serde_json::Value) -> ConfigFile {
        ConfigFile::from_value(value).unwrap()
    }

    fn sample() -> ConfigFile {
        file(json!({
            "admin_apikey": "admin",
            "mcp_configs": {"c1": {"mcp_config_name": "main", "mcp_config": [
                {"server_name": "echo", "config": {"command": "echo"}}]}},
            "projects": {"p1": {"project_name": "proj", "mcp_config_id": "c1", "users": ["u1"]}},
            "users": {"u1": {"email": "Ann@Example.com"}},
            "apikeys": {"key-1": {"project_id": "p1", "user_id": "u1"},
                        "key-2": {"project_id": "p1", "user_id": "u1", "disabled": true}}
        }))
    }

    #[test]
    fn keys_resolve_to_project_user_and_config() {
        let snap = Snapshot::build(sample(), [0; 32]).unwrap();
        let entry = snap.lookup_key("key-1").unwrap();
        assert_eq!(entry.project_id, "p1");
        assert_eq!(entry.mcp_config_id.as_deref(), Some("c1"));
        assert!(snap.lookup_key("key-2").unwrap().disabled);
        assert!(snap.lookup_key("key-3").is_none());
        assert_eq!(snap.resolve_key(&secrets::key_id("key-1")).map(|e| e.key.as_str()), Some("key-1"));
    }

    #[test]
    fn names_resolve_to_ids() {
        let snap = Snapshot::build(sample(), [0; 32]).unwrap();
        assert_eq!(snap.resolve_config("main"), Some("c1"));
        assert_eq!(snap.resolve_config("c1"), Some("c1"));
        assert_eq!(snap.resolve_project("proj"), Some("p1"));
        assert_eq!(snap.resolve_user("ann@example.com"), Some("u1"));
        assert_eq!(snap.resolve_user("u1"), Some("u1"));
        assert_eq!(snap.resolve_user("nobody"), None);
    }

    #[test]
    fn every_broken_reference_is_reported() {
        let broken = file(json!({
            "mcp_configs": {
                "c1": {"mcp_config_name": "dup", "mcp_config": [
                    {"server_name": "bad name", "config": {"command": "x"}},
                    {"server_name": "twice", "config": {"command": "x"}},
                    {"server_name": "twice", "config": {"command": "x"}}]},
                "c2": {"mcp_config_name": "dup"}},
            "projects": {"p1": {"project_name": "p", "mcp_config_id": "missing", "users": ["ghost"]}},
            "users": {"u1": {"email": "not-an-email"}},
            "apikeys": {"k": {"project_id": "nope", "user_id": "nobody"}}
        }));
        let problems = Snapshot::build(broken, [0; 32]).unwrap_err();
        assert_eq!(problems.len(), 8, "{problems:#?}");
    }

    #[test]
    fn email_rules() {
        for ok in ["a@b.co", "first.last+tag@sub.example.org"] {
            assert!(check_email(ok).is_ok(), "{ok}");
        }
        for bad in
            ["", "a", "a@b", "@b.co", "a@@b.co", "a b@c.co", "a@b..co", "a@-b.co", "a\u{202E}b@c.co", "a\u{2028}@b.co"]
        {
            assert!(check_email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn name_rules() {
        for ok in ["main", "Équipe données", "a\u{200B}b", "日本"] {
            assert!(check_name(ok).is_ok(), "{ok:?}");
        }
        let bad = ["", "a\u{0}b", "a\u{202E}b", "a\u{2067}b", "\u{200F}x", "a\u{061C}", "a\u{2028}b", "a\u{2029}"];
        for name in bad.iter().copied().chain(["\u{200B}", "\u{FEFF}\u{00AD}", "\u{2060}"]) {
            assert!(check_name(name).is_err(), "{name:?}");
        }
    }

    #[test]
    fn a_name_is_never_another_objects_id() {
        let mut f = sample();
        let config_id = f.mcp_configs.keys().next().unwrap().clone();
        let project_id = f.projects.keys().next().unwrap().clone();
        f.projects[0].project_name = config_id.clone();
        f.mcp_configs[0].mcp_config[0].server_name = project_id.clone();
        let problems = Snapshot::build(f.clone(), [0; 32]).err().unwrap();
        assert!(problems.iter().any(|p| p.contains("is the id of another configuration")), "{problems:#?}");
        assert!(problems.iter().any(|p| p.contains("is the id of another project")), "{problems:#?}");
        // Its own id is no other object's.
        f.projects[0].project_name = project_id;
        f.mcp_configs[0].mcp_config[0].server_name = "echo".into();
        f.mcp_configs[0].mcp_config_name = config_id;
        assert!(Snapshot::build(f, [0; 32]).is_ok());
    }
}
