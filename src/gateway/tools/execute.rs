//! `gw_secure_call_tools` (spec 4.1): each call in order, each with its own result; a failed or blocked call does not
//! stop the batch. Per call: the tool must exist on the server (discovery), then the upstream call runs under
//! `tool_execution_timeout` in a pooled process, wrapped in the server's guardrails (`guardrails/stage.rs`): input
//! check and redaction before, output check, quality checks and restoring after.

use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tower::{Layer, Service};

use serde_json::{Map, Value, json};

use super::discovery::{DiscoveryResult, discover, find_server, upstream_failure, upstream_spec};
use super::{SecureCallInput, ToolCall};
use crate::audit;
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::exposure::filter::Curation;
use crate::gateway::exposure::policy;
use crate::gateway::middleware::budgets::{self, Building};
use crate::gateway::middleware::guardrails::{CallOutcome, GuardrailLayer, Guardrails, TaskAsk, UpstreamCall};
use crate::guardrails::provider::{Provider, ProviderChoice};
use crate::json_strict::object;
use crate::meter::usage::Sample;
use crate::telemetry::spans;
use crate::timeouts::TimeoutKind;
use crate::upstream::relay::Relay;
use crate::upstream::{PoolKey, ServerSpec, UpstreamError};

/// The pool enforces a timeout itself (and kills the process); the outer timer is a backstop just behind it.
pub const TIMEOUT_MARGIN: Duration = Duration::from_millis(500);

/// `gw_secure_call_tools`.
/// `session` is the caller's MCP session (a `per_session` server's calls go to the session's own process).
pub async fn secure_call(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    input: SecureCallInput,
) -> Value {
    let started = Instant::now();
    let limits = &identity.snapshot.settings.limits;
    if input.tool_calls.len() > limits.max_calls_per_request {
        ctx.store.metrics().limit_hit("calls_per_request");
        let message = format!(
            "{} calls in one request; the limit is {} (limits.max_calls_per_request): split the batch",
            input.tool_calls.len(),
            limits.max_calls_per_request
        );
        return GatewayError::new(ErrorCode::TooManyCalls, message).answer();
    }
    let entry = match find_server(identity, &input.server_name) {
        Ok(entry) => entry,
        Err(f) => return f.answer(),
    };
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let mut calls = ServerCalls::open(ctx, identity, session, entry, &provider);
    let mut results = Vec::with_capacity(input.tool_calls.len());
    for call in input.tool_calls {
        // Once the results gathered reach `max_response_bytes` the calls left are not run.
        if calls.built.bytes() >= limits.max_response_bytes as u64 {
            ctx.store.metrics().limit_hit("response_bytes");
            let message = format!(
                "not run: the results of this request reached {} bytes (limits.max_response_bytes)",
                limits.max_response_bytes
            );
            results.push(GatewayError::new(ErrorCode::ResponseTooLarge, message).answer());
            continue;
        }
        results.push(calls.call(call).await);
    }
    object([
        ("status", Value::from("success")),
        ("results", Value::Array(results)),
        (
            "metadata",
            json!({
                "server_name": entry.server_name,
                "execution_time_ms": started.elapsed().as_millis() as u64,
                "guardrails_applied": calls.guardrails_applied,
            }),
        ),
    ])
}

/// The calls of one request to one server, each through the same per-call pipeline: what they share (the server's
/// tools, its guardrails, how to start it) is looked up once. A `gw_secure_call_tools` batch runs its calls through
/// one; a transparent `tools/call` runs its one call through one (contract 8: exactly the pipeline of one item), and
/// so do a transparent `prompts/get` and `resources/read` ([`ServerCalls::relay`]).
pub struct ServerCalls<'a> {
    ctx: &'a GatewayContext,
    identity: &'a Identity,
    session: Option<&'a str>,
    entry: &'a ServerEntry,
    key: PoolKey,
    guardrails: GuardrailLayer<'a>,
    curation: Curation<'a>,
    /// The server's tools, or why they could not be found (shown in every call's result); found on the first call.
    known: Option<Result<DiscoveryResult, GatewayError>>,
    /// Made on the first call that reaches the upstream (it may need an OAuth token).
    spec: Option<ServerSpec>,
    /// Whether a guardrail policy applied to a call that ran (`metadata.guardrails_applied`).
    pub guardrails_applied: bool,
    /// Where the server's messages during a call go (transparent mode), and the token that cancels it.
    relay: Option<Relay>,
    /// The results gathered so far, counted against the key's results being built (contract 14) until dropped.
    built: Building,
    /// A task-augmented call (contract 15; transparent mode).
    task: Option<TaskAsk>,
    /// The authorization rule that allowed the call in progress (contract 17), for its audit record.
    decided_by: Option<String>,
    /// What the audit record of the call in progress keeps for the simulator: its target and caller.
    audit_fields: Option<policy::AuditFields>,
}

/// What one call of the per-call stack asks the upstream for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `tools/call` of the call's name with its arguments.
    CallTool,
    /// `prompts/get` of the call's name with its arguments.
    GetPrompt,
    /// `resources/read` of the call's name (a URI); no arguments.
    ReadResource,
}

impl<'a> ServerCalls<'a> {
    /// The calls to come to `entry`, under its guardrails.
    pub fn open(
        ctx: &'a GatewayContext,
        identity: &'a Identity,
        session: Option<&'a str>,
        entry: &'a ServerEntry,
        provider: &'a ProviderChoice,
    ) -> ServerCalls<'a> {
        // The per-call stack (its order is described in middleware/guardrails.rs): guardrails around the upstream call.
        let guardrails = GuardrailLayer::of(ctx, identity, entry, provider);
        let key = crate::gateway::user_secrets::pool_key(identity, entry);
        let curation = Curation::of(identity);
        ServerCalls {
            ctx,
            identity,
            session,
            entry,
            key,
            guardrails,
            curation,
            known: None,
            spec: None,
            guardrails_applied: false,
            relay: None,
            built: Building::new(&ctx.key_budgets, &identity.key_digest),
            task: None,
            decided_by: None,
            audit_fields: None,
        }
    }

    /// The server's tools as the caller just discovered them (a transparent call found its tool there).
    pub fn with_known(mut self, known: DiscoveryResult) -> ServerCalls<'a> {
        self.known = Some(Ok(known));
        self
    }

    /// The calls relay the server's messages to `relay`, and end when its token is cancelled.
    pub fn with_relay(mut self, relay: Option<Relay>) -> ServerCalls<'a> {
        self.relay = relay;
        self
    }

    /// The calls are task-augmented with `task` (contract 15).
    pub fn with_task(mut self, task: Option<TaskAsk>) -> ServerCalls<'a> {
        self.task = task;
        self
    }

    /// One tool call: its result object (`status` `success` with the upstream's `response`, `blocked`, or `error`),
    /// counted, logged and traced.
    pub async fn call(&mut self, call: ToolCall) -> Value {
        let started = Instant::now();
        let tool_name = call.name.clone();
        // The audit log keeps a keyed digest of the arguments, never the arguments (`None`: the log is off).
        let args_hmac =
            self.ctx.audit.enabled().then(|| self.ctx.audit.args_hmac(call.args.as_ref().unwrap_or(&Value::Null)));
        let args_bytes = call.args.as_ref().map_or(0, |args| json_size(args) as u64);
        let result = match self.check(&call.name, call.args.as_ref()).await {
            Ok(()) => self.upstream(Operation::CallTool, call).await,
            Err(refused) => Err(refused),
        };
        let (result, bytes) = self.gathered(result);
        record_upstream_call(self.ctx, &self.entry.server_name, &tool_name, started.elapsed(), &result);
        self.account(("tool_call", &tool_name), args_hmac, &result, args_bytes + bytes).await;
        result
    }

    /// A request other than a tool call through the same stack (transparent `prompts/get`, `resources/read`): its
    /// result object as [`ServerCalls::call`] gives it, the upstream's result in `response`.
    /// `definition` is the prompt or resource as listed, or the template a resource's URI matches (`None`: known by its
    /// URI only); the caller's authorization rules decide the request first, then its quotas count it (contract 17).
    pub async fn relay(&mut self, operation: Operation, call: ToolCall, definition: Option<&Value>) -> Value {
        let name = call.name.clone();
        // Audited like a tool call (contract 14): the prompt's name or the resource's URI, a keyed digest of the
        // prompt's arguments.
        let args_hmac =
            self.ctx.audit.enabled().then(|| self.ctx.audit.args_hmac(call.args.as_ref().unwrap_or(&Value::Null)));
        let args_bytes = call.args.as_ref().map_or(0, |args| json_size(args) as u64);
        let template = definition.is_some_and(|d| d.get("uriTemplate").is_some());
        let (kind, method, field) = match operation {
            Operation::GetPrompt => (policy::Kind::Prompt, "prompts/get", "name"),
            _ if template => (policy::Kind::Template, "resources/read", "uri"),
            _ => (policy::Kind::Resource, "resources/read", "uri"),
        };
        let minimal = serde_json::json!({field: name});
        let item = definition.unwrap_or(&minimal);
        let audited = args_hmac.is_some();
        let admitted = policy::check_call(self.identity, (kind, self.entry, item), method, call.args.as_ref(), audited);
        let result = match self.admit(admitted).await {
            Ok(()) => self.upstream(operation, call).await,
            Err(refused) => Err(refused),
        };
        let (result, bytes) = self.gathered(result);
        let event = if operation == Operation::GetPrompt { "prompt_get" } else { "resource_read" };
        self.account((event, &name), args_hmac, &result, args_bytes + bytes).await;
        result
    }

    /// What a call that ended leaves behind: its usage (contract 17) and, when the audit log is on (`args_hmac` is
    /// `Some`), its audit record with the rule that decided it.
    async fn account(
        &mut self,
        (event, name): (&str, &str),
        args_hmac: Option<Option<String>>,
        result: &Value,
        bytes: u64,
    ) {
        let rule = self.decided_by.take();
        let fields = self.audit_fields.take();
        let sample = Sample {
            project: &self.identity.project_id,
            user: &self.identity.user_id,
            server: &self.entry.server_name,
            tool: name,
            status: result.get("status").and_then(Value::as_str).unwrap_or("error"),
            error_code: result.get("error_code").and_then(Value::as_str),
            bytes,
        };
        self.ctx.meter.usage.record(&sample, self.ctx.meter.shared());
        if let Some(args_hmac) = args_hmac {
            let (target, principal) = fields.unzip();
            self.ctx
                .audit
                .record(audit::Event {
                    target,
                    principal,
                    ..call_event(self.identity, (event, self.entry, name), args_hmac, result, rule.as_deref())
                })
                .await;
        }
    }

    /// Whether tool `name` may be called with `args`: curation lets the caller see it, the server has it, the
    /// caller's authorization rules allow the call and its quotas have room (contract 17).
    async fn check(&mut self, name: &str, args: Option<&Value>) -> Result<(), GatewayError> {
        let server = &self.entry.server_name;
        if !self.curation.visible(self.entry, name) {
            let message = format!("tool {name:?} of server {server:?} is not allowed (tool_filter)");
            return Err(GatewayError::new(ErrorCode::ToolNotAllowed, message));
        }
        if self.known.is_none() {
            // A failed discovery is shown in every call's result: the upstream's words in it pass the output check
            // once.
            let known = match discover(self.ctx, self.identity, self.session, self.entry).await {
                // Boxed: the check of a failure's words is rare, and its future large.
                Err(failure) => Err(Box::pin(self.guardrails.upstream_error(failure)).await),
                found => found,
            };
            self.known = Some(known);
        }
        let found = match &self.known {
            Some(Ok(found)) => found,
            Some(Err(failure)) => return Err(failure.clone()),
            None => return Err(GatewayError::new(ErrorCode::UpstreamError, "the server's tools were not discovered")),
        };
        let Some(tool) = found.tools.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(name)) else {
            if found.quarantined.iter().any(|q| q == name) {
                let why = format!("tool {name:?} of server {server:?} is quarantined: its definition is under review");
                return Err(GatewayError::new(ErrorCode::ToolQuarantined, why));
            }
            return Err(GatewayError::new(ErrorCode::ToolNotFound, format!("server {server:?} has no tool {name:?}")));
        };
        let audited = self.ctx.audit.enabled();
        let target = (policy::Kind::Tool, self.entry, tool);
        let admitted = policy::check_call(self.identity, target, "tools/call", args, audited);
        self.admit(admitted).await
    }

    /// A call the rules decided on: denied, or counted against its quotas (`QUOTA_EXCEEDED` when one has no room).
    async fn admit(&mut self, admitted: policy::Admitted) -> Result<(), GatewayError> {
        self.audit_fields = admitted.audit;
        if let Some(denied) = admitted.denied {
            return Err(denied);
        }
        self.decided_by = admitted.rule;
        let Err(over) = self.ctx.meter.admit(&admitted.charges).await else { return Ok(()) };
        self.ctx.store.metrics().quota_rejections.with_label_values(&[&over.quota]).inc();
        let seconds = over.retry_after_seconds();
        tracing::info!(key_id = %self.identity.key_id, quota = %over.quota, retry_after_seconds = seconds,
            "call refused: a quota has no room");
        let message = format!("quota {:?} has no room for this call; try again in {seconds} s", over.quota);
        Err(GatewayError::new(ErrorCode::QuotaExceeded, message)
            .with("quota", over.quota)
            .with("retry_after_seconds", seconds)
            .retry_after(seconds))
    }

    /// A call's result object and its size, counted against the key's results being built.
    fn gathered(&mut self, result: Result<Value, GatewayError>) -> (Value, u64) {
        let result = result.unwrap_or_else(|f| f.answer());
        let bytes = json_size(&result) as u64;
        self.built.add(bytes);
        (result, bytes)
    }

    /// The call through the guardrails to the upstream, traced; not run while the key's results being built or its
    /// answers not taken are over their budget (contract 14).
    async fn upstream(&mut self, operation: Operation, call: ToolCall) -> Result<Value, GatewayError> {
        let limits = &self.identity.snapshot.settings.limits;
        if let Err(over) = self.ctx.key_budgets.may_build(&self.identity.key_digest, limits) {
            self.ctx.store.metrics().limit_hit(over.label());
            return Err(budgets::refusal(over, limits));
        }
        let spec = match self.spec.take() {
            Some(spec) => spec,
            None => upstream_spec(self.ctx, self.identity, self.entry).await?,
        };
        self.guardrails_applied |= self.guardrails.applies();
        let spec = &*self.spec.insert(spec);
        let (ctx, identity, session, key) = (self.ctx, self.identity, self.session, &self.key);
        let upstream = UpstreamService { ctx, identity, session, key, spec, operation };
        let (server, tool, project) = (&self.entry.server_name, call.name.clone(), &self.identity.project_id);
        let transport = spec.transport();
        let stack = self.guardrails.layer(upstream);
        let (relay, task) = (self.relay.clone(), self.task.clone());
        spans::tool_execution(server, &tool, project, transport, guarded_call(stack, call, relay, task)).await
    }
}

/// The audit record of one call of an upstream (a tool call, a prompt, a resource, a completion): who, what
/// (`event`, server, tool, prompt or URI), a keyed digest of the arguments, how it ended (the result object's
/// `status` and `error_code`), and whose credentials the server's calls carry (contract 16).
pub async fn audit_call(
    ctx: &GatewayContext,
    identity: &Identity,
    what: (&str, &ServerEntry, &str),
    args_hmac: Option<String>,
    result: &Value,
    rule: Option<&str>,
) {
    ctx.audit.record(call_event(identity, what, args_hmac, result, rule)).await;
}

/// The audit record of a call of `name` of `entry` (`event`: `tool_call`, …) whose result is `result`.
fn call_event<'a>(
    identity: &'a Identity,
    (event, entry, name): (&'a str, &'a ServerEntry, &'a str),
    args_hmac: Option<String>,
    result: &'a Value,
    rule: Option<&'a str>,
) -> audit::Event<'a> {
    // The rule that allowed the call, or the one that denied it (named in the POLICY_DENIED answer).
    let policy_rule = rule.or_else(|| result.get("rule").and_then(Value::as_str));
    audit::Event {
        event,
        project_id: Some(&identity.project_id),
        user_id: Some(&identity.user_id),
        key_id: Some(&identity.key_id),
        server_name: Some(&entry.server_name),
        tool_name: Some(name),
        credential: Some(entry.credential_kind()),
        args_hmac,
        outcome: result.get("status").and_then(Value::as_str),
        error_code: result.get("error_code").and_then(Value::as_str),
        config_revision: Some(audit::revision(&identity.snapshot.source_digest)),
        policy_rule,
        ..Default::default()
    }
}

/// About the bytes `value` takes as JSON text (strings and keys by their length; no escapes counted): what a result
/// costs the answer, without writing it out.
pub fn json_size(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(json_size).fold(2, |sum, n| sum.saturating_add(n + 1)),
        Value::Object(map) => map.iter().fold(2, |sum, (k, v)| sum.saturating_add(k.len() + 4 + json_size(v))),
    }
}

/// Metrics and the log record of one call of a batch.
fn record_upstream_call(ctx: &GatewayContext, server_name: &str, tool_name: &str, took: Duration, result: &Value) {
    let outcome = super::outcome(result);
    ctx.store.metrics().upstream_calls.with_label_values(&[outcome]).inc();
    let success = outcome == "success";
    let error_type = (!success).then_some(outcome);
    tracing::info!(
        server_name,
        tool_name,
        duration_ms = took.as_millis() as u64,
        success,
        error_type,
        "upstream tool call"
    );
}

/// One call through the per-call stack: a blocked result, a failure, or the upstream's (restored) response.
///
/// Boxed here, where the stack's lifetime is a named one, so that the callers' futures stay `Send` (rustc cannot prove
/// the stack's `S: 'a` bound for the anonymous lifetimes of an enclosing `async fn`).
fn guarded_call<'a>(
    mut stack: Guardrails<'a, UpstreamService<'a>>,
    call: ToolCall,
    relay: Option<Relay>,
    task: Option<TaskAsk>,
) -> BoxFuture<'a, Result<Value, GatewayError>> {
    Box::pin(async move {
        let args = match call.args {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(GatewayError::new(ErrorCode::InvalidArguments, "args must be an object")),
        };
        std::future::poll_fn(|cx| stack.poll_ready(cx)).await?;
        Ok(match stack.call(UpstreamCall { tool: call.name.clone(), args, relay, task }).await? {
            CallOutcome::Completed(response) => {
                object([("status", "success".into()), ("tool_name", call.name.into()), ("response", response)])
            }
            CallOutcome::Blocked(result) => result,
        })
    })
}

/// The innermost service of the per-call stack: the upstream call in a pooled process under `tool_execution_timeout`
/// (the pool enforces the limit and kills a hung process; the timer here is a backstop just behind it).
#[derive(Clone, Copy)]
struct UpstreamService<'a> {
    ctx: &'a GatewayContext,
    identity: &'a Identity,
    session: Option<&'a str>,
    key: &'a PoolKey,
    spec: &'a ServerSpec,
    operation: Operation,
}

impl<'a> Service<UpstreamCall> for UpstreamService<'a> {
    type Response = Value;
    type Error = GatewayError;
    type Future = BoxFuture<'a, Result<Value, GatewayError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: UpstreamCall) -> Self::Future {
        let this = *self;
        // One boxed future per operation (see `FastToolCall::call`): a tool call's future stays the size of its own.
        match this.operation {
            Operation::CallTool => {
                Box::pin(async move { run_call(this, &call.tool, call.args, call.relay.as_ref(), call.task).await })
            }
            operation => Box::pin(relay(this, operation, call)),
        }
    }
}

/// The upstream call itself: its `CallToolResult` as JSON.
async fn run_call(
    upstream: UpstreamService<'_>,
    tool: &str,
    args: Map<String, Value>,
    relay: Option<&Relay>,
    task: Option<TaskAsk>,
) -> Result<Value, GatewayError> {
    let UpstreamService { ctx, identity, session, key, spec, .. } = upstream;
    let settings = &identity.snapshot.settings;
    let limit = settings.timeouts.tool_execution;
    if let Some(task) = task {
        // Creating the task is bounded by the call's timeout; the task's own run is not (`limits.max_task_seconds`).
        let caller = ctx.caller(identity, session, spec);
        let created = ctx.pool.call_tool_task(key, spec, caller, tool, args, &task.meta, limit, relay);
        let (result, held) = ctx
            .timeouts
            .of(identity.mcp_config_id.as_deref())
            .run_classified(TimeoutKind::ToolExecution, limit + settings.start_timeout + TIMEOUT_MARGIN, created, |r| {
                matches!(r, Err(UpstreamError::Timeout(_)))
            })
            .await
            .map_err(|_| GatewayError::new(ErrorCode::Timeout, crate::timeouts::TimedOut(limit).to_string()))?
            .map_err(|e| upstream_failure(ctx, &e))?;
        *crate::upstream::lock(&task.held) = held;
        return Ok(result);
    }
    // The pool enforces `limit` on the server's work; waiting for a process start is bounded by the start timeout.
    ctx.timeouts
        .of(identity.mcp_config_id.as_deref())
        .run_classified(
            TimeoutKind::ToolExecution,
            limit + settings.start_timeout + TIMEOUT_MARGIN,
            ctx.pool.call_tool(key, spec, ctx.caller(identity, session, spec), tool, args, limit, relay),
            |r| matches!(r, Err(UpstreamError::Timeout(_))),
        )
        .await
        .map_err(|_| GatewayError::new(ErrorCode::Timeout, crate::timeouts::TimedOut(limit).to_string()))?
        .map_err(|e| upstream_failure(ctx, &e))
}

/// A transparent `prompts/get` or `resources/read` on a pooled process, under `tool_execution_timeout` as a tool
/// call is.
async fn relay(upstream: UpstreamService<'_>, operation: Operation, call: UpstreamCall) -> Result<Value, GatewayError> {
    let UpstreamService { ctx, identity, session, key, spec, .. } = upstream;
    let relay = call.relay.as_ref();
    let (method, params): (&str, Value) = match operation {
        Operation::GetPrompt => {
            ("prompts/get", object([("name", call.tool.into()), ("arguments", Value::Object(call.args))]))
        }
        Operation::ReadResource | Operation::CallTool => ("resources/read", object([("uri", call.tool.into())])),
    };
    let declared = move |c: &rmcp::model::ServerCapabilities| match operation {
        Operation::GetPrompt => c.prompts.is_some(),
        _ => c.resources.is_some(),
    };
    let settings = &identity.snapshot.settings;
    let limit = settings.timeouts.tool_execution;
    let answered = ctx
        .timeouts
        .of(identity.mcp_config_id.as_deref())
        .run_classified(
            TimeoutKind::ToolExecution,
            limit + settings.start_timeout + TIMEOUT_MARGIN,
            ctx.pool.request(key, spec, ctx.caller(identity, session, spec), method, params, limit, declared, relay),
            |r| matches!(r, Err(UpstreamError::Timeout(_))),
        )
        .await
        .map_err(|_| GatewayError::new(ErrorCode::Timeout, crate::timeouts::TimedOut(limit).to_string()))?
        .map_err(|e| upstream_failure(ctx, &e))?;
    answered.ok_or_else(|| GatewayError::new(ErrorCode::UpstreamError, format!("the server does not serve {method}")))
}
