//! Deliberate mistakes in the cluster rules ("teeth") that the simulator
//! must catch. Like the engine's, they exist only with the `planted-bugs`
//! feature, which the `orbit` binary never turns on: without it
//! [`Planted::has`] is a constant `false` and nothing can plant one.

/// A deliberate mistake in leader mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClusterBug {
    /// Leader writes do not check the lease's epoch in their transaction.
    SkipEpochCheck,
    /// A standby judges the lease's expiry by its own clock.
    LeaseByOwnClock,
    /// A node that took the lease answers as leader before its recovery
    /// finished.
    ServeBeforeRecovery,
}

impl ClusterBug {
    /// Every planted cluster bug.
    pub const ALL: [ClusterBug; 3] = [
        ClusterBug::SkipEpochCheck,
        ClusterBug::LeaseByOwnClock,
        ClusterBug::ServeBeforeRecovery,
    ];

    /// Its name on the command line (`orbit-sim --plant NAME`).
    pub fn name(self) -> &'static str {
        match self {
            ClusterBug::SkipEpochCheck => "skip-epoch-check",
            ClusterBug::LeaseByOwnClock => "lease-by-own-clock",
            ClusterBug::ServeBeforeRecovery => "serve-before-recovery",
        }
    }

    /// The bug named `name`.
    pub fn parse(name: &str) -> Option<ClusterBug> {
        ClusterBug::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// The cluster bugs a node runs with (empty unless planted in a test).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Planted {
    #[cfg(feature = "planted-bugs")]
    bugs: std::collections::BTreeSet<ClusterBug>,
}

impl Planted {
    /// True when `bug` is planted.
    #[inline]
    pub fn has(&self, bug: ClusterBug) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            self.bugs.contains(&bug)
        }
        #[cfg(not(feature = "planted-bugs"))]
        {
            let _ = bug;
            false
        }
    }

    /// Plants `bug`.
    #[cfg(feature = "planted-bugs")]
    pub fn insert(&mut self, bug: ClusterBug) {
        self.bugs.insert(bug);
    }
}
