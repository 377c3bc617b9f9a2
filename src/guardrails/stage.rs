//! The guardrail checks of one upstream tool call, in the spec's order (4.1, contract 5); the tower layer that runs
//! them around the upstream call is `gateway/middleware/guardrails.rs`:
//!
//! 1. [`CallGuard::check_input`]: PII redaction of the arguments (built in, or the `gw` provider's PII endpoint),
//!    then the input policy check of the arguments' JSON (the provider, plus the policy's own `blocked_keywords`).
//!    The check sees the redacted text, so personal data never leaves the gateway for a check either.
//! 2. the upstream call (the layer's inner service);
//! 3. [`CallGuard::check_output`]: the output policy check of every string of the upstream's answer (`strings.rs`:
//!    content items of every kind, `structuredContent`, `_meta`, annotations, unknown fields), then relevancy,
//!    adherence and hallucination (`gw` only), then restoring the redacted data in every one of those strings.
//!    [`CallGuard::check_upstream_error`] does the same for an upstream error's message, first cut to 1 KiB; a
//!    message the check blocks is withheld (contract 13).
//!
//! Policy checks fail closed: a provider that errs or exceeds `guardrail_timeout` blocks the call with
//! `GUARDRAIL_UNAVAILABLE`. Relevancy, adherence and hallucination fail open. Every violation is logged with
//! `violation_type`, `detector` and `blocked`; the PII mapping lives in the guard, for this call only, and is never
//! logged.

use std::time::Duration;

use prometheus::IntCounterVec;
use serde_json::{Map, Value, json};

use super::keyword::KeywordMatcher;
use super::pii::PiiVault;
use super::provider::{Provider, ProviderChoice, string_list};
use super::remote::RemoteGuardrails;
use super::strings::{self, UPSTREAM_ERROR_LIMIT};
use super::{GuardrailError, Mode, Violation};
use crate::config::model::GuardrailPolicy;
use crate::error::{ErrorCode, GatewayError};
use crate::telemetry::spans;
use crate::timeouts::{TimeoutKind, TimeoutMetrics};

/// The thresholds and limits a guard works with.
#[derive(Debug, Clone, Copy)]
pub struct GuardSettings {
    pub timeout: Duration,
    pub relevancy_threshold: f64,
    pub adherence_threshold: f64,
}

/// A call's PII mapping kept beyond the call: the final result of a task it created is restored with it.
pub struct KeptMapping {
    vault: PiiVault,
    remote_pii_key: Option<String>,
}

impl std::fmt::Debug for KeptMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptMapping")
    }
}

/// The guardrails of one call. Built per call; holds the call's PII mapping.
pub struct CallGuard<'a> {
    provider: &'a ProviderChoice,
    input: Option<&'a GuardrailPolicy>,
    output: Option<&'a GuardrailPolicy>,
    settings: GuardSettings,
    timeouts: &'a TimeoutMetrics,
    blocks: &'a IntCounterVec,
    server_name: &'a str,
    vault: PiiVault,
    remote_pii_key: Option<String>,
    redacted: bool,
    /// While set, a blocked check is neither counted nor logged ([`CallGuard::quietly`]).
    quiet: std::sync::atomic::AtomicBool,
}

fn flag(policy: &GuardrailPolicy, name: &str) -> bool {
    policy.additional_config.as_ref().and_then(|c| c.get(name)).and_then(Value::as_bool).unwrap_or(false)
}

/// What the client gets instead of an upstream error's message that the output check blocked (contract 13).
pub const WITHHELD_UPSTREAM_ERROR: &str = "upstream error (message withheld by guardrails)";

fn stage_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Prompt => "input",
        Mode::Response => "output",
    }
}

fn blocked(mode: Mode, violations: &[Violation]) -> Value {
    let message = match mode {
        Mode::Prompt => "request blocked by guardrails",
        Mode::Response => "response blocked by guardrails",
    };
    let violations = serde_json::to_value(violations).unwrap_or_default();
    GatewayError::new(ErrorCode::GuardrailViolation, message)
        .blocked()
        .with("stage", stage_name(mode))
        .with("violations", violations)
        .answer()
}

fn unavailable(mode: Mode, error: &GuardrailError) -> Value {
    tracing::warn!(stage = stage_name(mode), error = %error, "guardrail provider unavailable; call blocked");
    GatewayError::new(ErrorCode::GuardrailUnavailable, format!("guardrail check unavailable: {error}"))
        .blocked()
        .with("stage", stage_name(mode))
        .answer()
}

impl<'a> CallGuard<'a> {
    pub fn new(
        provider: &'a ProviderChoice,
        input: Option<&'a GuardrailPolicy>,
        output: Option<&'a GuardrailPolicy>,
        settings: GuardSettings,
        timeouts: &'a TimeoutMetrics,
        blocks: &'a IntCounterVec,
        server_name: &'a str,
    ) -> CallGuard<'a> {
        CallGuard {
            provider,
            input: input.filter(|p| p.is_enabled()),
            output: output.filter(|p| p.is_enabled()),
            settings,
            timeouts,
            blocks,
            server_name,
            vault: PiiVault::new(),
            remote_pii_key: None,
            redacted: false,
            quiet: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The call's PII mapping, when its arguments were redacted (taken out: the guard restores nothing more).
    pub fn keep_mapping(&mut self) -> Option<KeptMapping> {
        if !std::mem::take(&mut self.redacted) {
            return None;
        }
        Some(KeptMapping { vault: std::mem::take(&mut self.vault), remote_pii_key: self.remote_pii_key.take() })
    }

    /// This guard restores with `kept` (the mapping of the call that created a task).
    pub fn with_mapping(mut self, kept: Option<KeptMapping>) -> CallGuard<'a> {
        if let Some(kept) = kept {
            (self.vault, self.remote_pii_key, self.redacted) = (kept.vault, kept.remote_pii_key, true);
        }
        self
    }

    /// From now on (`true`) or again (`false`), blocked checks are neither counted nor logged: a listing blocked as a
    /// whole is narrowed down by further checks of its parts, and counts (and logs) once.
    pub fn quietly(&self, quiet: bool) {
        self.quiet.store(quiet, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_quiet(&self) -> bool {
        self.quiet.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A provider call under `guardrail_timeout`.
    async fn bounded<T>(&self, op: impl Future<Output = Result<T, GuardrailError>>) -> Result<T, GuardrailError> {
        // The provider's client enforces the same limit itself; its timeout counts as one too.
        let timed_out_inside = |r: &Result<T, GuardrailError>| matches!(r, Err(GuardrailError::Timeout));
        match self.timeouts.run_classified(TimeoutKind::Guardrail, self.settings.timeout, op, timed_out_inside).await {
            Ok(result) => result,
            Err(_) => Err(GuardrailError::Timeout),
        }
    }

    fn log(&self, mode: Mode, violations: &[Violation], blocked: bool) {
        if self.is_quiet() {
            return;
        }
        for v in violations {
            tracing::warn!(
                server_name = self.server_name,
                stage = stage_name(mode),
                violation_type = %v.kind,
                detector = %v.detector,
                blocked,
                "guardrail violation"
            );
        }
    }

    /// The policy check of `text`: provider plus the policy's own keywords. On input, `arguments` are the arguments
    /// `text` is the JSON of, for the keyword checks. `Err` is the call's blocked result. Traced as a
    /// `guardrail_check` span.
    async fn policy_check(
        &self,
        policy: &GuardrailPolicy,
        mode: Mode,
        text: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<(), Value> {
        let detector = self.provider.as_ref().map_or("unavailable", |p| p.name());
        let check = self.policy_check_untraced(policy, mode, text, arguments);
        spans::guardrail_check(stage_name(mode), detector, check).await
    }

    async fn policy_check_untraced(
        &self,
        policy: &GuardrailPolicy,
        mode: Mode,
        text: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<(), Value> {
        let provider = match self.provider {
            Ok(provider) => provider,
            Err(e) => return Err(self.count(mode, "unavailable", unavailable(mode, e))),
        };
        let name = policy.policy_name.as_deref().unwrap_or("default");
        let block = policy.block.clone().unwrap_or_default();
        let mut violations = self
            .bounded(provider.check(name, mode, text, arguments, &block))
            .await
            .map_err(|e| self.count(mode, "unavailable", unavailable(mode, &e)))?;
        let extra = string_list(policy.additional_config.as_ref().and_then(|c| c.get("blocked_keywords")));
        if !extra.is_empty() {
            violations.extend(KeywordMatcher::new(extra).check(text, arguments));
        }
        if violations.is_empty() {
            return Ok(());
        }
        self.log(mode, &violations, true);
        let detector = violations.first().map(|v| v.detector.as_str()).unwrap_or("unknown");
        let detector = if detector == provider.name() { provider.name() } else { "custom_keyword" };
        Err(self.count(mode, detector, blocked(mode, &violations)))
    }

    /// Counts a blocked call (`mcpgw_guardrail_blocks_total`) and passes its result on.
    fn count(&self, mode: Mode, detector: &str, result: Value) -> Value {
        if !self.is_quiet() {
            self.blocks.with_label_values(&[stage_name(mode), detector]).inc();
        }
        result
    }

    fn remote(&self) -> Option<&'a RemoteGuardrails> {
        self.provider.as_ref().ok().and_then(Provider::remote)
    }

    /// Input stage: the arguments the upstream will see, or the call's blocked result.
    /// Whether [`CallGuard::check_input`] has anything to do (an input policy); the callers skip building its future
    /// (which is large: it holds a remote provider's call) when it has not.
    pub fn checks_input(&self) -> bool {
        self.input.is_some()
    }

    /// Whether [`CallGuard::check_output`] has anything to do (an output policy, or redacted data to restore).
    pub fn checks_output(&self) -> bool {
        self.output.is_some() || self.redacted
    }

    pub async fn check_input(&mut self, args: Map<String, Value>) -> Result<Map<String, Value>, Value> {
        let Some(policy) = self.input else { return Ok(args) };
        let mut args = args;
        if flag(policy, "pii_redaction") {
            args = self.redact(args).await?;
        }
        let text = Value::Object(args.clone()).to_string();
        self.policy_check(policy, Mode::Prompt, &text, Some(&args)).await?;
        Ok(args)
    }

    async fn redact(&mut self, args: Map<String, Value>) -> Result<Map<String, Value>, Value> {
        self.redacted = true;
        if let Some(remote) = self.remote() {
            let text = Value::Object(args).to_string();
            let answer =
                self.bounded(remote.pii(&text, Mode::Prompt, None)).await.map_err(|e| unavailable(Mode::Prompt, &e))?;
            self.remote_pii_key = answer.key;
            return match serde_json::from_str(&answer.text) {
                Ok(Value::Object(map)) => Ok(map),
                _ => Err(unavailable(
                    Mode::Prompt,
                    &GuardrailError::BadAnswer("redacted arguments are not a JSON object".into()),
                )),
            };
        }
        let redacted = match self.vault.redact_value(&Value::Object(args)) {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        if !self.vault.is_empty() {
            self.log(Mode::Prompt, &self.vault.violations(), false);
        }
        Ok(redacted)
    }

    /// Output stage: the response the client gets (redacted data restored), or the call's result when it is blocked
    /// or fails a relevancy or adherence check. `tool` and `args` describe the call (as the upstream saw it).
    pub async fn check_output(&self, tool: &str, args: &Map<String, Value>, response: Value) -> Result<Value, Value> {
        if let Some(policy) = self.output {
            // Every string the client would receive, wherever the upstream put it, is one text to check.
            let text = strings::joined(&response);
            self.policy_check(policy, Mode::Response, &text, None).await?;
            self.quality_checks(policy, tool, args, &text).await?;
        }
        // Without redacted data there is nothing to restore: no future to build (it would hold a remote call's).
        if !self.redacted {
            return Ok(response);
        }
        Ok(self.restore(response).await)
    }

    /// The upstream error `error` as the client may see it: its message cut to 1 KiB (on a character boundary), checked
    /// by the output policy, redacted data restored. A message the check blocks, or cannot check (a provider that
    /// fails, as policy checks do, closed), is replaced by [`WITHHELD_UPSTREAM_ERROR`]; the error's code stays.
    pub async fn check_upstream_error(&self, mut error: GatewayError) -> GatewayError {
        strings::cut(&mut error.message, UPSTREAM_ERROR_LIMIT);
        if let Some(policy) = self.output
            && self.policy_check(policy, Mode::Response, &error.message, None).await.is_err()
        {
            error.message = WITHHELD_UPSTREAM_ERROR.to_owned();
            return error;
        }
        if self.redacted {
            error.message = self.restore_text(std::mem::take(&mut error.message)).await;
            strings::cut(&mut error.message, UPSTREAM_ERROR_LIMIT);
        }
        error
    }

    /// A message the upstream sends during the call besides its answer (a notification, a request for the client),
    /// as the client may see it (contract 14): every string checked by the output policy, redacted data restored.
    /// `Err` is the call's blocked result: the message is not delivered and the call ends with it.
    pub async fn check_relayed(&self, message: Value) -> Result<Value, Value> {
        if let Some(policy) = self.output {
            let text = strings::joined(&message);
            self.policy_check(policy, Mode::Response, &text, None).await?;
        }
        if !self.redacted {
            return Ok(message);
        }
        Ok(self.restore(message).await)
    }

    /// The client's answer to a request the upstream made during the call (elicitation, sampling, roots), as the
    /// upstream may see it (contract 14): redacted and checked as the call's arguments were, with the same PII
    /// mapping, so the answer's data never reaches the upstream in clear and comes back restored. `Err` is the call's
    /// blocked result.
    pub async fn check_answer(&mut self, answer: Value) -> Result<Value, Value> {
        let Value::Object(fields) = answer else {
            // Not an object (no client answers so): checked as one text, passed as it is.
            if let Some(policy) = self.input {
                self.policy_check(policy, Mode::Prompt, &strings::joined(&answer), None).await?;
            }
            return Ok(answer);
        };
        self.check_input(fields).await.map(Value::Object)
    }

    /// Relevancy, adherence and hallucination (provider `gw`); they fail open.
    async fn quality_checks(
        &self,
        policy: &GuardrailPolicy,
        tool: &str,
        args: &Map<String, Value>,
        answer: &str,
    ) -> Result<(), Value> {
        let wanted = ["relevancy", "adherence", "hallucination"].map(|name| flag(policy, name));
        if !wanted.iter().any(|w| *w) {
            return Ok(());
        }
        let Some(remote) = self.remote() else {
            tracing::warn!(
                server_name = self.server_name,
                "relevancy, adherence and hallucination checks need the gw guardrail provider; skipped"
            );
            return Ok(());
        };
        let question = format!("{tool} {}", Value::Object(args.clone()));
        if wanted[0] {
            let score = self.bounded(remote.relevancy(&question, answer)).await;
            self.score_check("relevancy", score, self.settings.relevancy_threshold, "response is not relevant")?;
        }
        if wanted[1] {
            let score = self.bounded(remote.adherence(&question, answer)).await;
            let message = "response does not adhere to instructions";
            self.score_check("adherence", score, self.settings.adherence_threshold, message)?;
        }
        if wanted[2] {
            match self.bounded(remote.hallucination(&question, answer, tool)).await {
                Ok(true) => {
                    let violation = Violation {
                        kind: "hallucination".into(),
                        detector: "gw".into(),
                        message: "the response may be hallucinated".into(),
                    };
                    self.log(Mode::Response, std::slice::from_ref(&violation), true);
                    self.blocks.with_label_values(&["output", "gw"]).inc();
                    let mut result = blocked(Mode::Response, std::slice::from_ref(&violation));
                    result["message"] = json!("the response may be hallucinated");
                    return Err(result);
                }
                Ok(false) => {}
                Err(e) => self.failed_open("hallucination", &e),
            }
        }
        Ok(())
    }

    /// A relevancy or adherence score against its threshold: under it, the call's error result; a check that could
    /// not be made passes (fail open).
    fn score_check(
        &self,
        check: &str,
        score: Result<f64, GuardrailError>,
        threshold: f64,
        message: &str,
    ) -> Result<(), Value> {
        match score {
            Ok(score) if score < threshold => Err(quality_error(message)),
            Ok(_) => Ok(()),
            Err(e) => {
                self.failed_open(check, &e);
                Ok(())
            }
        }
    }

    fn failed_open(&self, check: &str, error: &GuardrailError) {
        tracing::warn!(server_name = self.server_name, check, error = %error, "guardrail check unavailable; passed");
    }

    /// Puts the redacted data back into every string of the upstream's answer, in place.
    async fn restore(&self, mut response: Value) -> Value {
        if !self.redacted {
            return response;
        }
        if let Some(remote) = self.remote() {
            let text = response.to_string();
            let key = self.remote_pii_key.as_deref();
            return match self.bounded(remote.pii(&text, Mode::Response, key)).await {
                Ok(answer) => serde_json::from_str(&answer.text).unwrap_or(response),
                Err(e) => {
                    // The placeholders stay: the client sees less, never more.
                    tracing::warn!(server_name = self.server_name, error = %e, "restoring redacted data failed");
                    response
                }
            };
        }
        self.vault.restore_in_place(&mut response);
        response
    }

    /// Puts the redacted data back into one text (an upstream error's message).
    async fn restore_text(&self, text: String) -> String {
        let Some(remote) = self.remote() else { return self.vault.restored(&text).unwrap_or(text) };
        let key = self.remote_pii_key.as_deref();
        match self.bounded(remote.pii(&text, Mode::Response, key)).await {
            Ok(answer) => answer.text,
            Err(e) => {
                tracing::warn!(server_name = self.server_name, error = %e, "restoring redacted data failed");
                text
            }
        }
    }
}

fn quality_error(message: &str) -> Value {
    GatewayError::new(ErrorCode::GuardrailViolation, message).with("stage", "output").answer()
}
