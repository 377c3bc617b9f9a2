//! A scripted HTTP/1.1 server for the services the gateway calls that cannot run here (the remote guardrail API, a
//! moderation API, an OAuth token endpoint): answers each path with a fixed status and JSON body (status 0: never
//! answers, for timeouts; a JSON-RPC answer whose `id` is `"$request_id"` takes the request's), and records what it
//! was sent. A thread per connection, one request per connection
//! (`Connection: close`), enough for the gateway's few calls per test.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// One request as the mock saw it.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub struct Seen {
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Value,
    /// The body as text (form-encoded bodies are not JSON).
    pub raw: String,
}

/// The running mock; it stops with the test process.
pub struct HttpMock {
    pub base_url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    routes: Arc<Mutex<Routes>>,
}

type Routes = HashMap<String, (u16, Value)>;

impl HttpMock {
    /// Serves `routes`: path -> (status, JSON body). Unknown paths get 404.
    pub fn start(routes: Vec<(&str, u16, Value)>) -> HttpMock {
        let routes: Routes =
            routes.into_iter().map(|(path, status, body)| (path.to_string(), (status, body))).collect();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let routes = Arc::new(Mutex::new(routes));
        let served = Arc::clone(&routes);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (routes, log) = (Arc::clone(&served), Arc::clone(&log));
                std::thread::spawn(move || serve_one(stream, &routes, &log));
            }
        });
        HttpMock { base_url, seen, routes }
    }

    /// Changes what `path` answers from now on.
    #[allow(dead_code)]
    pub fn set(&self, path: &str, status: u16, body: Value) {
        self.routes.lock().unwrap().insert(path.to_string(), (status, body));
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one(mut stream: std::net::TcpStream, routes: &Mutex<Routes>, log: &Mutex<Vec<Seen>>) {
    let Ok(clone) = stream.try_clone() else { return };
    let mut reader = BufReader::new(clone);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let length = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let raw = String::from_utf8_lossy(&body).into_owned();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let request_id = body.get("id").cloned().unwrap_or(Value::Null);
    log.lock().unwrap().push(Seen { path: path.clone(), headers, body, raw });
    let (status, mut answer) = routes.lock().unwrap().get(&path).cloned().unwrap_or((404, Value::Null));
    // A JSON-RPC answer whose id is "$request_id" answers the request it is sent for.
    if answer.get("id").and_then(Value::as_str) == Some("$request_id") {
        answer["id"] = request_id;
    }
    if status == 0 {
        std::thread::sleep(std::time::Duration::from_secs(60));
        return;
    }
    let text = answer.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}
