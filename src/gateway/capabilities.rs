//! What the gateway declares it can do, in one place: the capabilities of `initialize` and `server/discover`
//! ([`declared`]), and the rule that a method of a capability not declared answers JSON-RPC -32601 (method not
//! found), never an empty result (contract section 7). A client that reads the capabilities then finds exactly the
//! methods they promise, and a conformance check that asks for `prompts/list` without `prompts` is told no.
//!
//! What is declared depends on the caller's view (contract 8): `tools` alone in the gateway view; in the transparent
//! view also `prompts`, `resources` (with `subscribe`), `completions` and `logging`, served by the handler
//! ([`super::handler`]) from the upstreams. Every handler method of those capabilities asks [`require`] first, so in
//! the gateway view they answer -32601 rather than rmcp's default empty result. The transparent view also declares
//! the `io.modelcontextprotocol/tasks` extension, served by `transparent/task_route.rs` (over stdio through
//! `stdio/tasks.rs`, which reads this declaration in rmcp's `initialize` answer); skills are refused
//! by rmcp while not implemented; `subscriptions/listen` (2026-07-28) is served in every view (`gateway/listen.rs`).

use rmcp::ErrorData as McpError;
use rmcp::model::{ConstString, ServerCapabilities};

use crate::config::exposure::ToolExposure;

/// A family of methods that a server answers only when it declares the capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Tools,
    Prompts,
    Resources,
    /// `resources/subscribe` and `unsubscribe` (`resources.subscribe`).
    Subscriptions,
    Completions,
    Logging,
}

/// The capabilities the gateway declares to a caller whose configuration exposes its servers as `exposure` says, on
/// every front and revision: tools (with `listChanged`: a reload can change them) always; in transparent mode (`"transparent"`, `"both"`) also the upstreams'
/// prompts, resources (with `subscribe`), completions and logging level, and each list's `listChanged` (an upstream's
/// change of its lists is passed on to the sessions of its configuration).
// Logging is deprecated by SEP-2577 for the newest revision; contract 8 forwards `logging/setLevel` for the others.
#[allow(deprecated)]
pub fn declared(exposure: ToolExposure) -> ServerCapabilities {
    if exposure.upstream() {
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_completions()
            .enable_logging()
            .enable_tasks()
            .build()
    } else {
        // A reload may change the gateway view too (to "both", say): its clients are told (contract 15).
        ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build()
    }
}

/// Whether `capabilities` declares `capability`.
pub fn declares(capabilities: &ServerCapabilities, capability: Capability) -> bool {
    match capability {
        Capability::Tools => capabilities.tools.is_some(),
        Capability::Prompts => capabilities.prompts.is_some(),
        Capability::Resources => capabilities.resources.is_some(),
        Capability::Subscriptions => capabilities.resources.as_ref().is_some_and(|r| r.subscribe == Some(true)),
        Capability::Completions => capabilities.completions.is_some(),
        Capability::Logging => capabilities.logging.is_some(),
    }
}

/// `Ok` when the gateway declares `capability` under `exposure`; otherwise the -32601 answer for method `M`.
pub fn require<M: ConstString>(exposure: ToolExposure, capability: Capability) -> Result<(), McpError> {
    if declares(&declared(exposure), capability) { Ok(()) } else { Err(McpError::method_not_found::<M>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ErrorCode, ListPromptsRequestMethod, ListToolsRequestMethod};

    #[test]
    fn only_declared_capabilities_are_answered() {
        assert!(require::<ListToolsRequestMethod>(ToolExposure::Gateway, Capability::Tools).is_ok());
        let refused = require::<ListPromptsRequestMethod>(ToolExposure::Gateway, Capability::Prompts).err();
        assert_eq!(
            refused.map(|e| (e.code, e.message.to_string())),
            Some((ErrorCode::METHOD_NOT_FOUND, "prompts/list".into()))
        );
        let served = [Capability::Prompts, Capability::Resources, Capability::Subscriptions, Capability::Completions];
        for capability in served.into_iter().chain([Capability::Logging]) {
            assert!(!declares(&declared(ToolExposure::Gateway), capability), "{capability:?} in the gateway view");
            for view in [ToolExposure::Transparent, ToolExposure::Both] {
                assert!(declares(&declared(view), capability), "{capability:?} in the {view:?} view");
            }
        }
    }
}
