//! The cold-start section of the gateway benchmark: servers that start slowly, as `npx -y …` or `uvx …` do on a first
//! run (the mock upstream with `--start-delay-ms`), measured against the same start made directly in the same run.
//!
//! - Time to the first successful call: the direct baseline spawns the mock, makes the `initialize` handshake and calls
//!   `echo`; through the gateway, a stateless `gw_secure_call_tools` echo on a gateway that has not started the server
//!   yet (discovery and the call both wait for the one start). The ratio says what the gateway adds to a cold start.
//! - A cold burst: 64 clients send their first call at once to a gateway whose server has not started; every call
//!   must succeed, the starts (counted by the mock's `--starts-file`) must stay within `max_processes_per_server`,
//!   and the calls' p50 and p99 are printed next to one direct cold start.

use std::time::{Duration, Instant};

use serde_json::json;

use super::raw_clients::{RawHttp, RawStdio};
use super::{KEY, ms, percentile, secure_echo, start_gateway};

/// The mock upstream's arguments for a start of `delay` that records its starts in `starts`.
fn slow_args(delay: Duration, starts: &std::path::Path) -> Vec<String> {
    let delay = delay.as_millis().to_string();
    vec!["--start-delay-ms".into(), delay, "--starts-file".into(), starts.display().to_string()]
}

/// A gateway whose server `mock` starts in `delay` (and records its starts in `starts`).
fn slow_gateway(processes: u64, delay: Duration, starts: &std::path::Path) -> super::Gateway {
    let args = slow_args(delay, starts);
    start_gateway(processes, 1, move |config| {
        config["mcp_configs"]["c1"]["mcp_config"][0]["config"]["args"] = json!(args);
    })
}

/// Spawn, `initialize` and one `echo`, directly.
async fn direct_first_call(delay: Duration, starts: &std::path::Path) -> Duration {
    let args = slow_args(delay, starts);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let direct = RawStdio::start_with_args(env!("CARGO_BIN_EXE_mcpgw-mock-upstream"), &args).await;
    direct.echo().await;
    started.elapsed()
}

/// One stateless secure echo on a fresh connection; `Ok(latency)` when it succeeded.
async fn first_call(addr: String) -> Result<Duration, String> {
    let mut client = RawHttp::try_connect(&addr, KEY, true).await?;
    let request = client.tool_call("gw_secure_call_tools", secure_echo("mock", "hello"));
    let started = Instant::now();
    let answer = client.try_post(&request).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&answer.body);
    let ok = answer.status == 200 && text.contains("hello") && !text.contains("\"isError\":true");
    if ok { Ok(started.elapsed()) } else { Err(format!("{}: {text}", answer.status)) }
}

fn starts_in(file: &std::path::Path) -> usize {
    std::fs::read_to_string(file).map(|text| text.lines().count()).unwrap_or(0)
}

pub async fn cold_starts(processes: u64) {
    println!("-- cold starts (the mock upstream with --start-delay-ms, as npx or uvx downloading on a first run) --");
    for delay in [Duration::from_millis(500), Duration::from_secs(5)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let direct = direct_first_call(delay, &dir.path().join("direct")).await;
        let gw = slow_gateway(processes, delay, &dir.path().join("starts"));
        let through = first_call(gw.addr.clone()).await.unwrap_or_else(|e| panic!("the first call failed: {e}"));
        println!(
            "first call, start {}: direct (spawn, initialize, echo) {}; through the gateway {} ({:.2}x, +{})",
            ms(delay),
            ms(direct),
            ms(through),
            through.as_secs_f64() / direct.as_secs_f64(),
            ms(through.saturating_sub(direct))
        );
    }
    let delay = Duration::from_millis(500);
    let dir = tempfile::tempdir().expect("tempdir");
    let direct = direct_first_call(delay, &dir.path().join("direct")).await;
    let starts = dir.path().join("starts");
    let gw = slow_gateway(processes, delay, &starts);
    let clients = 64;
    let calls: Vec<_> = (0..clients).map(|_| tokio::spawn(first_call(gw.addr.clone()))).collect();
    let mut latencies = Vec::with_capacity(clients);
    let mut failures = Vec::new();
    for call in calls {
        match call.await {
            Ok(Ok(latency)) => latencies.push(latency),
            Ok(Err(error)) => failures.push(error),
            Err(error) => failures.push(error.to_string()),
        }
    }
    latencies.sort();
    let (p50, p99) = if latencies.is_empty() {
        (Duration::ZERO, Duration::ZERO)
    } else {
        (percentile(&latencies, 0.5), percentile(&latencies, 0.99))
    };
    println!(
        "cold burst, {clients} clients at once, start {}: {}/{clients} succeeded, {} starts (max_processes_per_server {processes}); p50 {} p99 {} (one direct cold start {})",
        ms(delay),
        latencies.len(),
        starts_in(&starts),
        ms(p50),
        ms(p99),
        ms(direct)
    );
    if let Some(first) = failures.first() {
        println!("cold burst: {} calls failed, the first with {first}", failures.len());
    }
}
