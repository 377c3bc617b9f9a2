//! The watchdog of one connection (see `listener.rs`): what it reads of the connection (requests in flight, since when
//! it has been idle, since when a request's headers have been arriving, since when a write has found the client's
//! window full) and its verdict: wait, or close the connection as idle, too slow sending its headers, or too slow
//! taking its answer (`write_timeout_seconds`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::settings::Limits;

/// Why the watchdog ended a connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
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
pub(super) struct Activity {
    born: Instant,
    in_flight: AtomicUsize,
    idle_since: AtomicU64,
    head_since: AtomicU64,
    /// Since when the client has taken none of what the gateway is writing to it (`NONE`: nothing waits).
    write_blocked_since: AtomicU64,
}

const NONE: u64 = u64::MAX;

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(NONE),
            write_blocked_since: AtomicU64::new(NONE),
        })
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    pub(super) fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    /// No request in flight (for the choice of an unauthenticated connection to close).
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Bytes arrived: when nothing is in flight they begin a new request.
    pub(super) fn bytes_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 && self.head_since.load(Ordering::Acquire) == NONE {
            let _ = self.head_since.compare_exchange(NONE, self.now_ms(), Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// A write found the client's receive window full: the write deadline starts, unless it already runs.
    pub(super) fn write_blocked(&self) {
        if self.write_blocked_since.load(Ordering::Acquire) == NONE {
            let _ = self.write_blocked_since.compare_exchange(NONE, self.now_ms(), Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// The client took bytes: the write deadline stops. (A load first, so that a write costs no store.)
    pub(super) fn wrote(&self) {
        if self.write_blocked_since.load(Ordering::Acquire) != NONE {
            self.write_blocked_since.store(NONE, Ordering::Release);
        }
    }

    /// A request's headers are complete: it is in flight until the guard is dropped (its answer sent).
    pub(super) fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
        InFlight(Arc::clone(self))
    }

    pub(super) fn verdict(&self, limits: &Limits) -> Verdict {
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
    pub(super) fn next_look(&self, deadline: Instant, limits: &Limits) -> Instant {
        let now = self.at(self.now_ms());
        deadline.min(now + limits.request_read_timeout).min(now + limits.write_timeout)
    }
}

/// A request in flight on its connection (see [`Activity::begin`]).
pub(super) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.now_ms(), Ordering::Release);
        activity.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The TCP stream, telling the watchdog when bytes arrive.
pub(super) struct Watched {
    pub(super) tcp: TcpStream,
    pub(super) activity: Arc<Activity>,
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
}
