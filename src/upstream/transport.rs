//! The line transport between rmcp's client and one upstream process: newline-delimited JSON-RPC over the child's
//! stdin and stdout, like rmcp's own stdio transport, plus a report of what went wrong on the way in.
//!
//! rmcp's transport silently skips lines that are not JSON, so a server that answers with garbage would leave the call
//! waiting for its timeout. This one counts such lines (and lines over the size limit, which it drops without
//! buffering them) in a [`StreamHealth`] that the pool watches while a call is in flight: a change during a call fails
//! that call at once. Garbage outside a call (a start-up banner, say) is only logged. Lines are read with a bounded
//! buffer, so a server that never writes a newline cannot make us buffer more than the limit.

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{Mutex, watch};

/// How many bytes of a bad line are kept for logs and error messages.
const PREVIEW_BYTES: usize = 200;

/// What the transport has seen on the server's stdout that was not a usable message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamHealth {
    /// Lines that are not JSON-RPC messages.
    pub invalid_lines: u64,
    /// Lines longer than the message limit (dropped unread).
    pub oversized_lines: u64,
    /// The start of the latest invalid line.
    pub last_invalid: String,
}

/// rmcp's [`Transport`] over a child's stdout (read) and stdin (write).
pub(crate) struct LineTransport<R = ChildStdout, W = ChildStdin> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Set while skipping the rest of an oversized line; kept here because `receive` can be cancelled mid-line.
    discarding: bool,
    max_line: usize,
    write: Arc<Mutex<Option<W>>>,
    health: watch::Sender<StreamHealth>,
    label: Arc<str>,
}

impl<R, W> LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// A transport reading at most `max_line` bytes per message; `label` names the server in logs.
    pub fn new(read: R, write: W, max_line: usize, label: Arc<str>) -> (Self, watch::Receiver<StreamHealth>) {
        let (health, health_rx) = watch::channel(StreamHealth::default());
        let transport = LineTransport {
            read: BufReader::with_capacity(64 * 1024, read),
            line: Vec::new(),
            discarding: false,
            max_line,
            write: Arc::new(Mutex::new(Some(write))),
            health,
            label,
        };
        (transport, health_rx)
    }

    /// Reads one whole line into `self.line` (without its newline), never holding more than `max_line` bytes.
    /// Returns `None` at end of stream or on a read error, `Some(false)` for an oversized (dropped) line.
    async fn read_line(&mut self) -> Option<bool> {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(bytes) => bytes,
                Err(error) => {
                    tracing::debug!(server = %self.label, %error, "reading the upstream's stdout failed");
                    return None;
                }
            };
            if available.is_empty() {
                return None;
            }
            let newline = available.iter().position(|byte| *byte == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let mut oversized = false;
            if !self.discarding {
                if self.line.len().saturating_add(take) > self.max_line.saturating_add(1) {
                    self.line.clear();
                    self.discarding = true;
                    oversized = true;
                } else {
                    self.line.extend_from_slice(&available[..take]);
                }
            }
            self.read.consume(take);
            if oversized {
                self.health.send_modify(|health| health.oversized_lines += 1);
                tracing::warn!(server = %self.label, limit = self.max_line, "upstream message over the size limit dropped");
            }
            if newline.is_some() {
                let was_discarding = std::mem::replace(&mut self.discarding, false);
                if was_discarding {
                    self.line.clear();
                    return Some(false);
                }
                self.line.pop();
                if self.line.last() == Some(&b'\r') {
                    self.line.pop();
                }
                return Some(true);
            }
        }
    }

    /// Records a line that is not a JSON-RPC message.
    fn report_invalid(&self, error: &serde_json::Error) {
        let preview = preview(&self.line);
        tracing::warn!(server = %self.label, %error, line = %preview, "upstream wrote a line that is not MCP on stdout");
        self.health.send_modify(|health| {
            health.invalid_lines += 1;
            health.last_invalid = preview;
        });
    }
}

impl<R, W> Transport<RoleClient> for LineTransport<R, W>
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let mut guard = write.lock().await;
            let Some(stdin) = guard.as_mut() else {
                return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "transport closed"));
            };
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read_line().await? {
                false => continue,
                true if self.line.iter().all(u8::is_ascii_whitespace) => {}
                true => match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(strip_bom(&self.line)) {
                    Ok(message) => {
                        self.line.clear();
                        return Some(message);
                    }
                    Err(error) if is_unknown_notification(strip_bom(&self.line)) => {
                        tracing::debug!(server = %self.label, %error, "ignoring an unknown notification from upstream");
                    }
                    Err(error) => self.report_invalid(&error),
                },
            }
            self.line.clear();
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing stdin is the MCP way to ask a stdio server to exit.
        if let Some(mut stdin) = self.write.lock().await.take() {
            stdin.shutdown().await?;
        }
        Ok(())
    }
}

/// A notification (a `method` without an `id`) that rmcp has no type for; rmcp skips these for compatibility.
fn is_unknown_notification(line: &[u8]) -> bool {
    match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(object)) => object.contains_key("method") && !object.contains_key("id"),
        _ => false,
    }
}

fn strip_bom(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(line)
}

/// The start of a line as text, for logs and error messages.
fn preview(line: &[u8]) -> String {
    let end = line.len().min(PREVIEW_BYTES);
    let mut text = String::from_utf8_lossy(&line[..end]).into_owned();
    if line.len() > end {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncWriteExt, duplex};

    fn transport(
        max_line: usize,
    ) -> (LineTransport<tokio::io::DuplexStream, tokio::io::Sink>, watch::Receiver<StreamHealth>, tokio::io::DuplexStream)
    {
        let (server_out, client_in) = duplex(1024);
        let (transport, health) = LineTransport::new(client_in, tokio::io::sink(), max_line, Arc::from("test"));
        (transport, health, server_out)
    }

    const PONG: &str = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;

    #[tokio::test]
    async fn valid_lines_become_messages_and_garbage_is_counted_not_returned() {
        let (mut transport, health, mut server) = transport(1024);
        server.write_all(format!("not json at all\n\n{PONG}\r\n").as_bytes()).await.unwrap();
        let message = transport.receive().await;
        assert!(message.is_some());
        let health = health.borrow().clone();
        assert_eq!(health.invalid_lines, 1);
        assert_eq!(health.last_invalid, "not json at all");
    }

    #[tokio::test]
    async fn oversized_lines_are_dropped_and_counted_and_the_stream_resyncs() {
        let (mut transport, health, mut server) = transport(64);
        let long = "x".repeat(5000);
        let writer = tokio::spawn(async move {
            server.write_all(format!("{long}\n{PONG}\n").as_bytes()).await.unwrap();
            server
        });
        assert!(transport.receive().await.is_some());
        assert_eq!(health.borrow().oversized_lines, 1);
        assert_eq!(health.borrow().invalid_lines, 0);
        assert!(transport.line.capacity() <= 1024, "the long line was buffered");
        drop(writer.await.unwrap());
        assert!(transport.receive().await.is_none(), "end of stream");
    }

    #[tokio::test]
    async fn unknown_notifications_are_ignored_quietly() {
        let (mut transport, health, mut server) = transport(1024);
        let line = r#"{"jsonrpc":"2.0","method":"$/lsp/thing","params":{"a":1}}"#;
        server.write_all(format!("{line}\n{PONG}\n").as_bytes()).await.unwrap();
        assert!(transport.receive().await.is_some());
        assert_eq!(health.borrow().invalid_lines, 0);
    }

    #[test]
    fn previews_are_cut() {
        assert_eq!(preview(b"abc"), "abc");
        assert_eq!(preview(&[b'y'; 300]).chars().count(), PREVIEW_BYTES + 1);
    }
}
