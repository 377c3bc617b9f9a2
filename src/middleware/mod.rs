//! Tower middleware (each a `Foo<S>` service plus a `FooLayer`): the gateway's HTTP front (request metrics, auth,
//! limits and drain, rate limit, JSON-RPC guard) and the per-call stack of an upstream tool call (guardrails).

pub mod auth;
pub mod guardrails;
pub mod jsonrpc;
pub mod limits;
pub mod rate_limit;
pub mod request_metrics;
