//! One client credentials request (RFC 6749 4.4.2) and its answer (5.1, 5.2), over a shared client or, for mutual TLS (RFC 8705) and extra trust roots, one built from the configured PEM files. Neither
//! a response body nor the secret is ever quoted in an error.

use std::time::Duration;

use super::{AccessToken, DEFAULT_LIFETIME, OAuthError, OAuthSettings};
use crate::outbound::token_endpoint::{self, TokenEndpointError};

/// A client carrying the client certificate and the extra trust roots of `settings`, built from the files anew for
/// each acquisition so that rotated certificates are picked up without a reload.
pub(super) async fn dedicated_client(
    settings: &OAuthSettings,
    timeout: Duration,
) -> Result<reqwest::Client, OAuthError> {
    let mut builder = crate::outbound::client_builder(timeout);
    if let Some(files) = &settings.mtls {
        let mut pem = read_file("OAUTH_CLIENT_CERT_PATH", &files.cert_path).await?;
        pem.push(b'\n');
        pem.extend(read_file("OAUTH_CLIENT_KEY_PATH", &files.key_path).await?);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
            OAuthError::Config("OAUTH_CLIENT_CERT_PATH, OAUTH_CLIENT_KEY_PATH: not a PEM certificate and key".into())
        })?;
        builder = builder.identity(identity);
    }
    if let Some(path) = &settings.ca_bundle_path {
        let bundle = read_file("OAUTH_CA_BUNDLE_PATH", path).await?;
        let roots = reqwest::Certificate::from_pem_bundle(&bundle).unwrap_or_default();
        if roots.is_empty() {
            return Err(OAuthError::Config(format!("OAUTH_CA_BUNDLE_PATH: no PEM certificate in {}", path.display())));
        }
        builder = roots.into_iter().fold(builder, reqwest::ClientBuilder::add_root_certificate);
    }
    builder.build().map_err(build_error)
}

/// A client that could not be built is a local problem, not the endpoint's.
pub(super) fn build_error(error: reqwest::Error) -> OAuthError {
    OAuthError::Config(format!("HTTP client: {}", crate::outbound::describe(error)))
}

async fn read_file(field: &str, path: &std::path::Path) -> Result<Vec<u8>, OAuthError> {
    tokio::fs::read(path).await.map_err(|error| OAuthError::Config(format!("{field}: {}: {error}", path.display())))
}

/// One token request (RFC 6749 4.4.2) and its answer (5.1 or 5.2), by the one token-endpoint client
/// (`outbound/token_endpoint.rs`).
pub(super) async fn request_token(
    client: &reqwest::Client,
    settings: &OAuthSettings,
    timeout: Duration,
) -> Result<AccessToken, OAuthError> {
    let answer = token_endpoint::request(client, settings.token_url.as_str(), &settings.form(), timeout)
        .await
        .map_err(|error| match error {
            TokenEndpointError::Unreachable(why) => OAuthError::Unreachable(why),
            TokenEndpointError::Timeout(after) => OAuthError::Timeout(after),
            TokenEndpointError::Rejected { status, error } => OAuthError::Rejected { status, error },
            TokenEndpointError::BadAnswer(why) => OAuthError::BadAnswer(why),
        })?;
    let lifetime = answer.expires_in.unwrap_or(DEFAULT_LIFETIME);
    Ok(AccessToken::new(answer.access_token, answer.token_type, lifetime))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::upstream::oauth::test_support::{Issuer, SECRET, config, key, manager, settings};
    use tokio::time::Instant;

    use crate::upstream::oauth::TokenManager;

    #[tokio::test]
    async fn the_token_request_is_a_client_credentials_form() {
        let (issuer, url) = Issuer::default().start().await;
        issuer.then(200, json!({"access_token": "abc", "expires_in": 120}));
        let mut config = config(&url);
        config["OAUTH_AUDIENCE"] = json!("api://weather");
        let settings = OAuthSettings::from_json(&config).unwrap().unwrap();
        let token = manager().token(&key("p1"), &settings).await.unwrap();
        assert_eq!((token.secret(), token.token_type.as_str()), ("abc", "Bearer"));
        let requests = issuer.requests.lock().unwrap();
        let form = &requests[0].form;
        let expected = [
            ("grant_type", "client_credentials"),
            ("client_id", "gw-client"),
            ("client_secret", SECRET),
            ("scope", "read write"),
            ("audience", "api://weather"),
        ];
        assert_eq!(form, &expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        assert_eq!(requests[0].accept.as_deref(), Some("application/json"));
        assert_eq!(requests[0].content_type.as_deref(), Some("application/x-www-form-urlencoded"));
    }

    #[tokio::test]
    async fn absent_optional_fields_are_not_sent_and_defaults_apply() {
        let (issuer, url) = Issuer::default().start().await;
        issuer.then(200, json!({"access_token": "abc"}));
        let mut config = config(&url);
        config["OAUTH_SCOPE"] = json!("");
        let token = manager().token(&key("p1"), &OAuthSettings::from_json(&config).unwrap().unwrap()).await.unwrap();
        let form = &issuer.requests.lock().unwrap()[0].form;
        assert!(!form.contains_key("scope") && !form.contains_key("audience"));
        assert_eq!(token.token_type, "Bearer");
        let lifetime = token.expires_at - Instant::now();
        assert!(lifetime > Duration::from_secs(3590) && lifetime <= DEFAULT_LIFETIME, "{lifetime:?}");
    }

    #[tokio::test]
    async fn unusable_answers_are_errors_that_do_not_quote_the_body() {
        let (issuer, url) = Issuer::default().start().await;
        let settings = settings(&url);
        let answers = [
            json!({"token_type": "Bearer"}),
            json!({"access_token": "line\nbreak"}),
            json!({"access_token": "leaked-token", "expires_in": "soon"}),
            json!(["not", "an", "object"]),
        ];
        for (n, answer) in answers.into_iter().enumerate() {
            issuer.then(200, answer);
            let error = manager().token(&key(&n.to_string()), &settings).await.unwrap_err();
            assert!(matches!(error, OAuthError::BadAnswer(_)), "{error}");
            assert!(!error.to_string().contains("leaked-token"));
        }
        assert_eq!(issuer.count(), 4);
        issuer.then(200, json!({"access_token": "t", "expires_in": "90", "token_type": "DPoP"}));
        let token = manager().token(&key("p1"), &settings).await.unwrap();
        assert_eq!(token.token_type, "DPoP");
        assert_eq!(token.refresh_at - (token.expires_at - Duration::from_secs(90)), Duration::from_secs(45));
    }

    #[tokio::test]
    async fn an_unreachable_or_slow_endpoint_is_reported_as_such() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = format!("http://{}/token", listener.local_addr().unwrap());
        drop(listener);
        let error = manager().token(&key("p1"), &settings(&closed)).await.unwrap_err();
        assert!(matches!(error, OAuthError::Unreachable(_)) && error.is_transient(), "{error}");
        assert!(!error.to_string().contains(SECRET));

        let (issuer, url) = Issuer { delay: Duration::from_secs(2), ..Issuer::default() }.start().await;
        let error = TokenManager::new(Duration::from_millis(100)).token(&key("p1"), &settings(&url)).await.unwrap_err();
        assert_eq!(error, OAuthError::Timeout(Duration::from_millis(100)));
        assert!(issuer.count() >= 1);
    }

    /// A test CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it, written as PEM files.
    struct Pki {
        dir: tempfile::TempDir,
        server: Arc<rustls::ServerConfig>,
    }

    impl Pki {
        fn new() -> Pki {
            use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca_params.distinguished_name.push(rcgen::DnType::CommonName, "mcpgw test CA");
            let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
            let leaf = |name: &str, usage| {
                let key = KeyPair::generate().unwrap();
                let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
                params.extended_key_usages = vec![usage];
                (params.signed_by(&key, &ca).unwrap(), key)
            };
            let (server_cert, server_key) = leaf("127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth);
            let (client_cert, client_key) = leaf("gw-client", ExtendedKeyUsagePurpose::ClientAuth);
            let dir = tempfile::tempdir().unwrap();
            for (name, pem) in [
                ("ca.pem", ca.pem()),
                ("client.pem", client_cert.pem()),
                ("client-key.pem", client_key.serialize_pem()),
            ] {
                std::fs::write(dir.path().join(name), pem).unwrap();
            }

            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.der().clone()).unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .unwrap();
            let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
            let server = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_client_cert_verifier(verifier)
                .with_single_cert(vec![server_cert.der().clone()], key)
                .unwrap();
            Pki { dir, server: Arc::new(server) }
        }

        fn path(&self, name: &str) -> String {
            self.dir.path().join(name).display().to_string()
        }

        /// Serves `issuer` over TLS requiring a client certificate from the test CA; returns the token URL.
        async fn serve(&self, issuer: &Issuer) -> String {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("https://{}/token", listener.local_addr().unwrap());
            let (acceptor, router) = (tokio_rustls::TlsAcceptor::from(Arc::clone(&self.server)), issuer.router());
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, router) = (acceptor.clone(), router.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let service = hyper::service::service_fn(move |request| {
                            tower::ServiceExt::oneshot(router.clone(), request)
                        });
                        let io = hyper_util::rt::TokioIo::new(tls);
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                    });
                }
            });
            url
        }
    }

    #[tokio::test]
    async fn mutual_tls_presents_the_client_certificate_and_trusts_the_ca_bundle() {
        let (pki, issuer) = (Pki::new(), Issuer::default());
        let url = pki.serve(&issuer).await;
        // A public client (RFC 8705 2.2): the certificate is its only credential.
        let settings = OAuthSettings::from_json(&json!({"enabled": true, "OAUTH_CLIENT_ID": "gw-client",
            "OAUTH_TOKEN_URL": url, "OAUTH_USE_MTLS": true, "OAUTH_CLIENT_CERT_PATH": pki.path("client.pem"),
            "OAUTH_CLIENT_KEY_PATH": pki.path("client-key.pem"), "OAUTH_CA_BUNDLE_PATH": pki.path("ca.pem")}))
        .unwrap()
        .unwrap();
        let token = manager().token(&key("p1"), &settings).await.unwrap();
        assert_eq!(token.secret(), "token-1");
        let form = &issuer.requests.lock().unwrap()[0].form;
        assert_eq!((form["client_id"].as_str(), form.contains_key("client_secret")), ("gw-client", false));
    }

    #[tokio::test]
    async fn mutual_tls_endpoint_refuses_a_client_without_certificate() {
        let (pki, issuer) = (Pki::new(), Issuer::default());
        let url = pki.serve(&issuer).await;
        let mut config = config(&url);
        config["OAUTH_CA_BUNDLE_PATH"] = json!(pki.path("ca.pem"));
        let settings = OAuthSettings::from_json(&config).unwrap().unwrap();
        let error = manager().token(&key("p1"), &settings).await.unwrap_err();
        // rustls reports the server's alert: it is the missing certificate, not an untrusted server, that failed.
        assert!(matches!(&error, OAuthError::Unreachable(text) if text.contains("CertificateRequired")), "{error}");
        assert_eq!(issuer.count(), 0);

        // A missing key file is a configuration error, found before any request.
        config["OAUTH_USE_MTLS"] = json!(true);
        config["OAUTH_CLIENT_CERT_PATH"] = json!(pki.path("client.pem"));
        config["OAUTH_CLIENT_KEY_PATH"] = json!(pki.path("missing.pem"));
        let settings = OAuthSettings::from_json(&config).unwrap().unwrap();
        let error = manager().token(&key("p1"), &settings).await.unwrap_err();
        assert!(matches!(&error, OAuthError::Config(text) if text.starts_with("OAUTH_CLIENT_KEY_PATH")), "{error}");
    }
}
