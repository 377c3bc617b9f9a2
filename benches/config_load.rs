//! Config load and key lookup at scale: 10,000 API keys, 1,000 projects, 100 MCP configs.
//!
//! Run with `cargo bench --bench config_load`. Each figure is printed with a baseline measured in the same run, so the
//! ratio means the same on any machine:
//! - load (parse + validate + index) against parsing the same bytes into a plain `serde_json::Value`, the floor any
//!   JSON config loader pays;
//! - key lookup (SHA-256 of the key, table probe, constant-time compare) against a plain `HashMap<String, _>` lookup
//!   with std's SipHash.
//!
//! Goals (issue 2): load under 100 ms, lookup under 1 microsecond.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use mcpgw::config::{ConfigFile, Snapshot};
use serde_json::{Map, Value, json};

const CONFIGS: usize = 100;
const PROJECTS: usize = 1_000;
const USERS_PER_PROJECT: usize = 10;

/// A config with the sizes; returns the bytes and the API keys.
fn big_config() -> (Vec<u8>, Vec<String>) {
    let mut configs = Map::new();
    for c in 0..CONFIGS {
        let servers: Vec<Value> = (0..3)
            .map(|s| {
                json!({"server_name": format!("server-{s}"), "description": "bench",
                       "config": {"command": "python3", "args": ["-m", "srv"], "env": {"TOKEN": "secret-value-12345678"}}})
            })
            .collect();
        configs.insert(format!("cfg-{c:04}"), json!({"mcp_config_name": format!("config-{c}"), "mcp_config": servers}));
    }
    let (mut projects, mut users, mut keys) = (Map::new(), Map::new(), Map::new());
    let mut key_list = Vec::new();
    for p in 0..PROJECTS {
        let member_ids: Vec<String> = (0..USERS_PER_PROJECT).map(|u| format!("user-{p:04}-{u:02}")).collect();
        for (u, id) in member_ids.iter().enumerate() {
            users.insert(
                id.clone(),
                json!({"email": format!("u{u}.p{p}@example.com"), "created_at": "2026-01-01T00:00:00.000000"}),
            );
            let key = format!("gw_{p:04}{u:02}-bench-key-padding-to-forty-three-chars-xx");
            keys.insert(
                key.clone(),
                json!({"project_id": format!("proj-{p:04}"), "user_id": id,
                                            "created_at": "2026-01-01T00:00:00.000000", "disabled": false}),
            );
            key_list.push(key);
        }
        projects.insert(
            format!("proj-{p:04}"),
            json!({"project_name": format!("project-{p}"), "mcp_config_id": format!("cfg-{:04}", p % CONFIGS), "users": member_ids}),
        );
    }
    let doc = json!({"admin_apikey": "bench-admin-key-0123456789abcdefghijklmnop", "mcp_configs": configs,
                     "projects": projects, "users": users, "apikeys": keys});
    (serde_json::to_vec_pretty(&doc).unwrap(), key_list)
}

/// Median time of `runs` runs of `f`. What `f` returns is dropped after the clock stops: freeing an old snapshot
/// happens off the request path (when its last reader finishes), so it is not part of a load.
fn median<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let out = black_box(f());
            let elapsed = start.elapsed();
            drop(out);
            elapsed
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let (bytes, keys) = big_config();
    println!("config: {} bytes, {} API keys, {PROJECTS} projects, {CONFIGS} MCP configs", bytes.len(), keys.len());

    let runs = 21;
    let baseline = median(runs, || serde_json::from_slice::<Value>(black_box(&bytes)).unwrap());
    let load = median(runs, || {
        let file = ConfigFile::parse(black_box(&bytes)).unwrap();
        Snapshot::build(file, [0; 32]).unwrap()
    });
    println!(
        "load+validate+index: {:.1} ms (goal < 100 ms); JSON parse baseline {:.1} ms; ratio {:.2}x",
        load.as_secs_f64() * 1e3,
        baseline.as_secs_f64() * 1e3,
        load.as_secs_f64() / baseline.as_secs_f64()
    );

    stages(&bytes);
    let snapshot = Snapshot::build(ConfigFile::parse(&bytes).unwrap(), [0; 32]).unwrap();
    let plain: HashMap<String, usize> = keys.iter().enumerate().map(|(i, k)| (k.clone(), i)).collect();
    let rounds = 20;
    let per_lookup = |d: Duration| d.as_secs_f64() * 1e9 / (keys.len() * rounds) as f64;
    let ours = median(9, || {
        for _ in 0..rounds {
            for k in &keys {
                black_box(snapshot.lookup_key(black_box(k)));
            }
        }
    });
    let base = median(9, || {
        for _ in 0..rounds {
            for k in &keys {
                black_box(plain.get(black_box(k.as_str())));
            }
        }
    });
    let miss = median(9, || {
        for _ in 0..rounds {
            for k in &keys {
                black_box(snapshot.lookup_key(black_box(&k[1..])));
            }
        }
    });
    println!(
        "key lookup: {:.0} ns hit, {:.0} ns miss (goal < 1000 ns); HashMap<String> baseline {:.0} ns; ratio {:.2}x",
        per_lookup(ours),
        per_lookup(miss),
        per_lookup(base),
        per_lookup(ours) / per_lookup(base)
    );
}
/// Where a load's time goes (one run each: parse, decode into the model, validate and index, free).
fn stages(bytes: &[u8]) {
    let t = Instant::now();
    let v: Value = serde_json::from_slice(bytes).unwrap();
    let a = t.elapsed();
    let t = Instant::now();
    let f = ConfigFile::from_value(v).unwrap();
    let b = t.elapsed();
    let t = Instant::now();
    let s = Snapshot::build(f, [0; 32]).unwrap();
    let c = t.elapsed();
    let t = Instant::now();
    drop(s);
    println!("stages: parse {a:?} decode {b:?} build {c:?} drop {:?}", t.elapsed());
}

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
