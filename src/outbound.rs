//! Outbound HTTPS: the one place that builds HTTP clients for the services the gateway calls (the remote guardrail API,
//! the moderation API, the remote auth service, OAuth token endpoints).
//!
//! TLS is rustls with the `ring` provider (no C toolchain needed, unlike aws-lc). The provider is installed once per
//! process, before the first client is built; every constructor here does it, so callers never have to remember.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_client_twice() {
        assert!(client(Duration::from_secs(1)).is_ok());
        assert!(client(Duration::from_secs(2)).is_ok());
    }
}
