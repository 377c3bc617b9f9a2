//! Projects and their members.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ManageError, ManageResult, decode_body, required_name, users, views};
use crate::config::model::Project;
use crate::config::{ConfigFile, Snapshot};
use crate::ids::{new_id, timestamp};

#[derive(Deserialize)]
struct CreateBody {
    project_name: String,
    #[serde(default)]
    mcp_config_id: Option<String>,
}

#[derive(Deserialize)]
struct UpdateBody {
    #[serde(default)]
    project_name: Option<String>,
    /// Absent: unchanged; `null`: the project uses no configuration; a string: a config id or name.
    #[serde(default, deserialize_with = "present")]
    mcp_config_id: Option<Option<String>>,
}

/// Tells an absent field (`None`) from an explicit `null` (`Some(None)`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct MemberBody {
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    email: Option<String>,
}

/// The id of the project `ident` (id or name), or 404.
pub fn resolve(snap: &Snapshot, ident: &str) -> ManageResult<String> {
    snap.resolve_project(ident)
        .map(str::to_string)
        .ok_or_else(|| ManageError::NotFound(format!("project {ident:?} not found")))
}

/// A config id named in a request body (id or name); unknown is a validation error, not a 404.
fn body_config(snap: &Snapshot, ident: &str) -> ManageResult<String> {
    snap.resolve_config(ident)
        .map(str::to_string)
        .ok_or_else(|| ManageError::Validation(format!("mcp_config_id: MCP configuration {ident:?} does not exist")))
}

fn name_free(file: &ConfigFile, name: &str, except: Option<&str>) -> ManageResult<()> {
    if file.projects.iter().any(|(id, p)| p.project_name == name && Some(id.as_str()) != except) {
        return Err(ManageError::Conflict(format!("a project named {name:?} already exists")));
    }
    Ok(())
}

/// Every project.
pub fn list(snap: &Snapshot) -> Value {
    Value::Array(snap.file.projects.keys().map(|id| views::project(&snap.file, id)).collect())
}

/// One project.
pub fn get(snap: &Snapshot, ident: &str) -> ManageResult {
    Ok(views::project(&snap.file, &resolve(snap, ident)?))
}

/// `POST /projects {project_name, mcp_config_id?}`.
pub fn create(file: &mut ConfigFile, snap: &Snapshot, body: Value) -> ManageResult {
    let body: CreateBody = decode_body(body)?;
    let name = required_name(&body.project_name, "project_name")?;
    name_free(file, &name, None)?;
    let config_id = body.mcp_config_id.as_deref().map(|c| body_config(snap, c)).transpose()?;
    let id = new_id();
    let project = Project {
        project_name: name.clone(),
        mcp_config_id: config_id.clone(),
        created_at: Some(timestamp()),
        ..Default::default()
    };
    file.projects.insert(id.clone(), project);
    Ok(json!({"project_id": id, "project_name": name, "mcp_config_id": config_id}))
}

/// `PUT /projects/{project} {project_name?, mcp_config_id?}`.
pub fn update(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let body: UpdateBody = decode_body(body)?;
    let name = body.project_name.as_deref().map(|n| required_name(n, "project_name")).transpose()?;
    if let Some(name) = &name {
        name_free(file, name, Some(&id))?;
    }
    let config = match body.mcp_config_id {
        Some(Some(c)) => Some(Some(body_config(snap, &c)?)),
        other => other,
    };
    if let Some(project) = file.projects.get_mut(&id) {
        if let Some(name) = name {
            project.project_name = name;
        }
        if let Some(config) = config {
            project.mcp_config_id = config;
        }
    }
    Ok(views::project(file, &id))
}

/// `DELETE /projects/{project}`: also deletes the project's API keys.
pub fn delete(file: &mut ConfigFile, snap: &Snapshot, ident: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let mut view = views::project(file, &id);
    let before = file.apikeys.len();
    file.apikeys.retain(|_, k| k.project_id != id);
    file.projects.shift_remove(&id);
    view["deleted_api_keys"] = json!(before - file.apikeys.len());
    Ok(view)
}

/// The members of a project.
pub fn list_members(snap: &Snapshot, ident: &str) -> ManageResult {
    Ok(Value::Array(views::members(&snap.file, &resolve(snap, ident)?)))
}

/// `POST /projects/{project}/users {user_id | email}`: adds a member; answers the member list.
pub fn add_member(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let body: MemberBody = decode_body(body)?;
    let who =
        body.user_id.or(body.email).ok_or_else(|| ManageError::Validation("give user_id or email".to_string()))?;
    let user_id = snap
        .resolve_user(&who)
        .map(str::to_string)
        .ok_or_else(|| ManageError::Validation(format!("user {who:?} does not exist")))?;
    let Some(project) = file.projects.get_mut(&id) else { return Err(ManageError::NotFound(ident.to_string())) };
    if project.users.contains(&user_id) {
        return Err(ManageError::Conflict(format!("user {who:?} is already a member of project {ident:?}")));
    }
    project.users.push(user_id);
    Ok(Value::Array(views::members(file, &id)))
}

/// `DELETE /projects/{project}/users/{user}`: removes a member and that user's keys for the project.
pub fn remove_member(file: &mut ConfigFile, snap: &Snapshot, ident: &str, user: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let user_id = users::resolve(snap, user)?;
    let Some(project) = file.projects.get_mut(&id) else { return Err(ManageError::NotFound(ident.to_string())) };
    let Some(pos) = project.users.iter().position(|u| *u == user_id) else {
        return Err(ManageError::NotFound(format!("user {user:?} is not a member of project {ident:?}")));
    };
    project.users.remove(pos);
    let before = file.apikeys.len();
    file.apikeys.retain(|_, k| !(k.project_id == id && k.user_id == user_id));
    let mut view = views::project(file, &id);
    view["deleted_api_keys"] = json!(before - file.apikeys.len());
    Ok(view)
}
