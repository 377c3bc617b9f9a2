//! The reading half of the connection to one upstream process: newline-delimited JSON-RPC from the child's stdout,
//! plus a report of what went wrong on the way in.
//!
//! A server that answers with garbage must not leave a call waiting for its timeout, so lines that are not JSON-RPC
//! are counted (and lines over the size limit dropped without buffering them) in a [`StreamHealth`] that the pool
//! watches while a call is in flight: a change during a call fails that call at once. Garbage outside a call (a
//! start-up banner, say) is only logged. Lines are read with a bounded buffer, so a server that never writes a newline
//! cannot make us buffer more than the limit. `rpc.rs` reads through this and writes the other direction itself.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStdout;
use tokio::sync::watch;

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

/// What [`LineReader::next`] found.
#[derive(Debug)]
pub(crate) enum Line {
    /// A JSON value (whether it is a JSON-RPC message is for the caller to say, see [`LineReader::report_invalid`]).
    Message(Value),
    /// An empty line, or one that is not JSON (already counted and logged).
    Blank,
    /// A line over the size limit, dropped unread (already counted and logged).
    Oversized,
    /// End of stream, or a read error.
    End,
}

/// Lines from a child's stdout.
pub(crate) struct LineReader<R = ChildStdout> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Set while skipping the rest of an oversized line; kept here because a read can be cancelled mid-line.
    discarding: bool,
    max_line: usize,
    health: watch::Sender<StreamHealth>,
    label: Arc<str>,
}

impl<R> LineReader<R>
where
    R: tokio::io::AsyncRead + Unpin + Send,
{
    /// A reader of lines of at most `max_line` bytes; `label` names the server in logs.
    pub fn new(read: R, max_line: usize, label: Arc<str>) -> (Self, watch::Receiver<StreamHealth>) {
        let (health, health_rx) = watch::channel(StreamHealth::default());
        let reader = LineReader {
            read: BufReader::with_capacity(64 * 1024, read),
            line: Vec::new(),
            discarding: false,
            max_line,
            health,
            label,
        };
        (reader, health_rx)
    }

    /// The next line, parsed as JSON.
    pub async fn next(&mut self) -> Line {
        let line = match self.read_line().await {
            None => return Line::End,
            Some(false) => return Line::Oversized,
            Some(true) => std::mem::take(&mut self.line),
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            self.line = line;
            self.line.clear();
            return Line::Blank;
        }
        let parsed = serde_json::from_slice::<Value>(strip_bom(&line));
        let found = match parsed {
            Ok(value) => Line::Message(value),
            Err(error) => {
                self.report_invalid(&error.to_string(), &preview(&line));
                Line::Blank
            }
        };
        // Keep the buffer (and its capacity) for the next line.
        self.line = line;
        self.line.clear();
        found
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

    /// Records a line that is not a JSON-RPC message (`line` is the line or its start).
    pub fn report_invalid(&self, error: &str, line: &str) {
        let preview = preview(line.as_bytes());
        tracing::warn!(server = %self.label, %error, line = %preview, "upstream wrote a line that is not MCP on stdout");
        self.health.send_modify(|health| {
            health.invalid_lines += 1;
            health.last_invalid = preview;
        });
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

    fn reader(
        max_line: usize,
    ) -> (LineReader<tokio::io::DuplexStream>, watch::Receiver<StreamHealth>, tokio::io::DuplexStream) {
        let (server_out, client_in) = duplex(1024);
        let (reader, health) = LineReader::new(client_in, max_line, Arc::from("test"));
        (reader, health, server_out)
    }

    const PONG: &str = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;

    /// The next message, skipping blank and invalid lines.
    async fn next_message(reader: &mut LineReader<tokio::io::DuplexStream>) -> Option<Value> {
        loop {
            match reader.next().await {
                Line::Message(value) => return Some(value),
                Line::End => return None,
                Line::Blank | Line::Oversized => {}
            }
        }
    }

    #[tokio::test]
    async fn valid_lines_become_messages_and_garbage_is_counted_not_returned() {
        let (mut reader, health, mut server) = reader(1024);
        server.write_all(format!("not json at all\n\n\u{feff}{PONG}\r\n").as_bytes()).await.unwrap();
        let message = next_message(&mut reader).await;
        assert_eq!(message.unwrap()["id"], 1);
        let health = health.borrow().clone();
        assert_eq!(health.invalid_lines, 1);
        assert_eq!(health.last_invalid, "not json at all");
    }

    #[tokio::test]
    async fn oversized_lines_are_dropped_and_counted_and_the_stream_resyncs() {
        let (mut reader, health, mut server) = reader(64);
        let long = "x".repeat(5000);
        let writer = tokio::spawn(async move {
            server.write_all(format!("{long}\n{PONG}\n").as_bytes()).await.unwrap();
            server
        });
        assert!(next_message(&mut reader).await.is_some());
        assert_eq!(health.borrow().oversized_lines, 1);
        assert_eq!(health.borrow().invalid_lines, 0);
        assert!(reader.line.capacity() <= 1024, "the long line was buffered");
        drop(writer.await.unwrap());
        assert!(next_message(&mut reader).await.is_none(), "end of stream");
    }

    #[test]
    fn previews_are_cut() {
        assert_eq!(preview(b"abc"), "abc");
        assert_eq!(preview(&[b'y'; 300]).chars().count(), PREVIEW_BYTES + 1);
    }
}
