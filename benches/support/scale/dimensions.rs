//! The curves of `benches/scale.rs`: sessions, keys, tools, rules and replicas (the reload of a 1M-key store is in
//! `reload.rs`). Each point runs in a gateway of its own; each curve ends with its fitted constant.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::redis_server::Redis;
use super::{
    Conn, Gateway, KEY, SHARED, admin_request, base_config, binary, echoed, env_number, fit, free_port, quantile_ms,
    timed,
};

/// Echo calls timed at concurrency 1 for each p50.
const SAMPLES: usize = 400;

/// The JSON-RPC message of an answer: a JSON body, or the `data:` line of an SSE stream that holds one.
pub fn message_of(body: &[u8]) -> Value {
    let text = String::from_utf8_lossy(body);
    if let Ok(value) = serde_json::from_str(&text) {
        return value;
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .find_map(|data| serde_json::from_str(data.trim()).ok())
        .unwrap_or(Value::Null)
}

/// Opens `count` sessions over `connections` keep-alive connections at once; gives their ids.
async fn open_sessions(addr: &str, key: &str, count: usize, connections: usize) -> Vec<String> {
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let share = count / connections + usize::from(c < count % connections);
            let (addr, key) = (addr.to_string(), key.to_string());
            tokio::spawn(async move {
                let mut conn = Conn::open(&addr, &key).await;
                let mut ids = Vec::with_capacity(share);
                for _ in 0..share {
                    ids.push(conn.initialize().await.unwrap_or_else(|e| panic!("opening a session: {e}")));
                }
                ids
            })
        })
        .collect();
    let mut ids = Vec::with_capacity(count);
    for task in tasks {
        ids.extend(task.await.expect("an opening task"));
    }
    ids
}

/// The p50 of [`SAMPLES`] echo calls in `session` (a new one when `None`; after a warm-up), in milliseconds.
async fn echo_p50(addr: &str, key: &str, session: Option<&str>) -> f64 {
    let mut conn = Conn::open(addr, key).await;
    let session = match session {
        Some(id) => id.to_string(),
        None => conn.initialize().await.unwrap_or_else(|e| panic!("opening a session: {e}")),
    };
    let request = conn.echo(Some(&session), "hello");
    timed(&mut conn, &request, 50, |a| echoed(a, "hello")).await;
    quantile_ms(&mut timed(&mut conn, &request, SAMPLES, |a| echoed(a, "hello")).await, 0.5)
}

/// 1. Sessions opened and held idle.
pub async fn sessions() {
    let idle = Duration::from_secs(env_number("MCPGW_SCALE_IDLE_SECONDS", 40));
    struct Point {
        sessions: usize,
        gateway: Gateway,
        base: f64,
        open_secs: f64,
        opened: f64,
        p50: f64,
        probe: String,
        opened_at: Instant,
    }
    let mut points = Vec::new();
    for count in [100, 1_000, 3_000, 10_000] {
        let mut config = base_config();
        config["common_mcp_gateway_config"]["limits"] = json!({"max_sessions": 100_000,
            "max_sessions_per_key": 1_000_000, "session_idle_timeout_seconds": 86_400, "max_inflight_per_key": 1000});
        let gateway = Gateway::start(&config);
        // The upstream process started and the first call made before the base is read.
        echo_p50(&gateway.addr, KEY, None).await;
        let base = gateway.rss_mib();
        let started = Instant::now();
        let ids = open_sessions(&gateway.addr, KEY, count, 4).await;
        let open_secs = started.elapsed().as_secs_f64();
        let opened = gateway.rss_mib();
        let probe = ids[ids.len() / 2].clone();
        let p50 = echo_p50(&gateway.addr, KEY, Some(&probe)).await;
        points.push(Point { sessions: count, gateway, base, open_secs, opened, p50, probe, opened_at: Instant::now() });
    }
    if let Some(last) = points.last() {
        let left = idle.saturating_sub(last.opened_at.elapsed());
        println!("sessions: all opened; idle for {} s ...", left.as_secs());
        tokio::time::sleep(left).await;
    }
    println!("\n## 1. sessions opened, then idle ({SHARED})\n");
    println!(
        "| sessions | opened in | RSS before | RSS opened | RSS after idle (idle for) | echo p50 in a session | tools/list after idle |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---|");
    let (mut at_open, mut at_idle) = (Vec::new(), Vec::new());
    for point in &points {
        let idle_for = point.opened_at.elapsed().as_secs();
        let after = point.gateway.rss_mib();
        let mut conn = Conn::open(&point.gateway.addr, KEY).await;
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let answer = conn.send(&conn.bytes(Some(&point.probe), &list)).await;
        let listed = message_of(&answer.body).pointer("/result/tools").and_then(Value::as_array).map(Vec::len);
        let check = match listed {
            Some(tools) if answer.status == 200 => format!("ok ({tools} tools)"),
            _ => {
                let error = format!("ERROR {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
                eprintln!(
                    "sessions: a session of {} did not answer tools/list after the idle wait: {error}",
                    point.sessions
                );
                error
            }
        };
        at_open.push((point.sessions as f64, (point.opened - point.base) * 1024.0));
        at_idle.push((point.sessions as f64, (after - point.base) * 1024.0));
        println!(
            "| {} | {:.1} s | {:.1} MiB | {:.1} MiB | {:.1} MiB ({idle_for} s) | {:.3} ms | {check} |",
            point.sessions, point.open_secs, point.base, point.opened, after, point.p50
        );
    }
    let (open_slope, _) = fit(&at_open);
    let (idle_slope, _) = fit(&at_idle);
    println!(
        "\nO(sessions) memory: {open_slope:.1} KiB per session open, {idle_slope:.1} KiB per session after {} s idle \
         (least-squares slopes of RSS above the gateway's own before the sessions); echo p50 flat ({SHARED})",
        idle.as_secs()
    );
}

/// The API key number `i` of the generated tables.
pub fn key_of(i: usize) -> String {
    format!("gw_scale-{i:010}-padding-to-forty-three-chars")
}

/// A configuration with `keys` API keys over 1,000 users in 100 projects (the base configuration's project, user and
/// [`KEY`] kept), `common` merged into `common_mcp_gateway_config`. Written by hand: a `Value` of a million keys
/// would take longer than the gateway's load.
pub fn keys_config(keys: usize, common: &Value) -> Vec<u8> {
    let mut doc = base_config();
    if let (Some(into), Some(from)) = (doc["common_mcp_gateway_config"].as_object_mut(), common.as_object()) {
        into.extend(from.clone());
    }
    for p in 0..100 {
        let members: Vec<String> = (0..10).map(|u| format!("user-{p:03}-{u}")).collect();
        for member in &members {
            doc["users"][member] = json!({"email": format!("{member}@example.com")});
        }
        doc["projects"][format!("proj-{p:03}")] =
            json!({"project_name": format!("project {p}"), "mcp_config_id": "c1", "users": members});
    }
    let Some(Value::Object(base_keys)) = doc.as_object_mut().and_then(|d| d.remove("apikeys")) else {
        panic!("the base configuration has keys")
    };
    let mut text = serde_json::to_string(&doc).expect("json");
    text.pop(); // the closing brace
    text.push_str(",\"apikeys\":{");
    for (key, record) in &base_keys {
        text.push_str(&format!("{}:{record},", json!(key)));
    }
    text.reserve(keys * 96);
    for i in 0..keys {
        let (p, u) = (i % 100, (i / 100) % 10);
        text.push_str(&format!("\"{}\":{{\"project_id\":\"proj-{p:03}\",\"user_id\":\"user-{p:03}-{u}\"}}", key_of(i)));
        text.push(if i + 1 < keys { ',' } else { '}' });
    }
    text.push('}');
    text.into_bytes()
}

/// 2. API keys in the file.
pub async fn keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!("\n## 2. API keys in the configuration file ({SHARED})\n");
    println!("| keys | file | start to ready | RSS at ready | RSS after calls | echo p50, key in the middle |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let (mut load, mut memory, mut p50s) = (Vec::new(), Vec::new(), Vec::new());
    for count in [10_000, 100_000, 300_000, 1_000_000] {
        let path = dir.path().join(format!("keys-{count}.json"));
        let bytes = keys_config(count, &json!({}));
        std::fs::write(&path, &bytes).expect("write the config");
        let gateway = Gateway::start_file(&path, Duration::from_secs(300));
        let at_ready = gateway.rss_mib();
        let p50 = echo_p50(&gateway.addr, &key_of(count / 2), None).await;
        let after = gateway.rss_mib();
        println!(
            "| {count} | {:.1} MB | {:.0} ms | {at_ready:.1} MiB | {after:.1} MiB | {p50:.3} ms |",
            bytes.len() as f64 / 1e6,
            gateway.ready_after.as_secs_f64() * 1e3
        );
        load.push((count as f64, gateway.ready_after.as_secs_f64() * 1e9));
        memory.push((count as f64, at_ready * 1024.0 * 1024.0));
        p50s.push((count as f64, p50 * 1e3));
    }
    let ((ns, ns0), (bytes, bytes0), (us, _)) = (fit(&load), fit(&memory), fit(&p50s));
    println!(
        "\nO(keys) load: {ns:.0} ns per key (+ {:.0} ms); O(keys) memory: {bytes:.0} bytes per key (+ {:.1} MiB); \
         O(1) lookup: the p50 moves {:.3} µs per 1,000 keys ({SHARED})",
        ns0 / 1e6,
        bytes0 / 1024.0 / 1024.0,
        us * 1e3
    );
}

/// Five tool files of `total / 5` tools each; gives their paths.
fn tool_files(dir: &std::path::Path, total: usize) -> Vec<std::path::PathBuf> {
    (0..5)
        .map(|s| {
            let tools: Vec<Value> = (0..total / 5)
                .map(|i| {
                    json!({"name": format!("t_{s}_{i}"),
                        "description": format!("Scale benchmark tool {i} of server {s}: looks a record up by its id and \
                            answers it as text."),
                        "inputSchema": {"type": "object", "properties": {
                            "id": {"type": "string", "description": "The record's id."},
                            "limit": {"type": "integer", "description": "At most this many records."}},
                            "required": ["id"]}})
                })
                .collect();
            let path = dir.join(format!("tools-{total}-{s}.json"));
            std::fs::write(&path, serde_json::to_vec(&tools).expect("json")).expect("write the tools");
            path
        })
        .collect()
}

/// 3. Upstream tools listed in transparent mode.
pub async fn tools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let samples = env_number("MCPGW_SCALE_LISTINGS", 200) as usize;
    println!("\n## 3. tools/list in transparent mode, five servers, from the cache ({SHARED})\n");
    println!("| tools | first listing | p50 | p99 | gateway CPU per listing | answer | RSS |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut curve = Vec::new();
    for total in [50, 500, 2_000, 5_000] {
        let servers: Vec<Value> = tool_files(dir.path(), total)
            .iter()
            .enumerate()
            .map(|(s, path)| {
                json!({"server_name": format!("s{s}"), "tool_filter": {"allow": ["t_*"]},
                    "config": {"command": binary("mcpgw-mock-upstream"), "args": ["--tools-file", path]}})
            })
            .collect();
        let mut config = base_config();
        config["common_mcp_gateway_config"]["tool_exposure"] = json!("transparent");
        config["common_mcp_gateway_config"]["upstream_pool"] = json!({"max_processes_per_server": 1});
        config["mcp_configs"]["c1"]["mcp_config"] = Value::Array(servers);
        let gateway = Gateway::start(&config);
        let mut conn = Conn::open(&gateway.addr, KEY).await;
        let session = conn.initialize().await.expect("a session");
        let request = conn.bytes(Some(&session), &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let started = Instant::now();
        let first = conn.send(&request).await;
        let first_ms = started.elapsed().as_secs_f64() * 1e3;
        let listed = message_of(&first.body).pointer("/result/tools").and_then(Value::as_array).map_or(0, Vec::len);
        if listed != total {
            eprintln!("tools: {listed} listed instead of {total}: {}", String::from_utf8_lossy(&first.body));
        }
        let size = first.body.len();
        timed(&mut conn, &request, 10, |a| a.status == 200).await;
        let cpu = gateway.cpu_micros();
        let mut times = timed(&mut conn, &request, samples, |a| a.status == 200 && a.body.len() + 64 > size).await;
        let cpu_per = (gateway.cpu_micros() - cpu) as f64 / samples as f64 / 1e3;
        let (p50, p99) = (quantile_ms(&mut times, 0.5), quantile_ms(&mut times, 0.99));
        println!(
            "| {listed} | {first_ms:.0} ms | {p50:.2} ms | {p99:.2} ms | {cpu_per:.2} ms | {:.0} KiB | {:.1} MiB |",
            size as f64 / 1024.0,
            gateway.rss_mib()
        );
        curve.push((listed as f64, p50 * 1e3));
    }
    let (per_tool, base) = fit(&curve);
    println!(
        "\nO(tools) listing: {:.0} µs per 1,000 tools (+ {base:.0} µs); goal: 5,000 tools under 5 ms p50 ({SHARED})",
        per_tool * 1e3
    );
}

/// Rule `n`: shape `n % 10` of `benches/policy.rs` and `benches/policy.py`, none matching the echo call.
fn rule(n: usize) -> Value {
    let (effect, when) = match n % 10 {
        0 => (
            "deny",
            format!(
                "target.server == 'github_{n}' && target.annotations.destructiveHint && !('oncall' in principal.groups)"
            ),
        ),
        1 => ("deny", format!("target.name == 'tool_{n}' && principal.project_id == 'p'")),
        2 => (
            "deny",
            format!("target.kind == 'tool' && target.name.startsWith('delete_{n}_') && !('admin' in principal.roles)"),
        ),
        3 => ("deny", format!("principal.email.endsWith('@contractor{n}.example.com') && target.server == 'billing'")),
        4 => ("deny", format!("'readonly_{n}' in principal.roles && !target.annotations.readOnlyHint")),
        5 => ("deny", format!("target.server == 'deploy_{n}' && now > timestamp('2026-01-01T00:00:00Z')")),
        6 => (
            "allow",
            format!("target.name in ['search_{n}', 'list_issues_{n}', 'get_file_{n}'] && principal.auth == 'oauth'"),
        ),
        7 => ("deny", format!("has(request.args.limit_{n}) && request.args.limit_{n} > 100")),
        8 => ("deny", format!("principal.key_id == 'revoked-{n}' || principal.user_id == 'blocked-{n}'")),
        _ => (
            "deny",
            format!(
                "target.server == 'payments_{n}' && (!has(principal.claims.dept) || principal.claims.dept != 'finance')"
            ),
        ),
    };
    json!({"name": format!("rule-{n}"), "effect": effect, "when": when, "message": "denied by the benchmark"})
}

/// `clients` connections, each with a session of `gateway`, calling echo until `duration` is over: the calls made.
async fn load(gateway: &Gateway, clients: usize, duration: Duration) -> u64 {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let addr = gateway.addr.clone();
            tokio::spawn(async move {
                let mut conn = Conn::open(&addr, KEY).await;
                let session = conn.initialize().await.expect("a session");
                let text = format!("client {c}");
                let request = conn.echo(Some(&session), &text);
                let deadline = Instant::now() + duration;
                let mut calls = 0;
                while Instant::now() < deadline {
                    let answer = conn.send(&request).await;
                    assert!(echoed(&answer, &text), "a call failed: {}", String::from_utf8_lossy(&answer.body));
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let mut calls = 0;
    for task in tasks {
        calls += task.await.expect("a client");
    }
    calls
}

/// 4. Authorization rules that do not match the call.
pub async fn rules() {
    let seconds = Duration::from_secs(env_number("MCPGW_SCALE_SECONDS", 3));
    println!("\n## 4. authorization rules that do not match the call ({SHARED})\n");
    println!("| rules | echo p50, 1 client | calls/s, 4 clients | gateway CPU per call | vs 0 rules |");
    println!("|---:|---:|---:|---:|---:|");
    let (mut curve, mut none) = (Vec::new(), None);
    for count in [0, 1, 10, 100, 1_000] {
        let mut config = base_config();
        config["common_mcp_gateway_config"]["policies"] = (0..count).map(rule).collect();
        config["common_mcp_gateway_config"]["policy_default"] = json!("allow");
        let gateway = Gateway::start(&config);
        let p50 = echo_p50(&gateway.addr, KEY, None).await;
        load(&gateway, 4, Duration::from_millis(500)).await;
        let cpu = gateway.cpu_micros();
        let calls = load(&gateway, 4, seconds).await;
        let per_call = (gateway.cpu_micros() - cpu) as f64 / calls as f64;
        let base = *none.get_or_insert(per_call);
        println!(
            "| {count} | {p50:.3} ms | {:.0} | {per_call:.0} µs | {:.2}x |",
            calls as f64 / seconds.as_secs_f64(),
            per_call / base
        );
        if count > 0 {
            curve.push((count as f64, per_call));
        }
    }
    let (per_rule, _) = fit(&curve);
    println!(
        "\nCPU per call: {:.2} µs per rule (slope from 1 to 1,000; most rules' outcomes are remembered per caller and \
         target, only those reading `request` or `now` run at each call) ({SHARED})",
        per_rule
    );
}

/// 5. Replicas on one Redis configuration store.
pub async fn replicas() {
    let seconds = Duration::from_secs(env_number("MCPGW_SCALE_SECONDS", 3));
    let clients = 8;
    println!("\n## 5. replicas on one Redis configuration store, {clients} clients spread over them ({SHARED})\n");
    println!(
        "| replicas | calls/s (all) | calls/s per replica | gateway CPU per call, each replica | admin write seen by the others: p50 / max |"
    );
    println!("|---:|---:|---:|---|---:|");
    for count in [1, 2, 4] {
        let redis = Redis::start(free_port(), None);
        let mut config = base_config();
        let common = &mut config["common_mcp_gateway_config"];
        common["config_store"] = json!({"type": "redis"});
        common["gw_cache_host"] = json!("127.0.0.1");
        common["gw_cache_port"] = json!(redis.port);
        let gateways: Vec<Gateway> = (0..count).map(|_| Gateway::start(&config)).collect();
        for gateway in &gateways {
            load(gateway, 1, Duration::from_millis(300)).await;
        }
        let cpu: Vec<u64> = gateways.iter().map(Gateway::cpu_micros).collect();
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let addr = gateways[c % count].addr.clone();
                tokio::spawn(async move {
                    let mut conn = Conn::open(&addr, KEY).await;
                    let session = conn.initialize().await.expect("a session");
                    let request = conn.echo(Some(&session), "hello");
                    let deadline = Instant::now() + seconds;
                    let mut calls = 0u64;
                    while Instant::now() < deadline {
                        assert!(echoed(&conn.send(&request).await, "hello"), "a call failed");
                        calls += 1;
                    }
                    calls
                })
            })
            .collect();
        let mut per_replica = vec![0u64; count];
        for (c, task) in tasks.into_iter().enumerate() {
            per_replica[c % count] += task.await.expect("a client");
        }
        let total: u64 = per_replica.iter().sum();
        let cpu_per_call: Vec<String> = gateways
            .iter()
            .zip(&cpu)
            .zip(&per_replica)
            .map(|((g, before), calls)| format!("{:.0} µs", (g.cpu_micros() - before) as f64 / *calls as f64))
            .collect();
        let propagation = if count > 1 {
            let admins: Vec<u16> = gateways.iter().map(|g| g.admin).collect();
            let mut times = tokio::task::spawn_blocking(move || propagation(&admins, 10)).await.expect("writes");
            format!("{:.1} ms / {:.1} ms", quantile_ms(&mut times, 0.5), quantile_ms(&mut times, 1.0))
        } else {
            "(one replica)".to_string()
        };
        println!(
            "| {count} | {:.0} | {:.0} | {} | {propagation} |",
            total as f64 / seconds.as_secs_f64(),
            total as f64 / seconds.as_secs_f64() / count as f64,
            cpu_per_call.join(", ")
        );
        drop(gateways);
        drop(redis);
    }
    println!(
        "\nNot more than 4 replicas: on 2 cores each replica's worker thread, its upstream and the clients already share \
         the same two cores, so more replicas only divide them further ({SHARED})"
    );
}

/// `writes` users created on the first admin port, each awaited on every other: the time until all have it.
fn propagation(admins: &[u16], writes: usize) -> Vec<Duration> {
    let mut times = Vec::new();
    for n in 0..writes {
        let email = format!("propagation-{n}-{}@example.com", std::process::id());
        let (status, body) = admin_request(admins[0], "POST", "/api/v1/users", Some(&json!({"email": email})));
        let acked = Instant::now();
        let id = body.pointer("/data/user_id").or_else(|| body.pointer("/data/id")).and_then(Value::as_str);
        let Some(id) = id.filter(|_| status == 201) else {
            eprintln!("replicas: an admin write failed: {status} {body}");
            continue;
        };
        for admin in &admins[1..] {
            while admin_request(*admin, "GET", &format!("/api/v1/users/{id}"), None).0 != 200 {
                assert!(acked.elapsed() < Duration::from_secs(10), "a write did not reach a replica within 10 s");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        times.push(acked.elapsed());
    }
    times
}
