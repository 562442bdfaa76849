//! Counters of what a node loop did: group commits and their sizes, each
//! kind of failed commit (alone or hitting many batches at once), batches
//! written again after a `Conflict`, loads and their retries.

/// How often one kind of commit failure struck.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailureCount {
    /// Every failed group commit of this kind.
    pub commits: u64,
    /// Those that held more than one batch.
    pub of_many_batches: u64,
}

impl FailureCount {
    pub(super) fn count(&mut self, many: bool) {
        self.commits += 1;
        if many {
            self.of_many_batches += 1;
        }
    }
}

/// Counters of a [`super::Node`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Group commits started.
    pub group_commits: u64,
    /// Batches in them (a re-committed batch counts again).
    pub batches: u64,
    /// The most batches one group commit held.
    pub largest_group: u64,
    /// Commits answered `Unavailable`.
    pub unavailable: FailureCount,
    /// Commits answered `Ambiguous`.
    pub ambiguous: FailureCount,
    /// Commits answered `Conflict`.
    pub conflict: FailureCount,
    /// Batches a `Conflict` did not name, written again.
    pub recommitted: u64,
    /// Loads asked for.
    pub loads: u64,
    /// Loads tried again after a failure.
    pub load_retries: u64,
    /// Ticks fed to the engine.
    pub ticks: u64,
    /// Shared mode: times this member dropped what it owned (it could not
    /// reach the database for `--node-timeout`).
    pub drops: u64,
}

impl NodeStats {
    /// Adds `other`'s counters to these (a world that restarts its node
    /// sums the incarnations).
    pub fn add(&mut self, other: &NodeStats) {
        self.group_commits += other.group_commits;
        self.batches += other.batches;
        self.largest_group = self.largest_group.max(other.largest_group);
        for (a, b) in [
            (&mut self.unavailable, &other.unavailable),
            (&mut self.ambiguous, &other.ambiguous),
            (&mut self.conflict, &other.conflict),
        ] {
            a.commits += b.commits;
            a.of_many_batches += b.of_many_batches;
        }
        self.recommitted += other.recommitted;
        self.loads += other.loads;
        self.load_retries += other.load_retries;
        self.ticks += other.ticks;
        self.drops += other.drops;
    }
}

impl std::fmt::Display for NodeStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let failure =
            |c: &FailureCount| format!("{} ({} of many batches)", c.commits, c.of_many_batches);
        write!(
            f,
            "group_commits={} batches={} largest_group={} ambiguous={} conflict={} unavailable={} recommitted={} loads={} load_retries={}",
            self.group_commits,
            self.batches,
            self.largest_group,
            failure(&self.ambiguous),
            failure(&self.conflict),
            failure(&self.unavailable),
            self.recommitted,
            self.loads,
            self.load_retries
        )
    }
}
