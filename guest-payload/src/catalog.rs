//! What each workload reports and needs, declared once: the metric names it may put in its
//! report's `metrics`, and the host files it reads in the guest. The host validates a
//! scenario's `metric:` against this list (so a sweep never runs without its headline number)
//! and deploys every declared input next to the payload; `ocrig-payload list --json` prints it.
//!
//! Keep it in step with the workloads: `tests::every_reported_metric_is_declared` runs every
//! workload on a tiny configuration and fails on a metric that is reported but not declared.

use serde::Serialize;

/// A metric a workload may report.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct MetricSpec {
    /// The key in `metrics`. A `*` stands for any run of characters (e.g. `*_p99_ms` for
    /// dbench's per-operation latencies, whose names depend on the loadfile).
    pub name: &'static str,
    /// True when the workload reports it only under some arguments (say, futex counts only
    /// for algorithms that issue futex calls themselves).
    pub conditional: bool,
    /// Which way is an improvement: a scenario comparing variants by it says the same in its
    /// workload's `better:`.
    pub better: Better,
    pub about: &'static str,
    /// How a sliced run's arm reports it from its slices' values.
    pub across_slices: AcrossSlices,
}

/// How an arm of a sliced run ([`crate::slices`]) reports a metric from its slices.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AcrossSlices {
    /// A total over the run (a count, CPU time): the slices' sum.
    Sum,
    /// A rate or a percentile: the slices' mean (the slices are of equal length, so the mean
    /// of rates is the rate over the arm's time).
    Mean,
    /// A ratio of totals or a per-thread figure (contention, fairness, the stretched shares):
    /// made again from the arm's merged totals, never averaged.
    Remade,
}

/// Which direction of a metric is an improvement.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
    /// A count that describes the run rather than rates it (the fastest thread's operations,
    /// calls made, user time): no comparison by it says better or worse.
    Neither,
}

/// A host file the workload reads inside the guest. The host uploads it (when the host has it)
/// once per boot to `guest_path`, gzip-compressed when `gzip` is set (the workload then reads
/// the `.gz` file), before any run.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct GuestInput {
    pub host_path: &'static str,
    pub guest_path: &'static str,
    pub gzip: bool,
    /// True when the workload cannot run with its default arguments without this file.
    pub required_by_default: bool,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct WorkloadSpec {
    /// The payload subcommand, as a scenario's `command:` names it.
    pub name: &'static str,
    pub metrics: &'static [MetricSpec],
    pub inputs: &'static [GuestInput],
    /// Options the guest kernel must have for it, checked by the host against each variant's
    /// kernel config before anything boots.
    pub kernel_options: &'static [KernelOption],
}

/// A kernel option a workload needs: `CONFIG_<name>=<value>`, and for `m` the module the tree
/// must have built.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct KernelOption {
    pub name: &'static str,
    pub value: &'static str,
    pub module: Option<&'static str>,
}

impl WorkloadSpec {
    /// True when `metric` is one of the names (or patterns) this workload may report.
    pub fn may_report(&self, metric: &str) -> bool {
        self.metrics.iter().any(|m| glob_match(m.name, metric))
    }

    /// The declaration `metric` falls under (its name or a pattern matching it).
    pub fn metric(&self, metric: &str) -> Option<&'static MetricSpec> {
        self.metrics.iter().find(|m| glob_match(m.name, metric))
    }

    /// The declared names, for error messages.
    pub fn metric_names(&self) -> Vec<&'static str> {
        self.metrics.iter().map(|m| m.name).collect()
    }
}

/// A metric always reported, averaged over a sliced run's slices (see [`MetricSpec::total`],
/// [`MetricSpec::remade`]).
const fn m(name: &'static str, better: Better, about: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        conditional: false,
        better,
        about,
        across_slices: AcrossSlices::Mean,
    }
}

/// A metric reported under some arguments only.
const fn cond(name: &'static str, better: Better, about: &'static str) -> MetricSpec {
    MetricSpec {
        conditional: true,
        ..m(name, better, about)
    }
}

impl MetricSpec {
    /// A total over the run: summed over a sliced run's slices.
    const fn total(self) -> Self {
        Self {
            across_slices: AcrossSlices::Sum,
            ..self
        }
    }

    /// A ratio of totals or a per-thread figure: made again from a sliced arm's totals.
    const fn remade(self) -> Self {
        Self {
            across_slices: AcrossSlices::Remade,
            ..self
        }
    }
}

/// Every workload, in `list` order.
pub static WORKLOADS: &[WorkloadSpec] = &[
    WorkloadSpec {
        name: "lock",
        metrics: &[
            m(
                "ops_per_sec",
                Better::Higher,
                "lock+unlock operations per second, all threads",
            ),
            m("ops_total", Better::Higher, "operations in the run").total(),
            m("contended", Better::Lower, "acquisitions whose first try failed").total(),
            m("contention_rate", Better::Lower, "contended / ops_total").remade(),
            m(
                "jain",
                Better::Higher,
                "Jain's fairness index of per-thread operations",
            ).remade(),
            m(
                "min_thread_ops",
                Better::Higher,
                "operations of the slowest thread",
            ).remade(),
            m(
                "max_thread_ops",
                Better::Neither,
                "operations of the fastest thread",
            ).remade(),
            cond(
                "acquire_p99_ns",
                Better::Lower,
                "99th percentile acquisition latency of sampled contended acquisitions (absent when none was contended)",
            ),
            cond(
                "futex_waits",
                Better::Lower,
                "FUTEX_WAIT calls (algorithms whose futex calls the payload counts)",
            ).total(),
            cond(
                "futex_wakes",
                Better::Lower,
                "FUTEX_WAKE calls (algorithms whose futex calls the payload counts)",
            ).total(),
            m(
                "ctxsw_voluntary",
                Better::Lower,
                "voluntary context switches (sleeps) of the workers",
            ).total(),
            m(
                "ctxsw_involuntary",
                Better::Lower,
                "involuntary context switches (preemptions) of the workers",
            ).total(),
            cond(
                "stretched_hold_share",
                Better::Lower,
                "holds longer than the run's median hold by more than --stretch-threshold-ns / holds (absent with --no-hold-sampling)",
            ).remade(),
            cond(
                "stretched_hold_lost_share",
                Better::Lower,
                "time lost in stretched holds (beyond the run's median hold) / the run's time",
            ).remade(),
            cond(
                "stretched_handover_share",
                Better::Lower,
                "hand-overs (release to the waiting next owner's entry) longer than the run's median hand-over by more than --stretch-threshold-ns / hand-overs",
            ).remade(),
            cond(
                "stretched_handover_lost_share",
                Better::Lower,
                "time lost in stretched hand-overs (beyond the run's median hand-over) / the run's time",
            ).remade(),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "hackbench",
        metrics: &[
            m("time_s", Better::Lower, "wall time of the message exchange"),
            m(
                "messages_per_sec",
                Better::Higher,
                "messages delivered per second",
            ),
            m(
                "receiver_jain",
                Better::Higher,
                "Jain's index of receivers' finish times",
            ),
            m(
                "sender_jain",
                Better::Higher,
                "Jain's index of senders' finish times",
            ),
            m("receiver_finish_max_s", Better::Lower, "latest receiver finish"),
            m("receiver_finish_min_s", Better::Lower, "earliest receiver finish"),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "ebizzy",
        metrics: &[
            m("records_per_sec", Better::Higher, "records searched per second"),
            m("records_total", Better::Higher, "records searched").total(),
            m("jain", Better::Higher, "Jain's index of per-thread records").remade(),
            m(
                "min_thread_records",
                Better::Higher,
                "records of the slowest thread",
            ).remade(),
            m(
                "max_thread_records",
                Better::Neither,
                "records of the fastest thread",
            ).remade(),
            m("user_s", Better::Neither, "user CPU time").total(),
            m("sys_s", Better::Lower, "system CPU time").total(),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "dbench",
        metrics: &[
            m("mb_per_sec", Better::Higher, "throughput as dbench counts it"),
            m("ops_per_sec", Better::Higher, "loadfile operations per second"),
            m("max_latency_ms", Better::Lower, "largest operation latency"),
            m("jain", Better::Higher, "Jain's index of per-client operations"),
            cond(
                "*_p99_ms",
                Better::Lower,
                "99th percentile latency per operation kind",
            ),
        ],
        inputs: &[GuestInput {
            host_path: crate::workloads::dbench::CLIENT_TXT_HOST,
            guest_path: crate::workloads::dbench::CLIENT_TXT_GUEST,
            gzip: true,
            required_by_default: true,
        }],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "mutex",
        metrics: &[
            m(
                "time_s",
                Better::Lower,
                "wall time until the last thread finished",
            ),
            m("ops_per_sec", Better::Higher, "lock operations per second"),
            cond(
                "contended",
                Better::Lower,
                "acquisitions whose trylock failed (--acquire trylock-first)",
            ),
            cond(
                "contention_rate",
                Better::Lower,
                "contended / operations (--acquire trylock-first)",
            ),
            m(
                "jain",
                Better::Higher,
                "Jain's index of per-thread progress when the first thread finished",
            ),
            m("time_jain", Better::Higher, "Jain's index of per-thread times"),
            m(
                "progress_jain",
                Better::Higher,
                "Jain's index of per-thread progress (= jain)",
            ),
            m("thread_time_max_s", Better::Lower, "slowest thread's time"),
            m("thread_time_min_s", Better::Lower, "fastest thread's time"),
            cond(
                "futex_waits",
                Better::Lower,
                "FUTEX_WAIT calls (algorithms whose futex calls the payload counts)",
            ),
            cond(
                "futex_wakes",
                Better::Lower,
                "FUTEX_WAKE calls (algorithms whose futex calls the payload counts)",
            ),
            m(
                "ctxsw_voluntary",
                Better::Lower,
                "voluntary context switches (sleeps) of the workers",
            ),
            m(
                "ctxsw_involuntary",
                Better::Lower,
                "involuntary context switches (preemptions) of the workers",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "futexlock",
        metrics: &[
            m(
                "kiter_per_sec",
                Better::Higher,
                "thousand loop iterations per second",
            ),
            m("time_s", Better::Lower, "wall time"),
            m("lock_calls", Better::Neither, "lock calls"),
            m(
                "lock_syscalls",
                Better::Lower,
                "lock calls that entered the kernel (made a FUTEX_WAIT, even one returning EAGAIN)",
            ),
            m("lock_syscall_pct", Better::Lower, "lock syscalls / lock calls, %"),
            m("unlock_calls", Better::Neither, "unlock calls"),
            m(
                "unlock_syscalls",
                Better::Lower,
                "unlock calls that issued a FUTEX_WAKE",
            ),
            m(
                "unlock_syscall_pct",
                Better::Lower,
                "unlock syscalls / unlock calls, %",
            ),
            m(
                "lock_sleeps",
                Better::Lower,
                "lock calls in which a FUTEX_WAIT slept until woken",
            ),
            m("futex_waits", Better::Lower, "FUTEX_WAIT system calls"),
            m(
                "futex_wait_eagain",
                Better::Lower,
                "FUTEX_WAIT calls that returned EAGAIN at once",
            ),
            m("futex_wakes", Better::Lower, "FUTEX_WAKE system calls"),
            m(
                "jain",
                Better::Higher,
                "Jain's index of per-thread progress when the first thread finished",
            ),
            m(
                "progress_jain",
                Better::Higher,
                "Jain's index of per-thread progress (= jain)",
            ),
            m("time_jain", Better::Higher, "Jain's index of per-thread times"),
            m(
                "thread_time_max_s",
                Better::Lower,
                "the last thread's finish time",
            ),
            m(
                "thread_time_min_s",
                Better::Lower,
                "the first thread's finish time",
            ),
            m(
                "finish_spread",
                Better::Lower,
                "the last thread's finish time / the first's (1: all finish together)",
            ),
            m(
                "ctxsw_voluntary",
                Better::Lower,
                "voluntary context switches (sleeps) of the workers",
            ),
            m(
                "ctxsw_involuntary",
                Better::Lower,
                "involuntary context switches (preemptions) of the workers",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "sysfs-mutex",
        metrics: &[
            m("total_s", Better::Lower, "wall time until the last task finished"),
            m("files_per_sec", Better::Higher, "sysfs files read per second"),
            m("task_jain", Better::Higher, "Jain's index of per-task times"),
            m(
                "files_jain",
                Better::Higher,
                "Jain's index of per-task files read",
            ),
            m("task_max_s", Better::Lower, "slowest task's time"),
            m("unreadable", Better::Lower, "files that could not be read"),
            m(
                "jain",
                Better::Higher,
                "Jain's index of per-task files read when the first task finished",
            ),
            m(
                "ctxsw_voluntary",
                Better::Lower,
                "voluntary context switches (sleeps) of the tasks",
            ),
            m(
                "ctxsw_involuntary",
                Better::Lower,
                "involuntary context switches (preemptions) of the tasks",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "hog",
        metrics: &[m(
            "iterations",
            Better::Neither,
            "busy-loop iterations, all threads",
        )],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "locktorture",
        metrics: &[
            m(
                "writes_per_sec",
                Better::Higher,
                "write-side lock acquisitions per second, all writer threads (the kernel's Writes Total / the run)",
            ),
            m(
                "writes_total",
                Better::Higher,
                "write-side lock acquisitions in the run",
            ),
            cond(
                "writes_min_over_max",
                Better::Higher,
                "the least busy writer's acquisitions / the busiest's (1 = fair; the kernel flags ??? under 0.5)",
            ),
            cond(
                "reads_per_sec",
                Better::Higher,
                "read-side acquisitions per second (reader-writer types)",
            ),
            cond(
                "reads_min_over_max",
                Better::Higher,
                "the least busy reader's acquisitions / the busiest's",
            ),
        ],
        inputs: &[],
        kernel_options: &[
            KernelOption {
                name: "LOCK_TORTURE_TEST",
                value: "m",
                module: Some("locktorture"),
            },
            // The run ends by unloading the module (which stops its threads and prints its
            // final statistics).
            KernelOption {
                name: "MODULE_UNLOAD",
                value: "y",
                module: None,
            },
        ],
    },
    WorkloadSpec {
        name: "exec",
        // Named by the scenario: each `--metric NAME=RULE` (the host checks a scenario's
        // `metric:` against its `metrics:` list).
        metrics: &[cond(
            "*",
            Better::Neither,
            "the metrics the scenario's `metrics:` reads from the command's output",
        )],
        inputs: &[],
        kernel_options: &[],
    },
];

/// One argument of a workload, as the payload's command line (its clap definition) declares
/// it: derived from that definition, so it cannot drift from what the payload accepts.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ArgSpec {
    /// The key in a scenario's `args:` (the long option without `--`, e.g. `hold-ns`; `_` for
    /// `-` is accepted there too).
    pub name: String,
    /// What the payload takes when the argument is absent; None: absent means off or derived
    /// (the help says how).
    pub default: Option<String>,
    /// The unit of its value, where it has one (`ns`, `ms`, `s`, `bytes`, `jiffies`, …).
    pub unit: Option<&'static str>,
    /// A switch: `true` passes it, `false` or absent leaves it off.
    pub flag: bool,
    /// The values it accepts, where it names them (a lock algorithm, a mode).
    pub values: Vec<String>,
    pub about: String,
}

impl WorkloadSpec {
    /// What the workload is: its payload subcommand's one-line help.
    pub fn about(&self) -> String {
        use clap::CommandFactory;
        crate::cli::Cli::command()
            .find_subcommand(self.name)
            .and_then(|c| c.get_about().map(|a| a.to_string()))
            .unwrap_or_default()
    }

    /// Its arguments as the payload's parser defines them (hidden debugging ones left out).
    pub fn args(&self) -> Vec<ArgSpec> {
        use clap::CommandFactory;
        let cli = crate::cli::Cli::command();
        let Some(cmd) = cli.find_subcommand(self.name) else {
            return Vec::new();
        };
        cmd.get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_global_set())
            .filter_map(|a| {
                let name = a.get_long()?.to_string();
                let about = one_line(&a.get_help().map(|h| h.to_string()).unwrap_or_default());
                let default = a
                    .get_default_values()
                    .first()
                    .map(|d| d.to_string_lossy().into_owned());
                let flag = !a.get_action().takes_values();
                let mut values: Vec<String> = a
                    .get_possible_values()
                    .iter()
                    .filter(|v| !v.is_hide_set())
                    .map(|v| v.get_name().to_string())
                    .collect();
                if flag {
                    values.clear();
                } else if values.is_empty() && name == "algo" {
                    values = crate::locks::ALGOS.iter().map(|l| l.name.to_string()).collect();
                }
                Some(ArgSpec {
                    unit: (!flag).then(|| unit_of(&name, &about)).flatten(),
                    default: default.filter(|_| !flag),
                    name,
                    flag,
                    values,
                    about,
                })
            })
            .collect()
    }
}

/// The unit of an argument: from its name's suffix (`hold-ns`), else from what its help says
/// its value is counted in ("in bytes", "Jiffies between …").
fn unit_of(name: &str, help: &str) -> Option<&'static str> {
    let by_name = [
        ("-ns", "ns"),
        ("-us", "µs"),
        ("-ms", "ms"),
        ("-hz", "Hz"),
        ("-mib", "MiB"),
        ("-pct", "%"),
        ("seconds", "s"),
    ];
    if let Some((_, u)) = by_name.iter().find(|(suffix, _)| name.ends_with(suffix)) {
        return Some(u);
    }
    let help = help.to_lowercase();
    let by_help = [
        ("nanoseconds", "ns"),
        ("milliseconds", "ms"),
        (", ms", "ms"),
        ("jiffies", "jiffies"),
        ("seconds", "s"),
        ("bytes", "bytes"),
        ("busy-loop iterations", "loop iterations"),
    ];
    by_help.iter().find(|(w, _)| help.contains(w)).map(|(_, u)| *u)
}

/// A help text on one line (clap keeps the doc comment's line breaks).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The spec of workload `name`, if the payload has one.
pub fn workload(name: &str) -> Option<&'static WorkloadSpec> {
    WORKLOADS.iter().find(|w| w.name == name)
}

/// `pattern` with `*` as "any run of characters" against `name`.
fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.len() >= head.len() + tail.len()
                && name.starts_with(head)
                && glob_match_rest(tail, &name[head.len()..])
        }
    }
}

fn glob_match_rest(pattern: &str, name: &str) -> bool {
    // After a `*`: the rest must match some suffix of `name`.
    (0..=name.len())
        .filter(|&i| name.is_char_boundary(i))
        .any(|i| glob_match(pattern, &name[i..]))
}

/// The catalog as JSON (`ocrig-payload list --json`), with the lock algorithms.
pub fn to_json() -> serde_json::Value {
    serde_json::json!({
        "workloads": WORKLOADS,
        "lock_algorithms": crate::locks::ALGOS.iter().map(|a| serde_json::json!({
            "name": a.name, "about": a.blurb, "uses_futex": a.uses_futex,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_globs() {
        assert!(glob_match("ops_per_sec", "ops_per_sec"));
        assert!(!glob_match("ops_per_sec", "ops_per_secx"));
        assert!(glob_match("*_p99_ms", "ReadX_p99_ms"));
        assert!(!glob_match("*_p99_ms", "_p99_m"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
    }

    #[test]
    fn every_subcommand_has_a_spec() {
        use clap::CommandFactory;
        for sub in crate::cli::Cli::command().get_subcommands() {
            let name = sub.get_name();
            if name != "list" && name != "help" && !sub.is_hide_set() {
                assert!(workload(name).is_some(), "no catalog entry for {name}");
            }
        }
        assert!(workload("lock").unwrap().may_report("ops_per_sec"));
        assert!(!workload("lock").unwrap().may_report("time_s"));
    }

    /// The arguments derived from the payload's parser: each with a default is accepted with
    /// that default, each `*-ns` argument is in nanoseconds, and the lock algorithm lists the
    /// algorithms.
    #[test]
    fn every_workload_lists_its_arguments_with_defaults_the_parser_accepts() {
        for w in WORKLOADS {
            let args = w.args();
            assert!(!args.is_empty(), "{} has no arguments", w.name);
            assert!(!w.about().is_empty(), "{} has no about", w.name);
            for a in &args {
                assert!(!a.about.is_empty(), "{} --{} has no help", w.name, a.name);
                if let Some(d) = &a.default {
                    let argv = [w.name.to_string(), format!("--{}", a.name), d.clone()];
                    crate::cli::validate(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
                }
            }
        }
        let lock = workload("lock").unwrap().args();
        let get = |n: &str| lock.iter().find(|a| a.name == n).unwrap().clone();
        let hold = get("hold-ns");
        assert_eq!((hold.default.as_deref(), hold.unit), (Some("200"), Some("ns")));
        assert_eq!(get("duration-ms").unit, Some("ms"));
        assert!(get("algo").values.iter().any(|v| v == "tas"));
        assert!(get("no-hold-sampling").flag);
        assert!(
            !lock.iter().any(|a| a.name.starts_with("debug-")),
            "hidden arguments are left out"
        );
        let hb = workload("hackbench").unwrap().args();
        assert_eq!(
            hb.iter().find(|a| a.name == "datasize").unwrap().unit,
            Some("bytes")
        );
    }

    /// Runs every workload on a tiny configuration: each metric it reports must be declared.
    #[test]
    fn every_reported_metric_is_declared() {
        let dir = std::env::temp_dir().join(format!("ocrig-catalog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_string_lossy().into_owned();
        let runs: &[&[&str]] = &[
            &["lock", "--algo", "futex", "--threads", "2", "--duration-ms", "50"],
            &[
                "hackbench",
                "--groups",
                "1",
                "--fds",
                "2",
                "--loops",
                "5",
                "--threads",
            ],
            &["ebizzy", "--threads", "1", "--chunks", "4", "--seconds", "0.2"],
            &[
                "dbench",
                "--dir",
                &d,
                "--clients",
                "1",
                "--seconds",
                "1",
                "--warmup",
                "0",
                "--loadfile",
                "builtin",
            ],
            &[
                "mutex",
                "--threads",
                "2",
                "--mutex-locks",
                "200",
                "--algo",
                "futex",
                "--acquire",
                "trylock-first",
            ],
            &["futexlock", "--threads", "2", "--iterations", "200"],
            &[
                "sysfs-mutex",
                "--cpus",
                "1",
                "--tasks-per-cpu",
                "1",
                "--rounds",
                "1",
            ],
            &["hog", "--seconds", "0.1"],
            &["exec", "--run", "echo ops 12", "--metric", "ops=regex:ops (\\d+)"],
        ];
        for argv in runs {
            let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
            let cmd = crate::cli::validate(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let report = crate::cli::run(&cmd).unwrap().unwrap();
            let spec = workload(&report.workload).expect("reported workload is in the catalog");
            for key in report.metrics.keys() {
                assert!(
                    spec.may_report(key),
                    "{} reports '{key}', which its catalog entry does not declare",
                    spec.name
                );
            }
            // And the other way: a metric declared unconditional is always there.
            for m in spec.metrics.iter().filter(|m| !m.conditional) {
                assert!(
                    report.metrics.contains_key(m.name),
                    "{} declares '{}' as always reported, but did not report it",
                    spec.name,
                    m.name
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
