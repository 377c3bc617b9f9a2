//! A real `redis-server` for the tests of the shared cache and of the Redis configuration store: a child process on
//! 127.0.0.1 and a free port, without persistence, stopped when dropped. Included with
//! `#[path = "common/redis.rs"] mod redis_server;`.

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process on 127.0.0.1.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    password: Option<&'static str>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl RedisServer {
    pub fn start(port: u16, password: Option<&'static str>) -> RedisServer {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        if let Some(password) = password {
            cmd.args(["--requirepass", password]);
        }
        let child = match cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed; these tests need a real Redis: apt-get install -y redis-server \
                 (.ci/run installs it)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        let server = RedisServer { child, port, password };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.connection().is_none() {
            assert!(Instant::now() < deadline, "redis-server on port {port} did not answer PING within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// A connection that answered PING, or `None` while Redis is not ready.
    pub fn connection(&self) -> Option<redis::Connection> {
        let url = match self.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        };
        let mut con = redis::Client::open(url).ok()?.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
        let pong: String = redis::cmd("PING").query(&mut con).ok()?;
        (pong == "PONG").then_some(con)
    }

    /// Every key of every database with its value: a string as it is, a hash (the usage counters) as its
    /// `field=value` lines.
    pub fn dump(&self) -> Vec<(String, String)> {
        let mut con = self.connection().expect("redis connection");
        let mut out = Vec::new();
        for db in 0..16 {
            redis::cmd("SELECT").arg(db).query::<()>(&mut con).unwrap();
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) =
                    redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(100).query(&mut con).unwrap();
                for key in keys {
                    let kind: String = redis::cmd("TYPE").arg(&key).query(&mut con).unwrap();
                    let value = if kind == "hash" {
                        let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut con).unwrap();
                        fields.into_iter().map(|(field, value)| format!("{field}={value}\n")).collect()
                    } else {
                        let value: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
                        String::from_utf8_lossy(&value.unwrap_or_default()).into_owned()
                    };
                    out.push((key, value));
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        out
    }

    pub fn ttl_ms(&self, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(&mut self.connection().unwrap()).unwrap()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
