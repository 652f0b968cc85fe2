//! Work the gate's next step does not need, run in a thread of its own beside it and joined
//! where its result is first needed: set-up that waits on the network and the disk (venvs, pip
//! installs, wheel downloads) while the gate compiles, and builds (the extension, the API docs)
//! while its tests wait on their servers.
//!
//! A job's steps ([`crate::setup::step`] called in its thread) write their `==>`/`<==` lines and
//! their commands' output to the job's log file, not to the terminal, so nothing interleaves
//! with the compiler's output. A job may start after another ([`Job::finished`]): pip's cache
//! is not safe for two pips writing it at once, so the gate's jobs that use it run one at a
//! time (the engines' venv uses no cache, and runs beside them). Joining prints how long the
//! gate waited for the job, then the job's own timing lines; a failed job prints its whole log
//! and fails the gate naming the step that failed.
//!
//! A job dropped before it is joined (the gate failed first) is cancelled: its running command
//! and every process below it are killed, no later step of it starts, a job to start after it
//! does not start, and the drop waits for the thread, so no pip goes on writing into a venv
//! after the gate has exited. A job that had failed on its own says so then. A command stays
//! in the gate's process group, so Ctrl-C stops it with the gate.
//!
//! A job runs at a low CPU priority (nice 10), and so do the commands it starts: on two cores
//! the gate's compiles and tests come first, and the set-up takes the CPU they leave idle
//! (unpacking six gigabytes of wheels had made clippy twice as slow). Not the lowest: CI's fuzz
//! build runs beside the gate at nice 19, and a job the gate waits for comes before it.

use std::cell::RefCell;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

/// The nice value of a job's thread and its commands.
const PRIORITY: i32 = 10;

/// A set-up job running in a thread of its own; [`Job::join`] waits for its result.
#[derive(Debug)]
pub(crate) struct Job<T> {
    name: &'static str,
    log: PathBuf,
    cancel: Arc<AtomicBool>,
    finished: Finished,
    /// The work's result and how long it ran; `None` once joined.
    thread: Option<JoinHandle<(anyhow::Result<T>, Duration)>>,
}

/// How a job's thread ended, once it has; another job can wait for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Finished(Arc<(Mutex<Option<Ended>>, Condvar)>);

/// How a job ended, for a job to start after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It ran to its end (its outcome, success or failure, is for its joiner).
    Ran,
    /// It was cancelled: what was to start after it does not start either.
    Cancelled,
}

impl Finished {
    fn set(&self, ended: Ended) {
        let (state, changed) = &*self.0;
        *state.lock().unwrap_or_else(|e| e.into_inner()) = Some(ended);
        changed.notify_all();
    }

    /// Waits until the job ended; `false` when it was cancelled or `cancel` was raised first.
    fn wait(&self, cancel: &AtomicBool) -> bool {
        let (state, changed) = &*self.0;
        let mut ended = state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match *ended {
                Some(how) => return how == Ended::Ran,
                None if cancel.load(Ordering::Relaxed) => return false,
                None => {}
            }
            ended = changed
                .wait_timeout(ended, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Sets its [`Finished`] when dropped: at the end of a job's thread, a panic included.
struct SetOnDrop {
    finished: Finished,
    cancel: Arc<AtomicBool>,
}

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.finished.set(if self.cancel.load(Ordering::Relaxed) {
            Ended::Cancelled
        } else {
            Ended::Ran
        });
    }
}

/// The error of a step that did not run, or was killed, because its job was cancelled.
#[derive(Debug)]
struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// What a job's thread knows: where its steps write, and whether to stop.
struct InJob {
    log: File,
    cancel: Arc<AtomicBool>,
}

thread_local! {
    /// Set in a job's thread only: [`crate::setup::step`] then runs through [`step`].
    static IN_JOB: RefCell<Option<InJob>> = const { RefCell::new(None) };
}

/// Starts `work` in a thread of its own as the job `name`, its steps logged to the file `log`;
/// with `after`, once that job has finished (its outcome does not matter: its joiner sees it).
pub(crate) fn spawn<T, F>(
    name: &'static str,
    log: &Path,
    after: Option<Finished>,
    work: F,
) -> anyhow::Result<Job<T>>
where
    T: Send + 'static,
    F: FnOnce() -> anyhow::Result<T> + Send + 'static,
{
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let file = File::create(log).with_context(|| format!("create {}", log.display()))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let finished = Finished::default();
    let in_job = InJob {
        log: file,
        cancel: cancel.clone(),
    };
    let on_end = SetOnDrop {
        finished: finished.clone(),
        cancel: cancel.clone(),
    };
    println!("==> {name}: in the background (log: {})", log.display());
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _on_end = on_end;
            if let Some(before) = after
                && !before.wait(&in_job.cancel)
            {
                return (Err(anyhow::Error::new(Cancelled)), Duration::ZERO);
            }
            // Linux keeps the nice value per thread, and a command started from this thread
            // inherits it. Only ever lowered (a gate run under `nice` keeps its own); failing
            // to lower it only costs the gate time.
            if let Ok(now) = rustix::process::getpriority_process(None) {
                let _ = rustix::process::setpriority_process(None, now.max(PRIORITY));
            }
            let started = Instant::now();
            IN_JOB.with(|slot| *slot.borrow_mut() = Some(in_job));
            (work(), started.elapsed())
        })
        .with_context(|| format!("start the thread of {name}"))?;
    Ok(Job {
        name,
        log: log.to_owned(),
        cancel,
        finished,
        thread: Some(thread),
    })
}

impl<T> Job<T> {
    /// Set when this job's thread has ended: a job to start after it waits for this.
    pub(crate) fn finished(&self) -> Finished {
        self.finished.clone()
    }

    /// Waits for the job. Prints how long the gate waited and the job's own step times; on
    /// failure, its whole log and an error naming the job and the step.
    pub(crate) fn join(mut self) -> anyhow::Result<T> {
        let waiting = Instant::now();
        let thread = self.thread.take().context("a job is joined once")?;
        let (result, ran) = joined(thread);
        // The gate's time for this step is the wait; the job's own time is beside it.
        println!(
            "<== {}: {:.0} s waited (it ran {:.0} s in the background)",
            self.name,
            waiting.elapsed().as_secs_f64(),
            ran.as_secs_f64()
        );
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        match result {
            Ok(value) => {
                for line in text.lines().filter(|l| l.starts_with("<== ")) {
                    println!("    {line}");
                }
                Ok(value)
            }
            Err(e) => {
                for line in text.lines() {
                    println!("  | {line}");
                }
                Err(e.context(format!(
                    "{} (run in the background; log: {})",
                    self.name,
                    self.log.display()
                )))
            }
        }
    }
}

/// The thread's result; a panic as an error with its message.
fn joined<T>(thread: JoinHandle<(anyhow::Result<T>, Duration)>) -> (anyhow::Result<T>, Duration) {
    thread.join().unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        (
            Err(anyhow!("its thread panicked: {message}")),
            Duration::ZERO,
        )
    })
}

impl<T> Drop for Job<T> {
    /// Not joined: the gate failed before it needed the job. Stop it and wait; a job that had
    /// already failed on its own says so, since its error would otherwise go unseen.
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.cancel.store(true, Ordering::Relaxed);
            if let (Err(e), _) = joined(thread)
                && e.downcast_ref::<Cancelled>().is_none()
            {
                eprintln!(
                    "{} (in the background) failed too: {e:#} (log: {})",
                    self.name,
                    self.log.display()
                );
            }
        }
    }
}

/// [`crate::setup::step`] in a job's thread: the step's lines and the command's output go to
/// the job's log, and the command is killed when the job is cancelled. `None` outside a job.
pub(crate) fn step(name: &str, cmd: &mut Command) -> Option<anyhow::Result<()>> {
    IN_JOB.with(|slot| slot.borrow().as_ref().map(|job| logged(job, name, cmd)))
}

/// A running command, killed with every process below it when this is dropped before
/// [`Running::wait`] returned (the job was cancelled, or writing its log failed).
struct Running(Option<Child>);

impl Running {
    fn wait(&mut self, cancel: &AtomicBool) -> anyhow::Result<std::process::ExitStatus> {
        let child = self.0.as_mut().context("a command is waited for once")?;
        loop {
            if let Some(status) = child.try_wait()? {
                self.0 = None;
                return Ok(status);
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(anyhow::Error::new(Cancelled));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            kill_tree(child.id());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Kills `pid` and every process below it. Each is stopped before its children are looked
/// for (a stopped process starts no other, and a killed one's children would be handed to
/// init, out of reach), then all are killed.
fn kill_tree(pid: u32) {
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        let level = tree[next..].to_vec();
        signal("STOP", &level);
        next = tree.len();
        tree.extend(children_of(&level));
    }
    signal("KILL", &tree);
}

/// Sends the signal `name` to `pids` with the shell's `kill` (a built-in: nothing to install).
fn signal(name: &str, pids: &[u32]) {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let _ = Command::new("sh")
        .args([
            "-c",
            &format!("kill -{name} {} 2>/dev/null", list.join(" ")),
        ])
        .status();
}

/// The processes whose parent is one of `parents`, from /proc.
fn children_of(parents: &[u32]) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // The parent is the second field after the command's name, which is in parentheses.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1;
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                .is_some_and(|parent| parents.contains(&parent))
        })
        .collect()
}

fn logged(job: &InJob, name: &str, cmd: &mut Command) -> anyhow::Result<()> {
    if job.cancel.load(Ordering::Relaxed) {
        return Err(anyhow::Error::new(Cancelled)).context(name.to_owned());
    }
    let mut log = &job.log;
    writeln!(log, "==> {name}")?;
    let started = Instant::now();
    let mut running = Running(Some(
        cmd.stdin(Stdio::null())
            .stdout(job.log.try_clone()?)
            .stderr(job.log.try_clone()?)
            .spawn()
            .with_context(|| format!("run {name}"))?,
    ));
    let status = running.wait(&job.cancel).context(name.to_owned())?;
    writeln!(log, "<== {name}: {:.0} s", started.elapsed().as_secs_f64())?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::step;

    fn log(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "xtask-background-{}-{name}.log",
            std::process::id()
        ))
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn a_jobs_steps_write_to_its_log_and_join_gives_its_result() {
        let path = log("ok");
        let job = spawn("ok", &path, None, || {
            step("say hello", &mut sh("echo hello; echo oops >&2"))?;
            Ok(7)
        })
        .unwrap();
        assert_eq!(job.join().unwrap(), 7);
        let text = std::fs::read_to_string(&path).unwrap();
        for line in ["==> say hello", "hello", "oops", "<== say hello: "] {
            assert!(
                text.lines().any(|l| l.starts_with(line)),
                "{line:?} not in {text:?}"
            );
        }
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_jobs_commands_run_at_its_priority() {
        let path = log("nice");
        let before = std::process::Command::new("nice").output().unwrap();
        let job = spawn("nice", &path, None, || step("nice", &mut sh("nice"))).unwrap();
        job.join().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let nice: i32 = text
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .expect("nice's output");
        assert!(nice >= PRIORITY, "{text:?}");
        // Only the job's thread: what the gate itself starts keeps its priority.
        let after = std::process::Command::new("nice").output().unwrap();
        assert_eq!(before.stdout, after.stdout);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_failed_step_fails_the_join_naming_the_job_and_the_step() {
        let path = log("fails");
        let job: Job<()> = spawn("the job", &path, None, || {
            step("first", &mut sh("true"))?;
            step("second", &mut sh("exit 3"))?;
            step("third", &mut sh("true"))
        })
        .unwrap();
        let error = format!("{:#}", job.join().unwrap_err());
        assert!(
            error.starts_with("the job (run in the background; log: "),
            "{error}"
        );
        assert!(error.contains("second failed (exit status: 3)"), "{error}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("third"), "{text}");
        std::fs::remove_file(path).unwrap();
    }

    /// Whether the process `pid` has ended (gone, or a zombie not yet reaped).
    fn ended(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the command's name in parentheses.
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z')),
        }
    }

    #[test]
    fn a_job_dropped_unjoined_is_stopped_with_its_commands_children() {
        let path = log("dropped");
        let pid_file = log("dropped-pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
        let job: Job<()> = spawn("sleeps", &path, None, move || {
            step("sleep", &mut sh(&script))
        })
        .unwrap();
        // The grandchild's pid, once the command has started it.
        let pid = (0..100)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::read_to_string(&pid_file)
                    .ok()
                    .filter(|p| p.ends_with('\n'))
            })
            .expect("the command started");
        let pid = pid.trim();
        assert!(!ended(pid));
        // The drop kills the command with what it started, and waits for the thread.
        drop(job);
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            ended(pid)
        });
        assert!(gone, "the command's child {pid} outlived its job");
        for f in [path, pid_file] {
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn a_job_after_another_starts_when_it_has_finished() {
        let (first_log, second_log, marker) = (log("first"), log("second"), log("marker"));
        let m = marker.clone();
        let first: Job<()> = spawn("first", &first_log, None, move || {
            step(
                "sleep, then mark",
                &mut sh(&format!("sleep 1; touch {}", m.display())),
            )
        })
        .unwrap();
        let m = marker.clone();
        let second = spawn("second", &second_log, Some(first.finished()), move || {
            Ok(m.exists())
        })
        .unwrap();
        assert!(
            second.join().unwrap(),
            "the second job ran before the first ended"
        );
        first.join().unwrap();
        for f in [first_log, second_log, marker] {
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn a_job_cancelled_while_it_waits_for_another_runs_no_step() {
        let (first_log, second_log) = (log("long"), log("waiting"));
        let first: Job<()> = spawn("long", &first_log, None, || {
            step("sleep", &mut sh("sleep 60"))
        })
        .unwrap();
        let second: Job<()> = spawn("waiting", &second_log, Some(first.finished()), || {
            step("never", &mut sh("true"))
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(second);
        drop(first);
        assert_eq!(std::fs::read_to_string(&second_log).unwrap(), "");
        for f in [first_log, second_log] {
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn a_job_after_a_cancelled_one_does_not_start() {
        let (first_log, second_log) = (log("cancelled-first"), log("after-cancelled"));
        let first: Job<()> = spawn("long", &first_log, None, || {
            step("sleep", &mut sh("sleep 60"))
        })
        .unwrap();
        let second: Job<()> = spawn("after", &second_log, Some(first.finished()), || {
            step("never", &mut sh("true"))
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(first);
        let error = format!("{:#}", second.join().unwrap_err());
        assert!(error.contains("cancelled"), "{error}");
        assert_eq!(std::fs::read_to_string(&second_log).unwrap(), "");
        for f in [first_log, second_log] {
            std::fs::remove_file(f).unwrap();
        }
    }

    #[test]
    fn a_panic_in_a_job_fails_its_join_with_the_message() {
        let path = log("panics");
        let job: Job<()> = spawn("panics", &path, None, || panic!("the panic's words")).unwrap();
        let error = format!("{:#}", job.join().unwrap_err());
        assert!(error.contains("the panic's words"), "{error}");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn outside_a_job_its_step_leaves_the_step_to_the_terminal() {
        assert!(super::step("true", &mut sh("true")).is_none());
    }
}
