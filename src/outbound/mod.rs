//! Outbound HTTPS: the one place that builds HTTP clients for the services the gateway calls (the remote guardrail API,
//! the moderation API, the remote auth service, OAuth token endpoints).
//!
//! TLS is rustls with the `ring` provider (no C toolchain needed, unlike aws-lc). The provider is installed once per
//! process, before the first client is built; every constructor here does it, so callers never have to remember.

pub mod json_api;
pub mod pooled;
pub mod token_endpoint;

use std::sync::Once;
use std::time::Duration;

static PROVIDER: Once = Once::new();

/// Installs rustls' `ring` provider as the process default (idempotent; a provider installed earlier is kept).
pub fn ensure_crypto_provider() {
    PROVIDER.call_once(|| {
        // An error only means another provider is already the default, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client builder with the gateway's defaults: a total timeout per request, no redirects (a guardrail or token
/// endpoint that redirects is misconfigured, and following it could send credentials elsewhere), a short connect
/// timeout, and pooled keep-alive connections.
pub fn client_builder(timeout: Duration) -> reqwest::ClientBuilder {
    ensure_crypto_provider();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("mcpgw/", env!("CARGO_PKG_VERSION")))
}

/// A ready client with [`client_builder`]'s defaults.
pub fn client(timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    client_builder(timeout).build()
}

/// An HTTP error with its causes (reqwest's own text is often just "error sending request"), without the URL (its
/// query may hold a secret).
pub fn describe(error: reqwest::Error) -> String {
    with_causes(&error.without_url())
}

/// An error's text followed by its causes' (`a: b: c`).
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Why an answer's body could not be read whole.
#[derive(Debug)]
pub enum BodyReadError<E = reqwest::Error> {
    /// The connection failed or timed out while reading.
    Transport(E),
    /// The body is longer than the limit; reading stopped there.
    TooLarge(usize),
}

/// An answer whose body is read piece by piece: reqwest's (the services the gateway calls) and hyper's (the remote
/// MCP servers, [`pooled`]).
pub trait Chunks {
    type Error;
    /// The next piece; `None` at the end.
    fn next_chunk(&mut self) -> impl std::future::Future<Output = Result<Option<bytes::Bytes>, Self::Error>> + Send;
}

impl Chunks for reqwest::Response {
    type Error = reqwest::Error;
    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>, reqwest::Error> {
        self.chunk().await
    }
}

impl Chunks for pooled::Answer {
    type Error = hyper::Error;
    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>, hyper::Error> {
        pooled::chunk(self).await
    }
}

/// Reads an answer's body, at most `limit` bytes: a remote service never makes the gateway buffer more than that.
pub async fn read_body<C: Chunks>(response: &mut C, limit: usize) -> Result<Vec<u8>, BodyReadError<C::Error>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.next_chunk().await.map_err(BodyReadError::Transport)? {
        if body.len() + chunk.len() > limit {
            return Err(BodyReadError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_client_twice() {
        assert!(client(Duration::from_secs(1)).is_ok());
        assert!(client(Duration::from_secs(2)).is_ok());
    }
}
