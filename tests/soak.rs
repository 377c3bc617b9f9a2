//! Thirty seconds of the soak and fault benchmark (`benches/support/soak.rs`, issue 7) as a test: 16 clients calling
//! tools through the real `mcpgw` binary while upstream processes are killed at random, the config file is rewritten
//! every second (valid and invalid versions) and a real `redis-server` is killed and started again every 5 seconds.
//! Every request is answered exactly once with its own answer, memory grows less than 10 % between the quiet points, no
//! descriptor or upstream process is leaked and the gateway exits 0 on SIGTERM. Needs `redis-server` (`.ci/run`
//! installs it).

use std::time::Duration;

#[path = "../benches/support/soak.rs"]
mod soak;

#[test]
fn thirty_seconds_of_load_and_faults_lose_no_request_and_leak_nothing() {
    let mut options = soak::Options::new(Duration::from_secs(30));
    options.redis_restart_every = Duration::from_secs(5);
    let report = soak::run(&options);
    let text = report.text();
    println!("{text}");
    let failures = report.failures();
    assert!(failures.is_empty(), "goals missed: {failures:#?}\n{text}");
}
