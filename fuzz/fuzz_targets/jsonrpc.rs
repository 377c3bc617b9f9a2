//! A request body as the gateway's HTTP front sees it: the JSON-RPC guard must answer every input with a message or
//! a JSON-RPC error code, never panic; what it accepts must then parse as an rmcp client message or be refused
//! cleanly by it (rmcp is the protocol layer behind the guard).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgw::gateway::middleware::jsonrpc::parse_message;

fuzz_target!(|data: &[u8]| {
    match parse_message(data) {
        Ok(message) => {
            assert!(message.is_object(), "the guard accepted a non-object: {message}");
            let _ = serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(message);
        }
        Err((code, text, _id)) => {
            assert!(code == -32700 || code == -32600, "unexpected JSON-RPC error code {code}");
            assert!(!text.is_empty());
        }
    }
});
