//! Command-line definitions (clap). Behaviour lives in `commands/`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `ocrig --version`: the version and the payload it deploys (the `payload_sha256` journaled).
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\npayload sha256 ",
    env!("OCRIG_PAYLOAD_SHA256")
);

#[derive(Debug, Parser)]
#[command(
    name = "ocrig",
    version,
    long_version = LONG_VERSION,
    about = "KVM vCPU-overcommit test rig: real guests, lock workloads, overcommit tables"
)]
pub struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a scenario's sweep: boot guests per level and variant, run workloads, journal results.
    Run {
        /// Scenario YAML file (optional with --resume: the results directory keeps a copy).
        #[arg(required_unless_present = "resume")]
        scenario: Option<PathBuf>,
        /// Parent directory of the results directory.
        #[arg(long, default_value = "results")]
        results: PathBuf,
        /// Continue an interrupted sweep in this results directory: finished runs are kept,
        /// the missing ones are run and appended to the same journal.
        #[arg(long, value_name = "DIR")]
        resume: Option<PathBuf>,
        /// Run on this backend instead of the scenario's.
        #[arg(long, value_enum)]
        backend: Option<crate::scenario::BackendKind>,
        /// No progress bar (for CI and scripts).
        #[arg(long)]
        quiet: bool,
        /// When a live sweep holds any of this scenario's host CPUs, wait for it instead of
        /// refusing (the default: two sweeps on the same CPUs spoil each other's numbers).
        #[arg(long)]
        wait_for_cpus: bool,
        /// With --resume: continue although the scenario, backend, accelerator, CPUs, guest
        /// counts, kernels, payload or images differ from what the sweep ran on (refused
        /// otherwise); the journal records what was accepted.
        #[arg(long, requires = "resume")]
        accept_changed: bool,
    },
    /// Check scenario files without booting anything.
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Render reports from a results directory's journal.
    Report {
        dir: PathBuf,
        #[arg(long, value_enum, default_value = "table")]
        format: crate::report::Format,
        /// Split every table by host (a sweep over several hosts): each variant becomes
        /// `variant@host`, compared against the baseline on the first host.
        #[arg(long)]
        by_host: bool,
        /// Equivalence margin, a fraction in (0, 1): "equivalent" when the ratio's interval lies
        /// within 1 ± margin (default: the scenario's `margin`, else 0.05).
        #[arg(long, value_parser = margin_fraction)]
        margin: Option<f64>,
    },
    /// Compare two results directories of the same matrix: A as base, B as patched.
    Compare {
        a: PathBuf,
        b: PathBuf,
        #[arg(long, value_enum, default_value = "table")]
        format: crate::report::Format,
        /// Equivalence margin, as for `report`.
        #[arg(long, value_parser = margin_fraction)]
        margin: Option<f64>,
    },
    /// Guest image management.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Describe this host: CPUs, accelerator choice, QEMU/libvirt versions, cached images.
    Doctor {
        /// Then run a short sweep with known answers (an A/A pair and a known effect, about two
        /// minutes) and say whether this host tells them apart; exit 1 when it does not.
        #[arg(long)]
        measure: bool,
        /// With --measure: the parent directory of its results directory.
        #[arg(long, default_value = "results", requires = "measure")]
        results: PathBuf,
        /// With --measure: run on this backend instead of QEMU.
        #[arg(long, value_enum, requires = "measure")]
        backend: Option<crate::scenario::BackendKind>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build (or reuse from the cache) the guest image for a Debian kernel release.
    Build {
        /// Debian kernel release (e.g. 6.1.0-41-amd64), or "default".
        #[arg(long, default_value = "default")]
        kernel: String,
    },
}

/// A margin: a fraction strictly between 0 and 1.
fn margin_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m > 0.0 && m < 1.0 => Ok(m),
        _ => Err(format!("'{s}' is not a fraction in (0, 1): e.g. 0.05 for ±5 %")),
    }
}
