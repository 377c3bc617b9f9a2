//! Routes `/api/v1/configs/*`: MCP configurations and their servers.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::{get, post};

use super::AppState;
use super::body::JsonBody;
use super::{ToolWrite, answer, answer_created, write, write_about};
use crate::manage::configs;
use crate::manage::offer_pins::{self, Offers};

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/configs", get(list).post(create))
        .route("/api/v1/configs/{config}", get(get_one).put(rename).delete(delete))
        .route("/api/v1/configs/{config}/copy", post(copy))
        .route("/api/v1/configs/{config}/servers", get(list_servers).post(add_server))
        .route("/api/v1/configs/{config}/servers/{server}", get(get_server).put(replace_server).delete(delete_server))
        .route("/api/v1/configs/{config}/servers/{server}/tool-pins", get(tool_pins))
        .route("/api/v1/configs/{config}/servers/{server}/tool-pins/{tool}", axum::routing::delete(forget_pin))
        .route("/api/v1/configs/{config}/servers/{server}/tool-pins/{tool}/approve", post(approve_tool))
        .merge(offer_pin_routes("prompt-pins", Offers::Prompts))
        .merge(offer_pin_routes("resource-pins", Offers::Resources))
}

/// The routes of the pins of a server's prompts or resources (contract 14), shaped as the tool pins' are:
/// `GET …/{what}`, `POST …/{what}/{item}/approve {sha256}`, `DELETE …/{what}/{item}` (a resource's URI
/// percent-encoded as one path segment).
fn offer_pin_routes(what: &str, offers: Offers) -> Router<Arc<AppState>> {
    let base = format!("/api/v1/configs/{{config}}/servers/{{server}}/{what}");
    let list = move |State(st): St, Path((config, server)): Path<(String, String)>| async move {
        let listed = offer_pins::list(&st.store.snapshot(), &st.pins, &config, &server, offers);
        answer(listed.map_err(Into::into), "pins")
    };
    let approve = move |State(st): St,
                        Path((config, server, item)): Path<(String, String, String)>,
                        JsonBody(body): JsonBody| async move {
        let book = Arc::clone(&st.pins);
        let (named_server, named_item) = (server.clone(), item.clone());
        let about = Some(ToolWrite { server: &named_server, tool: &named_item });
        let result = write_about(&st, about, move |file, snap| {
            offer_pins::approve(file, snap, &book, &config, &server, offers, &item, body)
        })
        .await;
        answer(result, "definition approved")
    };
    let forget = move |State(st): St, Path((config, server, item)): Path<(String, String, String)>| async move {
        let (named_server, named_item) = (server.clone(), item.clone());
        let about = Some(ToolWrite { server: &named_server, tool: &named_item });
        let result =
            write_about(&st, about, move |file, snap| offer_pins::forget(file, snap, &config, &server, offers, &item))
                .await;
        answer(result, "pin removed")
    };
    Router::new()
        .route(&base, get(list))
        .route(&format!("{base}/{{item}}"), axum::routing::delete(forget))
        .route(&format!("{base}/{{item}}/approve"), post(approve))
}

async fn list(State(st): St) -> Response {
    answer(Ok(configs::list(&st.store.snapshot())), "configurations")
}

async fn create(State(st): St, JsonBody(body): JsonBody) -> Response {
    answer_created(write(&st, move |file, _| configs::create(file, body)).await, "configuration created")
}

async fn get_one(State(st): St, Path(config): Path<String>) -> Response {
    answer(configs::get(&st.store.snapshot(), &config).map_err(Into::into), "configuration")
}

async fn rename(State(st): St, Path(config): Path<String>, JsonBody(body): JsonBody) -> Response {
    answer(write(&st, move |file, snap| configs::rename(file, snap, &config, body)).await, "configuration renamed")
}

async fn delete(State(st): St, Path(config): Path<String>) -> Response {
    answer(write(&st, move |file, snap| configs::delete(file, snap, &config)).await, "configuration deleted")
}

async fn copy(State(st): St, Path(config): Path<String>, JsonBody(body): JsonBody) -> Response {
    answer_created(write(&st, move |file, snap| configs::copy(file, snap, &config, body)).await, "configuration copied")
}

async fn list_servers(State(st): St, Path(config): Path<String>) -> Response {
    answer(configs::list_servers(&st.store.snapshot(), &config).map_err(Into::into), "servers")
}

async fn add_server(State(st): St, Path(config): Path<String>, JsonBody(body): JsonBody) -> Response {
    answer_created(write(&st, move |file, snap| configs::add_server(file, snap, &config, body)).await, "server added")
}

async fn get_server(State(st): St, Path((config, server)): Path<(String, String)>) -> Response {
    answer(configs::get_server(&st.store.snapshot(), &config, &server).map_err(Into::into), "server")
}

async fn replace_server(
    State(st): St,
    Path((config, server)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> Response {
    let result = write(&st, move |file, snap| configs::replace_server(file, snap, &config, &server, body)).await;
    answer(result, "server updated")
}

async fn tool_pins(State(st): St, Path((config, server)): Path<(String, String)>) -> Response {
    answer(configs::tool_pins(&st.store.snapshot(), &st.pins, &config, &server).map_err(Into::into), "tool pins")
}

async fn approve_tool(
    State(st): St,
    Path((config, server, tool)): Path<(String, String, String)>,
    JsonBody(body): JsonBody,
) -> Response {
    let book = Arc::clone(&st.pins);
    let (named_server, named_tool) = (server.clone(), tool.clone());
    let about = Some(ToolWrite { server: &named_server, tool: &named_tool });
    let result = write_about(&st, about, move |file, snap| {
        configs::approve_tool(file, snap, &book, &config, &server, &tool, body)
    })
    .await;
    answer(result, "tool definition approved")
}

async fn forget_pin(State(st): St, Path((config, server, tool)): Path<(String, String, String)>) -> Response {
    let (named_server, named_tool) = (server.clone(), tool.clone());
    let about = Some(ToolWrite { server: &named_server, tool: &named_tool });
    answer(
        write_about(&st, about, move |file, snap| configs::forget_pin(file, snap, &config, &server, &tool)).await,
        "tool pin removed",
    )
}

async fn delete_server(State(st): St, Path((config, server)): Path<(String, String)>) -> Response {
    answer(write(&st, move |file, snap| configs::delete_server(file, snap, &config, &server)).await, "server removed")
}
