//! One tool-result envelope for every route: a tool's answer object (contract section 4) becomes a `CallToolResult`
//! whose `structuredContent` is the object and whose one text content is the same object as JSON, with `isError`
//! unless the answer's `status` is `success`.
//!
//! rmcp's handler returns [`tool_result`]; the fast route ([`super::fast_path`]) writes the same value as the
//! JSON-RPC response with [`response_body`], so both routes answer byte for byte alike.

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

/// The JSON-RPC response carrying `result` for request `id`; `resultType` only for the stateless revision, as rmcp
/// does for session peers.
pub fn response_body(id: &Value, mut result: CallToolResult, stateless: bool) -> Vec<u8> {
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
