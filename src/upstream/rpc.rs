//! The gateway's MCP client toward one upstream process: JSON-RPC over the child's stdin and stdout, requests
//! multiplexed by id.
//!
//! The pool asks an upstream for only three things (`initialize`, `tools/list`, `tools/call`), and hands the result of
//! a tool call on as JSON, so this client keeps results as `serde_json::Value` instead of decoding them into typed
//! protocol structures and encoding them again. A request is written by the calling task itself (one `write_all` of a
//! pre-encoded line under a lock); one reader task per process reads lines (bounded, see `transport.rs`), hands each
//! answer to the request waiting for its id, and answers the server's own requests: `ping` with an empty result, the
//! others through the relay of the call in progress ([`super::relay`]) when one is installed, else with "method not
//! found"; each reply is written by a task of its own, so the reader never waits for the server's stdin. The server's
//! notifications go to that relay too (`list_changed` and `resources/updated` to the pool's listener); without one
//! they are dropped.
//! A request abandoned before its answer (the caller gave up or was cancelled) is followed by
//! `notifications/cancelled`. When the server's stdout ends, every waiting request fails with [`RpcError::Closed`] and
//! so does every later one.
//!
//! Dropping the client stops the reader and closes the server's stdin (the MCP way to ask a stdio server to exit).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex as AsyncMutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::lock;
use super::relay::{self, FromServer, ServerEvents, server_event};
use super::transport::{Line, LineReader};

/// Replies to server requests that may wait to be written at once (see [`reply`]).
const MAX_PENDING_REPLIES: usize = 64;

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RpcError {
    /// The server's stdout ended, or its stdin could not be written: the process is gone or going.
    Closed,
    /// The server answered with a JSON-RPC error.
    Server { code: i64, message: String },
}

type Answer = Result<Value, RpcError>;

/// The state shared by callers and the reader task.
struct Shared<W> {
    write: AsyncMutex<Option<W>>,
    /// Requests waiting for an answer, by id; `None` once the stream has ended (no request may wait any more).
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Answer>>>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Replies to server requests not written yet.
    pending_replies: AtomicUsize,
    /// The relay of the call in progress, when the pool installed one.
    relay: Mutex<Option<mpsc::Sender<FromServer>>>,
    /// Told what the server says that belongs to no call (its lists changed, a resource was updated).
    events: Mutex<Option<ServerEvents>>,
    /// Whether the server was told a client's roots.
    roots: relay::RootsSeen,
    /// Where the status notifications of each task this process runs for the gateway go, by the server's task id.
    task_watchers: Mutex<HashMap<String, mpsc::Sender<Value>>>,
}

impl<W: AsyncWrite + Unpin + Send> Shared<W> {
    /// Writes one message as one line; any failure means the connection is unusable.
    async fn send_line(&self, message: &impl Serialize) -> Result<(), RpcError> {
        let mut bytes = serde_json::to_vec(message).map_err(|_| RpcError::Closed)?;
        bytes.push(b'\n');
        let mut guard = self.write.lock().await;
        let stdin = guard.as_mut().ok_or(RpcError::Closed)?;
        stdin.write_all(&bytes).await.map_err(|_| RpcError::Closed)?;
        stdin.flush().await.map_err(|_| RpcError::Closed)
    }

    /// Hands an answer to the request waiting for `id`; an answer nobody waits for (its caller gave up) is dropped.
    fn deliver(&self, id: &Value, answer: Answer) {
        let waiting = id.as_u64().and_then(|id| lock(&self.pending).as_mut().and_then(|pending| pending.remove(&id)));
        match waiting {
            Some(sender) => {
                let _ = sender.send(answer);
            }
            None => tracing::debug!(%id, "an upstream answer that no request waits for was dropped"),
        }
    }

    /// The stream ended: fail every waiting request and refuse new ones.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiting = lock(&self.pending).take();
        for sender in waiting.into_iter().flat_map(HashMap::into_values) {
            let _ = sender.send(Err(RpcError::Closed));
        }
    }
}

/// A JSON-RPC request as written.
#[derive(Serialize)]
struct Request<'a, P> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: P,
}

/// A notification as written.
#[derive(Serialize)]
struct Notification<'a> {
    jsonrpc: &'static str,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<Value>,
}

/// The client of one upstream connection; see the module documentation.
pub(crate) struct RpcClient<W: AsyncWrite + Unpin + Send + 'static = tokio::process::ChildStdin> {
    shared: Arc<Shared<W>>,
    reader: JoinHandle<()>,
}

impl<W: AsyncWrite + Unpin + Send + 'static> RpcClient<W> {
    /// Starts the reader task over `lines` and returns the client writing to `write`.
    pub fn new<R>(lines: LineReader<R>, write: W) -> RpcClient<W>
    where
        R: AsyncRead + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            write: AsyncMutex::new(Some(write)),
            pending: Mutex::new(Some(HashMap::new())),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            pending_replies: AtomicUsize::new(0),
            relay: Mutex::new(None),
            events: Mutex::new(None),
            roots: relay::RootsSeen::default(),
            task_watchers: Mutex::new(HashMap::new()),
        });
        let reader = tokio::spawn(read_loop(lines, shared.clone()));
        RpcClient { shared, reader }
    }

    /// Whether the connection has ended (the server can answer nothing more).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Sends one request and waits for its answer. Dropping the future forgets the request (a late answer is dropped).
    pub async fn request(&self, method: &str, params: impl Serialize) -> Answer {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, answer) = oneshot::channel();
        match lock(&self.shared.pending).as_mut() {
            Some(pending) => pending.insert(id, sender),
            None => return Err(RpcError::Closed),
        };
        // Whatever happens next (an answer, a failed write, the caller giving up), the request stops waiting.
        let _forget = Forget { shared: &self.shared, id };
        self.shared.send_line(&Request { jsonrpc: "2.0", id, method, params }).await?;
        answer.await.unwrap_or(Err(RpcError::Closed))
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str) -> Result<(), RpcError> {
        self.shared.send_line(&Notification { jsonrpc: "2.0", method, params: None }).await
    }

    /// Hands the server's messages to `relay` until the returned guard is dropped.
    pub fn relay_to(&self, relay: mpsc::Sender<FromServer>) -> RelayGuard<'_, W> {
        *lock(&self.shared.relay) = Some(relay.clone());
        RelayGuard { shared: &self.shared, relay }
    }

    /// Whether the server was ever told a client's roots (see [`relay::RootsSeen`]).
    pub fn told_roots(&self) -> bool {
        self.shared.roots.seen()
    }

    /// Tells `listener` what the server says that belongs to no call.
    pub fn on_events(&self, listener: ServerEvents) {
        *lock(&self.shared.events) = Some(listener);
    }

    /// Hands the status notifications of the server's task `task_id` to `watcher` (dropped when it is full), until
    /// [`RpcClient::unwatch_task`].
    pub fn watch_task(&self, task_id: &str, watcher: mpsc::Sender<Value>) {
        lock(&self.shared.task_watchers).insert(task_id.to_string(), watcher);
    }

    pub fn unwatch_task(&self, task_id: &str) {
        lock(&self.shared.task_watchers).remove(task_id);
    }
}

/// Removes the relay of a call when the call ends: from then on the server's requests are refused to it, whatever it
/// sends late. Only its own: on a process a session's calls share, a later call's relay stays in place.
pub(crate) struct RelayGuard<'a, W> {
    shared: &'a Shared<W>,
    relay: mpsc::Sender<FromServer>,
}

impl<W> Drop for RelayGuard<'_, W> {
    fn drop(&mut self) {
        let mut installed = lock(&self.shared.relay);
        if installed.as_ref().is_some_and(|relay| relay.same_channel(&self.relay)) {
            installed.take();
        }
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Drop for RpcClient<W> {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.close();
        // Closing stdin asks the server to exit; if a write holds the lock, the supervisor's signal does the rest.
        if let Ok(mut write) = self.shared.write.try_lock() {
            write.take();
        }
    }
}

/// Takes a request off the waiting list when it ends, whether answered or not.
struct Forget<'a, W: AsyncWrite + Unpin + Send + 'static> {
    shared: &'a Arc<Shared<W>>,
    id: u64,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Drop for Forget<'_, W> {
    fn drop(&mut self) {
        let abandoned = lock(&self.shared.pending).as_mut().and_then(|pending| pending.remove(&self.id)).is_some();
        // Still waiting: the caller gave up (a timeout, a cancelled call). The server is told, as MCP asks, so it can
        // stop the work; its late answer, if any, is dropped.
        if abandoned && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = Arc::clone(self.shared);
            let params = Some(serde_json::json!({"requestId": self.id, "reason": "the gateway's caller cancelled"}));
            runtime.spawn(async move {
                let note = Notification { jsonrpc: "2.0", method: "notifications/cancelled", params };
                let _ = shared.send_line(&note).await;
            });
        }
    }
}

/// The reader task: every line from the server, until its stdout ends.
async fn read_loop<R, W>(mut lines: LineReader<R>, shared: Arc<Shared<W>>)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    loop {
        match lines.next().await {
            Line::End => break,
            Line::Oversized | Line::Blank => continue,
            Line::Message(Value::Array(batch)) if !batch.is_empty() => {
                for message in batch {
                    if let Err(message) = handle(&shared, message) {
                        lines.report_invalid("not a JSON-RPC message", &message.to_string());
                    }
                }
            }
            Line::Message(message) => {
                if let Err(message) = handle(&shared, message) {
                    lines.report_invalid("not a JSON-RPC message", &message.to_string());
                }
            }
        }
    }
    shared.close();
}

/// One message from the server; gives it back when it is not a JSON-RPC message.
fn handle<W: AsyncWrite + Unpin + Send + 'static>(shared: &Arc<Shared<W>>, message: Value) -> Result<(), Value> {
    let Value::Object(mut object) = message else {
        return Err(message);
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Value::Object(object));
    }
    let method = object.get("method").and_then(Value::as_str).map(str::to_owned);
    match (method, object.remove("id")) {
        (Some(method), Some(id)) => {
            reply(shared, method, id, object.remove("params").unwrap_or(Value::Null));
            Ok(())
        }
        (Some(method), None) => {
            notified(shared, method, object.remove("params").unwrap_or(Value::Null));
            Ok(())
        }
        (None, Some(id)) => match (object.remove("result"), object.remove("error")) {
            (Some(result), None) => {
                shared.deliver(&id, Ok(result));
                Ok(())
            }
            (None, Some(Value::Object(error))) => {
                let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
                let message = error.get("message").and_then(Value::as_str).unwrap_or_default().to_owned();
                shared.deliver(&id, Err(RpcError::Server { code, message }));
                Ok(())
            }
            (result, error) => {
                object.insert("id".into(), id);
                object.extend(result.map(|r| ("result".to_owned(), r)));
                object.extend(error.map(|e| ("error".to_owned(), e)));
                Err(Value::Object(object))
            }
        },
        (None, None) => Err(Value::Object(object)),
    }
}

/// A notification of the server's: a changed list or an updated resource to the listener, anything else to the
/// call's relay (dropped when there is none, or when the relay is full).
fn notified<W>(shared: &Shared<W>, method: String, params: Value) {
    if let Some(event) = server_event(&method, &params) {
        let listener = lock(&shared.events).clone();
        if let Some(listener) = listener {
            listener(event);
        }
        return;
    }
    if belongs_to_a_task(&method, &params) {
        // A task's status belongs to no call: never to the relay of whichever call the process serves now, only to
        // the watcher of that task on this process (a flood beyond its room is dropped).
        let id = params.get("taskId").and_then(Value::as_str).unwrap_or_default();
        let status = matches!(method.as_str(), "notifications/tasks/status" | "notifications/tasks");
        let watcher = if status { lock(&shared.task_watchers).get(id).cloned() } else { None };
        match watcher {
            Some(watcher) => {
                let _ = watcher.try_send(params);
            }
            None => tracing::trace!(%method, "upstream task notification ignored"),
        }
        return;
    }
    let relay = lock(&shared.relay).clone();
    match relay {
        Some(relay) => {
            if relay.try_send(FromServer::Notification { method, params }).is_err() {
                tracing::debug!("upstream notification dropped: the call's relay is full or gone");
            }
        }
        None => tracing::trace!(%method, "upstream notification ignored"),
    }
}

/// Answers a request of the server's: `ping` with an empty result, anything else through the call's relay (the
/// caller's answer), or with "method not found" when there is none.
///
/// The reply is written by a task of its own, so the reader never waits for the server's stdin: a server that stops
/// reading while it writes (a full pipe on both sides) cannot stop the answers to other requests from being read. At
/// most [`MAX_PENDING_REPLIES`] replies wait at once; a server that asks for more without reading is not answered.
fn reply<W: AsyncWrite + Unpin + Send + 'static>(shared: &Arc<Shared<W>>, method: String, id: Value, params: Value) {
    if shared.pending_replies.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_REPLIES {
        shared.pending_replies.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!(%method, "upstream request not answered: too many replies waiting to be written");
        return;
    }
    // A task's questions belong to no call (the process may serve another caller's now): refused, never relayed.
    let relay = if belongs_to_a_task(&method, &params) { None } else { lock(&shared.relay).clone() };
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let answer = relay::answer(relay, method.clone(), params).await;
        shared.roots.record(&method, &answer);
        let reply = relay::reply(id, answer);
        // A failed write means the connection is going; the reader sees the end of the stream next.
        let _ = shared.send_line(&reply).await;
        shared.pending_replies.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Whether a server's message is about one of its tasks (a status notification, or a request or notification whose
/// `_meta` names a related task) rather than about the call in progress.
fn belongs_to_a_task(method: &str, params: &Value) -> bool {
    matches!(method, "notifications/tasks/status" | "notifications/tasks")
        || params.pointer("/_meta/io.modelcontextprotocol~1related-task").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::relay::ServerEvent;

    /// JSON-RPC "method not found".
    const METHOD_NOT_FOUND: i64 = -32601;
    use crate::upstream::transport::StreamHealth;
    use serde_json::json;
    use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream, duplex};

    /// A client over in-memory pipes, with the server's ends: what the client wrote, and where to write answers.
    fn client() -> (RpcClient<DuplexStream>, BufReader<DuplexStream>, DuplexStream) {
        let (client, server_in, server_out, _health) = client_with_health();
        (client, server_in, server_out)
    }

    fn client_with_health()
    -> (RpcClient<DuplexStream>, BufReader<DuplexStream>, DuplexStream, tokio::sync::watch::Receiver<StreamHealth>)
    {
        let (client_write, server_read) = duplex(64 * 1024);
        let (server_write, client_read) = duplex(64 * 1024);
        let (lines, health) = LineReader::new(client_read, 1024 * 1024, Arc::from("test"));
        (RpcClient::new(lines, client_write), BufReader::new(server_read), server_write, health)
    }

    #[tokio::test]
    async fn json_that_is_not_json_rpc_is_counted_as_invalid() {
        let (client, mut server_in, mut server_out, mut health) = client_with_health();
        let call = client.request("tools/call", json!({}));
        let server = async {
            let request = read_message(&mut server_in).await;
            let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {}});
            server_out
                .write_all(format!("{{\"hello\":1}}\n[1]\n{{\"jsonrpc\":\"2.0\",\"id\":9}}\n{answer}\n").as_bytes())
                .await
                .unwrap();
        };
        let (answer, ()) = tokio::join!(call, server);
        assert_eq!(answer, Ok(json!({})));
        let seen = health.borrow_and_update().clone();
        assert_eq!(seen.invalid_lines, 3, "{seen:?}");
    }

    async fn read_message(from: &mut BufReader<DuplexStream>) -> Value {
        let mut line = String::new();
        from.read_line(&mut line).await.unwrap();
        serde_json::from_str(&line).unwrap()
    }

    #[tokio::test]
    async fn answers_reach_their_requests_in_any_order() {
        let (client, mut server_in, mut server_out) = client();
        let first = client.request("tools/call", json!({"name": "a"}));
        let second = client.request("tools/call", json!({"name": "b"}));
        let server = async {
            let a = read_message(&mut server_in).await;
            let b = read_message(&mut server_in).await;
            assert_eq!(a["method"], "tools/call");
            let answer = |m: &Value| json!({"jsonrpc": "2.0", "id": m["id"], "result": {"name": m["params"]["name"]}});
            server_out.write_all(format!("{}\n{}\n", answer(&b), answer(&a)).as_bytes()).await.unwrap();
        };
        let (a, b, ()) = tokio::join!(first, second, server);
        assert_eq!(a.unwrap(), json!({"name": "a"}));
        assert_eq!(b.unwrap(), json!({"name": "b"}));
    }

    #[tokio::test]
    async fn errors_pings_and_the_end_of_the_stream() {
        let (client, mut server_in, mut server_out) = client();
        let call = client.request("tools/call", json!({}));
        let server = async {
            let request = read_message(&mut server_in).await;
            let ping = json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"});
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
            let error = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": "bad"}});
            server_out.write_all(format!("{ping}\n{note}\n{error}\n").as_bytes()).await.unwrap();
            assert_eq!(read_message(&mut server_in).await, json!({"jsonrpc": "2.0", "id": "p1", "result": {}}));
        };
        let (answer, ()) = tokio::join!(call, server);
        assert_eq!(answer, Err(RpcError::Server { code: -32602, message: "bad".into() }));

        let waiting = client.request("tools/list", json!({}));
        let end = async {
            read_message(&mut server_in).await;
            drop(server_out);
        };
        let (answer, ()) = tokio::join!(waiting, end);
        assert_eq!(answer, Err(RpcError::Closed));
        assert!(client.is_closed());
        assert_eq!(client.request("tools/list", json!({})).await, Err(RpcError::Closed));
    }

    #[tokio::test]
    async fn server_requests_other_than_ping_get_method_not_found() {
        let (_client, mut server_in, mut server_out) = client();
        let ask = json!({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {}});
        server_out.write_all(format!("{ask}\n").as_bytes()).await.unwrap();
        let reply = read_message(&mut server_in).await;
        assert_eq!(reply["id"], 7);
        assert_eq!(reply["error"]["code"], METHOD_NOT_FOUND);
    }

    #[tokio::test]
    async fn during_a_relayed_call_the_servers_messages_reach_the_relay_and_its_answers_the_server() {
        let (client, mut server_in, mut server_out) = client();
        let (relay, mut messages) = mpsc::channel(8);
        let _relaying = client.relay_to(relay);
        let changed = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&changed);
        client.on_events(Arc::new(move |event| {
            assert_eq!(event, ServerEvent::ListChanged("tools"));
            seen.fetch_add(1, Ordering::SeqCst);
        }));
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
        let listed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        let ask = json!({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {"x": 1}});
        server_out.write_all(format!("{progress}\n{listed}\n{ask}\n").as_bytes()).await.unwrap();
        match messages.recv().await {
            Some(FromServer::Notification { method, params }) => {
                assert_eq!((method.as_str(), params), ("notifications/progress", json!({"progress": 1})));
            }
            other => panic!("expected the progress notification, got {other:?}"),
        }
        match messages.recv().await {
            Some(FromServer::Request { method, params, answer }) => {
                assert_eq!((method.as_str(), params), ("sampling/createMessage", json!({"x": 1})));
                answer.send(Ok(json!({"model": "m"}))).unwrap();
            }
            other => panic!("expected the sampling request, got {other:?}"),
        }
        assert_eq!(read_message(&mut server_in).await, json!({"jsonrpc": "2.0", "id": "s1", "result": {"model": "m"}}));
        assert_eq!(changed.load(Ordering::SeqCst), 1, "list_changed goes to the listener, not the relay");
    }

    #[tokio::test]
    async fn an_abandoned_request_is_followed_by_notifications_cancelled() {
        let (client, mut server_in, _server_out) = client();
        {
            let call = client.request("tools/call", json!({"name": "slow"}));
            let sent = async { read_message(&mut server_in).await };
            let (answered, request) =
                tokio::join!(tokio::time::timeout(std::time::Duration::from_millis(50), call), sent);
            assert!(answered.is_err(), "no answer: the caller gives up");
            let note = read_message(&mut server_in).await;
            assert_eq!(note["method"], "notifications/cancelled");
            assert_eq!(note["params"]["requestId"], request["id"]);
        }
    }

    #[tokio::test]
    async fn a_write_the_server_does_not_read_does_not_stop_answers_being_read() {
        // The client's requests go through a 256-byte pipe that the server reads only when the test says so.
        let (client_write, server_read) = duplex(256);
        let (mut server_out, client_read) = duplex(64 * 1024);
        let (lines, _health) = LineReader::new(client_read, 1024 * 1024, Arc::from("test"));
        let client = Arc::new(RpcClient::new(lines, client_write));
        let mut server_in = BufReader::new(server_read);
        let small = tokio::spawn({
            let client = Arc::clone(&client);
            async move { client.request("tools/call", json!({"name": "small"})).await }
        });
        let small_request = read_message(&mut server_in).await;
        // Too big for the pipe: its write waits, holding the write side, until the server reads.
        let big = tokio::spawn({
            let client = Arc::clone(&client);
            async move { client.request("tools/call", json!({"name": "big", "text": "x".repeat(4096)})).await }
        });
        // Its first bytes arrive; the rest waits (with the write side) until the server reads on.
        assert!(!server_in.fill_buf().await.unwrap().is_empty());
        // A ping (whose reply cannot be written yet) and then the small request's answer.
        let ping = json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"});
        let answer = json!({"jsonrpc": "2.0", "id": small_request["id"], "result": {"ok": true}});
        server_out.write_all(format!("{ping}\n{answer}\n").as_bytes()).await.unwrap();
        let small = tokio::time::timeout(std::time::Duration::from_secs(10), small).await;
        assert_eq!(small.expect("answered while the big write waits").unwrap(), Ok(json!({"ok": true})));
        assert!(!big.is_finished());
        // The server reads again: the big request and the ping's reply come through.
        let mut seen = [read_message(&mut server_in).await, read_message(&mut server_in).await];
        seen.sort_by_key(|m| m.get("method").is_some());
        assert_eq!(seen[0], json!({"jsonrpc": "2.0", "id": "p1", "result": {}}));
        let big_answer = json!({"jsonrpc": "2.0", "id": seen[1]["id"], "result": {}});
        server_out.write_all(format!("{big_answer}\n").as_bytes()).await.unwrap();
        assert_eq!(big.await.unwrap(), Ok(json!({})));
    }
}
