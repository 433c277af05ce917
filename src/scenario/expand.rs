//! Expansion: workload argument lists become a matrix of workload instances (LKP-style), and
//! each variant's overrides become a concrete guest shape and argument set.

use std::collections::BTreeMap;

use super::{ArgValue, KernelRef, Scenario, Variant, Workload};
use crate::vocabulary::Better;

/// One point of a workload's argument matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadInstance {
    /// Stable id across variants: the name plus the expanded parameters, e.g. `lock[threads=4]`.
    pub id: String,
    /// Index into `Scenario::workloads`.
    pub source: usize,
    pub command: String,
    /// Scalar arguments after expansion (before variant overrides).
    pub args: BTreeMap<String, ArgValue>,
    pub metric: String,
    pub better: Better,
    /// An `exec` workload's `--metric NAME=RULE` values (empty for the others).
    pub metric_rules: Vec<String>,
    /// The workload's slice when its variants share guests (None: whole runs), see
    /// [`super::model::Workload::slice_ms`].
    pub slice_ms: Option<u64>,
}

/// Variants with the implicit default filled in and the baseline known.
pub fn variants(s: &Scenario) -> Vec<Variant> {
    if s.variants.is_empty() {
        vec![Variant {
            name: "base".into(),
            baseline: true,
            ..Default::default()
        }]
    } else {
        s.variants.clone()
    }
}

/// The baseline: the variant marked `baseline: true`, else the first.
pub fn baseline(s: &Scenario) -> String {
    let vs = variants(s);
    vs.iter().find(|v| v.baseline).unwrap_or(&vs[0]).name.clone()
}

/// Every workload instance, in declaration order, lists expanded as a cartesian product.
pub fn workloads(s: &Scenario) -> Vec<WorkloadInstance> {
    s.workloads
        .iter()
        .enumerate()
        .flat_map(|(i, w)| expand_one(i, w))
        .collect()
}

fn expand_one(source: usize, w: &Workload) -> Vec<WorkloadInstance> {
    let label = w.name.clone().unwrap_or_else(|| w.command.clone());
    let mut combos: Vec<BTreeMap<String, ArgValue>> = vec![BTreeMap::new()];
    let mut varying: Vec<String> = Vec::new();
    for (key, value) in &w.args {
        let choices: Vec<ArgValue> = match value {
            ArgValue::List(items) => {
                varying.push(key.clone());
                items.clone()
            }
            v => vec![v.clone()],
        };
        combos = combos
            .into_iter()
            .flat_map(|c| {
                choices.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(key.clone(), v.clone());
                    c
                })
            })
            .collect();
    }
    combos
        .into_iter()
        .map(|args| {
            let id = if varying.is_empty() {
                label.clone()
            } else {
                let params: Vec<String> = varying
                    .iter()
                    .map(|k| format!("{k}={}", args[k].as_word().unwrap_or_default()))
                    .collect();
                format!("{label}[{}]", params.join(","))
            };
            WorkloadInstance {
                id,
                source,
                command: w.command.clone(),
                args,
                metric: w.metric.clone(),
                better: w.better(),
                metric_rules: w.metrics.iter().filter_map(|m| m.rule().ok()).collect(),
                slice_ms: match w.slice_ms.or(super::model::DEFAULT_SLICE_MS) {
                    Some(0) => None,
                    ms => ms.filter(|_| ocrig_payload::slices::duration_flag(&w.command).is_some()),
                },
            }
        })
        .collect()
}

/// The payload command line for a workload under a variant: `[command, --key, value, ...]`.
/// Variant arguments override the workload's; keys may be written with `_` or `-`.
pub fn payload_argv(w: &WorkloadInstance, variant: &Variant) -> Vec<String> {
    let mut merged = w.args.clone();
    for (k, v) in &variant.args {
        merged.insert(k.clone(), v.clone());
    }
    let mut argv = vec![w.command.clone()];
    for rule in &w.metric_rules {
        argv.push(format!("--metric={rule}"));
    }
    for (key, value) in &merged {
        let flag = format!("--{}", key.replace('_', "-"));
        match value {
            ArgValue::Bool(true) => argv.push(flag),
            ArgValue::Bool(false) => {}
            v => match v.as_word() {
                // A value that starts with '-' would read as an option: attach it to its flag.
                Some(word) if word.starts_with('-') => argv.push(format!("{flag}={word}")),
                Some(word) => {
                    argv.push(flag);
                    argv.push(word);
                }
                None => {}
            },
        }
    }
    for event in &variant.trace_events {
        argv.push("--trace-event".into());
        argv.push(event.clone());
    }
    if variant.kernel_counts {
        argv.push("--kernel-counts".into());
    }
    if let Some(p) = variant.profile {
        argv.push("--profile-hz".into());
        argv.push(p.rate_hz.to_string());
    }
    argv
}

/// How long a payload command line says it runs (`--duration-ms` or `--seconds`), if it says.
pub fn workload_seconds(argv: &[String]) -> Option<f64> {
    let value_of = |flag: &str| {
        argv.iter()
            .enumerate()
            .find_map(|(i, a)| match a.strip_prefix(flag) {
                Some("") => argv.get(i + 1).map(String::as_str),
                Some(rest) => rest.strip_prefix('='),
                None => None,
            })
            .and_then(|v| v.parse::<f64>().ok())
    };
    value_of("--duration-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| value_of("--seconds"))
}

/// A variant's guest: kernel, full command line, CPU model. Two variants with equal guests can
/// share one boot.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestVariant {
    pub kernel: KernelRef,
    pub cmdline: String,
    pub cpu: Option<String>,
}

pub fn guest_for(s: &Scenario, v: &Variant) -> GuestVariant {
    let cmdline = [s.guest.cmdline.trim(), v.cmdline.trim()]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    GuestVariant {
        kernel: v.kernel.clone().unwrap_or_else(|| s.guest.kernel.clone()),
        cmdline,
        cpu: v.cpu.clone().or_else(|| s.guest.cpu.clone()),
    }
}

/// Whether every level is one boot group, as the plan groups variants (`sweep::plan`): the
/// host backend boots nothing, so its variants share the level's one "boot"; else one variant,
/// or shared guests (`schedule.guests: shared`) identical for every variant. Where it is not,
/// each level's boot groups are made in blocks of `schedule.runs_per_bring_up`.
pub fn one_boot_group_per_level(s: &Scenario) -> bool {
    let vs = variants(s);
    let shared = s.schedule.guests == crate::vocabulary::GuestSharing::Shared;
    s.host.backend == super::BackendKind::Host
        || vs.len() <= 1
        || (shared && vs.iter().all(|v| guest_for(s, v) == guest_for(s, &vs[0])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(yaml: &str) -> Scenario {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn lists_expand_into_a_matrix_with_stable_ids() {
        let s = scenario(
            "name: m\nlevels: [1]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {algo: [tas, ticket], threads: [1, 2], hold_ns: 100}\n",
        );
        let ws = workloads(&s);
        assert_eq!(ws.len(), 4);
        assert_eq!(ws[0].id, "lock[algo=tas,threads=1]");
        assert_eq!(ws[3].id, "lock[algo=ticket,threads=2]");
        let argv = payload_argv(&ws[1], &variants(&s)[0]);
        assert_eq!(
            argv,
            ["lock", "--algo", "tas", "--hold-ns", "100", "--threads", "2"]
        );
    }

    #[test]
    fn variants_override_arguments_and_extend_the_command_line() {
        let s = scenario(
            "name: m\nlevels: [1]\nguest: {cmdline: quiet}\nvariants:\n  - name: base\n  - name: p\n    baseline: true\n    cmdline: nopvspin\n    args: {algo: mcs, verbose: true}\nworkloads:\n  - command: lock\n    metric: x\n    args: {algo: tas}\n",
        );
        assert_eq!(baseline(&s), "p");
        let vs = variants(&s);
        let w = &workloads(&s)[0];
        assert_eq!(payload_argv(w, &vs[1]), ["lock", "--algo", "mcs", "--verbose"]);
        assert_eq!(guest_for(&s, &vs[1]).cmdline, "quiet nopvspin");
        assert_eq!(guest_for(&s, &vs[0]).cmdline, "quiet");
    }

    #[test]
    fn trace_events_become_payload_options_after_the_workload_arguments() {
        let s = scenario(
            "name: m\nlevels: [1]\nvariants:\n  - {name: base, baseline: true}\n  - {name: t, trace_events: [lock:contention_begin, lock:contention_end], kernel_counts: true, profile: {rate_hz: 99}}\nworkloads:\n  - command: lock\n    metric: x\n    args: {algo: tas}\n",
        );
        let (vs, w) = (variants(&s), workloads(&s).remove(0));
        assert_eq!(payload_argv(&w, &vs[0]), ["lock", "--algo", "tas"]);
        let traced = payload_argv(&w, &vs[1]);
        assert_eq!(
            traced,
            [
                "lock",
                "--algo",
                "tas",
                "--trace-event",
                "lock:contention_begin",
                "--trace-event",
                "lock:contention_end",
                "--kernel-counts",
                "--profile-hz",
                "99"
            ]
        );
        // The payload's own parser takes them (global options may follow the subcommand).
        let c = ocrig_payload::cli::validate(&traced).unwrap();
        assert_eq!(c.workload_name(), Some("lock"));
    }

    #[test]
    fn workload_durations_come_from_either_flag_form() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            workload_seconds(&argv(&["lock", "--duration-ms", "2500"])),
            Some(2.5)
        );
        assert_eq!(workload_seconds(&argv(&["ebizzy", "--seconds", "7"])), Some(7.0));
        assert_eq!(workload_seconds(&argv(&["ebizzy", "--seconds=3"])), Some(3.0));
        assert_eq!(workload_seconds(&argv(&["hackbench", "--loops", "5"])), None);
    }

    #[test]
    fn no_variants_means_one_base() {
        let s = scenario("name: m\nlevels: [1]\nworkloads:\n  - command: lock\n    metric: x\n");
        assert_eq!(baseline(&s), "base");
        assert_eq!(variants(&s).len(), 1);
    }
}
