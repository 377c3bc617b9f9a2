//! A token endpoint over TLS that requires a client certificate (RFC 8705 mutual TLS), for black-box tests: a test CA,
//! a server certificate for 127.0.0.1 and a client certificate, written as PEM files, and a tiny HTTP/1.1 responder on
//! its own thread that answers every `POST` with an access token and records what it saw.

// Each test file uses part of this module.
#![allow(dead_code)]

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

/// A test CA, a server certificate for 127.0.0.1 and a client certificate (`ca.pem`, `client.pem`,
/// `client-key.pem` in `dir`), and a server configuration that requires a client certificate of the CA.
pub struct TestPki {
    pub dir: tempfile::TempDir,
    pub server_config: Arc<rustls::ServerConfig>,
}

impl TestPki {
    pub fn new() -> TestPki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, "mcpgw test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let leaf = |names: &[&str], usage| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
            params.extended_key_usages = vec![usage];
            (params.signed_by(&key, &ca).unwrap(), key)
        };
        let (server_cert, server_key) = leaf(&["127.0.0.1", "localhost"], ExtendedKeyUsagePurpose::ServerAuth);
        let (client_cert, client_key) = leaf(&["gw-client"], ExtendedKeyUsagePurpose::ClientAuth);
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
        TestPki { dir, server_config: Arc::new(config) }
    }
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
        let pki = TestPki::new();
        let (dir, config) = (pki.dir, pki.server_config);
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

/// A TLS front that requires a client certificate of its test CA and passes the bytes on to `backend` (a plain HTTP
/// server): a remote MCP server behind mutual TLS. Its PEM files are in `pki_dir`; handshakes it refused are counted.
pub struct TlsFront {
    pub port: u16,
    pub pki_dir: tempfile::TempDir,
    pub refused: Arc<Mutex<u32>>,
}

impl TlsFront {
    pub fn start(backend: std::net::SocketAddr) -> TlsFront {
        let pki = TestPki::new();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&pki.server_config));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let refused: Arc<Mutex<u32>> = Arc::default();
        let counted = Arc::clone(&refused);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, counted) = (acceptor.clone(), Arc::clone(&counted));
                    tokio::spawn(async move {
                        match acceptor.accept(tcp).await {
                            Ok(mut tls) => {
                                if let Ok(mut back) = tokio::net::TcpStream::connect(backend).await {
                                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
                                }
                            }
                            Err(_) => *counted.lock().unwrap() += 1,
                        }
                    });
                }
            });
        });
        TlsFront { port, pki_dir: pki.dir, refused }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.pki_dir.path().join(name)
    }
}
