//! One function per subcommand: parses what the command line gave and dispatches. A sweep's
//! orchestration lives in [`crate::orchestrate`].

mod completions;
mod doctor;
mod doctor_measure;
mod image;
pub mod schema;
mod validate;
mod workloads;

use crate::cli::{Command, ImageCommand};
use crate::orchestrate::{LogFileWriter, run};
pub use crate::orchestrate::{exit_code, out};

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
                .with_ansi(crate::color::on_stderr())
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

pub fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run {
            scenario,
            results,
            resume,
            backend,
            quiet,
            wait_for_cpus,
            accept_changed,
            sets,
        } => run(&crate::orchestrate::RunArgs {
            scenario,
            results,
            resume,
            backend,
            quiet,
            wait_for_cpus,
            accept_changed,
            sets,
        }),
        Command::Validate { files, json, sets } => validate::validate(&files, json, &sets),
        Command::Report {
            dir,
            format,
            by_host,
            margin,
            fail_on,
        } => {
            // Streamed: each record is digested as it is parsed, never held whole.
            let mut journal = crate::stats::digest::Digested::read(&dir, true)?;
            if by_host {
                journal = crate::report::hosts::split_by_host(&journal);
            }
            let opts = crate::report::ReportOptions {
                margin,
                ..Default::default()
            };
            let (text, gate) = crate::report::render_gated(&journal, format, &opts, fail_on)?;
            out(&text)?;
            // The table ends on its verdict; then where the same with plots is.
            let html = dir.join("report.html");
            if format == crate::report::Format::Table && html.is_file() {
                out(&format!("report: {}\n", html.display()))?;
            }
            gate_outcome(gate)
        }
        Command::Compare {
            dirs,
            format,
            margin,
            fail_on,
        } => {
            let sides = dirs
                .iter()
                .map(|d| crate::stats::digest::Digested::read(d, true))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let name = |p: &std::path::Path| {
                p.file_name()
                    .map_or("?".into(), |n| n.to_string_lossy().into_owned())
            };
            let opts = crate::report::ReportOptions {
                compare_names: Some(dirs.iter().map(|d| name(d)).collect()),
                margin,
                ..Default::default()
            };
            // The kernel note reads the headers only: the base against each other side.
            let header_only = |d: &crate::stats::digest::Digested| crate::journal::Journal {
                header: d.header.clone(),
                runs: Vec::new(),
            };
            for (dir, side) in dirs.iter().zip(&sides).skip(1) {
                eprint!(
                    "{}",
                    crate::report::kernels::compare_note(
                        &dirs[0],
                        &header_only(&sides[0]),
                        dir,
                        &header_only(side)
                    )
                );
            }
            let (text, gate) = crate::report::compare_all(sides, format, &opts, fail_on)?;
            out(&text)?;
            gate_outcome(gate)
        }
        Command::Image {
            command: ImageCommand::Build { kernel, packages },
        } => image::build(&kernel, packages),
        Command::Doctor {
            measure,
            results,
            backend,
            json,
        } => {
            doctor::doctor(json)?;
            if measure {
                println!();
                doctor_measure::measure(&results, backend)?;
            }
            Ok(())
        }
        Command::Workloads { name, json } => workloads::workloads(name.as_deref(), json),
        Command::Schema => schema::schema(),
        Command::Completions { shell } => completions::completions(shell),
        Command::Man { dir } => completions::man(&dir),
    }
}

/// Prints a report's gate (where `--fail-on` asked for one) on stderr; an error that exits 1
/// when it failed.
fn gate_outcome(gate: Option<crate::report::gate::Gate>) -> anyhow::Result<()> {
    let Some(gate) = gate else { return Ok(()) };
    eprint!("{}", gate.text());
    if gate.failed() {
        return Err(crate::report::gate::GateFailed(gate.worse.len()).into());
    }
    Ok(())
}
