//! The MCP server the clients talk to: `tools/list` answers the seven `gw_*` tools, `tools/call` runs one. It declares
//! the capabilities of [`capabilities::declared`] and answers the methods of no other (-32601, see that module).
//!
//! Over HTTP the caller's [`Identity`] was resolved by the admission layer and travels in the request's extensions
//! (rmcp hands the HTTP request parts to the handler). Over stdio the handler runs the same admission step
//! ([`admission::admit`]) on every tool call, with the credentials of the environment, and counts the call as a
//! request. Answers and refusals reach the client in the one envelope of [`super::envelope`].

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestMethod, CompleteRequestParams, CompleteResult,
    Implementation, ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesRequestMethod,
    ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use super::capabilities::{self, Capability};
use super::envelope::tool_result;
use super::middleware::{admission, request_metrics};
use super::{GatewayContext, tools};
use crate::auth::{AuthFailure, Credentials, Identity};
use crate::error::GatewayError;

/// The gateway's MCP server handler.
#[derive(Clone)]
pub struct GatewayHandler {
    ctx: Arc<GatewayContext>,
    /// Fixed credentials (stdio); `None` over HTTP, where each request carries its identity.
    credentials: Option<Arc<Credentials>>,
    /// The stdio connection is one MCP session (for `per_session` servers); over HTTP each request names its own.
    stdio_session: Option<Arc<str>>,
}

impl GatewayHandler {
    /// The handler for the HTTP front.
    pub fn http(ctx: Arc<GatewayContext>) -> GatewayHandler {
        GatewayHandler { ctx, credentials: None, stdio_session: None }
    }

    /// The handler for the stdio front, with credentials from the environment.
    pub fn stdio(ctx: Arc<GatewayContext>, credentials: Credentials) -> GatewayHandler {
        let session = Arc::from(format!("stdio-{}", uuid::Uuid::new_v4()));
        GatewayHandler { ctx, credentials: Some(Arc::new(credentials)), stdio_session: Some(session) }
    }

    /// The caller: over stdio admitted now (credentials and rate limit), over HTTP by the admission layer.
    async fn identity(&self, context: &RequestContext<RoleServer>) -> Result<Arc<Identity>, GatewayError> {
        if let Some(creds) = &self.credentials {
            return admission::admit(&self.ctx, &self.ctx.store.snapshot(), Ok(creds)).await;
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Arc<Identity>>())
            .cloned()
            .ok_or_else(|| AuthFailure("no credentials reached the gateway".into()).into())
    }
}

impl ServerHandler for GatewayHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(capabilities::declared())
            .with_server_info(Implementation::new("mcpgw", crate::VERSION))
            .with_instructions(
                "mcpgw is a security gateway. List servers with gw_list_all_servers, discover their tools with \
                 gw_discover_all_tools, and call them with gw_secure_call_tools.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::definitions()))
    }

    // rmcp answers these with an empty result by default: answered only when their capability is declared.

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        capabilities::require::<ListPromptsRequestMethod>(Capability::Prompts)?;
        Ok(ListPromptsResult::default())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        capabilities::require::<ListResourcesRequestMethod>(Capability::Resources)?;
        Ok(ListResourcesResult::default())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        capabilities::require::<ListResourceTemplatesRequestMethod>(Capability::Resources)?;
        Ok(ListResourceTemplatesResult::default())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        capabilities::require::<CompleteRequestMethod>(Capability::Completions)?;
        Ok(CompleteResult::default())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = std::time::Instant::now();
        let answer = self.answer_call(request, context).await;
        if self.credentials.is_some() {
            // Over HTTP the request metrics layer counts requests; over stdio each tool call is one.
            let status = if answer.is_ok() { "ok" } else { "error" };
            request_metrics::record(self.ctx.store.metrics(), "stdio", "tools/call", status, started.elapsed());
        }
        answer
    }
}

impl GatewayHandler {
    async fn answer_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let identity = match self.identity(&context).await {
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
        let http_session = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|value| value.to_str().ok());
        let session = self.stdio_session.as_deref().or(http_session);
        match tools::call(&self.ctx, &identity, session, &request.name, args).await {
            Ok(answer) => Ok(tool_result(answer).into()),
            Err(refusal) => Err(McpError::invalid_params(refusal.to_string(), None)),
        }
    }
}
