//! What a session is told without asking (a list changed, a resource it subscribed to was updated, a task's status),
//! kept in a small bounded queue of the session's own and sent on its `GET` stream by the session layer
//! (`gateway/middleware/session_stream.rs`), not by the protocol layer's per-session worker: a session whose client
//! holds its stream open can go dormant, its worker ended, and still be told.
//!
//! Each message is one SSE event with an id of the session's own (1, 2, ...). The queue keeps the last
//! [`MAX_EVENTS`] events, at most [`MAX_BYTES`] of them, sent or not: what came while no stream was open goes out
//! when one opens, and a client that reconnects with `Last-Event-ID` gets again what it missed, while still kept.
//! When the queue is full the oldest event is dropped (counted by the caller as `session_stream_queue`): a client
//! that does not read costs at most the queue, and its connection is ended by the listener's `write_timeout_seconds`.
//! The messages are hints that something changed (list again, read again), so the newest carry what matters.
//!
//! An open stream costs its [`EventStream`], a body that the connection polls (no task of its own): the queue's lock
//! to take the next event, a waker left for the next push, and a timer for the keep-alive comment every
//! [`KEEP_ALIVE`] (what rmcp sent, so that proxies and clients with read timeouts see the stream alive).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body::Frame;
use rmcp::model::{ServerJsonRpcMessage, ServerNotification};

/// The most events a session keeps, sent or not (rmcp kept 16 as well).
pub const MAX_EVENTS: usize = 16;
/// The most bytes of events a session keeps; a single larger message is not kept.
pub const MAX_BYTES: usize = 64 * 1024;
/// How long an open stream with nothing to send waits before a keep-alive comment (rmcp's 15 s).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The reconnection delay a stream's first event suggests (rmcp's 3 s).
const RETRY_MS: u64 = 3000;

/// One session's queue of what it is told (see the module documentation).
#[derive(Default)]
pub struct Outbox {
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    /// The events kept, oldest first, ids consecutive.
    events: VecDeque<(u64, Bytes)>,
    bytes: usize,
    /// The id of the last event queued (0: none yet).
    last: u64,
    /// The id of the last event handed to a stream.
    sent: u64,
    /// A stream is open.
    streaming: bool,
    /// The open stream's waker, while it waits for an event.
    waker: Option<Waker>,
    /// The session ended: no more events, and its stream ends.
    closed: bool,
}

/// The session ended: nothing is queued any more.
#[derive(Debug, PartialEq, Eq)]
pub struct Ended;

/// Why no stream was opened.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The session has a stream open already.
    Open,
}

/// A message as one JSON text, as rmcp would have written it.
pub fn encode(notification: ServerNotification) -> Option<Bytes> {
    serde_json::to_vec(&ServerJsonRpcMessage::notification(notification)).ok().map(Bytes::from)
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `message` (one JSON-RPC message as JSON text) and wakes the open stream. Returns how many events not
    /// yet sent were dropped to make room (this one, when it is larger than [`MAX_BYTES`]).
    pub fn push(&self, message: Bytes) -> Result<usize, Ended> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(Ended);
        }
        if message.len() > MAX_BYTES {
            return Ok(1);
        }
        queue.last += 1;
        queue.bytes += message.len();
        let id = queue.last;
        queue.events.push_back((id, message));
        let mut dropped = 0;
        while queue.events.len() > MAX_EVENTS || queue.bytes > MAX_BYTES {
            let Some((id, old)) = queue.events.pop_front() else { break };
            queue.bytes -= old.len();
            if id > queue.sent {
                dropped += 1;
            }
        }
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(dropped)
    }

    /// Ends the session's stream, if open, and queues nothing more.
    pub fn close(&self) {
        let mut queue = self.lock();
        queue.closed = true;
        queue.events = VecDeque::new();
        queue.bytes = 0;
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Whether a stream is open.
    pub fn is_streaming(&self) -> bool {
        self.lock().streaming
    }

    /// The session's one stream, which sends the events after `last_seen` (the client's `Last-Event-ID`) or, without
    /// one, those no earlier stream was handed; refused while another stream of the session is open.
    pub fn open_stream(self: &Arc<Self>, last_seen: Option<u64>) -> Result<EventStream, Refused> {
        let mut queue = self.lock();
        if queue.streaming {
            return Err(Refused::Open);
        }
        queue.streaming = true;
        let after = last_seen.map_or(queue.sent, |seen| seen.min(queue.last));
        queue.sent = after;
        drop(queue);
        // The first event (SEP-1699's priming event, as rmcp sends it): the id to resume from and the retry delay.
        let head = Bytes::from(format!("data: \nid: {after}\nretry: {RETRY_MS}\n\n"));
        Ok(EventStream {
            outbox: Arc::clone(self),
            head: Some(head),
            keep_alive: Box::pin(tokio::time::sleep(KEEP_ALIVE)),
        })
    }

    /// The next event to send after what was handed out, as SSE bytes; registers `waker` when there is none.
    fn next_event(&self, waker: &Waker) -> Poll<Option<Bytes>> {
        let mut queue = self.lock();
        if queue.closed {
            return Poll::Ready(None);
        }
        let sent = queue.sent;
        if let Some((id, message)) = queue.events.iter().find(|(id, _)| *id > sent) {
            let (id, message) = (*id, message.clone());
            queue.sent = id;
            drop(queue);
            let mut event = BytesMut::with_capacity(message.len() + 32);
            event.put_slice(b"data: ");
            event.put_slice(&message);
            event.put_slice(format!("\nid: {id}\n\n").as_bytes());
            return Poll::Ready(Some(event.freeze()));
        }
        match &queue.waker {
            Some(known) if known.will_wake(waker) => {}
            _ => queue.waker = Some(waker.clone()),
        }
        Poll::Pending
    }
}

/// A session's open `GET` stream: the body of its answer (see the module documentation). Dropping it (the client
/// went) frees the session's stream place.
pub struct EventStream {
    outbox: Arc<Outbox>,
    /// The priming event, sent first.
    head: Option<Bytes>,
    keep_alive: Pin<Box<tokio::time::Sleep>>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let mut queue = self.outbox.lock();
        queue.streaming = false;
        queue.waker = None;
    }
}

impl http_body::Body for EventStream {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        let keep_alive = || tokio::time::Instant::now() + KEEP_ALIVE;
        match this.outbox.next_event(cx.waker()) {
            Poll::Ready(Some(event)) => {
                this.keep_alive.as_mut().reset(keep_alive());
                return Poll::Ready(Some(Ok(Frame::data(event))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        if this.keep_alive.as_mut().poll(cx).is_ready() {
            this.keep_alive.as_mut().reset(keep_alive());
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b":\n\n")))));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn message(n: usize) -> Bytes {
        Bytes::from(format!("{{\"n\":{n}}}"))
    }

    async fn next(stream: &mut EventStream) -> Option<String> {
        let frame = stream.frame().await?.ok()?;
        frame.into_data().ok().map(|data| String::from_utf8_lossy(&data).into_owned())
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_sends_what_came_before_it_then_what_comes_and_one_stream_at_a_time() {
        let outbox = Arc::new(Outbox::default());
        assert_eq!(outbox.push(message(1)), Ok(0));
        let mut stream = outbox.open_stream(None).expect("the first stream");
        assert_eq!(outbox.open_stream(None).err(), Some(Refused::Open));
        assert_eq!(next(&mut stream).await.as_deref(), Some("data: \nid: 0\nretry: 3000\n\n"));
        assert_eq!(next(&mut stream).await.as_deref(), Some("data: {\"n\":1}\nid: 1\n\n"));
        outbox.push(message(2)).expect("queued");
        assert_eq!(next(&mut stream).await.as_deref(), Some("data: {\"n\":2}\nid: 2\n\n"));
        // Nothing to send for 15 s: a comment.
        assert_eq!(next(&mut stream).await.as_deref(), Some(":\n\n"));
        drop(stream);
        // A new stream sends only what no stream was handed; with Last-Event-ID, what came after it.
        let mut again = outbox.open_stream(None).expect("the place is free again");
        assert_eq!(next(&mut again).await.as_deref(), Some("data: \nid: 2\nretry: 3000\n\n"));
        drop(again);
        let mut resumed = outbox.open_stream(Some(1)).expect("a stream");
        assert_eq!(next(&mut resumed).await.as_deref(), Some("data: \nid: 1\nretry: 3000\n\n"));
        assert_eq!(next(&mut resumed).await.as_deref(), Some("data: {\"n\":2}\nid: 2\n\n"));
        // The session ends: so does its stream, and nothing more is queued.
        outbox.close();
        assert_eq!(next(&mut resumed).await, None);
        assert_eq!(outbox.push(message(3)), Err(Ended));
    }

    #[tokio::test]
    async fn the_queue_is_bounded_and_drops_the_oldest() {
        let outbox = Arc::new(Outbox::default());
        let dropped: usize = (0..MAX_EVENTS + 4).map(|n| outbox.push(message(n)).unwrap_or(0)).sum();
        assert_eq!(dropped, 4, "four unsent events made room");
        let mut stream = outbox.open_stream(None).expect("a stream");
        next(&mut stream).await;
        assert_eq!(next(&mut stream).await.as_deref(), Some("data: {\"n\":4}\nid: 5\n\n"), "the oldest kept");
        // Bytes bound: a message larger than the whole queue is not kept; big ones push out the others.
        assert_eq!(outbox.push(Bytes::from(vec![b'x'; MAX_BYTES + 1])), Ok(1));
        let big = Bytes::from(vec![b'y'; MAX_BYTES / 2]);
        outbox.push(big.clone()).expect("queued");
        outbox.push(big).expect("queued");
        assert!(outbox.lock().bytes <= MAX_BYTES);
        assert!(outbox.lock().events.len() <= 2);
    }
}
