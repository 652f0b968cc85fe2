//! A TCP forwarder at a fixed address that relays each connection to a target that can be
//! changed at run time: the stand-in for a Kubernetes Service in front of cache nodes; and a
//! listener that accepts and never answers.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

use crate::server::Background;

/// A running forwarder. Stops when dropped (open relays are dropped with it).
#[derive(Debug)]
pub struct Forwarder {
    server: Background,
    target: Arc<Mutex<Option<SocketAddr>>>,
}

impl Forwarder {
    /// Listens on `ip` at a free port; with no target, connections are closed at once.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub fn start(ip: IpAddr, target: Option<SocketAddr>) -> std::io::Result<Self> {
        let target = Arc::new(Mutex::new(target));
        let t = target.clone();
        let server = Background::start(ip, "forwarder", move |listener| accept_loop(listener, t))?;
        Ok(Self { server, target })
    }

    /// The fixed address clients use.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Points new connections at `target` (`None`: refuse them).
    pub fn set_target(&self, target: Option<SocketAddr>) {
        *self.target.lock().unwrap() = target;
    }
}

async fn accept_loop(listener: TcpListener, target: Arc<Mutex<Option<SocketAddr>>>) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let Some(to) = *target.lock().unwrap() else {
            continue;
        }; // dropping closes it
        tokio::spawn(async move {
            if let Ok(mut outbound) = TcpStream::connect(to).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// A listener that accepts connections and then never reads or writes: a cache node whose
/// process is gone for good while the kernel still completes handshakes (or a black-holed
/// address behind a load balancer). Connections stay open until it is dropped.
#[derive(Debug)]
pub struct Silent {
    server: Background,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Silent {
    /// Listens on `ip` at a free port.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub fn start(ip: IpAddr) -> std::io::Result<Self> {
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = accepted.clone();
        let server = Background::start(ip, "silent", move |listener| async move {
            // Bounded: past this many connections, new ones are closed at once.
            const MAX_HELD: usize = 1024;
            let mut held = Vec::new();
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                a.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if held.len() < MAX_HELD {
                    held.push(socket);
                }
            }
        })?;
        Ok(Self { server, accepted })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::Relaxed)
    }
}
