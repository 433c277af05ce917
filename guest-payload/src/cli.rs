//! Command line of `ocrig-payload`, in the library so the host can validate a scenario's
//! workload arguments with the very parser the guest will use.

use clap::{Parser, Subcommand};

use crate::workloads;

/// A line the host may send a gated payload before `go`: asks for the guest's TSC now.
pub const SYNC_LINE: &str = "sync";
/// How the payload answers [`SYNC_LINE`] on stderr: this, a space, the TSC.
pub const SYNC_ANSWER: &str = "ocrig-payload: sync";
/// What `--tie-after` prints on stderr once everything else is printed: the payload now
/// answers [`SYNC_LINE`]s again, until any other line (or the input's end) lets it exit.
pub const TIE_AFTER_LINE: &str = "ocrig-payload: done, answering sync until told to end";
/// The line the host sends to end the questions after [`TIE_AFTER_LINE`].
pub const TIE_END_LINE: &str = "end";

/// The line after each copy of /proc/stat that `--proc-stat` prints.
pub const PROC_STAT_END: &str = "ocrig-proc-stat-end";

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
    /// Print the guest's /proc/stat on stdout before the ready line (followed by a
    /// [`PROC_STAT_END`] line) and after the run (after an empty line and a [`PROC_STAT_END`]
    /// line), for the host's split of the run's guest CPU: read here, it costs no process of
    /// its own (a fork and exec of `cat` is ~5-15 ms in a TCG guest, on every run).
    #[arg(long, global = true, hide = true)]
    pub proc_stat: bool,
    /// After everything else is printed, print [`TIE_AFTER_LINE`] on stderr and answer the
    /// host's [`SYNC_LINE`]s until another line: the host ties the guest's TSC to its clock
    /// after the run as it did before the go, and so measures the TSC's rate against its own
    /// clock over the run instead of assuming the guest's.
    #[arg(long, global = true, hide = true, requires = "go_stdin")]
    pub tie_after: bool,
    /// The guest kernel's view of the run (lock contention counts, trace events).
    #[command(flatten)]
    pub probe: crate::probe::Options,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Print the catalog as JSON: workloads with the metrics they report and the host files
    /// they read, and the lock algorithms.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generic lock microbenchmark over any algorithm: throughput, contention, fairness, latency.
    Lock(workloads::lock::Args),
    /// rt-tests hackbench / perf sched messaging: groups of senders spraying receivers (time_s).
    Hackbench(workloads::hackbench::Args),
    /// ebizzy 0.3: threads copy random memory chunks and binary-search them (records_per_sec).
    Ebizzy(workloads::ebizzy::Args),
    /// dbench 4: clients replay a client.txt loadfile on a file system (mb_per_sec).
    Dbench(workloads::dbench::Args),
    /// sysbench mutex: random locks from an array, empty loop between (time_s).
    Mutex(workloads::mutex::Args),
    /// Plain futex mutex vs adaptive spin-then-park (kiter_per_sec, futex syscalls).
    Futexlock(workloads::futexlock::Args),
    /// P x T pinned tasks walking and reading sysfs: kernel mutex contention (total_s).
    SysfsMutex(workloads::sysfs_mutex::Args),
    /// Burn CPU on every CPU for a while (the `background: hog` load for other guests).
    Hog(workloads::hog::Args),
    /// The kernel's lock torture module (locktorture) for a while: writes/s and writer fairness
    /// of a kernel lock (needs a guest kernel with CONFIG_LOCK_TORTURE_TEST=m).
    Locktorture(workloads::locktorture::Args),
    /// Any command line (`/bin/sh -c`), its metrics read from its output by pattern, JSON path
    /// or wall time; its exit status checked.
    Exec(workloads::exec::Args),
    /// Several workload command lines (arms) alternating in short slices on one schedule, for
    /// variants that share guests: `slices --slice-ms 300 --period-ms 400 --slices-per-arm 10
    /// -- lock --algo ticket :: lock --algo tas`. Made by the host, not named in a scenario
    /// (hidden: not a workload of the catalogue).
    #[command(hide = true)]
    Slices(crate::slices::Args),
    /// List the lock algorithms and workloads (`--json`: every workload's metrics and inputs).
    List(ListArgs),
}

impl Command {
    /// The workload name as it appears in reports (None for non-workload commands).
    pub fn workload_name(&self) -> Option<&'static str> {
        match self {
            Command::Lock(_) => Some("lock"),
            Command::Hackbench(_) => Some("hackbench"),
            Command::Ebizzy(_) => Some("ebizzy"),
            Command::Dbench(_) => Some("dbench"),
            Command::Mutex(_) => Some("mutex"),
            Command::Futexlock(_) => Some("futexlock"),
            Command::SysfsMutex(_) => Some("sysfs-mutex"),
            Command::Hog(_) => Some("hog"),
            Command::Locktorture(_) => Some("locktorture"),
            Command::Exec(_) => Some("exec"),
            Command::Slices(_) => Some(crate::slices::SLICED_WORKLOAD),
            Command::List(_) => None,
        }
    }

    /// Checks the parser cannot make (arguments that are each valid but do not fit together),
    /// as a clap error, so the host's scenario validation and the payload refuse them alike.
    pub fn check(&self) -> Result<(), clap::Error> {
        let conflict = match self {
            Command::Mutex(a) => a.check().err(),
            Command::Locktorture(a) => a.check().err(),
            Command::Exec(a) => a.check().err(),
            Command::Slices(a) => a.commands().err(),
            _ => None,
        };
        match conflict {
            None => Ok(()),
            Some(msg) => {
                use clap::CommandFactory;
                Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg))
            }
        }
    }
}

/// Runs a workload command and returns its report (None for `list`).
pub fn run(command: &Command) -> anyhow::Result<Option<crate::report::Report>> {
    Ok(match command {
        Command::Lock(a) => Some(workloads::lock::run(a)?),
        Command::Hackbench(a) => Some(workloads::hackbench::run(a)?),
        Command::Ebizzy(a) => Some(workloads::ebizzy::run(a)?),
        Command::Hog(a) => Some(workloads::hog::run(a)?),
        Command::Dbench(a) => Some(workloads::dbench::run(a)?),
        Command::Mutex(a) => Some(workloads::mutex::run(a)?),
        Command::Futexlock(a) => Some(workloads::futexlock::run(a)?),
        Command::SysfsMutex(a) => Some(workloads::sysfs_mutex::run(a)?),
        Command::Locktorture(a) => Some(workloads::locktorture::run(a)?),
        Command::Exec(a) => Some(workloads::exec::run(a)?),
        Command::Slices(a) => Some(crate::slices::run(a)?),
        Command::List(_) => None,
    })
}

/// Checks a workload invocation (`["lock", "--algo", "tas", ...]`) without running it.
pub fn validate(args: &[String]) -> Result<Command, clap::Error> {
    let argv = std::iter::once("ocrig-payload".to_string()).chain(args.iter().cloned());
    let command = Cli::try_parse_from(argv)?.command;
    command.check()?;
    Ok(command)
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
        if sub.get_name() != "list" && sub.get_name() != "help" && !sub.is_hide_set() {
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
        assert!(v(&["lock", "--hold-sample-rate", "1", "--stretch-threshold-ns", "1"]).is_ok());
        assert!(v(&["lock", "--no-hold-sampling"]).is_ok());
        let e = v(&["lock", "--threads", "0"]).unwrap_err().to_string();
        assert!(e.contains("threads"), "{e}");
        let e = v(&["lock", "--algo", "bogus"]).unwrap_err().to_string();
        assert!(e.contains("unknown lock algorithm"), "{e}");
        assert!(v(&["frobnicate"]).is_err());
    }

    #[test]
    fn every_workload_validates_and_rejects_bad_arguments() {
        for ok in [
            &["hackbench", "--groups", "2", "--fds", "5", "--pipe", "--threads"][..],
            &[
                "ebizzy",
                "--chunks",
                "4",
                "--threads",
                "2",
                "--seconds",
                "0.5",
                "--mmap",
            ],
            &[
                "dbench",
                "--dir",
                "/tmp",
                "--clients",
                "2",
                "--seconds",
                "5",
                "--warmup",
                "1",
            ],
            &[
                "mutex",
                "--algo",
                "pthread",
                "--mutex-num",
                "16",
                "--mutex-locks",
                "100",
            ],
            &["futexlock", "--mode", "plain", "--threads", "3"],
            // Guest paths need not exist where the host validates a scenario: checked at run time.
            &[
                "dbench",
                "--dir",
                "/guest-only/scratch",
                "--loadfile",
                "/guest-only/client.txt",
            ],
            &["sysfs-mutex", "--root", "/guest-only/sys"],
            &[
                "sysfs-mutex",
                "--cpus",
                "2",
                "--tasks-per-cpu",
                "3",
                "--rounds",
                "2",
            ],
        ] {
            let c = v(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
            assert_eq!(c.workload_name(), Some(ok[0]));
        }
        for (bad, needle) in [
            (&["hackbench", "--groups", "0"][..], "groups"),
            (&["hackbench", "--fds", "0"], "fds"),
            (&["ebizzy", "--threads", "0"], "threads"),
            (&["ebizzy", "--seconds", "0"], "seconds"),
            (&["dbench", "--clients", "0", "--dir", "/tmp"], "clients"),
            (&["mutex", "--algo", "bogus"], "unknown lock algorithm"),
            (&["mutex", "--threads", "0"], "threads"),
            (&["futexlock", "--mode", "sometimes"], "mode"),
            (
                &["mutex", "--contended-delay-ns", "100"],
                "--acquire trylock-first",
            ),
            (&["sysfs-mutex", "--root", ""], "empty path"),
            (&["sysfs-mutex", "--tasks-per-cpu", "0"], "tasks-per-cpu"),
            (&["lock", "--hold-sample-rate", "0"], "hold-sample-rate"),
            (&["lock", "--hold-sample-rate", "1.5"], "hold-sample-rate"),
            (&["lock", "--hold-sample-rate", "nan"], "hold-sample-rate"),
            (&["lock", "--stretch-threshold-ns", "0"], "stretch-threshold-ns"),
            (&["lock", "--stretch-threshold-ns", "-5"], "stretch-threshold-ns"),
            (
                &["lock", "--stretch-threshold-ns", "750001"],
                "stretch-threshold-ns",
            ),
        ] {
            let e = v(bad).expect_err(&format!("{bad:?} accepted")).to_string();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
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
