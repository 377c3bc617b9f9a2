//! Reading a server entry's `oauth_config` into [`OAuthSettings`]: every problem at once, each naming its field, and
//! the client secret kept out of every message and `Debug` output. Validation uses it at load (a problem is a config
//! problem); the upstream OAuth token manager (`upstream/oauth`) uses the settings it reads.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::model::OAuthConfig;

/// A server's validated `oauth_config` (only when enabled). `PartialEq` tells whether it changed on a reload.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    pub client_id: String,
    client_secret: Option<String>,
    pub token_url: reqwest::Url,
    pub scope: Option<String>,
    pub audience: Option<String>,
    /// The client certificate and key (PEM files) presented for mutual TLS, when `OAUTH_USE_MTLS` is true.
    pub mtls: Option<ClientCertificate>,
    /// Extra trust roots (PEM) for the token endpoint's certificate, beside the system's; used with or without mTLS.
    pub ca_bundle_path: Option<PathBuf>,
}

/// The PEM files of a mutual TLS client identity; they are read at each acquisition, so a rotated certificate is used
/// by the next token request without a reload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificate {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .field("token_url", &self.token_url.as_str())
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("mtls", &self.mtls)
            .field("ca_bundle_path", &self.ca_bundle_path)
            .finish()
    }
}

impl OAuthSettings {
    /// Reads a server entry's `oauth_config` object. `Ok(None)` when it is absent, null or not enabled; otherwise every
    /// problem, each naming its field (never a value of the secret). An empty string counts as absent, as forms and
    /// templates often write one for "not set".
    pub fn from_json(value: &Value) -> Result<Option<OAuthSettings>, Vec<String>> {
        let object = match value {
            Value::Null => return Ok(None),
            Value::Object(object) => object,
            _ => return Err(vec!["oauth_config: must be an object".to_string()]),
        };
        let mut fields = Fields { object, problems: Vec::new() };
        if !fields.bool("enabled") {
            return if fields.problems.is_empty() { Ok(None) } else { Err(fields.problems) };
        }
        let grant_type = fields.string("OAUTH_GRANT_TYPE");
        let client_id = fields.string("OAUTH_CLIENT_ID");
        let client_secret = fields.string("OAUTH_CLIENT_SECRET");
        let token_url = fields.string("OAUTH_TOKEN_URL");
        let scope = fields.string("OAUTH_SCOPE");
        let audience = fields.string("OAUTH_AUDIENCE");
        let use_mtls = fields.bool("OAUTH_USE_MTLS");
        let cert_path = fields.string("OAUTH_CLIENT_CERT_PATH");
        let key_path = fields.string("OAUTH_CLIENT_KEY_PATH");
        let ca_bundle_path = fields.string("OAUTH_CA_BUNDLE_PATH").map(PathBuf::from);
        let mut problems = fields.problems;

        if let Some(grant) = grant_type.filter(|grant| grant != "client_credentials") {
            problems.push(format!("OAUTH_GRANT_TYPE: only client_credentials is supported, found {grant:?}"));
        }
        if client_id.is_none() {
            problems.push("OAUTH_CLIENT_ID: required when OAuth is enabled".to_string());
        }
        // RFC 8705 2.2: a public client authenticated by its certificate alone has no secret.
        if client_secret.is_none() && !use_mtls {
            problems.push("OAUTH_CLIENT_SECRET: required unless OAUTH_USE_MTLS is true".to_string());
        }
        let token_url = match token_url.map(|url| reqwest::Url::parse(&url)) {
            None => {
                problems.push("OAUTH_TOKEN_URL: required when OAuth is enabled".to_string());
                None
            }
            Some(Err(error)) => {
                problems.push(format!("OAUTH_TOKEN_URL: not a valid URL ({error})"));
                None
            }
            Some(Ok(url)) if !matches!(url.scheme(), "http" | "https") => {
                problems.push("OAUTH_TOKEN_URL: must be an http or https URL".to_string());
                None
            }
            // Over plain HTTP no certificate would be presented, so mTLS would silently not happen.
            Some(Ok(url)) if use_mtls && url.scheme() != "https" => {
                problems.push("OAUTH_TOKEN_URL: must be an https URL when OAUTH_USE_MTLS is true".to_string());
                None
            }
            Some(Ok(url)) => Some(url),
        };
        let mtls = match (use_mtls, cert_path, key_path) {
            (false, _, _) => None,
            (true, Some(cert), Some(key)) => Some(ClientCertificate { cert_path: cert.into(), key_path: key.into() }),
            (true, cert, key) => {
                for (name, missing) in
                    [("OAUTH_CLIENT_CERT_PATH", cert.is_none()), ("OAUTH_CLIENT_KEY_PATH", key.is_none())]
                {
                    if missing {
                        problems.push(format!("{name}: required when OAUTH_USE_MTLS is true"));
                    }
                }
                None
            }
        };
        match (client_id, token_url) {
            (Some(client_id), Some(token_url)) if problems.is_empty() => {
                Ok(Some(OAuthSettings { client_id, client_secret, token_url, scope, audience, mtls, ca_bundle_path }))
            }
            _ => Err(problems),
        }
    }

    /// [`OAuthSettings::from_json`] of the typed configuration model's `oauth_config`.
    pub fn from_config(config: &OAuthConfig) -> Result<Option<OAuthSettings>, Vec<String>> {
        match serde_json::to_value(config) {
            Ok(value) => OAuthSettings::from_json(&value),
            Err(error) => Err(vec![format!("oauth_config: {error}")]),
        }
    }

    /// Whether a client secret is configured (a mutual TLS client may have none).
    pub fn has_client_secret(&self) -> bool {
        self.client_secret.is_some()
    }

    /// The form body of the token request: `client_secret_post` authentication (RFC 6749 2.3.1), which every issuer
    /// accepts and which keeps the secret out of headers that proxies like to log.
    pub(crate) fn form(&self) -> Vec<(&'static str, &str)> {
        let mut form = vec![("grant_type", "client_credentials"), ("client_id", self.client_id.as_str())];
        let optional = [("client_secret", &self.client_secret), ("scope", &self.scope), ("audience", &self.audience)];
        form.extend(optional.into_iter().filter_map(|(name, value)| Some((name, value.as_deref()?))));
        form
    }
}

/// Reads typed fields of an `oauth_config` object, collecting type problems.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    problems: Vec<String>,
}

impl Fields<'_> {
    fn string(&mut self, name: &str) -> Option<String> {
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if text.is_empty() => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(_) => {
                self.problems.push(format!("{name}: must be a string"));
                None
            }
        }
    }

    fn bool(&mut self, name: &str) -> bool {
        match self.object.get(name) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => {
                self.problems.push(format!("{name}: must be true or false"));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SECRET: &str = "s3cret-client-value-0123456789";

    fn settings(url: &str) -> OAuthSettings {
        let config = json!({"enabled": true, "OAUTH_GRANT_TYPE": "client_credentials", "OAUTH_CLIENT_ID": "gw-client",
            "OAUTH_CLIENT_SECRET": SECRET, "OAUTH_TOKEN_URL": url, "OAUTH_SCOPE": "read write"});
        OAuthSettings::from_json(&config).unwrap().unwrap()
    }

    #[test]
    fn settings_are_read_from_oauth_config() {
        assert_eq!(OAuthSettings::from_json(&Value::Null), Ok(None));
        assert_eq!(OAuthSettings::from_json(&json!({})), Ok(None));
        assert_eq!(OAuthSettings::from_json(&json!({"enabled": false, "OAUTH_CLIENT_ID": 5})), Ok(None));
        let settings = settings("https://issuer.example/oauth/token");
        assert_eq!(settings.client_id, "gw-client");
        assert_eq!(settings.token_url.as_str(), "https://issuer.example/oauth/token");
        assert_eq!((settings.scope.as_deref(), settings.audience.as_deref()), (Some("read write"), None));
        assert!(settings.has_client_secret() && settings.mtls.is_none() && settings.ca_bundle_path.is_none());

        let model = crate::config::model::OAuthConfig {
            enabled: Some(true),
            OAUTH_CLIENT_ID: Some("gw-client".into()),
            OAUTH_CLIENT_SECRET: Some(SECRET.into()),
            OAUTH_TOKEN_URL: Some("https://issuer.example/oauth/token".into()),
            OAUTH_SCOPE: Some("read write".into()),
            ..Default::default()
        };
        assert_eq!(OAuthSettings::from_config(&model), Ok(Some(settings)));
    }

    #[test]
    fn every_settings_problem_is_reported_by_field_without_the_secret() {
        let problems = |value: Value| OAuthSettings::from_json(&value).unwrap_err();
        assert_eq!(problems(json!("yes")), ["oauth_config: must be an object"]);
        assert_eq!(problems(json!({"enabled": "true"})), ["enabled: must be true or false"]);
        assert_eq!(
            problems(json!({"enabled": true, "OAUTH_CLIENT_SECRET": SECRET})),
            ["OAUTH_CLIENT_ID: required when OAuth is enabled", "OAUTH_TOKEN_URL: required when OAuth is enabled",]
        );
        let found = problems(json!({"enabled": true, "OAUTH_GRANT_TYPE": "password", "OAUTH_CLIENT_ID": 7,
            "OAUTH_CLIENT_SECRET": SECRET, "OAUTH_TOKEN_URL": "ftp://issuer/token", "OAUTH_SCOPE": ["a"]}));
        assert_eq!(
            found,
            [
                "OAUTH_CLIENT_ID: must be a string",
                "OAUTH_SCOPE: must be a string",
                "OAUTH_GRANT_TYPE: only client_credentials is supported, found \"password\"",
                "OAUTH_CLIENT_ID: required when OAuth is enabled",
                "OAUTH_TOKEN_URL: must be an http or https URL",
            ]
        );
        assert!(!found.concat().contains(SECRET));
        assert_eq!(
            problems(json!({"enabled": true, "OAUTH_CLIENT_ID": "c", "OAUTH_TOKEN_URL": "not a url"})),
            [
                "OAUTH_CLIENT_SECRET: required unless OAUTH_USE_MTLS is true",
                "OAUTH_TOKEN_URL: not a valid URL (relative URL without a base)",
            ]
        );
        let mtls = json!({"enabled": true, "OAUTH_CLIENT_ID": "c", "OAUTH_TOKEN_URL": "http://issuer/token",
            "OAUTH_USE_MTLS": true, "OAUTH_CLIENT_KEY_PATH": "/k.pem"});
        assert_eq!(
            problems(mtls),
            [
                "OAUTH_TOKEN_URL: must be an https URL when OAUTH_USE_MTLS is true",
                "OAUTH_CLIENT_CERT_PATH: required when OAUTH_USE_MTLS is true",
            ]
        );
    }

    #[test]
    fn a_public_mtls_client_needs_no_secret() {
        let settings = OAuthSettings::from_json(&json!({"enabled": true, "OAUTH_CLIENT_ID": "c",
            "OAUTH_TOKEN_URL": "https://issuer/token", "OAUTH_USE_MTLS": true, "OAUTH_CLIENT_CERT_PATH": "/c.pem",
            "OAUTH_CLIENT_KEY_PATH": "/k.pem", "OAUTH_CA_BUNDLE_PATH": "/ca.pem"}))
        .unwrap()
        .unwrap();
        assert!(!settings.has_client_secret());
        assert_eq!(settings.mtls, Some(ClientCertificate { cert_path: "/c.pem".into(), key_path: "/k.pem".into() }));
        assert_eq!(settings.ca_bundle_path, Some(PathBuf::from("/ca.pem")));
        assert!(!settings.form().iter().any(|(name, _)| *name == "client_secret"));
    }

    #[test]
    fn debug_output_hides_the_secret() {
        let settings = format!("{:?}", settings("https://issuer.example/token"));
        assert!(settings.contains("gw-client") && settings.contains("***") && !settings.contains(SECRET), "{settings}");
    }
}
