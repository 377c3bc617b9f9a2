//! What both remote transports share (contract section 9): the HTTP client of one remote server, the entry's
//! `headers` on every request, and the OAuth bearer token.
//!
//! - The client trusts the system's roots plus the entry's `tls.ca_bundle_path`, and presents
//!   `tls.client_cert_path`/`client_key_path` to servers that require mutual TLS; the files are read each time a
//!   session is opened, so rotated certificates are picked up without a reload.
//! - Connects are bounded by `connectivity_timeout`; there is no overall timeout on a request: a call is bounded by
//!   the pool's deadline, and an SSE stream lives as long as the session.
//! - Redirects are not followed (the headers and the token must not travel elsewhere); keep-alive connections are
//!   pooled.
//! - With `oauth_config`, each request carries the caller's current access token; a 401 answer gets one new token
//!   and the request once more (a request the server refused unauthenticated was not carried out, so even a
//!   `tools/call` may be sent again).

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::RemoteTls;
use super::http_client::HttpRpcError;
use super::oauth::{AccessToken, Bearer};
use crate::outbound::describe;

/// How the gateway talks HTTP to one remote server.
pub struct Endpoint {
    http: reqwest::Client,
    headers: HeaderMap,
    bearer: Option<Bearer>,
}

impl Endpoint {
    /// Requests through `http` carrying `headers` (names and values are checked by validation; invalid ones are
    /// skipped) and, with a `bearer`, its token.
    pub fn new(http: reqwest::Client, headers: &[(String, String)], bearer: Option<Bearer>) -> Endpoint {
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
    pub async fn send(
        &self,
        build: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, HttpRpcError> {
        let new_token = self.bearer.as_ref().and_then(Bearer::take_new_token);
        let (first, sent) = self.send_once(&build, false).await?;
        if first.status() != StatusCode::UNAUTHORIZED || self.bearer.is_none() {
            return Ok(first);
        }
        if let (Some(new), Some(sent)) = (&new_token, &sent)
            && std::sync::Arc::ptr_eq(new, sent)
        {
            tracing::info!(url = %shown(first.url()),
                "the remote server refused an access token obtained for this request (401); not fetching another");
            return Ok(first);
        }
        tracing::info!(url = %shown(first.url()), "the remote server refused the access token (401); fetching a new one");
        self.send_once(&build, true).await.map(|(response, _)| response)
    }

    /// Sends the request `build` makes with the entry's headers and the current token, without a refresh on a 401
    /// (for the end of a session: a server that refuses it has nothing to end).
    pub async fn send_as_is(
        &self,
        build: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, HttpRpcError> {
        self.send_once(&build, false).await.map(|(response, _)| response)
    }

    /// One request, and the token it carried.
    async fn send_once(
        &self,
        build: &impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
        new_token: bool,
    ) -> Result<(reqwest::Response, Option<std::sync::Arc<AccessToken>>), HttpRpcError> {
        let mut request = build(&self.http).headers(self.headers.clone());
        let mut sent = None;
        if let Some(bearer) = &self.bearer {
            let token = if new_token { bearer.refreshed().await } else { bearer.current().await };
            let token = token.map_err(|e| HttpRpcError::Credential(e.to_string()))?;
            request = request.bearer_auth(token.secret());
            sent = Some(token);
        }
        let response = request.send().await.map_err(|e| HttpRpcError::Transport(describe(e)))?;
        Ok((response, sent))
    }
}

/// The HTTP client for one remote server: its `tls` files, connects bounded by `connect_timeout`.
pub async fn client(tls: Option<&RemoteTls>, connect_timeout: Duration) -> Result<reqwest::Client, String> {
    crate::outbound::ensure_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("mcpgw/", env!("CARGO_PKG_VERSION")));
    let Some(tls) = tls else { return builder.build().map_err(describe) };
    if let Some(path) = &tls.ca_bundle_path {
        let bundle = read("tls.ca_bundle_path", path).await?;
        let roots = reqwest::Certificate::from_pem_bundle(&bundle).unwrap_or_default();
        if roots.is_empty() {
            return Err(format!("tls.ca_bundle_path: no PEM certificate in {}", path.display()));
        }
        builder = roots.into_iter().fold(builder, reqwest::ClientBuilder::add_root_certificate);
    }
    if let (Some(cert), Some(key)) = (&tls.client_cert_path, &tls.client_key_path) {
        let mut pem = read("tls.client_cert_path", cert).await?;
        pem.push(b'\n');
        pem.extend(read("tls.client_key_path", key).await?);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
            "tls.client_cert_path, tls.client_key_path: not a PEM certificate and private key".to_string()
        })?;
        builder = builder.identity(identity);
    }
    builder.build().map_err(describe)
}

async fn read(field: &str, path: &std::path::Path) -> Result<Vec<u8>, String> {
    tokio::fs::read(path).await.map_err(|error| format!("{field}: {}: {error}", path.display()))
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
    }
}
