//! Tower middleware of the gateway's HTTP front (each a `Foo<S>` service plus a `FooLayer`).

pub mod auth;
pub mod jsonrpc;
pub mod rate_limit;
pub mod request_metrics;
