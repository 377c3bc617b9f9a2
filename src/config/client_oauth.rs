//! The `oauth` authentication provider's config (contract section 10): clients present a JWT from an authorization
//! server, which the gateway verifies as a resource server (`auth/oauth.rs`). Read at load with every problem
//! reported at once, each naming its field.

use serde_json::{Map, Value};

/// `plugins.auth.config` of provider `oauth`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOAuth {
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
    let required_scopes = match config.get("required_scopes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items))
            if items.iter().all(|i| i.as_str().is_some_and(|s| !s.contains(' ') && !s.is_empty())) =>
        {
            items.iter().filter_map(Value::as_str).map(str::to_string).collect()
        }
        Some(_) => {
            problems.push(format!("{path}.required_scopes: must be an array of scope names (no spaces)"));
            Vec::new()
        }
    };
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
    if problems.len() > before {
        return None;
    }
    let (issuer, audience) = (issuer?, audience?);
    issuer_url?;
    Some(ClientOAuth {
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
}
