//! The floor of a Python agent's call: what any Rust MCP gateway must do for a transparent `tools/call` over
//! streamable HTTP to a stdio upstream, and nothing else. One tokio worker thread (as the gateway has on two
//! cores); HTTP/1.1 keep-alive with hyper; the request's JSON parsed; the call written to the upstream's stdin as one
//! line under a new id; the upstream's answer line parsed by a reader task and handed to the waiting request; the
//! answer written back as one JSON body. No logs, no spans, no checks, no sessions kept (one fixed session id).
//!
//! It mimics the two commands `benches/python_client.py` runs on a gateway binary: `init` (writes a config and prints
//! a key) and `serve --config PATH --gateway-addr A --admin-addr B --metrics-addr C` (serves `/mcp/` on A and
//! `/readyz` on C; the server named `py` in the config is the upstream, and `py__NAME` calls its tool `NAME`;
//! `gw_secure_call_tools` calls the first tool of its batch there).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

struct Upstream {
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    waiting: Waiting,
    next: AtomicU64,
}

impl Upstream {
    async fn call(&self, method: &str, params: Value) -> Option<Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().ok()?.insert(id, tx);
        let mut line =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).ok()?;
        line.push(b'\n');
        self.stdin.lock().await.write_all(&line).await.ok()?;
        rx.await.ok()
    }

    async fn notify(&self, method: &str) {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"{method}\"}}\n");
        let _ = self.stdin.lock().await.write_all(line.as_bytes()).await;
    }
}

fn arg(args: &[String], name: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_default()
}

fn init() {
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
    let dir = format!("{home}/.gw");
    let _ = std::fs::create_dir_all(&dir);
    let config = json!({"common_mcp_gateway_config": {}, "mcp_configs": {"default": {"mcp_config": []}}});
    let _ = std::fs::write(format!("{dir}/gw_mcp_config.json"), config.to_string());
    println!("Gateway API key: floor");
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", hyper::header::HeaderValue::from_static("application/json"));
    headers.insert("mcp-session-id", hyper::header::HeaderValue::from_static("floor"));
    response
}

async fn handle(upstream: Arc<Upstream>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != hyper::Method::POST {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, Vec::new()));
    }
    let Ok(body) = request.into_body().collect().await else {
        return Ok(reply(StatusCode::BAD_REQUEST, Vec::new()));
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return Ok(reply(StatusCode::BAD_REQUEST, Vec::new()));
    };
    let Some(id) = message.get("id").cloned() else {
        return Ok(reply(StatusCode::ACCEPTED, Vec::new()));
    };
    let result = match message["method"].as_str() {
        Some("initialize") => json!({"protocolVersion": message["params"]["protocolVersion"], "capabilities":
            {"tools": {}}, "serverInfo": {"name": "floor", "version": "0"}}),
        Some("tools/call") => {
            // Read with `pointer` and `Index`, which give `None`/`null` for a missing field where `IndexMut` panics.
            let params = &message["params"];
            let name = params["name"].as_str().unwrap_or_default();
            let params = if name == "gw_secure_call_tools" {
                // `secure/py`: the batch's first call, on the one upstream.
                let call = params.pointer("/arguments/tool_calls/0").unwrap_or(&Value::Null);
                json!({"name": call["name"], "arguments": call["args"]})
            } else {
                json!({"name": name.strip_prefix("py__").unwrap_or(name), "arguments": params["arguments"]})
            };
            match upstream.call("tools/call", params).await {
                Some(Value::Object(mut answer)) => answer.remove("result").unwrap_or_default(),
                Some(_) => Value::Null,
                None => return Ok(reply(StatusCode::BAD_GATEWAY, Vec::new())),
            }
        }
        _ => json!({}),
    };
    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap_or_default();
    Ok(reply(StatusCode::OK, body))
}

async fn serve_http(listener: TcpListener, upstream: Arc<Upstream>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let upstream = Arc::clone(&upstream);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| handle(Arc::clone(&upstream), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve_ready(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|_request: Request<Incoming>| async {
                Ok::<_, Infallible>(reply(StatusCode::OK, b"ready".to_vec()))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve(args: Vec<String>) -> Result<(), String> {
    let text = std::fs::read_to_string(arg(&args, "--config")).map_err(|e| e.to_string())?;
    let config: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let servers = config["mcp_configs"].as_object().and_then(|c| c.values().next()).cloned().unwrap_or_default();
    let py = servers["mcp_config"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["server_name"] == "py"))
        .ok_or("no server named py")?;
    let command = py["config"]["command"].as_str().ok_or("no command")?;
    let command_args: Vec<String> = py["config"]["args"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let mut child = tokio::process::Command::new(command)
        .args(&command_args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let waiting: Waiting = Arc::default();
    let reader_waiting = Arc::clone(&waiting);
    tokio::spawn(async move {
        let mut lines = BufReader::with_capacity(64 * 1024, stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
            let Some(id) = message["id"].as_u64() else { continue };
            let sender = reader_waiting.lock().ok().and_then(|mut w| w.remove(&id));
            if let Some(sender) = sender {
                let _ = sender.send(message);
            }
        }
    });
    let upstream = Arc::new(Upstream { stdin: tokio::sync::Mutex::new(stdin), waiting, next: AtomicU64::new(1) });
    let init =
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "floor", "version": "0"}});
    upstream.call("initialize", init).await.ok_or("the upstream did not initialize")?;
    upstream.notify("notifications/initialized").await;
    let gateway = TcpListener::bind(arg(&args, "--gateway-addr")).await.map_err(|e| e.to_string())?;
    let metrics = TcpListener::bind(arg(&args, "--metrics-addr")).await.map_err(|e| e.to_string())?;
    tokio::spawn(serve_ready(metrics));
    serve_http(gateway, upstream).await;
    drop(child);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("init") => init(),
        Some("serve") => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build();
            let result = match runtime {
                Ok(runtime) => runtime.block_on(serve(args)),
                Err(error) => Err(error.to_string()),
            };
            if let Err(error) = result {
                eprintln!("mcpgw-floor: {error}");
                std::process::exit(1);
            }
        }
        _ => {
            eprintln!("usage: mcpgw-floor init | serve --config PATH --gateway-addr A --admin-addr B --metrics-addr C");
            std::process::exit(2);
        }
    }
}
