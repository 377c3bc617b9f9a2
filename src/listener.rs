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

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use prometheus::IntGauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

mod unauthenticated;

use unauthenticated::Strangers;
pub use unauthenticated::Unauthenticated;

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

/// Why the watchdog ended a connection.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Look again at this instant.
    Wait(Instant),
    /// No request for `idle_connection_seconds`.
    Idle,
    /// A request's headers not complete within `request_read_timeout_seconds`.
    SlowHeaders,
    /// The client took none of its answer for `write_timeout_seconds`.
    SlowReader,
}

/// What the watchdog of one connection reads: requests in flight, since when it has been idle, and since when a new
/// request's first bytes have been waiting for the rest of its headers. Instants are kept as milliseconds since
/// `born`.
///
/// A request costs the watchdog nothing (no wake-up, no timer set): it looks only when its timer fires, and it never
/// sleeps longer than `request_read_timeout` ([`Activity::next_look`]), so a request begun while it sleeps is still
/// seen by its own read deadline.
struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    idle_since: AtomicU64,
    head_since: AtomicU64,
    /// Since when the client has taken none of what the gateway is writing to it (`NONE`: nothing waits).
    write_blocked_since: AtomicU64,
}

const NONE: u64 = u64::MAX;

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NONE),
            write_blocked_since: AtomicU64::new(NONE),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    /// No request in flight (for the choice of an unauthenticated connection to close).
    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Bytes arrived: when nothing is in flight they begin a new request.
    fn bytes_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 && self.head_since.load(Ordering::Acquire) == NONE {
            let _ = self.head_since.compare_exchange(NONE, self.now_ms(), Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// A write found the client's receive window full: the write deadline starts, unless it already runs.
    fn write_blocked(&self) {
        if self.write_blocked_since.load(Ordering::Acquire) == NONE {
            let _ = self.write_blocked_since.compare_exchange(NONE, self.now_ms(), Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The client took bytes: the write deadline stops. (A load first, so that a write costs no store.)
    fn wrote(&self) {
        if self.write_blocked_since.load(Ordering::Acquire) != NONE {
            self.write_blocked_since.store(NONE, Ordering::Release);
        }
    }

    /// A request's headers are complete: it is in flight until the guard is dropped (its answer sent).
    fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
        InFlight(Arc::clone(self))
    }

    fn verdict(&self, limits: &Limits) -> Verdict {
        let now = self.now_ms();
        let blocked = self.write_blocked_since.load(Ordering::Acquire);
        let write_deadline = (blocked != NONE).then(|| self.at(blocked) + limits.write_timeout);
        if write_deadline.is_some_and(|deadline| self.at(now) >= deadline) {
            return Verdict::SlowReader;
        }
        match self.read_verdict(now, limits) {
            Verdict::Wait(deadline) => Verdict::Wait(write_deadline.map_or(deadline, |w| w.min(deadline))),
            verdict => verdict,
        }
    }

    /// The verdict of the reading side: idle, or headers too slow.
    fn read_verdict(&self, now: u64, limits: &Limits) -> Verdict {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Verdict::Wait(self.at(now) + limits.idle_connection);
        }
        let head = self.head_since.load(Ordering::Acquire);
        let (since, limit, verdict) = if head == NONE {
            (self.idle_since.load(Ordering::Acquire), limits.idle_connection, Verdict::Idle)
        } else {
            (head, limits.request_read_timeout, Verdict::SlowHeaders)
        };
        let deadline = self.at(since) + limit;
        if self.at(now) >= deadline { verdict } else { Verdict::Wait(deadline) }
    }

    /// When the watchdog looks again after a `Wait(deadline)` verdict: at the deadline, but no later than one
    /// `request_read_timeout` (and one `write_timeout`) from now. A request whose first bytes arrive (or a write that
    /// blocks) before that look has its deadline after it (it began after now), so the look that finds it is never
    /// late for it.
    fn next_look(&self, deadline: Instant, limits: &Limits) -> Instant {
        let now = self.at(self.now_ms());
        deadline.min(now + limits.request_read_timeout).min(now + limits.write_timeout)
    }
}

/// A request in flight on its connection (see [`Activity::begin`]).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now_ms(), Ordering::Release);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The TCP stream, telling the watchdog when bytes arrive.
struct Watched {
    tcp: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.bytes_read();
        }
        polled
    }
}

impl Watched {
    /// Tells the watchdog whether the client is taking what is written.
    fn watch_write(&self, polled: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        match &polled {
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.wrote(),
            Poll::Ready(_) => {}
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_write(cx, data);
        this.watch_write(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.watch_write(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
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
    let io = Watched { tcp, activity: Arc::clone(&activity) };
    let requests = Arc::clone(&activity);
    let stranger = held.stranger.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let in_flight = requests.begin();
        let mut req = req;
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

    fn limits(idle: u64, read: u64) -> Limits {
        Limits {
            idle_connection: Duration::from_secs(idle),
            request_read_timeout: Duration::from_secs(read),
            ..Limits::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_end_and_busy_ones_do_not() {
        let activity = Activity::new();
        let l = limits(60, 30);
        assert!(matches!(activity.verdict(&l), Verdict::Wait(_)));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(activity.verdict(&l), Verdict::Idle);

        let activity = Activity::new();
        let in_flight = activity.begin();
        tokio::time::advance(Duration::from_secs(120)).await;
        assert!(matches!(activity.verdict(&l), Verdict::Wait(_)), "a stream in flight is not idle");
        drop(in_flight);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(matches!(activity.verdict(&l), Verdict::Wait(_)), "idle counts from the end of the last answer");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(activity.verdict(&l), Verdict::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn headers_begun_must_end_within_the_read_timeout() {
        let activity = Activity::new();
        let l = limits(60, 30);
        tokio::time::advance(Duration::from_secs(10)).await;
        activity.bytes_read();
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(matches!(activity.verdict(&l), Verdict::Wait(_)));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(activity.verdict(&l), Verdict::SlowHeaders);
        // Completed headers put the request in flight: no read deadline any more.
        let _in_flight = activity.begin();
        assert!(matches!(activity.verdict(&l), Verdict::Wait(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_begun_while_the_watchdog_sleeps_is_seen_at_its_read_deadline() {
        let activity = Activity::new();
        let l = limits(60, 30);
        // Idle: the deadline is 60 s away, but the watchdog looks again within the read timeout.
        let Verdict::Wait(deadline) = activity.verdict(&l) else { panic!("not idle yet") };
        let look = activity.next_look(deadline, &l);
        assert_eq!(look, activity.at(0) + Duration::from_secs(30));
        // Headers begin 20 s later and never end: the look at 30 s sees them and waits for their deadline (50 s).
        tokio::time::advance(Duration::from_secs(20)).await;
        activity.bytes_read();
        tokio::time::advance(Duration::from_secs(10)).await;
        let Verdict::Wait(deadline) = activity.verdict(&l) else { panic!("headers still within their time") };
        assert_eq!(activity.next_look(deadline, &l), activity.at(0) + Duration::from_secs(50));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(activity.verdict(&l), Verdict::SlowHeaders);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_nothing_for_the_write_timeout_is_cut_and_one_that_reads_is_not() {
        let activity = Activity::new();
        let l = Limits { write_timeout: Duration::from_secs(30), ..limits(60, 30) };
        let _in_flight = activity.begin();
        activity.write_blocked();
        tokio::time::advance(Duration::from_secs(20)).await;
        // Blocked again: the deadline still counts from the first write that found the window full.
        activity.write_blocked();
        let Verdict::Wait(deadline) = activity.verdict(&l) else { panic!("within the write timeout") };
        assert_eq!(deadline, activity.at(30_000));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(activity.verdict(&l), Verdict::SlowReader);
        // A client that takes bytes now and then is never cut, even while a request is in flight for long.
        let activity = Activity::new();
        let _in_flight = activity.begin();
        for _ in 0..10 {
            activity.write_blocked();
            tokio::time::advance(Duration::from_secs(25)).await;
            activity.wrote();
            assert!(matches!(activity.verdict(&l), Verdict::Wait(_)));
        }
        // The watchdog looks again within one write timeout, so a write blocked while it sleeps is seen in time.
        let Verdict::Wait(deadline) = activity.verdict(&l) else { panic!("waiting") };
        let short = Limits { write_timeout: Duration::from_secs(5), ..l };
        assert!(activity.next_look(deadline, &short) <= activity.at(activity.now_ms()) + Duration::from_secs(5));
    }

    #[test]
    fn the_gateway_cap_is_at_most_half_the_descriptor_limit() {
        let half = usize::try_from(descriptor_limit() / 2).unwrap_or(usize::MAX);
        assert_eq!(connection_cap(usize::MAX), half.max(1));
        assert_eq!(connection_cap(3), 3.min(half.max(1)));
    }
}
