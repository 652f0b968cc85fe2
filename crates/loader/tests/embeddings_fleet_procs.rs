// Not in tests/it: harness off, it starts itself again as each worker process.
//! Cross-process proofs of the embedding fleet tiers, with real OS processes: this binary
//! (harness off) is both the test and the worker it starts. A worker builds its loader from
//! the environment (default settings but for the tiers under test), waits at a file barrier
//! so that every worker calls at once, and runs `get_or_compute` with a counted compute (it
//! appends a line to a shared file, then sleeps as a vision encoder would).
//!
//! - 2 processes sharing a disk directory (no Redis) → 1 compute.
//! - 4 processes on a real 3-master Redis Cluster with the lease on → 1 compute, also when the
//!   compute takes 20 s, four lease TTLs (the holder renews its lease).
//! - The same, the lease holder SIGKILLed mid-compute of 8 s → exactly one more compute, by a
//!   process that took the lease once it lapsed; the others wait for that one.
//! - A value that cannot be stored (too many dimensions with the defaults; over a 1 MiB cap)
//!   → the holder's waiters compute at once when its compute ends, all at the same time, not
//!   one after another.
//!
//! The lease's settings are the defaults (TTL 5 s) but for the switch that turns it on.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use mmcache_loader::Loader;
use mmcache_loader::embeddings::{Embedding, EmbeddingKeyInput};
use mmcache_test_support::redis::{ClusterOptions, RedisCluster};

const WORKER: &str = "MMCACHE_TEST_EMB_WORKER";
const DIR: &str = "MMCACHE_TEST_EMB_DIR";
const COMPUTE_MS: &str = "MMCACHE_TEST_EMB_COMPUTE_MS";
const KEY: &str = "MMCACHE_TEST_EMB_KEY";
/// What the compute returns: `ok` (a 333 KB f32 value), `dims9` (9 dimensions: cannot be
/// stored), `4mib` (a 4 MiB value).
const VALUE: &str = "MMCACHE_TEST_EMB_VALUE";
const MODEL: &str = "Qwen/Qwen2.5-VL-7B-Instruct@max_pixels=1003520";
/// The default lease TTL (`MMCACHE_SHARED_IMAGE_CACHE_LEASE_TTL_MS`).
const LEASE_TTL: Duration = Duration::from_secs(5);
/// Bound on any one worker's life: far past what a pass needs.
const WORKER_LIMIT: Duration = Duration::from_secs(60);

/// One proof.
type Test = fn() -> Result<()>;

fn main() -> Result<()> {
    if std::env::var_os(WORKER).is_some() {
        return worker();
    }
    let tests: [(&str, Test); 5] = [
        (
            "two_processes_sharing_a_disk_directory_compute_once",
            disk_two,
        ),
        ("four_processes_on_a_cluster_compute_once", cluster_four),
        ("a_compute_of_four_lease_ttls_runs_once", long_compute),
        (
            "a_killed_lease_holder_is_replaced_once_at_the_ttl",
            killed_holder,
        ),
        ("waiters_of_an_unstorable_value_compute_at_once", unstorable),
    ];
    let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let tests: Vec<_> = tests
        .into_iter()
        .filter(|(name, _)| only.as_deref().is_none_or(|o| name.contains(o)))
        .collect();
    let (mut failed, count) = (0, tests.len());
    for (name, test) in tests {
        let started = Instant::now();
        match test() {
            Ok(()) => println!("test {name} ... ok ({:.1?})", started.elapsed()),
            Err(e) => {
                failed += 1;
                println!("test {name} ... FAILED: {e:#}");
            }
        }
    }
    ensure!(failed == 0, "{failed} of {count} failed");
    println!("test result: ok. {count} passed");
    Ok(())
}

/// One worker: barrier, `get_or_compute`, report.
fn worker() -> Result<()> {
    let dir = PathBuf::from(std::env::var(DIR)?);
    let compute_ms: u64 = std::env::var(COMPUTE_MS)?.parse()?;
    let key = std::env::var(KEY)?;
    let value = std::env::var(VALUE).unwrap_or_else(|_| "ok".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let loader = Loader::from_env()?;
        if let Some(shared) = loader.shared_cache() {
            shared.connect().await;
        }
        write_line(&dir.join("ready"), &std::process::id().to_string())?;
        let go = dir.join("go");
        let until = Instant::now() + WORKER_LIMIT;
        while !go.exists() {
            ensure!(Instant::now() < until, "barrier never opened");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let started = Instant::now();
        let (computes, computed) = (dir.join("computes"), dir.join("computed"));
        let compute = move || async move {
            let start = now_ms();
            write_line(&computes, &std::process::id().to_string())?;
            tokio::time::sleep(Duration::from_millis(compute_ms)).await;
            let e = match value.as_str() {
                "dims9" => Embedding::from_f32(vec![1; 9], vec![0.25]),
                "4mib" => Embedding::from_f32(vec![1024, 1024], vec![0.25; 1 << 20]),
                _ => Embedding::from_f32(vec![1300, 64], vec![0.25; 1300 * 64]),
            };
            let line = format!("{} {start} {}", std::process::id(), now_ms());
            write_line(&computed, &line)?;
            e.map_err(anyhow::Error::from)
        };
        let got = loader
            .embeddings()
            .get_or_compute(&EmbeddingKeyInput::caller(key), MODEL, None, compute)
            .await?;
        ensure!(
            got.embedding
                .as_f32()
                .is_some_and(|v| v.iter().all(|&x| x == 0.25))
        );
        println!(
            "source={} elapsed_ms={}",
            got.source.as_str(),
            started.elapsed().as_millis()
        );
        loader.shutdown(Duration::from_secs(10)).await;
        Ok(())
    })
}

/// Milliseconds since the Unix epoch: one clock for every process of the host.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Appends one line (O_APPEND: lines of several processes never interleave).
fn write_line(path: &Path, line: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(format!("{line}\n").as_bytes())?;
    Ok(())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

struct Run {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `n` workers with `env`, waits until all are ready, then opens the barrier.
fn start(name: &str, n: usize, compute_ms: u64, env: &[(&str, String)]) -> Result<Run> {
    let dir = std::env::temp_dir().join(format!("mmcache-emb-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut run = Run {
        dir: dir.clone(),
        children: Vec::new(),
    };
    let exe = std::env::current_exe()?;
    for _ in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.env(WORKER, "1")
            .env(DIR, &dir)
            .env(COMPUTE_MS, compute_ms.to_string())
            .env(KEY, format!("{name}-image"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        run.children.push(cmd.spawn().context("start a worker")?);
    }
    let until = Instant::now() + WORKER_LIMIT;
    while lines(&dir.join("ready")).len() < n {
        ensure!(Instant::now() < until, "workers never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::write(dir.join("go"), b"")?;
    Ok(run)
}

/// Waits for every worker still running; returns (pid, exit ok, stdout) of each.
fn finish(run: &mut Run) -> Result<Vec<(u32, bool, String)>> {
    let until = Instant::now() + WORKER_LIMIT;
    let mut out = Vec::new();
    for c in std::mem::take(&mut run.children) {
        let pid = c.id();
        let mut c = c;
        while c.try_wait()?.is_none() {
            if Instant::now() > until {
                let _ = c.kill();
                bail!("worker {pid} did not finish within {WORKER_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let o = c.wait_with_output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        out.push((pid, o.status.success(), text));
    }
    Ok(out)
}

fn disk_two() -> Result<()> {
    let disk = std::env::temp_dir().join(format!("mmcache-emb-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&disk);
    let env = [("MMCACHE_DISK_CACHE_DIR", disk.display().to_string())];
    let mut run = start("disk", 2, 500, &env)?;
    let done = finish(&mut run)?;
    let computes = lines(&run.dir.join("computes"));
    let _ = std::fs::remove_dir_all(&disk);
    all_ok(&done)?;
    ensure!(
        computes.len() == 1,
        "{} computes across 2 processes sharing a disk directory (want 1): {done:?}",
        computes.len()
    );
    Ok(())
}

fn cluster_env(cluster: &RedisCluster) -> Vec<(&'static str, String)> {
    vec![
        ("DYN_MM_SHARED_IMAGE_CACHE_ENABLED", "1".into()),
        ("DYN_MM_SHARED_IMAGE_CACHE_URL", cluster.url()),
        ("MMCACHE_SHARED_IMAGE_CACHE_LEASE", "1".into()),
    ]
}

fn cluster_four() -> Result<()> {
    once_across_four("cluster", Duration::from_millis(500))
}

/// 4 processes on one cluster, one compute of `compute`: 1 compute, 3 shared hits.
fn once_across_four(name: &str, compute: Duration) -> Result<()> {
    let cluster = RedisCluster::start(ClusterOptions::default())?;
    let ms = compute.as_millis() as u64;
    let mut run = start(name, 4, ms, &cluster_env(&cluster))?;
    let done = finish(&mut run)?;
    all_ok(&done)?;
    let computes = lines(&run.dir.join("computes"));
    ensure!(
        computes.len() == 1,
        "{} computes of one {compute:?} compute across 4 processes (want 1): {done:?}",
        computes.len()
    );
    let shared = done
        .iter()
        .filter(|d| d.2.contains("source=shared"))
        .count();
    ensure!(shared == 3, "3 processes should read the value: {done:?}");
    Ok(())
}

/// The `computed` file's lines: (pid, start ms, end ms), in the order they ended.
fn computed(dir: &Path) -> Result<Vec<(u32, u64, u64)>> {
    lines(&dir.join("computed"))
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            ensure!(f.len() == 3, "bad line {l:?}");
            Ok((f[0].parse()?, f[1].parse()?, f[2].parse()?))
        })
        .collect()
}

fn all_ok(done: &[(u32, bool, String)]) -> Result<()> {
    for (pid, ok, text) in done {
        ensure!(*ok, "worker {pid} failed: {text}");
    }
    Ok(())
}

fn long_compute() -> Result<()> {
    // Four lease TTLs: the holder renews its lease, and the waiters wait for it.
    once_across_four("long", 4 * LEASE_TTL)
}

fn killed_holder() -> Result<()> {
    let cluster = RedisCluster::start(ClusterOptions::default())?;
    // The compute (8 s) outlasts the lease TTL (5 s): the holder's renewals, then its
    // successor's, keep every other process waiting.
    let mut run = start("killed", 4, 8000, &cluster_env(&cluster))?;
    let computes = run.dir.join("computes");
    let until = Instant::now() + WORKER_LIMIT;
    let holder: u32 = loop {
        if let Some(first) = lines(&computes).first() {
            break first.parse()?;
        }
        ensure!(Instant::now() < until, "nobody computed");
        std::thread::sleep(Duration::from_millis(5));
    };
    let i = run
        .children
        .iter()
        .position(|c| c.id() == holder)
        .context("the holder is one of ours")?;
    let mut c = run.children.remove(i);
    let killed = c.kill(); // SIGKILL: no lease release, no cleanup
    c.wait()?;
    killed?;
    let killed_at = now_ms();
    let done = finish(&mut run)?;
    all_ok(&done)?;
    let all = lines(&computes);
    ensure!(
        all.len() == 2 && all[1] != all[0],
        "after the holder died exactly one other process should compute: {all:?} {done:?}"
    );
    let ended = computed(&run.dir)?;
    ensure!(ended.len() == 1, "one compute ran to its end: {ended:?}");
    // The successor started after the kill (once the lease lapsed), and the two others
    // read its value.
    ensure!(
        ended[0].1 >= killed_at,
        "{ended:?} started before the kill at {killed_at}"
    );
    let shared = done
        .iter()
        .filter(|d| d.2.contains("source=shared"))
        .count();
    ensure!(
        shared == 2,
        "the others read the successor's value: {done:?}"
    );
    println!(
        "  the successor's compute started {} ms after the kill",
        ended[0].1 - killed_at
    );
    Ok(())
}

/// A holder whose value will not be stored: its waiters all compute when it ends, at once.
fn unstorable() -> Result<()> {
    let cluster = RedisCluster::start(ClusterOptions::default())?;
    let compute = Duration::from_secs(2);
    // The defaults (9 dimensions cannot be encoded), then a 4 MiB value over a 1 MiB cap.
    let cases = [
        ("dims9", None),
        (
            "4mib",
            Some(("MMCACHE_EMBEDDING_MAX_VALUE_BYTES", "1048576")),
        ),
    ];
    for (value, cap) in cases {
        let mut env = cluster_env(&cluster);
        env.push((VALUE, value.to_owned()));
        env.extend(cap.map(|(k, v)| (k, v.to_owned())));
        let name = format!("unstorable-{value}");
        let mut run = start(&name, 4, compute.as_millis() as u64, &env)?;
        let done = finish(&mut run)?;
        all_ok(&done)?;
        let mut ended = computed(&run.dir)?;
        ensure!(
            ended.len() == 4,
            "{value}: every process computes: {ended:?}"
        );
        ended.sort_by_key(|e| e.1);
        let (holder, waiters) = (ended[0], &ended[1..]);
        // The waiters waited for the holder (none started before its compute ended) and
        // then ran together: each started before any other ended.
        let first_end = waiters.iter().map(|w| w.2).min().unwrap_or(0);
        for w in waiters {
            ensure!(
                w.1 >= holder.2,
                "{value}: {w:?} started before {holder:?} ended"
            );
            ensure!(
                w.1 < first_end,
                "{value}: waiters ran one after another: {ended:?}"
            );
        }
        // Two compute times and the waiters' wake-up; one after another would be four.
        let last_end = ended.iter().map(|e| e.2).max().unwrap_or(0);
        let span = Duration::from_millis(last_end - holder.1);
        ensure!(
            span < 3 * compute,
            "{value}: {span:?} from first start to last end: {ended:?}"
        );
        let woke = waiters.iter().map(|w| w.1 - holder.2).max().unwrap_or(0);
        println!(
            "  {value}: 4 computes of {compute:?}, the waiters' started at most {woke} ms after the holder's ended; {span:?} in all"
        );
    }
    Ok(())
}
