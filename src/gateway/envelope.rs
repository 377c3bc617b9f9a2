//! One tool-result envelope for every route: a tool's answer object (contract section 4) becomes a `CallToolResult`
//! whose `structuredContent` is the object and whose one text content is the same object as JSON, with `isError`
//! unless the answer's `status` is `success`.
//!
//! rmcp's handler returns [`tool_result`]; the fast route ([`super::fast_path`]) writes the same value as the
//! JSON-RPC response with [`answer_body`], so both routes answer byte for byte alike.
//!
//! [`answer_body`] bounds the memory of a large answer (contract 13: one request holds at most a few times
//! `max_response_bytes`): the body of a large answer is measured first and allocated once at its final size, rather
//! than grown by doubling, and the answer's JSON is written straight into it twice (escaped as the text content, then
//! as `structuredContent`) with no text copy in between. So the peak is the answer value and the body.

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

/// Answers up to this size are written into a buffer of this capacity at once; larger ones are measured first.
const SMALL: usize = 16 * 1024;

/// A writer into a buffer that refuses to grow it.
struct Capped<'a>(&'a mut Vec<u8>);

impl std::io::Write for Capped<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + data.len() > self.0.capacity() {
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

/// The length of `value`'s JSON written as the inside of a JSON string.
fn escaped_len(value: &Value) -> usize {
    struct Counting(usize);
    impl std::io::Write for Counting {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            for byte in data {
                self.0 += match byte {
                    b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
                    0..0x20 => 6,
                    _ => 1,
                };
            }
            Ok(data.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counting = Counting(0);
    let _ = serde_json::to_writer(&mut counting, value);
    counting.0
}

/// The JSON-RPC response for request `id` carrying `answer` as [`tool_result`] makes it: the same bytes as
/// serialising that `CallToolResult` (`resultType` only for the stateless revision, as rmcp does for session peers),
/// within the memory bound of the module documentation.
pub fn answer_body(id: &Value, answer: Value, stateless: bool) -> Vec<u8> {
    let ok = answer.get("status").and_then(Value::as_str) == Some("success");
    let mut small = Vec::with_capacity(SMALL);
    let fits = serde_json::to_writer(Capped(&mut small), &answer).is_ok();
    // A large answer is written from the value twice (escaped as the text, then as it is) into a body of its final
    // size: no text copy besides the body.
    let (raw_len, escaped) =
        if fits { (small.len(), 2 * small.len()) } else { (json_len(&answer), escaped_len(&answer)) };
    // The envelope's own text: 134 bytes with `resultType`.
    let mut body = Vec::with_capacity(escaped + raw_len + json_len(id) + 160);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    let _ = serde_json::to_writer(&mut body, id);
    body.extend_from_slice(br#","result":{"#);
    if stateless {
        body.extend_from_slice(br#""resultType":"complete","#);
    }
    body.extend_from_slice(br#""content":[{"type":"text","text":""#);
    if fits {
        let _ = std::io::Write::write_all(&mut Escaping(&mut body), &small);
    } else {
        let _ = serde_json::to_writer(Escaping(&mut body), &answer);
    }
    body.extend_from_slice(br#""}],"structuredContent":"#);
    if fits {
        body.extend_from_slice(&small);
    } else {
        let _ = serde_json::to_writer(&mut body, &answer);
    }
    drop(answer);
    body.extend_from_slice(if ok { br#","isError":false}}"# } else { br#","isError":true}}"# });
    body
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
                    let direct = answer_body(&id, answer.clone(), stateless);
                    assert_eq!(String::from_utf8_lossy(&direct), String::from_utf8_lossy(&expected));
                }
            }
        }
    }

    #[test]
    fn a_large_body_is_allocated_once_at_its_size() {
        for stateless in [false, true] {
            let answer = json!({"status": "success", "text": "\"".repeat(100_000)});
            let body = answer_body(&json!(1), answer, stateless);
            assert!(body.capacity() - body.len() <= 256, "{} of {}", body.len(), body.capacity());
        }
    }
}
