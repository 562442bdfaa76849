//! The tokio runtimes: the one a server runs on (`orbit server`, and the
//! server `orbit bench` starts in its own process), sized by its store, and
//! the one `orbit bench`'s load runs on.

use orbit_io_tokio::storage::is_postgres;

/// Threads of the runtime that serves requests and runs the engine on the
/// store `url`, unless `--threads` (`flag`) says otherwise, on a machine of
/// `cores`. SQLite's commits and WAL syncs run on threads outside the
/// runtime, so on SQLite one core is left to them: on two cores, one
/// runtime thread ran the full-load benchmark 6–12 % faster than two,
/// with fewer wake-ups and frees across threads (see the book's benchmarks
/// chapter). PostgreSQL does its writing in its own processes.
pub fn threads(url: &str, flag: Option<u64>, cores: usize) -> usize {
    match flag {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None if is_postgres(url) => cores.max(1),
        None => cores.saturating_sub(1).max(1),
    }
}

/// The runtime of a server on the store `url` (see [`threads`]).
pub fn build(url: &str, flag: Option<u64>) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads(url, flag, cores()))
        .thread_name("orbit-runtime")
        .enable_all()
        .build()
}

/// Threads of the runtime that drives `orbit bench`'s load (its starters
/// and worker sessions) on a machine of `cores`: half of them, at least
/// one. The load shares the machine with the server it measures; on two
/// cores a second load thread only moved requests and their memory
/// between threads (the in-process run went 8–9 % faster with one, see
/// the book's benchmarks chapter).
pub fn load_threads(cores: usize) -> usize {
    (cores / 2).max(1)
}

/// The runtime of `orbit bench`'s load (see [`load_threads`]).
pub fn build_load() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(load_threads(cores()))
        .thread_name("orbit-bench-load")
        .enable_all()
        .build()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

#[cfg(test)]
mod tests {
    use super::{load_threads, threads};

    #[test]
    fn the_load_takes_half_of_the_machine() {
        assert_eq!(load_threads(1), 1);
        assert_eq!(load_threads(2), 1);
        assert_eq!(load_threads(3), 1);
        assert_eq!(load_threads(8), 4);
    }

    #[test]
    fn a_core_is_left_to_sqlite_commits_unless_told() {
        assert_eq!(threads("sqlite:///var/lib/orbit.db", None, 2), 1);
        assert_eq!(threads("sqlite:///var/lib/orbit.db", None, 1), 1);
        assert_eq!(threads("sqlite:///var/lib/orbit.db", None, 8), 7);
        assert_eq!(threads("postgres://orbit@db/orbit", None, 2), 2);
        assert_eq!(threads("postgresql://orbit@db/orbit", None, 0), 1);
        assert_eq!(threads("sqlite:///var/lib/orbit.db", Some(4), 2), 4);
        assert_eq!(threads("postgres://orbit@db/orbit", Some(1), 8), 1);
    }
}
