//! Starting the release `mcpgw serve` for a benchmark: ports chosen up front (so readiness can be polled on the
//! metrics listener without parsing logs), stdout discarded, stderr piped for the caller to drain or keep.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// `mcpgw serve --config <config>` with the gateway on `port`, the metrics listener on `metrics`, the admin API on
/// any free port and a short grace period for the drain.
pub fn spawn_serve(config: &Path, port: u16, metrics: u16) -> Child {
    spawn_serve_binary(env!("CARGO_BIN_EXE_mcpgw"), config, port, metrics)
}

/// [`spawn_serve`] with another build of `mcpgw` (a baseline measured in the same run).
pub fn spawn_serve_binary(binary: &str, config: &Path, port: u16, metrics: u16) -> Child {
    spawn(binary, config, port, 0, metrics)
}

/// [`spawn_serve`] with the admin API on `admin` (to read its health report).
pub fn spawn_serve_with_admin(config: &Path, port: u16, admin: u16, metrics: u16) -> Child {
    spawn(env!("CARGO_BIN_EXE_mcpgw"), config, port, admin, metrics)
}

fn spawn(binary: &str, config: &Path, port: u16, admin: u16, metrics: u16) -> Child {
    Command::new(binary)
        .args(["serve", "--config"])
        .arg(config)
        .args(["--gateway-addr", &format!("127.0.0.1:{port}"), "--admin-addr", &format!("127.0.0.1:{admin}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        // A client whose session was left open (a connection given up on) holds the drain to its grace period; a
        // benchmark need not wait 25 s for it.
        .args(["--shutdown-grace", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcpgw")
}

/// A plain `GET` on 127.0.0.1:`port` (the whole answer, or empty when the listener does not answer within 5 s).
pub fn http_get(port: u16, path: &str) -> String {
    http_get_with(port, path, "")
}

/// [`http_get`] with one more `header` line (`Name: value`; none when empty).
pub fn http_get_with(port: u16, path: &str, header: &str) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let header = if header.is_empty() { String::new() } else { format!("{header}\r\n") };
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{header}\r\n");
    let mut answer = String::new();
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_string(&mut answer);
    }
    answer
}

/// Whether `/readyz` on the metrics listener answers 200.
pub fn ready(metrics: u16) -> bool {
    http_get(metrics, "/readyz").starts_with("HTTP/1.1 200")
}
