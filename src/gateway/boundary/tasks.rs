//! A task's messages through the boundary (contracts 14 and 15). A task-augmented `tools/call` itself runs the
//! per-call stack as any call does; what comes later about the task crosses here, on every request that names it:
//!
//! - curation: a task of a tool the caller may no longer see (a filter changed since) is unknown ([`visible`]);
//! - upstream to client: the task's status message, its outstanding questions and its failure pass the output
//!   guardrails ([`TaskBoundary::status`]); its final result passes them as a call's result does, with the PII mapping
//!   of the call that created the task restored ([`TaskBoundary::result`]);
//! - client to upstream: the answers of `tasks/update` pass the input guardrails with redaction
//!   ([`TaskBoundary::answers`]);
//! - a task's result counts against its key's results being built (`max_response_bytes`, contract 14) until its
//!   answer is ready, and is not fetched while the key is over that budget ([`TaskBoundary::may_build`]);
//! - every request about a task is audited ([`audit`]).

use serde_json::{Map, Value};

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::GatewayError;
use crate::gateway::GatewayContext;
use crate::gateway::exposure::filter::Curation;
use crate::gateway::middleware::budgets::{self, Building};
use crate::gateway::middleware::guardrails::GuardrailLayer;
use crate::gateway::tools::{audit_call, json_size};
use crate::guardrails::provider::ProviderChoice;
use crate::guardrails::stage::{CallGuard, KeptMapping};

/// Whether the caller may still see `upstream_tool` of `entry`'s server (the tool its task runs).
pub fn visible(identity: &Identity, entry: &ServerEntry, upstream_tool: &str) -> bool {
    Curation::of(identity).visible(entry, upstream_tool)
}

/// The guard of one request about a task.
pub struct TaskBoundary<'a> {
    guard: CallGuard<'a>,
    built: Building,
    ctx: &'a GatewayContext,
    identity: &'a Identity,
}

impl<'a> TaskBoundary<'a> {
    /// The guardrails of `entry`'s server for `identity`, restoring with `kept` (the creating call's PII mapping).
    pub fn open(
        ctx: &'a GatewayContext,
        identity: &'a Identity,
        entry: &'a ServerEntry,
        provider: &'a ProviderChoice,
        kept: Option<KeptMapping>,
    ) -> TaskBoundary<'a> {
        let guard = GuardrailLayer::of(ctx, identity, entry, provider).guard().with_mapping(kept);
        TaskBoundary { guard, built: Building::new(&ctx.key_budgets, &identity.key_digest), ctx, identity }
    }

    /// Whether a result may be fetched for the key now (its results being built and answers not taken under their
    /// budgets); `Err` is the refusal.
    pub fn may_build(&self) -> Result<(), GatewayError> {
        let limits = &self.identity.snapshot.settings.limits;
        self.ctx.key_budgets.may_build(&self.identity.key_digest, limits).map_err(|over| {
            self.ctx.store.metrics().limit_hit(over.label());
            budgets::refusal(over, limits)
        })
    }

    /// The task's final result (the `CallToolResult` of tool `tool`) as the client may see it; `Err` is the blocked
    /// answer object (section 4), for the envelope.
    pub async fn result(&mut self, tool: &str, result: Value) -> Result<Value, Value> {
        self.built.add(json_size(&result) as u64);
        Box::pin(self.guard.check_output(tool, &Map::new(), result)).await
    }

    /// Anything else of the upstream's about the task (status message, questions, failure) as the client may see it;
    /// `Err`: blocked, not delivered.
    pub async fn status(&self, value: Value) -> Result<Value, Value> {
        Box::pin(self.guard.check_relayed(value)).await
    }

    /// The client's answers to the task's questions as the upstream may see them (redacted); `Err`: blocked.
    pub async fn answers(&mut self, answers: Value) -> Result<Value, Value> {
        Box::pin(self.guard.check_answer(answers)).await
    }

    /// The PII mapping, for the next request about the task.
    pub fn close(mut self) -> Option<KeptMapping> {
        self.guard.keep_mapping()
    }
}

/// The audit record of a request about a task: `event` (`task_get`, `task_result`, `task_cancel`, `task_update`), the
/// server and the task's tool, and how it ended (`outcome`'s `status` and `error_code`).
pub async fn audit(
    ctx: &GatewayContext,
    identity: &Identity,
    event: &str,
    entry: &ServerEntry,
    tool: &str,
    outcome: &Value,
) {
    if ctx.audit.enabled() {
        audit_call(ctx, identity, (event, entry, tool), None, outcome, None).await;
    }
}
