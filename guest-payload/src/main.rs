//! `ocrig-payload`: runs one workload and prints its JSON report on stdout.
//! Exit status: 0 success, 1 the workload failed, 2 bad arguments (unparsable, or unusable here
//! such as a missing directory), 3 the run completed but broke one of its own physics checks
//! (the full report is still printed on stdout, and one `ocrig-payload: check failed: ` line
//! per failed check on stderr).

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::Parser;
use ocrig_payload::cli::{self, Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Err(e) = cli.command.check() {
        let _ = e.print();
        return ExitCode::from(2);
    }
    if let Command::List(list) = &cli.command {
        if list.json {
            println!("{}", ocrig_payload::catalog::to_json());
        } else {
            print!("{}", cli::list_text());
        }
        return ExitCode::SUCCESS;
    }
    if cli.proc_stat {
        print_proc_stat(false);
    }
    let code = run(&cli);
    if cli.proc_stat {
        print_proc_stat(true);
    }
    if cli.tie_after {
        eprintln!("{}", cli::TIE_AFTER_LINE);
        let _ = answer_syncs();
    }
    code
}

/// The guest's TSC for each [`cli::SYNC_LINE`] on stdin, on stderr, until any other line or
/// the input's end; returns that line (empty at the end).
fn answer_syncs() -> std::io::Result<String> {
    let mut stdin = std::io::stdin().lock();
    loop {
        let mut line = String::new();
        stdin.read_line(&mut line)?;
        if line.trim_end() != cli::SYNC_LINE {
            return Ok(line);
        }
        let tsc = ocrig_payload::preempt_sample::ticks();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{} {tsc}", cli::SYNC_ANSWER);
        let _ = err.flush();
    }
}

/// The guest's /proc/stat for the host, framed as `--proc-stat` says; what cannot be read
/// is said in its place (the host then has no guest CPU split for the run, and says why).
fn print_proc_stat(after: bool) {
    use ocrig_payload::cli::PROC_STAT_END;
    let stat = std::fs::read_to_string("/proc/stat")
        .unwrap_or_else(|e| format!("ocrig-payload: reading /proc/stat: {e}\n"));
    let mut out = std::io::stdout().lock();
    let _ = if after {
        write!(out, "\n{PROC_STAT_END}\n{stat}")
    } else {
        writeln!(out, "{stat}{PROC_STAT_END}")
    };
    let _ = out.flush();
}

/// Everything after the arguments were accepted: the go signal, the workload, its report.
fn run(cli: &Cli) -> ExitCode {
    if cli.go_stdin {
        // Tell the host we are ready, then block until it says go. Before it, the host may ask
        // for the TSC any number of times (`sync`): each answer, timed by the host between its
        // question and the answer, ties this guest's TSC to the host's clock.
        eprintln!("ocrig-payload: ready");
        if answer_syncs().is_err() {
            eprintln!("ocrig-payload: error: reading the go signal failed");
            return ExitCode::from(1);
        }
    }
    // Only workloads get a probe (not `list`); a trace event the kernel lacks is bad input here.
    let probe = match ocrig_payload::probe::Session::start(&cli.probe) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("ocrig-payload: error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut outcome = cli::run(&cli.command);
    probe.finish(outcome.as_mut().ok().and_then(Option::as_mut));
    match outcome {
        Ok(Some(report)) => {
            let text = if cli.pretty {
                serde_json::to_string_pretty(&report)
            } else {
                serde_json::to_string(&report)
            };
            let mut out = std::io::stdout().lock();
            match text.map(|t| writeln!(out, "{t}")) {
                Ok(Ok(())) => {
                    let failures = ocrig_payload::checks::failure_lines(&report.checks);
                    for line in &failures {
                        eprintln!("{line}");
                    }
                    if failures.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(ocrig_payload::checks::EXIT_CHECK_FAILED)
                    }
                }
                _ => ExitCode::from(1),
            }
        }
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ocrig-payload: error: {e:#}");
            // Unusable arguments (e.g. a missing directory) are bad input like a parse error.
            let bad_input = e.chain().any(|c| c.is::<ocrig_payload::workloads::BadInput>());
            ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}
