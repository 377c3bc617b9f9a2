//! The MCP server the clients talk to: `tools/list` answers the seven `gw_*` tools, `tools/call` runs one. It declares
//! the capabilities of [`capabilities::declared`] and answers the methods of no other (-32601, see that module).
//!
//! Over HTTP the caller's [`Identity`] was resolved by the admission layer and travels in the request's extensions
//! (rmcp hands the HTTP request parts to the handler). Over stdio the handler runs the same admission step
//! ([`admission::admit`]) on every tool call, with the credentials of the environment, and counts the call as a
//! request. Answers and refusals reach the client in the one envelope of [`crate::gateway::envelope`].

mod call;

use call::{typed, upstream_value};

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestMethod, CompleteRequestParams, CompleteResult, ConstString,
    DiscoverResult, GetPromptRequestMethod, GetPromptRequestParams, GetPromptResponse, Implementation,
    InitializeRequestParams, InitializeResult, ListPromptsRequestMethod, ListPromptsResult,
    ListResourceTemplatesRequestMethod, ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestMethod, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SetLevelRequestMethod, SubscribeRequestMethod, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestMethod, UnsubscribeRequestParams,
};
// Logging is deprecated by SEP-2577 for the newest revision; contract 8 forwards `logging/setLevel` for the others.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::auth::{AuthFailure, Credentials, Identity};
use crate::config::exposure::ToolExposure;
use crate::error::GatewayError;
use crate::gateway::capabilities::{self, Capability};
use crate::gateway::exposure::EXPOSURE_HEADER;
use crate::gateway::middleware::{admission, request_metrics};
use crate::gateway::notify::Scope;
use crate::gateway::notify::listeners::MAX_RESOURCES;
use crate::gateway::transparent::subscriptions::Holder;
use crate::gateway::transparent::{self, resources};
use crate::gateway::{GatewayContext, tools};

/// The gateway's MCP server handler.
#[derive(Clone)]
pub struct GatewayHandler {
    ctx: Arc<GatewayContext>,
    /// Fixed credentials (stdio); `None` over HTTP, where each request carries its identity.
    credentials: Option<Arc<Credentials>>,
    /// The stdio connection is one MCP session (for `per_session` servers); over HTTP each request names its own.
    stdio_session: Option<Arc<str>>,
    /// The view the stdio client asked for (`GW_TOOL_EXPOSURE`).
    stdio_exposure: Option<String>,
}

impl GatewayHandler {
    /// The handler for the HTTP front.
    pub fn http(ctx: Arc<GatewayContext>) -> GatewayHandler {
        GatewayHandler { ctx, credentials: None, stdio_session: None, stdio_exposure: None }
    }

    /// The handler for the stdio front, with credentials from the environment.
    /// `exposure` is the view the client asked for (`GW_TOOL_EXPOSURE`), if any.
    pub fn stdio(ctx: Arc<GatewayContext>, credentials: Credentials, exposure: Option<String>) -> GatewayHandler {
        let session = Arc::from(format!("stdio-{}", uuid::Uuid::new_v4()));
        GatewayHandler {
            ctx,
            credentials: Some(Arc::new(credentials)),
            stdio_session: Some(session),
            stdio_exposure: exposure,
        }
    }

    /// The id of the stdio connection's one session (`None` over HTTP).
    pub fn stdio_session(&self) -> Option<Arc<str>> {
        self.stdio_session.clone()
    }

    /// The caller's MCP session, if the request belongs to one.
    fn session<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> Option<&'a str> {
        let http_session = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("mcp-session-id"))
            .and_then(|value| value.to_str().ok());
        self.stdio_session.as_deref().or(http_session)
    }

    /// The view the client asked for: `X-Mcpgw-Tool-Exposure` (stdio: `GW_TOOL_EXPOSURE`), if any.
    fn asked(&self, context: &RequestContext<RoleServer>) -> Result<Option<ToolExposure>, McpError> {
        let asked = match &self.stdio_exposure {
            Some(value) => Some(value.as_str()),
            None => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.headers.get(EXPOSURE_HEADER))
                .map(|value| value.to_str().unwrap_or("")),
        };
        match asked {
            None => Ok(None),
            Some(value) => Some(ToolExposure::parse(value).ok_or_else(|| {
                McpError::invalid_request(
                    format!("{EXPOSURE_HEADER} must be \"gateway\", \"transparent\" or \"both\", found {value:?}"),
                    None,
                )
            }))
            .transpose(),
        }
    }

    /// The view the caller gets (contract 8): its configuration's `tool_exposure`, narrowed by the client's
    /// `X-Mcpgw-Tool-Exposure` header (stdio: `GW_TOOL_EXPOSURE`) when the configuration allows `"both"`. A session
    /// is recorded with what its listings depend on, so that it is told when they change (contract 15).
    fn view(&self, identity: &Identity, context: &RequestContext<RoleServer>) -> Result<ToolExposure, McpError> {
        let requested = self.asked(context)?;
        let view = identity.snapshot.tool_exposure(identity.mcp_config_id.as_deref()).chosen(requested);
        if let Some(session) = self.session(context) {
            let scope = Scope::of(identity, requested);
            if self.stdio_session.is_some() {
                self.ctx.sessions.attach_stdio(session, identity.key_digest, scope, &context.peer);
            } else {
                self.ctx.sessions.rescope(session, scope);
            }
        }
        Ok(view)
    }

    /// The caller's view for `initialize` and `server/discover` (a caller not admitted is told no more than the
    /// gateway's own tools).
    async fn exposure(&self, context: &RequestContext<RoleServer>) -> Result<ToolExposure, McpError> {
        match self.identity(context, false).await {
            Ok(identity) => self.view(&identity, context),
            Err(_) => Ok(ToolExposure::Gateway),
        }
    }

    fn config(&self, exposure: ToolExposure) -> ServerConfig {
        ServerConfig::new(capabilities::declared(exposure))
            .with_server_info(Implementation::new("mcpgw", crate::VERSION))
            .with_instructions(if exposure.gateway_tools() {
                "mcpgw is a security gateway. List servers with gw_list_all_servers, discover their tools with \
                 gw_discover_all_tools, and call them with gw_secure_call_tools."
            } else {
                "mcpgw is a security gateway: the tools of the upstream MCP servers are served here, each call \
                 through the gateway's guardrails."
            })
    }

    /// The caller of a transparent-mode method `M` of `capability`: -32601 unless its view declares it. `call`: the
    /// request reaches an upstream (see [`GatewayHandler::identity`]).
    async fn transparent<M: ConstString>(
        &self,
        context: &RequestContext<RoleServer>,
        capability: Capability,
        call: bool,
    ) -> Result<Arc<Identity>, McpError> {
        let identity = self.identity(context, call).await.map_err(|refused| {
            let message = refused.message.clone();
            McpError::new(rmcp::model::ErrorCode(-32000), message, Some(refused.answer()))
        })?;
        capabilities::require::<M>(self.view(&identity, context)?, capability)?;
        Ok(identity)
    }

    /// The caller: over stdio admitted now (credentials and rate limit), over HTTP by the admission layer.
    /// `call`: whether the request is a call (over stdio it takes a cell of the rate limit, as every request does over
    /// HTTP; the others only resolve the credentials).
    async fn identity(&self, context: &RequestContext<RoleServer>, call: bool) -> Result<Arc<Identity>, GatewayError> {
        let identity = if let Some(creds) = &self.credentials {
            let snapshot = self.ctx.store.snapshot();
            if call {
                admission::admit(&self.ctx, &snapshot, Ok(creds)).await?
            } else {
                admission::identify(&self.ctx, &snapshot, Ok(creds)).await?
            }
        } else {
            context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Arc<Identity>>())
                .cloned()
                .ok_or_else(|| GatewayError::from(AuthFailure::new("no credentials reached the gateway")))?
        };
        Ok(identity)
    }
}

impl ServerHandler for GatewayHandler {
    /// What rmcp reads where no caller is known: the gateway view, with every capability a listen stream may carry
    /// (rmcp keeps only what this declares in a `subscriptions/listen` filter; what a caller's view does not list
    /// never changes for it, so it is never sent).
    fn get_info(&self) -> ServerConfig {
        let mut config = self.config(ToolExposure::Gateway);
        config.capabilities = capabilities::declared(ToolExposure::Both);
        config
    }

    // `initialize` and `server/discover` declare the capabilities of the caller's configuration.

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        let config = self.config(self.exposure(&context).await?);
        (result.capabilities, result.instructions) = (config.capabilities, config.instructions);
        Ok(result)
    }

    async fn discover(&self, context: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        let config = self.config(self.exposure(&context).await?);
        Ok(DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), config))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let identity = match self.identity(&context, false).await {
            Ok(identity) => identity,
            // A caller not admitted sees the gateway's tools; calling one tells it why it was refused.
            Err(_) => return Ok(ListToolsResult::with_all_items(tools::definitions())),
        };
        let exposure = self.view(&identity, &context)?;
        let mut listed = if exposure.gateway_tools() { tools::definitions() } else { Vec::new() };
        if exposure.upstream() {
            let upstream = transparent::list_tools(&self.ctx, &identity, self.session(&context)).await;
            listed.extend(upstream.tools());
        }
        Ok(ListToolsResult::with_all_items(listed))
    }

    // Transparent mode's prompts, resources, completion and logging level (answered -32601 in gateway mode, where
    // their capabilities are not declared).

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let identity = self.transparent::<ListPromptsRequestMethod>(&context, Capability::Prompts, false).await?;
        let listed = transparent::list_prompts(&self.ctx, &identity, self.session(&context)).await;
        Ok(ListPromptsResult::with_all_items(typed(listed)))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let identity = self.transparent::<GetPromptRequestMethod>(&context, Capability::Prompts, true).await?;
        let args = request.arguments.unwrap_or_default();
        let session = self.session(&context);
        let (relay, caller, messages) = self.relayed(&context);
        let work = transparent::get_prompt(&self.ctx, &identity, session, &request.name, args, Some(relay));
        // Boxed, as each request's work below: rmcp's session task holds the future of every handler method in one,
        // so the largest would set the memory of every session.
        let result = Box::pin(caller.serve(work, messages)).await?;
        Ok(GetPromptResponse::Complete(upstream_value(result)?))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let identity = self.transparent::<ListResourcesRequestMethod>(&context, Capability::Resources, false).await?;
        let listed = resources::list(&self.ctx, &identity, self.session(&context)).await;
        Ok(ListResourcesResult::with_all_items(typed(listed)))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let identity =
            self.transparent::<ListResourceTemplatesRequestMethod>(&context, Capability::Resources, false).await?;
        let listed = resources::templates(&self.ctx, &identity, self.session(&context)).await;
        Ok(ListResourceTemplatesResult::with_all_items(typed(listed)))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let identity = self.transparent::<ReadResourceRequestMethod>(&context, Capability::Resources, true).await?;
        let (relay, caller, messages) = self.relayed(&context);
        let work = resources::read(&self.ctx, &identity, self.session(&context), &request.uri, Some(relay));
        let result = Box::pin(caller.serve(work, messages)).await?;
        Ok(ReadResourceResponse::Complete(upstream_value(result)?))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let identity = self.transparent::<SubscribeRequestMethod>(&context, Capability::Subscriptions, true).await?;
        let session = self.session(&context);
        let holder = Holder::Session(session.unwrap_or_default().to_string());
        resources::subscribe(&self.ctx, &identity, session, holder, &request.uri, true).await.map(drop)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let identity = self.transparent::<UnsubscribeRequestMethod>(&context, Capability::Subscriptions, true).await?;
        let session = self.session(&context);
        let holder = Holder::Session(session.unwrap_or_default().to_string());
        resources::subscribe(&self.ctx, &identity, session, holder, &request.uri, false).await.map(drop)
    }

    // 2026-07-28 `subscriptions/listen` (contract 15): rmcp acknowledges the filter (the URIs cut to
    // `MAX_RESOURCES`) and keeps the request's answer open as an event stream; `listen` serves it until the client
    // goes or the drain begins (gateway/listen.rs).

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            uris.truncate(MAX_RESOURCES);
        }
        Some(accepted)
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), McpError> {
        let context = subscription.request_context();
        let identity = self.identity(context, false).await.map_err(|refused| {
            McpError::new(rmcp::model::ErrorCode(-32000), refused.message.clone(), Some(refused.answer()))
        })?;
        let asked = self.asked(context)?;
        Box::pin(crate::gateway::listen::serve(&self.ctx, identity, asked, &subscription)).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let identity = self.transparent::<CompleteRequestMethod>(&context, Capability::Completions, true).await?;
        let params = serde_json::to_value(&request).map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let result = Box::pin(resources::complete(&self.ctx, &identity, self.session(&context), params)).await?;
        upstream_value(result)
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let identity = self.transparent::<SetLevelRequestMethod>(&context, Capability::Logging, false).await?;
        let params = serde_json::to_value(&request).map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        resources::set_level(&self.ctx, &identity, self.session(&context), params).await;
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = std::time::Instant::now();
        let answer = Box::pin(self.answer_call(request, context)).await;
        if self.credentials.is_some() {
            // Over HTTP the request metrics layer counts requests; over stdio each tool call is one.
            let status = if answer.is_ok() { "ok" } else { "error" };
            request_metrics::record(self.ctx.store.metrics(), "stdio", "tools/call", status, started.elapsed());
        }
        answer
    }
}
