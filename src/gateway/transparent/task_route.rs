//! The route of tasks (contract 15): in the transparent view, the gateway answers what the tasks of either revision
//! send (see `task_wire.rs` for the shapes) in front of the fast route and rmcp, which know nothing of them:
//!
//! - a task-augmented `tools/call` of an exposed tool whose upstream definition offers tasks (`execution.taskSupport`
//!   `optional` or `required`): `params.task` in a session (2025-11-25), or a stateless request whose `_meta`
//!   declares the `io.modelcontextprotocol/tasks` extension. Any other call (a tool without tasks, a name nobody
//!   exposes) goes on to the usual routes, which run it as a plain call: the task metadata is ignored, as the
//!   2025-11-25 spec asks of a receiver that cannot run it as a task;
//! - `tasks/get`, `tasks/cancel`; `tasks/result` and `tasks/list` in a session; `tasks/update` stateless;
//! - rmcp's answers to `initialize` and a session's `tools/list`, amended with what a 2025-11-25 client looks for
//!   before it asks for a task (`task_declare.rs`).
//!
//! One dispatcher ([`dispatch`]) serves both fronts. Over HTTP it sits in [`TaskRoute`], a layer of the stack of
//! `gateway/http.rs`. Over stdio, where the connection is one session, the stdio front reads the client's lines
//! itself (`gateway/stdio/tasks.rs`) and hands the same messages ([`about_tasks`]) to the same dispatcher, with the
//! identity the stdio handler resolves; every other line goes on to rmcp unchanged, whose answers to `initialize`
//! and `tools/list` it amends the same way.
//!
//! The gateway declares the extension (`capabilities.extensions`) in every transparent view, whether or not an
//! upstream offers tasks: a tool that offers none runs as a plain call, and an id that names no task is `-32602`.
//! In the gateway view every `tasks/*` method is `-32601`.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, Response, header};
use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};
use tower::{Layer, Service};

use super::task_declare::{Amend, amend, executions};
pub use super::task_ops::Asked;
use super::task_ops::{self, offers_task};
pub use super::task_wire::TASKS_EXTENSION;
use super::task_wire::declares_tasks;
use super::tool_list;
use crate::auth::Identity;
use crate::config::exposure::ToolExposure;
use crate::gateway::GatewayContext;
use crate::gateway::exposure::EXPOSURE_HEADER;
use crate::gateway::fast_path;
use crate::gateway::middleware::jsonrpc::ParsedMessage;
use crate::gateway::notify::Scope;

/// What a request about a task is answered.
pub enum Reply {
    Result(Value),
    Error { code: i64, message: String, data: Value },
}

impl Reply {
    pub fn error(code: i64, message: impl Into<String>) -> Reply {
        Reply::Error { code, message: message.into(), data: Value::Null }
    }

    /// Whether the request succeeded.
    pub fn is_result(&self) -> bool {
        matches!(self, Reply::Result(_))
    }

    /// The JSON-RPC answer to request `id`.
    pub fn message(self, id: &Value) -> Value {
        match self {
            Reply::Result(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Reply::Error { code, message, data } => {
                let mut error = json!({"code": code, "message": message});
                if !data.is_null() {
                    error["data"] = data;
                }
                json!({"jsonrpc": "2.0", "id": id, "error": error})
            }
        }
    }

    fn respond(self, id: &Value) -> Response<Body> {
        let mut response = Response::new(Body::from(self.message(id).to_string()));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// Adds [`TaskRoute`] in front of the fast route.
#[derive(Clone)]
pub struct TaskRouteLayer(pub Arc<GatewayContext>);

impl<S> Layer<S> for TaskRouteLayer {
    type Service = TaskRoute<S>;
    fn layer(&self, inner: S) -> TaskRoute<S> {
        TaskRoute { inner, ctx: Arc::clone(&self.0) }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct TaskRoute<S> {
    inner: S,
    ctx: Arc<GatewayContext>,
}

/// Whether `message` is one this route may answer: a `tasks/*` request, or a `tools/call` that asks for a task.
pub fn about_tasks(message: &Value, stateless: bool) -> bool {
    let params = message.get("params");
    let id_ok = message.get("id").is_some_and(|id| id.is_string() || id.is_number());
    match message.get("method").and_then(Value::as_str) {
        Some(method) if method.starts_with("tasks/") => id_ok,
        Some("tools/call") if stateless => id_ok && declares_tasks(params.and_then(|p| p.get("_meta"))),
        Some("tools/call") => id_ok && params.and_then(|p| p.get("task")).is_some_and(Value::is_object),
        _ => false,
    }
}

impl<S> Service<Request<Body>> for TaskRoute<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let session = req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let identity = req.extensions().get::<Arc<Identity>>().cloned();
        let message = (req.method() == Method::POST)
            .then(|| req.extensions().get::<ParsedMessage>())
            .flatten()
            .filter(|ParsedMessage(message)| about_tasks(message, session.is_none()))
            .map(|ParsedMessage(message)| message.clone());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let declaring = match req.extensions().get::<ParsedMessage>().filter(|_| req.method() == Method::POST) {
            Some(ParsedMessage(asked)) => match asked.get("method").and_then(Value::as_str) {
                Some("initialize") => Some(true),
                Some("tools/list") if session.is_some() => Some(false),
                _ => None,
            },
            None => None,
        };
        let (Some(message), Some(identity)) = (message, identity) else {
            return match (declaring, req.extensions().get::<Arc<Identity>>().cloned()) {
                (Some(initialize), Some(identity)) => {
                    let ctx = Arc::clone(&self.ctx);
                    Box::pin(declare(ctx, identity, session, initialize, inner, req))
                }
                _ => Box::pin(async move { inner.call(req).await }),
            };
        };
        let requested = match req.headers().get(EXPOSURE_HEADER).map(|v| v.to_str().ok().and_then(ToolExposure::parse))
        {
            None => None,
            Some(Some(view)) => Some(view),
            // A view that is not one: rmcp's route refuses it.
            Some(None) => return Box::pin(async move { inner.call(req).await }),
        };
        let view = identity.snapshot.tool_exposure(identity.mcp_config_id.as_deref()).chosen(requested);
        let ctx = Arc::clone(&self.ctx);
        Box::pin(async move {
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            let asked =
                Asked { ctx: &ctx, identity: &identity, session: session.as_deref(), stateless: session.is_none() };
            match Box::pin(dispatch(asked, view, message)).await {
                Some(reply) => Ok(reply.respond(&id)),
                None => inner.call(req).await,
            }
        })
    }
}

/// rmcp's answer to `initialize` (`initialize`) or a session's `tools/list`, with what 2025-11-25 clients need to
/// see of tasks added in the transparent view (see `task_declare.rs`).
async fn declare<S>(
    ctx: Arc<GatewayContext>,
    identity: Arc<Identity>,
    session: Option<String>,
    initialize: bool,
    mut inner: S,
    req: Request<Body>,
) -> Result<Response<Body>, Infallible>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    let requested = req.headers().get(EXPOSURE_HEADER).map(|v| v.to_str().ok().and_then(ToolExposure::parse));
    let view = identity.snapshot.tool_exposure(identity.mcp_config_id.as_deref()).chosen(requested.flatten());
    if !view.upstream() || requested.is_some_and(|view| view.is_none()) {
        return inner.call(req).await;
    }
    // A plain `tools/list` of a known session is answered here, written from what the listing keeps
    // (tool_list.rs); rmcp's route would build, serialise, parse and amend it again.
    if !initialize
        && let Some(id) = plain_listing(&req)
        && let Some(session) = session.as_deref()
        && ctx.sessions.contains(session)
    {
        ctx.sessions.rescope(session, Scope::of(&identity, requested.flatten()));
        let list = super::list_tools(&ctx, &identity, Some(session)).await;
        return Ok(tool_list::answer(&id, view.gateway_tools(), &list));
    }
    let what = if initialize {
        Amend::Initialize
    } else {
        Amend::ToolsList(executions(&ctx, &identity, session.as_deref()).await)
    };
    let response = inner.call(req).await?;
    Ok(amend(response, what).await)
}

/// The id of a plain `tools/list` request in a session: headers as [`fast_path::plain_in_session`] wants them, an id,
/// no cursor (pagination is rmcp's to answer).
fn plain_listing(req: &Request<Body>) -> Option<Value> {
    let ParsedMessage(message) = req.extensions().get::<ParsedMessage>()?;
    let id = message.get("id").filter(|id| id.is_string() || id.is_number())?;
    let plain = match message.get("params") {
        None | Some(Value::Null) => true,
        Some(Value::Object(params)) => !params.contains_key("cursor"),
        Some(_) => false,
    };
    (plain && fast_path::plain_in_session(req.headers())).then(|| id.clone())
}

/// Whether [`dispatch`] answers `message` (one [`about_tasks`]): every `tasks/*` request; a `tools/call` in the
/// transparent view of a tool that offers tasks. The stdio front asks first, so that a call it passes on to rmcp does
/// not take the key's rate limit twice.
pub async fn answers(asked: &Asked<'_>, view: ToolExposure, message: &Value) -> bool {
    let params = message.get("params");
    match message.get("method").and_then(Value::as_str) {
        Some("tools/call") => match params.and_then(|p| p.get("name")).and_then(Value::as_str) {
            Some(name) => view.upstream() && offers_task(asked, name).await,
            None => false,
        },
        Some(_) => true,
        None => false,
    }
}

/// The reply to a message about tasks; `None` when it goes on to the usual routes.
pub async fn dispatch(asked: Asked<'_>, view: ToolExposure, mut message: Value) -> Option<Reply> {
    let method = message.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
    let params = match message.get_mut("params").map(Value::take) {
        Some(Value::Object(params)) => params,
        _ => Map::new(),
    };
    if !view.upstream() {
        return (method != "tools/call").then(|| Reply::error(-32601, format!("method not found: {method}")));
    }
    if asked.stateless && method != "tools/call" && !declares_tasks(params.get("_meta")) {
        // The extension's methods need the extension declared on the request (SEP-2663).
        let data = json!({"requiredCapabilities": {"extensions": {super::task_wire::TASKS_EXTENSION: {}}}});
        return Some(Reply::Error { code: -32021, message: "Missing required client capability".into(), data });
    }
    let task_id = || params.get("taskId").and_then(Value::as_str).unwrap_or_default().to_string();
    Some(match (method.as_str(), asked.stateless) {
        ("tools/call", _) => return task_ops::create(&asked, params).await,
        ("tasks/get", _) => task_ops::get(&asked, &task_id()).await,
        ("tasks/cancel", _) => task_ops::cancel(&asked, &task_id()).await,
        ("tasks/result", false) => task_ops::result(&asked, &task_id()).await,
        ("tasks/list", false) => task_ops::list(&asked).await,
        ("tasks/update", true) => {
            let answers = params.get("inputResponses").cloned().unwrap_or(Value::Null);
            task_ops::update(&asked, &task_id(), answers).await
        }
        (other, _) => Reply::error(-32601, format!("method not found: {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_task_messages_are_taken() {
        let call = |params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        assert!(about_tasks(&call(json!({"name": "t", "task": {"ttl": 5}})), false));
        assert!(!about_tasks(&call(json!({"name": "t"})), false), "a plain call");
        assert!(!about_tasks(&call(json!({"name": "t", "task": {}})), true), "stateless needs the extension");
        let declared = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        let meta = json!({"io.modelcontextprotocol/clientCapabilities": declared});
        assert!(about_tasks(&call(json!({"name": "t", "_meta": meta})), true));
        assert!(about_tasks(&json!({"jsonrpc": "2.0", "id": "a", "method": "tasks/get"}), false));
        assert!(!about_tasks(&json!({"jsonrpc": "2.0", "method": "tasks/get"}), false), "a notification");
        assert!(!about_tasks(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), false));
    }
}
