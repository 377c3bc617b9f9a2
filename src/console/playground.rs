//! The playground: one MCP request (a tool call, a prompt, a resource, or a list) sent with a client's key through
//! the gateway's own router, in-process: the whole pipeline a client's request takes (admission and its rate limit,
//! the key's budgets, policies and quotas, pins, guardrails, audit), as the 2026-07-28 revision's single `POST`. The
//! answer is shown whole, and the guardrail verdicts found in it are listed on their own.
//!
//! Who is calling is decided by a key, as for any client: one pasted into the form (used for this one request, neither
//! kept nor shown again), or, for a project and user chosen on the page, a key made for that one request through the
//! admin API and deleted through it right after (both writes audited, the key never leaving the process).

use std::sync::Arc;

use askama::Template;
use axum::Extension;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tower::ServiceExt;

use super::pages::{render, segment};
use super::{Console, Form, Operator, api};

/// The largest answer the playground shows (a larger one is cut, and says so).
const MAX_SHOWN_BYTES: usize = 256 * 1024;

/// The largest answer the playground reads from the gateway.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// The revision the playground's requests speak: one request, no session.
const REVISION: &str = "2026-07-28";

/// The requests the playground sends, as (method, label).
const METHODS: [(&str, &str); 6] = [
    ("tools/call", "Call a tool"),
    ("prompts/get", "Get a prompt"),
    ("resources/read", "Read a resource"),
    ("tools/list", "List tools"),
    ("prompts/list", "List prompts"),
    ("resources/list", "List resources"),
];

/// One guardrail verdict found in an answer.
#[derive(PartialEq)]
struct Verdict {
    error_code: String,
    stage: String,
    message: String,
    violations: String,
}

/// What the last request gave.
struct Outcome {
    status: u16,
    answer: String,
    verdicts: Vec<Verdict>,
}

#[derive(Template)]
#[template(path = "console/playground.html")]
struct PlaygroundPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    /// (project id, label, chosen), and the same for users.
    projects: Vec<(String, String, bool)>,
    users: Vec<(String, String, bool)>,
    methods: Vec<(&'static str, &'static str, bool)>,
    name: String,
    arguments: String,
    problem: Option<String>,
    outcome: Option<Outcome>,
}

fn page(
    console: &Console,
    op: &Operator,
    form: Option<&Form>,
    problem: Option<String>,
    outcome: Option<Outcome>,
) -> Response {
    let chosen = form.map_or("tools/call", |f| f.get("method"));
    let methods = METHODS.iter().map(|(method, label)| (*method, *label, *method == chosen)).collect();
    let snapshot = console.admin.store.snapshot();
    let (project, user) = form.map_or(("", ""), |f| (f.get("project_id"), f.get("user_id")));
    let projects = snapshot
        .file
        .projects
        .iter()
        .take(MAX_CHOICES)
        .map(|(id, p)| (id.clone(), format!("{} ({id})", p.project_name), id == project))
        .collect();
    let users = snapshot
        .file
        .users
        .iter()
        .take(MAX_CHOICES)
        .map(|(id, u)| (id.clone(), format!("{} ({id})", u.email), id == user))
        .collect();
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(
        status,
        &PlaygroundPage {
            signed_in: true,
            csrf: &op.session.csrf,
            projects,
            users,
            methods,
            name: form.map(|f| f.get("name").to_string()).unwrap_or_default(),
            arguments: form.map_or_else(|| "{}".to_string(), |f| f.get("arguments").to_string()),
            problem,
            outcome,
        },
    )
}

/// The projects and users offered to choose from (a larger configuration: paste a key).
const MAX_CHOICES: usize = 1000;

pub async fn playground(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    page(&console, &op, None, None, None)
}

/// `POST /ui/playground`: sends the request and shows its answer.
pub async fn play(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let message = match message(&form) {
        Ok(message) => message,
        Err(problem) => return page(&console, &op, Some(&form), Some(problem), None),
    };
    let key = form.get("api_key").trim();
    if !key.is_empty() {
        let outcome = send(&console, key, &message).await;
        return page(&console, &op, Some(&form), None, Some(outcome));
    }
    let (project, user) = (form.get("project_id"), form.get("user_id"));
    if project.is_empty() || user.is_empty() {
        let problem = "Paste a key, or choose a project and a user.".to_string();
        return page(&console, &op, Some(&form), Some(problem), None);
    }
    // A key for this one request, through the admin API, deleted through it once the answer is in.
    let operator = &op.session.operator;
    let path = format!("/api/v1/users/{}/api-keys", segment(user));
    let made = api::call(&console, operator, Method::POST, &path, Some(json!({"project_id": project}))).await.data();
    let made = made.and_then(|data| {
        let text = |f: &str| data.get(f).and_then(Value::as_str).map(str::to_string);
        text("api_key").zip(text("key_id")).ok_or_else(|| "the admin API made no key".to_string())
    });
    let (key, key_id) = match made {
        Ok(made) => made,
        Err(problem) => return page(&console, &op, Some(&form), Some(problem), None),
    };
    let outcome = send(&console, &key, &message).await;
    let path = format!("/api/v1/api-keys/{}", segment(&key_id));
    if let Err(problem) = api::call(&console, operator, Method::DELETE, &path, None).await.data() {
        tracing::warn!(key_id = %key_id, problem = %problem, "the playground's key for one request was not deleted");
    }
    page(&console, &op, Some(&form), None, Some(outcome))
}

/// The JSON-RPC request the form asks for, with the 2026-07-28 revision's `_meta` (one request, no session).
fn message(form: &Form) -> Result<Value, String> {
    let method = form.get("method");
    if !METHODS.iter().any(|(m, _)| *m == method) {
        return Err("Choose what to send.".into());
    }
    let name = form.get("name").trim();
    let arguments = match form.get("arguments").trim() {
        "" => Map::new(),
        text => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("The arguments must be a JSON object.".into()),
            Err(e) => return Err(format!("The arguments are not JSON: {e}")),
        },
    };
    let mut params = Map::new();
    match method {
        "tools/call" | "prompts/get" if name.is_empty() => return Err("Give the name to call.".into()),
        "tools/call" | "prompts/get" => {
            params.insert("name".into(), json!(name));
            params.insert("arguments".into(), Value::Object(arguments));
        }
        "resources/read" if name.is_empty() => return Err("Give the URI of the resource.".into()),
        "resources/read" => {
            params.insert("uri".into(), json!(name));
        }
        _ => {}
    }
    params.insert(
        "_meta".into(),
        json!({
            "io.modelcontextprotocol/protocolVersion": REVISION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "mcpgw-console-playground", "version": crate::VERSION},
        }),
    );
    Ok(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
}

/// Sends `message` with `key` through the gateway's router.
async fn send(console: &Console, key: &str, message: &Value) -> Outcome {
    let failed = |why: &str| Outcome { status: 0, answer: why.to_string(), verdicts: Vec::new() };
    let Some(gateway) = console.gateway.clone() else {
        return failed("The gateway is not served by this process.");
    };
    let snapshot = console.admin.store.snapshot();
    // A host the gateway allows (its DNS-rebinding check runs on this request as on any other).
    let host = snapshot.settings.allowed_hosts.iter().find(|h| *h != "*").map_or("localhost", String::as_str);
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
    let mut builder = Request::builder()
        .method("POST")
        .uri("/mcp/")
        .header(header::HOST, host)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", REVISION)
        .header("mcp-method", method);
    let name = message.pointer("/params/name").or_else(|| message.pointer("/params/uri")).and_then(Value::as_str);
    if let Some(name) = name.filter(|n| n.bytes().all(|b| b.is_ascii_graphic() || b == b' ')) {
        builder = builder.header("mcp-name", name);
    }
    if !key.is_empty() {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let Ok(request) = builder.body(Body::from(message.to_string())) else {
        return failed("The key or the name cannot be sent in a header.");
    };
    let Ok(response) = gateway.oneshot(request).await;
    let status = response.status().as_u16();
    let bytes = to_bytes(response.into_body(), MAX_ANSWER_BYTES).await.unwrap_or_default();
    let (answer, verdicts) = match serde_json::from_slice::<Value>(&bytes) {
        Ok(value) => {
            let mut verdicts = Vec::new();
            find_verdicts(&value, 0, &mut verdicts);
            (serde_json::to_string_pretty(&value).unwrap_or_default(), verdicts)
        }
        Err(_) => (String::from_utf8_lossy(&bytes).into_owned(), Vec::new()),
    };
    Outcome { status, answer: shown(answer), verdicts }
}

/// `text`, cut to [`MAX_SHOWN_BYTES`] (on a character boundary), saying so.
fn shown(mut text: String) -> String {
    if text.len() > MAX_SHOWN_BYTES {
        let mut end = MAX_SHOWN_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let total = text.len();
        text.truncate(end);
        text.push_str(&format!("\n… (the first {end} of {total} bytes)"));
    }
    text
}

/// How deep [`find_verdicts`] looks (an answer's nesting, JSON inside text included).
const MAX_DEPTH: usize = 12;

/// The guardrail verdicts in an answer: every object whose `error_code` is a guardrail's (a `gw_secure_call_tools`
/// result, an error's `data`), looking into text that is itself JSON (a tool result's content).
fn find_verdicts(value: &Value, depth: usize, found: &mut Vec<Verdict>) {
    if depth > MAX_DEPTH || found.len() >= 100 {
        return;
    }
    match value {
        Value::Object(map) => {
            let code = map.get("error_code").or_else(|| map.get("code")).and_then(Value::as_str).unwrap_or_default();
            if code.starts_with("GUARDRAIL_") {
                let text = |field: &str| map.get(field).and_then(Value::as_str).unwrap_or_default().to_string();
                let violations = map.get("violations").map(Value::to_string).unwrap_or_default();
                let verdict = Verdict {
                    error_code: code.to_string(),
                    stage: text("stage"),
                    message: text("message"),
                    violations,
                };
                // A result is often in the answer twice (its text and its `structuredContent`): listed once.
                if !found.contains(&verdict) {
                    found.push(verdict);
                }
                return;
            }
            for item in map.values() {
                find_verdicts(item, depth + 1, found);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| find_verdicts(item, depth + 1, found)),
        Value::String(text) if text.starts_with(['{', '[']) => {
            if let Ok(inner) = serde_json::from_str::<Value>(text) {
                find_verdicts(&inner, depth + 1, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_found_in_results_and_in_text_that_is_json() {
        let result = json!({"status": "blocked", "error_code": "GUARDRAIL_VIOLATION", "stage": "input",
            "message": "blocked keyword", "violations": [{"type": "keyword"}]});
        let answer =
            json!({"result": {"content": [{"type": "text", "text": json!({"results": [result]}).to_string()}]}});
        let mut found = Vec::new();
        find_verdicts(&answer, 0, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].stage.as_str(), found[0].message.as_str()), ("input", "blocked keyword"));
        let mut none = Vec::new();
        find_verdicts(&json!({"result": {"content": [{"type": "text", "text": "fine"}]}}), 0, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn a_long_answer_is_cut_on_a_character_boundary() {
        let text = "é".repeat(MAX_SHOWN_BYTES);
        let cut = shown(text);
        assert!(cut.len() < MAX_SHOWN_BYTES + 100);
        assert!(cut.ends_with("bytes)"));
    }
}
