//! A token endpoint over TLS that requires a client certificate (RFC 8705 mutual TLS), for black-box tests: a test CA,
//! a server certificate for 127.0.0.1 and a client certificate, written as PEM files, and a tiny HTTP/1.1 responder on
//! its own thread that answers every `POST` with an access token and records what it saw.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use serde_json::json;

/// One token request as the issuer saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The form body (`grant_type=...&client_id=...`).
    pub form: String,
    /// Whether the client presented a certificate (the handshake fails without one, so this is always true).
    pub client_certificate: bool,
}

pub struct TlsIssuer {
    pub token_url: String,
    pub dir: tempfile::TempDir,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// TLS handshakes that failed (for example a client without certificate).
    pub failed_handshakes: Arc<Mutex<u32>>,
}

impl TlsIssuer {
    /// Starts the issuer; every token it issues is `token`.
    pub fn start(token: &str) -> TlsIssuer {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "mcpgw test CA");
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
        for (name, pem) in
            [("ca.pem", ca.pem()), ("client.pem", client_cert.pem()), ("client-key.pem", client_key.serialize_pem())]
        {
            std::fs::write(dir.path().join(name), pem).unwrap();
        }

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server_cert.der().clone()], key)
            .unwrap();
        let config = Arc::new(config);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let token_url = format!("https://{}/token", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let failed_handshakes: Arc<Mutex<u32>> = Arc::default();
        let (record, failures, token) = (Arc::clone(&seen), Arc::clone(&failed_handshakes), token.to_string());
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(mut tcp) = tcp else { return };
                let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else { return };
                let mut tls = rustls::StreamOwned::new(connection, &mut tcp);
                match serve_one(&mut tls, &token) {
                    Some(form) => {
                        let client_certificate = tls.conn.peer_certificates().is_some_and(|c| !c.is_empty());
                        record.lock().unwrap().push(Seen { form, client_certificate });
                    }
                    None => *failures.lock().unwrap() += 1,
                }
            }
        });
        TlsIssuer { token_url, dir, seen, failed_handshakes }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request and answers it with a token; `None` when the handshake or the request failed.
fn serve_one(tls: &mut (impl Read + Write), token: &str) -> Option<String> {
    let form = read_request(tls)?;
    write_json(tls, &json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600}))?;
    Some(form)
}

/// Reads one HTTP/1.1 request (head and `Content-Length` body) and returns the body.
fn read_request(stream: &mut impl Read) -> Option<String> {
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

/// Writes a JSON answer with `Connection: close`.
fn write_json(stream: &mut impl Write, body: &serde_json::Value) -> Option<()> {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    stream.flush().ok()
}
