//! Set-up that waits on the network and the disk (venvs, pip installs, wheel downloads), run in
//! a thread of its own while the gate compiles, and joined where its result is first needed.
//!
//! A job's steps ([`crate::setup::step`] called in its thread) write their `==>`/`<==` lines and
//! their commands' output to the job's log file, not to the terminal, so nothing interleaves
//! with the compiler's output. Joining prints how long the gate waited for
//! the job, then the job's own timing lines; a failed job prints its whole log and fails the
//! gate naming the step that failed. A job dropped before it is joined (the gate failed first)
//! is cancelled: its running command is killed and the drop waits for the thread, so no pip
//! goes on writing into a venv after the gate has exited.

use std::cell::RefCell;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

/// A set-up job running in a thread of its own; [`Job::join`] waits for its result.
#[derive(Debug)]
pub(crate) struct Job<T> {
    name: &'static str,
    log: PathBuf,
    cancel: Arc<AtomicBool>,
    /// The work's result and how long it ran; `None` once joined.
    thread: Option<JoinHandle<(anyhow::Result<T>, Duration)>>,
}

/// What a job's thread knows: where its steps write, and whether to stop.
struct InJob {
    log: File,
    cancel: Arc<AtomicBool>,
}

thread_local! {
    /// Set in a job's thread only: [`crate::setup::step`] then runs through [`step`].
    static IN_JOB: RefCell<Option<InJob>> = const { RefCell::new(None) };
}

/// Starts `work` in a thread of its own as the job `name`, its steps logged to the file `log`.
pub(crate) fn spawn<T, F>(name: &'static str, log: &Path, work: F) -> anyhow::Result<Job<T>>
where
    T: Send + 'static,
    F: FnOnce() -> anyhow::Result<T> + Send + 'static,
{
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let file = File::create(log).with_context(|| format!("create {}", log.display()))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let in_job = InJob {
        log: file,
        cancel: cancel.clone(),
    };
    println!("==> {name}: in the background (log: {})", log.display());
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let started = Instant::now();
            IN_JOB.with(|slot| *slot.borrow_mut() = Some(in_job));
            (work(), started.elapsed())
        })
        .with_context(|| format!("start the thread of {name}"))?;
    Ok(Job {
        name,
        log: log.to_owned(),
        cancel,
        thread: Some(thread),
    })
}

impl<T> Job<T> {
    /// Waits for the job. Prints how long the gate waited and the job's own step times; on
    /// failure, its whole log and an error naming the job and the step.
    pub(crate) fn join(mut self) -> anyhow::Result<T> {
        let waiting = Instant::now();
        let thread = self.thread.take().context("a job is joined once")?;
        let (result, ran) = thread
            .join()
            .unwrap_or_else(|_| (Err(anyhow!("its thread panicked")), Duration::ZERO));
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

impl<T> Drop for Job<T> {
    /// Not joined: the gate failed before it needed the job. Stop it and wait.
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.cancel.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

/// [`crate::setup::step`] in a job's thread: the step's lines and the command's output go to
/// the job's log, and the command is killed when the job is cancelled. `None` outside a job.
pub(crate) fn step(name: &str, cmd: &mut Command) -> Option<anyhow::Result<()>> {
    IN_JOB.with(|slot| slot.borrow().as_ref().map(|job| logged(job, name, cmd)))
}

fn logged(job: &InJob, name: &str, cmd: &mut Command) -> anyhow::Result<()> {
    let mut log = &job.log;
    writeln!(log, "==> {name}")?;
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(job.log.try_clone()?)
        .stderr(job.log.try_clone()?)
        .spawn()
        .with_context(|| format!("run {name}"))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if job.cancel.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{name}: cancelled");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
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
        let job = spawn("ok", &path, || {
            step("say hello", &mut sh("echo hello; echo oops >&2"))?;
            Ok(7)
        })
        .unwrap();
        assert_eq!(job.join().unwrap(), 7);
        let text = std::fs::read_to_string(&path).unwrap();
        for line in ["==> say hello", "hello", "oops", "<== say hello: 0 s"] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in {text:?}");
        }
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_failed_step_fails_the_join_naming_the_job_and_the_step() {
        let path = log("fails");
        let job: Job<()> = spawn("the job", &path, || {
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

    #[test]
    fn a_job_dropped_unjoined_is_stopped() {
        let path = log("dropped");
        let job: Job<()> = spawn("sleeps", &path, || {
            step("sleep", Command::new("sleep").arg("60"))
        })
        .unwrap();
        // Let the command start, then drop the job: the drop kills it and waits for the thread.
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        drop(job);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn outside_a_job_its_step_leaves_the_step_to_the_terminal() {
        assert!(super::step("true", &mut sh("true")).is_none());
    }
}
