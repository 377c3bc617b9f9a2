//! Gateway API keys: listing, rotation, disabling, deletion. A key is named in paths by itself or by its `key_id`.

use serde_json::{Value, json};

use super::{ManageError, ManageResult, views};
use crate::config::model::ApiKeyRecord;
use crate::config::{ConfigFile, Snapshot};
use crate::ids::timestamp;
use crate::secrets;

/// The full key for `ident` (a key or a `key_id`), or 404. The message never repeats a full key.
pub fn resolve(snap: &Snapshot, ident: &str) -> ManageResult<String> {
    snap.resolve_key(ident).map(|e| e.key.clone()).ok_or_else(|| {
        let shown = if secrets::looks_like_key_id(ident) { ident.to_string() } else { secrets::mask(ident) };
        ManageError::NotFound(format!("API key {shown} not found"))
    })
}

fn record<'a>(file: &'a ConfigFile, key: &str) -> ManageResult<&'a ApiKeyRecord> {
    file.apikeys.get(key).ok_or_else(|| ManageError::NotFound("API key not found".to_string()))
}

/// Every key, masked.
pub fn list(snap: &Snapshot) -> Value {
    Value::Array(snap.file.apikeys.iter().map(|(k, r)| views::api_key(k, r)).collect())
}

/// One key, masked.
pub fn get(snap: &Snapshot, ident: &str) -> ManageResult {
    let key = resolve(snap, ident)?;
    Ok(views::api_key(&key, record(&snap.file, &key)?))
}

/// `DELETE /api-keys/{key}`.
pub fn delete(file: &mut ConfigFile, snap: &Snapshot, ident: &str) -> ManageResult {
    let key = resolve(snap, ident)?;
    let view = views::api_key(&key, record(file, &key)?);
    file.apikeys.shift_remove(&key);
    Ok(view)
}

/// `POST /api-keys/{key}/rotate`: a new key with the same project, user and state; the old key stops working.
pub fn rotate(file: &mut ConfigFile, snap: &Snapshot, ident: &str) -> ManageResult {
    let old = resolve(snap, ident)?;
    let mut new_record = record(file, &old)?.clone();
    new_record.created_at = Some(timestamp());
    let new_key = secrets::new_gateway_key()?;
    let index = file.apikeys.get_index_of(&old).unwrap_or(file.apikeys.len());
    file.apikeys.shift_remove(&old);
    file.apikeys.shift_insert(index.min(file.apikeys.len()), new_key.clone(), new_record.clone());
    let mut view = views::new_api_key(&new_key, &new_record);
    view["rotated_key_id"] = json!(secrets::key_id(&old));
    Ok(view)
}

/// `POST /api-keys/{key}/disable` and `/enable`.
pub fn set_disabled(file: &mut ConfigFile, snap: &Snapshot, ident: &str, disabled: bool) -> ManageResult {
    let key = resolve(snap, ident)?;
    let record = file.apikeys.get_mut(&key).ok_or_else(|| ManageError::NotFound("API key not found".to_string()))?;
    record.disabled = Some(disabled);
    Ok(views::api_key(&key, record))
}
