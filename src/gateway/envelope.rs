//! One tool-result envelope for every route: a tool's answer object (contract section 4) becomes a `CallToolResult`
//! whose `structuredContent` is the object and whose one text content is the same object as JSON, with `isError`
//! unless the answer's `status` is `success`.
//!
//! rmcp's handler returns [`tool_result`]; the fast route ([`super::fast_path`]) writes the same value as the
//! JSON-RPC response with [`answer_body`], so both routes answer byte for byte alike.
//!
//! [`answer_body`] bounds the memory of a large answer (contract 13: one request holds at most a few times
//! `max_response_bytes`): the answer's JSON is written once (a small one into a buffer that grows to fit, a larger one
//! into a buffer of its final size, measured first), and the value is dropped;
//! an answer of 256 KiB or more is then sent as a stream of known length, the JSON escaped piece by piece as the client
//! reads (the text content) and then as it is (`structuredContent`). So the peak is the value and its JSON, then the
//! JSON alone, never the whole body (which holds the JSON twice).

use axum::body::Body;
use bytes::Bytes;
use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::Value;

/// An answer object as a tool result. `resultType` is `complete` (rmcp leaves it out for session peers).
pub fn tool_result(answer: Value) -> CallToolResult {
    let ok = answer.get("status").and_then(Value::as_str) == Some("success");
    let text = vec![ContentBlock::text(answer.to_string())];
    let mut result = if ok { CallToolResult::success(text) } else { CallToolResult::error(text) };
    result.structured_content = Some(answer);
    result
}

/// Answers up to this size are written into a buffer that grows as they are written; larger ones are measured first.
const SMALL: usize = 16 * 1024;
/// The first capacity of that buffer: most answers fit. (A buffer of `SMALL` for every answer would be a medium-sized
/// block per call, and each worker thread of the allocator would keep pages of them.)
const FIRST: usize = 1024;

/// A writer into a buffer that refuses to grow it past `SMALL`.
struct Capped<'a>(&'a mut Vec<u8>);

impl std::io::Write for Capped<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + data.len() > SMALL {
            return Err(std::io::Error::other("full"));
        }
        self.0.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that only counts.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0 += data.len();
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn json_len(value: &(impl Serialize + ?Sized)) -> usize {
    let mut counted = Counted(0);
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

/// A writer that writes what it is given as the inside of a JSON string, escaped as serde_json escapes strings.
struct Escaping<'a>(&'a mut Vec<u8>);

impl std::io::Write for Escaping<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let mut start = 0;
        for (at, byte) in data.iter().enumerate() {
            let escape: &[u8] = match byte {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0..0x20 => b"",
                _ => continue,
            };
            self.0.extend_from_slice(&data[start..at]);
            if escape.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                self.0.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(byte >> 4)],
                    HEX[usize::from(byte & 15)],
                ]);
            } else {
                self.0.extend_from_slice(escape);
            }
            start = at + 1;
        }
        self.0.extend_from_slice(&data[start..]);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How many bytes `byte` takes inside a JSON string, as [`Escaping`] writes it.
fn escaped_size(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
        0..0x20 => 6,
        _ => 1,
    }
}

/// Answers' JSON over this size are sent as a stream (see the module documentation).
const STREAM_FROM: usize = 256 * 1024;
/// The escaped text of a streamed answer goes out in pieces of this many bytes of JSON.
const PIECE: usize = 64 * 1024;

/// The JSON-RPC response for request `id` carrying `answer` as [`tool_result`] makes it: the same bytes as
/// serialising that `CallToolResult` (`resultType` only for the stateless revision, as rmcp does for session peers),
/// within the memory bound of the module documentation.
pub fn answer_body(id: &Value, answer: Value, stateless: bool) -> Body {
    let ok = answer.get("status").and_then(Value::as_str) == Some("success");
    let mut raw = Vec::with_capacity(FIRST);
    if serde_json::to_writer(Capped(&mut raw), &answer).is_err() {
        raw = Vec::with_capacity(json_len(&answer));
        let _ = serde_json::to_writer(&mut raw, &answer);
    }
    drop(answer);
    let mut head = Vec::with_capacity(json_len(id) + 96);
    head.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    let _ = serde_json::to_writer(&mut head, id);
    head.extend_from_slice(br#","result":{"#);
    if stateless {
        head.extend_from_slice(br#""resultType":"complete","#);
    }
    head.extend_from_slice(br#""content":[{"type":"text","text":""#);
    let middle: &'static [u8] = br#""}],"structuredContent":"#;
    let tail: &'static [u8] = if ok { br#","isError":false}}"# } else { br#","isError":true}}"# };
    if raw.len() < STREAM_FROM {
        let mut body = head;
        body.reserve(2 * raw.len() + middle.len() + tail.len());
        let _ = std::io::Write::write_all(&mut Escaping(&mut body), &raw);
        body.extend_from_slice(middle);
        body.extend_from_slice(&raw);
        body.extend_from_slice(tail);
        return Body::from(body);
    }
    let escaped: usize = raw.iter().map(|b| escaped_size(*b)).sum();
    let length = head.len() + escaped + middle.len() + raw.len() + tail.len();
    Body::new(Streamed {
        parts: [Bytes::from(head), Bytes::new(), Bytes::from_static(middle), Bytes::new(), Bytes::from_static(tail)],
        raw: Bytes::from(raw),
        escaped_at: 0,
        next: 0,
        left: length as u64,
    })
}

/// A large answer's body: the envelope around the answer's JSON, written once; the JSON goes out escaped (in pieces
/// made as the client reads) and then as it is, so the answer is held once while it is sent.
struct Streamed {
    /// The head, the escaped text (made piece by piece), the middle, the JSON itself, the tail.
    parts: [Bytes; 5],
    raw: Bytes,
    escaped_at: usize,
    next: usize,
    left: u64,
}

impl http_body::Body for Streamed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let data = loop {
            match this.next {
                1 if this.escaped_at < this.raw.len() => {
                    let end = (this.escaped_at + PIECE).min(this.raw.len());
                    let piece = &this.raw[this.escaped_at..end];
                    let mut out = Vec::with_capacity(piece.len() + piece.len() / 8 + 16);
                    let _ = std::io::Write::write_all(&mut Escaping(&mut out), piece);
                    this.escaped_at = end;
                    break Bytes::from(out);
                }
                1 => this.next = 2,
                3 => {
                    this.next = 4;
                    break std::mem::take(&mut this.raw);
                }
                n if n < this.parts.len() => {
                    this.next += 1;
                    let part = std::mem::take(&mut this.parts[n]);
                    if !part.is_empty() {
                        break part;
                    }
                }
                _ => return std::task::Poll::Ready(None),
            }
        };
        this.left = this.left.saturating_sub(data.len() as u64);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// The JSON-RPC response carrying `result` for request `id` by serialising it (what [`answer_body`] writes
/// directly).
#[cfg(test)]
fn response_body(id: &Value, mut result: CallToolResult, stateless: bool) -> Vec<u8> {
    #[derive(Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a CallToolResult,
    }
    if !stateless {
        result.result_type = None;
    }
    serde_json::to_vec(&Response { jsonrpc: "2.0", id, result: &result }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bytes_of(body: Body) -> Vec<u8> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(axum::body::to_bytes(body, usize::MAX)).unwrap().to_vec()
    }

    #[test]
    fn the_direct_body_is_the_serialised_tool_result_byte_for_byte() {
        let big = "x\"y\\z\n\u{1}é".repeat(10_000);
        let answers = [
            json!({"status": "success", "results": [{"status": "success", "response": {"text": "hi"}}]}),
            json!({"status": "error", "error_code": "TOO_MANY_CALLS", "message": "a \"quoted\" message"}),
            json!({"status": "success", "results": [{"response": {"text": big}}]}),
        ];
        for answer in answers {
            for id in [json!(7), json!("req-1")] {
                for stateless in [false, true] {
                    let expected = response_body(&id, tool_result(answer.clone()), stateless);
                    let body = answer_body(&id, answer.clone(), stateless);
                    let length = http_body::Body::size_hint(&body).exact();
                    let direct = bytes_of(body);
                    assert_eq!(String::from_utf8_lossy(&direct), String::from_utf8_lossy(&expected));
                    assert_eq!(length, Some(direct.len() as u64), "the length is known in advance");
                }
            }
        }
    }

    #[test]
    fn a_large_answer_is_streamed_in_pieces_of_known_total_length() {
        let answer = json!({"status": "success", "text": "\"x".repeat(400_000)});
        let expected = response_body(&json!(1), tool_result(answer.clone()), true);
        let json_length = serde_json::to_vec(&answer).unwrap().len();
        let mut body = answer_body(&json!(1), answer, true);
        let length = http_body::Body::size_hint(&body).exact();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut pieces = Vec::new();
        runtime.block_on(async {
            use http_body_util::BodyExt;
            while let Some(frame) = body.frame().await {
                pieces.push(frame.unwrap().into_data().unwrap());
            }
        });
        assert!(pieces.len() > 4, "sent in pieces: {}", pieces.len());
        // The escaped text in pieces; the largest piece is the JSON itself, never the whole body.
        assert!(
            pieces.iter().all(|p| p.len() <= json_length),
            "{:?}",
            pieces.iter().map(Bytes::len).collect::<Vec<_>>()
        );
        let all: Vec<u8> = pieces.concat();
        assert_eq!(all, expected);
        assert_eq!(length, Some(all.len() as u64));
    }
}
