//! Group commits: assembling the waiting batches into one transaction, and
//! turning the transaction's one outcome into a result per batch — the
//! `Conflict` split re-queues the batches the store did not name.

use super::{GroupCommit, Io, Node};
use crate::engine::{Batch, Input, StorageResult};
use crate::history::Millis;
use crate::store::StorageError;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

impl Node {
    /// Writes every waiting batch in one transaction, if a slot is free.
    pub(super) fn start_commit(&mut self) {
        if self.config.group_across_reads {
            self.write_creates_alone();
        }
        let writing = self.in_flight.len() - self.written.len();
        if self.pending.is_empty() || writing >= self.config.commits_in_flight {
            return;
        }
        let batches = self.pending.drain(..).collect();
        self.issue(batches);
    }

    /// Lockstep only ([`super::NodeConfig::group_across_reads`]): a batch
    /// that only creates executions is written at once, in a transaction
    /// of its own, whatever is in flight. The engine writes a start for an
    /// id it does not hold without reading it first, and the store refuses
    /// an id it holds, so such a write is a read in another form: a run
    /// whose engine forgot the id must meet it at the instant the run that
    /// remembered it answers from memory. Both runs follow this rule, so
    /// creates of new ids go the same way in each.
    fn write_creates_alone(&mut self) {
        let creates_only = |b: &Batch| {
            !b.executions.is_empty() && b.executions.iter().all(|a| a.expected_last_seq == 0)
        };
        if !self.pending.iter().any(creates_only) {
            return;
        }
        let (alone, rest): (VecDeque<_>, VecDeque<_>) =
            self.pending.drain(..).partition(|b| creates_only(b));
        self.pending = rest;
        for batch in alone {
            self.issue(vec![batch]);
        }
    }

    /// Sends `batches` as one group commit.
    fn issue(&mut self, batches: Vec<Batch>) {
        let id = self.next_commit;
        self.next_commit += 1;
        let commit = Arc::new(GroupCommit { id, batches });
        self.stats.group_commits += 1;
        self.stats.batches += commit.batches.len() as u64;
        self.stats.largest_group = self.stats.largest_group.max(commit.batches.len() as u64);
        self.in_flight.insert(id, commit.clone());
        self.out.push(Io::Commit(commit));
    }

    /// A group commit came back: each of its batches gets its result.
    pub(super) fn committed(
        &mut self,
        now: Millis,
        id: super::CommitId,
        result: Result<(), StorageError>,
    ) {
        let Some(commit) = self.in_flight.remove(&id) else {
            return;
        };
        self.written.remove(&id);
        let many = commit.batches.len() > 1;
        let results: Vec<(u64, StorageResult)> = match result {
            Ok(()) => commit
                .batches
                .iter()
                .map(|b| (b.id, StorageResult::Ok))
                .collect(),
            Err(StorageError::Unavailable(message)) => {
                self.stats.unavailable.count(many);
                every(&commit.batches, || StorageResult::Unavailable {
                    message: message.clone(),
                })
            }
            Err(StorageError::Ambiguous(message)) => {
                self.stats.ambiguous.count(many);
                every(&commit.batches, || StorageResult::Ambiguous {
                    message: message.clone(),
                })
            }
            Err(StorageError::Conflict { fenced, stale })
                if fenced.is_empty() && stale.is_empty() =>
            {
                // A conflict naming no execution refuses the writer itself
                // (`--cluster`: its leader epoch was superseded): every batch
                // fails, none is written again.
                self.stats.conflict.count(many);
                writer_fenced(&commit.batches)
            }
            Err(StorageError::Conflict { fenced, stale }) => {
                self.stats.conflict.count(many);
                self.split(&commit, fenced, stale)
            }
        };
        let stored = results
            .into_iter()
            .map(|(batch, result)| Input::Stored { batch, result });
        let effects = self.engine.handle_all(now, stored);
        self.route(effects);
        // A reclaim may have waited for this commit (shared mode).
        self.take_more();
    }

    /// The batches a `Conflict` names fail with it; the others go back, in
    /// order, to the front of the queue to be written again.
    fn split(
        &mut self,
        commit: &GroupCommit,
        fenced: Vec<String>,
        stale: Vec<String>,
    ) -> Vec<(u64, StorageResult)> {
        let fenced: BTreeSet<String> = fenced.into_iter().collect();
        let stale: BTreeSet<String> = stale.into_iter().collect();
        let mut results = Vec::new();
        let mut innocent = Vec::new();
        for b in &commit.batches {
            let ids = b.executions.iter().map(|a| &a.execution_id);
            // A batch is judged by the epochs of the inbox entries it
            // deletes too: one that only deletes entries names no append,
            // and kept as innocent it would be written again for ever.
            let consumed = b.consumed.iter().map(|c| &c.execution_id);
            let f: BTreeSet<String> = ids
                .clone()
                .chain(consumed)
                .filter(|id| fenced.contains(*id))
                .cloned()
                .collect();
            let f: Vec<String> = f.into_iter().collect();
            let s: Vec<String> = ids.filter(|id| stale.contains(*id)).cloned().collect();
            if f.is_empty() && s.is_empty() {
                innocent.push(b.clone());
                continue;
            }
            let message = if f.is_empty() {
                format!("stale seq for {}", s.join(", "))
            } else {
                format!("fenced: {} is owned by another node", f.join(", "))
            };
            results.push((
                b.id,
                StorageResult::Conflict {
                    message,
                    fenced: f,
                    stale: s,
                },
            ));
        }
        if self
            .engine
            .planted(crate::engine::Bug::SplitForgetsInnocent)
        {
            results.extend(innocent.iter().map(|b| (b.id, StorageResult::Ok)));
            return results;
        }
        if results.is_empty() {
            // The store named executions none of these batches writes:
            // written again, they would meet the same refusal. They fail.
            let message = "fenced: the store refused the write; nothing was written";
            return every(&commit.batches, || StorageResult::Conflict {
                message: message.to_owned(),
                fenced: fenced.iter().cloned().collect(),
                stale: stale.iter().cloned().collect(),
            });
        }
        self.stats.recommitted += innocent.len() as u64;
        for b in innocent.into_iter().rev() {
            self.pending.push_front(b);
        }
        results
    }
}

/// Every batch of a writer whose epoch was superseded fails `fenced:`,
/// naming all its executions.
fn writer_fenced(batches: &[Batch]) -> Vec<(u64, StorageResult)> {
    batches
        .iter()
        .map(|b| {
            let result = StorageResult::Conflict {
                message: "fenced: this node's leader epoch was superseded; nothing was written"
                    .to_owned(),
                fenced: b
                    .executions
                    .iter()
                    .map(|a| a.execution_id.clone())
                    .collect(),
                stale: Vec::new(),
            };
            (b.id, result)
        })
        .collect()
}

fn every(batches: &[Batch], result: impl Fn() -> StorageResult) -> Vec<(u64, StorageResult)> {
    batches.iter().map(|b| (b.id, result())).collect()
}
