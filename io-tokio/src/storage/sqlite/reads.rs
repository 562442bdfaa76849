//! SQLite queries of issue 13: a list page from one index whatever the
//! filters (migration `0013`), and retention in small transactions (each
//! takes what it removes off the counts per status).

use super::writes::ADD_TO_COUNT;
use super::{encode, execution_row, to_i64, unavailable, SqliteStore, EXECUTION_COLUMNS};
use crate::storage::rows::removed_per_status;
use crate::storage::{is_terminal, ExecutionRow, ListPage, Purged, StorageError};
use sqlx::{Connection, Row, Sqlite};
use std::collections::{BTreeMap, BTreeSet};

impl SqliteStore {
    pub(super) async fn page(&self, page: &ListPage) -> Result<Vec<ExecutionRow>, StorageError> {
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE 1 = 1");
        if page.status.is_some() {
            sql.push_str(" AND status = ?");
        }
        if page.workflow.is_some() {
            sql.push_str(" AND workflow = ?");
        }
        if page.version.is_some() {
            sql.push_str(" AND version = ?");
        }
        if page.id_prefix.is_some() {
            // Byte order: every id starting with the prefix sorts between
            // the prefix and the prefix followed by the largest character.
            sql.push_str(" AND id >= ? AND id < ?");
        }
        if page.created_after.is_some() {
            sql.push_str(" AND created_at > ?");
        }
        if page.created_before.is_some() {
            sql.push_str(" AND created_at < ?");
        }
        if page.before.is_some() {
            sql.push_str(" AND (created_at, id) < (?, ?)");
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT ?");
        let mut q = sqlx::query::<Sqlite>(&sql);
        if let Some(s) = &page.status {
            q = q.bind(s);
        }
        if let Some(w) = &page.workflow {
            q = q.bind(w);
        }
        if let Some(v) = &page.version {
            q = q.bind(v);
        }
        if let Some(p) = &page.id_prefix {
            q = q.bind(p).bind(format!("{p}\u{10FFFF}"));
        }
        if let Some(t) = page.created_after {
            q = q.bind(to_i64(t));
        }
        if let Some(t) = page.created_before {
            q = q.bind(to_i64(t));
        }
        if let Some((at, id)) = &page.before {
            q = q.bind(to_i64(*at)).bind(id);
        }
        q = q.bind(i64::from(page.limit));
        let rows = q.fetch_all(&self.readers).await.map_err(unavailable)?;
        rows.iter().map(execution_row).collect()
    }

    pub(super) async fn purge(
        &self,
        finished_before: u64,
        limit: u32,
    ) -> Result<Purged, StorageError> {
        let mut held = self.writer.lock().await?;
        let mut tx = held.conn()?.begin().await.map_err(unavailable)?;
        let roots: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM executions WHERE parent IS NULL \
             AND finished_at IS NOT NULL AND finished_at < ? \
             ORDER BY finished_at LIMIT ?",
        )
        .bind(to_i64(finished_before))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(unavailable)?;
        let mut purged = Purged {
            scanned: roots.len() as u64,
            ..Purged::default()
        };
        if roots.is_empty() {
            return Ok(purged);
        }
        let tree = sqlx::query(
            "WITH RECURSIVE tree(root, id) AS ( \
               SELECT value, value FROM json_each(?) \
               UNION ALL \
               SELECT t.root, e.id FROM executions e JOIN tree t ON e.parent = t.id) \
             SELECT t.root, t.id, x.status FROM tree t JOIN executions x ON x.id = t.id",
        )
        .bind(encode(&roots)?)
        .fetch_all(&mut *tx)
        .await
        .map_err(unavailable)?;
        let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut live = BTreeSet::new();
        for r in &tree {
            let root: String = r.try_get(0).map_err(unavailable)?;
            let id: String = r.try_get(1).map_err(unavailable)?;
            let status: String = r.try_get(2).map_err(unavailable)?;
            if !is_terminal(&status) {
                live.insert(root.clone());
            }
            members.entry(root).or_default().push(id);
        }
        let ids: Vec<String> = members
            .into_iter()
            .filter(|(root, _)| !live.contains(root))
            .inspect(|_| purged.roots += 1)
            .flat_map(|(_, ids)| ids)
            .collect();
        let ids = encode(&ids)?;
        for table in ["events", "task_queue"] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE execution_id IN (SELECT value FROM json_each(?))"
            ))
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(unavailable)?;
        }
        // What is gone comes off the counts per status, in this transaction.
        let statuses: Vec<String> = sqlx::query_scalar(
            "DELETE FROM executions WHERE id IN (SELECT value FROM json_each(?)) RETURNING status",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .map_err(unavailable)?;
        purged.executions = statuses.len() as u64;
        let removed = removed_per_status(statuses);
        for (status, n) in removed {
            sqlx::query(ADD_TO_COUNT)
                .bind(status)
                .bind(n)
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
        }
        // Not synced by the store (see `sync`): a purge a power cut undoes
        // is simply done again.
        tx.commit().await.map_err(unavailable)?;
        Ok(purged)
    }
}
