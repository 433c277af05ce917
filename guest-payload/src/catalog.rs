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
    pub about: &'static str,
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

    /// The declared names, for error messages.
    pub fn metric_names(&self) -> Vec<&'static str> {
        self.metrics.iter().map(|m| m.name).collect()
    }
}

const fn m(name: &'static str, about: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        conditional: false,
        about,
    }
}

const fn cond(name: &'static str, about: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        conditional: true,
        about,
    }
}

/// Every workload, in `list` order.
pub static WORKLOADS: &[WorkloadSpec] = &[
    WorkloadSpec {
        name: "lock",
        metrics: &[
            m("ops_per_sec", "lock+unlock operations per second, all threads"),
            m("ops_total", "operations in the run"),
            m("contended", "acquisitions whose first try failed"),
            m("contention_rate", "contended / ops_total"),
            m("jain", "Jain's fairness index of per-thread operations"),
            m("min_thread_ops", "operations of the slowest thread"),
            m("max_thread_ops", "operations of the fastest thread"),
            cond(
                "acquire_p99_ns",
                "99th percentile acquisition latency of sampled contended acquisitions (absent when none was contended)",
            ),
            cond(
                "futex_waits",
                "FUTEX_WAIT calls (algorithms whose futex calls the payload counts)",
            ),
            cond(
                "futex_wakes",
                "FUTEX_WAKE calls (algorithms whose futex calls the payload counts)",
            ),
            m(
                "ctxsw_voluntary",
                "voluntary context switches (sleeps) of the workers",
            ),
            m(
                "ctxsw_involuntary",
                "involuntary context switches (preemptions) of the workers",
            ),
            cond(
                "stretched_hold_share",
                "holds longer than the run's median hold by more than --stretch-threshold-ns / holds (absent with --no-hold-sampling)",
            ),
            cond(
                "stretched_hold_lost_share",
                "time lost in stretched holds (beyond the run's median hold) / the run's time",
            ),
            cond(
                "stretched_handover_share",
                "hand-overs (release to the waiting next owner's entry) longer than the run's median hand-over by more than --stretch-threshold-ns / hand-overs",
            ),
            cond(
                "stretched_handover_lost_share",
                "time lost in stretched hand-overs (beyond the run's median hand-over) / the run's time",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "hackbench",
        metrics: &[
            m("time_s", "wall time of the message exchange"),
            m("messages_per_sec", "messages delivered per second"),
            m("receiver_jain", "Jain's index of receivers' finish times"),
            m("sender_jain", "Jain's index of senders' finish times"),
            m("receiver_finish_max_s", "latest receiver finish"),
            m("receiver_finish_min_s", "earliest receiver finish"),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "ebizzy",
        metrics: &[
            m("records_per_sec", "records searched per second"),
            m("records_total", "records searched"),
            m("jain", "Jain's index of per-thread records"),
            m("min_thread_records", "records of the slowest thread"),
            m("max_thread_records", "records of the fastest thread"),
            m("user_s", "user CPU time"),
            m("sys_s", "system CPU time"),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "dbench",
        metrics: &[
            m("mb_per_sec", "throughput as dbench counts it"),
            m("ops_per_sec", "loadfile operations per second"),
            m("max_latency_ms", "largest operation latency"),
            m("jain", "Jain's index of per-client operations"),
            cond("*_p99_ms", "99th percentile latency per operation kind"),
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
            m("time_s", "wall time until the last thread finished"),
            m("ops_per_sec", "lock operations per second"),
            cond(
                "contended",
                "acquisitions whose trylock failed (--acquire trylock-first)",
            ),
            cond(
                "contention_rate",
                "contended / operations (--acquire trylock-first)",
            ),
            m(
                "jain",
                "Jain's index of per-thread progress when the first thread finished",
            ),
            m("time_jain", "Jain's index of per-thread times"),
            m("progress_jain", "Jain's index of per-thread progress (= jain)"),
            m("thread_time_max_s", "slowest thread's time"),
            m("thread_time_min_s", "fastest thread's time"),
            cond(
                "futex_waits",
                "FUTEX_WAIT calls (algorithms whose futex calls the payload counts)",
            ),
            cond(
                "futex_wakes",
                "FUTEX_WAKE calls (algorithms whose futex calls the payload counts)",
            ),
            m(
                "ctxsw_voluntary",
                "voluntary context switches (sleeps) of the workers",
            ),
            m(
                "ctxsw_involuntary",
                "involuntary context switches (preemptions) of the workers",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "futexlock",
        metrics: &[
            m("kiter_per_sec", "thousand loop iterations per second"),
            m("time_s", "wall time"),
            m("lock_calls", "lock calls"),
            m(
                "lock_syscalls",
                "lock calls that entered the kernel (made a FUTEX_WAIT, even one returning EAGAIN)",
            ),
            m("lock_syscall_pct", "lock syscalls / lock calls, %"),
            m("unlock_calls", "unlock calls"),
            m("unlock_syscalls", "unlock calls that issued a FUTEX_WAKE"),
            m("unlock_syscall_pct", "unlock syscalls / unlock calls, %"),
            m(
                "lock_sleeps",
                "lock calls in which a FUTEX_WAIT slept until woken",
            ),
            m("futex_waits", "FUTEX_WAIT system calls"),
            m(
                "futex_wait_eagain",
                "FUTEX_WAIT calls that returned EAGAIN at once",
            ),
            m("futex_wakes", "FUTEX_WAKE system calls"),
            m(
                "jain",
                "Jain's index of per-thread progress when the first thread finished",
            ),
            m("progress_jain", "Jain's index of per-thread progress (= jain)"),
            m("time_jain", "Jain's index of per-thread times"),
            m("thread_time_max_s", "the last thread's finish time"),
            m("thread_time_min_s", "the first thread's finish time"),
            m(
                "finish_spread",
                "the last thread's finish time / the first's (1: all finish together)",
            ),
            m(
                "ctxsw_voluntary",
                "voluntary context switches (sleeps) of the workers",
            ),
            m(
                "ctxsw_involuntary",
                "involuntary context switches (preemptions) of the workers",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "sysfs-mutex",
        metrics: &[
            m("total_s", "wall time until the last task finished"),
            m("files_per_sec", "sysfs files read per second"),
            m("task_jain", "Jain's index of per-task times"),
            m("files_jain", "Jain's index of per-task files read"),
            m("task_max_s", "slowest task's time"),
            m("unreadable", "files that could not be read"),
            m(
                "jain",
                "Jain's index of per-task files read when the first task finished",
            ),
            m(
                "ctxsw_voluntary",
                "voluntary context switches (sleeps) of the tasks",
            ),
            m(
                "ctxsw_involuntary",
                "involuntary context switches (preemptions) of the tasks",
            ),
        ],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "hog",
        metrics: &[m("iterations", "busy-loop iterations, all threads")],
        inputs: &[],
        kernel_options: &[],
    },
    WorkloadSpec {
        name: "locktorture",
        metrics: &[
            m(
                "writes_per_sec",
                "write-side lock acquisitions per second, all writer threads (the kernel's Writes Total / the run)",
            ),
            m("writes_total", "write-side lock acquisitions in the run"),
            cond(
                "writes_min_over_max",
                "the least busy writer's acquisitions / the busiest's (1 = fair; the kernel flags ??? under 0.5)",
            ),
            cond(
                "reads_per_sec",
                "read-side acquisitions per second (reader-writer types)",
            ),
            cond(
                "reads_min_over_max",
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
];

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
            if name != "list" && name != "help" {
                assert!(workload(name).is_some(), "no catalog entry for {name}");
            }
        }
        assert!(workload("lock").unwrap().may_report("ops_per_sec"));
        assert!(!workload("lock").unwrap().may_report("time_s"));
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
