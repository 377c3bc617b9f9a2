//! Serving one listener's TCP connections with HTTP/1.1, within the connection limits of contract section 13.
//!
//! - **Descriptors**: [`raise_descriptor_limit`] lifts the soft `RLIMIT_NOFILE` to the hard limit at start; the
//!   gateway listener never holds more than half of it (`limits.max_connections`, default 4096), the admin listener
//!   `limits.max_admin_connections` (64), the metrics listener [`METRICS_CONNECTIONS`]. The rest stays free for
//!   upstream processes, outbound connections, the config file and the probes, so `/healthz`, `/metrics`,
//!   `GET /health` and reloads keep working while the gateway listener is full.
//! - **Past its cap** a listener closes a new connection at once (counted in `mcpgw_limit_hits_total` as
//!   `connections`, `admin_connections` or `metrics_connections`; logged at most 10 times a second).
//! - **Per connection**, a watchdog: with no request in flight and no byte of a new one for
//!   `limits.idle_connection_seconds` (60) the connection is closed (`connection_idle`); a request whose headers have
//!   begun must complete them within `limits.request_read_timeout_seconds` (30; `read_timeout`). A request is in
//!   flight from its headers until its answer's body has been sent, so an SSE stream is never idle. The limits are
//!   read from the snapshot serving now, so a reload applies to open connections too.
//! - **Slow readers**: a connection whose client takes none of what is written to it for
//!   `limits.write_timeout_seconds` (30) is closed (`write_timeout`), and the answer it held dropped with it: the
//!   stream tells the watchdog when a write finds the client's window full and when the client takes bytes again.
//! - **Unauthenticated connections** of the gateway listener are bounded apart, by `max_unauthenticated_connections`
//!   and `max_connections_per_ip`, until a request authenticates (see [`unauthenticated`]).
//!
//! `mcpgw_connections{listener}` counts open connections. On `stop` each connection finishes its request in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use prometheus::IntGauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

mod unauthenticated;
mod watchdog;

use unauthenticated::Strangers;
pub use unauthenticated::Unauthenticated;
use watchdog::{Activity, Verdict, Watched};

use crate::config::ConfigStore;
use crate::config::settings::Limits;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::refusals::RefusalLog;

/// Connections the metrics listener (`/healthz`, `/readyz`, `/metrics`) keeps open at once: probes and scrapers
/// need a few.
pub const METRICS_CONNECTIONS: usize = 256;

/// Which listener: each has its own cap and its own label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    Gateway,
    Admin,
    Metrics,
}

impl Front {
    pub fn name(self) -> &'static str {
        match self {
            Front::Gateway => "gateway",
            Front::Admin => "admin",
            Front::Metrics => "metrics",
        }
    }

    /// The `limit` label of a connection closed because this listener was full.
    fn full_label(self) -> &'static str {
        match self {
            Front::Gateway => "connections",
            Front::Admin => "admin_connections",
            Front::Metrics => "metrics_connections",
        }
    }

    /// Connections this listener may hold open now.
    fn cap(self, limits: &Limits) -> usize {
        match self {
            Front::Gateway => connection_cap(limits.max_connections),
            Front::Admin => limits.max_admin_connections,
            Front::Metrics => METRICS_CONNECTIONS,
        }
    }
}

/// The soft descriptor limit the process runs with, read once (after [`raise_descriptor_limit`]).
static DESCRIPTOR_LIMIT: OnceLock<u64> = OnceLock::new();

fn descriptor_limit() -> u64 {
    *DESCRIPTOR_LIMIT.get_or_init(|| {
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft)
    })
}

/// Raises the soft descriptor limit to the hard one (contract section 13); returns the limit before and after, or
/// the error that kept it where it was (the limit is then what it was, and the caps below follow it).
pub fn raise_descriptor_limit() -> Result<(u64, u64), nix::Error> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let raised = if soft < hard { setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map(|()| hard) } else { Ok(soft) };
    let now = raised.as_ref().map_or(soft, |v| *v);
    let _ = DESCRIPTOR_LIMIT.set(now);
    raised.map(|now| (soft, now))
}

/// `max_connections` as the gateway applies it: never more than half the descriptor limit.
pub fn connection_cap(max_connections: usize) -> usize {
    let half = usize::try_from(descriptor_limit() / 2).unwrap_or(usize::MAX).max(1);
    max_connections.min(half)
}

/// Serves HTTP/1.1 on `listener` until `stop` turns true, then lets each connection finish its request in flight.
pub async fn listen(
    front: Front,
    listener: TcpListener,
    router: Router,
    store: Arc<ConfigStore>,
    stop: watch::Receiver<bool>,
) {
    let metrics = Arc::clone(store.metrics());
    let open = Arc::new(AtomicUsize::new(0));
    let gauge = metrics.connections.with_label_values(&[front.name()]);
    let refusals = RefusalLog::new(front.name());
    // Only the gateway listener asks for credentials: its unauthenticated connections are bounded apart.
    let strangers = (front == Front::Gateway).then(|| Arc::new(Strangers::default()));
    let mut connections = JoinSet::new();
    let mut stopping = stop.clone();
    loop {
        let accepted = tokio::select! {
            _ = stopping.wait_for(|stopped| *stopped) => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors and the like: wait a moment rather than spin.
                tracing::warn!(listener = front.name(), error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let snapshot = store.snapshot();
        let limits = &snapshot.settings.limits;
        let cap = front.cap(limits);
        let Some(slot) = Slot::take(&open, cap, &gauge) else {
            // Counted before the close, so that whoever sees the close also sees it counted.
            metrics.limit_hit(front.full_label());
            drop(tcp);
            if let Some(left_out) = refusals.admit() {
                tracing::warn!(listener = front.name(), cap, left_out, "connection closed: the listener is full");
            }
            continue;
        };
        let activity = Activity::new();
        let stranger = match &strangers {
            None => None,
            Some(strangers) => match strangers.admit(peer.ip(), &activity, limits, &metrics) {
                Some(place) => Some(place),
                None => {
                    drop(tcp);
                    if let Some(left_out) = refusals.admit() {
                        tracing::warn!(
                            listener = front.name(),
                            left_out,
                            "connection closed: too many unauthenticated"
                        );
                    }
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let connection = Connection { _slot: slot, activity, stranger };
        connections.spawn(serve_connection(tcp, router.clone(), Arc::clone(&store), stop.clone(), connection));
        // Forget connections that have ended, so the set does not grow with every one ever accepted.
        while connections.try_join_next().is_some() {}
    }
    // Closed now, so that new connections are refused rather than left waiting in the backlog.
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// One open connection's place under its listener's cap, given back when the connection ends.
struct Slot {
    open: Arc<AtomicUsize>,
    gauge: IntGauge,
}

impl Slot {
    fn take(open: &Arc<AtomicUsize>, cap: usize, gauge: &IntGauge) -> Option<Slot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1)).ok()?;
        gauge.inc();
        Some(Slot { open: Arc::clone(open), gauge: gauge.clone() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

/// What one open connection holds: its place under the listener's cap, what its watchdog reads, and (on the gateway
/// listener, until a request authenticates) its place among the unauthenticated connections.
struct Connection {
    _slot: Slot,
    activity: Arc<Activity>,
    stranger: Option<Arc<unauthenticated::Place>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(place) = &self.stranger {
            place.leave();
        }
    }
}

async fn serve_connection(
    tcp: TcpStream,
    router: Router,
    store: Arc<ConfigStore>,
    mut stop: watch::Receiver<bool>,
    held: Connection,
) {
    let activity = Arc::clone(&held.activity);
    // Who is on the other end, for the records that name a source address (the audit of authentication failures).
    let peer = tcp.peer_addr().ok();
    let io = Watched { tcp, activity: Arc::clone(&activity) };
    let requests = Arc::clone(&activity);
    let stranger = held.stranger.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let in_flight = requests.begin();
        if let Some(peer) = peer {
            req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        }
        // Until a request authenticates, the admission step is told which connection to move out of the count.
        if let Some(place) = stranger.as_ref().filter(|place| !place.has_left()) {
            req.extensions_mut().insert(Unauthenticated(Arc::clone(place)));
        }
        let answer = tower::ServiceExt::oneshot(router.clone(), req.map(Body::new));
        async move {
            let response = answer.await?;
            Ok::<_, std::convert::Infallible>(response.map(|body| crate::held_body::holding(body, in_flight)))
        }
    });
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    let metrics: &Metrics = store.metrics();
    let stopped = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    let mut stopped = std::pin::pin!(stopped);
    // Closed to make room for a new unauthenticated connection (see `unauthenticated.rs`; counted there).
    let evicted = held.stranger.as_ref().map(|place| place.close.clone());
    let evicted = async move {
        match evicted {
            Some(close) => close.cancelled_owned().await,
            None => std::future::pending().await,
        }
    };
    let mut evicted = std::pin::pin!(evicted);
    // One timer for the connection's life, moved only when it fires (see `Activity`).
    let mut look = std::pin::pin!(tokio::time::sleep_until(Instant::now()));
    loop {
        let limits = &store.snapshot().settings.limits;
        let verdict = activity.verdict(limits);
        match verdict {
            Verdict::Wait(deadline) => look.as_mut().reset(activity.next_look(deadline, limits)),
            Verdict::Idle | Verdict::SlowHeaders | Verdict::SlowReader => {
                metrics.limit_hit(match verdict {
                    Verdict::Idle => "connection_idle",
                    Verdict::SlowHeaders => "read_timeout",
                    _ => "write_timeout",
                });
                // Returning drops the connection: its socket, hyper's buffers and the answer being written.
                return;
            }
        }
        // The connection first: it is what wakes this task on almost every poll.
        tokio::select! {
            biased;
            _ = connection.as_mut() => return,
            () = look.as_mut() => {}
            () = evicted.as_mut() => return,
            () = stopped.as_mut() => {
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_cap_is_at_most_half_the_descriptor_limit() {
        let half = usize::try_from(descriptor_limit() / 2).unwrap_or(usize::MAX);
        assert_eq!(connection_cap(usize::MAX), half.max(1));
        assert_eq!(connection_cap(3), 3.min(half.max(1)));
    }
}
