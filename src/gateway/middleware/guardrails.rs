//! The guardrail stage as a tower layer on the per-call stack (one upstream tool call of `gw_secure_call_tools`).
//!
//! The per-call stack, outermost first (the order is written down once, here; `gateway/tools/execute.rs` builds it):
//! 1. [`Guardrails`]: input check and PII redaction of the arguments; a blocked call ends here with its blocked result
//!    and never reaches the upstream. After the inner service answers: output check, relevancy and adherence, then
//!    restoring the redacted data; when it fails with an error that carries the upstream's text, that text is cut to
//!    1 KiB and checked in turn (withheld if blocked). Guardrails sit outside the timeout so that their own
//!    `guardrail_timeout` is not charged to the upstream's `tool_execution_timeout`, and outside the upstream so that
//!    redaction happens before anything leaves the gateway.
//! 2. The upstream call under `tool_execution_timeout` in a pooled process (`execute.rs`'s `UpstreamService`).
//!
//! A service of this stack takes an [`UpstreamCall`] and answers a [`CallOutcome`]; a [`GatewayError`] (upstream error,
//! timeout) is the call's error result. The guard of one call (its PII mapping included) lives in that call's future
//! only.

use std::task::{Context, Poll};

use futures_util::future::BoxFuture;
use prometheus::IntCounterVec;
use serde_json::{Map, Value};
use tower::{Layer, Service};

use crate::auth::Identity;
use crate::config::model::{GuardrailPolicy, ServerEntry};
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::boundary::relayed;
use crate::guardrails::provider::ProviderChoice;
use crate::guardrails::stage::{CallGuard, GuardSettings, KeptMapping};
use crate::timeouts::TimeoutMetrics;
use crate::upstream::TaskHold;
use crate::upstream::relay::Relay;
use std::sync::{Arc, Mutex};

/// One upstream tool call.
#[derive(Debug, Clone)]
pub struct UpstreamCall {
    pub tool: String,
    pub args: Map<String, Value>,
    /// Where the upstream's messages during the call go (transparent mode), and the token that cancels it.
    pub relay: Option<Relay>,
    /// A task-augmented call (contract 15): what is sent upstream, and where the task's process and PII mapping go.
    pub task: Option<TaskAsk>,
}

/// A task-augmented call: the task metadata sent upstream with it (`{"ttl": ms}`), and, when the upstream answers
/// with a task, the hold on the process that runs it and the call's PII mapping (to restore the task's result).
#[derive(Debug, Clone, Default)]
pub struct TaskAsk {
    pub meta: Value,
    pub held: Arc<Mutex<Option<TaskHold>>>,
    pub mapping: Arc<Mutex<Option<KeptMapping>>>,
}

impl TaskAsk {
    /// Whether the upstream answered with a task (its process is held).
    pub fn created(&self) -> bool {
        crate::upstream::lock(&self.held).is_some()
    }
}

/// What a call came to: the upstream's response (restored), or the result of a call the guardrails stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    Completed(Value),
    Blocked(Value),
}

/// The guardrails of one server, for every call of a batch.
#[derive(Clone, Copy)]
pub struct GuardrailLayer<'a> {
    pub provider: &'a ProviderChoice,
    pub input: Option<&'a GuardrailPolicy>,
    pub output: Option<&'a GuardrailPolicy>,
    pub settings: GuardSettings,
    pub timeouts: &'a TimeoutMetrics,
    pub blocks: &'a IntCounterVec,
    pub server_name: &'a str,
}

impl<'a> GuardrailLayer<'a> {
    /// The guardrails of `entry`'s server for `identity`'s calls (and listings) with `provider`.
    pub fn of(
        ctx: &'a GatewayContext,
        identity: &'a Identity,
        entry: &'a ServerEntry,
        provider: &'a ProviderChoice,
    ) -> GuardrailLayer<'a> {
        let settings = &identity.snapshot.settings;
        GuardrailLayer {
            provider,
            input: entry.input_guardrails_policy.as_ref(),
            output: entry.output_guardrails_policy.as_ref(),
            settings: GuardSettings {
                timeout: settings.timeouts.guardrail,
                relevancy_threshold: settings.relevancy_threshold,
                adherence_threshold: settings.adherence_threshold,
            },
            timeouts: ctx.timeouts.of(identity.mcp_config_id.as_deref()),
            blocks: &ctx.store.metrics().guardrail_blocks,
            server_name: &entry.server_name,
        }
    }

    /// Whether any guardrail applies (`metadata.guardrails_applied`).
    pub fn applies(&self) -> bool {
        self.input.is_some_and(GuardrailPolicy::is_enabled) || self.output.is_some_and(GuardrailPolicy::is_enabled)
    }

    /// An error of this server met outside a call (its tool discovery failed) as a call's result may show it: when it
    /// carries the upstream's text, cut and checked as in a call ([`CallGuard::check_upstream_error`]).
    pub async fn upstream_error(&self, error: GatewayError) -> GatewayError {
        if from_upstream(&error) { self.guard().check_upstream_error(error).await } else { error }
    }

    /// The guard of one call (or one listing): it holds that call's PII mapping.
    pub fn guard(&self) -> CallGuard<'a> {
        CallGuard::new(
            self.provider,
            self.input,
            self.output,
            self.settings,
            self.timeouts,
            self.blocks,
            self.server_name,
        )
    }
}

impl<'a, S> Layer<S> for GuardrailLayer<'a> {
    type Service = Guardrails<'a, S>;
    fn layer(&self, inner: S) -> Guardrails<'a, S> {
        Guardrails { inner, layer: *self }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct Guardrails<'a, S> {
    inner: S,
    layer: GuardrailLayer<'a>,
}

impl<'a, S> Service<UpstreamCall> for Guardrails<'a, S>
where
    S: Service<UpstreamCall, Response = Value, Error = GatewayError> + Clone + Send + 'a,
    S::Future: Send + 'a,
{
    type Response = CallOutcome;
    type Error = GatewayError;
    type Future = BoxFuture<'a, Result<CallOutcome, GatewayError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), GatewayError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: UpstreamCall) -> Self::Future {
        let mut inner = self.inner.clone();
        let layer = self.layer;
        Box::pin(async move {
            let mut guard = layer.guard();
            let args = if !guard.checks_input() {
                call.args
            } else {
                // Boxed: the checks' futures are large (a remote provider's call), and this future is boxed per call.
                match Box::pin(guard.check_input(call.args)).await {
                    Ok(args) => args,
                    Err(blocked) => return Ok(CallOutcome::Blocked(blocked)),
                }
            };
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            // The output checks see the call as the upstream saw it; without output checks no copy is kept.
            let kept = guard.checks_output().then(|| (call.tool.clone(), args.clone()));
            // What the upstream sends during the call passes the same guard on its way (the boundary's pump), when
            // the server has a policy; otherwise the relay is the caller's own.
            let answered = match call.relay {
                Some(outer) if guard.checks_input() || guard.checks_output() => {
                    let (relay, messages) = relayed::interpose(&outer);
                    let cancel = relay.cancel.clone();
                    let task = call.task.clone();
                    let upstream = inner.call(UpstreamCall { tool: call.tool, args, relay: Some(relay), task });
                    match Box::pin(relayed::pump(&mut guard, upstream, messages, &outer, &cancel)).await {
                        Ok(answered) => answered,
                        Err(blocked) => return Ok(CallOutcome::Blocked(blocked)),
                    }
                }
                relay => inner.call(UpstreamCall { tool: call.tool, args, relay, task: call.task.clone() }).await,
            };
            let response = match answered {
                Ok(response) => response,
                // The upstream's own words (a JSON-RPC error, a failed start) are output too (contract 13).
                Err(error) if from_upstream(&error) => return Err(Box::pin(guard.check_upstream_error(error)).await),
                Err(error) => return Err(error),
            };
            let outcome = match kept {
                None => CallOutcome::Completed(response),
                Some((tool, args)) => match Box::pin(guard.check_output(&tool, &args, response)).await {
                    Ok(response) => CallOutcome::Completed(response),
                    Err(blocked) => CallOutcome::Blocked(blocked),
                },
            };
            // A task's final result comes later: it is restored with this call's mapping.
            if let Some(task) = call.task.as_ref().filter(|task| task.created()) {
                *crate::upstream::lock(&task.mapping) = guard.keep_mapping();
            }
            Ok(outcome)
        })
    }
}

/// Whether `error` may carry text the upstream wrote (a JSON-RPC error's message, a failed start's answer); the other
/// errors of an upstream call (timeouts, a reply over the limit) are the gateway's own words.
fn from_upstream(error: &GatewayError) -> bool {
    matches!(error.code, ErrorCode::UpstreamError | ErrorCode::UpstreamUnavailable)
}
