//! A transparent `tools/list` (contract 8) written rather than built (issue 36: 5,000 tools listed in under 5 ms).
//!
//! Each server's tools as a client is shown them are made once per tool cache entry and prefix ([`ShownTools`]): the
//! upstream's definition under its exposed name, its view renamed (MCP Apps), as rmcp's `Tool` reads it (what rmcp
//! cannot read is not listed, as before), with its `execution` (contract 15), written out as JSON text. A listing
//! ([`ToolList`], built by `catalog::tool_list`) then decides per tool only what depends on the caller (curation, the
//! authorization rules, names claimed twice), and a session's answer is those texts copied one after the other
//! ([`answer`]): no definition is cloned, parsed or serialised again however often it is listed.
//!
//! What is kept lives as long as the cache entry it was made of: it is found by the entry's address and holds a weak
//! reference to it, so an entry replaced or expired is never served again, and its text goes at the next insertion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use rmcp::model::Tool;
use serde_json::Value;

use crate::gateway::exposure::{apps, names};

/// The most cache entries whose tools are kept written (each lives only as long as its entry; past this many, all are
/// forgotten and made again when next listed).
const MAX_KEPT: usize = 4_096;

/// One upstream tool as a client is shown it.
pub struct Shown {
    /// Its exposed name (claimed even when rmcp cannot read the definition, as names are decided before).
    pub exposed: Box<str>,
    /// The definition as a client is shown it, as JSON text; `None` when rmcp's `Tool` cannot read it (not listed).
    json: Option<Box<str>>,
    /// Its `execution` (contract 15), when it declares one.
    execution: Option<Value>,
}

impl Shown {
    /// `tool` of a server whose exposed names begin with `prefix`; `None` for a definition without a name.
    fn of(prefix: &str, tool: &Value) -> Option<Shown> {
        let exposed = names::exposed_name(prefix, tool.get("name")?.as_str()?);
        let mut shown = tool.clone();
        if let Some(fields) = shown.as_object_mut() {
            fields.insert("name".into(), Value::String(exposed.clone()));
        }
        apps::rewrite_tool(prefix, &mut shown);
        let execution = shown.get("execution").filter(|e| e.is_object()).cloned();
        let json = serde_json::from_value::<Tool>(shown).ok().and_then(|typed| {
            let mut value = serde_json::to_value(&typed).ok()?;
            if let (Some(execution), Some(fields)) = (&execution, value.as_object_mut()) {
                fields.insert("execution".into(), execution.clone());
            }
            serde_json::to_string(&value).ok().map(String::into_boxed_str)
        });
        Some(Shown { exposed: exposed.into_boxed_str(), json, execution })
    }
}

/// A cache entry's tools, as shown under one prefix, index for index (`None`: a definition without a name).
pub type ShownList = Arc<[Option<Shown>]>;

struct Kept {
    prefix: Box<str>,
    tools: Weak<Vec<Value>>,
    shown: ShownList,
}

/// Each cached tool list, as shown, while its cache entry lives (see the module documentation).
#[derive(Default)]
pub struct ShownTools(Mutex<HashMap<usize, Vec<Kept>>>);

impl ShownTools {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Vec<Kept>>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `tools` as shown under `prefix`: kept from an earlier listing of the same list, or made now (and kept when a
    /// cache holds the list too, that is, when it will be listed again).
    pub fn of(&self, prefix: &str, tools: &Arc<Vec<Value>>) -> ShownList {
        // The weak reference keeps the list's allocation: while it lives, no other list can have this address.
        let at = Arc::as_ptr(tools) as usize;
        let found = self.lock().get(&at).and_then(|kept| {
            kept.iter().find(|k| &*k.prefix == prefix && k.tools.strong_count() > 0).map(|k| Arc::clone(&k.shown))
        });
        if let Some(shown) = found {
            return shown;
        }
        let shown: ShownList = tools.iter().map(|tool| Shown::of(prefix, tool)).collect();
        if Arc::strong_count(tools) > 1 {
            let mut kept = self.lock();
            kept.retain(|_, list| {
                list.retain(|k| k.tools.strong_count() > 0);
                !list.is_empty()
            });
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
            let entry = Kept { prefix: prefix.into(), tools: Arc::downgrade(tools), shown: Arc::clone(&shown) };
            kept.entry(at).or_default().push(entry);
        }
        shown
    }
}

/// The upstream tools a caller's `tools/list` shows, in configuration order: per server, its shown tools and which
/// of them the caller sees.
#[derive(Default)]
pub struct ToolList {
    pub(super) servers: Vec<(ShownList, Vec<u32>)>,
}

impl ToolList {
    fn listed(&self) -> impl Iterator<Item = &Shown> {
        self.servers.iter().flat_map(|(shown, seen)| seen.iter().filter_map(|&at| shown.get(at as usize)?.as_ref()))
    }

    /// The definitions, as rmcp's types (the handler's route: stdio, and what the direct route leaves to rmcp).
    pub fn tools(&self) -> impl Iterator<Item = Tool> + '_ {
        self.listed().filter_map(|tool| serde_json::from_str(tool.json.as_deref()?).ok())
    }

    /// The `execution` of each listed tool that declares one, by exposed name.
    pub fn executions(&self) -> HashMap<String, Value> {
        let listed = self.listed().filter(|tool| tool.json.is_some());
        listed.filter_map(|tool| Some((tool.exposed.to_string(), tool.execution.clone()?))).collect()
    }

    /// The definitions' JSON, comma-separated, after `out` (`first`: nothing is listed before them).
    fn write(&self, out: &mut Vec<u8>, mut first: bool) {
        for json in self.listed().filter_map(|tool| tool.json.as_deref()) {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(json.as_bytes());
            first = false;
        }
    }

    fn text_len(&self) -> usize {
        self.listed().filter_map(|tool| tool.json.as_deref()).map(|json| json.len() + 1).sum()
    }
}

/// The gateway's own tools as JSON, comma-separated (they never change).
fn gateway_tools() -> &'static str {
    static WRITTEN: OnceLock<String> = OnceLock::new();
    WRITTEN.get_or_init(|| {
        let each: Vec<String> =
            crate::gateway::tools::definitions().iter().filter_map(|t| serde_json::to_string(t).ok()).collect();
        each.join(",")
    })
}

/// The JSON-RPC answer to `tools/list` request `id`: the gateway's tools when the view has them, then `list`, as one
/// `application/json` body.
pub fn answer(id: &Value, gateway: bool, list: &ToolList) -> Response<Body> {
    let mut body = Vec::with_capacity(list.text_len() + gateway_tools().len() + 64);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    body.extend_from_slice(id.to_string().as_bytes());
    body.extend_from_slice(br#","result":{"tools":["#);
    if gateway {
        body.extend_from_slice(gateway_tools().as_bytes());
    }
    list.write(&mut body, !gateway);
    body.extend_from_slice(b"]}}");
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list_of(prefix: &str, tools: &Arc<Vec<Value>>, store: &ShownTools) -> ToolList {
        let shown = store.of(prefix, tools);
        let seen = (0..tools.len() as u32).collect();
        ToolList { servers: vec![(shown, seen)] }
    }

    #[tokio::test]
    async fn the_answer_is_what_rmcp_would_list_with_execution_added() {
        let tools = Arc::new(vec![
            json!({"name": "echo", "description": "d", "inputSchema": {"type": "object"}, "extra": 1,
                   "execution": {"taskSupport": "optional"}}),
            json!({"name": "bad", "inputSchema": "not a schema"}),
            json!({"description": "no name"}),
        ]);
        let store = ShownTools::default();
        let list = list_of("s__", &tools, &store);
        let response = answer(&json!(7), true, &list);
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["id"], json!(7));
        let listed = body["result"]["tools"].as_array().unwrap();
        let gateway = crate::gateway::tools::definitions().len();
        assert_eq!(listed.len(), gateway + 1, "{body}");
        let echo = &listed[gateway];
        assert_eq!(echo["name"], json!("s__echo"));
        assert_eq!(echo["execution"], json!({"taskSupport": "optional"}));
        assert!(echo.get("extra").is_none(), "fields rmcp does not know are not shown, as before");
        assert_eq!(list.executions().len(), 1);
        let empty = answer(&json!("a"), false, &ToolList::default());
        let bytes = axum::body::to_bytes(empty.into_body(), usize::MAX).await.unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap()["result"], json!({"tools": []}));
    }

    #[test]
    fn a_kept_list_is_served_while_its_cache_entry_lives_only() {
        let store = ShownTools::default();
        let cached = Arc::new(vec![json!({"name": "t", "inputSchema": {"type": "object"}})]);
        let holder = Arc::clone(&cached);
        let first = store.of("p_", &cached);
        assert!(Arc::ptr_eq(&first, &store.of("p_", &cached)), "kept while a cache holds the list");
        assert!(!Arc::ptr_eq(&first, &store.of("q_", &cached)), "another prefix is another listing");
        drop((cached, holder));
        let other = Arc::new(vec![json!({"name": "u", "inputSchema": {"type": "object"}})]);
        let again = Arc::clone(&other);
        let shown = store.of("p_", &other);
        assert_eq!(&*shown[0].as_ref().unwrap().exposed, "p_u");
        drop(again);
        assert_eq!(store.lock().values().map(Vec::len).sum::<usize>(), 1, "the dropped entry's lists are gone");
    }
}
