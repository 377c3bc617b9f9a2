//! Server-sent events read from a remote server's answer, bounded: both remote transports use them (a streamable
//! HTTP answer may be an event stream; the `sse` transport's messages all come as events).

use super::http_client::HttpRpcError;

/// One event: its type (`message` when it names none) and its data lines joined (`None` without any, as for a bare
/// `retry:` hint).
#[derive(Debug, PartialEq)]
pub(crate) struct Event {
    pub kind: String,
    pub data: Option<String>,
}

/// Reads events from an answer, never buffering more than `limit` bytes for one.
pub(crate) struct EventReader {
    buffer: Vec<u8>,
    limit: usize,
}

impl EventReader {
    pub fn new(limit: usize) -> EventReader {
        EventReader { buffer: Vec::new(), limit }
    }

    /// The next event; `None` when the stream ended.
    pub async fn next(
        &mut self,
        response: &mut crate::outbound::pooled::Answer,
    ) -> Result<Option<Event>, HttpRpcError> {
        loop {
            if let Some((lines, end)) = event_end(&self.buffer) {
                let event = parse(&self.buffer[..lines]);
                self.buffer.drain(..end);
                return Ok(Some(event));
            }
            let chunk = crate::outbound::pooled::chunk(response).await;
            match chunk.map_err(|e| HttpRpcError::Transport(crate::outbound::pooled::describe(&e)))? {
                Some(chunk) => {
                    if self.buffer.len() + chunk.len() > self.limit {
                        return Err(HttpRpcError::Protocol(format!(
                            "a message over the limit of {} bytes",
                            self.limit
                        )));
                    }
                    self.buffer.extend_from_slice(&chunk);
                }
                None => return Ok(None),
            }
        }
    }
}

/// Where the first complete event of `buffer` ends: (end of its lines, end with the blank line).
fn event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|at| (at, at + 2));
    let crlf = buffer.windows(4).position(|w| w == b"\r\n\r\n").map(|at| (at, at + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The fields of one event's lines (`id:`, `retry:` and comments are of no use here).
fn parse(lines: &[u8]) -> Event {
    let text = String::from_utf8_lossy(lines);
    let mut kind = String::from("message");
    let mut data: Option<String> = None;
    for line in text.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => kind = value.to_string(),
            "data" => match &mut data {
                Some(joined) => {
                    joined.push('\n');
                    joined.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            _ => {}
        }
    }
    Event { kind, data }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_at_blank_lines_and_their_data_joined() {
        let buffer = b"id: 1\ndata: {\"a\":1}\n\nretry: 3000\n\nevent: endpoint\r\ndata: /m?s=1\r\n\r\n";
        let (lines, end) = event_end(buffer).unwrap();
        assert_eq!(parse(&buffer[..lines]), Event { kind: "message".into(), data: Some("{\"a\":1}".into()) });
        let rest = &buffer[end..];
        let (lines, end2) = event_end(rest).unwrap();
        assert_eq!(parse(&rest[..lines]).data, None, "a retry hint carries no message");
        let last = &rest[end2..];
        let (lines, _) = event_end(last).unwrap();
        assert_eq!(parse(&last[..lines]), Event { kind: "endpoint".into(), data: Some("/m?s=1".into()) });
        assert_eq!(parse(b"data: a\ndata: b\n: comment").data, Some("a\nb".into()));
        assert_eq!(parse(b"data:x").data, Some("x".into()));
    }
}
