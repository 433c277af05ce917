//! Orchestration of `ocrig run`: preflight (hosts, kernels, accelerator, payload, images), CPU
//! claims, the results directory, then the sweep on one host or several, and its closing
//! report. `commands/` only parses and dispatches to here.

mod claims;
mod hosts;
pub mod preflight;
mod results_dir;
mod resume;
pub mod run;

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

pub fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(i) = e.downcast_ref::<Interrupted>() {
        return i.code;
    }
    let bad = e.chain().any(|c| {
        c.is::<BadInput>()
            || c.is::<crate::scenario::ScenarioError>()
            || c.is::<crate::scenario::ScenarioErrors>()
    });
    if bad { 2 } else { 1 }
}

/// The results directory's log file, set once a sweep has one; until then only stderr logs.
static LOG_FILE: std::sync::OnceLock<std::sync::Mutex<std::fs::File>> = std::sync::OnceLock::new();

/// Sends every log line at debug level and above to `path` from now on.
pub fn log_to_file(path: &std::path::Path) -> anyhow::Result<()> {
    let f = std::fs::File::create(path)?;
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
