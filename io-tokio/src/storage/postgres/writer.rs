//! The commit connections, kept from one commit to the next.
//!
//! Commits go through connections of their own, one per commit the node
//! loop keeps in flight (`PostgresOptions::writers`), so that while one commit waits
//! for PostgreSQL to sync its log the next one is already being written.
//! Taken from a pool and given back each time, a connection would be
//! pinged on every return (sqlx tests a connection it gets back), a round
//! trip to PostgreSQL between every two commits while the next one waits.
//! So each is taken once and kept in a slot; commits wait for a free slot
//! first come, first served. A holder that finds its connection broken
//! detaches it, and the next holder of that slot takes a fresh one from
//! the pool; or takes one at once ([`Held::replace`]) when the broken one
//! had sat in its slot since an earlier commit (the database restarted
//! meanwhile, say) and nothing was begun on it yet. Each slot also keeps
//! its connection's commit token (see `one_statement`).

use super::super::rows::unavailable;
use super::super::StorageError;
use super::one_statement::Token;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Postgres;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, MutexGuard, Semaphore, SemaphorePermit};

/// The pool the connections come from, and the connections once taken.
#[derive(Debug)]
pub(super) struct Writer {
    pool: PgPool,
    slots: Vec<Mutex<Slot>>,
    /// One permit per slot, handed out in order of asking.
    free: Semaphore,
    /// How long after its last commit a kept connection counts as warm.
    warm: Duration,
}

impl Writer {
    /// `slots` connections (at least one), from `pool` (of as many).
    pub(super) fn new(pool: PgPool, slots: usize, warm: Duration) -> Self {
        let slots = slots.max(1);
        Writer {
            pool,
            slots: (0..slots)
                .map(|_| {
                    Mutex::new(Slot {
                        conn: None,
                        token: Token::fresh(),
                        released: None,
                    })
                })
                .collect(),
            free: Semaphore::new(slots),
            warm,
        }
    }

    /// Waits for a connection (first come, first served), taking one from
    /// the pool if its slot keeps none.
    pub(super) async fn lock(&self) -> Result<Held<'_>, StorageError> {
        let permit = self
            .free
            .acquire()
            .await
            .map_err(|_| StorageError::Unavailable("the store is closed".into()))?;
        // A permit leaves at least one slot unlocked.
        let (slot, mut kept) = self
            .slots
            .iter()
            .enumerate()
            .find_map(|(i, s)| s.try_lock().ok().map(|kept| (i, kept)))
            .ok_or_else(|| StorageError::Unavailable("no commit connection is free".into()))?;
        let reused = kept.conn.is_some();
        if !reused {
            kept.conn = Some(self.pool.acquire().await.map_err(unavailable)?);
        }
        Ok(Held {
            kept,
            slot,
            reused,
            pool: &self.pool,
            warm: self.warm,
            _permit: permit,
        })
    }

    /// Gives the connections back and closes the pool.
    pub(super) async fn close(&self) {
        self.free.close();
        for slot in &self.slots {
            slot.lock().await.conn.take();
        }
        self.pool.close().await;
    }
}

/// What a slot keeps.
#[derive(Debug)]
struct Slot {
    conn: Option<PoolConnection<Postgres>>,
    token: Token,
    /// When the last holder let go.
    released: Option<Instant>,
}

/// A connection, held.
pub(super) struct Held<'a> {
    kept: MutexGuard<'a, Slot>,
    slot: usize,
    /// The connection was kept from an earlier holder, untested since.
    reused: bool,
    pool: &'a PgPool,
    warm: Duration,
    _permit: SemaphorePermit<'a>,
}

impl Held<'_> {
    /// The connection (gone only after [`Held::detach`]).
    pub(super) fn conn(&mut self) -> Result<&mut PgConnection, StorageError> {
        self.kept
            .conn
            .as_deref_mut()
            .ok_or_else(|| StorageError::Unavailable("the commit connection was dropped".into()))
    }

    /// Which of the connections this is (0 for the first).
    pub(super) fn slot(&self) -> usize {
        self.slot
    }

    /// Whether the connection was kept from an earlier holder (and may
    /// have broken while it sat idle) rather than just taken from the
    /// pool, which tests what it hands out.
    pub(super) fn reused(&self) -> bool {
        self.reused
    }

    /// Detaches the connection and takes a fresh one from the pool in its
    /// place.
    pub(super) async fn replace(&mut self) -> Result<(), StorageError> {
        self.detach();
        self.kept.conn = Some(self.pool.acquire().await.map_err(unavailable)?);
        self.reused = false;
        Ok(())
    }

    /// Drops the connection, in a state not to be reused: PostgreSQL
    /// rolls back whatever it had open when it goes away.
    pub(super) fn detach(&mut self) {
        if let Some(conn) = self.kept.conn.take() {
            conn.detach();
        }
    }

    /// Whether the connection was just taken from the pool (which tested
    /// it) or its last commit ended a moment ago, as under load: a
    /// connection that broke must have broken in that moment. One idle for
    /// longer may have been ended by the database meanwhile (a restart,
    /// an administrator). Never, when warm for zero.
    pub(super) fn warm(&self) -> bool {
        !self.warm.is_zero()
            && (!self.reused || self.kept.released.is_some_and(|t| t.elapsed() < self.warm))
    }

    /// The slot's commit token.
    pub(super) fn token(&self) -> &Token {
        &self.kept.token
    }

    /// The token moved one step (a statement that moved it was answered).
    pub(super) fn advance_token(&mut self) {
        self.kept.token.value += 1;
    }

    /// A new token in place of one that was fenced or is being settled.
    pub(super) fn renew_token(&mut self) {
        self.kept.token = Token::fresh();
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.kept.released = Some(Instant::now());
    }
}
