//! The HTTP client of the remote MCP servers (contract section 9): hyper's pooled client, without reqwest's layers.
//!
//! A remote call is on the request path, so what reqwest does on every request cost every call (issue 36: it parsed
//! the URL into a `Uri` and the answer's URL again, cloned its connector, and passed its tower layers, about a tenth of
//! the gateway's CPU on a remote call). Here the target's `Uri` and credentials are worked out once per session
//! ([`Target`]), and a request is hyper's own: pooled keep-alive HTTP/1.1 connections, `TCP_NODELAY`, connects bounded
//! by the entry's `connectivity_timeout`, no redirects followed, and TLS as reqwest had it (rustls with the
//! platform's roots and the entry's extra ones, ALPN `http/1.1`, a client certificate for mutual TLS), and the proxy
//! the environment names as reqwest took it (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, as curl reads
//! them): an `https` server through a `CONNECT` tunnel, an `http` one through the proxy as a forward proxy, with the
//! proxy URL's user information as `Proxy-Authorization`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, Uri, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
pub use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A pooled client for one remote server's origin, through the proxy the environment names for it, if any.
#[derive(Clone)]
pub struct PooledClient {
    client: Client<Bounded, Full<Bytes>>,
    /// `Proxy-Authorization` for each request, when an `http` server is reached through a forward proxy that has
    /// credentials.
    forward_auth: Option<HeaderValue>,
}

impl PooledClient {
    /// Sends `request` and gives its answer's head (the body is read from the answer).
    pub async fn request(
        &self,
        mut request: axum::http::Request<Full<Bytes>>,
    ) -> Result<Answer, hyper_util::client::legacy::Error> {
        if let Some(auth) = &self.forward_auth {
            request.headers_mut().insert(header::PROXY_AUTHORIZATION, auth.clone());
        }
        self.client.request(request).await
    }
}

/// How connections reach the server: directly, through a `CONNECT` tunnel, or to a forward proxy.
#[derive(Clone)]
enum Route {
    Direct,
    Tunnel(Tunnel<HttpConnector>),
    Forward(Uri),
}

/// The TCP connector under TLS, taking the [`Route`] of the client's origin.
#[derive(Clone)]
pub struct ProxyConnector {
    http: HttpConnector,
    route: Route,
}

type Connecting = std::pin::Pin<Box<dyn Future<Output = Result<Proxied, BoxError>> + Send>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for ProxyConnector {
    type Response = Proxied;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Connecting {
        let mut http = self.http.clone();
        match self.route.clone() {
            Route::Direct => Box::pin(async move {
                let io = tower::Service::call(&mut http, dst).await.map_err(BoxError::from)?;
                Ok(Proxied { io, forward: false })
            }),
            Route::Tunnel(mut tunnel) => Box::pin(async move {
                let io = tower::Service::call(&mut tunnel, dst).await.map_err(BoxError::from)?;
                Ok(Proxied { io, forward: false })
            }),
            Route::Forward(proxy) => Box::pin(async move {
                let io = tower::Service::call(&mut http, proxy).await.map_err(BoxError::from)?;
                Ok(Proxied { io, forward: true })
            }),
        }
    }
}

/// The whole connect (TCP, the proxy's tunnel, the TLS handshake) bounded by the entry's `connectivity_timeout`, as
/// reqwest bounded it: a server that takes the connection and never finishes the handshake fails the connect.
#[derive(Clone)]
pub struct Bounded {
    inner: hyper_rustls::HttpsConnector<ProxyConnector>,
    limit: Duration,
}

type Stream = hyper_rustls::MaybeHttpsStream<Proxied>;

impl tower::Service<Uri> for Bounded {
    type Response = Stream;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let (connecting, limit) = (self.inner.call(dst), self.limit);
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(format!("no connection within {} s (connectivity_timeout)", limit.as_secs_f64()).into()),
            }
        })
    }
}

/// A TCP connection, telling hyper when it goes to a forward proxy (requests then carry absolute URIs).
pub struct Proxied {
    io: TokioIo<tokio::net::TcpStream>,
    forward: bool,
}

impl Connection for Proxied {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.forward)
    }
}

impl hyper::rt::Read for Proxied {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Proxied {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// An answer whose body has not been read yet.
pub type Answer = axum::http::Response<hyper::body::Incoming>;

/// How long an idle keep-alive connection is kept (reqwest's default).
const IDLE: Duration = Duration::from_secs(90);

/// The idle time before TCP keep-alive probes, and between them (reqwest's default).
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The `User-Agent` of every request.
const USER_AGENT: &str = concat!("mcpgw/", env!("CARGO_PKG_VERSION"));

/// Why [`tls_config`] gave no configuration, by the file at fault.
#[derive(Debug, PartialEq)]
pub enum TlsProblem {
    /// The extra roots hold no PEM certificate.
    NoRoots,
    /// The client certificate chain and key are not a PEM certificate and private key that go together.
    Identity,
    /// The trust roots cannot be used at all.
    Other(String),
}

/// The TLS of a client: the platform's trust roots plus `extra_roots` (PEM), and a client certificate chain with its
/// private key (PEM) for servers that ask for one.
pub fn tls_config(
    extra_roots: Option<&[u8]>,
    identity: Option<(&[u8], &[u8])>,
) -> Result<rustls::ClientConfig, TlsProblem> {
    super::ensure_crypto_provider();
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let roots: Vec<CertificateDer<'static>> = match extra_roots {
        Some(pem) => {
            let roots: Vec<_> = CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect();
            if roots.is_empty() {
                return Err(TlsProblem::NoRoots);
            }
            roots
        }
        None => Vec::new(),
    };
    let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(roots, Arc::clone(&provider))
        .map_err(|e| TlsProblem::Other(format!("the trust roots cannot be used: {e}")))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsProblem::Other(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let config = match identity {
        Some((chain, key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(chain).filter_map(Result::ok).collect();
            let key = PrivateKeyDer::from_pem_slice(key).ok();
            let (false, Some(key)) = (chain.is_empty(), key) else { return Err(TlsProblem::Identity) };
            builder.with_client_auth_cert(chain, key).map_err(|_| TlsProblem::Identity)?
        }
        None => builder.with_no_client_auth(),
    };
    // ALPN (`http/1.1`) is the connector's to set (`enable_http1`): it refuses a config that has one.
    Ok(config)
}

/// A pooled client for the origin of `target` with `tls`, its connects bounded by `connect_timeout`, through the
/// proxy `proxies` name for it (see the module documentation; `Matcher::from_env()` in the gateway). An `https://`
/// proxy is refused: the connection to the proxy itself is plain TCP.
pub fn client(
    target: &Target,
    tls: rustls::ClientConfig,
    connect_timeout: Duration,
    proxies: &Matcher,
) -> Result<PooledClient, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    // TCP keep-alive probes as reqwest sent them: a pooled connection a middlebox dropped is found idle, not by the
    // next call.
    http.set_keepalive(Some(KEEPALIVE));
    http.set_keepalive_interval(Some(KEEPALIVE));
    http.set_keepalive_retries(Some(3));
    // Data unacknowledged this long ends the connection (reqwest's default on Linux).
    #[cfg(target_os = "linux")]
    http.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    let (route, forward_auth) = match proxies.intercept(&target.uri) {
        None => (Route::Direct, None),
        Some(proxy) => {
            let uri = proxy.uri().clone();
            if uri.scheme_str() != Some("http") {
                return Err("the proxy the environment names for it is not an http:// URL".into());
            }
            let auth = proxy.basic_auth().cloned();
            if target.uri.scheme_str() == Some("https") {
                let mut tunnel = Tunnel::new(uri, http.clone());
                if let Some(auth) = auth {
                    tunnel = tunnel.with_auth(auth);
                }
                (Route::Tunnel(tunnel), None)
            } else {
                (Route::Forward(uri), auth)
            }
        }
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(ProxyConnector { http, route });
    let https = Bounded { inner: https, limit: connect_timeout };
    let client =
        Client::builder(TokioExecutor::new()).pool_idle_timeout(IDLE).pool_timer(TokioTimer::new()).build(https);
    Ok(PooledClient { client, forward_auth })
}

/// Where requests go, worked out once from a URL: its `Uri` without user information, and the `Basic` credentials
/// that user information stands for (sent unless the request carries another `Authorization`).
#[derive(Clone, Debug)]
pub struct Target {
    pub uri: Uri,
    basic: Option<HeaderValue>,
}

impl Target {
    pub fn new(url: &reqwest::Url) -> Result<Target, String> {
        let mut plain = url.clone();
        let basic = (!url.username().is_empty() || url.password().is_some()).then(|| {
            let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
            let pair = format!("{}:{}", decode(url.username()), decode(url.password().unwrap_or_default()));
            use base64::Engine as _;
            let mut value =
                HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
                    .unwrap_or(HeaderValue::from_static(""));
            value.set_sensitive(true);
            value
        });
        let _ = plain.set_username("");
        let _ = plain.set_password(None);
        plain.set_fragment(None);
        let uri = plain.as_str().parse::<Uri>().map_err(|e| format!("not a URL hyper takes: {e}"))?;
        Ok(Target { uri, basic })
    }

    /// A request to this target with its method, `User-Agent` and `Basic` credentials (if any).
    pub fn request(&self, method: axum::http::Method) -> axum::http::request::Builder {
        let mut builder =
            axum::http::Request::builder().method(method).uri(self.uri.clone()).header(header::USER_AGENT, USER_AGENT);
        if let Some(basic) = &self.basic {
            builder = builder.header(header::AUTHORIZATION, basic.clone());
        }
        builder
    }
}

/// The next piece of an answer's body; `None` at its end (trailers are skipped).
pub async fn chunk(answer: &mut Answer) -> Result<Option<Bytes>, hyper::Error> {
    loop {
        match answer.body_mut().frame().await {
            None => return Ok(None),
            Some(Err(e)) => return Err(e),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// A client error with its causes (hyper's own text is often just "client error (Connect)"); no URL is in it.
pub fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    super::with_causes(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_becomes_basic_credentials_and_leaves_the_uri() {
        let target =
            Target::new(&reqwest::Url::parse("https://us%20er:p%40ss@mcp.example.com:8443/mcp?k=v#x").unwrap())
                .unwrap();
        assert_eq!(target.uri.to_string(), "https://mcp.example.com:8443/mcp?k=v");
        let request = target.request(axum::http::Method::POST).body(()).unwrap();
        // base64("us er:p@ss")
        assert_eq!(request.headers()[header::AUTHORIZATION], "Basic dXMgZXI6cEBzcw==");
        assert!(request.headers()[header::AUTHORIZATION].is_sensitive());
        let plain = Target::new(&reqwest::Url::parse("http://svc.ns.svc:8080/mcp").unwrap()).unwrap();
        assert!(
            plain.request(axum::http::Method::GET).body(()).unwrap().headers().get(header::AUTHORIZATION).is_none()
        );
    }

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        assert_eq!(tls_config(Some(b"not pem"), None).unwrap_err(), TlsProblem::NoRoots);
        assert_eq!(tls_config(None, Some((b"x", b"y"))).unwrap_err(), TlsProblem::Identity);
        // The connector sets ALPN itself and panics on a config that has it: a client is built from ours.
        let target = Target::new(&reqwest::Url::parse("https://example.com/mcp").unwrap()).unwrap();
        let _client = client(&target, tls_config(None, None).unwrap(), Duration::from_secs(1), &no_proxy()).unwrap();
    }

    fn no_proxy() -> Matcher {
        Matcher::builder().build()
    }

    #[test]
    fn the_proxy_must_be_plain_http() {
        let target = Target::new(&reqwest::Url::parse("https://example.com/mcp").unwrap()).unwrap();
        let proxies = Matcher::builder().all("https://proxy.example:3128").build();
        let refused = client(&target, tls_config(None, None).unwrap(), Duration::from_secs(1), &proxies);
        assert!(refused.is_err());
        let proxies = Matcher::builder().all("http://proxy.example:3128").no("example.com").build();
        assert!(client(&target, tls_config(None, None).unwrap(), Duration::from_secs(1), &proxies).is_ok());
    }
}
