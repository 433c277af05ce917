//! One function per subcommand. Errors that mean "your input is wrong" are [`BadInput`].

mod doctor;
mod image;
mod resume;
mod run;
mod run_hosts;
mod validate;

use crate::cli::{Command, ImageCommand};

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

struct LogFileWriter;

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

/// Logs go to stderr (warnings, or more with -v / RUST_LOG) and, once a sweep has a results
/// directory, to its `ocrig.log` at debug level.
pub fn init_logging(verbose: u8) {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let default = match verbose {
        0 => "warn,ocrig=warn",
        1 => "info,ocrig=info",
        _ => "debug",
    };
    let stderr_filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let file_filter = EnvFilter::new("warn,ocrig=debug");
    let _ = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(stderr_filter),
        )
        .with(
            fmt::layer()
                .with_ansi(false)
                .with_writer(|| LogFileWriter)
                .with_filter(file_filter),
        )
        .try_init();
}

/// Prints to stdout; a closed pipe (`ocrig report DIR | head`) is not an error.
pub fn out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

pub fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run {
            scenario,
            results,
            resume,
            backend,
            quiet,
            wait_for_cpus,
        } => run::run(&run::RunArgs {
            scenario,
            results,
            resume,
            backend,
            quiet,
            wait_for_cpus,
        }),
        Command::Validate { files } => validate::validate(&files),
        Command::Report { dir, format, by_host } => {
            let mut journal = crate::sweep::journal::Journal::read(&dir)?;
            if by_host {
                journal = crate::report::hosts::split_by_host(&journal);
            }
            out(&crate::report::render(&journal, format, &Default::default())?)?;
            Ok(())
        }
        Command::Compare { a, b, format } => {
            let ja = crate::sweep::journal::Journal::read(&a)?;
            let jb = crate::sweep::journal::Journal::read(&b)?;
            let name = |p: &std::path::Path| {
                p.file_name()
                    .map_or("?".into(), |n| n.to_string_lossy().into_owned())
            };
            let opts = crate::report::ReportOptions {
                compare_names: Some((name(&a), name(&b))),
                ..Default::default()
            };
            eprint!("{}", crate::report::kernels::compare_note(&a, &ja, &b, &jb));
            out(&crate::report::compare(&ja, &jb, format, &opts)?)?;
            Ok(())
        }
        Command::Image {
            command: ImageCommand::Build { kernel },
        } => image::build(&kernel),
        Command::Doctor => doctor::doctor(),
    }
}
