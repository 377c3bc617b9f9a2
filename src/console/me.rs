//! A user's own page (`/ui/me`): the status of their own upstream credentials (contract 16), a value of kind
//! `secret` set or removed, for a user of the gateway signed in with the issuer who is not a console admin. The
//! session says whose page it is (`Session::own`); no path names the user, so no other user's credentials can be
//! reached from it. Every change goes through the admin API's own handlers, as the admin's would.

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
    match change_credential(&console, &op.session.operator, user, (&config, &server), values).await {
        Ok(_) => Redirect::to("/ui/me").into_response(),
        Err(problem) => me_page(&console, &op, user, Some(problem)).await,
    }
}
