//! Property tests of the parsers that input reaches: config decoding and validation (never panics; an invalid config
//! is a list of problems, each naming where it is), the JSON-RPC guard on arbitrary bodies, and the tool-call argument
//! handling of the seven `gw_*` tools (arbitrary arguments are a clear invalid-arguments refusal, never a panic).
//! Keyword matching and PII redaction have their own properties in `src/guardrails/{keyword,pii}.rs`.

mod common;

use mcpgw::config::Snapshot;
use mcpgw::gateway::middleware::jsonrpc::parse_message;
use mcpgw::gateway::tools::{ToolCallError, ToolInvocation};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, a few levels deep, with keys drawn from the config's own vocabulary half of the time.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("admin_apikey".to_string()),
        Just("common_mcp_gateway_config".to_string()),
        Just("mcp_configs".to_string()),
        Just("projects".to_string()),
        Just("users".to_string()),
        Just("apikeys".to_string()),
        Just("plugins".to_string()),
        Just("timeout_settings".to_string()),
        Just("mcp_config".to_string()),
        Just("server_name".to_string()),
        Just("config".to_string()),
        Just("command".to_string()),
        Just("env".to_string()),
        Just("provider".to_string()),
        "[a-z_]{1,12}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Every path of objects in `value`, as JSON pointers.
fn object_paths(value: &Value, at: String, out: &mut Vec<String>) {
    if let Value::Object(map) = value {
        out.push(at.clone());
        for (k, v) in map {
            object_paths(v, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary JSON never panics the decoder or the validator; a refusal always says what is wrong.
    #[test]
    fn any_json_is_a_config_or_a_list_of_problems(value in json_value()) {
        if let Err(problems) = Snapshot::from_value(value, [0; 32]) {
            prop_assert!(!problems.is_empty());
            prop_assert!(problems.iter().all(|p| !p.trim().is_empty()));
        }
    }

    /// The fixture with one object anywhere in it replaced by arbitrary JSON: never a panic, and every problem
    /// reported names a place in the file.
    #[test]
    fn a_valid_config_with_one_part_replaced_is_valid_or_refused_with_located_problems(
        pick in any::<prop::sample::Index>(),
        replacement in json_value(),
    ) {
        let mut config = common::fixture();
        let mut paths = Vec::new();
        object_paths(&config, String::new(), &mut paths);
        let path = paths[pick.index(paths.len())].clone();
        if path.is_empty() {
            config = replacement;
        } else if let Some(slot) = config.pointer_mut(&path) {
            *slot = replacement;
        }
        if let Err(problems) = Snapshot::from_value(config, [0; 32]) {
            prop_assert!(!problems.is_empty());
            for problem in &problems {
                prop_assert!(problem.contains(':') || problem.contains('.'), "a problem without a location: {problem}");
            }
        }
    }

    /// Any bytes in a POST body: one JSON-RPC message, or a JSON-RPC error code for why not.
    #[test]
    fn any_body_is_a_message_or_a_jsonrpc_error(body in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err((code, message, _id)) = parse_message(&body) {
            prop_assert!(code == -32700 || code == -32600, "code {code}");
            prop_assert!(!message.is_empty());
        }
    }

    /// JSON bodies shaped like requests, with arbitrary members.
    #[test]
    fn any_json_body_is_a_message_or_a_jsonrpc_error(value in json_value(), id in any::<u32>()) {
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call"});
        if let (Value::Object(extra), Some(target)) = (value, message.as_object_mut()) {
            target.extend(extra);
        }
        let body = serde_json::to_vec(&message).unwrap();
        if let Err((code, _, _)) = parse_message(&body) {
            prop_assert!(code == -32600, "code {code} for {message}");
        }
    }

    /// Arbitrary arguments for each gateway tool: parsed, or refused as invalid arguments naming the tool.
    #[test]
    fn tool_arguments_are_parsed_or_refused_clearly(tool in 0usize..8, args in json_value()) {
        let names = ["gw_list_all_servers", "gw_get_server_info", "gw_discover_all_tools", "gw_secure_call_tools",
            "gw_get_cache_status", "gw_clear_cache", "gw_get_timeout_metrics", "gw_unknown"];
        let name = names[tool];
        let args = match args {
            Value::Object(map) => map,
            other => Map::from_iter([("value".to_string(), other)]),
        };
        match ToolInvocation::parse(name, args) {
            Ok(invocation) => prop_assert_eq!(invocation.name(), name),
            Err(ToolCallError::UnknownTool(unknown)) => prop_assert_eq!(unknown.as_str(), "gw_unknown"),
            Err(ToolCallError::InvalidArguments { tool, reason }) => {
                prop_assert_eq!(tool.as_str(), name);
                prop_assert!(!reason.is_empty());
            }
        }
    }
}
