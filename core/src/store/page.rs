//! A page of `GET /v1/executions` as the store reads it: filters, the
//! keyset position, and the generic fallback for stores without a query
//! of their own.

use super::records::{ExecutionRow, ListFilter};
use super::{Storage, StorageError};
use crate::history::Millis;

/// Which executions a page holds: every filter set must match; newest
/// first by `(created_at, id)`, strictly after the keyset position `before`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Only this status.
    pub status: Option<String>,
    /// Only this workflow.
    pub workflow: Option<String>,
    /// Only this workflow version.
    pub version: Option<String>,
    /// Only ids starting with this.
    pub id_prefix: Option<String>,
    /// Only executions created strictly after this time.
    pub created_after: Option<Millis>,
    /// Only executions created strictly before this time.
    pub created_before: Option<Millis>,
    /// Only rows strictly older than this `(created_at, id)` position.
    pub before: Option<(Millis, String)>,
    /// At most this many rows.
    pub limit: u32,
}

impl ListPage {
    /// Whether `row` passes the filters (the keyset position aside).
    pub fn keeps(&self, row: &ExecutionRow) -> bool {
        self.status.as_ref().is_none_or(|s| &row.status == s)
            && self.workflow.as_ref().is_none_or(|w| &row.workflow == w)
            && self.version.as_ref().is_none_or(|v| &row.version == v)
            && self
                .id_prefix
                .as_ref()
                .is_none_or(|p| row.id.starts_with(p.as_str()))
            && self.created_after.is_none_or(|t| row.created_at > t)
            && self.created_before.is_none_or(|t| row.created_at < t)
    }
}

/// A page from [`Storage::list_executions`] pages, filtered in memory: for
/// stores without an indexed query of their own (the simulation's).
pub async fn filtered<S: Storage + ?Sized>(
    store: &S,
    page: &ListPage,
) -> Result<Vec<ExecutionRow>, StorageError> {
    let mut out = Vec::new();
    let mut before = page.before.clone();
    loop {
        let chunk = store
            .list_executions(&ListFilter {
                status: page.status.clone(),
                workflow: page.workflow.clone(),
                limit: 500,
                before: before.clone(),
            })
            .await?;
        let last = chunk.last().map(|r| (r.created_at, r.id.clone()));
        let done = chunk.len() < 500;
        out.extend(chunk.into_iter().filter(|r| page.keeps(r)));
        if out.len() >= page.limit as usize || done {
            out.truncate(page.limit as usize);
            return Ok(out);
        }
        before = last;
    }
}
