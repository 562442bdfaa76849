//! A group commit's records as columns: one array per column of the
//! `executions` and `events` tables, bound as `$1`…`$21` of the statements
//! that write them, and of the `idempotency` table (`UNNEST` turns them
//! back into rows on the server); and the parts of those statements that
//! turn the execution columns into rows and totals.

use super::super::rows::{encode, finished_at, last_seq, owner, to_i64};
use super::super::{Append, IdempotencyRecord, StorageError, Transaction};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::Postgres;
use std::collections::BTreeMap;

/// The `executions` upsert of the columns `$1`…`$15`, rows kept only
/// where `filter` holds (`WHERE …`, or empty). What an execution is
/// (workflow, version, parent, input, creation) never changes: only what
/// it has become is set. While the status stays the same no indexed column
/// changes, so the update is HOT.
pub(super) fn upsert_executions(filter: &str) -> String {
    format!(
        "INSERT INTO executions (id, workflow, version, definition_hash, status, \
         parent, input, output, error, created_at, updated_at, finished_at, last_seq, \
         owner_node, owner_epoch) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
         $6::text[], $7::text[], $8::text[], $9::text[], $10::int8[], $11::int8[], $12::int8[], \
         $13::int8[], $14::text[], $15::int8[]) {filter} \
         ON CONFLICT (id) DO UPDATE SET status = excluded.status, output = excluded.output, \
         error = excluded.error, updated_at = excluded.updated_at, \
         finished_at = excluded.finished_at, last_seq = excluded.last_seq, \
         owner_node = excluded.owner_node, owner_epoch = excluded.owner_epoch"
    )
}

/// The `changed` and `counted` parts of a statement that has a `before`
/// part (the rows as they were): each status change among the columns
/// `$1` and `$5`, where `filter` holds (`AND …`, or empty), added to the
/// per-status totals in shard `$22`.
pub(super) fn add_to_counts(filter: &str) -> String {
    format!(
        "changed AS (SELECT w.status AS became, b.status AS was \
         FROM UNNEST($1::text[], $5::text[]) AS w(id, status) \
         LEFT JOIN before b ON b.id = w.id WHERE b.status IS DISTINCT FROM w.status {filter}), \
         counted AS (INSERT INTO execution_counts (shard, status, n) \
         SELECT $22, c.status, sum(c.n) FROM ( \
         SELECT became AS status, 1 AS n FROM changed \
         UNION ALL SELECT was, -1 FROM changed WHERE was IS NOT NULL) c \
         GROUP BY c.status HAVING sum(c.n) <> 0 \
         ON CONFLICT (shard, status) DO UPDATE SET n = execution_counts.n + excluded.n)"
    )
}

/// The arrays, in execution id order (the order rows are locked in).
pub(super) struct Columns<'a> {
    /// The executions, each once: `$1`.
    pub ids: Vec<&'a str>,
    /// `after_seq` of each execution's append, in the order of `ids`.
    pub after_seqs: Vec<i64>,
    workflows: Vec<&'a str>,
    versions: Vec<&'a str>,
    hashes: Vec<&'a str>,
    statuses: Vec<&'a str>,
    parents: Vec<Option<&'a str>>,
    /// A new execution's input; `null` for an existing row, whose input
    /// the upsert never changes (an append that is not new inserts a row
    /// only in a transaction the conflict rule then rolls back).
    inputs: Vec<String>,
    outputs: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    created: Vec<i64>,
    updated: Vec<i64>,
    finished: Vec<Option<i64>>,
    last_seqs: Vec<i64>,
    owner_nodes: Vec<&'a str>,
    owner_epochs: Vec<i64>,
    event_ids: Vec<&'a str>,
    seqs: Vec<i64>,
    ats: Vec<i64>,
    types: Vec<&'static str>,
    bodies: Vec<String>,
}

impl<'a> Columns<'a> {
    /// The columns of `tx`'s appends. For an execution appended twice the
    /// last append's projection (and `after_seq`) is the one kept; every
    /// event of every append is kept.
    pub(super) fn of(tx: &'a Transaction) -> Result<Self, StorageError> {
        let mut last: BTreeMap<&str, &Append> = BTreeMap::new();
        for append in &tx.appends {
            last.insert(append.execution_id.as_str(), append);
        }
        let n = last.len();
        let count: usize = tx.appends.iter().map(|a| a.events.len()).sum();
        let mut c = Columns {
            ids: Vec::with_capacity(n),
            after_seqs: Vec::with_capacity(n),
            workflows: Vec::with_capacity(n),
            versions: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            parents: Vec::with_capacity(n),
            inputs: Vec::with_capacity(n),
            outputs: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            created: Vec::with_capacity(n),
            updated: Vec::with_capacity(n),
            finished: Vec::with_capacity(n),
            last_seqs: Vec::with_capacity(n),
            owner_nodes: Vec::with_capacity(n),
            owner_epochs: Vec::with_capacity(n),
            event_ids: Vec::with_capacity(count),
            seqs: Vec::with_capacity(count),
            ats: Vec::with_capacity(count),
            types: Vec::with_capacity(count),
            bodies: Vec::with_capacity(count),
        };
        for (id, append) in &last {
            let p = &append.projection;
            c.ids.push(*id);
            c.after_seqs.push(to_i64(append.after_seq));
            c.workflows.push(p.workflow.as_str());
            c.versions.push(p.version.as_str());
            c.hashes.push(p.definition_hash.as_str());
            c.statuses.push(p.status.as_str());
            c.parents.push(p.parent.as_deref());
            c.inputs.push(if append.after_seq == 0 {
                encode(&p.input)?
            } else {
                "null".to_owned()
            });
            c.outputs.push(p.output.as_ref().map(encode).transpose()?);
            c.errors.push(p.error.as_ref().map(encode).transpose()?);
            c.created.push(to_i64(p.created_at));
            c.updated.push(to_i64(p.updated_at));
            c.finished.push(finished_at(p).map(to_i64));
            c.last_seqs.push(to_i64(last_seq(append)));
            let (node, epoch) = owner(append);
            c.owner_nodes.push(node);
            c.owner_epochs.push(to_i64(epoch));
        }
        for append in &tx.appends {
            for event in append.events.iter() {
                c.event_ids.push(append.execution_id.as_str());
                c.seqs.push(to_i64(event.seq));
                c.ats.push(to_i64(event.at));
                c.types.push(event.kind.type_name());
                c.bodies.push(encode(event)?);
            }
        }
        Ok(c)
    }

    /// Binds the execution columns as `$1`…`$15`, `checked` (the ids whose
    /// rows are locked) as `$16` and the event columns as `$17`…`$21`.
    pub(super) fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
        checked: &'q [String],
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.ids)
            .bind(&self.workflows)
            .bind(&self.versions)
            .bind(&self.hashes)
            .bind(&self.statuses)
            .bind(&self.parents)
            .bind(&self.inputs)
            .bind(&self.outputs)
            .bind(&self.errors)
            .bind(&self.created)
            .bind(&self.updated)
            .bind(&self.finished)
            .bind(&self.last_seqs)
            .bind(&self.owner_nodes)
            .bind(&self.owner_epochs)
            .bind(checked)
            .bind(&self.event_ids)
            .bind(&self.seqs)
            .bind(&self.ats)
            .bind(&self.types)
            .bind(&self.bodies)
    }
}

/// Idempotency records as columns, each `(scope, key)` once: the last
/// record for it wins, as with one upsert per record.
pub(super) struct Keys<'a> {
    scopes: Vec<&'a str>,
    keys: Vec<&'a str>,
    fingerprints: Vec<&'a str>,
    statuses: Vec<i32>,
    bodies: Vec<&'a str>,
    expires: Vec<i64>,
}

impl<'a> Keys<'a> {
    /// The columns of `records`.
    pub(super) fn of(records: &'a [IdempotencyRecord]) -> Self {
        let mut last: BTreeMap<(&str, &str), &IdempotencyRecord> = BTreeMap::new();
        for r in records {
            last.insert((r.scope.as_str(), r.key.as_str()), r);
        }
        let n = last.len();
        let mut c = Keys {
            scopes: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            fingerprints: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            bodies: Vec::with_capacity(n),
            expires: Vec::with_capacity(n),
        };
        for r in last.values() {
            c.scopes.push(r.scope.as_str());
            c.keys.push(r.key.as_str());
            c.fingerprints.push(r.fingerprint.as_str());
            c.statuses.push(i32::from(r.status));
            c.bodies.push(r.body.as_str());
            c.expires.push(to_i64(r.expires_at));
        }
        c
    }

    /// How many records (after the last-wins merge).
    pub(super) fn len(&self) -> usize {
        self.scopes.len()
    }

    /// Binds the six columns as the query's next parameters.
    pub(super) fn bind<'q>(
        &'q self,
        query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query
            .bind(&self.scopes)
            .bind(&self.keys)
            .bind(&self.fingerprints)
            .bind(&self.statuses)
            .bind(&self.bodies)
            .bind(&self.expires)
    }
}
