//! A session's `GET` stream (the server-to-client stream of the revisions with `initialize`), answered by the session
//! layer from the session's own outbox (`gateway/sessions/outbox.rs`) rather than by the protocol layer's per-session
//! worker: the stream is served, and told what changes, whether or not rmcp has a worker for the session, so a
//! session whose client holds its stream open still goes dormant (`limits.session_dormant_seconds`).
//!
//! The session layer has checked the session id against the caller's key (404 otherwise) before [`answer`]. The stream
//! then answers as rmcp did: `text/event-stream`, a first event with an id and `retry: 3000` (SEP-1699's priming
//! event), a `:` comment after 15 s with nothing to send, one stream per session (a second gets 409
//! `STREAM_ALREADY_OPEN` while the first is open), `Last-Event-ID` resuming after the event it names while the
//! outbox still keeps what came after (an id that is not one of the session's resumes nothing). The stream ends when
//! its session ends (closed, idle, or the gateway stopping).
//!
//! What rmcp still answers ([`wanted`] says no, and the request goes on as any other of the session): a `GET` whose
//! `Accept` lacks `text/event-stream` (406), whose `MCP-Protocol-Version` is unknown (400) or names a revision without
//! sessions, or whose `Last-Event-ID` names an event of a `POST`'s stream (`N/M`, rmcp's own ids).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::response::Response;
use rmcp::model::ProtocolVersion;

use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::sessions::NoStream;

const EVENT_STREAM: &str = "text/event-stream";

/// For a request of a session that asks for its stream as this layer serves it, the `Last-Event-ID` it resumes after
/// (if any); `None` for any other request (the protocol layer's to answer).
pub fn wanted(req: &Request) -> Option<Option<u64>> {
    if req.method() != Method::GET || !accepts_event_stream(req.headers()) {
        return None;
    }
    if let Some(version) = req.headers().get("mcp-protocol-version") {
        let version = version.to_str().ok()?;
        let known = ProtocolVersion::KNOWN_VERSIONS.iter().find(|known| known.as_str() == version)?;
        if !known.has_initialize() {
            return None;
        }
    }
    // rmcp's ids of a `POST`'s stream are `N/M`; the session's own are numbers; anything else resumes nothing.
    match req.headers().get("last-event-id").map(|value| value.to_str().unwrap_or("").trim()) {
        None => Some(None),
        Some(id) if id.contains('/') => None,
        Some(id) => Some(id.parse::<u64>().ok()),
    }
}

/// Whether `Accept` names `text/event-stream` (not with `q=0`), as rmcp requires of a `GET`.
fn accepts_event_stream(headers: &axum::http::HeaderMap) -> bool {
    let entries = headers.get_all(header::ACCEPT).into_iter().filter_map(|value| value.to_str().ok());
    entries.flat_map(|value| value.split(',')).any(|entry| {
        let mut parts = entry.split(';');
        let essence = parts.next().unwrap_or("").trim();
        let refused = parts.any(|parameter| {
            parameter.split_once('=').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("q") && value.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
            })
        });
        essence.eq_ignore_ascii_case(EVENT_STREAM) && !refused
    })
}

/// The stream of session `session` (its local id), resuming after `last_seen`; 409 while another is open, 404 when the
/// session ended since it was checked.
pub fn answer(ctx: &GatewayContext, session: &str, last_seen: Option<u64>) -> Response {
    match ctx.sessions.open_stream(session, last_seen) {
        Ok(stream) => {
            let mut response = Response::new(Body::new(stream));
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            // Proxies that buffer answers (nginx) would hold the events back.
            headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
            response
        }
        Err(NoStream::Open) => {
            let message = "this MCP session has a GET stream open already; one stream per session";
            GatewayError::new(ErrorCode::StreamAlreadyOpen, message).response(None)
        }
        Err(NoStream::Unknown) => GatewayError::new(ErrorCode::SessionNotFound, "session not found").response(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder().method(Method::GET).uri("/mcp/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap_or_default()
    }

    #[test]
    fn the_session_layer_serves_the_plain_stream_and_leaves_the_rest_to_rmcp() {
        let sse = ("accept", "text/event-stream");
        assert_eq!(wanted(&get(&[sse])), Some(None));
        assert_eq!(wanted(&get(&[("accept", "application/json, text/event-stream;q=0.5")])), Some(None));
        assert_eq!(wanted(&get(&[sse, ("mcp-protocol-version", "2025-06-18")])), Some(None));
        assert_eq!(wanted(&get(&[sse, ("last-event-id", "7")])), Some(Some(7)));
        assert_eq!(wanted(&get(&[sse, ("last-event-id", "-1")])), Some(None), "not one of the session's ids");
        // rmcp's answers: 406, 400, 405, and the resumption of a POST's stream.
        assert_eq!(wanted(&get(&[("accept", "application/json")])), None);
        assert_eq!(wanted(&get(&[("accept", "text/event-stream;q=0")])), None);
        assert_eq!(wanted(&get(&[sse, ("mcp-protocol-version", "1999-01-01")])), None);
        assert_eq!(wanted(&get(&[sse, ("mcp-protocol-version", "2026-07-28")])), None);
        assert_eq!(wanted(&get(&[sse, ("last-event-id", "3/1")])), None);
        let post = Request::builder().method(Method::POST).header("accept", EVENT_STREAM).body(Body::empty());
        assert_eq!(post.ok().and_then(|req| wanted(&req)), None);
    }
}
