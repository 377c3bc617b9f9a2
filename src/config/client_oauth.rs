//! The `oauth` authentication provider's config (contract section 10): clients present a JWT from an authorization
//! server, which the gateway verifies as a resource server (`auth/oauth.rs`). Read at load with every problem
//! reported at once, each naming its field.

use serde_json::{Map, Value};

/// `plugins.auth.config` of provider `oauth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOAuth {
    /// Signing in to the console with the issuer (contract 18): `console_admin_role` and the console's client.
    pub console: Option<ConsoleSignIn>,
    /// The token's `iss` must equal this; also where the OpenID configuration is discovered.
    pub issuer: String,
    /// The token's `aud` must contain this.
    pub audience: String,
    /// The issuer's JWKS; without it, `jwks_uri` of `{issuer}/.well-known/openid-configuration`.
    pub jwks_uri: Option<reqwest::Url>,
    /// The claim naming the user (an id or an e-mail of the config's users); default `email`.
    pub user_claim: String,
    /// The claim naming the project (an id or a name); default `mcpgw_project`.
    pub project_claim: String,
    /// Scopes the token must hold (its `scope` string, or an `scp` array).
    pub required_scopes: Vec<String>,
    /// A bearer token that is not a JWT is checked as an API key (default true).
    pub accept_api_keys: bool,
    /// The gateway's public base URL (`https://mcp.example.com`), for the protected resource metadata; without it the
    /// URL is built from the request's `Host`.
    pub public_url: Option<String>,
    /// Whether that URL may come from `X-Forwarded-Host` and `X-Forwarded-Proto` (default false: a proxy in front
    /// sets them, but so can any client when there is none).
    pub trust_forwarded_headers: bool,
    /// `claim_mappings.groups`: the claim whose values are `principal.groups` in authorization rules (contract 17).
    pub groups_claim: Option<String>,
    /// `claim_mappings.roles`: the claim whose values are `principal.roles`.
    pub roles_claim: Option<String>,
}

/// The console's sign-in with the issuer (`console/oauth.rs`): who may sign in, and the OAuth client it signs in as.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleSignIn {
    /// `console_admin_role`: the value that makes a console admin when the token's roles or groups hold it (the
    /// claims `claim_mappings` names, as `principal.roles` and `principal.groups` of contract 17 read them).
    pub admin_role: String,
    /// `console_client_id`: the console's OAuth client at the issuer.
    pub client_id: String,
    /// `console_client_secret`, for a confidential client (sent to the token endpoint only; never shown).
    pub client_secret: Option<String>,
    /// `console_scopes`: sent as `scope` (default `openid`).
    pub scopes: Vec<String>,
}

/// Never the client secret.
impl std::fmt::Debug for ConsoleSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSignIn")
            .field("admin_role", &self.admin_role)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .field("scopes", &self.scopes)
            .finish()
    }
}

/// The config's problems, each with its path (`plugins.auth.config.<field>`).
pub fn read(config: &Map<String, Value>, problems: &mut Vec<String>) -> Option<ClientOAuth> {
    let path = "plugins.auth.config";
    let before = problems.len();
    let text = |field: &str, problems: &mut Vec<String>| -> Option<String> {
        match config.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(_) => {
                problems.push(format!("{path}.{field}: must be a non-empty string"));
                None
            }
        }
    };
    let url = |field: &str, value: Option<String>, problems: &mut Vec<String>| -> Option<reqwest::Url> {
        let value = value?;
        match reqwest::Url::parse(&value) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => Some(url),
            _ => {
                problems.push(format!("{path}.{field}: must be an http:// or https:// URL, found {value:?}"));
                None
            }
        }
    };
    let issuer = text("issuer", problems);
    if issuer.is_none() && !problems.iter().skip(before).any(|p| p.contains(".issuer:")) {
        problems.push(format!("{path}.issuer: is required for provider \"oauth\" (the authorization server's issuer)"));
    }
    let issuer_url = url("issuer", issuer.clone(), problems);
    let audience = text("audience", problems);
    if audience.is_none() && !problems.iter().skip(before).any(|p| p.contains(".audience:")) {
        problems
            .push(format!("{path}.audience: is required for provider \"oauth\" (the gateway's resource identifier)"));
    }
    let jwks_uri = url("jwks_uri", text("jwks_uri", problems), problems);
    let user_claim = text("user_claim", problems).unwrap_or_else(|| "email".to_string());
    let project_claim = text("project_claim", problems).unwrap_or_else(|| "mcpgw_project".to_string());
    let public_url =
        url("public_url", text("public_url", problems), problems).map(|u| u.as_str().trim_end_matches('/').to_string());
    let scope_list = |field: &str, problems: &mut Vec<String>| match config.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::Array(items))
            if items.iter().all(|i| i.as_str().is_some_and(|s| !s.contains(' ') && !s.is_empty())) =>
        {
            Some(items.iter().filter_map(Value::as_str).map(str::to_string).collect())
        }
        Some(_) => {
            problems.push(format!("{path}.{field}: must be an array of scope names (no spaces)"));
            None
        }
    };
    let required_scopes = scope_list("required_scopes", problems).unwrap_or_default();
    let flag = |field: &str, default: bool, problems: &mut Vec<String>| match config.get(field) {
        None | Some(Value::Null) => default,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            problems.push(format!("{path}.{field}: must be a boolean"));
            default
        }
    };
    let (groups_claim, roles_claim) = match config.get("claim_mappings") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(mappings)) => {
            let claim = |name: &str, problems: &mut Vec<String>| match mappings.get(name) {
                None | Some(Value::Null) => None,
                Some(Value::String(claim)) if !claim.trim().is_empty() => Some(claim.trim().to_string()),
                Some(_) => {
                    problems.push(format!("{path}.claim_mappings.{name}: must be the name of a claim"));
                    None
                }
            };
            if let Some(other) = mappings.keys().find(|k| !["groups", "roles"].contains(&k.as_str())) {
                problems
                    .push(format!("{path}.claim_mappings.{other}: unknown key (\"groups\" and \"roles\" are mapped)"));
            }
            (claim("groups", problems), claim("roles", problems))
        }
        Some(_) => {
            problems.push(format!("{path}.claim_mappings: must be an object {{\"groups\": claim, \"roles\": claim}}"));
            (None, None)
        }
    };
    let accept_api_keys = flag("accept_api_keys", true, problems);
    let trust_forwarded_headers = flag("trust_forwarded_headers", false, problems);
    let console = console_sign_in(
        ConsoleFields {
            admin_role: text("console_admin_role", problems),
            client_id: text("console_client_id", problems),
            client_secret: text("console_client_secret", problems),
            scopes: scope_list("console_scopes", problems),
        },
        groups_claim.is_some() || roles_claim.is_some(),
        problems,
    );
    if problems.len() > before {
        return None;
    }
    let (issuer, audience) = (issuer?, audience?);
    issuer_url?;
    Some(ClientOAuth {
        console,
        issuer,
        audience,
        jwks_uri,
        user_claim,
        project_claim,
        required_scopes,
        accept_api_keys,
        public_url,
        trust_forwarded_headers,
        groups_claim,
        roles_claim,
    })
}

/// The console fields as read, before they are checked together.
struct ConsoleFields {
    admin_role: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    scopes: Option<Vec<String>>,
}

/// The console's sign-in, when `console_admin_role` is set: it needs `console_client_id` and a role or group claim
/// (`claim_mappings`) to look for it in; the client's fields without `console_admin_role` are a mistake too.
fn console_sign_in(fields: ConsoleFields, mapped: bool, problems: &mut Vec<String>) -> Option<ConsoleSignIn> {
    let path = "plugins.auth.config";
    let Some(admin_role) = fields.admin_role else {
        let given = [
            ("console_client_id", fields.client_id.is_some()),
            ("console_client_secret", fields.client_secret.is_some()),
            ("console_scopes", fields.scopes.is_some()),
        ];
        if let Some((field, _)) = given.iter().find(|(_, given)| *given) {
            problems.push(format!(
                "{path}.{field}: is only used with console_admin_role (the role or group that makes a console admin)"
            ));
        }
        return None;
    };
    if !mapped {
        problems.push(format!(
            "{path}.console_admin_role: needs claim_mappings.roles or claim_mappings.groups (the claims the role is \
             looked for in)"
        ));
    }
    let Some(client_id) = fields.client_id else {
        problems.push(format!(
            "{path}.console_admin_role: needs console_client_id (the OAuth client the console signs in as)"
        ));
        return None;
    };
    let scopes = fields.scopes.unwrap_or_else(|| vec!["openid".to_string()]);
    Some(ConsoleSignIn { admin_role, client_id, client_secret: fields.client_secret, scopes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_value(value: Value) -> (Option<ClientOAuth>, Vec<String>) {
        let mut problems = Vec::new();
        let read = read(value.as_object().unwrap(), &mut problems);
        (read, problems)
    }

    #[test]
    fn defaults_and_problems() {
        let (ok, problems) = read_value(json!({"issuer": "https://idp.example.com/realms/x", "audience": "mcpgw"}));
        assert!(problems.is_empty(), "{problems:?}");
        let ok = ok.unwrap();
        assert_eq!(
            (ok.user_claim.as_str(), ok.project_claim.as_str(), ok.accept_api_keys, ok.trust_forwarded_headers),
            ("email", "mcpgw_project", true, false)
        );
        let (none, problems) = read_value(json!({"issuer": "idp", "required_scopes": "mcp", "accept_api_keys": "yes",
                                                 "jwks_uri": "ftp://x", "public_url": 3,
                                                 "trust_forwarded_headers": 1}));
        assert!(none.is_none());
        let text = problems.join("\n");
        let fields = ["issuer", "audience", "required_scopes", "accept_api_keys", "jwks_uri", "public_url"];
        for field in fields.into_iter().chain(["trust_forwarded_headers"]) {
            assert!(text.contains(&format!("plugins.auth.config.{field}:")), "{field}: {text}");
        }
    }

    #[test]
    fn the_console_sign_in_needs_its_client_and_a_role_claim() {
        let base = json!({"issuer": "https://idp.example.com", "audience": "mcpgw",
                          "claim_mappings": {"roles": "roles"}});
        let with = |extra: Value| {
            let mut config = base.clone();
            for (k, v) in extra.as_object().unwrap() {
                config[k] = v.clone();
            }
            read_value(config)
        };
        let (ok, problems) = with(json!({"console_admin_role": "mcpgw-admin", "console_client_id": "console",
                                         "console_client_secret": "s3cret-value"}));
        assert!(problems.is_empty(), "{problems:?}");
        let console = ok.unwrap().console.unwrap();
        assert_eq!((console.admin_role.as_str(), console.scopes.as_slice()), ("mcpgw-admin", &["openid".into()][..]));
        assert!(!format!("{console:?}").contains("s3cret"));
        let (_, problems) = with(json!({"console_admin_role": "mcpgw-admin"}));
        assert!(problems.join("\n").contains("console_admin_role: needs console_client_id"), "{problems:?}");
        let (_, problems) = with(json!({"console_client_id": "console"}));
        assert!(problems.join("\n").contains("console_client_id: is only used with"), "{problems:?}");
        let (_, problems) = with(json!({"console_admin_role": "a", "console_client_id": "c", "console_scopes": "x"}));
        assert!(problems.join("\n").contains("console_scopes: must be an array"), "{problems:?}");
        let mut unmapped = base.clone();
        unmapped.as_object_mut().unwrap().remove("claim_mappings");
        unmapped["console_admin_role"] = json!("a");
        unmapped["console_client_id"] = json!("c");
        let (_, problems) = read_value(unmapped);
        assert!(problems.join("\n").contains("needs claim_mappings.roles or claim_mappings.groups"), "{problems:?}");
    }
}
