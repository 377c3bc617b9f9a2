//! `mcpgw-mock-upstream`: a small MCP server over stdio, the upstream that tests and benchmarks put behind the gateway.
//!
//! It speaks MCP with rmcp's server on stdin/stdout and logs only to stderr (one line at start, so tests can see that
//! upstream stderr reaches the gateway's logs). Its tools exercise what a gateway must survive:
//!
//! | tool | input | what it does |
//! |---|---|---|
//! | `echo` | `{text}` | answers `text` (and `structuredContent` `{"text": text}`) |
//! | `add` | `{a, b}` numbers | answers the sum as text |
//! | `slow` | `{ms, started_file?}` | sleeps `ms` milliseconds, then answers `done` (`structuredContent` `{"done": true, "pid"}`); writes its pid to `started_file` first, so a test knows the call has reached the server |
//! | `crash` | `{}` | exits at once with code 1, without answering |
//! | `large` | `{bytes}` | answers one text of `bytes` `x` characters (at most 256 MiB) |
//! | `garbage` | `{}` | writes a line that is not JSON to stdout, then answers normally and keeps serving |
//! | `env` | `{name}` | answers the value of environment variable `name`, or `<unset>` |
//! | `pid` | `{}` | answers its process id |
//! | `fail` | `{message}` | answers a tool error (`isError: true`) with `message` |
//! | `rpc_error` | `{message, bytes?}` | answers a JSON-RPC error (internal error) whose message is `message`, padded with `x` to `bytes` bytes (at most 256 MiB) |
//! | `raw` | `{result}` | answers the object `result` verbatim as its `CallToolResult`: any content item, annotations, `_meta`, fields MCP does not define |
//! | `task_run` (listed with `--task-tool`) | `{ms, text, shape?, id_bytes?}` | runs as a task (contract 15) for `ms` milliseconds, then completes with `text`; see `mock_upstream/tasks.rs` |
//! | `sample` (listed with `--sample-tool`) | `{text, late_ms?, outcome_file?}` | asks the client `sampling/createMessage` with `text` and answers `answered <result>` or `refused <error>`; with `late_ms` it answers `asking later` at once and asks `late_ms` milliseconds after, writing the outcome to `outcome_file` (a server that asks after its call ended) |
//!
//! Requests are served concurrently (rmcp runs each in its own task). The process ends when stdin closes. `raw` is
//! answered by [`Mock`], a thin [`Service`] around the rmcp handler, because rmcp's typed `CallToolResult` would drop
//! what a hostile server may send (unknown fields); every other request goes to the handler.
//!
//! Flags, to play a real server's start: `--start-delay-ms N` waits N milliseconds before it reads anything (as `npx`
//! or `uvx` do while they download), and `--starts-file PATH` appends one line (its pid) to PATH at every start, so a
//! test can count the starts. To play a careless or hostile server's stderr, at start, before its `started` line:
//! `--stderr-env NAME` writes `NAME=<its value>` (a server that prints its configuration), `--stderr-text TEXT` writes
//! TEXT, and `--stderr-bytes N` writes one line of N `x` characters (each flag may repeat). To play a server whose
//! tool definitions change (a rug pull) or carry instructions for the model: `--tools-file PATH` reads a JSON array of
//! tool definitions at start and lists them beside (or in place of, by name) the built-in ones; calling one of them
//! answers `called <name>`. `--sample-tool` lists `sample` (a server that asks its client questions), `--task-tool`
//! lists `task_run` (a server whose tool runs as a task).

#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::io::Write as _;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest, ContentBlock,
    CustomResult, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, Service, ServiceExt};
use serde_json::{Value, json};

#[path = "mock_upstream/tasks.rs"]
mod tasks;

const NAME: &str = "mcpgw-mock-upstream";
const MAX_LARGE_BYTES: u64 = 256 * 1024 * 1024;

struct MockUpstream {
    tools: Vec<Tool>,
    /// The names of the tools of `--tools-file`.
    extra: Vec<String>,
}

impl MockUpstream {
    /// The built-in tools, with `extra` listed beside them (one of the same name replaces the built-in one).
    fn with_extra(extra: Vec<Tool>, sample: bool) -> MockUpstream {
        let mut mock = MockUpstream::new();
        if sample {
            mock.tools.push(tool(
                "sample",
                "Asks the client for a sampling/createMessage with the text, now or late_ms after answering.",
                json!({
                    "text": {"type": "string"},
                    "late_ms": {"type": "integer", "minimum": 0},
                    "outcome_file": {"type": "string"},
                }),
                &["text"],
            ));
        }
        mock.tools.retain(|tool| !extra.iter().any(|e| e.name == tool.name));
        mock.extra = extra.iter().map(|tool| tool.name.to_string()).collect();
        mock.tools.extend(extra);
        mock
    }

    fn new() -> MockUpstream {
        let tools = vec![
            tool("echo", "Answers the given text.", json!({"text": {"type": "string"}}), &["text"]),
            tool("add", "Adds two numbers.", json!({"a": {"type": "number"}, "b": {"type": "number"}}), &["a", "b"]),
            tool(
                "slow",
                "Sleeps for the given milliseconds, then answers done.",
                json!({"ms": {"type": "integer", "minimum": 0}, "started_file": {"type": "string"}}),
                &["ms"],
            ),
            tool("crash", "Exits the server process at once with code 1.", json!({}), &[]),
            tool(
                "large",
                "Answers a text of the given number of 'x' characters.",
                json!({"bytes": {"type": "integer", "minimum": 0, "maximum": MAX_LARGE_BYTES}}),
                &["bytes"],
            ),
            tool("garbage", "Writes a line that is not JSON to stdout, then answers.", json!({}), &[]),
            tool("env", "Answers an environment variable's value.", json!({"name": {"type": "string"}}), &["name"]),
            tool("pid", "Answers the server's process id.", json!({}), &[]),
            tool(
                "fail",
                "Answers a tool error with the message.",
                json!({"message": {"type": "string"}}),
                &["message"],
            ),
            tool(
                "rpc_error",
                "Answers a JSON-RPC error with the message, padded with 'x' to the given bytes.",
                json!({
                    "message": {"type": "string"},
                    "bytes": {"type": "integer", "minimum": 0, "maximum": MAX_LARGE_BYTES},
                }),
                &["message"],
            ),
            tool(
                "raw",
                "Answers the given object verbatim as the tool's result.",
                json!({"result": {"type": "object"}}),
                &["result"],
            ),
            tool("changed", "Sends notifications/tools/list_changed, then answers.", json!({}), &[]),
        ];
        MockUpstream { tools, extra: Vec::new() }
    }
}

/// A tool whose input schema is an object with `properties`, all `required` as listed.
fn tool(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> Tool {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    schema.insert("required".into(), json!(required));
    Tool::new(name, description, schema)
}

fn text(value: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value)])
}

fn argument<'a>(args: &'a JsonObject, name: &str) -> Result<&'a Value, ErrorData> {
    args.get(name).ok_or_else(|| ErrorData::invalid_params(format!("missing argument `{name}`"), None))
}

fn string_argument<'a>(args: &'a JsonObject, name: &str) -> Result<&'a str, ErrorData> {
    argument(args, name)?.as_str().ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a string"), None))
}

fn integer_argument(args: &JsonObject, name: &str) -> Result<u64, ErrorData> {
    argument(args, name)?
        .as_u64()
        .ok_or_else(|| ErrorData::invalid_params(format!("`{name}` must be a non-negative integer"), None))
}

fn number_argument(args: &JsonObject, name: &str) -> Result<Value, ErrorData> {
    let value = argument(args, name)?;
    if value.is_number() {
        Ok(value.clone())
    } else {
        Err(ErrorData::invalid_params(format!("`{name}` must be a number"), None))
    }
}

/// The sum, exact for integers.
fn sum(a: &Value, b: &Value) -> String {
    if let (Some(a), Some(b)) = (a.as_i64(), b.as_i64())
        && let Some(sum) = a.checked_add(b)
    {
        return sum.to_string();
    }
    let sum = a.as_f64().unwrap_or_default() + b.as_f64().unwrap_or_default();
    serde_json::Number::from_f64(sum).map_or_else(|| sum.to_string(), |number| number.to_string())
}

async fn run(name: &str, args: &JsonObject) -> Result<CallToolResult, ErrorData> {
    let pid = std::process::id();
    Ok(match name {
        "echo" => {
            let value = string_argument(args, "text")?;
            let mut result = text(value);
            result.structured_content = Some(json!({"text": value}));
            result
        }
        "add" => text(sum(&number_argument(args, "a")?, &number_argument(args, "b")?)),
        "slow" => {
            let ms = integer_argument(args, "ms")?;
            if let Some(path) = args.get("started_file").and_then(Value::as_str) {
                std::fs::write(path, pid.to_string())
                    .map_err(|e| ErrorData::invalid_params(format!("cannot write {path}: {e}"), None))?;
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let mut result = text("done");
            result.structured_content = Some(json!({"done": true, "pid": pid}));
            result
        }
        "crash" => {
            eprintln!("{NAME}: crash requested, exiting with code 1");
            std::process::exit(1);
        }
        "large" => {
            let bytes = integer_argument(args, "bytes")?;
            if bytes > MAX_LARGE_BYTES {
                return Err(ErrorData::invalid_params(format!("`bytes` must be at most {MAX_LARGE_BYTES}"), None));
            }
            text("x".repeat(usize::try_from(bytes).unwrap_or_default()))
        }
        "garbage" => {
            let mut stdout = std::io::stdout().lock();
            let written = stdout.write_all(b"this line is not JSON-RPC <<garbage>>\n").and_then(|()| stdout.flush());
            if let Err(error) = written {
                return Err(ErrorData::internal_error(format!("writing garbage failed: {error}"), None));
            }
            text("garbage written")
        }
        "env" => {
            let name = string_argument(args, "name")?;
            text(std::env::var(name).unwrap_or_else(|_| "<unset>".to_string()))
        }
        "pid" => text(pid.to_string()),
        "fail" => CallToolResult::error(vec![ContentBlock::text(string_argument(args, "message")?)]),
        "rpc_error" => {
            let mut message = string_argument(args, "message")?.to_string();
            if args.contains_key("bytes") {
                let bytes = integer_argument(args, "bytes")?.min(MAX_LARGE_BYTES);
                let missing = usize::try_from(bytes).unwrap_or_default().saturating_sub(message.len());
                message.push_str(&"x".repeat(missing));
            }
            return Err(ErrorData::internal_error(message, None));
        }
        // Reached only without [`Mock`] (the unit tests): the typed result keeps what rmcp knows of `result`.
        "raw" => serde_json::from_value(raw_result(args)?)
            .map_err(|e| ErrorData::invalid_params(format!("`result` is not a CallToolResult: {e}"), None))?,
        other => return Err(ErrorData::invalid_params(format!("unknown tool `{other}`"), None)),
    })
}

impl ServerHandler for MockUpstream {
    fn get_info(&self) -> ServerConfig {
        let mut implementation = Implementation::new(NAME, env!("CARGO_PKG_VERSION"));
        implementation.description = Some("A mock MCP upstream for mcpgw's tests and benchmarks".to_string());
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(implementation)
            .with_instructions(
                "Tools: echo, add, slow, crash, large, garbage, env, pid, fail, rpc_error, raw, changed.",
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
        let args = request.arguments.unwrap_or_default();
        if self.extra.iter().any(|name| *name == request.name) {
            return Ok(CallToolResponse::Complete(text(format!("called {}", request.name))));
        }
        if request.name == "changed" {
            context
                .peer
                .notify_tool_list_changed()
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            return Ok(CallToolResponse::Complete(text("told")));
        }
        if request.name == "sample" {
            return sample(&args, context.peer).await.map(CallToolResponse::Complete);
        }
        run(&request.name, &args).await.map(CallToolResponse::Complete)
    }
}

/// The `sample` tool: a `sampling/createMessage` to the client, during the call or `late_ms` after it.
// Sampling is deprecated by SEP-2577 for the newest revision; the gateway still relays it for the others.
#[allow(deprecated)]
async fn sample(args: &JsonObject, peer: rmcp::Peer<RoleServer>) -> Result<CallToolResult, ErrorData> {
    let text_asked = string_argument(args, "text")?;
    let params =
        json!({"messages": [{"role": "user", "content": {"type": "text", "text": text_asked}}], "maxTokens": 10});
    let params: rmcp::model::CreateMessageRequestParams = serde_json::from_value(params)
        .map_err(|e| ErrorData::invalid_params(format!("cannot build the request: {e}"), None))?;
    async fn ask(peer: &rmcp::Peer<RoleServer>, params: rmcp::model::CreateMessageRequestParams) -> String {
        match peer.create_message(params).await {
            Ok(result) => format!("answered {}", serde_json::to_string(&result).unwrap_or_default()),
            Err(error) => format!("refused {error}"),
        }
    }
    let Some(late_ms) = args.get("late_ms").and_then(Value::as_u64) else {
        return Ok(text(ask(&peer, params).await));
    };
    let outcome_file = string_argument(args, "outcome_file")?.to_string();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(late_ms)).await;
        let outcome = ask(&peer, params).await;
        let _ = std::fs::write(&outcome_file, outcome);
    });
    Ok(text("asking later"))
}

/// The `result` argument of `raw`.
fn raw_result(args: &JsonObject) -> Result<Value, ErrorData> {
    match argument(args, "result")? {
        result @ Value::Object(_) => Ok(result.clone()),
        _ => Err(ErrorData::invalid_params("`result` must be an object", None)),
    }
}

/// The handler, with `raw` answered verbatim (see the module documentation).
struct Mock(MockUpstream, bool);

impl Service<RoleServer> for Mock {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let custom = |result: Value| ServerResult::CustomResult(CustomResult(result));
        let task_answer =
            |answer: Result<Value, String>| answer.map(custom).map_err(|e| ErrorData::invalid_params(e, None));
        match &request {
            ClientRequest::CallToolRequest(call) if call.params.name == "raw" => {
                let args = call.params.arguments.clone().unwrap_or_default();
                return raw_result(&args).map(custom);
            }
            ClientRequest::CallToolRequest(call) if self.1 && call.params.name == tasks::TOOL => {
                let args = call.params.arguments.clone().unwrap_or_default();
                return Ok(custom(tasks::create(&args, context.peer.clone())));
            }
            ClientRequest::GetTaskRequest(get) => {
                return task_answer(tasks::answer("tasks/get", &json!({"taskId": get.params.task_id})).await);
            }
            ClientRequest::CancelTaskRequest(cancel) => {
                return task_answer(tasks::answer("tasks/cancel", &json!({"taskId": cancel.params.task_id})).await);
            }
            ClientRequest::CustomRequest(asked) if asked.method.starts_with("tasks/") => {
                return task_answer(tasks::answer(&asked.method, asked.params.as_ref().unwrap_or(&Value::Null)).await);
            }
            ClientRequest::ListToolsRequest(_) if self.1 => {
                // rmcp's `Tool` has no `execution`: the task tool's definition is added as JSON.
                let listed = Service::handle_request(&self.0, request, context).await?;
                let mut listed =
                    serde_json::to_value(listed).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                if let Some(tools) = listed.get_mut("tools").and_then(Value::as_array_mut) {
                    tools.push(tasks::definition());
                }
                return Ok(custom(listed));
            }
            _ => {}
        }
        Service::handle_request(&self.0, request, context).await
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Service::handle_notification(&self.0, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.0)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Service::supported_protocol_versions(&self.0)
    }
}

/// The start flags (see the module documentation).
#[derive(Default)]
struct StartFlags {
    delay: Duration,
    starts_file: Option<String>,
    /// Lines written on stderr at start, in order.
    stderr_lines: Vec<String>,
    /// Tool definitions of `--tools-file`.
    extra_tools: Vec<Tool>,
    /// `--sample-tool`: list `sample`.
    sample: bool,
    /// `--task-tool`: list `task_run`.
    task: bool,
}

/// Reads the start flags; unknown arguments are ignored.
fn start_flags() -> Result<StartFlags, String> {
    let mut flags = StartFlags::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--start-delay-ms" => {
                let ms = args.next().and_then(|v| v.parse::<u64>().ok()).ok_or("--start-delay-ms needs a number")?;
                flags.delay = Duration::from_millis(ms);
            }
            "--sample-tool" => flags.sample = true,
            "--task-tool" => flags.task = true,
            "--starts-file" => flags.starts_file = Some(args.next().ok_or("--starts-file needs a path")?),
            "--stderr-env" => {
                let name = args.next().ok_or("--stderr-env needs a variable name")?;
                let value = std::env::var(&name).unwrap_or_else(|_| "<unset>".to_string());
                flags.stderr_lines.push(format!("{name}={value}"));
            }
            "--stderr-text" => flags.stderr_lines.push(args.next().ok_or("--stderr-text needs a text")?),
            "--tools-file" => {
                let path = args.next().ok_or("--tools-file needs a path")?;
                let text = std::fs::read_to_string(&path).map_err(|e| format!("--tools-file {path}: {e}"))?;
                flags.extra_tools = serde_json::from_str(&text)
                    .map_err(|e| format!("--tools-file {path}: not tool definitions: {e}"))?;
            }
            "--stderr-bytes" => {
                let bytes = args.next().and_then(|v| v.parse::<usize>().ok()).ok_or("--stderr-bytes needs a number")?;
                flags.stderr_lines.push("x".repeat(bytes.min(MAX_LARGE_BYTES as usize)));
            }
            _ => {}
        }
    }
    Ok(flags)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let StartFlags { delay, starts_file, stderr_lines, extra_tools, sample, task } = match start_flags() {
        Ok(flags) => flags,
        Err(error) => {
            eprintln!("{NAME}: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    for line in stderr_lines {
        eprintln!("{line}");
    }
    if let Some(path) = starts_file {
        let line = format!("{}\n", std::process::id());
        let written = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        if let Err(error) = written.and_then(|mut file| file.write_all(line.as_bytes())) {
            eprintln!("{NAME}: cannot write {path}: {error}");
        }
    }
    if !delay.is_zero() {
        eprintln!("{NAME}: waiting {} ms before serving", delay.as_millis());
        tokio::time::sleep(delay).await;
    }
    eprintln!("{NAME} {} started (pid {})", env!("CARGO_PKG_VERSION"), std::process::id());
    let server =
        match Mock(MockUpstream::with_extra(extra_tools, sample), task).serve(rmcp::transport::stdio_pipes()).await {
            Ok(server) => server,
            Err(error) => {
                eprintln!("{NAME}: initialization failed: {error}");
                return std::process::ExitCode::FAILURE;
            }
        };
    match server.waiting().await {
        Ok(_) => std::process::ExitCode::SUCCESS,
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
    fn sums_are_exact_for_integers_and_plain_for_floats() {
        assert_eq!(sum(&json!(2), &json!(3)), "5");
        assert_eq!(sum(&json!(-2), &json!(0.5)), "-1.5");
        assert_eq!(sum(&json!(i64::MAX), &json!(1)), "9.223372036854776e+18", "overflow falls back to floats");
    }

    #[test]
    fn every_tool_has_an_object_schema() {
        for tool in MockUpstream::new().tools {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
        }
    }

    #[tokio::test]
    async fn tools_answer_and_reject_bad_arguments() {
        let args = |value: Value| value.as_object().cloned().unwrap_or_default();
        let echo = run("echo", &args(json!({"text": "hi"}))).await.unwrap();
        assert_eq!(echo.structured_content, Some(json!({"text": "hi"})));
        let failed = run("fail", &args(json!({"message": "nope"}))).await.unwrap();
        assert_eq!(failed.is_error, Some(true));
        assert!(run("add", &args(json!({"a": "1", "b": 2}))).await.is_err());
        assert!(run("large", &args(json!({"bytes": MAX_LARGE_BYTES + 1}))).await.is_err());
        assert!(run("nope", &args(json!({}))).await.is_err());
        let error = run("rpc_error", &args(json!({"message": "no", "bytes": 5}))).await.unwrap_err();
        assert_eq!(error.message, "noxxx");
        let raw = run("raw", &args(json!({"result": {"content": [{"type": "text", "text": "hi"}]}}))).await.unwrap();
        assert_eq!(raw.content[0].as_text().map(|t| t.text.as_str()), Some("hi"));
        let unset = run("env", &args(json!({"name": "MCPGW_MOCK_SURELY_UNSET"}))).await.unwrap();
        assert_eq!(unset.content[0].as_text().map(|t| t.text.as_str()), Some("<unset>"));
    }
}
