//! A real HTTP/1.1 origin on 127.0.0.x with scripted behaviour per path: bodies with honest,
//! lying or absent lengths, redirects, hangs and slow trickles. Every response closes the
//! connection, which keeps the server small and the client's behaviour easy to reason about.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::server::Background;

/// What the origin does for one path (request target, query included).
#[derive(Clone, Debug)]
pub enum Route {
    /// A complete response with an honest `Content-Length`.
    Body {
        /// Status code.
        status: u16,
        /// `Content-Type` header value.
        content_type: String,
        /// The body.
        body: Arc<Vec<u8>>,
    },
    /// 200 with no `Content-Length`: the body ends when the connection closes.
    NoLength(Arc<Vec<u8>>),
    /// 200 with `Transfer-Encoding: chunked` (no length): `body` in chunks of 64 KiB.
    Chunked(Arc<Vec<u8>>),
    /// 200 claiming `claimed` bytes in `Content-Length` while sending `body`.
    LyingLength {
        /// The announced length.
        claimed: u64,
        /// What is actually sent.
        body: Arc<Vec<u8>>,
    },
    /// A redirect to `location` with the given status.
    Redirect {
        /// 301, 302, 303, 307 or 308.
        status: u16,
        /// The `Location` header (absolute or relative).
        location: String,
    },
    /// Read the request, then never answer (until the server stops).
    Hang,
    /// Send headers (no length), then `chunk` bytes every `every`, forever.
    Trickle {
        /// Bytes per write.
        chunk: usize,
        /// Pause between writes.
        every: Duration,
    },
    /// Wait, then behave like the inner route.
    Delay(Duration, Box<Route>),
}

impl Route {
    /// 200 with `body` and an honest length.
    pub fn ok(body: Vec<u8>) -> Self {
        Self::Body {
            status: 200,
            content_type: "application/octet-stream".into(),
            body: Arc::new(body),
        }
    }

    /// A status with a short text body.
    pub fn status(status: u16) -> Self {
        Self::Body {
            status,
            content_type: "text/plain".into(),
            body: Arc::new(b"status".to_vec()),
        }
    }

    /// A 302 redirect.
    pub fn redirect(location: impl Into<String>) -> Self {
        Self::Redirect {
            status: 302,
            location: location.into(),
        }
    }
}

#[derive(Default)]
struct State {
    routes: HashMap<String, Route>,
    hits: HashMap<String, usize>,
}

/// A running origin. Stops (and drops every open connection) when dropped.
#[derive(Debug)]
pub struct TestOrigin {
    server: Background,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("routes", &self.routes.len())
            .finish()
    }
}

impl TestOrigin {
    /// Starts an origin on 127.0.0.1 at a free port.
    pub fn start() -> Self {
        Self::start_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// Starts an origin on `ip` (any 127.0.0.x works on Linux) at a free port.
    pub fn start_on(ip: IpAddr) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let thread_state = state.clone();
        let server = Background::start(ip, "test-origin", move |listener| {
            accept_loop(listener, thread_state)
        })
        .expect("start the test origin on loopback");
        Self { server, state }
    }

    /// The socket address the origin listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `http://ip:port` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.server.addr(), path)
    }

    /// Sets (or replaces) the route for `path`.
    pub fn set(&self, path: &str, route: Route) {
        self.state
            .lock()
            .unwrap()
            .routes
            .insert(path.to_owned(), route);
    }

    /// Requests received for `path` so far.
    pub fn hits(&self, path: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .hits
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Requests received for all paths so far.
    pub fn total_hits(&self) -> usize {
        self.state.lock().unwrap().hits.values().sum()
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _ = serve(stream, state).await;
        });
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let Some(target) = read_request_target(&mut stream).await? else {
        return Ok(());
    };
    let route = {
        let mut s = state.lock().unwrap();
        *s.hits.entry(target.clone()).or_default() += 1;
        s.routes.get(&target).cloned()
    };
    let route = route.unwrap_or_else(|| Route::status(404));
    respond(&mut stream, route).await
}

/// Reads the request head (bounded to 64 KiB) and returns the request target.
async fn read_request_target(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() > 64 * 1024 {
            return Ok(None);
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let line = head.lines().next().unwrap_or_default();
    Ok(line.split(' ').nth(1).map(str::to_owned))
}

fn respond(
    stream: &mut TcpStream,
    route: Route,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send + '_>> {
    Box::pin(async move {
        match route {
            Route::Body {
                status,
                content_type,
                body,
            } => {
                let head = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&body).await?;
            }
            Route::NoLength(body) => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    .await?;
                stream.write_all(&body).await?;
            }
            Route::Chunked(body) => {
                stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                    )
                    .await?;
                for chunk in body.chunks(64 << 10) {
                    stream
                        .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .await?;
                    stream.write_all(chunk).await?;
                    stream.write_all(b"\r\n").await?;
                }
                stream.write_all(b"0\r\n\r\n").await?;
            }
            Route::LyingLength { claimed, body } => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {claimed}\r\nConnection: close\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&body).await?;
            }
            Route::Redirect { status, location } => {
                let head = format!(
                    "HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).await?;
            }
            Route::Hang => {
                // Hold the connection open until the server stops.
                std::future::pending::<()>().await;
            }
            Route::Trickle { chunk, every } => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    .await?;
                let data = vec![0x42u8; chunk];
                // Bounded: at most an hour of trickling, far past any client deadline.
                for _ in 0..(3_600_000 / every.as_millis().max(1)) {
                    stream.write_all(&data).await?;
                    tokio::time::sleep(every).await;
                }
            }
            Route::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                return respond(stream, *inner).await;
            }
        }
        stream.shutdown().await
    })
}
