//! Speaking 2026-07-28 to a remote streamable HTTP server (contract 15), for [`super`].
//!
//! The revision has no handshake and no session: the gateway asks `server/discover` first, and when the server lists
//! 2026-07-28 among its `supportedVersions` every later request is a self-contained POST whose `_meta` carries the
//! revision, the client capabilities the gateway declares for its caller and the gateway's identity, with the
//! standard headers ([`crate::mcp_headers`]): `Mcp-Method`, `Mcp-Name`, and the `Mcp-Param-*` that the called tool's
//! `x-mcp-header` parameters ask for, learnt from the server's own `tools/list` (listed once first when a call names
//! a tool this client has not seen). A server that does not answer `server/discover` that way gets `initialize` as
//! before.
//!
//! A server cannot send requests in this revision: it answers `resultType: "input_required"` with its questions
//! (`inputRequests`: sampling, elicitation, roots) and an opaque `requestState`; the questions go to the caller's relay
//! exactly as a 2025-11-25 server's requests do, and the request is sent again with the answers in `inputResponses`,
//! at most [`MAX_ROUNDS`] times, each round of at most [`MAX_QUESTIONS`] questions. A final result's `resultType: "complete"` is removed (the gateway states each
//! result's type to its own clients as their revision asks).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::ServerPeerInfo;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::{HttpRpc, HttpRpcError, lock};
use crate::mcp_headers::{Annotations, owned_annotations};
use crate::upstream::Declared;
use crate::upstream::relay::{self, FromServer};

/// The revision.
pub const MODERN: &str = "2026-07-28";
/// The most rounds of questions one request may take.
pub const MAX_ROUNDS: usize = 16;
/// The most questions one round may ask (a hostile server's thousand questions are never put to a client).
pub const MAX_QUESTIONS: usize = 16;
/// The most tools whose annotations one client keeps.
const MAX_TOOLS: usize = 10_000;

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";

/// The revision a server is spoken to in (a remote server's `protocol_version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Revision {
    /// 2025-11-25 unless the server's `server/discover` lists only 2026-07-28 (a server that still offers sessions
    /// keeps what only they carry: its own requests during a call, subscriptions, its list changes).
    #[default]
    Auto,
    /// 2025-11-25 (or what `initialize` negotiates), without asking `server/discover`.
    Legacy,
    /// 2026-07-28; a server that does not list it fails to start.
    Modern,
}

impl Revision {
    /// The revision `protocol_version` names (validated at load; anything else is auto).
    pub fn of(protocol_version: Option<&str>) -> Revision {
        match protocol_version {
            Some("2025-11-25") => Revision::Legacy,
            Some(MODERN) => Revision::Modern,
            _ => Revision::Auto,
        }
    }
}

/// What `server/discover` answered: the server described in 2026-07-28, and whether it offers an earlier revision too.
pub struct Discovered {
    pub info: ServerPeerInfo,
    pub also_earlier: bool,
}

/// `params` with the revision's `_meta` added (what it already has is kept).
pub fn with_meta(mut params: Value, declares: Declared) -> Value {
    if !params.is_object() {
        params = Value::Object(Map::new());
    }
    let meta = params.as_object_mut().map(|params| params.entry("_meta").or_insert_with(|| json!({})));
    if let Some(Value::Object(meta)) = meta {
        meta.insert(META_VERSION.into(), json!(MODERN));
        meta.insert(META_CAPABILITIES.into(), declares.capabilities());
        meta.insert(META_CLIENT.into(), json!({"name": "mcpgw", "version": crate::VERSION}));
    }
    params
}

/// What a `server/discover` result says of the server, when it speaks 2026-07-28.
pub fn discovered(result: &Value) -> Option<Discovered> {
    let versions = result.get("supportedVersions")?.as_array()?;
    if !versions.iter().any(|version| version.as_str() == Some(MODERN)) {
        return None;
    }
    let also_earlier = versions.iter().filter_map(Value::as_str).any(|version| version < MODERN);
    let mut info =
        json!({"protocolVersion": MODERN, "capabilities": result.get("capabilities").cloned().unwrap_or(json!({}))});
    // The revision stamps `serverInfo` in the result's `_meta`; a server may also give it as a field.
    let stamped = result.get("_meta").and_then(|meta| meta.get("io.modelcontextprotocol/serverInfo"));
    if let Some(server) = result.get("serverInfo").or(stamped) {
        info["serverInfo"] = server.clone();
    }
    if let Some(instructions) = result.get("instructions") {
        info["instructions"] = instructions.clone();
    }
    serde_json::from_value(info).ok().map(|info| Discovered { info, also_earlier })
}

/// One question of an `input_required` result: its key, method and params.
pub type Question = (String, String, Value);

/// A result's questions, when it is `input_required`, and the state to send back.
pub fn questions(result: &Value) -> Option<(Vec<Question>, Option<Value>)> {
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return None;
    }
    let asked = result.get("inputRequests").and_then(Value::as_object).into_iter().flatten();
    let asked = asked
        .map(|(key, request)| {
            let method = request.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
            (key.clone(), method, request.get("params").cloned().unwrap_or(Value::Null))
        })
        .collect();
    Some((asked, result.get("requestState").cloned()))
}

/// `params` of the request sent again with `answers` (key to result) and the server's `state`.
pub fn resumed(params: &Value, answers: Map<String, Value>, state: Option<Value>) -> Value {
    let mut params = params.clone();
    if let Some(params) = params.as_object_mut() {
        params.insert("inputResponses".into(), Value::Object(answers));
        match state {
            Some(state) => params.insert("requestState".into(), state),
            None => params.remove("requestState"),
        };
    }
    params
}

/// A final result as the gateway's other upstreams answer it (without `resultType: "complete"`).
pub fn completed(mut result: Value) -> Value {
    if let Some(fields) = result.as_object_mut()
        && fields.get("resultType").and_then(Value::as_str) == Some("complete")
    {
        fields.remove("resultType");
    }
    result
}

/// The `x-mcp-header` annotations of the server's tools, learnt from its `tools/list` answers.
#[derive(Default)]
pub struct ToolHeaders {
    tools: Mutex<HashMap<String, Annotations>>,
    listed: AtomicBool,
}

impl ToolHeaders {
    fn tools(&self) -> std::sync::MutexGuard<'_, HashMap<String, Annotations>> {
        self.tools.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns the annotated tools of one `tools/list` page (tools without annotations cost nothing).
    pub fn learn(&self, page: &Value) {
        self.listed.store(true, Ordering::Release);
        let Some(tools) = page.get("tools").and_then(Value::as_array) else { return };
        let mut known = self.tools();
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
            let annotations = tool.get("inputSchema").map(owned_annotations).unwrap_or_default();
            if annotations.is_empty() {
                known.remove(name);
            } else if known.len() < MAX_TOOLS || known.contains_key(name) {
                known.insert(name.to_string(), annotations);
            }
        }
    }

    /// Whether a listing was learnt from.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The annotations of tool `name` (none when it has none).
    pub fn of(&self, name: &str) -> Annotations {
        self.tools().get(name).cloned().unwrap_or_default()
    }
}

impl HttpRpc {
    /// Asks `server/discover` (unless the revision is 2025-11-25) and, when the server is to be spoken to in
    /// 2026-07-28 ([`Revision`]), records it and what the server is; `None`: open a session.
    pub(super) async fn discover(&self) -> Result<Option<Arc<ServerPeerInfo>>, HttpRpcError> {
        if self.revision == Revision::Legacy {
            return Ok(None);
        }
        let probe = with_meta(json!({}), self.declares);
        let headers = [("mcp-method".to_string(), "server/discover".to_string())];
        let found = match self.exchange("server/discover", &probe, None, Some(&headers)).await {
            Ok((result, _)) => discovered(&result),
            // Unreachable, or no credential it takes: `initialize` would fail alike.
            Err(
                e @ (HttpRpcError::Transport(_) | HttpRpcError::Credential(_) | HttpRpcError::Status(401 | 403, _)),
            ) => {
                return Err(e);
            }
            // Anything else says the server is of an earlier revision.
            Err(_) => None,
        };
        match found {
            Some(found) if self.revision == Revision::Modern || !found.also_earlier => {
                let info = Arc::new(found.info);
                self.modern.store(true, Ordering::Release);
                *lock(&self.info) = Some(Arc::clone(&info));
                self.relisten();
                return Ok(Some(info));
            }
            None if self.revision == Revision::Modern => {
                return Err(HttpRpcError::Protocol(
                    "the server does not speak 2026-07-28 (its server/discover does not list it), which its \
                     protocol_version asks for"
                        .into(),
                ));
            }
            _ => {}
        }
        Ok(None)
    }

    /// One request in 2026-07-28: its `_meta` and headers added, the server's questions answered by `relay` round after
    /// round.
    pub(super) async fn modern_request(
        &self,
        method: &str,
        params: Value,
        relay: Option<&mpsc::Sender<FromServer>>,
    ) -> Result<Value, HttpRpcError> {
        if let ("resources/subscribe" | "resources/unsubscribe", Some(uri)) =
            (method, params.get("uri").and_then(Value::as_str))
        {
            return self.listen_to(uri, method == "resources/subscribe");
        }
        let annotations = match (method, params.get("name").and_then(Value::as_str)) {
            ("tools/call", Some(name)) => {
                if !self.tool_headers.listed() {
                    self.learn_tools().await;
                }
                self.tool_headers.of(name)
            }
            _ => Vec::new(),
        };
        let mut params = with_meta(params, self.declares);
        for _ in 0..MAX_ROUNDS {
            let headers = crate::mcp_headers::request_headers(method, &params, &annotations);
            let (result, _) = self.exchange(method, &params, relay, Some(&headers)).await?;
            let Some((asked, state)) = questions(&result) else {
                if method == "tools/list" {
                    self.tool_headers.learn(&result);
                }
                return Ok(completed(result));
            };
            if asked.len() > MAX_QUESTIONS {
                let many = asked.len();
                return Err(HttpRpcError::Protocol(format!(
                    "{many} questions in one round, over the limit of {MAX_QUESTIONS}"
                )));
            }
            let mut answers = Map::new();
            for (key, question, asked_params) in asked {
                let answer = relay::answer(relay.cloned(), question.clone(), asked_params).await;
                self.roots.record(&question, &answer);
                match answer {
                    Ok(answer) => answers.insert(key, answer),
                    Err(refused) => return Err(HttpRpcError::Server { code: refused.code, message: refused.message }),
                };
            }
            params = resumed(&params, answers, state);
        }
        Err(HttpRpcError::Protocol(format!("more than {MAX_ROUNDS} rounds of questions")))
    }

    /// Lists the server's tools (every page, at most 100) to learn their `x-mcp-header` parameters; a failure leaves
    /// them unknown (a call then carries none).
    async fn learn_tools(&self) {
        let mut cursor: Option<Value> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let params = with_meta(params, self.declares);
            let headers = crate::mcp_headers::request_headers("tools/list", &params, &Vec::new());
            let Ok((page, _)) = self.exchange("tools/list", &params, None, Some(&headers)).await else { return };
            self.tool_headers.learn(&page);
            cursor = page.get("nextCursor").filter(|next| !next.is_null()).cloned();
            if cursor.is_none() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_tells_a_modern_server() {
        let modern = json!({"supportedVersions": ["2025-11-25", "2026-07-28"], "capabilities": {"tools": {}},
                            "serverInfo": {"name": "s", "version": "1"}, "resultType": "complete"});
        let found = discovered(&modern).expect("modern");
        assert_eq!(found.info.protocol_version.as_str(), MODERN);
        assert!(found.info.capabilities.tools.is_some() && found.also_earlier);
        assert!(!discovered(&json!({"supportedVersions": ["2026-07-28"]})).expect("modern only").also_earlier);
        assert!(discovered(&json!({"supportedVersions": ["2025-11-25"]})).is_none());
        assert!(discovered(&json!({"capabilities": {}})).is_none());
    }

    #[test]
    fn meta_is_added_and_kept() {
        let params = with_meta(json!({"name": "t", "_meta": {"progressToken": 3}}), Declared::ALL);
        assert_eq!(params["_meta"]["progressToken"], json!(3));
        assert_eq!(params["_meta"][META_VERSION], json!(MODERN));
        assert!(params["_meta"][META_CAPABILITIES].is_object());
        assert_eq!(with_meta(Value::Null, Declared::ALL)["_meta"][META_VERSION], json!(MODERN));
    }

    #[test]
    fn questions_are_answered_in_the_next_round() {
        let asked = json!({"resultType": "input_required", "requestState": "s1",
                           "inputRequests": {"q": {"method": "elicitation/create", "params": {"message": "?"}}}});
        let (questions, state) = questions(&asked).expect("questions");
        assert_eq!(questions, vec![("q".into(), "elicitation/create".into(), json!({"message": "?"}))]);
        let mut answers = Map::new();
        answers.insert("q".into(), json!({"action": "accept"}));
        let again = resumed(&json!({"name": "t", "requestState": "old"}), answers, state);
        assert_eq!(again, json!({"name": "t", "requestState": "s1", "inputResponses": {"q": {"action": "accept"}}}));
        assert!(super::questions(&json!({"resultType": "complete"})).is_none());
        assert_eq!(completed(json!({"resultType": "complete", "content": []})), json!({"content": []}));
    }

    #[test]
    fn annotations_are_learnt_from_listings() {
        let headers = ToolHeaders::default();
        assert!(!headers.listed());
        headers.learn(&json!({"tools": [
            {"name": "a", "inputSchema": {"properties": {"r": {"type": "string", "x-mcp-header": "R"}}}},
            {"name": "b", "inputSchema": {"properties": {}}}]}));
        assert!(headers.listed());
        assert_eq!(headers.of("a"), vec![(vec!["r".to_string()], "R".to_string())]);
        assert!(headers.of("b").is_empty() && headers.of("c").is_empty());
    }
}
