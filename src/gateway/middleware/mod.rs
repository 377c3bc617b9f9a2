//! The layers of the gateway's HTTP front, one concern each (the stack is built once, outermost first, in
//! `gateway/http.rs`), and the per-call stack of an upstream tool call (guardrails).
//!
//! - [`request_metrics`]: count and time every request, refusals included.
//! - [`limits`]: the size of the headers.
//! - [`origin`]: `Host` and `Origin` (DNS rebinding).
//! - [`admission`]: who is calling and their rate limit; shared with the stdio front.
//! - [`budgets`]: a key's requests in flight and bytes of answers not taken (contract 14).
//! - [`jsonrpc`]: one well-formed JSON-RPC message within the body limits.
//! - [`sessions`]: a session id belongs to the caller's key; `max_sessions`; a session's `GET` stream, answered from
//!   its own outbox ([`session_stream`]).
//! - [`param_headers`]: a 2026-07-28 call's `Mcp-Param-*` headers say what its body says (SEP-2243).
//! - [`drain`]: who is served after SIGTERM; the work in flight.
//! - [`guardrails`]: the per-call stack's guardrail stage.
//!
//! Most are a [`step::Step`]: an async function of the request and the rest of the stack. A refusal is a
//! [`crate::error::GatewayError`], written to the wire by its one mapping.

pub mod admission;
pub mod budgets;
pub mod drain;
pub mod guardrails;
pub mod jsonrpc;
pub mod limits;
pub mod origin;
pub mod param_headers;
pub mod quota_status;
pub mod rate_limit;
pub mod request_metrics;
pub mod session_stream;
pub mod sessions;
pub mod step;
