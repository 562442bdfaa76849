//! `GET /v1/executions/{id}/history?after_seq=`: a JSON page, or with
//! `Accept: text/event-stream` a stream of the events as they commit (one
//! SSE message per event, `id` = seq, `event` = type), ending after the
//! terminal event. A `Last-Event-ID` header resumes after that seq.

use super::error::ApiError;
use super::extract::{Path, Query};
use super::reads;
use super::reply::event_json;
use super::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use orbit_core::history::{Event, EventKind};
use orbit_io_tokio::driver::Committed;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::broadcast;
use utoipa::IntoParams;

/// Query of a history request.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only events with a larger seq.
    #[param(minimum = 0, maximum = 18446744073709551615_u64)]
    pub after_seq: Option<u64>,
    /// At most this many events (1 to 10 000; all when absent). Page on with
    /// `after_seq` = the last `seq` received.
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<usize>,
}

pub use orbit_sdk::wire::HISTORY_LIMIT_MAX;

/// The history, or its live stream.
#[utoipa::path(get, path = "/v1/executions/{id}/history", tag = "executions",
    params(("id" = String, Path, description = "execution id"), HistoryQuery),
    responses((status = 200, description = "the events; with `Accept: text/event-stream`, a live stream of them (one message per event: `id` = seq, `event` = type, `data` = the event JSON), ending after the terminal event",
                content((orbit_sdk::wire::HistoryPage = "application/json"), (String = "text/event-stream"))),
              (status = 404, description = "`UNKNOWN_EXECUTION`", body = orbit_sdk::wire::ErrorBody)))]
pub async fn history(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let wants_stream = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"));
    if q.limit.is_some_and(|l| l == 0 || l > HISTORY_LIMIT_MAX) {
        return Err(ApiError::invalid(format!(
            "limit must be 1 to {HISTORY_LIMIT_MAX}"
        )));
    }
    if !wants_stream {
        // From the store, outside the engine loop.
        let store = state.driver.store().as_ref();
        let body = reads::history(store, &id, q.after_seq.unwrap_or(0), q.limit).await?;
        return Ok((StatusCode::OK, axum::Json(body)).into_response());
    }
    // Subscribe first, then read what is already committed: nothing falls
    // in between, and duplicates are dropped by seq.
    let live = state.driver.subscribe();
    let store = state.driver.store().clone();
    if store
        .execution(&id)
        .await
        .map_err(ApiError::storage)?
        .is_none()
    {
        return Err(reads::unknown(&id));
    }
    // A reconnecting EventSource names the last event it received.
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let after = q.after_seq.or(last_event_id).unwrap_or(0);
    let backlog = store
        .history(&id, after, u32::MAX)
        .await
        .map_err(ApiError::storage)?;
    let follow = Follow {
        id,
        last_seq: after,
        queue: backlog.into(),
        live,
        store,
        done: false,
    };
    Ok(Sse::new(follow.into_stream())
        .keep_alive(KeepAlive::default())
        .into_response())
}

struct Follow {
    id: String,
    last_seq: u64,
    queue: VecDeque<Event>,
    live: broadcast::Receiver<Committed>,
    store: std::sync::Arc<dyn orbit_io_tokio::storage::Storage>,
    done: bool,
}

fn is_terminal(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::WorkflowCompleted { .. }
            | EventKind::WorkflowFailed { .. }
            | EventKind::WorkflowCancelled { .. }
    )
}

impl Follow {
    fn into_stream(self) -> impl Stream<Item = Result<SseEvent, Infallible>> {
        stream::unfold(self, |mut f| async move {
            loop {
                if f.done {
                    return None;
                }
                if let Some(event) = f.queue.pop_front() {
                    if event.seq <= f.last_seq {
                        continue;
                    }
                    f.last_seq = event.seq;
                    f.done = is_terminal(&event.kind);
                    let json = event_json(&event);
                    let name = json
                        .get("type")
                        .and_then(|t| t.as_str())
                        .unwrap_or("event")
                        .to_owned();
                    let sse = SseEvent::default()
                        .id(event.seq.to_string())
                        .event(name)
                        .data(json.to_string());
                    return Some((Ok(sse), f));
                }
                match f.live.recv().await {
                    Ok(c) if c.execution_id == f.id => f.queue.extend(c.events.iter().cloned()),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Missed some: read them back from the store.
                        match f.store.history(&f.id, f.last_seq, u32::MAX).await {
                            Ok(events) => f.queue.extend(events),
                            Err(e) => {
                                tracing::warn!(error = %e, "history stream: store read failed");
                                return None;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }
}
