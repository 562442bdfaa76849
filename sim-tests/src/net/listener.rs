//! [`Listener`]: turmoil's simulated `TcpListener` as an
//! `axum::serve::Listener`, so the real router is served over the simulated
//! network by `axum::serve`.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A bound turmoil listener.
pub struct Listener(turmoil::net::TcpListener);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Listener")
            .field(&self.0.local_addr().ok())
            .finish()
    }
}

impl Listener {
    /// Binds `addr` (`0.0.0.0:7373`) on the current simulated host.
    pub async fn bind(addr: &str) -> io::Result<Listener> {
        Ok(Listener(turmoil::net::TcpListener::bind(addr).await?))
    }
}

impl axum::serve::Listener for Listener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                // An accept error concerns one connection: wait and go on.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}
