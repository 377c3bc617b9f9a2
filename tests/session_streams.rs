//! A session's `GET` stream, served by the gateway's session layer from the session's own bounded queue (issue 36):
//! a session whose client holds its stream open still goes dormant (`limits.session_dormant_seconds`,
//! `mcpgw_sessions_dormant`) and is still told on that stream what changes for it (a reload, an update of a resource
//! it subscribed to), then answers its next request; what comes while no stream is open waits for one (the newest 16
//! messages); `Last-Event-ID` resumes; one stream per session, ended with the session.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{API_KEY, CONFIG_ID, SHORT_DEADLINE, wait_until};
use mcp::*;
use reqwest::Method;
use serde_json::{Value, json};

const VERSION: &str = "2025-11-25";

/// One SSE event of a stream: its id and its JSON-RPC message (`None` for the first, empty, event).
type Event = (String, Option<Value>);

/// A session's `GET` stream as a client reads it.
struct GetStream {
    status: u16,
    body: String,
    events: mpsc::Receiver<Event>,
}

impl GetStream {
    /// Opens the stream of `session` (resuming after `last_event_id`, if given); the client closes it after
    /// `lifetime` (a blocking read cannot be interrupted otherwise).
    fn open(gw: &TestGateway, session: &str, last_event_id: Option<&str>, lifetime: Duration) -> GetStream {
        let mut request = common::client_with_timeout(lifetime)
            .get(&gw.mcp)
            .header("accept", "text/event-stream")
            .header("authorization", format!("Bearer {API_KEY}"))
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().expect("GET /mcp/");
        let status = response.status().as_u16();
        let (sender, events) = mpsc::channel();
        if status != 200 {
            return GetStream { status, body: response.text().unwrap_or_default(), events };
        }
        std::thread::spawn(move || {
            let (mut id, mut data) = (String::new(), None::<String>);
            for line in BufReader::new(response).lines() {
                let Ok(line) = line else { break };
                if line.is_empty() {
                    if let Some(data) = data.take() {
                        let message = serde_json::from_str(&data).ok();
                        if sender.send((std::mem::take(&mut id), message)).is_err() {
                            break;
                        }
                    }
                } else if let Some(value) = line.strip_prefix("id:") {
                    id = value.trim().to_string();
                } else if let Some(value) = line.strip_prefix("data:") {
                    data = Some(value.trim().to_string());
                }
            }
        });
        GetStream { status, body: String::new(), events }
    }

    /// The next event within `within`.
    fn next(&self, within: Duration) -> Option<Event> {
        self.events.recv_timeout(within).ok()
    }

    /// The next event whose message's `method` is `method`, within `within`.
    fn next_told(&self, method: &str, within: Duration) -> Option<Event> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.events.recv_timeout(left) {
                Ok(event) if event.1.as_ref().is_some_and(|m| m["method"] == json!(method)) => return Some(event),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// Whether the gateway ended the stream within `within`.
    fn ends_within(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.events.recv_timeout(left) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return true,
                Err(mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
        false
    }
}

/// Opens the stream of `session` once the place of the stream before it is free (its client went).
fn reopen(gw: &TestGateway, session: &str, last_event_id: Option<&str>, lifetime: Duration) -> GetStream {
    let mut opened = None;
    let free = wait_until(SHORT_DEADLINE, || {
        let stream = GetStream::open(gw, session, last_event_id, lifetime);
        let ok = stream.status == 200;
        opened = ok.then_some(stream);
        ok
    });
    assert!(free, "the stream's place was not given back");
    opened.expect("a stream")
}

fn in_session(gw: &TestGateway, session: &str, body: &Value) -> Rpc {
    post(&http(), &gw.mcp, Some(API_KEY), &[("mcp-session-id", session), ("mcp-protocol-version", VERSION)], body)
}

fn tools_listed(gw: &TestGateway, session: &str) -> usize {
    let listed = in_session(gw, session, &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    assert_eq!(listed.status, 200, "{}", listed.text);
    listed.message["result"]["tools"].as_array().map_or(0, Vec::len)
}

fn add_server(gw: &TestGateway, name: &str) {
    let added = admin(gw, Method::POST, &format!("/api/v1/configs/{CONFIG_ID}/servers"), Some(&mock_server(name)));
    assert_eq!(added.status, 201, "{:?}", added.body);
}

fn dormant_gateway(servers: Vec<Value>) -> TestGateway {
    let common = json!({"tool_exposure": "transparent", "limits": {"session_dormant_seconds": 0.5}});
    TestGateway::start(&config_with(servers, common))
}

#[test]
fn a_session_holding_its_get_stream_goes_dormant_and_is_told_on_it() {
    let gw = dormant_gateway(vec![mock_server("m1")]);
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    let before = tools_listed(&gw, &session);
    let stream = GetStream::open(&gw, &session, None, Duration::from_secs(600));
    assert_eq!(stream.status, 200, "{}", stream.body);
    assert_eq!(stream.next(SHORT_DEADLINE), Some(("0".to_string(), None)), "the first, empty, event");
    let asleep = wait_until(Duration::from_secs(20), || {
        metric(&gw, "mcpgw_sessions_dormant") == 1.0 && metric(&gw, "mcpgw_session_streams") == 1.0
    });
    assert!(asleep, "the session goes dormant with its stream open; stderr:\n{}", gw.logs());

    // One stream per session, dormant or not.
    let second = GetStream::open(&gw, &session, None, Duration::from_secs(30));
    assert_eq!(second.status, 409, "{}", second.body);
    let refused: Value = serde_json::from_str(&second.body).unwrap_or_default();
    assert_eq!(refused["error"]["data"]["error_code"], json!("STREAM_ALREADY_OPEN"), "{refused}");

    // A reload that changes its view is told on the stream, while the session sleeps.
    add_server(&gw, "m2");
    let told = stream.next_told("notifications/tools/list_changed", Duration::from_secs(20));
    assert!(told.is_some(), "tools/list_changed on the dormant session's stream; stderr:\n{}", gw.logs());
    assert_eq!(metric(&gw, "mcpgw_sessions_dormant"), 1.0, "being told does not wake the session");

    // Its next request wakes it and sees the new server.
    let after = tools_listed(&gw, &session);
    assert!(after > before, "the new server's tools are listed: {before} -> {after}");

    // The session ends: so does its stream.
    assert!(close_session(&http(), &gw.mcp, API_KEY, &session, VERSION).is_success());
    assert!(stream.ends_within(SHORT_DEADLINE), "the stream outlived its session");
    assert!(wait_until(SHORT_DEADLINE, || metric(&gw, "mcpgw_session_streams") == 0.0));
}

/// What a dormant session is told while no stream is open waits for its stream (which does not wake it); a client
/// that reconnects with `Last-Event-ID` gets again what came after that event.
#[test]
fn what_a_session_is_told_without_its_stream_waits_for_the_stream_and_resumes_after_the_last_event_seen() {
    let gw = dormant_gateway(vec![mock_server("m1")]);
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    assert!(wait_until(Duration::from_secs(20), || metric(&gw, "mcpgw_sessions_dormant") == 1.0));
    add_server(&gw, "m2");
    let lists = ["tools", "prompts", "resources"].map(|list| format!("notifications/{list}/list_changed"));
    let stream = GetStream::open(&gw, &session, None, Duration::from_secs(3));
    assert_eq!(stream.status, 200, "{}", stream.body);
    assert_eq!(stream.next(SHORT_DEADLINE), Some(("0".to_string(), None)));
    for (n, method) in lists.iter().enumerate() {
        let event = stream.next(SHORT_DEADLINE).unwrap_or_else(|| panic!("{method} was kept for the stream"));
        assert_eq!(event.0, (n + 1).to_string());
        assert_eq!(event.1.as_ref().map(|m| m["method"].clone()), Some(json!(method)), "{event:?}");
    }
    assert_eq!(metric(&gw, "mcpgw_sessions_dormant"), 1.0, "the stream does not wake the session");

    // Reconnected without Last-Event-ID: only what no stream was handed (nothing); with it, what came after it.
    let again = reopen(&gw, &session, None, Duration::from_secs(2));
    assert_eq!(again.next(SHORT_DEADLINE), Some(("3".to_string(), None)), "resumes after the last event handed out");
    drop(again);
    let resumed = reopen(&gw, &session, Some("1"), Duration::from_secs(10));
    assert_eq!(resumed.next(SHORT_DEADLINE), Some(("1".to_string(), None)));
    let ids: Vec<String> = std::iter::from_fn(|| resumed.next(Duration::from_secs(1))).map(|event| event.0).collect();
    assert_eq!(ids, ["2", "3"], "the events after Last-Event-ID 1");
}

/// A client that does not take what it is told costs the gateway at most the newest 16 messages per session; the
/// older are dropped and counted (`mcpgw_limit_hits_total{limit="session_stream_queue"}`).
#[test]
fn a_session_keeps_only_the_newest_sixteen_messages_for_its_stream() {
    let gw = dormant_gateway(vec![mock_server("m1")]);
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    // Six reloads, each changing three lists: 18 messages.
    for n in 0..6 {
        add_server(&gw, &format!("extra{n}"));
    }
    let full = wait_until(SHORT_DEADLINE, || limit_hits(&gw, "session_stream_queue") >= 2.0);
    assert!(full, "two messages made room for the newest; stderr:\n{}", gw.logs());
    let stream = GetStream::open(&gw, &session, None, Duration::from_secs(10));
    assert_eq!(stream.status, 200, "{}", stream.body);
    let events: Vec<Event> = std::iter::from_fn(|| stream.next(Duration::from_secs(2))).collect();
    let ids: Vec<&str> = events.iter().filter(|event| event.1.is_some()).map(|event| event.0.as_str()).collect();
    let expected: Vec<String> = (3..=18).map(|id| id.to_string()).collect();
    assert_eq!(ids, expected, "the newest 16 of 18 messages");
}

fn hostile_upstream(dir: &Path) -> Value {
    let offers = json!({"resources": [{"uri": "test://doc", "name": "doc", "mimeType": "text/plain"}],
                        "prompts": [{"name": "greet", "description": "Greets."}], "prompt_log": "greeting"});
    hostile_upstream_offering(dir, offers)
}

/// A subscription no longer keeps a session awake: the update of the resource reaches its stream while it sleeps.
#[test]
fn a_dormant_session_hears_the_updates_of_the_resources_it_subscribed_to() {
    let dir = tempfile::tempdir().unwrap();
    let gw = dormant_gateway(vec![hostile_upstream(dir.path())]);
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    let subscribe =
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe", "params": {"uri": "test://doc"}});
    let subscribed = in_session(&gw, &session, &subscribe);
    assert_eq!(subscribed.status, 200, "{}", subscribed.text);
    assert!(subscribed.message.get("error").is_none(), "{}", subscribed.text);
    let stream = GetStream::open(&gw, &session, None, Duration::from_secs(600));
    assert_eq!(stream.status, 200, "{}", stream.body);
    assert!(wait_until(Duration::from_secs(20), || metric(&gw, "mcpgw_sessions_dormant") == 1.0), "{}", gw.logs());

    // Another client's call makes the shared upstream tell of an update (until heard: a second process of the server
    // would not hold the subscription).
    let update = json!({"steps": [{"notify": "notifications/resources/updated", "params": {"uri": "test://doc"}}]});
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                      "params": {"name": "up__relay", "arguments": update, "_meta": stateless_meta()}});
    let mut updated = None;
    for _ in 0..40 {
        let called = post(&http(), &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", Some("up__relay")), &body);
        assert_eq!(called.status, 200, "{}", called.text);
        updated = stream.next_told("notifications/resources/updated", Duration::from_millis(500));
        if updated.is_some() {
            break;
        }
    }
    let updated = updated.unwrap_or_else(|| panic!("resources/updated on the dormant session's stream; {}", gw.logs()));
    assert_eq!(updated.1.map(|m| m["params"]["uri"].clone()), Some(json!("test://doc")));
    assert_eq!(metric(&gw, "mcpgw_sessions_dormant"), 1.0, "the session slept through it");
}

/// rmcp sends a session's notifications other than progress on its `GET` stream, a log message of a request that it
/// answers (`prompts/get`, say) among them: the gateway's stream carries it as rmcp's did.
#[test]
fn a_log_message_during_a_prompt_reaches_the_sessions_stream() {
    let dir = tempfile::tempdir().unwrap();
    let gw = dormant_gateway(vec![hostile_upstream(dir.path())]);
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    let stream = GetStream::open(&gw, &session, None, Duration::from_secs(600));
    assert_eq!(stream.status, 200, "{}", stream.body);
    let get = json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": {"name": "up__greet"}});
    let prompt = in_session(&gw, &session, &get);
    assert_eq!(prompt.status, 200, "{}", prompt.text);
    assert!(prompt.message["result"]["messages"].is_array(), "{}", prompt.text);
    let logged = stream.next_told("notifications/message", Duration::from_secs(20));
    let logged = logged.unwrap_or_else(|| panic!("the log message on the session's stream; {}", gw.logs()));
    assert_eq!(logged.1.map(|m| m["params"]["data"].clone()), Some(json!("greeting")));
}
