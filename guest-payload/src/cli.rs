//! Command line of `ocrig-payload`, in the library so the host can validate a scenario's
//! workload arguments with the very parser the guest will use.

use clap::{Parser, Subcommand};

use crate::workloads;

#[derive(Debug, Parser)]
#[command(
    name = "ocrig-payload",
    version,
    about = "ocrig guest payload: lock and scheduler workloads"
)]
pub struct Cli {
    /// Wait for a line on standard input before starting (the host's "go" signal, so every
    /// guest starts at the same moment).
    #[arg(long, global = true)]
    pub go_stdin: bool,
    /// Pretty-print the JSON report.
    #[arg(long, global = true)]
    pub pretty: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generic lock microbenchmark over any algorithm: throughput, contention, fairness, latency.
    Lock(workloads::lock::Args),
    /// List the lock algorithms and workloads.
    List,
}

impl Command {
    /// The workload name as it appears in reports (None for non-workload commands).
    pub fn workload_name(&self) -> Option<&'static str> {
        match self {
            Command::Lock(_) => Some("lock"),
            Command::List => None,
        }
    }
}

/// Runs a workload command and returns its report (None for `list`).
pub fn run(command: &Command) -> anyhow::Result<Option<crate::report::Report>> {
    Ok(match command {
        Command::Lock(a) => Some(workloads::lock::run(a)?),
        Command::List => None,
    })
}

/// Checks a workload invocation (`["lock", "--algo", "tas", ...]`) without running it.
pub fn validate(args: &[String]) -> Result<Command, clap::Error> {
    let argv = std::iter::once("ocrig-payload".to_string()).chain(args.iter().cloned());
    Cli::try_parse_from(argv).map(|c| c.command)
}

/// Text printed by `ocrig-payload list`.
pub fn list_text() -> String {
    let mut s = String::from("lock algorithms (--algo):\n");
    for info in crate::locks::ALGOS {
        s.push_str(&format!("  {:<10} {}\n", info.name, info.blurb));
    }
    s.push_str("workloads:\n");
    use clap::CommandFactory;
    for sub in Cli::command().get_subcommands() {
        if sub.get_name() != "list" && sub.get_name() != "help" {
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            s.push_str(&format!("  {:<12} {}\n", sub.get_name(), about));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Result<Command, clap::Error> {
        validate(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn validates_known_and_rejects_bad_arguments() {
        assert!(v(&["lock", "--algo", "tas", "--threads", "2"]).is_ok());
        let e = v(&["lock", "--threads", "0"]).unwrap_err().to_string();
        assert!(e.contains("threads"), "{e}");
        let e = v(&["lock", "--algo", "bogus"]).unwrap_err().to_string();
        assert!(e.contains("unknown lock algorithm"), "{e}");
        assert!(v(&["frobnicate"]).is_err());
    }

    #[test]
    fn list_names_every_algorithm() {
        let text = list_text();
        for name in crate::locks::names() {
            assert!(text.contains(name));
        }
        assert!(text.contains("lock"));
    }
}
