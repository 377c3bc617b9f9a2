//! A `tools/call` as the handler answers it (rmcp's route; plain calls over HTTP take the fast route,
//! `gateway/fast_path.rs`): a `gw_*` tool, or in transparent mode an upstream tool, with its relay (a session's) or
//! its `input_required` rounds (a 2026-07-28 client's); and the upstream's results as each revision expects them
//! (contract 15: `resultType` on every result of a 2026-07-28 request).

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, InputRequiredResult, ProtocolVersion};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;
use tokio::sync::mpsc;

use super::GatewayHandler;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::envelope::tool_result;
use crate::gateway::middleware::{admission, quota_status};
use crate::gateway::tools;
use crate::gateway::transparent::relay::Caller;
use crate::gateway::transparent::rounds::{self, Round};
use crate::gateway::transparent::{self, CallAnswer};
use crate::telemetry::metrics::GW_TOOLS;
use crate::upstream::relay::{FromServer, Relay};

impl GatewayHandler {
    pub(super) async fn answer_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let identity = match self.identity(&context, true).await {
            Ok(identity) => identity,
            Err(refused) => return Ok(tool_result(refused.answer()).into()),
        };
        if self.credentials.is_some() {
            // Over HTTP the call budget step has taken these cells.
            let max = identity.snapshot.settings.limits.max_calls_per_request;
            let calls = admission::calls_asked(&request.name, request.arguments.as_ref(), max);
            if let Err(refused) = admission::take_calls(&self.ctx, &identity, calls) {
                return Ok(tool_result(refused.answer()).into());
            }
        }
        let _running = self.ctx.in_flight.enter();
        let args = request.arguments.unwrap_or_default();
        let session = self.session(&context);
        let exposure = self.view(&identity, &context)?;
        let gateway_tool = GW_TOOLS.contains(&&*request.name);
        if exposure.upstream() && !(gateway_tool && exposure.gateway_tools()) {
            if context.protocol_version().is_some_and(|version| version >= ProtocolVersion::V_2026_07_28) {
                // A stateless client: the upstream's questions travel as `input_required` rounds, its progress on
                // this request's stream.
                let progress_token = context.meta.get_progress_token();
                let capabilities = context.meta.client_capabilities();
                let caller = Caller { peer: &context.peer, progress_token, capabilities, stream: None };
                let round = match request.request_state {
                    Some(state) => {
                        let answers = request.input_responses.unwrap_or_default();
                        rounds::resume(&self.ctx, &identity, &state, &request.name, answers, &caller).await?
                    }
                    None => rounds::start(&self.ctx, &identity, request.name.to_string(), args, &caller).await,
                };
                return match round {
                    Round::Done(Ok(CallAnswer::Upstream(result))) => Ok(upstream_result(result).into()),
                    Round::Done(Ok(CallAnswer::Gateway(answer))) => {
                        if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
                            quota_status::note(&parts.extensions, &answer);
                        }
                        Ok(tool_result(answer).into())
                    }
                    Round::Done(Err(unknown)) => Err(McpError::invalid_params(unknown.to_string(), None)),
                    Round::Input { requests, request_state } => {
                        Ok(InputRequiredResult::new(Some(requests), Some(request_state)).into())
                    }
                };
            }
            let (relay, caller, messages) = self.relayed(&context);
            let work = transparent::call_tool(&self.ctx, &identity, session, &request.name, args, Some(relay));
            return match caller.serve(work, messages).await {
                Ok(CallAnswer::Upstream(result)) => Ok(upstream_result(result).into()),
                Ok(CallAnswer::Gateway(answer)) => Ok(tool_result(answer).into()),
                Err(unknown) => Err(McpError::invalid_params(unknown.to_string(), None)),
            };
        }
        match tools::call(&self.ctx, &identity, session, &request.name, args).await {
            Ok(answer) => Ok(tool_result(answer).into()),
            Err(refusal) => Err(McpError::invalid_params(refusal.to_string(), None)),
        }
    }
}

impl GatewayHandler {
    /// The relay of a transparent request: the upstream's messages during it go to the caller (its progress token,
    /// the capabilities its session declared, its session's own stream over HTTP), and the client's cancellation of
    /// the request ends it.
    pub(super) fn relayed<'a>(
        &self,
        context: &'a RequestContext<RoleServer>,
    ) -> (Relay, Caller<'a>, mpsc::Receiver<FromServer>) {
        let progress_token = context.meta.get_progress_token();
        let meta = progress_token.as_ref().map(|token| serde_json::json!({"progressToken": token}));
        let (relay, messages) = Relay::new(context.ct.clone(), meta);
        let capabilities = context.peer.peer_info().map(|info| info.capabilities.clone());
        let stream = match (&self.stdio_session, self.session(context)) {
            (None, Some(session)) => self.ctx.sessions.channel_of(session),
            _ => None,
        };
        (relay, Caller { peer: &context.peer, progress_token, capabilities, stream }, messages)
    }
}

/// Items an upstream listed, as rmcp's type; an item that does not fit the protocol is left out.
pub(super) fn typed<T: serde::de::DeserializeOwned>(items: Vec<Value>) -> Vec<T> {
    items.into_iter().filter_map(|item| serde_json::from_value(item).ok()).collect()
}

/// An upstream's result with `resultType` (`"complete"` where the upstream, of an older revision, left it out): a
/// 2026-07-28 client requires it in every result (contract 15), and rmcp leaves a `"complete"` out again for peers of
/// older revisions.
fn with_result_type(mut result: Value) -> Value {
    if let Some(fields) = result.as_object_mut()
        && !fields.contains_key("resultType")
    {
        fields.insert("resultType".into(), Value::from("complete"));
    }
    result
}

/// An upstream's result as rmcp's type, or the error that it does not fit the protocol.
pub(super) fn upstream_value<T: serde::de::DeserializeOwned>(result: Value) -> Result<T, McpError> {
    serde_json::from_value(with_result_type(result))
        .map_err(|e| McpError::internal_error(format!("the upstream's result does not fit the protocol: {e}"), None))
}

/// An upstream's `CallToolResult` as rmcp's type (the pool checked its shape; one that still does not fit is the
/// upstream's error).
fn upstream_result(result: serde_json::Value) -> CallToolResult {
    serde_json::from_value(with_result_type(result)).unwrap_or_else(|e| {
        let message = format!("the upstream's tool result does not fit the protocol: {e}");
        tool_result(GatewayError::new(ErrorCode::UpstreamError, message).answer())
    })
}
