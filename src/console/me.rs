//! A user's own page (`/ui/me`): the status of their own upstream credentials (contract 16), a value of kind
//! `secret` set or removed, for a user of the gateway signed in with the issuer who is not a console admin. The
//! session says whose page it is (`Session::own`); no path names the user, so no other user's credentials can be
//! reached from it. Every change goes through the admin API's own handlers, as the admin's would. Each rewrites the
//! configuration and writes an audit record, so a user makes at most [`CHANGES_PER_MINUTE`] of them a minute (an
//! admin's writes are not limited: the admin key could write as much through the API).

use std::sync::Arc;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::json;

use super::directory::{CredentialRow, change_credential, credentials};
use super::pages::{message, render};
use super::{Console, Form, Operator};

#[derive(Template)]
#[template(path = "console/me.html")]
struct MePage<'a> {
    /// The admin's navigation is not shown on a user's page.
    signed_in: bool,
    csrf: &'a str,
    operator: &'a str,
    problem: Option<String>,
    credentials: Vec<CredentialRow>,
}

/// How many changes a user makes from their own page in a minute; more are refused (429) and change nothing.
pub const CHANGES_PER_MINUTE: u32 = 10;

/// Whether `user` may make one more change now (and counts it).
fn may_change(console: &Console, user: &str) -> bool {
    let now = std::time::Instant::now();
    let mut changes = console.own_changes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Only users with a live minute are kept: at most one entry per user who changed something in the last minute.
    changes.retain(|_, (since, _)| now.duration_since(*since) < std::time::Duration::from_secs(60));
    let (_, count) = changes.entry(user.to_string()).or_insert((now, 0));
    *count += 1;
    *count <= CHANGES_PER_MINUTE
}

/// The answer to an admin's session on a user's own page.
fn not_own() -> Response {
    message(StatusCode::NOT_FOUND, "Not found", "This page is a user's own; an admin sees users on /ui/users.")
}

async fn me_page(console: &Console, op: &Operator, user: &str, problem: Option<String>) -> Response {
    let operator = &op.session.operator;
    let credentials = credentials(console, operator, user, "/ui/me").await;
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(status, &MePage { signed_in: false, csrf: &op.session.csrf, operator, problem, credentials })
}

pub async fn me(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    match op.session.own.as_deref() {
        Some(user) => me_page(&console, &op, user, None).await,
        None => not_own(),
    }
}

/// `POST /ui/me/credentials/{config}/{server}/{set|clear}`.
pub async fn credential_action(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
    Path((config, server, action)): Path<(String, String, String)>,
) -> Response {
    let Some(user) = op.session.own.as_deref() else { return not_own() };
    let values = match action.as_str() {
        "set" => Some(json!({form.get("name").trim(): form.get("value")})),
        "clear" => None,
        _ => return message(StatusCode::NOT_FOUND, "Not found", "There is no such action on a credential."),
    };
    if !may_change(&console, user) {
        let why = format!("At most {CHANGES_PER_MINUTE} changes a minute: wait a minute and try again.");
        return message(StatusCode::TOO_MANY_REQUESTS, "Too many changes", &why);
    }
    match change_credential(&console, &op.session.operator, user, (&config, &server), values).await {
        Ok(_) => Redirect::to("/ui/me").into_response(),
        Err(problem) => me_page(&console, &op, user, Some(problem)).await,
    }
}
