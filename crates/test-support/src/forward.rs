//! A TCP forwarder at a fixed address that relays each connection to a target that can be
//! changed at run time: the stand-in for a Kubernetes Service in front of cache nodes, and,
//! with a reply delay, a node that is slow but answers; and a listener that accepts and never
//! answers.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::server::Background;

/// A running forwarder. Stops when dropped (open relays are dropped with it).
#[derive(Debug)]
pub struct Forwarder {
    server: Background,
    target: Arc<Mutex<Option<SocketAddr>>>,
    /// Milliseconds each byte from the target is held before it is passed on.
    delay_ms: Arc<AtomicU64>,
}

impl Forwarder {
    /// Listens on `ip` at a free port; with no target, connections are closed at once.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub fn start(ip: IpAddr, target: Option<SocketAddr>) -> std::io::Result<Self> {
        let target = Arc::new(Mutex::new(target));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (t, d) = (target.clone(), delay_ms.clone());
        let server =
            Background::start(ip, "forwarder", move |listener| accept_loop(listener, t, d))?;
        Ok(Self {
            server,
            target,
            delay_ms,
        })
    }

    /// Holds every reply (the bytes from the target) `delay` before passing it on, on every
    /// relay, open or new: a node that answers each command late (but in order, and with
    /// no limit on how many are in flight). Requests are passed on at once.
    pub fn set_reply_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::Relaxed);
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

async fn accept_loop(
    listener: TcpListener,
    target: Arc<Mutex<Option<SocketAddr>>>,
    delay_ms: Arc<AtomicU64>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        let Some(to) = *target.lock().unwrap() else {
            continue;
        }; // dropping closes it
        let delay_ms = delay_ms.clone();
        tokio::spawn(async move {
            if let Ok(outbound) = TcpStream::connect(to).await {
                relay(inbound, outbound, delay_ms).await;
            }
        });
    }
}

/// Relays both ways until either side closes, holding the target's bytes for the delay.
async fn relay(inbound: TcpStream, outbound: TcpStream, delay_ms: Arc<AtomicU64>) {
    /// Reads of the target held at once (each up to 64 KiB): bounded memory per relay.
    const HELD: usize = 1024;
    let (mut client_in, mut client_out) = inbound.into_split();
    let (mut target_in, mut target_out) = outbound.into_split();
    let up = async move {
        let _ = tokio::io::copy(&mut client_in, &mut target_out).await;
        let _ = target_out.shutdown().await;
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(HELD);
    let read = async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = target_in.read(&mut buf).await {
            let due = tokio::time::Instant::now()
                + Duration::from_millis(delay_ms.load(Ordering::Relaxed));
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if client_out.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(up, read, write);
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
