//! A group commit in one statement, for the common case: appends (with
//! idempotency records or not) on a single server or a leader.
//!
//! A commit otherwise takes three round trips to PostgreSQL: `BEGIN` (with
//! the transaction's id, for settling a lost `COMMIT`), the write, and
//! `COMMIT`, the rule being judged here between the last two. Under load a
//! round trip waits for both processes to be scheduled, and a commit spent
//! more time waiting on them than writing. Here the statement judges the
//! rule itself (each execution's stored `last_seq` against the append's
//! `after_seq`, and a fenced append's term against the row's owner) and
//! writes only if every append passes; sent outside a
//! transaction block, it commits as it ends: one round trip.
//!
//! Settling a lost answer needs a different witness, since the
//! transaction's id is never seen: each commit connection has a token row
//! (`commit_tokens`) that the statement moves one step in the same
//! transaction, from the value this side knows. When the answer is lost,
//! [`settle`] fences the row (it makes the token negative, keeping the old
//! value readable) and reads what it held: one step further means the
//! statement committed, unmoved means it did not and now never will, since
//! a copy of it still on its way finds the token fenced and writes
//! nothing. Fencing waits for the row's lock, so a statement still running
//! finishes first. A fenced token is never used again: the connection's
//! slot takes a new one.
//!
//! Under a leader lease (`--cluster`) the statement also reads the lease
//! row `FOR SHARE` and writes only if it still names this server's term,
//! as the transaction's fence check does.
//!
//! What does not fit — the task queue, inbox entries and node contact
//! rows (shared mode), definitions, an execution appended twice — takes
//! the transaction with `BEGIN` and `COMMIT`.

use super::super::rows::{to_i64, to_u64, unavailable};
use super::super::{StorageError, Transaction};
use super::columns::{add_to_counts, upsert_executions, Columns, Keys};
use super::in_doubt::Outcome;
use super::{stored_rows, Rows};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Row;
use std::collections::BTreeSet;
use std::sync::LazyLock;

/// A commit connection's token: the row it moves and the value it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    /// `commit_tokens.writer`: fresh for each new token.
    pub key: String,
    /// The value the row holds (0 before the row exists).
    pub value: i64,
}

impl Token {
    /// A token no statement has moved yet.
    pub(super) fn fresh() -> Token {
        Token {
            key: uuid::Uuid::new_v4().to_string(),
            value: 0,
        }
    }
}

/// What became of the statement.
pub(super) enum Answer {
    /// Every append passed the rule and was written; the token moved.
    Written,
    /// Some append failed the rule, or the lease names another term:
    /// nothing was written but the token's step. The rows as they were, to
    /// name the executions, and the lease row's holder and epoch when the
    /// store is fenced.
    Kept(Rows, Option<(String, u64)>),
    /// Nothing was written, the token did not move: the statement failed
    /// (`Conflict` when an event was already stored, `Unavailable`
    /// otherwise), or it found its token fenced.
    Refused(StorageError),
    /// No answer, or one that leaves the outcome open: [`settle`] decides.
    Lost(String),
}

/// Whether `tx` can be written in one statement.
pub(super) fn fits(tx: &Transaction) -> bool {
    let mut ids = BTreeSet::new();
    !tx.appends.is_empty()
        && tx.writer.is_none()
        && tx.definitions.is_empty()
        && tx.queue.is_empty()
        && tx.inbox_consumed.is_empty()
        && tx.appends.iter().all(|a| {
            // The statement tells a fenced append by its owner node.
            a.fence.as_ref().is_none_or(|f| !f.node_id.is_empty())
                && ids.insert(a.execution_id.as_str())
                && a.events
                    .iter()
                    .enumerate()
                    .all(|(i, e)| e.seq == a.after_seq + 1 + i as u64)
        })
}

/// The statement: the token's step, the lease row (only when `$32` names
/// a term), the rows locked and read as they were (all parts of a
/// statement see one snapshot), the verdict, and the writes of
/// `write_appends` and `write_idempotency` (outside shared mode a record
/// replaces any other), each only if the token moved and the verdict
/// holds. An event already stored fails the statement (a primary key
/// violation), so a commit is never half written. Prepared once per
/// connection, like `write_appends`.
static STATEMENT: LazyLock<String> = LazyLock::new(|| {
    const GO: &str = "(SELECT go FROM verdict)";
    format!(
        "WITH tokened AS (INSERT INTO commit_tokens (writer, token) \
         VALUES ($23, $24 + 1) ON CONFLICT (writer) DO UPDATE SET token = excluded.token, \
         touched_at = now() WHERE commit_tokens.token = $24 RETURNING 1), \
         lease AS (SELECT holder, epoch FROM cluster_lease \
         WHERE id = 1 AND $32::text IS NOT NULL FOR SHARE), \
         before AS (SELECT id, last_seq, owner_node, owner_epoch, status FROM executions \
         WHERE id = ANY($16) ORDER BY id FOR UPDATE), \
         verdict AS (SELECT EXISTS (SELECT 1 FROM tokened) \
         AND ($32::text IS NULL OR EXISTS (SELECT 1 FROM lease \
         WHERE holder = $32::text AND epoch = $33::int8)) \
         AND NOT EXISTS (SELECT 1 FROM UNNEST($1::text[], $25::int8[], $14::text[], $15::int8[]) \
         AS a(id, after_seq, node, epoch) LEFT JOIN before b ON b.id = a.id \
         WHERE COALESCE(b.last_seq, 0) <> a.after_seq OR (a.node <> '' \
         AND (COALESCE(b.owner_epoch, 0) > a.epoch OR (COALESCE(b.owner_node, '') NOT IN ('', a.node) \
         AND COALESCE(b.owner_epoch, 0) >= a.epoch)))) AS go), \
         written AS ({}), \
         appended AS (INSERT INTO events (execution_id, seq, at, type, body) \
         SELECT * FROM UNNEST($17::text[], $18::int8[], $19::int8[], $20::text[], $21::text[]) \
         WHERE {GO}), \
         {}, \
         keyed AS (INSERT INTO idempotency (scope, key, fingerprint, status, body, expires_at) \
         SELECT * FROM UNNEST($26::text[], $27::text[], $28::text[], $29::int4[], $30::text[], \
         $31::int8[]) WHERE {GO} \
         ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, \
         status = excluded.status, body = excluded.body, expires_at = excluded.expires_at) \
         SELECT id, last_seq, owner_node, owner_epoch, NULL::text, NULL::int8 FROM before \
         UNION ALL SELECT NULL, (SELECT count(*) FROM tokened), NULL, \
         (SELECT CASE WHEN go THEN 1::int8 ELSE 0 END FROM verdict), \
         (SELECT holder FROM lease), (SELECT epoch FROM lease)",
        upsert_executions(&format!("WHERE {GO}")),
        add_to_counts(&format!("AND {GO}")),
    )
});

/// Writes `columns` and `keys` (all of a transaction that [`fits`]) with
/// `token`, adding to the per-status totals in `shard`, under the term
/// `(node id, epoch)` of a leader lease if there is one.
pub(super) async fn write(
    conn: &mut PgConnection,
    columns: &Columns<'_>,
    keys: &Keys<'_>,
    checked: &[String],
    shard: &str,
    token: &Token,
    term: Option<(&str, u64)>,
) -> Answer {
    let query = sqlx::query(STATEMENT.as_str()).persistent(true);
    let query = columns
        .bind(query, checked)
        .bind(shard)
        .bind(&token.key)
        .bind(token.value)
        .bind(&columns.after_seqs);
    let query = keys
        .bind(query)
        .bind(term.map(|(node, _)| node))
        .bind(term.map(|(_, epoch)| to_i64(epoch)));
    let rows = match query.fetch_all(conn).await {
        Ok(rows) => rows,
        Err(e) => return failed(e, columns),
    };
    // The row without an id says whether the token moved and the verdict;
    // the others are the rows as they were.
    let mut before = Vec::with_capacity(rows.len());
    let mut verdict = None;
    let mut lease = None;
    for row in rows {
        match row.try_get::<Option<&str>, _>(0) {
            Ok(Some(_)) => before.push(row),
            Ok(None) => {
                verdict = Some((row.try_get::<i64, _>(1), row.try_get::<i64, _>(3)));
                lease = match (
                    row.try_get::<Option<String>, _>(4),
                    row.try_get::<Option<i64>, _>(5),
                ) {
                    (Ok(Some(holder)), Ok(Some(epoch))) => Some((holder, to_u64(epoch))),
                    _ => None,
                };
            }
            // The statement committed whatever its answer says: an answer
            // that cannot be read leaves the outcome to settle.
            Err(e) => return Answer::Lost(e.to_string()),
        }
    }
    match verdict {
        Some((Ok(1), Ok(1))) => Answer::Written,
        Some((Ok(1), Ok(0))) => match stored_rows(&before) {
            Ok(rows) => Answer::Kept(rows, lease),
            Err(e) => Answer::Lost(e.to_string()),
        },
        Some((Ok(0), _)) => Answer::Refused(StorageError::Unavailable(
            "the commit connection's token was fenced; nothing was written".into(),
        )),
        _ => Answer::Lost("commit: the statement's verdict is missing".into()),
    }
}

/// Sorts an error of the statement: an error PostgreSQL answered for the
/// statement itself rolled it back; a broken connection, an administrator
/// ending the session or a failing server leave it open.
fn failed(e: sqlx::Error, columns: &Columns<'_>) -> Answer {
    let sqlx::Error::Database(db) = &e else {
        return Answer::Lost(e.to_string());
    };
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    if code == "23505" {
        // The rule passed, yet an event was already there: a new execution
        // created meanwhile by another writer (there was no row to lock).
        return Answer::Refused(StorageError::Conflict {
            fenced: Vec::new(),
            stale: columns.ids.iter().map(|id| (*id).to_owned()).collect(),
        });
    }
    let class = code.get(..2).unwrap_or("");
    if code.is_empty() || matches!(class, "08" | "53" | "57" | "58" | "XX") {
        Answer::Lost(e.to_string())
    } else {
        Answer::Refused(StorageError::Unavailable(format!(
            "commit refused: {}",
            db.message()
        )))
    }
}

/// What became of the statement that moved `token` and got no answer (see
/// the module docs). Fencing is idempotent: settling again reads the same
/// outcome. An error means the outcome is still unknown.
pub(crate) async fn settle(pool: &PgPool, token: &Token) -> Result<Outcome, StorageError> {
    let mut tx = pool.begin().await.map_err(unavailable)?;
    sqlx::query("SET LOCAL lock_timeout = '5s'")
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
    // A fenced token holds -(old value) - 1; a row never written is
    // created fenced, as if it had held the value this side knows.
    let fenced: i64 = sqlx::query_scalar(
        "INSERT INTO commit_tokens (writer, token) VALUES ($1, -$2 - 1) \
         ON CONFLICT (writer) DO UPDATE SET touched_at = now(), \
         token = CASE WHEN commit_tokens.token >= 0 THEN -commit_tokens.token - 1 \
         ELSE commit_tokens.token END RETURNING token",
    )
    .bind(&token.key)
    .bind(token.value)
    .fetch_one(&mut *tx)
    .await
    .map_err(unavailable)?;
    tx.commit().await.map_err(unavailable)?;
    let held = -fenced - 1;
    if held == token.value + 1 {
        Ok(Outcome::Committed)
    } else if held == token.value {
        Ok(Outcome::Aborted)
    } else {
        Err(StorageError::Ambiguous(format!(
            "commit token {} holds {held}, not {} or {}",
            token.key,
            token.value,
            token.value + 1
        )))
    }
}

/// Deletes the tokens of servers gone for a week.
pub(super) async fn forget_old_tokens(pool: &PgPool) -> Result<(), StorageError> {
    sqlx::query("DELETE FROM commit_tokens WHERE touched_at < now() - interval '7 days'")
        .execute(pool)
        .await
        .map_err(unavailable)?;
    Ok(())
}
