//! `mcpgw-conformance-upstream`: an MCP server that offers what the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`, its `server` scenarios) asks of the server under test, so that the suite can
//! run against the gateway with this server behind it, or against this server directly.
//!
//! It answers with rmcp's server and declares tools, prompts, resources (with `subscribe`), completions and logging.
//!
//! | tool | input | what it does |
//! |---|---|---|
//! | `test_simple_text` | `{}` | answers one text |
//! | `test_image_content` | `{}` | answers one image (a 1×1 PNG) |
//! | `test_audio_content` | `{}` | answers one audio clip (a short silent `audio/wav`) |
//! | `test_embedded_resource` | `{}` | answers one embedded text resource |
//! | `test_multiple_content_types` | `{}` | answers a text, an image and an embedded resource |
//! | `test_tool_with_logging` | `{}` | sends three `notifications/message` (level `info`, filtered by `logging/setLevel`), then answers |
//! | `test_tool_with_progress` | `{}` | with a `_meta.progressToken`, sends `notifications/progress` 0, 50 and 100 of 100, then answers |
//! | `test_error_handling` | `{}` | answers a tool error (`isError: true`) |
//! | `test_sampling` | `{prompt}` | asks the client for `sampling/createMessage` and answers the sampled text |
//! | `test_elicitation` | `{message}` | asks the client for `elicitation/create` (`username`, `email`) and answers the outcome |
//! | `test_elicitation_sep1034_defaults` | `{}` | elicitation whose fields carry defaults (SEP-1034) |
//! | `test_elicitation_sep1330_enums` | `{}` | elicitation with every enum form (SEP-1330) |
//! | `json_schema_2020_12_tool` | `{name?, address?, contactMethod?, phone?, email?}` | lists an input schema with `$schema` 2020-12, `$defs` (with an `$anchor`), `allOf`/`anyOf`, `if`/`then`/`else` and `additionalProperties: false`; answers the input |
//! | `test_reconnection` | `{}` | waits a moment, then answers |
//! | `test_request_headers` | `{}` | answers the HTTP headers of the request that carried the call (JSON, names in lower case; `{}` over stdio) |
//! | `test_custom_header` | `{region}` | answers `Region: <region>`; `region` is an `x-mcp-header` parameter (SEP-2243: over HTTP, rmcp checks the `Mcp-Param-Region` header against it) |
//!
//! Resources: `test://static-text` (text), `test://static-binary` (a PNG blob), `test://watched-resource` (text, may
//! be subscribed to), and the template `test://template/{id}/data` (JSON naming the id). Prompts: `test_simple_prompt`,
//! `test_prompt_with_arguments` (`arg1`, `arg2`), `test_prompt_with_embedded_resource` (`resourceUri`) and
//! `test_prompt_with_image`. `completion/complete` offers values for `arg1` of `test_prompt_with_arguments`, filtered
//! by the typed prefix, and nothing for anything else.
//!
//! Requests to the client (sampling, elicitation) and the notifications of a call are sent from within the call's
//! handler, on the call's own peer, before the result: over streamable HTTP, rmcp sends such requests and the
//! progress notifications on the call's own response stream. rmcp sends log messages (`notifications/message`) on the
//! session's standalone GET stream instead, so a client that has not opened that stream yet misses them.
//!
//! Flags:
//! - none: serves MCP on stdin/stdout; logs only to stderr; ends when stdin closes.
//! - `--http ADDR` (say `127.0.0.1:3000`): serves streamable HTTP at `/mcp` and `/mcp/` instead, with sessions, until
//!   Ctrl-C. The `Host` header must name a loopback host (`localhost`, `127.0.0.1`, `::1`, any port) or one given with
//!   `--allow-host HOST` (may repeat; `HOST` or `HOST:PORT`); any other is refused with 403 (DNS-rebinding protection).
//! - `--require-bearer-file PATH` (with `--http`): every request must carry `Authorization: Bearer TOKEN`, where
//!   TOKEN is the file's content (read at each request, so a test can rotate it); any other gets 401. Stands in for a
//!   hosted server behind an OAuth issuer.

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, CustomRequest, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Reference, ServerCapabilities, ServerConfig, ServerRequest, SubscribeRequestParams, Tool,
    UnsubscribeRequestParams,
};
// Logging is legacy-only in rmcp (SEP-2577), but the conformance suite still tests it.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NAME: &str = "mcpgw-conformance-upstream";

/// A 1×1 PNG.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

const STATIC_TEXT_URI: &str = "test://static-text";
const STATIC_BINARY_URI: &str = "test://static-binary";
const WATCHED_URI: &str = "test://watched-resource";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

/// The values `completion/complete` offers for `arg1` of `test_prompt_with_arguments`.
const ARG1_COMPLETIONS: [&str; 5] = ["paris", "park", "party", "london", "lisbon"];

/// The loopback hosts allowed in `Host` by default.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// One server: one stdio connection, or one HTTP session (each gets its own).
struct Conformance {
    tools: Vec<Tool>,
    /// The level `logging/setLevel` asked for (its [`level_rank`]); messages below it are not sent.
    log_level: Mutex<Option<u8>>,
    /// The resource URIs subscribed to.
    subscriptions: Mutex<HashSet<String>>,
}

impl Conformance {
    fn new() -> Conformance {
        Conformance { tools: tools(), log_level: Mutex::new(None), subscriptions: Mutex::new(HashSet::new()) }
    }

    fn subscriptions(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.subscriptions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a message at `level` passes the level set by `logging/setLevel` (everything passes before one is set).
    #[allow(deprecated, reason = "logging is legacy-only in rmcp, but the conformance suite still tests it")]
    fn logs_at(&self, level: LoggingLevel) -> bool {
        let wanted = *self.log_level.lock().unwrap_or_else(PoisonError::into_inner);
        wanted.is_none_or(|wanted| level_rank(level) >= wanted)
    }
}

#[allow(deprecated, reason = "logging is legacy-only in rmcp, but the conformance suite still tests it")]
fn level_rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

/// A tool whose input schema is an object with `properties`, all `required` as listed.
fn tool(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> Tool {
    let mut schema = object(json!({"type": "object", "properties": properties}));
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    Tool::new(name, description, schema)
}

fn tools() -> Vec<Tool> {
    let none = || json!({});
    vec![
        tool("test_simple_text", "Answers a simple text.", none(), &[]),
        tool("test_image_content", "Answers an image (a 1x1 PNG).", none(), &[]),
        tool("test_audio_content", "Answers an audio clip (a short silent WAV).", none(), &[]),
        tool("test_embedded_resource", "Answers an embedded text resource.", none(), &[]),
        tool("test_multiple_content_types", "Answers a text, an image and an embedded resource.", none(), &[]),
        tool("test_tool_with_logging", "Sends three log messages during the call, then answers.", none(), &[]),
        tool(
            "test_tool_with_progress",
            "Reports progress 0, 50 and 100 of 100 during the call, then answers.",
            none(),
            &[],
        ),
        tool("test_error_handling", "Always answers a tool error.", none(), &[]),
        tool("test_request_headers", "Answers the HTTP headers of the request that carried the call.", none(), &[]),
        tool(
            "test_sampling",
            "Asks the client to sample an LLM with the prompt and answers its response.",
            json!({"prompt": {"type": "string", "description": "The prompt to send to the LLM"}}),
            &["prompt"],
        ),
        tool(
            "test_elicitation",
            "Asks the user for a username and an email, and answers what they chose.",
            json!({"message": {"type": "string", "description": "The message shown to the user"}}),
            &["message"],
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Asks the user for fields that all carry defaults (SEP-1034).",
            none(),
            &[],
        ),
        tool("test_elicitation_sep1330_enums", "Asks the user to pick from every enum form (SEP-1330).", none(), &[]),
        Tool::new(
            "json_schema_2020_12_tool",
            "Takes an input described by a JSON Schema 2020-12 document and answers it.",
            object(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "$anchor": "addressDef",
                        "type": "object",
                        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                    },
                },
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"},
                },
                // The composition, conditional and anchor keywords conformance 0.2 checks are kept (SEP-2106).
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false,
            })),
        ),
        tool("test_reconnection", "Waits a moment, then answers (for the SSE reconnection scenario).", none(), &[]),
        tool(
            "test_custom_header",
            "Answers its region, which a 2026-07-28 client also sends as the Mcp-Param-Region header (SEP-2243).",
            json!({"region": {"type": "string", "x-mcp-header": "Region"}}),
            &["region"],
        ),
    ]
}

/// A value of rmcp's model from its JSON form (ours, so a failure is a bug, answered as an internal error).
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(format!("building a result: {e}"), None))
}

fn text_block(text: impl Into<String>) -> Value {
    json!({"type": "text", "text": text.into()})
}

fn image_block() -> Value {
    json!({"type": "image", "data": PNG_BASE64, "mimeType": "image/png"})
}

fn embedded_block(uri: &str, text: &str) -> Value {
    json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": text}})
}

/// A short silent WAV (8 kHz, 8-bit mono PCM, 80 samples), base64.
fn wav_base64() -> String {
    const SAMPLES: u32 = 80;
    let mut wav = Vec::with_capacity(44 + SAMPLES as usize);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + SAMPLES).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // the fmt chunk's size
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // channels
    wav.extend_from_slice(&8000u32.to_le_bytes()); // sample rate
    wav.extend_from_slice(&8000u32.to_le_bytes()); // byte rate
    wav.extend_from_slice(&1u16.to_le_bytes()); // block align
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&SAMPLES.to_le_bytes());
    wav.resize(44 + SAMPLES as usize, 0x80); // silence for 8-bit PCM
    base64::engine::general_purpose::STANDARD.encode(wav)
}

fn tool_result(content: Vec<Value>) -> Result<CallToolResult, ErrorData> {
    typed(json!({"content": content}))
}

fn text_result(text: impl Into<String>) -> Result<CallToolResult, ErrorData> {
    tool_result(vec![text_block(text)])
}

fn string_argument<'a>(args: &'a JsonObject, name: &str) -> Result<&'a str, ErrorData> {
    args.get(name)
        .ok_or_else(|| ErrorData::invalid_params(format!("missing argument `{name}`"), None))?
        .as_str()
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a string"), None))
}

/// Sends a request to the client and answers its result as JSON. The request is built raw (rmcp's typed
/// elicitation schema would drop the SEP-1330 forms); sent from within a handler, rmcp ties it to that call.
async fn ask_client(peer: &Peer<RoleServer>, method: &str, params: Value) -> Result<Value, ErrorData> {
    let request = ServerRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let result: ClientResult = peer
        .send_request(request)
        .await
        .map_err(|e| ErrorData::internal_error(format!("{method} failed: {e}"), None))?;
    serde_json::to_value(result).map_err(|e| ErrorData::internal_error(format!("{method} answered badly: {e}"), None))
}

/// The text of a `sampling/createMessage` result (its `content` is one block or, since 2025-11-25, a list).
fn sampled_text(result: &Value) -> String {
    let content = result.get("content");
    let blocks = match content {
        Some(Value::Array(blocks)) => blocks.iter().collect(),
        Some(block) => vec![block],
        None => Vec::new(),
    };
    let texts: Vec<&str> = blocks.iter().filter_map(|block| block.get("text").and_then(Value::as_str)).collect();
    if texts.is_empty() { "(no text content)".to_string() } else { texts.join("\n") }
}

/// Runs an elicitation and answers its outcome as text.
async fn elicit(peer: &Peer<RoleServer>, message: &str, schema: Value) -> Result<CallToolResult, ErrorData> {
    let result = ask_client(peer, "elicitation/create", json!({"message": message, "requestedSchema": schema})).await?;
    let action = result.get("action").and_then(Value::as_str).unwrap_or("unknown");
    let content = result.get("content").cloned().unwrap_or(Value::Null);
    text_result(format!("Elicitation completed: action={action}, content={content}"))
}

fn username_email_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "Your username"},
            "email": {"type": "string", "description": "Your email address"},
        },
        "required": ["username", "email"],
    })
}

fn defaults_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": true},
        },
    })
}

fn enums_schema() -> Value {
    let titled = |titles: [&str; 3]| {
        let values = ["value1", "value2", "value3"];
        values.iter().zip(titles).map(|(value, title)| json!({"const": value, "title": title})).collect::<Vec<_>>()
    };
    json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Pick one (untitled)",
                "enum": ["option1", "option2", "option3"],
            },
            "titledSingle": {
                "type": "string",
                "description": "Pick one (titled)",
                "oneOf": titled(["First Option", "Second Option", "Third Option"]),
            },
            "legacyEnum": {
                "type": "string",
                "description": "Pick one (legacy enumNames)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Pick several (untitled)",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Pick several (titled)",
                "items": {"anyOf": titled(["First", "Second", "Third"])},
            },
        },
    })
}

/// The progress token of a call: in its `_meta`, which rmcp may also have kept in the context.
fn progress_token(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Option<ProgressToken> {
    request.meta.as_ref().and_then(|meta| meta.get_progress_token()).or_else(|| context.meta.get_progress_token())
}

/// A pause between the notifications of a call, and before its result, so that a client reads them apart (a client
/// that gets a last notification and the result in one read may drop the notification).
const NOTIFICATION_GAP: Duration = Duration::from_millis(20);

impl Conformance {
    #[allow(deprecated, reason = "logging and sampling are legacy-only in rmcp, but the conformance suite tests them")]
    async fn call(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let empty = JsonObject::new();
        let args = request.arguments.as_ref().unwrap_or(&empty);
        let peer = &context.peer;
        match request.name.as_ref() {
            "test_simple_text" => text_result("This is a simple text response for testing."),
            "test_image_content" => tool_result(vec![image_block()]),
            "test_audio_content" => {
                tool_result(vec![json!({"type": "audio", "data": wav_base64(), "mimeType": "audio/wav"})])
            }
            "test_embedded_resource" => {
                tool_result(vec![embedded_block("test://embedded-resource", "This is an embedded resource content.")])
            }
            "test_multiple_content_types" => tool_result(vec![
                text_block("Multiple content types test:"),
                image_block(),
                embedded_block("test://mixed-content-resource", "{\"test\": \"data\", \"value\": 123}"),
            ]),
            "test_tool_with_logging" => {
                let messages = ["Tool execution started", "Tool processing data", "Tool execution completed"];
                for message in messages {
                    if self.logs_at(LoggingLevel::Info) {
                        let param =
                            LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(message)).with_logger(NAME);
                        peer.notify_logging_message(param)
                            .await
                            .map_err(|e| ErrorData::internal_error(format!("sending a log message: {e}"), None))?;
                    }
                    tokio::time::sleep(NOTIFICATION_GAP).await;
                }
                text_result("Tool with logging executed successfully")
            }
            "test_tool_with_progress" => {
                if let Some(token) = progress_token(request, context) {
                    for progress in [0.0, 50.0, 100.0] {
                        let param = ProgressNotificationParam::new(token.clone(), progress)
                            .with_total(100.0)
                            .with_message(format!("Completed step {progress} of 100"));
                        peer.notify_progress(param)
                            .await
                            .map_err(|e| ErrorData::internal_error(format!("sending progress: {e}"), None))?;
                        tokio::time::sleep(NOTIFICATION_GAP).await;
                    }
                }
                text_result("Tool with progress executed successfully")
            }
            "test_error_handling" => typed(json!({
                "content": [text_block("This tool intentionally returns an error for testing")],
                "isError": true,
            })),
            "test_sampling" => {
                let prompt = string_argument(args, "prompt")?;
                let params = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "maxTokens": 100,
                });
                let result = ask_client(peer, "sampling/createMessage", params).await?;
                text_result(format!("LLM response: {}", sampled_text(&result)))
            }
            "test_elicitation" => elicit(peer, string_argument(args, "message")?, username_email_schema()).await,
            "test_elicitation_sep1034_defaults" => {
                elicit(peer, "Please review and update the form fields with defaults", defaults_schema()).await
            }
            "test_elicitation_sep1330_enums" => elicit(peer, "Please pick from the enum fields", enums_schema()).await,
            "json_schema_2020_12_tool" => {
                text_result(format!("JSON Schema 2020-12 tool called with: {}", Value::Object(args.clone())))
            }
            "test_reconnection" => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                text_result("Reconnection test completed")
            }
            "test_request_headers" => {
                let mut headers = serde_json::Map::new();
                if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
                    for (name, value) in &parts.headers {
                        headers.insert(name.as_str().to_string(), json!(String::from_utf8_lossy(value.as_bytes())));
                    }
                }
                text_result(Value::Object(headers).to_string())
            }
            "test_custom_header" => text_result(format!("Region: {}", string_argument(args, "region")?)),
            other => Err(ErrorData::invalid_params(format!("unknown tool `{other}`"), None)),
        }
    }
}

fn prompts() -> Value {
    json!({"prompts": [
        {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
        {
            "name": "test_prompt_with_arguments",
            "description": "A prompt with two required arguments",
            "arguments": [
                {"name": "arg1", "description": "The first argument", "required": true},
                {"name": "arg2", "description": "The second argument", "required": true},
            ],
        },
        {
            "name": "test_prompt_with_embedded_resource",
            "description": "A prompt that embeds a resource",
            "arguments": [{"name": "resourceUri", "description": "The URI of the resource to embed", "required": true}],
        },
        {"name": "test_prompt_with_image", "description": "A prompt with image content"},
    ]})
}

fn prompt(name: &str, args: &JsonObject) -> Result<Value, ErrorData> {
    let user = |content: Value| json!({"role": "user", "content": content});
    Ok(match name {
        "test_simple_prompt" => json!({
            "description": "A simple prompt without arguments",
            "messages": [user(text_block("This is a simple prompt for testing."))],
        }),
        "test_prompt_with_arguments" => {
            let (arg1, arg2) = (string_argument(args, "arg1")?, string_argument(args, "arg2")?);
            json!({
                "description": "A prompt with two required arguments",
                "messages": [user(text_block(format!("Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")))],
            })
        }
        "test_prompt_with_embedded_resource" => {
            let uri = string_argument(args, "resourceUri")?;
            json!({
                "description": "A prompt that embeds a resource",
                "messages": [
                    user(embedded_block(uri, "Embedded resource content for testing.")),
                    user(text_block("Please process the embedded resource above.")),
                ],
            })
        }
        "test_prompt_with_image" => json!({
            "description": "A prompt with image content",
            "messages": [user(image_block()), user(text_block("Please analyze the image above."))],
        }),
        other => return Err(ErrorData::invalid_params(format!("unknown prompt `{other}`"), None)),
    })
}

/// The id of a `test://template/{id}/data` URI.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix(TEMPLATE_PREFIX)?.strip_suffix(TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

fn read(uri: &str) -> Result<Value, ErrorData> {
    let contents = match uri {
        STATIC_TEXT_URI => {
            json!({"uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource."})
        }
        STATIC_BINARY_URI => json!({"uri": uri, "mimeType": "image/png", "blob": PNG_BASE64}),
        WATCHED_URI => json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"}),
        _ => match template_id(uri) {
            Some(id) => json!({
                "uri": uri,
                "mimeType": "application/json",
                "text": json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")}).to_string(),
            }),
            None => {
                return Err(ErrorData::resource_not_found(format!("no resource `{uri}`"), Some(json!({"uri": uri}))));
            }
        },
    };
    Ok(json!({"contents": [contents]}))
}

impl ServerHandler for Conformance {
    #[allow(deprecated, reason = "logging is legacy-only in rmcp, but the conformance suite still tests it")]
    fn get_info(&self) -> ServerConfig {
        let mut implementation = Implementation::new(NAME, env!("CARGO_PKG_VERSION"));
        implementation.description = Some("A conformance-suite MCP upstream for mcpgw's tests".to_string());
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_completions()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities).with_server_info(implementation).with_instructions(
            "Serves the tools, prompts and resources the MCP conformance suite's server scenarios use.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(&request, &context).await.map(CallToolResponse::Complete)
    }

    /// A tool's definition, which rmcp's HTTP server reads to check a call's `Mcp-Param-*` headers (SEP-2243).
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        typed(prompts())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let empty = JsonObject::new();
        let result: GetPromptResult = typed(prompt(&request.name, request.arguments.as_ref().unwrap_or(&empty))?)?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        typed(json!({"resources": [
            {"uri": STATIC_TEXT_URI, "name": "Static Text Resource", "description": "A static text resource", "mimeType": "text/plain"},
            {"uri": STATIC_BINARY_URI, "name": "Static Binary Resource", "description": "A static binary resource (a PNG)", "mimeType": "image/png"},
            {"uri": WATCHED_URI, "name": "Watched Resource", "description": "A resource that may be subscribed to", "mimeType": "text/plain"},
        ]}))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        typed(json!({"resourceTemplates": [{
            "uriTemplate": format!("{TEMPLATE_PREFIX}{{id}}{TEMPLATE_SUFFIX}"),
            "name": "Template Resource",
            "description": "A resource template with an id parameter",
            "mimeType": "application/json",
        }]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let result: ReadResourceResult = typed(read(&request.uri)?)?;
        Ok(result.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions().insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions().remove(&request.uri);
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let values = match &request.r#ref {
            Reference::Prompt(prompt)
                if prompt.name == "test_prompt_with_arguments" && request.argument.name == "arg1" =>
            {
                let prefix = request.argument.value.to_lowercase();
                ARG1_COMPLETIONS
                    .iter()
                    .filter(|value| value.starts_with(&prefix))
                    .map(|value| value.to_string())
                    .collect()
            }
            _ => Vec::new(),
        };
        let completion = CompletionInfo::with_all_values(values).map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CompleteResult::new(completion))
    }

    #[allow(deprecated, reason = "logging is legacy-only in rmcp, but the conformance suite still tests it")]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().unwrap_or_else(PoisonError::into_inner) = Some(level_rank(request.level));
        Ok(())
    }
}

/// The command line (see the module documentation).
struct Flags {
    http: Option<SocketAddr>,
    allowed_hosts: Vec<String>,
    bearer_file: Option<std::path::PathBuf>,
}

fn flags() -> Result<Flags, String> {
    let allowed_hosts = LOOPBACK_HOSTS.iter().map(|h| h.to_string()).collect();
    let mut flags = Flags { http: None, allowed_hosts, bearer_file: None };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--http" => {
                let addr = args.next().ok_or("--http needs an address, such as 127.0.0.1:3000")?;
                flags.http = Some(addr.parse().map_err(|e| format!("--http {addr}: {e}"))?);
            }
            "--allow-host" => flags.allowed_hosts.push(args.next().ok_or("--allow-host needs a host")?),
            "--require-bearer-file" => {
                flags.bearer_file = Some(args.next().ok_or("--require-bearer-file needs a path")?.into());
            }
            "-h" | "--help" => {
                return Err("usage: mcpgw-conformance-upstream [--http ADDR [--allow-host HOST]... \
                            [--require-bearer-file PATH]]"
                    .to_string());
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(flags)
}

async fn serve_stdio() -> Result<(), String> {
    let server = Conformance::new()
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| format!("initialization failed: {e}"))?;
    server.waiting().await.map(|_| ()).map_err(|e| e.to_string())
}

/// Refuses with 401 a request whose bearer token is not the one in `file` (see `--require-bearer-file`).
async fn require_bearer(
    file: Arc<std::path::PathBuf>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let expected = std::fs::read_to_string(&*file).unwrap_or_default();
    let presented = request.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    if !expected.trim().is_empty() && presented == format!("Bearer {}", expected.trim()) {
        return next.run(request).await;
    }
    eprintln!("{NAME}: refused a request without the expected bearer token");
    axum::response::IntoResponse::into_response((
        axum::http::StatusCode::UNAUTHORIZED,
        [("www-authenticate", "Bearer")],
        "invalid or missing bearer token",
    ))
}

async fn serve_http(
    addr: SocketAddr,
    allowed_hosts: Vec<String>,
    bearer_file: Option<std::path::PathBuf>,
) -> Result<(), String> {
    let sessions = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(sessions.child_token());
    let service =
        StreamableHttpService::new(|| Ok(Conformance::new()), Arc::new(LocalSessionManager::default()), config);
    let mut router = axum::Router::new().route_service("/mcp", service.clone()).route_service("/mcp/", service);
    if let Some(file) = bearer_file {
        let file = Arc::new(file);
        router =
            router.layer(axum::middleware::from_fn(move |request, next| require_bearer(file.clone(), request, next)));
    }
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // Answers are written in pieces (headers, then each event); without TCP_NODELAY a small last piece would wait for
    // the client's delayed ACK (40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    eprintln!("{NAME}: serving streamable HTTP at http://{local}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            if let Err(error) = tokio::signal::ctrl_c().await {
                eprintln!("{NAME}: waiting for Ctrl-C: {error}");
            }
            sessions.cancel();
        })
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Flags { http, allowed_hosts, bearer_file } = match flags() {
        Ok(flags) => flags,
        Err(error) => {
            eprintln!("{NAME}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!("{NAME} {} started (pid {})", env!("CARGO_PKG_VERSION"), std::process::id());
    let served = match http {
        Some(addr) => serve_http(addr, allowed_hosts, bearer_file).await,
        None => serve_stdio().await,
    };
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{NAME}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_a_description() {
        for tool in tools() {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(tool.description.is_some(), "{}", tool.name);
        }
    }

    #[test]
    fn the_wav_is_a_riff_wave_of_the_right_length() {
        let wav = base64::engine::general_purpose::STANDARD.decode(wav_base64()).unwrap_or_default();
        assert_eq!(&wav[..4], b"RIFF");
        assert_eq!(&wav[8..12], b"WAVE");
        assert_eq!(wav.len(), 44 + 80);
    }

    #[test]
    fn template_ids_are_one_segment() {
        assert_eq!(template_id("test://template/123/data"), Some("123"));
        assert_eq!(template_id("test://template//data"), None);
        assert_eq!(template_id("test://template/1/2/data"), None);
        assert!(read("test://nope").is_err());
    }

    #[test]
    fn results_build() {
        let empty = JsonObject::new();
        for name in ["test_simple_prompt", "test_prompt_with_image"] {
            assert!(typed::<GetPromptResult>(prompt(name, &empty).unwrap_or_default()).is_ok(), "{name}");
        }
        assert!(typed::<ListPromptsResult>(prompts()).is_ok());
        for uri in [STATIC_TEXT_URI, STATIC_BINARY_URI, WATCHED_URI, "test://template/7/data"] {
            assert!(typed::<ReadResourceResult>(read(uri).unwrap_or_default()).is_ok(), "{uri}");
        }
    }
}
