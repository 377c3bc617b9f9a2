//! Freeing retired snapshots away from the request path.
//!
//! A snapshot is freed by whoever drops its last `Arc`: after a reload that is usually the task that follows the
//! configuration's changes (`gateway::GatewayContext::follow_config`) or a request that was still holding it, both on
//! a tokio worker. Freeing a large configuration is millions of small deallocations (a million API keys: several
//! hundred milliseconds), and a worker busy with them serves nobody else meanwhile (issue 36). So a snapshot's drop
//! hands its heavy parts to one thread of their own, `mcpgw-retire`, which frees them in the order they come; the
//! drop itself is a move and a channel send. Should the thread be impossible to start, the parts are freed in place
//! as before. The thread runs at the lowest priority (`background.rs`).

use std::sync::OnceLock;
use std::sync::mpsc::{Sender, channel};

/// Anything that can be freed on another thread.
type Retired = Box<dyn Send>;

static RETIRE: OnceLock<Option<Sender<Retired>>> = OnceLock::new();

/// Frees `parts` on the retiring thread (or here, when it cannot run).
pub fn free_later(parts: Retired) {
    let sender = RETIRE.get_or_init(|| {
        let (sender, receiver) = channel::<Retired>();
        let started = std::thread::Builder::new().name("mcpgw-retire".into()).spawn(move || {
            super::background::yield_to_requests();
            for parts in receiver {
                drop(parts);
            }
        });
        started.ok().map(|_| sender)
    });
    match sender {
        Some(sender) => {
            // The receiver lives as long as the process; a failed send gives the parts back, freed here.
            let _ = sender.send(parts);
        }
        None => drop(parts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn parts_are_freed_on_another_thread() {
        struct Probe(std::sync::mpsc::Sender<std::thread::ThreadId>);
        impl Drop for Probe {
            fn drop(&mut self) {
                let _ = self.0.send(std::thread::current().id());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        free_later(Box::new(Probe(tx)));
        let freed_on = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_ne!(freed_on, std::thread::current().id());
    }

    #[test]
    fn a_retired_value_is_freed() {
        let big: Vec<Arc<String>> = (0..200_000).map(|i| Arc::new(i.to_string())).collect();
        let witness = Arc::clone(&big[0]);
        free_later(Box::new(big));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&witness) > 1 {
            assert!(Instant::now() < deadline, "the retired value was never freed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
