//! Where generated execution ids, session ids and task tokens come from.
//!
//! The core never draws randomness itself: the driver passes an [`IdSource`]
//! to [`super::Engine::new`]. Production uses UUIDv4 from the OS; the
//! simulation and tests use a seeded or counting source so that every run is
//! reproducible.

/// A source of fresh, unique identifiers (UUIDv4 text in production).
pub trait IdSource: Send {
    /// A new identifier, never returned before.
    fn next_id(&mut self) -> String;
}

/// A deterministic [`IdSource`] for tests and simulations: UUID-shaped ids
/// built from a counter and a fixed prefix word.
#[derive(Debug, Clone, Default)]
pub struct CountingIds {
    next: u64,
    prefix: u32,
}

impl CountingIds {
    /// A counting source whose ids carry `prefix` in their first group, so
    /// that two sources (two simulated nodes) never collide.
    pub fn new(prefix: u32) -> CountingIds {
        CountingIds { next: 0, prefix }
    }
}

impl IdSource for CountingIds {
    fn next_id(&mut self) -> String {
        self.next += 1;
        format!(
            "{:08x}-0000-4000-8000-{:012x}",
            self.prefix,
            self.next & 0xffff_ffff_ffff
        )
    }
}

impl<F: FnMut() -> String + Send> IdSource for F {
    fn next_id(&mut self) -> String {
        self()
    }
}
