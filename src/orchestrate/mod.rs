//! Orchestration of `ocrig run`: preflight (hosts, kernels, accelerator, payload, images), CPU
//! claims, the results directory, then the sweep on one host or several, and its closing
//! report. `commands/` only parses and dispatches to here.

mod claims;
mod finish;
mod hosts;
pub mod preflight;
mod results_dir;
mod results_lock;
mod resume;
mod run;
mod sweep;

pub use run::run;

/// What `ocrig run` was asked.
pub struct RunArgs {
    pub scenario: Option<std::path::PathBuf>,
    pub results: std::path::PathBuf,
    pub resume: Option<std::path::PathBuf>,
    pub backend: Option<crate::scenario::BackendKind>,
    pub quiet: bool,
    /// Queue behind a live sweep on the same host CPUs (or results directory) instead of refusing.
    pub wait_for_cpus: bool,
    /// Let a resume continue although what it runs on differs from what the sweep ran on.
    pub accept_changed: bool,
    /// `--set KEY=VALUE` overrides of the scenario, in order.
    pub sets: Vec<crate::scenario::overrides::Override>,
}

/// Input the user must fix (scenario, arguments). Exit status 2; nothing was booted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// The sweep was stopped by a signal; its guests are gone and its journal is intact.
#[derive(Debug, thiserror::Error)]
#[error("stopped by {signal}; every guest was removed and the journal keeps every finished run")]
pub struct Interrupted {
    pub signal: &'static str,
    pub code: u8,
}

/// After a sweep's runtime is shut down (its guests gone): waits for the host trace instances
/// still being removed ([`crate::telemetry::sched_trace::wait_cleanups`]) — up to 5 s after a
/// sweep that ended, 1 s after a signal, whose sender waits for ocrig to exit (what is left
/// is removed by the next ocrig).
pub(crate) fn wait_for_trace_cleanups<T>(outcome: &anyhow::Result<T>) {
    let interrupted = outcome.as_ref().err().is_some_and(|e| e.is::<Interrupted>());
    let limit = if interrupted { 1 } else { 5 };
    crate::telemetry::sched_trace::wait_cleanups(std::time::Duration::from_secs(limit));
}

/// The sweep ran to its end, but some run slots have no valid result (every attempt failed,
/// or their guests never came up). Its reports are written; `--resume` retries those slots.
#[derive(Debug, thiserror::Error)]
#[error(
    "the sweep finished, but {slots} run slot(s) have no valid result (see the journal and the report's failed column); \
     `ocrig run --resume {}` retries them",
    dir.display()
)]
pub struct SweepIncomplete {
    pub dir: std::path::PathBuf,
    pub slots: usize,
}

/// Exit statuses (README.md, "Exit status"): 0 every run slot has a valid result; 1 any other
/// error; 2 bad input (scenario, arguments, a directory that is not a results directory, a
/// resume that would not continue the same sweep, a results directory another ocrig writes),
/// nothing booted or written — or the payload refused a run's arguments in the guest, where the
/// sweep stopped at once with its words and its journal; 3 the journal could not be written (full disk, I/O error,
/// read-only file system): the sweep stopped, its guests are gone, `--resume` continues it
/// once the cause is gone; 4 the sweep finished with run slots that have no valid result;
/// 130 / 143 stopped by SIGINT / SIGTERM.
pub mod exit {
    pub const ERROR: u8 = 1;
    pub const BAD_INPUT: u8 = 2;
    pub const JOURNAL_WRITE_FAILED: u8 = 3;
    pub const INCOMPLETE: u8 = 4;
}

pub fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(i) = e.downcast_ref::<Interrupted>() {
        return i.code;
    }
    if e.chain().any(|c| c.is::<crate::journal::JournalWriteFailed>()) {
        return exit::JOURNAL_WRITE_FAILED;
    }
    if e.chain().any(|c| c.is::<SweepIncomplete>()) {
        return exit::INCOMPLETE;
    }
    let bad = e.chain().any(|c| {
        c.is::<BadInput>()
            || c.is::<crate::journal::NotAJournal>()
            || c.is::<crate::scenario::ScenarioError>()
            || c.is::<crate::scenario::ScenarioErrors>()
            || c.is::<crate::sweep::scheduler::PayloadRefusedArgs>()
            || c.is::<crate::report::NotOneMatrix>()
    });
    if bad { exit::BAD_INPUT } else { exit::ERROR }
}

/// The results directory's log file, set once a sweep has one; until then only stderr logs.
static LOG_FILE: std::sync::OnceLock<std::sync::Mutex<std::fs::File>> = std::sync::OnceLock::new();

/// Sends every log line at debug level and above to `path` from now on.
pub fn log_to_file(path: &std::path::Path) -> anyhow::Result<()> {
    // Appended to: a second resume keeps what the first one logged.
    let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let _ = LOG_FILE.set(std::sync::Mutex::new(f));
    Ok(())
}

pub(crate) struct LogFileWriter;

impl std::io::Write for LogFileWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match LOG_FILE.get() {
            Some(f) => f
                .lock()
                .map_err(|_| std::io::Error::other("log file lock poisoned"))?
                .write(buf),
            None => Ok(buf.len()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Prints to stdout; a closed pipe (`ocrig report DIR | head`) is not an error.
pub fn out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
