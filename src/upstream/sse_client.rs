//! The gateway's MCP client toward a remote server over the 2024-11-05 HTTP+SSE transport (contract section 9,
//! `transport: "sse"`).
//!
//! One event stream (a GET of the configured URL) carries every message of the server's; each message of the
//! gateway's is a POST to the endpoint the stream names first (its `endpoint` event). The JSON-RPC spoken over them is
//! exactly that of a process, so it is the same client ([`super::rpc`]: requests by id, the server's requests and
//! notifications to the call's relay, `notifications/cancelled` for an abandoned request): two in-memory pipes stand
//! in for the process's stdout and stdin, one fed by a task that reads the stream, one drained by a task that posts.
//!
//! - The endpoint must be on the stream's origin (scheme, host and port): a server naming another one would have the
//!   gateway send the entry's headers and token there.
//! - The stream ending, or a POST failing, ends the session: the calls waiting on it fail at once, and the next call
//!   opens a new session (this transport cannot resume one).
//! - What is read is bounded like a process's output: an event over `max_message_bytes` ends the session.

use std::sync::Arc;

use axum::http::{Method, header};
use http_body_util::Full;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::http_client::HttpRpcError;
use super::remote::{Endpoint, Target};
use super::rpc::RpcClient;
use super::sse::{Event, EventReader};
use super::transport::{LineReader, StreamHealth};
use crate::outbound::pooled::Answer;

/// Bytes the in-memory pipes hold before the writer waits.
const PIPE_BYTES: usize = 64 * 1024;

/// One open session with a remote SSE server. Dropping it closes the stream.
pub(crate) struct SseSession {
    pub client: RpcClient<DuplexStream>,
    pub health: watch::Receiver<StreamHealth>,
    tasks: [AbortHandle; 2],
}

impl Drop for SseSession {
    fn drop(&mut self) {
        self.tasks.iter().for_each(AbortHandle::abort);
    }
}

/// Opens the event stream at `url` and waits for the server to name its message endpoint. The MCP handshake is the
/// caller's, over the returned session's client.
pub(crate) async fn connect(
    endpoint: Endpoint,
    url: reqwest::Url,
    max_message_bytes: usize,
    label: Arc<str>,
) -> Result<SseSession, HttpRpcError> {
    let stream = Target::new(&url).map_err(HttpRpcError::Protocol)?;
    let mut response = endpoint
        .send(|| stream.request(Method::GET).header(header::ACCEPT, "text/event-stream").body(Full::default()))
        .await?;
    let status = response.status();
    if !status.is_success() {
        let body = crate::outbound::read_body(&mut response, 1024).await.unwrap_or_default();
        return Err(HttpRpcError::Status(status.as_u16(), String::from_utf8_lossy(&body).chars().take(200).collect()));
    }
    let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.starts_with("text/event-stream") {
        return Err(HttpRpcError::Protocol(format!("the URL answered {content_type:?}, not an event stream")));
    }
    let mut events = EventReader::new(max_message_bytes);
    let named = loop {
        match events.next(&mut response).await? {
            Some(Event { kind, data: Some(data) }) if kind == "endpoint" => break data,
            Some(_) => continue,
            None => return Err(HttpRpcError::Transport("the event stream ended before naming its endpoint".into())),
        }
    };
    let target = url
        .join(named.trim())
        .map_err(|e| HttpRpcError::Protocol(format!("the endpoint it named is not a URL: {e}")))?;
    if target.origin() != url.origin() {
        let elsewhere = target.origin().ascii_serialization();
        return Err(HttpRpcError::Protocol(format!("it named an endpoint on another origin ({elsewhere})")));
    }
    tracing::debug!(server = %label, "remote event stream open");

    let (rpc_read, feed) = tokio::io::duplex(PIPE_BYTES);
    let (rpc_write, outgoing) = tokio::io::duplex(PIPE_BYTES);
    let reading = tokio::spawn(read_stream(response, events, feed, label.clone()));
    let target = Target::new(&target).map_err(HttpRpcError::Protocol)?;
    let posting = tokio::spawn(post_messages(endpoint, target, outgoing, reading.abort_handle(), label.clone()));
    let (lines, health) = LineReader::new(rpc_read, max_message_bytes, label);
    let client = RpcClient::new(lines, rpc_write);
    Ok(SseSession { client, health, tasks: [reading.abort_handle(), posting.abort_handle()] })
}

/// Hands each `message` event of the stream to the client as one line; when the stream ends, `feed` is dropped and
/// the client's calls fail.
async fn read_stream(mut response: Answer, mut events: EventReader, mut feed: DuplexStream, label: Arc<str>) {
    loop {
        match events.next(&mut response).await {
            Ok(Some(Event { kind, data: Some(data) })) if kind == "message" => {
                // A raw line break can only be whitespace between JSON tokens (inside strings it is escaped).
                let mut line = data.replace(['\r', '\n'], " ");
                line.push('\n');
                if feed.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                tracing::info!(server = %label, "the remote server closed its event stream");
                return;
            }
            Err(error) => {
                tracing::warn!(server = %label, %error, "the remote server's event stream failed");
                return;
            }
        }
    }
}

/// Posts each line the client writes, in order; a message the server does not take ends the session (the stream is
/// stopped, so the calls waiting fail instead of waiting for answers that will not come).
async fn post_messages(
    endpoint: Endpoint,
    target: Target,
    outgoing: DuplexStream,
    reading: AbortHandle,
    label: Arc<str>,
) {
    let mut lines = BufReader::new(outgoing).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = bytes::Bytes::from(line);
        let posted = endpoint
            .send(|| {
                target
                    .request(Method::POST)
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Full::new(line.clone()))
            })
            .await;
        let refused = match posted {
            Ok(answer) if answer.status().is_success() => continue,
            Ok(answer) => HttpRpcError::Status(answer.status().as_u16(), String::new()).to_string(),
            Err(error) => error.to_string(),
        };
        tracing::warn!(server = %label, error = %refused, "the remote server did not take a message; session ended");
        break;
    }
    reading.abort();
}
