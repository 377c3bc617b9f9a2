//! The rules for a server entry's `config` (contract sections 2 and 9): a local server names a `command`, a remote
//! one a `url` (`http` or `https`) with its `transport`, `headers` and `tls`; nothing of one kind on the other.

use super::decode::Problems;
use super::model::{SSE, STREAMABLE_HTTP, ServerCommand};

/// The values of a remote server's `protocol_version`.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["auto", "2025-11-25", "2026-07-28"];

/// Headers the gateway sets itself on every request to a remote server.
const RESERVED_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "transfer-encoding",
    "mcp-method",
    "mcp-name",
];

/// Checks `config` (at `path`, as `mcp_configs.<id>.mcp_config[i].config`).
pub fn check(config: &ServerCommand, path: &str, problems: &mut Problems) {
    let Some(url) = &config.url else {
        for (field, set) in [
            ("transport", config.transport.is_some()),
            ("protocol_version", config.protocol_version.is_some()),
            ("headers", config.headers.is_some()),
            ("tls", config.tls.is_some()),
        ] {
            if set {
                problems.push(format!("{path}.{field}: only for a remote server (one with a url)"));
            }
        }
        return;
    };
    if !config.command.is_empty() {
        problems.push(format!("{path}: give either command (a local server) or url (a remote server), not both"));
    }
    for (field, set) in [
        ("args", !config.args.is_empty()),
        ("env", config.env.is_some()),
        ("inherit_env", config.inherit_env.is_some()),
    ] {
        if set {
            problems.push(format!("{path}.{field}: only for a local server (one with a command)"));
        }
    }
    if let Err(why) = check_url(url) {
        problems.push(format!("{path}.url: {why}"));
    }
    if let Some(transport) = &config.transport
        && ![STREAMABLE_HTTP, SSE].contains(&transport.as_str())
    {
        problems.push(format!("{path}.transport: must be \"streamable_http\" or \"sse\", found {transport:?}"));
    }
    if let Some(version) = &config.protocol_version {
        if !PROTOCOL_VERSIONS.contains(&version.as_str()) {
            problems.push(format!(
                "{path}.protocol_version: must be \"auto\", \"2025-11-25\" or \"2026-07-28\", found {version:?}"
            ));
        } else if config.transport.as_deref() == Some(SSE) {
            problems.push(format!("{path}.protocol_version: only for a streamable HTTP server (sse is 2024-11-05)"));
        }
    }
    for (name, value) in config.headers.iter().flatten() {
        let header = format!("{path}.headers.{name}");
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.push(format!("{header}: not a valid header name"));
        } else if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            problems.push(format!("{header}: set by the gateway itself"));
        }
        // The value is never shown: it may be a secret.
        if axum::http::HeaderValue::from_str(value).is_err() {
            problems.push(format!("{header}: the value is not a valid header value"));
        }
    }
    if let Some(tls) = &config.tls
        && tls.client_cert_path.is_some() != tls.client_key_path.is_some()
    {
        problems.push(format!("{path}.tls: client_cert_path and client_key_path go together (mutual TLS)"));
    }
}

/// A remote server's URL: `http://` or `https://` with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("must be an http:// or https:// URL, found {url:?}"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{url:?} names no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::TlsConfig;
    use indexmap::IndexMap;

    fn remote(url: &str) -> ServerCommand {
        ServerCommand { url: Some(url.to_string()), ..ServerCommand::default() }
    }

    fn problems(config: &ServerCommand) -> Vec<String> {
        let mut found = Problems::new();
        check(config, "c", &mut found);
        found
    }

    #[test]
    fn remote_servers_need_an_http_url_and_nothing_of_a_local_one() {
        assert!(problems(&remote("https://mcp.example.com/mcp")).is_empty());
        assert!(problems(&remote("http://mcp.default.svc.cluster.local:8080/mcp")).is_empty());
        assert!(problems(&remote("ftp://example.com/mcp"))[0].starts_with("c.url: must be an http:// or https:// URL"));
        assert!(problems(&remote("not a url"))[0].starts_with("c.url: \"not a url\" is not a URL"));
        let mut both = remote("https://x.example/mcp");
        both.command = "npx".into();
        both.env = Some(IndexMap::new());
        assert_eq!(problems(&both).len(), 2, "{:?}", problems(&both));
        let mut transport = remote("https://x.example/mcp");
        transport.transport = Some("websocket".into());
        assert!(problems(&transport)[0].contains("\"streamable_http\" or \"sse\""));
    }

    #[test]
    fn a_protocol_version_is_one_of_three_and_only_for_streamable_http() {
        let mut config = remote("https://x.example/mcp");
        for version in PROTOCOL_VERSIONS {
            config.protocol_version = Some(version.into());
            assert!(problems(&config).is_empty(), "{version}");
        }
        config.protocol_version = Some("2026-07-29".into());
        assert!(problems(&config)[0].starts_with("c.protocol_version: must be \"auto\""), "{:?}", problems(&config));
        config.protocol_version = Some("2026-07-28".into());
        config.transport = Some("sse".into());
        assert!(problems(&config)[0].contains("only for a streamable HTTP server"), "{:?}", problems(&config));
        let local =
            ServerCommand { command: "npx".into(), protocol_version: Some("auto".into()), ..ServerCommand::default() };
        assert!(
            problems(&local)[0].starts_with("c.protocol_version: only for a remote server"),
            "{:?}",
            problems(&local)
        );
    }

    #[test]
    fn headers_must_be_valid_and_not_the_gateways_own_and_tls_comes_in_pairs() {
        let mut config = remote("https://x.example/mcp");
        config.headers = Some(IndexMap::from([
            ("X-Api-Key".to_string(), "secret-value".to_string()),
            ("Mcp-Session-Id".to_string(), "s".to_string()),
            ("bad name".to_string(), "v".to_string()),
            ("X-Line".to_string(), "a\nb".to_string()),
        ]));
        config.tls = Some(TlsConfig { client_cert_path: Some("c.pem".into()), ..TlsConfig::default() });
        let found = problems(&config);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found.iter().all(|p| !p.contains("secret-value")), "values are never shown: {found:?}");
        let local = ServerCommand { command: "npx".into(), transport: Some("sse".into()), ..ServerCommand::default() };
        assert_eq!(problems(&local), ["c.transport: only for a remote server (one with a url)"]);
    }
}
