//! The pages over what happened and what would: the audit log (filtered through `GET /api/v1/audit`, its hash chain
//! verified through `GET /api/v1/audit/verify`) and the authorization policies and quotas (shown, compiled, simulated
//! against the audited calls with `POST /api/v1/policy/simulate`, and saved with `PUT /api/v1/policy`).

use std::sync::Arc;

use askama::Template;
use axum::Extension;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::pages::render;
use super::{Console, Form, Operator, api};

/// The audit page's filters, as `GET /api/v1/audit` takes them.
#[derive(Deserialize, Default)]
pub struct AuditFilters {
    since: Option<String>,
    until: Option<String>,
    user: Option<String>,
    project: Option<String>,
    server: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    event: Option<String>,
    limit: Option<String>,
    verify: Option<String>,
}

impl AuditFilters {
    /// The filters given, in the API's order.
    fn given(&self) -> Vec<(&'static str, &str)> {
        let all = [
            ("since", &self.since),
            ("until", &self.until),
            ("user", &self.user),
            ("project", &self.project),
            ("server", &self.server),
            ("tool", &self.tool),
            ("outcome", &self.outcome),
            ("event", &self.event),
            ("limit", &self.limit),
        ];
        all.into_iter()
            .filter_map(|(name, value)| Some((name, value.as_deref()?.trim())).filter(|(_, v)| !v.is_empty()))
            .collect()
    }
}

/// One audit record as the page lists it.
struct RecordRow {
    seq: String,
    timestamp: String,
    event: String,
    who: String,
    target: String,
    outcome: String,
    failed: bool,
}

#[derive(Template)]
#[template(path = "console/audit.html")]
struct AuditPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    filters: Vec<(&'static str, &'static str, String)>,
    problem: Option<String>,
    records: Vec<RecordRow>,
    matched: u64,
    scanned: u64,
    complete: bool,
    verified: Option<(bool, String)>,
}

fn text(value: &Value, field: &str) -> String {
    match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn row(record: &Value) -> RecordRow {
    let joined = |fields: &[&str]| {
        fields.iter().map(|f| text(record, f)).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" / ")
    };
    let error = text(record, "error_code");
    RecordRow {
        seq: text(record, "seq"),
        timestamp: text(record, "timestamp"),
        event: text(record, "event"),
        who: joined(&["user_id", "project_id", "key_id"]),
        target: joined(&["server_name", "tool_name"]),
        failed: !error.is_empty(),
        outcome: if error.is_empty() { text(record, "outcome") } else { error },
    }
}

/// The labels of the filter fields, in the page's order.
const FILTER_LABELS: [(&str, &str); 9] = [
    ("since", "Since (RFC 3339, or 90m, 24h, 7d)"),
    ("until", "Until"),
    ("user", "User"),
    ("project", "Project"),
    ("server", "Server"),
    ("tool", "Tool, prompt or resource"),
    ("outcome", "Outcome (success, error, or an error code)"),
    ("event", "Event"),
    ("limit", "At most"),
];

pub async fn audit(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Query(filters): Query<AuditFilters>,
) -> Response {
    let operator = &op.session.operator;
    let given = filters.given();
    let query = serde_urlencoded::to_string(&given).unwrap_or_default();
    let (mut problem, mut records, mut matched, mut scanned, mut complete) = (None, Vec::new(), 0, 0, true);
    match api::get(&console, operator, &format!("/api/v1/audit?{query}")).await {
        Ok(found) => {
            records =
                found.get("records").and_then(Value::as_array).map(|r| r.iter().map(row).collect()).unwrap_or_default();
            matched = found.get("matched").and_then(Value::as_u64).unwrap_or(0);
            scanned = found.get("scanned").and_then(Value::as_u64).unwrap_or(0);
            complete = found.get("complete").and_then(Value::as_bool).unwrap_or(true);
        }
        Err(why) => problem = Some(why),
    }
    let verified = match filters.verify.as_deref() {
        Some(_) => Some(match api::get(&console, operator, "/api/v1/audit/verify").await {
            Ok(found) if found.get("valid").and_then(Value::as_bool) == Some(true) => {
                (true, format!("The chain holds: {} records, each linked to the one before.", text(&found, "records")))
            }
            Ok(found) => {
                (false, format!("The chain is broken at seq {}: {}", text(&found, "broken_seq"), text(&found, "why")))
            }
            Err(why) => (false, why),
        }),
        None => None,
    };
    let values: Map<String, Value> = given.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let filters = FILTER_LABELS
        .iter()
        .map(|(name, label)| (*name, *label, values.get(*name).and_then(Value::as_str).unwrap_or_default().to_string()))
        .collect();
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(
        status,
        &AuditPage {
            signed_in: true,
            csrf: &op.session.csrf,
            filters,
            problem,
            records,
            matched,
            scanned,
            complete,
            verified,
        },
    )
}

/// One call a proposal would decide otherwise.
struct ChangedRow {
    timestamp: String,
    who: String,
    target: String,
    before: String,
    after: String,
    rule: String,
}

#[derive(Template)]
#[template(path = "console/policies.html")]
struct PoliciesPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    document: String,
    problem: Option<String>,
    notice: Option<String>,
    simulated: Option<(u64, u64, Vec<ChangedRow>)>,
}

/// The policies and quotas as they are now, as the JSON the page edits.
async fn current(console: &Console, operator: &str) -> Result<String, String> {
    let data = api::get(console, operator, "/api/v1/policy").await?;
    Ok(serde_json::to_string_pretty(&data).unwrap_or_default())
}

fn policies_page(
    op: &Operator,
    document: String,
    problem: Option<String>,
    notice: Option<String>,
    simulated: Option<(u64, u64, Vec<ChangedRow>)>,
) -> Response {
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(status, &PoliciesPage { signed_in: true, csrf: &op.session.csrf, document, problem, notice, simulated })
}

pub async fn policies(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    match current(&console, &op.session.operator).await {
        Ok(document) => policies_page(&op, document, None, None, None),
        Err(problem) => policies_page(&op, String::new(), Some(problem), None, None),
    }
}

/// `POST /ui/policies`: the edited document compiled and simulated (`action=simulate`), or saved (`action=save`).
pub async fn policies_action(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let document = form.get("document").to_string();
    let body = match serde_json::from_str::<Value>(&document) {
        Ok(Value::Object(body)) => Value::Object(body),
        Ok(_) => return policies_page(&op, document, Some("The document must be a JSON object.".into()), None, None),
        Err(e) => return policies_page(&op, document, Some(format!("The document is not JSON: {e}")), None, None),
    };
    let operator = &op.session.operator;
    match form.get("action") {
        "save" => match api::call(&console, operator, Method::PUT, "/api/v1/policy", Some(body)).await.data() {
            Ok(_) => {
                let saved = current(&console, operator).await.unwrap_or(document);
                policies_page(&op, saved, None, Some("Saved: the gateway applies them from now on.".into()), None)
            }
            Err(problem) => policies_page(&op, document, Some(problem), None, None),
        },
        _ => {
            // The simulator takes `policies` (required), `policy_default` and `quotas`.
            let mut proposal = Map::new();
            for field in ["policies", "policy_default", "quotas"] {
                if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
                    proposal.insert(field.into(), value.clone());
                }
            }
            proposal.entry("policies").or_insert_with(|| json!([]));
            let path = "/api/v1/policy/simulate";
            match api::call(&console, operator, Method::POST, path, Some(Value::Object(proposal))).await.data() {
                Ok(result) => {
                    let changed = result.get("changed").and_then(Value::as_array).cloned().unwrap_or_default();
                    let rows = changed.iter().map(changed_row).collect();
                    let evaluated = result.get("evaluated").and_then(Value::as_u64).unwrap_or(0);
                    let count = result.get("changed_count").and_then(Value::as_u64).unwrap_or(0);
                    let notice = "Compiled. Simulated against the audited calls; nothing applied.".to_string();
                    policies_page(&op, document, None, Some(notice), Some((evaluated, count, rows)))
                }
                Err(problem) => policies_page(&op, document, Some(problem), None, None),
            }
        }
    }
}

fn changed_row(change: &Value) -> ChangedRow {
    let principal = change.get("principal").cloned().unwrap_or(Value::Null);
    let target = change.get("target").cloned().unwrap_or(Value::Null);
    let decision = |field: &str| match change.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other
            .get("decision")
            .map_or_else(|| other.to_string(), |d| d.as_str().map_or_else(|| d.to_string(), str::to_string)),
    };
    let pick = |value: &Value, fields: &[&str]| {
        fields.iter().map(|f| text(value, f)).filter(|t| !t.is_empty()).collect::<Vec<_>>().join(" / ")
    };
    ChangedRow {
        timestamp: text(change, "timestamp"),
        who: pick(&principal, &["user_id", "project_id", "key_id"]),
        target: pick(&target, &["server_name", "server", "name", "exposed_name", "tool_name"]),
        before: decision("before"),
        after: decision("after"),
        rule: text(change, "rule"),
    }
}
