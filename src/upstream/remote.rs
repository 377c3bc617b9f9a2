//! What both remote transports share (contract section 9): the HTTP client of one remote server, the entry's
//! `headers` on every request, and the OAuth bearer token.
//!
//! - The client trusts the system's roots plus the entry's `tls.ca_bundle_path`, and presents
//!   `tls.client_cert_path`/`client_key_path` to servers that require mutual TLS; the files are read each time a
//!   session is opened, so rotated certificates are picked up without a reload.
//! - Connects (TCP, a proxy's tunnel, the TLS handshake) are bounded by `connectivity_timeout`; there is no overall
//!   timeout on a request: a call is bounded by the pool's deadline, and an SSE stream lives as long as the session.
//! - Redirects are not followed (the headers and the token must not travel elsewhere); keep-alive connections are
//!   pooled. The client is hyper's own ([`crate::outbound::pooled`]); a URL's user information is sent as `Basic`
//!   credentials, as reqwest did.
//! - With `oauth_config`, each request carries the caller's current access token; a 401 answer gets one new token
//!   and the request once more (a request the server refused unauthenticated was not carried out, so even a
//!   `tools/call` may be sent again).

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri, header};
use bytes::Bytes;
use http_body_util::Full;

use super::RemoteTls;
use super::http_client::HttpRpcError;
use super::oauth::{AccessToken, Bearer};
use crate::outbound::pooled::{self, Answer, PooledClient};

pub use crate::outbound::pooled::Target;

/// A request to a remote server, before the entry's headers and the token; an error when a header the request was
/// given cannot be sent (a value from the server, say).
pub type Outgoing = Result<Request<Full<Bytes>>, axum::http::Error>;

/// How the gateway talks HTTP to one remote server.
pub struct Endpoint {
    http: PooledClient,
    headers: HeaderMap,
    bearer: Option<Bearer>,
}

impl Endpoint {
    /// Requests through `http` carrying `headers` (names and values are checked by validation; invalid ones are
    /// skipped) and, with a `bearer`, its token.
    pub fn new(http: PooledClient, headers: &[(String, String)], bearer: Option<Bearer>) -> Endpoint {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                map.append(name, value);
            }
        }
        Endpoint { http, headers: map, bearer }
    }

    /// Sends the request `build` makes with the entry's headers and the token; on a 401, once more with a new token,
    /// unless the refused token is one the caller's request has just obtained (a new one would fare no better, and
    /// a server that refuses every token would cost the issuer two token requests per request).
    pub async fn send(&self, build: impl Fn() -> Outgoing) -> Result<Answer, HttpRpcError> {
        let new_token = self.bearer.as_ref().and_then(Bearer::take_new_token);
        let (first, sent, uri) = self.send_once(&build, false).await?;
        if first.status() != StatusCode::UNAUTHORIZED || self.bearer.is_none() {
            return Ok(first);
        }
        if let (Some(new), Some(sent)) = (&new_token, &sent)
            && std::sync::Arc::ptr_eq(new, sent)
        {
            tracing::info!(url = %shown_uri(&uri),
                "the remote server refused an access token obtained for this request (401); not fetching another");
            return Ok(first);
        }
        tracing::info!(url = %shown_uri(&uri), "the remote server refused the access token (401); fetching a new one");
        self.send_once(&build, true).await.map(|(response, _, _)| response)
    }

    /// Sends the request `build` makes with the entry's headers and the current token, without a refresh on a 401
    /// (for the end of a session: a server that refuses it has nothing to end).
    pub async fn send_as_is(&self, build: impl Fn() -> Outgoing) -> Result<Answer, HttpRpcError> {
        self.send_once(&build, false).await.map(|(response, _, _)| response)
    }

    /// One request, the token it carried and where it went. The entry's headers replace the request's of the same
    /// names; the token replaces any `Authorization`.
    async fn send_once(
        &self,
        build: &impl Fn() -> Outgoing,
        new_token: bool,
    ) -> Result<(Answer, Option<std::sync::Arc<AccessToken>>, Uri), HttpRpcError> {
        let mut request = build().map_err(|e| HttpRpcError::Protocol(format!("the request cannot be sent: {e}")))?;
        let headers = request.headers_mut();
        for name in self.headers.keys() {
            headers.remove(name);
        }
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        let mut sent = None;
        if let Some(bearer) = &self.bearer {
            let token = if new_token { bearer.refreshed().await } else { bearer.current().await };
            let token = token.map_err(|e| HttpRpcError::Credential(e.to_string()))?;
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.secret()))
                .map_err(|_| HttpRpcError::Credential("the access token is not a valid header value".into()))?;
            value.set_sensitive(true);
            request.headers_mut().insert(header::AUTHORIZATION, value);
            sent = Some(token);
        }
        // Only a request with a token can be refused and logged (see `send`); the others need not keep their URI.
        let uri = if self.bearer.is_some() { request.uri().clone() } else { Uri::default() };
        let response = self.http.request(request).await.map_err(|e| HttpRpcError::Transport(pooled::describe(&e)))?;
        Ok((response, sent, uri))
    }
}

/// The HTTP client for one remote server at `url`: its `tls` files, connects bounded by `connect_timeout`, through the
/// proxy the environment names for the URL's origin (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`).
pub async fn client(
    url: &reqwest::Url,
    tls: Option<&RemoteTls>,
    connect_timeout: Duration,
) -> Result<PooledClient, String> {
    let target = Target::new(url)?;
    let mut roots = None;
    let mut identity = None;
    if let Some(tls) = tls {
        if let Some(path) = &tls.ca_bundle_path {
            roots = Some((read("tls.ca_bundle_path", path).await?, path));
        }
        if let (Some(cert), Some(key)) = (&tls.client_cert_path, &tls.client_key_path) {
            identity = Some((read("tls.client_cert_path", cert).await?, read("tls.client_key_path", key).await?));
        }
    }
    let identity = identity.as_ref().map(|(cert, key)| (cert.as_slice(), key.as_slice()));
    let config =
        pooled::tls_config(roots.as_ref().map(|(bundle, _)| bundle.as_slice()), identity).map_err(|why| {
            match (why, &roots) {
                (pooled::TlsProblem::NoRoots, Some((_, path))) => {
                    format!("tls.ca_bundle_path: no PEM certificate in {}", path.display())
                }
                (pooled::TlsProblem::Identity, _) => {
                    "tls.client_cert_path, tls.client_key_path: not a PEM certificate and private key".to_string()
                }
                (pooled::TlsProblem::NoRoots, None) => "no PEM certificate".to_string(),
                (pooled::TlsProblem::Other(why), _) => why,
            }
        })?;
    pooled::client(&target, config, connect_timeout, &pooled::Matcher::from_env())
}

async fn read(field: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    tokio::fs::read(path).await.map_err(|error| format!("{field}: {}: {error}", path.display()))
}

/// A request's URI as [`shown`] shows a URL (user information is never in a [`Target`]'s URI).
pub fn shown_uri(uri: &Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("http");
    let authority = uri.authority().map_or("", |a| a.as_str());
    let query = if uri.query().is_some() { "?..." } else { "" };
    format!("{scheme}://{authority}{}{query}", uri.path())
}

/// A URL as logs and error messages show it: without user information and query, which may hold credentials (some
/// hosted servers take a key in the query).
pub fn shown(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    if shown.query().is_some() {
        shown.set_query(Some("..."));
    }
    shown.set_fragment(None);
    shown.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_keep_no_credentials() {
        let url = reqwest::Url::parse("https://user:pw@mcp.example.com:8443/mcp?api_key=s3cret#x").unwrap();
        assert_eq!(shown(&url), "https://mcp.example.com:8443/mcp?...");
        let plain = reqwest::Url::parse("http://svc.ns.svc:8080/mcp").unwrap();
        assert_eq!(shown(&plain), "http://svc.ns.svc:8080/mcp");
        assert_eq!(shown_uri(&Target::new(&url).unwrap().uri), "https://mcp.example.com:8443/mcp?...");
        assert_eq!(shown_uri(&Target::new(&plain).unwrap().uri), "http://svc.ns.svc:8080/mcp");
    }
}
