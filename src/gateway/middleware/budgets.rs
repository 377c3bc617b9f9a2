//! Budgets per key, not only per request (contract section 14): how many of one key's requests are in flight, and how
//! many bytes of its answers are ready but not yet taken by its client.
//!
//! Admission runs it ([`within`]) as soon as the key is known, before the body is read, so a key over its budget costs
//! the gateway no body read. For a `POST` of a key with `limits.max_inflight_per_key` requests in flight, or with more
//! than `limits.max_pending_answer_bytes_per_key` bytes of answers not taken, the answer is 429 `RATE_LIMITED` with
//! `Retry-After: 1` and `retry_after_seconds` (counted as `inflight_per_key` or `pending_answer_bytes`). `GET` streams
//! and `DELETE`s are not refused: they are bounded by the session limits.
//!
//! A request is in flight from here until its answer's body has been handed to the connection whole. The answer's body
//! is handed over in pieces of at most [`PIECE`] bytes, and hyper takes a piece only once it has written most of what
//! it holds (about 400 KiB), so a client that stops reading stops the answer here, where it is counted: an answer is
//! pending from the moment it is ready until its last piece is taken (its bytes counted down piece by piece), and a
//! request whose answer a client does not read stays in flight. A 2026-07-28 `subscriptions/listen` stream, open-ended,
//! leaves the in-flight count once its answer begins ([`OpenEnded`]); it is bounded by `max_sessions_per_key`.
//!
//! What frees a key that stopped reading is `limits.write_timeout_seconds` (see `listener.rs`): its connections are
//! closed, their answers dropped, and the budget given back.
//!
//! Results being built count as well ([`KeyBudgets::may_build`], [`Building`]): the per-call stack counts each result of
//! an upstream call against its key until the request's answer is ready. A call of a key whose results being built
//! reach `max_response_bytes` is not run (`RESPONSE_TOO_LARGE`), nor one of a key with more than
//! `max_pending_answer_bytes_per_key` bytes not taken (`RATE_LIMITED`), so that however many requests one key has in
//! flight, it holds at most one request's worth of results being built plus its pending answers: the RSS bound of
//! contract 14 (idle + 4 x `max_response_bytes` + 64 MiB).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as _, Frame, SizeHint};

use super::step::{Next, forward};
use crate::auth::Identity;
use crate::config::settings::Limits;
use crate::config::snapshot::DigestMap;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;

/// The largest piece of an answer handed to the connection at once.
pub const PIECE: usize = 64 * 1024;

/// Put in an answer's extensions by a layer below when the answer is an open-ended stream: it does not count as a
/// request in flight (its bytes still count as pending).
#[derive(Clone, Copy, Debug)]
pub struct OpenEnded;

/// One key's load now.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
struct Load {
    in_flight: usize,
    pending: u64,
    /// Bytes of upstream results gathered for answers not ready yet.
    building: u64,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// `max_inflight_per_key` requests in flight.
    InFlight,
    /// More than `max_pending_answer_bytes_per_key` bytes of answers not taken.
    Pending,
    /// The key's results being built reached `max_response_bytes`.
    Building,
}

impl OverBudget {
    /// The label of `mcpgw_limit_hits_total` it counts under.
    pub fn label(self) -> &'static str {
        match self {
            OverBudget::InFlight => "inflight_per_key",
            OverBudget::Pending => "pending_answer_bytes",
            OverBudget::Building => "response_bytes",
        }
    }
}

/// The load of every key with a request in flight or an answer pending; keys at rest are forgotten.
#[derive(Default)]
pub struct KeyBudgets {
    /// By the key's digest (its first bytes are the hash: every request looks here several times).
    keys: Mutex<DigestMap<Load>>,
}

impl KeyBudgets {
    fn with<R>(&self, key: &[u8; 32], change: impl FnOnce(&mut Load) -> R) -> R {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let load = keys.entry(*key).or_default();
        let result = change(load);
        if *load == Load::default() {
            keys.remove(key);
        }
        result
    }

    /// Enters one more request of `key`, or says why not.
    pub fn enter(self: &Arc<Self>, key: &[u8; 32], limits: &Limits) -> Result<InFlightTicket, OverBudget> {
        self.with(key, |load| {
            if load.in_flight >= limits.max_inflight_per_key {
                return Err(OverBudget::InFlight);
            }
            if load.pending > limits.max_pending_answer_bytes_per_key as u64 {
                return Err(OverBudget::Pending);
            }
            load.in_flight += 1;
            Ok(())
        })?;
        Ok(InFlightTicket { budgets: Arc::clone(self), key: *key })
    }

    fn add_pending(&self, key: &[u8; 32], bytes: u64) {
        if bytes > 0 {
            self.with(key, |load| load.pending = load.pending.saturating_add(bytes));
        }
    }

    fn take_pending(&self, key: &[u8; 32], bytes: u64) {
        if bytes > 0 {
            self.with(key, |load| load.pending = load.pending.saturating_sub(bytes));
        }
    }

    /// Whether one more upstream call of `key` may run now: its results being built are under `max_response_bytes`
    /// and its answers not taken within `max_pending_answer_bytes_per_key`.
    pub fn may_build(&self, key: &[u8; 32], limits: &Limits) -> Result<(), OverBudget> {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(load) = keys.get(key) else { return Ok(()) };
        if load.building >= limits.max_response_bytes as u64 {
            return Err(OverBudget::Building);
        }
        if load.pending > limits.max_pending_answer_bytes_per_key as u64 {
            return Err(OverBudget::Pending);
        }
        Ok(())
    }

    /// `key`'s requests in flight and bytes pending (for tests and diagnostics).
    pub fn load(&self, key: &[u8; 32]) -> (usize, u64) {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(key).map_or((0, 0), |l| (l.in_flight, l.pending))
    }
}

/// The results one request of a key has gathered, counted as being built until dropped (when the answer is ready).
pub struct Building {
    budgets: Arc<KeyBudgets>,
    key: [u8; 32],
    bytes: u64,
}

impl Building {
    /// Nothing built yet for `key`.
    pub fn new(budgets: &Arc<KeyBudgets>, key: &[u8; 32]) -> Building {
        Building { budgets: Arc::clone(budgets), key: *key, bytes: 0 }
    }

    /// One more result of about `bytes` bytes.
    pub fn add(&mut self, bytes: u64) {
        if bytes > 0 {
            self.bytes = self.bytes.saturating_add(bytes);
            self.budgets.with(&self.key, |load| load.building = load.building.saturating_add(bytes));
        }
    }

    /// What this request has gathered so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        let bytes = self.bytes;
        if bytes > 0 {
            self.budgets.with(&self.key, |load| load.building = load.building.saturating_sub(bytes));
        }
    }
}

/// One request of a key in flight, until dropped.
pub struct InFlightTicket {
    budgets: Arc<KeyBudgets>,
    key: [u8; 32],
}

impl Drop for InFlightTicket {
    fn drop(&mut self) {
        self.budgets.with(&self.key, |load| load.in_flight = load.in_flight.saturating_sub(1));
    }
}

/// The refusal of a request over its key's budget.
pub fn refusal(over: OverBudget, limits: &Limits) -> GatewayError {
    let message = match over {
        OverBudget::InFlight => format!(
            "this API key has {} requests in flight, its limit (limits.max_inflight_per_key); retry after 1 s",
            limits.max_inflight_per_key
        ),
        OverBudget::Pending => format!(
            "this API key has more than {} bytes of answers its client has not read \
             (limits.max_pending_answer_bytes_per_key); read them, or retry after 1 s",
            limits.max_pending_answer_bytes_per_key
        ),
        OverBudget::Building => format!(
            "not run: the results this API key's requests in flight are building reached {} bytes \
             (limits.max_response_bytes); retry after 1 s",
            limits.max_response_bytes
        ),
    };
    if over == OverBudget::Building {
        return GatewayError::new(ErrorCode::ResponseTooLarge, message).with("retry_after_seconds", 1);
    }
    GatewayError::new(ErrorCode::RateLimited, message).with("retry_after_seconds", 1).retry_after(1)
}

/// The budget of `identity`'s key around the rest of the request (`next`), as admission hands it on once the key is
/// known: see the module documentation. Not a step of its own, so that a request pays no layer more for it.
pub async fn within(ctx: &GatewayContext, identity: Arc<Identity>, req: Request, next: impl Next) -> Response {
    let ticket = if req.method() == Method::POST {
        let limits = &identity.snapshot.settings.limits;
        match ctx.key_budgets.enter(&identity.key_digest, limits) {
            Ok(ticket) => Some(ticket),
            Err(over) => {
                let label = over.label();
                ctx.store.metrics().limit_hit(label);
                if let Some(left_out) = ctx.refusals.admit() {
                    let key_id = &identity.key_id;
                    tracing::info!(%key_id, limit = label, left_out, "request refused: key over its budget");
                }
                return refusal(over, limits).response(None);
            }
        }
    } else {
        None
    };
    let response = forward(next, req).await;
    let ticket = if response.extensions().get::<OpenEnded>().is_some() { None } else { ticket };
    let budgets = Arc::clone(&ctx.key_budgets);
    response.map(|body| Body::new(AnswerBody::new(body, budgets, identity.key_digest, ticket)))
}

/// An answer's body, handed over in pieces of at most [`PIECE`] bytes, its bytes counted as pending for its key until
/// taken, and the request in flight until its last piece is taken (see the module documentation).
struct AnswerBody {
    body: Body,
    /// What the inner body gave and the connection has not taken yet.
    rest: Bytes,
    /// Bytes this answer has counted as pending and not yet given back.
    counted: u64,
    /// Of `counted`, bytes the inner body has not given yet (its exact size, counted when the answer was ready).
    prepaid: u64,
    budgets: Arc<KeyBudgets>,
    key: [u8; 32],
    _ticket: Option<InFlightTicket>,
}

impl AnswerBody {
    fn new(body: Body, budgets: Arc<KeyBudgets>, key: [u8; 32], ticket: Option<InFlightTicket>) -> AnswerBody {
        let prepaid = body.size_hint().exact().unwrap_or(0);
        budgets.add_pending(&key, prepaid);
        AnswerBody { body, rest: Bytes::new(), counted: prepaid, prepaid, budgets, key, _ticket: ticket }
    }

    /// `n` bytes arrived from the inner body: those not counted when the answer was ready are counted now.
    fn arrived(&mut self, n: u64) {
        let prepaid = self.prepaid.min(n);
        self.prepaid -= prepaid;
        let more = n - prepaid;
        self.counted += more;
        self.budgets.add_pending(&self.key, more);
    }

    /// `n` bytes were taken by the connection.
    fn taken(&mut self, n: u64) {
        let n = n.min(self.counted);
        self.counted -= n;
        self.budgets.take_pending(&self.key, n);
    }

    fn next_piece(&mut self) -> Bytes {
        let piece = self.rest.split_to(self.rest.len().min(PIECE));
        self.taken(piece.len() as u64);
        piece
    }
}

impl http_body::Body for AnswerBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(this.next_piece()))));
        }
        let frame = match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        match frame.into_data() {
            Ok(data) => {
                this.arrived(data.len() as u64);
                this.rest = data;
                Poll::Ready(Some(Ok(Frame::data(this.next_piece()))))
            }
            Err(frame) => Poll::Ready(Some(Ok(frame))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        self.budgets.take_pending(&self.key, self.counted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn limits(in_flight: usize, pending: usize) -> Limits {
        Limits { max_inflight_per_key: in_flight, max_pending_answer_bytes_per_key: pending, ..Limits::default() }
    }

    #[test]
    fn a_key_has_at_most_its_requests_in_flight_and_other_keys_are_apart() {
        let budgets = Arc::new(KeyBudgets::default());
        let l = limits(2, 1 << 20);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let first = budgets.enter(&a, &l).expect("first");
        let _second = budgets.enter(&a, &l).expect("second");
        assert_eq!(budgets.enter(&a, &l).err(), Some(OverBudget::InFlight));
        assert!(budgets.enter(&b, &l).is_ok(), "another key is not affected");
        drop(first);
        assert!(budgets.enter(&a, &l).is_ok(), "a place given back");
    }

    #[test]
    fn a_key_builds_at_most_max_response_bytes_of_results_across_its_requests() {
        let budgets = Arc::new(KeyBudgets::default());
        let l = Limits { max_response_bytes: 1000, ..limits(8, 1 << 20) };
        let (a, b) = ([4u8; 32], [5u8; 32]);
        let mut first = Building::new(&budgets, &a);
        let mut second = Building::new(&budgets, &a);
        first.add(600);
        assert_eq!(budgets.may_build(&a, &l), Ok(()));
        second.add(400);
        assert_eq!(budgets.may_build(&a, &l), Err(OverBudget::Building), "two requests together reach the limit");
        assert_eq!(budgets.may_build(&b, &l), Ok(()), "another key is not affected");
        drop(first);
        assert_eq!(budgets.may_build(&a, &l), Ok(()), "the first answer is ready: its results no longer count");
        drop(second);
        assert_eq!(budgets.load(&a), (0, 0), "a key at rest is forgotten");
    }

    #[tokio::test]
    async fn an_answer_is_pending_until_its_last_piece_is_taken_and_in_flight_until_then() {
        let budgets = Arc::new(KeyBudgets::default());
        let key = [3u8; 32];
        let l = limits(8, 100_000);
        let ticket = budgets.enter(&key, &l).expect("enter");
        let size = 3 * PIECE + 10;
        let mut answer = AnswerBody::new(Body::from(vec![b'x'; size]), Arc::clone(&budgets), key, Some(ticket));
        assert_eq!(budgets.load(&key), (1, size as u64), "counted once ready");
        assert_eq!(answer.size_hint().exact(), Some(size as u64), "the length is kept for Content-Length");
        assert_eq!(budgets.enter(&key, &l).err(), Some(OverBudget::Pending), "over the pending bytes");
        let first = answer.frame().await.and_then(|f| f.ok()).and_then(|f| f.into_data().ok()).expect("a piece");
        assert_eq!(first.len(), PIECE);
        assert_eq!(budgets.load(&key), (1, (size - PIECE) as u64));
        let mut total = first.len();
        while let Some(frame) = answer.frame().await {
            total += frame.ok().and_then(|f| f.into_data().ok()).map_or(0, |d| d.len());
        }
        assert_eq!(total, size);
        assert!(answer.is_end_stream());
        assert_eq!(budgets.load(&key), (1, 0), "all taken; in flight until the body is dropped");
        drop(answer);
        assert_eq!(budgets.load(&key), (0, 0));
        assert!(budgets.keys.lock().map(|k| k.is_empty()).unwrap_or(false), "a key at rest is forgotten");
    }

    #[tokio::test]
    async fn a_dropped_answer_gives_its_bytes_back() {
        let budgets = Arc::new(KeyBudgets::default());
        let key = [4u8; 32];
        let mut answer = AnswerBody::new(Body::from(vec![b'y'; 5 * PIECE]), Arc::clone(&budgets), key, None);
        let _ = answer.frame().await;
        assert_eq!(budgets.load(&key), (0, 4 * PIECE as u64));
        drop(answer);
        assert_eq!(budgets.load(&key), (0, 0));
    }
}
