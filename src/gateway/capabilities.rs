//! What the gateway declares it can do, in one place: the capabilities of `initialize` and `server/discover`
//! ([`declared`]), and the rule that a method of a capability not declared answers JSON-RPC -32601 (method not
//! found), never an empty result (contract section 7). A client that reads the capabilities then finds exactly the
//! methods they promise, and a conformance check that asks for `prompts/list` without `prompts` is told no.
//!
//! rmcp's `ServerHandler` answers some methods with an empty result by default (`prompts/list`, `resources/list`,
//! `resources/templates/list`, `completion/complete`); the handler ([`super::handler`]) overrides each of them to ask
//! [`require`] first. The others (`prompts/get`, `resources/read`, `resources/subscribe`, `resources/unsubscribe`,
//! `logging/setLevel`, tasks, skills, `subscriptions/listen`) are refused by rmcp already while not implemented. The
//! fast path only answers `tools/call`, of the `tools` capability. Serving prompts or resources (transparent mode)
//! means declaring them here and implementing their methods in the handler.

use rmcp::ErrorData as McpError;
use rmcp::model::{ConstString, ServerCapabilities};

use crate::config::exposure::ToolExposure;

/// A family of methods that a server answers only when it declares the capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Tools,
    Prompts,
    Resources,
    Completions,
    Logging,
}

/// The capabilities the gateway declares to a caller whose configuration exposes its servers as `exposure` says, on
/// every front and revision: tools always; in transparent mode (`"transparent"`, `"both"`) also the upstreams'
/// prompts, resources, completions and logging level, and each list's `listChanged` (an upstream's change of its
/// lists is passed on to the sessions of its configuration).
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
            .enable_completions()
            .enable_logging()
            .build()
    } else {
        ServerCapabilities::builder().enable_tools().build()
    }
}

/// Whether `capabilities` declares `capability`.
pub fn declares(capabilities: &ServerCapabilities, capability: Capability) -> bool {
    match capability {
        Capability::Tools => capabilities.tools.is_some(),
        Capability::Prompts => capabilities.prompts.is_some(),
        Capability::Resources => capabilities.resources.is_some(),
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
        for capability in [Capability::Prompts, Capability::Resources, Capability::Completions, Capability::Logging] {
            assert!(
                !declares(&declared(ToolExposure::Gateway), capability),
                "{capability:?} is declared but not served"
            );
        }
    }
}
