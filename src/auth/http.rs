//! What an HTTP request presents to the gateway, and where it may come from.
//!
//! - [`credentials`]: `Authorization: Bearer <gateway key>`, plus the optional `X-GW-Project-Id` / `X-GW-User-Id`
//!   (also accepted as `project_id` / `user_id`).
//! - [`check_host_and_origin`]: `Host` must be in `gw_allowed_hosts` (`*` allows any) and `Origin`, when present, a
//!   loopback origin or in `gw_allowed_origins`. These protect local gateways from DNS rebinding, whoever the caller
//!   claims to be, so the front door runs them before anything else.

use axum::http::{HeaderMap, HeaderName, header};

use super::identity::{AuthFailure, Credentials};
use crate::config::client_oauth::ClientOAuth;
use crate::config::settings::Settings;
use crate::error::{ErrorCode, GatewayError};

/// Splits a `Host` value into host and optional port (`[::1]:8000` gives `::1`).
fn split_host(authority: &str) -> (&str, Option<&str>) {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host, after.strip_prefix(':'));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (authority, None),
    }
}

/// Whether a `Host` header value is allowed by `allowed` (names, `name:port`, or `*`).
pub fn host_allowed(host_header: Option<&str>, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*") {
        return true;
    }
    let Some(authority) = host_header else { return false };
    let (host, port) = split_host(authority.trim());
    allowed.iter().any(|entry| {
        let (a_host, a_port) = split_host(entry);
        a_host.eq_ignore_ascii_case(host) && (a_port.is_none() || a_port == port)
    })
}

/// Whether an `Origin` header value is allowed: loopback origins always, others when listed (or `*`).
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim().trim_end_matches('/');
    if allowed.iter().any(|a| a == "*" || a.trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    let (host, _) = split_host(rest);
    matches!(scheme, "http" | "https") && matches!(host, "localhost" | "127.0.0.1" | "::1")
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The gateway's public base URL for the `oauth` provider's metadata: `public_url`, or else built from the request's
/// `Host` over `http`, as the gateway itself serves. `X-Forwarded-Host` and `X-Forwarded-Proto` (the first value of
/// each: the hop nearest the client) count only with `trust_forwarded_headers`, for a gateway behind a proxy that sets
/// them: any client can send them, and the URL they would build is where clients are told to send their tokens.
pub fn public_base(config: &ClientOAuth, headers: &HeaderMap) -> String {
    if let Some(base) = &config.public_url {
        return base.clone();
    }
    request_base(config.trust_forwarded_headers, headers)
}

/// The base URL the request was sent to: its `Host` over `http`, or, when `trust_forwarded` (a proxy in front sets
/// them), the first `X-Forwarded-Host` and `X-Forwarded-Proto`. [`public_base`] for the gateway listener, and the
/// console's OAuth `redirect_uri` on the admin listener (`console/oauth.rs`).
pub fn request_base(trust_forwarded: bool, headers: &HeaderMap) -> String {
    let forwarded = |name: &str| {
        let first = header_str(headers, name)?.split(',').next()?.trim();
        (trust_forwarded && !first.is_empty()).then_some(first)
    };
    let host = forwarded("x-forwarded-host")
        .or_else(|| header_str(headers, "host"))
        .filter(|h| h.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'/' | b'"' | b'\\' | b'?' | b'#' | b'@')))
        .unwrap_or("localhost");
    let https = forwarded("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"));
    format!("{}://{host}", if https { "https" } else { "http" })
}

/// The `WWW-Authenticate` value of a refused request under the `oauth` provider (contract section 10): where the
/// protected resource metadata is, and `error="invalid_token"` when a token was sent and failed, or
/// `error="insufficient_scope"` (with the scopes needed) when it lacked a required scope.
pub fn oauth_challenge(
    config: &ClientOAuth,
    headers: &HeaderMap,
    token_sent: bool,
    insufficient_scope: bool,
) -> String {
    let metadata = super::oauth::metadata_url(&public_base(config, headers));
    let mut challenge = format!("Bearer resource_metadata=\"{metadata}\"");
    if insufficient_scope {
        challenge.push_str(&format!(", error=\"insufficient_scope\", scope=\"{}\"", config.required_scopes.join(" ")));
    } else if token_sent {
        challenge.push_str(", error=\"invalid_token\"");
    }
    challenge
}

/// The credentials of an HTTP request.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials, AuthFailure> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(AuthFailure::new("missing Authorization header: send Authorization: Bearer <gateway key>"));
    };
    let value = value.to_str().map_err(|_| AuthFailure::new("invalid Authorization header"))?;
    let key = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| AuthFailure::new("the Authorization header must be Bearer <gateway key>"))?;
    // By `HeaderName`: a lookup by text parses the name again each time (per call, four of them).
    const PROJECT: [HeaderName; 2] =
        [HeaderName::from_static("x-gw-project-id"), HeaderName::from_static("project_id")];
    const USER: [HeaderName; 2] = [HeaderName::from_static("x-gw-user-id"), HeaderName::from_static("user_id")];
    let first = |names: &[HeaderName; 2]| names.iter().find_map(|name| headers.get(name)?.to_str().ok());
    let (project_id, user_id) = (first(&PROJECT), first(&USER));
    Ok(Credentials {
        key: key.trim().to_string(),
        project_id: project_id.map(str::to_string),
        user_id: user_id.map(str::to_string),
    })
}

/// Headers that decide who a request is from or where it may go: sent more than once, two readers could take
/// different ones, so such a request is refused (400) before any of them is read.
pub static SINGLE_HEADERS: [HeaderName; 4] =
    [header::AUTHORIZATION, header::HOST, header::ORIGIN, HeaderName::from_static("mcp-session-id")];

/// The first of [`SINGLE_HEADERS`] that `headers` carries more than once (looked up by `HeaderName`: a lookup by
/// text parses the name again each time).
pub fn repeated_header(headers: &HeaderMap) -> Option<&'static str> {
    SINGLE_HEADERS.iter().find(|name| headers.get_all(*name).iter().nth(1).is_some()).map(HeaderName::as_str)
}

/// The `Host` and `Origin` checks under `settings` (`HOST_NOT_ALLOWED`, `ORIGIN_NOT_ALLOWED`), after refusing a
/// repeated [`SINGLE_HEADERS`] header (`INVALID_REQUEST`).
pub fn check_host_and_origin(headers: &HeaderMap, settings: &Settings) -> Result<(), GatewayError> {
    if let Some(name) = repeated_header(headers) {
        return Err(GatewayError::new(ErrorCode::InvalidRequest, format!("the {name} header is sent more than once")));
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if !host_allowed(host, &settings.allowed_hosts) {
        let shown = host.unwrap_or("(none)");
        let message = format!("Host {shown:?} is not in gw_allowed_hosts");
        return Err(GatewayError::new(ErrorCode::HostNotAllowed, message));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, &settings.allowed_origins) {
            return Err(GatewayError::new(ErrorCode::OriginNotAllowed, format!("Origin {origin:?} is not allowed")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hosts() {
        let allowed = list(&["localhost", "127.0.0.1", "::1", "gw.example:8000"]);
        assert!(host_allowed(Some("localhost:8000"), &allowed));
        assert!(host_allowed(Some("LOCALHOST"), &allowed));
        assert!(host_allowed(Some("[::1]:8000"), &allowed));
        assert!(host_allowed(Some("gw.example:8000"), &allowed));
        assert!(!host_allowed(Some("gw.example:9000"), &allowed));
        assert!(!host_allowed(Some("evil.example"), &allowed));
        assert!(!host_allowed(None, &allowed));
        assert!(host_allowed(Some("10.0.0.7:8000"), &list(&["*"])));
    }

    #[test]
    fn origins() {
        let allowed = list(&["https://app.example"]);
        assert!(origin_allowed("http://localhost:3000", &allowed));
        assert!(origin_allowed("http://127.0.0.1", &allowed));
        assert!(origin_allowed("https://app.example/", &allowed));
        assert!(!origin_allowed("https://evil.example", &allowed));
        assert!(!origin_allowed("null", &allowed));
        assert!(!origin_allowed("http://localhost.evil.example", &allowed));
    }

    #[test]
    fn repeated_security_headers() {
        let mut headers = HeaderMap::new();
        headers.append(header::HOST, HeaderValue::from_static("localhost"));
        headers.append("x-other", HeaderValue::from_static("1"));
        headers.append("x-other", HeaderValue::from_static("2"));
        assert_eq!(repeated_header(&headers), None);
        headers.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        headers.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        assert_eq!(repeated_header(&headers), Some("authorization"));
    }

    #[test]
    fn credentials_from_headers() {
        let mut headers = HeaderMap::new();
        assert!(credentials(&headers).is_err());
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k1"));
        headers.insert("project_id", HeaderValue::from_static("p1"));
        let creds = credentials(&headers).unwrap();
        assert_eq!((creds.key.as_str(), creds.project_id.as_deref()), ("k1", Some("p1")));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic k1"));
        assert!(credentials(&headers).is_err());
    }
}
