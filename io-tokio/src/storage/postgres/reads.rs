//! PostgreSQL queries of issue 13: a list page from one index whatever the
//! filters (migration `0013`), and retention in small transactions (each
//! takes what it removes off the counts per status).

use super::{execution_row, to_i64, unavailable, PostgresStore, EXECUTION_COLUMNS};
use crate::storage::rows::removed_per_status;
use crate::storage::{is_terminal, ExecutionRow, ListPage, Purged, StorageError};
use sqlx::{Postgres, Row};
use std::collections::{BTreeMap, BTreeSet};

impl PostgresStore {
    pub(super) async fn page(&self, page: &ListPage) -> Result<Vec<ExecutionRow>, StorageError> {
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE TRUE");
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        if page.status.is_some() {
            sql.push_str(&format!(" AND status = {}", next()));
        }
        if page.workflow.is_some() {
            sql.push_str(&format!(" AND workflow = {}", next()));
        }
        if page.version.is_some() {
            sql.push_str(&format!(" AND version = {}", next()));
        }
        if page.id_prefix.is_some() {
            sql.push_str(&format!(" AND starts_with(id, {})", next()));
        }
        if page.created_after.is_some() {
            sql.push_str(&format!(" AND created_at > {}", next()));
        }
        if page.created_before.is_some() {
            sql.push_str(&format!(" AND created_at < {}", next()));
        }
        if page.before.is_some() {
            let (at, id) = (next(), next());
            sql.push_str(&format!(" AND (created_at, id) < ({at}, {id})"));
        }
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT {}",
            next()
        ));
        let mut q = sqlx::query::<Postgres>(&sql);
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
            q = q.bind(p);
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
        // A reader connection: PostgreSQL takes concurrent writers, and the
        // commit path keeps its own connection.
        let mut tx = self.readers.begin().await.map_err(unavailable)?;
        let roots: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM executions WHERE parent IS NULL \
             AND finished_at IS NOT NULL AND finished_at < $1 \
             ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED",
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
               SELECT r, r FROM unnest($1::text[]) AS r \
               UNION ALL \
               SELECT t.root, e.id FROM executions e JOIN tree t ON e.parent = t.id) \
             SELECT t.root, t.id, x.status FROM tree t JOIN executions x ON x.id = t.id",
        )
        .bind(&roots)
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
        for table in ["events", "task_queue"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE execution_id = ANY($1)"))
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(unavailable)?;
        }
        // What is gone comes off the counts per status, in this transaction.
        let statuses: Vec<String> =
            sqlx::query_scalar("DELETE FROM executions WHERE id = ANY($1) RETURNING status")
                .bind(&ids)
                .fetch_all(&mut *tx)
                .await
                .map_err(unavailable)?;
        purged.executions = statuses.len() as u64;
        let removed = removed_per_status(statuses);
        super::add_counts(&mut tx, &removed).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(purged)
    }
}
