//! Tower middleware (each a `Foo<S>` service plus a `FooLayer`): the gateway's HTTP front (request metrics, limits,
//! auth, rate limit, JSON-RPC guard, drain) and the per-call stack of an upstream tool call (guardrails).

pub mod auth;
pub mod drain;
pub mod guardrails;
pub mod jsonrpc;
pub mod limits;
pub mod rate_limit;
pub mod request_metrics;
