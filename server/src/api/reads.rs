//! Reads answered from storage, outside the engine loop, on the store's
//! reader connections: one execution (its history folded into the same
//! view the engine shows), its history, and a list page. The JSON is built
//! by the engine's own view functions, so it is the same whichever side
//! answers.

use super::error::ApiError;
use axum::http::StatusCode;
use orbit_core::engine::{event_view, execution_view, rfc3339};
use orbit_core::history::{Millis, Projection, Status};
use orbit_io_tokio::storage::{ExecutionRow, ListPage, Storage};
use serde_json::{json, Value};

/// `404 UNKNOWN_EXECUTION`.
pub fn unknown(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "UNKNOWN_EXECUTION",
        format!("no execution `{id}`"),
    )
}

/// An execution as `GET /v1/executions/{id}` shows it, with its status;
/// `None` when the store does not have it.
pub async fn execution(store: &dyn Storage, id: &str) -> Result<Option<(Status, Value)>, ApiError> {
    let Some(stored) = store.load_execution(id).await.map_err(ApiError::storage)? else {
        return Ok(None);
    };
    if stored.events.is_empty() {
        return Ok(None);
    }
    let p = Projection::fold(id, &stored.events);
    Ok(Some((p.status, execution_view(&p))))
}

/// `{"events": [...]}` after `after_seq`, at most `limit`.
pub async fn history(
    store: &dyn Storage,
    id: &str,
    after_seq: u64,
    limit: Option<usize>,
) -> Result<Value, ApiError> {
    let limit = limit.map_or(u32::MAX, |l| u32::try_from(l).unwrap_or(u32::MAX));
    let events = store
        .history(id, after_seq, limit)
        .await
        .map_err(ApiError::storage)?;
    if events.is_empty()
        && store
            .execution(id)
            .await
            .map_err(ApiError::storage)?
            .is_none()
    {
        return Err(unknown(id));
    }
    let events: Vec<Value> = events.iter().map(event_view).collect();
    Ok(json!({"events": events}))
}

/// The keyset position of a `next_cursor` (`<created_at ms>:<id>`); an
/// unreadable cursor is no position, as before reads came from storage.
pub fn cursor(text: &str) -> Option<(Millis, String)> {
    let (t, rest) = text.split_once(':')?;
    Some((t.parse::<u64>().ok()?, rest.to_owned()))
}

/// One row of the list, as the engine listed it.
fn list_item(r: &ExecutionRow) -> Value {
    json!({
        "execution_id": r.id,
        "workflow": r.workflow,
        "version": r.version,
        "status": r.status,
        "parent": r.parent,
        "created_at": rfc3339(r.created_at),
        "updated_at": rfc3339(r.updated_at),
    })
}

/// `{"executions": [...], "next_cursor": ...}`: one page, newest first.
pub async fn list(store: &dyn Storage, mut page: ListPage) -> Result<Value, ApiError> {
    let limit = page.limit;
    // One more row than asked tells whether another page follows.
    page.limit = limit.saturating_add(1);
    let mut rows = store.list_page(&page).await.map_err(ApiError::storage)?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = match rows.last() {
        Some(r) if more => json!(format!("{}:{}", r.created_at, r.id)),
        _ => Value::Null,
    };
    let list: Vec<Value> = rows.iter().map(list_item).collect();
    Ok(json!({"executions": list, "next_cursor": next}))
}
