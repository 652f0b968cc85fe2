//! A real name server for tests: plain UDP DNS on a loopback address, answering just enough of
//! the protocol for a stub resolver (glibc's or hickory's) to use it.
//!
//! Names it was given answer with A records; names starting with `hole` (and names set silent)
//! are never answered, like a black-holed name server; every other name is NXDOMAIN. AAAA and
//! other types for a known name answer NOERROR with no records.
//!
//! A resolver reads its servers from `/etc/resolv.conf`, which names addresses, never ports.
//! [`TestDns::isolated`] runs a test again in a child process with a private mount namespace
//! in which `/etc/resolv.conf` names this server on port 53 (root only); the machine's own file
//! is never touched.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// TTL put on every answer; long, so a resolver that caches by TTL shows it.
const ANSWER_TTL: u32 = 300;
/// Environment variable naming the test a child process runs, and the server's address.
const CHILD_ENV: &str = "MMCACHE_TEST_DNS_CHILD";
const ADDR_ENV: &str = "MMCACHE_TEST_DNS_ADDR";
/// How long a child test may run before it is killed.
const CHILD_LIMIT: Duration = Duration::from_secs(300);

/// What the server does for one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A records with these addresses (AAAA: no records).
    A(Vec<Ipv4Addr>),
    /// Never answer.
    Silent,
    /// NXDOMAIN.
    NxDomain,
}

#[derive(Default)]
struct State {
    names: HashMap<String, Answer>,
    queries: HashMap<String, usize>,
}

/// A UDP name server on its own thread; stops when dropped.
#[derive(Debug)]
pub struct TestDns {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("names", &self.names).finish()
    }
}

impl TestDns {
    /// A server on `addr` (port 0 for any free port).
    ///
    /// # Panics
    ///
    /// When the address cannot be bound.
    pub fn start_on(addr: SocketAddr) -> Self {
        let socket = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind DNS on {addr}: {e}"));
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let addr = socket.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("test-dns".into())
                .spawn(move || serve(&socket, &state, &stop))
                .expect("spawn DNS thread")
        };
        Self {
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// A server on 127.0.0.1, any free port.
    pub fn start() -> Self {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `name` answer `answer` from now on (names are case-insensitive).
    pub fn set(&self, name: &str, answer: Answer) {
        self.state().names.insert(key(name), answer);
    }

    /// Makes `name` resolve to `ip`.
    pub fn set_a(&self, name: &str, ip: Ipv4Addr) {
        self.set(name, Answer::A(vec![ip]));
    }

    /// Queries received for `name`, any type.
    pub fn queries(&self, name: &str) -> usize {
        self.state().queries.get(&key(name)).copied().unwrap_or(0)
    }

    /// Waits until at least `at_least` of the names `{prefix}{i}.test` (`i < count`) have been
    /// asked for, then `settle` more, so that their lookups are parked in the resolver before
    /// the caller goes on. Panics when that takes longer than `within`.
    pub async fn wait_for_lookups(
        &self,
        prefix: &str,
        count: usize,
        at_least: usize,
        within: Duration,
        settle: Duration,
    ) {
        let deadline = Instant::now() + within;
        while (0..count)
            .filter(|i| self.queries(&format!("{prefix}{i}.test")) > 0)
            .count()
            < at_least
        {
            assert!(
                Instant::now() < deadline,
                "{prefix}* lookups never reached the name server"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(settle).await;
    }

    /// Runs the calling test with the system resolver pointed at a fresh server.
    ///
    /// In the test process this starts `test` (the test's name as the harness filters it) again
    /// in a child process with a private mount namespace whose `/etc/resolv.conf` names a
    /// random 127.x.y.z, waits for it (bounded) and asserts that it passed, then returns `None`:
    /// the caller returns. In that child it returns the server, listening on that address port
    /// 53: the caller runs the test's body. Outside CI without root it prints why it skips and
    /// returns `None`; under CI it panics, since the test must run there.
    ///
    /// # Panics
    ///
    /// When the child test fails or cannot be started.
    pub fn isolated(test: &str) -> Option<Self> {
        if std::env::var(CHILD_ENV).is_ok_and(|t| t == test) {
            let addr: Ipv4Addr = std::env::var(ADDR_ENV)
                .expect("server address in the environment")
                .parse()
                .expect("server address");
            return Some(Self::start_on(SocketAddr::from((addr, 53))));
        }
        if !is_root() {
            assert!(
                !crate::in_ci(),
                "{test} needs root (a private mount namespace for /etc/resolv.conf)"
            );
            eprintln!("skipping {test}: needs root for a private /etc/resolv.conf (runs in CI)");
            return None;
        }
        run_child(test);
        None
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn is_root() -> bool {
    // Without libc: the effective uid from procfs.
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// A random-looking free 127.x.y.z (other tests and engineers share the loopback network).
fn free_loopback() -> Ipv4Addr {
    let seed = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    for i in 0..64u64 {
        let n = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(i * 1442695040888963407);
        let [a, b, c] = [(n >> 24) as u8, (n >> 32) as u8, (n >> 40) as u8];
        let ip = Ipv4Addr::new(127, a.max(2), b, c.clamp(2, 254));
        if UdpSocket::bind((ip, 53)).is_ok() {
            return ip; // released at once; the child binds it (a tiny race, accepted)
        }
    }
    panic!("no free 127.x.y.z:53 after 64 tries");
}

fn run_child(test: &str) {
    let ip = free_loopback();
    let dir = std::env::temp_dir().join(format!("mmcache-dns-{}-{ip}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let conf = dir.join("resolv.conf");
    std::fs::write(&conf, format!("nameserver {ip}\n")).expect("write resolv.conf");
    let exe = std::env::current_exe().expect("current test binary");
    let mut child = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#,
        ])
        .arg(&conf)
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, test)
        .env(ADDR_ENV, ip.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start `unshare` (util-linux)");
    // Read both pipes while the child runs: a child that writes more than a pipe holds would
    // otherwise block on its write and never exit.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child test") {
            break status;
        }
        if started.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test} did not finish within {CHILD_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    println!("--- {test} in a private mount namespace ---\n{stdout}\n{stderr}");
    assert!(status.success(), "{test} failed in its namespace: {status}");
    // Exit 0 with nothing run would be a silent pass: the filter must have matched.
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in its namespace"
    );
}

fn serve(socket: &UdpSocket, state: &Mutex<State>, stop: &AtomicBool) {
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, peer)) = socket.recv_from(&mut buf) else {
            continue; // read timeout: look at the stop flag
        };
        let Some(query) = Query::parse(&buf[..n]) else {
            continue;
        };
        let name = key(&query.name);
        let answer = {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            *st.queries.entry(name.clone()).or_default() += 1;
            match st.names.get(&name) {
                Some(a) => a.clone(),
                None if name.starts_with("hole") => Answer::Silent,
                None => Answer::NxDomain,
            }
        };
        if let Some(reply) = query.reply(&answer) {
            let _ = socket.send_to(&reply, peer);
        }
    }
}

/// The first question of a query, with the bytes needed to echo it.
struct Query<'a> {
    id: [u8; 2],
    /// RD bit and opcode, echoed.
    flags: u8,
    /// The question as sent (name, type, class): echoed byte for byte (0x20 case included).
    question: &'a [u8],
    name: String,
    qtype: u16,
}

impl<'a> Query<'a> {
    fn parse(msg: &'a [u8]) -> Option<Self> {
        if msg.len() < 12 || msg[2] & 0x80 != 0 || u16::from_be_bytes([msg[4], msg[5]]) == 0 {
            return None; // too short, a response, or no question
        }
        let mut pos = 12;
        let mut labels = Vec::new();
        loop {
            let len = usize::from(*msg.get(pos)?);
            pos += 1;
            if len == 0 {
                break;
            }
            if len > 63 {
                return None; // compression pointers never appear in a query's first name
            }
            labels.push(String::from_utf8_lossy(msg.get(pos..pos + len)?).into_owned());
            pos += len;
        }
        let qtype = u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]);
        let end = pos + 4;
        Some(Self {
            id: [msg[0], msg[1]],
            flags: msg[2] & 0x79,
            question: msg.get(12..end)?,
            name: labels.join("."),
            qtype,
        })
    }

    fn reply(&self, answer: &Answer) -> Option<Vec<u8>> {
        let (rcode, ips): (u8, &[Ipv4Addr]) = match answer {
            Answer::Silent => return None,
            Answer::NxDomain => (3, &[]),
            Answer::A(ips) if self.qtype == 1 => (0, ips),
            Answer::A(_) => (0, &[]),
        };
        let mut out = Vec::with_capacity(12 + self.question.len() + 16 * ips.len());
        out.extend_from_slice(&self.id);
        out.push(0x80 | 0x04 | self.flags); // QR, AA, the query's opcode and RD
        out.push(0x80 | rcode); // RA
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&(ips.len() as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(self.question);
        for ip in ips {
            out.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]); // name at offset 12, A, IN
            out.extend_from_slice(&ANSWER_TTL.to_be_bytes());
            out.extend_from_slice(&4u16.to_be_bytes());
            out.extend_from_slice(&ip.octets());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, (qtype >> 8) as u8, qtype as u8, 0, 1]);
        q
    }

    #[test]
    fn answers_a_records_nxdomain_and_stays_silent_for_holes() {
        let dns = TestDns::start();
        dns.set_a("Good.Test", Ipv4Addr::new(127, 0, 0, 1));
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 512];

        client.send_to(&query("good.TEST", 1), dns.addr()).unwrap();
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..2], &[0x12, 0x34]);
        assert_eq!(buf[3] & 0x0f, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([buf[6], buf[7]]), 1, "one answer");
        assert_eq!(&buf[n - 4..n], &[127, 0, 0, 1]);
        assert!(
            buf[12..].windows(4).any(|w| w == b"TEST"),
            "question echoed"
        );

        client.send_to(&query("other.test", 1), dns.addr()).unwrap();
        client.recv(&mut buf).unwrap();
        assert_eq!(buf[3] & 0x0f, 3, "NXDOMAIN");

        client.send_to(&query("hole1.test", 1), dns.addr()).unwrap();
        assert!(client.recv(&mut buf).is_err(), "no answer for a hole");
        assert_eq!(dns.queries("hole1.test"), 1);

        dns.set("good.test", Answer::Silent);
        client.send_to(&query("good.test", 1), dns.addr()).unwrap();
        assert!(client.recv(&mut buf).is_err(), "silenced");

        client.send_to(&[1, 2, 3], dns.addr()).unwrap(); // junk is ignored
        assert!(client.recv(&mut buf).is_err());
    }
}
