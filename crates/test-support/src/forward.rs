//! A TCP forwarder at a fixed address that relays each connection to a target that can be
//! changed at run time: the stand-in for a Kubernetes Service in front of cache nodes.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

/// A running forwarder. Stops when dropped (open relays are dropped with it).
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on `ip` at a free port; with no target, connections are closed at once.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub fn start(ip: IpAddr, target: Option<SocketAddr>) -> std::io::Result<Self> {
        let std_listener = std::net::TcpListener::bind((ip, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let target = Arc::new(Mutex::new(target));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let t = target.clone();
        let thread = std::thread::Builder::new()
            .name("forwarder".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("listener");
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = accept_loop(listener, t) => {}
                    }
                });
            })?;
        Ok(Self {
            addr,
            target,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The fixed address clients use.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Points new connections at `target` (`None`: refuse them).
    pub fn set_target(&self, target: Option<SocketAddr>) {
        *self.target.lock().unwrap() = target;
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
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
