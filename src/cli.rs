//! Command-line definitions (clap). Behaviour lives in `commands/`. Every argument has a doc
//! comment and every subcommand an "Examples:" block: `--help`, the man pages (`ocrig man`) and
//! the shell completions (`ocrig completions`) are all generated from these definitions.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `ocrig --version`: the version and the payload it deploys (the `payload_sha256` journaled).
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\npayload sha256 ",
    env!("OCRIG_PAYLOAD_SHA256")
);

/// Said after the top-level help: the commonest commands, and the exit statuses.
const TOP_EXAMPLES: &str = "\
Examples:
  ocrig doctor                                     # what this host is and what ocrig will do on it
  ocrig validate scenarios/*/*.yaml                # check scenarios without booting anything
  ocrig run scenarios/examples/ticket-vs-tas.yaml  # run a sweep; results in results/<name>-<time>/
  ocrig report results/ticket-vs-tas-20261206T120000Z --format md
  ocrig compare results/base-20261206T120000Z results/patched-20261207T090000Z

Exit status: 0 success; 1 failure (a sweep, a report or a measurement went wrong, or the
gate of `--fail-on` failed); 2 bad input (a scenario, a flag or a directory refused; nothing
was booted).";

const RUN_EXAMPLES: &str = "\
Examples:
  ocrig run scenarios/examples/ticket-vs-tas.yaml
  ocrig run scenarios/examples/ticket-vs-tas.yaml --results /var/tmp/ocrig --quiet
  ocrig run scenarios/examples/ticket-vs-tas.yaml --set host.cpus=16 --set runs=5
  ocrig run --resume results/ticket-vs-tas-20261206T120000Z
  ocrig run scenarios/ci/smoke.yaml --backend host   # no guests: the workloads on this host";

const VALIDATE_EXAMPLES: &str = "\
Examples:
  ocrig validate scenarios/examples/ticket-vs-tas.yaml
  ocrig validate scenarios/*/*.yaml
  ocrig validate scenarios/examples/ticket-vs-tas.yaml --set host.cpus=16 --set 'levels=[1.0, 2.0]'
  ocrig validate --json scenarios/*/*.yaml | jq '.[] | select(.ok | not)'";

const REPORT_EXAMPLES: &str = "\
Examples:
  ocrig report results/ticket-vs-tas-20261206T120000Z
  ocrig report results/ticket-vs-tas-20261206T120000Z --format md > report.md
  ocrig report results/ticket-vs-tas-20261206T120000Z --format json --margin 0.02
  ocrig report results/two-hosts-20261206T120000Z --by-host
  ocrig report results/ticket-vs-tas-20261206T120000Z --fail-on worse   # CI gate: exit 1 if shown worse";

const COMPARE_EXAMPLES: &str = "\
Examples:
  ocrig compare results/base-20261206T120000Z results/patched-20261207T090000Z
  ocrig compare base patch1 patch2 patch3
  ocrig compare A B --format html > compare.html
  ocrig compare base patched --fail-on worse:5%   # CI: exit 1 if shown >5 % worse";

const IMAGE_EXAMPLES: &str = "\
Examples:
  ocrig image build
  ocrig image build --kernel 6.1.0-41-amd64
  ocrig image build --package sysbench --package stress-ng";

const DOCTOR_EXAMPLES: &str = "\
Examples:
  ocrig doctor
  ocrig doctor --json | jq .accel
  ocrig doctor --measure
  ocrig doctor --measure --backend libvirt --results /var/tmp/ocrig";

const WORKLOADS_EXAMPLES: &str = "\
Examples:
  ocrig workloads
  ocrig workloads lock
  ocrig workloads --json | jq '.[].name'";

const SCHEMA_EXAMPLES: &str = "\
Examples:
  ocrig schema > ocrig-scenario.schema.json
  ocrig schema | jq '.properties | keys'";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  ocrig completions bash > ~/.local/share/bash-completion/completions/ocrig
  ocrig completions zsh > ~/.zfunc/_ocrig
  ocrig completions fish > ~/.config/fish/completions/ocrig.fish";

const MAN_EXAMPLES: &str = "\
Examples:
  ocrig man ~/.local/share/man/man1 && man ocrig-run
  sudo ocrig man /usr/local/share/man/man1";

#[derive(Debug, Parser)]
#[command(
    name = "ocrig",
    version,
    long_version = LONG_VERSION,
    about = "KVM vCPU-overcommit test rig: real guests, lock workloads, overcommit tables",
    after_help = TOP_EXAMPLES
)]
pub struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// When to colour conclusions: auto (stdout a terminal and NO_COLOR unset or empty), always
    /// or never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value = "auto")]
    pub color: crate::color::ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a scenario's sweep: boot guests per level and variant, run workloads, journal results.
    #[command(after_help = RUN_EXAMPLES)]
    Run {
        /// Scenario YAML file (optional with --resume: the results directory keeps a copy).
        #[arg(required_unless_present = "resume", value_name = "SCENARIO")]
        scenario: Option<PathBuf>,
        /// Parent directory of the results directory (which is named <scenario name>-<UTC time>).
        #[arg(long, value_name = "DIR", default_value = "results")]
        results: PathBuf,
        /// Continue an interrupted sweep in this results directory: finished runs are kept,
        /// the missing ones are run and appended to the same journal.
        #[arg(long, value_name = "DIR")]
        resume: Option<PathBuf>,
        /// Run on this backend instead of the scenario's.
        #[arg(long, value_enum)]
        backend: Option<crate::scenario::BackendKind>,
        /// No progress at all: neither the bar on a terminal nor, without one (a log file, CI,
        /// nohup), the plain progress line printed about once a minute.
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
        /// Override a field of the scenario before it is checked: KEY is a dotted path into its
        /// YAML (a number indexes a list), VALUE is read as YAML, e.g. --set host.cpus=16,
        /// --set 'levels=[1.0, 2.0]', --set workloads.0.args.hold-ns=4000. Repeatable, applied
        /// in order. The results directory keeps the scenario as overridden and
        /// the journal's header the flags; a --resume runs that copy (a --set given to a resume
        /// changes it, as any change of the scenario does).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = crate::scenario::overrides::parse)]
        sets: Vec<crate::scenario::overrides::Override>,
    },
    /// Check scenario files without booting anything.
    #[command(after_help = VALIDATE_EXAMPLES)]
    Validate {
        /// Scenario YAML files: each is loaded, checked against this host and planned.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Print one JSON array on stdout, an object per file: {"file", "ok": true, "plan"} or
        /// {"file", "ok": false, "errors": [{"file", "line", "column", "field", "message"}]}.
        /// The exit status is as without it (2 when any file is refused).
        #[arg(long)]
        json: bool,
        /// Override a field of the scenario before it is checked: KEY is a dotted path into its
        /// YAML (a number indexes a list), VALUE is read as YAML, e.g. --set host.cpus=16,
        /// --set 'levels=[1.0, 2.0]', --set workloads.0.args.hold-ns=4000. Repeatable, applied
        /// in order. The same overrides apply to every file.
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = crate::scenario::overrides::parse)]
        sets: Vec<crate::scenario::overrides::Override>,
    },
    /// Render reports from a results directory's journal.
    #[command(after_help = REPORT_EXAMPLES)]
    Report {
        /// A results directory as `ocrig run` made it (results/<name>-<time>), holding
        /// journal.jsonl.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Output format, printed on stdout.
        #[arg(long, value_enum, default_value = "table")]
        format: crate::report::Format,
        /// Split every table by host (a sweep over several hosts): each variant becomes
        /// `variant@host`, compared against the baseline on the first host.
        #[arg(long)]
        by_host: bool,
        /// Equivalence margin, a fraction in (0, 1): "equivalent" when both one-sided tests reject
        /// at the row's Holm-adjusted level, i.e. its (1 − 2α) interval lies within
        /// [1/(1 + margin), 1 + margin] (default: the scenario's `margin`, else 0.05). A margin
        /// other than the one the sweep fixed before its data (the scenario's, or the 5 % an
        /// `until: concluded` sweep stopped at) marks every conclusion post hoc.
        #[arg(long, value_parser = margin_fraction)]
        margin: Option<f64>,
        /// A CI gate: exit 1 when a comparison is shown worse than the baseline (its conclusion
        /// `differs`, its interval wholly on the worse side), by more than MARGIN where given
        /// (`worse:5%` or `worse:0.05`: under 95 % of the baseline's figure where higher is
        /// better, over 105 % where lower is); else 0. A row not concluded passes, and the gate
        /// says how many there were.
        #[arg(long, value_name = "worse[:MARGIN]")]
        fail_on: Option<crate::report::gate::FailOn>,
    },
    /// Compare results directories of the same matrix: the first as base, each other's
    /// variants against it, in one table.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare {
        /// The base first (e.g. a sweep on the unpatched kernel), then one or more results
        /// directories of the same levels and workloads (e.g. one per patch of a series).
        #[arg(value_name = "DIR", num_args = 2.., required = true)]
        dirs: Vec<PathBuf>,
        /// Output format, printed on stdout.
        #[arg(long, value_enum, default_value = "table")]
        format: crate::report::Format,
        /// Equivalence margin, as for `report`.
        #[arg(long, value_parser = margin_fraction)]
        margin: Option<f64>,
        /// A CI gate, as for `report`: exit 1 when a comparison is shown worse than the base.
        #[arg(long, value_name = "worse[:MARGIN]")]
        fail_on: Option<crate::report::gate::FailOn>,
    },
    /// Guest image management.
    #[command(after_help = IMAGE_EXAMPLES)]
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Describe this host: CPUs, accelerator choice, QEMU/libvirt versions, cached images.
    #[command(after_help = DOCTOR_EXAMPLES)]
    Doctor {
        /// Then run a short sweep with known answers (an A/A pair and a known effect, about two
        /// minutes) and say whether this host tells them apart; exit 1 when it does not.
        #[arg(long)]
        measure: bool,
        /// With --measure: the parent directory of its results directory.
        #[arg(long, value_name = "DIR", default_value = "results", requires = "measure")]
        results: PathBuf,
        /// With --measure: run on this backend instead of QEMU.
        #[arg(long, value_enum, requires = "measure")]
        backend: Option<crate::scenario::BackendKind>,
        /// Print the host's facts as one JSON object on stdout instead of lines (not supported
        /// with --measure).
        #[arg(long, conflicts_with = "measure")]
        json: bool,
    },
    /// What the guest payload offers a scenario: every workload with its arguments (default,
    /// unit) and its metrics (which way is better).
    #[command(after_help = WORKLOADS_EXAMPLES)]
    Workloads {
        /// Just this workload (a scenario's `command:`, e.g. lock); without it, every one.
        #[arg(value_name = "NAME")]
        name: Option<String>,
        /// Print one JSON array on stdout, an object per workload: {"name", "about", "args":
        /// [{"name", "default", "unit", "flag", "values", "about"}], "metrics": [{"name",
        /// "conditional", "better", "about", "across_slices" (sum, mean or remade: how a
        /// sliced run's variant reports it from its slices)}], "inputs", "kernel_options"}.
        #[arg(long)]
        json: bool,
    },
    /// Print a JSON Schema (draft 2020-12) of the scenario file on stdout, for an editor's YAML
    /// plugin: `# yaml-language-server: $schema=ocrig-scenario.schema.json` atop a scenario.
    #[command(after_help = SCHEMA_EXAMPLES)]
    Schema,
    /// Print a shell completion script for ocrig on stdout.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// The shell to complete in.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Write ocrig's man pages (ocrig.1 and one per subcommand, e.g. ocrig-run.1) into a directory.
    #[command(after_help = MAN_EXAMPLES)]
    Man {
        /// Directory to write the pages into (created if missing; existing pages replaced).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build (or reuse from the cache) the guest image for a Debian kernel release.
    #[command(after_help = IMAGE_EXAMPLES)]
    Build {
        /// Debian kernel release (e.g. 6.1.0-41-amd64), or "default".
        #[arg(long, value_name = "RELEASE", default_value = "default")]
        kernel: String,
        /// A Debian package to put in the guest with its dependencies, as `guest.packages`
        /// does (repeatable).
        #[arg(long = "package", value_name = "NAME")]
        packages: Vec<String>,
    },
}

/// A margin: a fraction strictly between 0 and 1.
fn margin_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(m) if m > 0.0 && m < 1.0 => Ok(m),
        _ => Err(format!("'{s}' is not a fraction in (0, 1): e.g. 0.05 for ±5 %")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    /// Every argument and positional of every (sub)command says what it is, and every subcommand
    /// shows an example.
    #[test]
    fn every_argument_is_documented_and_every_subcommand_has_examples() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path}: argument {id} has no help"));
                }
            }
            if path != "ocrig" || cmd.get_after_help().is_some() {
                let examples = cmd
                    .get_after_help()
                    .or(cmd.get_after_long_help())
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                if !examples.contains("Examples:\n  ocrig ") {
                    missing.push(format!("{path}: no Examples: block"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() == "help" {
                    continue;
                }
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {}: no about", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "ocrig", &mut missing);
        assert!(missing.is_empty(), "{missing:#?}");
    }

    /// The examples are commands ocrig accepts (flags and values, not the files they name).
    #[test]
    fn the_examples_parse() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut texts = vec![cmd.get_after_help().unwrap().to_string()];
        fn collect(cmd: &clap::Command, texts: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                if let Some(h) = sub.get_after_help() {
                    texts.push(h.to_string());
                }
                collect(sub, texts);
            }
        }
        collect(&cmd, &mut texts);
        let mut n = 0;
        for text in &texts {
            for line in text.lines().map(str::trim) {
                let rest = line.strip_prefix("sudo ").unwrap_or(line);
                if !rest.starts_with("ocrig ") {
                    continue;
                }
                // Up to a comment, a pipe, a redirection or a second command.
                let command = rest.split(['#', '|', '>', '&']).next().unwrap();
                let words = shlex::split(command).unwrap();
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("example `{line}` does not parse: {e}");
                }
                n += 1;
            }
        }
        assert!(n >= 20, "{n} examples");
    }

    #[test]
    fn color_is_global_and_doctor_json_is_refused_with_measure() {
        let cli = Cli::try_parse_from(["ocrig", "report", "r", "--color", "never"]).unwrap();
        assert_eq!(cli.color, crate::color::ColorChoice::Never);
        let cli = Cli::try_parse_from(["ocrig", "doctor"]).unwrap();
        assert_eq!(cli.color, crate::color::ColorChoice::Auto);
        let e = Cli::try_parse_from(["ocrig", "doctor", "--measure", "--json"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        assert_eq!(e.exit_code(), 2);
    }
}
