//! Who is calling, decided once per request for both fronts.
//!
//! - [`identity`]: credentials as a client presents them, resolved against a snapshot into an [`Identity`]
//!   (provider `local_apikey`: the config file's `apikeys`; provider `gw`: a remote service, [`remote`]), cached per
//!   snapshot by key digest.
//! - [`http`]: what an HTTP request presents (`Authorization: Bearer`, the project and user headers) and the
//!   `Host`/`Origin` checks that protect a local gateway from DNS rebinding.
//!
//! The gateway's admission step (`gateway/middleware/admission.rs`) runs these under `auth_timeout` and applies the
//! key's rate limit.
//! - [`oauth`]: provider `oauth` (contract section 10), clients' JWTs verified ([`jwt`]) against the issuer's keys
//!   ([`jwks`]), the gateway as an OAuth resource server.

pub mod http;
pub mod identity;
pub mod jwks;
pub mod jwt;
pub mod oauth;
pub mod remote;

pub use identity::{AuthFailure, Credentials, GatewayConfigCache, Identity, RemoteAuthCache, authenticate};
