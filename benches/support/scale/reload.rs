//! The reload of a 1M-key configuration in the Redis store while a client calls without pause (issue 36: no request
//! over 10 ms during the reload).
//!
//! One gateway with `config_store: {"type": "redis"}`, seeded from a file of `MCPGW_SCALE_RELOAD_KEYS` keys (default
//! 1,000,000). A client makes echo calls one after the other, each timed. Two reloads, each with a window from the
//! change to 3 s after the gateway serves it:
//! - another replica's write: the bench stores a new version of the document (an e-mail changed) the way a
//!   replica's compare-and-set does (in pieces of 512 KiB, named by the hash) and publishes it; the gateway follows it (`config/sync.rs`);
//! - an admin write on this gateway (`POST /api/v1/users`), which builds, stores and installs the new version itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::dimensions::{key_of, keys_config};
use super::redis_server::Redis;
use super::{Conn, Gateway, SHARED, admin_request, echoed, env_number, free_port, quantile_ms, timed};

const CONFIG_KEY: &str = "mcpgw:config:current";
const CHANNEL: &str = "mcpgw:config:changes";
/// How long the calls are watched after the gateway serves the new version (the old one is freed after that).
const AFTER: Duration = Duration::from_secs(3);

/// Echo calls one after the other until `stop`: when each started and how long it took.
fn caller(addr: String, key: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<(Instant, Duration)>> {
    tokio::spawn(async move {
        let mut conn = Conn::open(&addr, &key).await;
        let session = conn.initialize().await.expect("a session");
        let request = conn.echo(Some(&session), "hello");
        let mut calls = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let start = Instant::now();
            let answer = conn.send(&request).await;
            calls.push((start, start.elapsed()));
            assert!(echoed(&answer, "hello"), "a call failed: {}", String::from_utf8_lossy(&answer.body));
        }
        calls
    })
}

/// What the calls of a window looked like.
struct Window {
    name: &'static str,
    /// From the change to the gateway serving it.
    reload: Duration,
    calls: Vec<Duration>,
    before: Vec<Duration>,
    rss_before: f64,
    rss_after: f64,
}

impl Window {
    fn row(&mut self) -> String {
        let over = self.calls.iter().filter(|d| **d > Duration::from_millis(10)).count();
        let mut longest: Vec<String> = {
            let mut sorted = self.calls.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            sorted.iter().take(3).map(|d| format!("{:.1}", d.as_secs_f64() * 1e3)).collect()
        };
        longest.truncate(3);
        format!(
            "| {} | {:.2} s | {} | {:.3} ms | **{:.1} ms** ({} ms) | {over} | {:.1} ms | {:.0} → {:.0} MiB |",
            self.name,
            self.reload.as_secs_f64(),
            self.calls.len(),
            quantile_ms(&mut self.calls, 0.5),
            quantile_ms(&mut self.calls, 1.0),
            longest.join(", "),
            quantile_ms(&mut self.before, 1.0),
            self.rss_before,
            self.rss_after,
        )
    }
}

/// Runs `change` (which returns once the gateway serves the new version) with the caller running, and collects the
/// calls of the window.
async fn window<F>(gateway: &Gateway, name: &'static str, key: &str, change: F) -> Window
where
    F: FnOnce() + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let calls = caller(gateway.addr.clone(), key.to_string(), Arc::clone(&stop));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = gateway.rss_mib();
    let changed = Instant::now();
    tokio::task::spawn_blocking(change).await.expect("the change");
    let reload = changed.elapsed();
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    let calls = calls.await.expect("the caller");
    // The second before the change is the baseline (the session's first calls, further back, are left out).
    let (before, during): (Vec<_>, Vec<_>) = calls
        .into_iter()
        .filter(|(start, _)| *start + Duration::from_secs(1) > changed)
        .partition(|(start, _)| *start < changed);
    Window {
        name,
        reload,
        calls: during.into_iter().map(|(_, d)| d).collect(),
        before: before.into_iter().map(|(_, d)| d).collect(),
        rss_before,
        rss_after: gateway.rss_mib(),
    }
}

/// The reload of a large store while a client calls.
pub async fn redis_reload() {
    let keys = env_number("MCPGW_SCALE_RELOAD_KEYS", 1_000_000) as usize;
    let redis = Redis::start(free_port(), None);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("seed.json");
    let common = json!({"config_store": {"type": "redis"}, "gw_cache_host": "127.0.0.1", "gw_cache_port": redis.port});
    std::fs::write(&path, keys_config(keys, &common)).expect("write the seed");
    let gateway = Gateway::start_file(&path, Duration::from_secs(300));
    let seeded = Instant::now();
    while gateway.metric("mcpgw_config_version").unwrap_or(0.0) < 1.0 {
        assert!(seeded.elapsed() < Duration::from_secs(120), "the store was not seeded:\n{}", gateway.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    let key = key_of(keys / 2);
    // The first call discovers the mock's tools and writes what it found (a whole write of the store); the windows
    // start once that is over.
    let mut warm = Conn::open(&gateway.addr, &key).await;
    let session = warm.initialize().await.expect("a session");
    let request = warm.echo(Some(&session), "hello");
    timed(&mut warm, &request, 20, |a| echoed(a, "hello")).await;
    tokio::time::sleep(AFTER).await;
    // The stored version now (the first call's pins were written), and the next one.
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port)).expect("a redis client");
    let mut connection = client.get_connection().expect("a redis connection");
    let (version, inline, stored_at, pieces): (u64, Option<Vec<u8>>, Option<String>, Option<u64>) = redis::cmd("HMGET")
        .arg(CONFIG_KEY)
        .arg("version")
        .arg("document")
        .arg("document_key")
        .arg("document_pieces")
        .query(&mut connection)
        .expect("the store");
    // A large document is stored in pieces, `{prefix}:{n}`, under the prefix the hash names (config/redis_store.rs).
    let document: Vec<u8> = match (inline, stored_at, pieces) {
        (Some(document), _, _) => document,
        (None, Some(prefix), Some(pieces)) => (0..pieces)
            .flat_map(|n| {
                redis::cmd("GET").arg(format!("{prefix}:{n}")).query::<Vec<u8>>(&mut connection).expect("a piece")
            })
            .collect(),
        _ => panic!("no document in the store"),
    };
    // Another replica's write: the same document with another e-mail for the base user, as the next version.
    let changed = replace(&document, b"scale@example.com", b"scalf@example.com");
    println!(
        "\n## 2b. reloading {keys} keys from the Redis store ({:.0} MB) while one client calls ({SHARED})\n",
        document.len() as f64 / 1e6
    );
    println!(
        "| reload | change to served | calls in the window | p50 | longest (3 longest) | over 10 ms | longest before | RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let metrics_port = gateway.metrics;
    let next = version + 1;
    let mut follower = window(&gateway, "another replica's write, followed", &key, move || {
        // As a replica writes it: the document in pieces of 512 KiB, then named by the hash and published.
        let prefix = format!("mcpgw:config:document:{next}");
        let mut pieces = 0;
        for (n, piece) in changed.chunks(512 << 10).enumerate() {
            let () = redis::cmd("SET").arg(format!("{prefix}:{n}")).arg(piece).query(&mut connection).expect("a piece");
            pieces = n + 1;
        }
        let _: () = redis::pipe()
            .cmd("HSET")
            .arg(CONFIG_KEY)
            .arg("version")
            .arg(next)
            .arg("document_key")
            .arg(&prefix)
            .arg("document_length")
            .arg(changed.len())
            .arg("document_pieces")
            .arg(pieces)
            .cmd("HDEL")
            .arg(CONFIG_KEY)
            .arg("document")
            .cmd("PUBLISH")
            .arg(CHANNEL)
            .arg(next)
            .ignore()
            .query(&mut connection)
            .expect("the write");
        let probe = super::launch::http_get;
        let started = Instant::now();
        while !probe(metrics_port, "/metrics").contains(&format!("mcpgw_config_version {next}")) {
            assert!(started.elapsed() < Duration::from_secs(120), "the new version was not followed");
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .await;
    println!("{}", follower.row());
    let admin = gateway.admin;
    let mut written = window(&gateway, "admin write on this gateway", &key, move || {
        let (status, body) =
            admin_request(admin, "POST", "/api/v1/users", Some(&json!({"email": "reload@example.com"})));
        if status != 201 {
            // A refused write (the store unreachable, say) is reported; the bench goes on.
            eprintln!("reload: the admin write failed: {status} {body}");
        }
    })
    .await;
    println!("{}", written.row());
    println!(
        "\ngoal: no call over 10 ms during a 1M-key reload; the window runs from the change to {} s after the \
         gateway serves it ({SHARED})",
        AFTER.as_secs()
    );
    drop(gateway);
    drop(redis);
}

/// `bytes` with the first `from` replaced by `to`.
fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes.windows(from.len()).position(|w| w == from).expect("the e-mail in the document");
    [&bytes[..at], to, &bytes[at + from.len()..]].concat()
}
