//! The boundary (contract 14): the one door every message that crosses the gateway passes, in both directions, on
//! every route and revision. A route hands it a message and gets back what may pass; it never calls a guardrail or a
//! filter itself, so a new route cannot forget one.
//!
//! - Calls (a `gw_secure_call_tools` item, a transparent `tools/call`, `prompts/get`, `resources/read`) run the
//!   per-call stack ([`crate::gateway::middleware::guardrails`] around the pooled upstream call): curation, input
//!   guardrails with redaction, output guardrails with restoration, the audit record.
//! - What the upstream sends during a call and the client's answers ([`relayed`]) pass the same call's guard.
//! - Listings and completions ([`listing`]): curation of every item a server offers (tools, prompts, resources,
//!   templates), then the output guardrails of the server that offered it; a blocked item is left out. Before both,
//!   prompts, resources and templates are pinned and scanned as tools are ([`offer_review`]), over the server's whole
//!   list; what that quarantines is left out too.
//! - What comes later about a task a call created ([`tasks`]): its status, result and the client's answers.

pub mod listing;
pub mod offer_review;
pub mod relayed;
pub mod tasks;
