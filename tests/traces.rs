//! Traces from outside: the real gateway with `plugins.telemetry` pointed at in-test OTLP receivers, one over
//! HTTP/protobuf (`POST /v1/traces`, an axum server) and one over gRPC (tonic's `TraceService`). A secure echo call must
//! arrive as a `tool_execution` span with `server_name`, `tool_name`, `project_id`, `success`, `latency_ms` under a
//! `gw_tool_call` parent, from resource `service.name = mcpgw`, and nothing exported may contain the API key or the
//! call's arguments; guardrail checks are spans too. The `stdout` provider prints spans on stderr (stdout stays
//! JSON-RPC only in stdio mode, the spans still queued at exit are flushed, and `gw_log_level` filters log records
//! only). A reload that changes `plugins.telemetry` logs that a restart is needed. An exporter that cannot reach its
//! collector neither slows tool calls nor goes unnoticed: the system health turns `degraded`.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{API_KEY, PROJECT_ID, SHORT_DEADLINE, wait_until, write_json};
use mcp::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Map, Value, json};

/// Distinctive argument text: it must never appear in anything exported.
const ARGUMENT: &str = "argument-text-that-stays-private-7431";
/// Short batches so spans leave within a fraction of a second (the SDK reads this variable).
const FAST_BATCHES: [(&str, &str); 1] = [("OTEL_BSP_SCHEDULE_DELAY", "200")];

/// Every export request a receiver got.
type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// One exported span, flattened: its name, attributes and its resource's attributes.
#[derive(Debug)]
struct SpanSeen {
    name: String,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: Map<String, Value>,
    resource: Map<String, Value>,
}

fn any_value(v: &Option<AnyValue>) -> Value {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        other => json!(format!("{other:?}")),
    }
}

fn attributes(list: &[KeyValue]) -> Map<String, Value> {
    list.iter().map(|kv| (kv.key.clone(), any_value(&kv.value))).collect()
}

fn spans(received: &Received) -> Vec<SpanSeen> {
    let requests = received.lock().unwrap();
    let mut out = Vec::new();
    for request in requests.iter() {
        for rs in &request.resource_spans {
            let resource = rs.resource.as_ref().map(|r| attributes(&r.attributes)).unwrap_or_default();
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                out.push(SpanSeen {
                    name: span.name.clone(),
                    span_id: span.span_id.clone(),
                    parent_span_id: span.parent_span_id.clone(),
                    attributes: attributes(&span.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

/// An OTLP/HTTP receiver on a free port: `POST /v1/traces` with a protobuf body.
async fn http_receiver() -> (SocketAddr, Received) {
    let received: Received = Arc::default();
    let sink = Arc::clone(&received);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = Arc::clone(&sink);
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an ExportTraceServiceRequest");
                sink.lock().unwrap().push(request);
                ([("content-type", "application/x-protobuf")], ExportTraceServiceResponse::default().encode_to_vec())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

struct GrpcReceiver(Received);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/gRPC receiver on a free port.
async fn grpc_receiver() -> (SocketAddr, Received) {
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(GrpcReceiver(Arc::clone(&received)));
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
    (addr, received)
}

fn with_telemetry(telemetry: Value) -> Value {
    let mut config = config_with(vec![mock_server("mock")], json!({}));
    config["plugins"]["telemetry"] = telemetry;
    config
}

/// One secure echo call through the gateway's HTTP front.
async fn secure_echo(gw: &TestGateway) {
    let client = connect(&gw.mcp, API_KEY).await;
    let answer = call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": ARGUMENT}))])).await;
    assert_eq!(success_text(&answer["results"][0], "echo"), ARGUMENT, "{answer}");
    client.cancel().await.unwrap();
}

/// Waits for the `tool_execution` span of the echo call and checks it, its parent and what was never exported.
async fn assert_echo_traced(received: &Received, gw: &TestGateway) {
    let arrived = eventually(SHORT_DEADLINE, || async {
        spans(received).iter().any(|s| s.name == "tool_execution")
            && spans(received).iter().any(|s| s.name == "gw_tool_call")
    })
    .await;
    let all = spans(received);
    assert!(arrived, "no tool_execution and gw_tool_call spans arrived: {all:#?}\nstderr:\n{}", gw.logs());
    let execution = all.iter().find(|s| s.name == "tool_execution").unwrap();
    let a = &execution.attributes;
    assert_eq!(a["server_name"], json!("mock"), "{execution:#?}");
    assert_eq!(a["tool_name"], json!("echo"), "{execution:#?}");
    assert_eq!(a["project_id"], json!(PROJECT_ID), "{execution:#?}");
    assert_eq!(a["success"], json!(true), "{execution:#?}");
    assert!(a["latency_ms"].is_i64(), "latency_ms: {execution:#?}");
    assert_eq!(execution.resource["service.name"], json!("mcpgw"), "{execution:#?}");
    assert!(execution.resource["service.version"].is_string(), "{execution:#?}");

    let parent = all
        .iter()
        .find(|s| s.name == "gw_tool_call" && s.attributes["tool_name"] == json!("gw_secure_call_tools"))
        .unwrap_or_else(|| panic!("no gw_tool_call span for gw_secure_call_tools: {all:#?}"));
    assert_eq!(execution.parent_span_id, parent.span_id, "tool_execution is a child of gw_tool_call");
    assert_eq!(parent.attributes["project_id"], json!(PROJECT_ID), "{parent:#?}");
    assert_eq!(parent.attributes["success"], json!(true), "{parent:#?}");
    assert!(parent.attributes["mcp_config_id"].is_string(), "{parent:#?}");
    assert!(all.iter().any(|s| s.name == "discovery" && s.attributes["server_name"] == json!("mock")), "{all:#?}");

    let everything = format!("{:?}", received.lock().unwrap());
    assert!(!everything.contains(API_KEY), "the API key was exported");
    assert!(!everything.contains(ARGUMENT), "the call's arguments or result were exported");
}

#[test]
fn spans_reach_an_otlp_http_collector() {
    let rt = runtime();
    let (addr, received) = rt.block_on(http_receiver());
    let url = format!("http://{addr}");
    let gw = TestGateway::start_with(
        &with_telemetry(
            json!({"provider": "opentelemetry", "config": {"enabled": true, "url": url, "protocol": "http"}}),
        ),
        &FAST_BATCHES,
    );
    rt.block_on(async {
        secure_echo(&gw).await;
        assert_echo_traced(&received, &gw).await;
    });
    assert_eq!(gw.gw.system_health()["status"], json!("healthy"), "a working exporter keeps the gateway healthy");

    // The exporter is chosen at start: switching it off in the file asks for a restart.
    let mut config = common::read_json(gw.config_path());
    config["plugins"]["telemetry"]["config"]["enabled"] = json!(false);
    common::replace_json(gw.config_path(), &config);
    let warned = wait_until(common::RELOAD_DEADLINE, || gw.logs().contains("plugins.telemetry changed"));
    assert!(warned, "no restart warning after plugins.telemetry changed:\n{}", gw.logs());
}

#[test]
fn spans_reach_an_otlp_grpc_collector_with_guardrail_checks() {
    let rt = runtime();
    let (addr, received) = rt.block_on(grpc_receiver());
    let telemetry = json!({"provider": "opentelemetry",
                        "config": {"enabled": true, "url": format!("http://{addr}"), "protocol": "grpc", "insecure": true}});
    let mut config = with_telemetry(telemetry);
    config["plugins"]["guardrails"] =
        json!({"provider": "custom_keyword", "config": {"blocked_keywords": ["drop table"]}});
    config["mcp_configs"][common::CONFIG_ID]["mcp_config"][0]["input_guardrails_policy"] = json!({"enabled": true});
    let gw = TestGateway::start_with(&config, &FAST_BATCHES);
    rt.block_on(async {
        secure_echo(&gw).await;
        assert_echo_traced(&received, &gw).await;
        let client = connect(&gw.mcp, API_KEY).await;
        let answer =
            call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "drop table x"}))])).await;
        assert_eq!(answer["results"][0]["status"], json!("blocked"), "{answer}");
        client.cancel().await.unwrap();
        let blocked = |s: &SpanSeen| s.name == "guardrail_check" && s.attributes["blocked"] == json!(true);
        let arrived = eventually(SHORT_DEADLINE, || async { spans(&received).iter().any(blocked) }).await;
        let all = spans(&received);
        assert!(arrived, "no blocked guardrail_check span: {all:#?}");
        let check = all.iter().find(|s| blocked(s)).unwrap();
        assert_eq!(check.attributes["stage"], json!("input"), "{check:#?}");
        assert_eq!(check.attributes["detector"], json!("custom_keyword"), "{check:#?}");
        let execution = all.iter().find(|s| s.span_id == check.parent_span_id).expect("the check's parent span");
        assert_eq!(execution.name, "tool_execution", "{execution:#?}");
        assert_eq!(execution.attributes["success"], json!(false), "a blocked call is not a success: {execution:#?}");
        let passed = all.iter().filter(|s| s.name == "guardrail_check" && s.attributes["blocked"] == json!(false));
        assert_eq!(passed.count(), 1, "the echo call's check passed: {all:#?}");
    });
}

#[test]
fn an_unreachable_collector_never_slows_calls_and_degrades_health() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = json!({"provider": "opentelemetry",
                        "config": {"enabled": true, "url": format!("http://127.0.0.1:{port}"), "protocol": "grpc"}});
    let gw = TestGateway::start_with(&with_telemetry(config), &FAST_BATCHES);
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        for round in 0..3 {
            let started = Instant::now();
            let answer = call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "hi"}))])).await;
            assert_eq!(success_text(&answer["results"][0], "echo"), "hi", "round {round}: {answer}");
            assert!(started.elapsed() < Duration::from_secs(5), "round {round} took {:?}", started.elapsed());
        }
        client.cancel().await.unwrap();
    });
    let mut health = Value::Null;
    let degraded = wait_until(Duration::from_secs(15), || {
        health = gw.gw.system_health();
        health["status"] == json!("degraded")
    });
    assert!(degraded, "health while the exporter fails: {health}\nstderr:\n{}", gw.logs());
    assert_eq!(health["degraded_reasons"], json!(["telemetry exporter failing"]), "{health}");
    assert_eq!(health["config_valid"], json!(true), "{health}");
    assert!(gw.logs().contains("telemetry exporter failing"), "the failure is logged:\n{}", gw.logs());
    let metrics = gw.gw.metrics_get("/metrics").text;
    let errors = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mcpgw_trace_export_errors_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(errors.is_some_and(|e| e >= 1.0), "failed exports are counted:\n{metrics}");
}

#[test]
fn the_stdout_provider_prints_spans_on_stderr_and_keeps_stdout_for_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let mut config = with_telemetry(json!({"provider": "stdout", "config": {"enabled": true}}));
    // Spans do not depend on the log level: WARNING hides INFO records, never spans.
    config["common_mcp_gateway_config"]["gw_log_level"] = json!("WARNING");
    write_json(&path, &config);
    // No short batch delay here: the span must leave when the gateway exits, by the flush on shutdown.
    let mut child = stdio_command(&path, &[("GW_GATEWAY_KEY", API_KEY)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpgw serve --transport stdio");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            all.push(line.clone());
            let _ = tx.send(line);
        }
        all
    });
    let mut send = |v: Value| stdin.write_all(format!("{v}\n").as_bytes()).unwrap();
    send(initialize_body(1, "2025-06-18"));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(tools_call_body(2, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": ARGUMENT}))])));
    let deadline = Instant::now() + CALL_DEADLINE;
    loop {
        let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("an answer to the call");
        if serde_json::from_str::<Value>(&line).is_ok_and(|v| v["id"] == json!(2)) {
            break;
        }
    }
    // Closing stdin ends the gateway.
    drop(stdin);
    let exit_deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < exit_deadline, "mcpgw did not exit after stdin closed");
        thread::sleep(Duration::from_millis(25));
    }
    let lines = reader.join().unwrap();
    let logs = stderr.join().unwrap();
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        assert_eq!(v["jsonrpc"], json!("2.0"), "stdout line is not a JSON-RPC message: {line}");
    }
    let spans: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == json!("span"))
        .collect();
    let execution = spans
        .iter()
        .find(|s| s["span_name"] == json!("tool_execution"))
        .unwrap_or_else(|| panic!("no tool_execution span on stderr:\n{logs}"));
    let a = &execution["attributes"];
    assert_eq!((&a["server_name"], &a["tool_name"]), (&json!("mock"), &json!("echo")), "{execution}");
    assert_eq!((&a["project_id"], &a["success"]), (&json!(PROJECT_ID), &json!(true)), "{execution}");
    assert!(a["latency_ms"].is_u64(), "{execution}\n{logs}");
    for field in ["trace_id", "span_id", "parent_span_id", "start_time", "end_time"] {
        assert!(execution[field].is_string(), "{field}: {execution}");
    }
    assert!(execution["duration_ms"].is_number(), "{execution}");
    assert_eq!(execution["service_name"], json!("mcpgw"), "{execution}");
    assert!(spans.iter().any(|s| s["span_name"] == json!("gw_tool_call")), "{logs}");
    let info_records = logs.lines().filter(|l| l.contains(r#""level":"INFO""#) && !l.contains(r#""message":"span""#));
    assert_eq!(info_records.count(), 0, "INFO records at gw_log_level WARNING:\n{logs}");
    let printed = serde_json::to_string(&spans).unwrap();
    assert!(!printed.contains(API_KEY) && !printed.contains(ARGUMENT), "a span carries the key or the arguments");
}
