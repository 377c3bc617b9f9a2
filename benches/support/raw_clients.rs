//! Light MCP clients for the gateway benchmark: the least client work a caller can do, so the figures measure the
//! gateway and the upstream rather than the client library.
//!
//! - [`RawHttp`]: one keep-alive HTTP/1.1 connection to the gateway with pre-built request bytes (what `wrk` does),
//!   either in a session opened with `initialize` or in the stateless 2026-07-28 form.
//! - [`RawStdio`]: JSON-RPC lines straight to one mock upstream process, with any number of calls in flight (what an
//!   MCP client over stdio does), answers matched by id.
//!
//! Both check every answer, so a broken path cannot look fast.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::oneshot;

/// An HTTP answer: status, headers (names lower-cased) and body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One keep-alive connection to the gateway's `/mcp/` endpoint.
pub struct RawHttp {
    stream: BufReader<TcpStream>,
    host: String,
    key: String,
    /// `Mcp-Session-Id` and `MCP-Protocol-Version` lines of a session, or the stateless headers' protocol version.
    session_headers: String,
    stateless: bool,
}

impl RawHttp {
    /// Connects to `addr` (`127.0.0.1:port`) and opens a session (2025-11-25), or prepares stateless requests.
    pub async fn connect(addr: &str, key: &str, stateless: bool) -> RawHttp {
        RawHttp::try_connect(addr, key, stateless).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RawHttp::connect`] that reports a failure instead of panicking.
    pub async fn try_connect(addr: &str, key: &str, stateless: bool) -> Result<RawHttp, String> {
        let stream = TcpStream::connect(addr).await.map_err(|e| format!("connect to the gateway: {e}"))?;
        stream.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
        let mut client = RawHttp {
            stream: BufReader::new(stream),
            host: addr.to_string(),
            key: key.to_string(),
            session_headers: String::new(),
            stateless,
        };
        if stateless {
            client.session_headers = "MCP-Protocol-Version: 2026-07-28\r\n".to_string();
            return Ok(client);
        }
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcpgw-bench-raw", "version": "1"}}});
        let answer = client.try_post(&client.request(&init, "")).await.map_err(|e| format!("initialize: {e}"))?;
        if answer.status != 200 {
            return Err(format!("initialize: {} {}", answer.status, String::from_utf8_lossy(&answer.body)));
        }
        let session = answer.header("mcp-session-id").ok_or("initialize: no session id")?.to_string();
        client.session_headers = format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n");
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer =
            client.try_post(&client.request(&initialized, "")).await.map_err(|e| format!("initialized: {e}"))?;
        if answer.status != 202 {
            return Err(format!("initialized: {} {}", answer.status, String::from_utf8_lossy(&answer.body)));
        }
        Ok(client)
    }

    /// The bytes of a `tools/call` of `tool` with `arguments`, ready to be sent again and again.
    pub fn tool_call(&self, tool: &str, arguments: Value) -> Vec<u8> {
        self.tool_call_with_id(1, tool, arguments)
    }

    /// The bytes of a `tools/call` of `tool` with `arguments` and JSON-RPC id `id`.
    pub fn tool_call_with_id(&self, id: u64, tool: &str, arguments: Value) -> Vec<u8> {
        let mut params = json!({"name": tool, "arguments": arguments});
        let mut extra = String::new();
        if self.stateless {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "mcpgw-bench-raw", "version": "1"}
            });
            extra = format!("Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\n");
        }
        self.request(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}), &extra)
    }

    /// The bytes of a `POST /mcp/` of `body` with this connection's headers and `extra_headers` (each ending in CRLF).
    pub fn request(&self, body: &Value, extra_headers: &str) -> Vec<u8> {
        let body = serde_json::to_vec(body).expect("json");
        let mut request = format!(
            "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{}{extra_headers}Content-Length: {}\r\n\r\n",
            self.host,
            self.key,
            self.session_headers,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        request
    }

    /// Sends pre-built request bytes and reads the answer (a body with `Content-Length`).
    pub async fn post(&mut self, request: &[u8]) -> Answer {
        self.try_post(request).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RawHttp::post`] that reports a broken connection or a malformed answer instead of panicking.
    pub async fn try_post(&mut self, request: &[u8]) -> std::io::Result<Answer> {
        self.stream.get_mut().write_all(request).await?;
        let mut line = String::new();
        self.read_line(&mut line).await?;
        let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad(&line))?;
        let mut headers = Vec::new();
        let mut length = 0usize;
        let mut chunked = false;
        loop {
            line.clear();
            self.read_line(&mut line).await?;
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            let (name, value) = trimmed.split_once(':').ok_or_else(|| bad(trimmed))?;
            let name = name.to_ascii_lowercase();
            let value = value.trim().to_string();
            chunked |= name == "transfer-encoding" && value.contains("chunked");
            if name == "content-length" {
                length = value.parse().map_err(|_| bad(&value))?;
            }
            headers.push((name, value));
        }
        let body = if chunked { self.read_chunks().await? } else { self.read_exact(length).await? };
        Ok(Answer { status, headers, body })
    }

    /// One line; the end of the stream is an error (`UnexpectedEof`).
    async fn read_line(&mut self, line: &mut String) -> std::io::Result<()> {
        match self.stream.read_line(line).await? {
            0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(()),
        }
    }

    async fn read_exact(&mut self, length: usize) -> std::io::Result<Vec<u8>> {
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        Ok(body)
    }

    /// A chunked body (an SSE stream that ends after its one answer, as `initialize`'s does).
    async fn read_chunks(&mut self) -> std::io::Result<Vec<u8>> {
        let mut body = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            self.read_line(&mut line).await?;
            let size =
                usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16).map_err(|_| bad(&line))?;
            body.extend(self.read_exact(size).await?);
            line.clear();
            self.read_line(&mut line).await?;
            if size == 0 {
                return Ok(body);
            }
        }
    }

    /// Ends the session (DELETE), so that the gateway frees it now rather than at its idle expiry.
    pub async fn close(self) {
        let status = self.try_close().await.unwrap_or_else(|e| panic!("closing the session: {e}"));
        assert!(status < 300, "closing the session: {status}");
    }

    /// Ends the session (DELETE) and gives the answer's status (204 for a stateless client, which has none).
    pub async fn try_close(mut self) -> std::io::Result<u16> {
        if self.stateless {
            return Ok(204);
        }
        let request = format!(
            "DELETE /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n{}Content-Length: 0\r\n\r\n",
            self.host, self.key, self.session_headers
        );
        Ok(self.try_post(request.as_bytes()).await?.status)
    }

    /// Sends a pre-built tool call and checks that the answer is a success holding `expect`.
    pub async fn call(&mut self, request: &[u8], expect: &str) {
        let answer = self.post(request).await;
        let text = String::from_utf8_lossy(&answer.body);
        assert!(
            answer.status == 200
                && text.contains(expect)
                && !text.contains("\"error\"")
                && !text.contains("\"isError\":true"),
            "unexpected answer {}: {text}",
            answer.status
        );
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("malformed HTTP answer near {what:?}"))
}

/// JSON-RPC over one mock upstream process's stdio, calls multiplexed by id.
pub struct RawStdio {
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>>,
    next_id: AtomicU64,
    _child: Child,
}

#[derive(serde::Deserialize)]
struct Id {
    id: Option<u64>,
}

impl RawStdio {
    /// Starts `program` and makes the `initialize` handshake.
    pub async fn start(program: &str) -> Arc<RawStdio> {
        RawStdio::start_with_args(program, &[]).await
    }

    /// Starts `program` with `args` and makes the `initialize` handshake.
    pub async fn start_with_args(program: &str, args: &[&str]) -> Arc<RawStdio> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the mock upstream");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>> = Arc::default();
        let readers = Arc::clone(&pending);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match lines.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let Ok(Id { id: Some(id) }) = serde_json::from_slice::<Id>(&line) else { continue };
                let waiter = readers.lock().expect("pending").remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(line.clone());
                }
            }
        });
        let client = Arc::new(RawStdio {
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            _child: child,
        });
        let init = client
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "mcpgw-bench-raw", "version": "1"}}),
            )
            .await;
        assert!(String::from_utf8_lossy(&init).contains("serverInfo"), "initialize failed");
        client.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await;
        client
    }

    async fn send(&self, line: &[u8]) {
        self.stdin.lock().await.write_all(line).await.expect("write to the mock upstream");
    }

    async fn request(&self, method: &str, params: Value) -> Vec<u8> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending").insert(id, tx);
        let mut line =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).expect("json");
        line.push(b'\n');
        self.send(&line).await;
        rx.await.expect("an answer from the mock upstream")
    }

    /// Calls the mock's `echo` and checks the answer.
    pub async fn echo(&self) {
        let answer = self.request("tools/call", json!({"name": "echo", "arguments": {"text": "hello"}})).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("hello") && !text.contains("\"error\""), "unexpected answer: {text}");
    }
}
