//! Scratch PostgreSQL databases for tests: one per test, created from
//! `ORBIT_TEST_POSTGRES` and dropped (forcibly) when the value goes away, so
//! tests run in parallel and leave nothing behind. When the variable is set
//! the server must answer: an unreachable server fails the test.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use std::str::FromStr;

/// The variable holding the base URL.
pub const ENV: &str = "ORBIT_TEST_POSTGRES";

/// A database of one test's own.
pub struct ScratchDatabase {
    base: String,
    name: String,
    url: String,
}

/// The base URL, if PostgreSQL tests are enabled.
pub fn base_url() -> Option<String> {
    match std::env::var(ENV) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            eprintln!("{ENV} is not set: PostgreSQL test skipped");
            None
        }
    }
}

/// `url` with its database replaced by `database`.
pub fn with_database(url: &str, database: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let authority_start = head.find("://").map_or(0, |i| i + 3);
    let base = match head[authority_start..].find('/') {
        Some(i) => &head[..authority_start + i],
        None => head,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

async fn admin_connection(base: &str) -> PgConnection {
    let options = PgConnectOptions::from_str(base)
        .unwrap_or_else(|e| panic!("{ENV}={base} is not a PostgreSQL URL: {e}"));
    options
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{ENV}={base} is set but PostgreSQL is unreachable: {e}"))
}

impl ScratchDatabase {
    /// Creates `orbit_<tag>_<random>`; `None` when PostgreSQL tests are off.
    pub async fn create(tag: &str) -> Option<ScratchDatabase> {
        let base = base_url()?;
        let name = format!("orbit_{tag}_{}", uuid::Uuid::new_v4().simple());
        let mut conn = admin_connection(&base).await;
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let _ = conn.close().await;
        let url = with_database(&base, &name);
        Some(ScratchDatabase { base, name, url })
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `sql` on the administrative (base) connection.
    pub async fn admin(&self, sql: &str) {
        let mut conn = admin_connection(&self.base).await;
        sqlx::query(sql)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = conn.close().await;
    }

    /// An outage of this database only: new connections are refused and the
    /// open ones are terminated. Other databases on the server are untouched.
    pub async fn block_connections(&self) {
        self.admin(&format!(
            "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS false",
            self.name
        ))
        .await;
        self.admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND pid <> pg_backend_pid()",
            self.name
        ))
        .await;
    }

    /// Ends the outage begun by [`ScratchDatabase::block_connections`].
    pub async fn allow_connections(&self) {
        self.admin(&format!(
            "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS true",
            self.name
        ))
        .await;
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        let base = self.base.clone();
        let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        // Drop may run inside a runtime: do the async work on a thread of
        // its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let mut conn = admin_connection(&base).await;
                let result = sqlx::query(&sql).execute(&mut conn).await;
                let _ = conn.close().await;
                result.map(|_| ())
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("cannot drop test database {}: {e}", self.name),
            Err(_) => eprintln!("cannot drop test database {}", self.name),
        }
    }
}

#[test]
fn with_database_replaces_only_the_path() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("postgres://u@h/test?sslmode=disable", "x"),
        "postgres://u@h/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
}
