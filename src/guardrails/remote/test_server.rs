//! A mock HTTP service for the remote clients' tests (guardrail API, moderation, remote auth).
//!
//! [`MockServer::answer`] starts an axum server on `127.0.0.1:0` that records every request (method, path, headers,
//! body) and answers each with one canned status and body; the test then asserts on [`MockServer::only_request`].
//! [`MockServer::silent`] never answers (for timeouts) and [`refused_url`] names a port nobody listens on. The server
//! stops when the value drops.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::IntoResponse;
use serde_json::Value;
use tokio::task::JoinHandle;

/// One request as the mock saw it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    /// The body as JSON (`Value::Null` when it was not JSON).
    pub body: Value,
}

impl Recorded {
    /// A header's value as text; panics when it is missing, so a test fails on a header the client forgot.
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).unwrap_or_else(|| panic!("header {name} missing")).to_str().unwrap()
    }
}

/// A running mock service.
pub(crate) struct MockServer {
    /// `http://127.0.0.1:<port>` without a trailing slash.
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// A server that answers every request with `status` and `body` (sent as `application/json`).
    pub async fn answer(status: u16, body: &str) -> MockServer {
        let status = StatusCode::from_u16(status).unwrap();
        let body = body.to_string();
        Self::start(move || {
            let body = body.clone();
            async move { (status, [(header::CONTENT_TYPE, "application/json")], body).into_response() }
        })
        .await
    }

    /// [`MockServer::answer`] with status 200 and `body` as JSON.
    pub async fn json(body: Value) -> MockServer {
        Self::answer(200, &body.to_string()).await
    }

    /// A server that accepts requests and never answers them.
    pub async fn silent() -> MockServer {
        Self::start(std::future::pending::<axum::response::Response>).await
    }

    async fn start<F, Fut>(respond: F) -> MockServer
    where
        F: Fn() -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = axum::response::Response> + Send + 'static,
    {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let router = Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let seen = Arc::clone(&seen);
            let respond = respond.clone();
            async move {
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let path = uri.path().to_string();
                seen.lock().unwrap().push(Recorded { method, path, headers, body });
                respond().await
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        MockServer { url, requests, task }
    }

    /// The base URL with a trailing slash.
    pub fn url_with_slash(&self) -> String {
        format!("{}/", self.url)
    }

    /// The one request the server received; panics when there were none or several.
    pub fn only_request(&self) -> Recorded {
        let requests = self.requests.lock().unwrap();
        assert_eq!(requests.len(), 1, "expected exactly one request, got {requests:?}");
        requests[0].clone()
    }
}

/// A base URL on which nothing listens: a port bound and released again.
pub(crate) async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

/// A provider config `{base_url, api_key}`, as all three remote providers take it.
pub(crate) fn provider_config(base_url: &str, api_key: &str) -> serde_json::Map<String, Value> {
    serde_json::json!({ "base_url": base_url, "api_key": api_key }).as_object().unwrap().clone()
}
