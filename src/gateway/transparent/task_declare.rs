//! What a 2025-11-25 client must see before it asks for a task (contract 15): `capabilities.tasks` in the answer to
//! `initialize` (`{list, cancel, requests: {tools: {call}}}`), and each tool's `execution` (`taskSupport`) in
//! `tools/list`. The official TypeScript SDK asks for a task only when both say so. rmcp's types carry neither, so
//! the task route adds them to rmcp's answer in the transparent view: the answer (one JSON body, or the `data:` lines
//! of an event stream) is read, the result amended, and written back with the same status and headers ([`amend`]).
//! Over stdio, the route of tasks there amends rmcp's line itself ([`amend_message`], `gateway/stdio/tasks.rs`).

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{Response, header};
use serde_json::{Value, json};

use crate::auth::Identity;
use crate::gateway::GatewayContext;

/// The longest answer amended; a longer one is passed on as it is.
const MAX_AMENDED_BYTES: usize = 64 * 1024 * 1024;

/// What to add to an answer.
pub enum Amend {
    /// `capabilities.tasks`, when the session's revision is 2025-11-25.
    Initialize,
    /// `execution` of each listed tool, by exposed name.
    ToolsList(HashMap<String, Value>),
}

impl Amend {
    fn result(&self, result: &mut Value) {
        match self {
            Amend::Initialize => {
                if result.get("protocolVersion").and_then(Value::as_str) == Some("2025-11-25")
                    && let Some(capabilities) = result.get_mut("capabilities").and_then(Value::as_object_mut)
                {
                    let tasks = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
                    capabilities.insert("tasks".into(), tasks);
                }
            }
            Amend::ToolsList(executions) => {
                for tool in result.get_mut("tools").and_then(Value::as_array_mut).into_iter().flatten() {
                    let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                    if let Some(execution) = executions.get(name).cloned()
                        && let Some(fields) = tool.as_object_mut()
                    {
                        fields.insert("execution".into(), execution);
                    }
                }
            }
        }
    }
}

/// `response` with its JSON-RPC result amended.
pub async fn amend(response: Response<Body>, what: Amend) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_AMENDED_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let Ok(text) = std::str::from_utf8(&bytes) else { return Response::from_parts(parts, Body::from(bytes)) };
    let amended = match serde_json::from_str::<Value>(text) {
        Ok(mut message) => amend_message(&mut message, &what).then(|| message.to_string()),
        // An event stream: each `data:` line that is an answer.
        Err(_) => {
            let mut changed = false;
            let lines: Vec<String> = text
                .split('\n')
                .map(|line| {
                    let parsed = line.strip_prefix("data:").map(|data| serde_json::from_str::<Value>(data.trim()));
                    if let Some(Ok(mut message)) = parsed
                        && amend_message(&mut message, &what)
                    {
                        changed = true;
                        return format!("data: {message}");
                    }
                    line.to_string()
                })
                .collect();
            changed.then(|| lines.join("\n"))
        }
    };
    match amended {
        Some(amended) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(amended))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// The `execution` of each tool the caller's `tools/list` shows, by exposed name.
pub async fn executions(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> HashMap<String, Value> {
    super::list_tools(ctx, identity, session).await.executions()
}

/// Amends `message` when it is a JSON-RPC result; whether it was one.
pub fn amend_message(message: &mut Value, what: &Amend) -> bool {
    match message.get_mut("result") {
        Some(result) if result.is_object() => {
            what.result(result);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn text(response: Response<Body>) -> String {
        String::from_utf8(axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn json_and_event_stream_answers_are_amended() {
        let init = json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25", "capabilities": {}}});
        let amended: Value = serde_json::from_str(
            &text(amend(Response::new(Body::from(init.to_string())), Amend::Initialize).await).await,
        )
        .unwrap();
        assert_eq!(amended["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"], json!({}));
        let list = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "a"}, {"name": "b"}]}});
        let stream = format!("id: 0\ndata: {list}\n\n");
        let executions = HashMap::from([("b".to_string(), json!({"taskSupport": "required"}))]);
        let amended = text(amend(Response::new(Body::from(stream)), Amend::ToolsList(executions)).await).await;
        assert!(amended.starts_with("id: 0\ndata: "), "{amended}");
        let message: Value =
            serde_json::from_str(amended.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap();
        assert_eq!(message["result"]["tools"][1]["execution"]["taskSupport"], json!("required"));
        assert!(message["result"]["tools"][0].get("execution").is_none());
        let old = json!({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-06-18", "capabilities": {}}});
        let kept = text(amend(Response::new(Body::from(old.to_string())), Amend::Initialize).await).await;
        assert!(!kept.contains("tasks"), "{kept}");
    }
}
