//! A `redis-server` for the benchmarks: on a fixed port, killed (a crash, not a shutdown) and started again at will.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` on a fixed port that can be killed and started again.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    /// Where it keeps its append-only file, when it persists.
    dir: Option<PathBuf>,
}

impl Redis {
    /// Without `dir` it keeps nothing across a restart; with it, every write is in its append-only file there first.
    pub fn start(port: u16, dir: Option<&Path>) -> Redis {
        let mut redis = Redis { child: None, port, dir: dir.map(Path::to_path_buf) };
        redis.up();
        redis
    }

    pub fn up(&mut self) {
        let mut command = Command::new("redis-server");
        command.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""]);
        match &self.dir {
            Some(dir) => command.args(["--appendonly", "yes", "--appendfsync", "always"]).arg("--dir").arg(dir),
            None => command.args(["--appendonly", "no"]),
        };
        let child =
            command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); the soak needs a real Redis: apt-get install -y redis-server")
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers_ping() {
            assert!(Instant::now() < deadline, "redis-server on port {} did not answer PING within 10 s", self.port);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
    }

    /// Kills the server the hard way (a crash, not a shutdown) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
