//! A loopback listener served on a thread and runtime of its own, so a test server keeps
//! serving whatever the test's own runtime does. Stopped and joined on drop.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpListener;

#[derive(Debug)]
pub(crate) struct Background {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Binds `ip` at a free port and runs `serve(listener)` until dropped.
    pub(crate) fn start<F, Fut>(ip: IpAddr, name: &str, serve: F) -> std::io::Result<Self>
    where
        F: FnOnce(TcpListener) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let std_listener = std::net::TcpListener::bind((ip, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("test server runtime");
                rt.block_on(async move {
                    let listener = TcpListener::from_std(std_listener).expect("tokio listener");
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = serve(listener) => {}
                    }
                });
            })?;
        Ok(Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
