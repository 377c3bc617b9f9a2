//! Users and their API keys.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ManageError, ManageResult, decode_body, views};
use crate::config::model::{ApiKeyRecord, User};
use crate::config::snapshot::check_email;
use crate::config::{ConfigFile, Snapshot};
use crate::ids::{new_id, timestamp};
use crate::secrets;

#[derive(Deserialize)]
struct EmailBody {
    email: String,
}

#[derive(Deserialize)]
struct NewKeyBody {
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    project_name: Option<String>,
}

/// The id of the user `ident` (id or e-mail), or 404.
pub fn resolve(snap: &Snapshot, ident: &str) -> ManageResult<String> {
    snap.resolve_user(ident)
        .map(str::to_string)
        .ok_or_else(|| ManageError::NotFound(format!("user {ident:?} not found")))
}

fn valid_email(raw: &str, file: &ConfigFile, except: Option<&str>) -> ManageResult<String> {
    let email = raw.trim().to_string();
    check_email(&email).map_err(|why| ManageError::Validation(format!("email: {why}")))?;
    let lower = email.to_lowercase();
    if file.users.iter().any(|(id, u)| u.email.to_lowercase() == lower && Some(id.as_str()) != except) {
        return Err(ManageError::Conflict(format!("a user with e-mail {email:?} already exists")));
    }
    Ok(email)
}

/// Every user.
pub fn list(snap: &Snapshot) -> Value {
    Value::Array(snap.file.users.keys().map(|id| views::user(&snap.file, id)).collect())
}

/// One user.
pub fn get(snap: &Snapshot, ident: &str) -> ManageResult {
    Ok(views::user(&snap.file, &resolve(snap, ident)?))
}

/// `POST /users {email}`.
pub fn create(file: &mut ConfigFile, body: Value) -> ManageResult {
    let body: EmailBody = decode_body(body)?;
    let email = valid_email(&body.email, file, None)?;
    let id = new_id();
    file.users.insert(id.clone(), User { email: email.clone(), created_at: Some(timestamp()), ..Default::default() });
    Ok(json!({"user_id": id, "email": email}))
}

/// `PUT /users/{user} {email}`.
pub fn update(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let body: EmailBody = decode_body(body)?;
    let email = valid_email(&body.email, file, Some(&id))?;
    if let Some(user) = file.users.get_mut(&id) {
        user.email = email;
    }
    Ok(views::user(file, &id))
}

/// `DELETE /users/{user}`: also removes the user from every project and deletes their keys and their own upstream
/// credentials.
pub fn delete(file: &mut ConfigFile, snap: &Snapshot, ident: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let mut view = views::user(file, &id);
    for project in file.projects.values_mut() {
        project.users.retain(|u| *u != id);
    }
    let before = file.apikeys.len();
    file.apikeys.retain(|_, k| k.user_id != id);
    file.users.shift_remove(&id);
    file.user_credentials.shift_remove(&id);
    view["deleted_api_keys"] = json!(before - file.apikeys.len());
    Ok(view)
}

/// The user's keys, masked.
pub fn list_keys(snap: &Snapshot, ident: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let keys = snap.file.apikeys.iter().filter(|(_, r)| r.user_id == id).map(|(k, r)| views::api_key(k, r));
    Ok(Value::Array(keys.collect()))
}

/// `POST /users/{user}/api-keys {project_id | project_name}`: a new key; the user must be a member of the project.
pub fn create_key(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let user_id = resolve(snap, ident)?;
    let body: NewKeyBody = decode_body(body)?;
    let project = body
        .project_id
        .or(body.project_name)
        .ok_or_else(|| ManageError::Validation("give project_id or project_name".to_string()))?;
    let project_id = snap
        .resolve_project(&project)
        .map(str::to_string)
        .ok_or_else(|| ManageError::Validation(format!("project {project:?} does not exist")))?;
    let member = file.projects.get(&project_id).is_some_and(|p| p.users.contains(&user_id));
    if !member {
        return Err(ManageError::Validation(format!(
            "user {ident:?} is not a member of project {project:?}; add them to the project first"
        )));
    }
    let key = secrets::new_gateway_key()?;
    let record = ApiKeyRecord {
        project_id,
        user_id,
        created_at: Some(timestamp()),
        disabled: Some(false),
        ..Default::default()
    };
    let view = views::new_api_key(&key, &record);
    file.apikeys.insert(key, record);
    Ok(view)
}
