//! Sliced runs: several workload invocations ("arms", one per variant sharing the guests) in
//! one payload run, alternating in short slices on a schedule fixed from the go signal.
//!
//! Why: the host's state (a cache line's hand-over cost, the CPU's speed) changes on a time
//! scale of seconds, so two variants measured one after the other in runs of several seconds
//! each see different hosts. Alternating them in slices of a few hundred milliseconds, in a
//! mirrored order (A B B A A B …, or A B C C B A for three arms: a linear drift weighs every arm
//! alike), puts both sides of a comparison into the same host states.
//!
//! Every guest of a run gets the same schedule: slice `j` starts `j × period` after the go
//! signal, so the guests' slices of one arm overlap (their go signals are released together);
//! a slice whose start has passed (its predecessor's set-up or teardown overran) starts at
//! once and says how late it was. Each slice is an ordinary run of the arm's workload, with its
//! own set-up, window and self-checks; an arm's report has its slices' metrics merged
//! ([`merged_metrics`], as the catalogue declares each metric, [`AcrossSlices`]: totals summed,
//! rates averaged — the slices are of equal length, so a mean of rates is the rate over the
//! arm's whole time — ratios made again from the totals), its
//! slices' checks ([`merged_checks`]: the work as run judged over all its slices, as one run's
//! samples are; any other check failed in a slice fails the arm), a lock's `preemption` merged
//! from its slices' ([`PreemptionReport::merge_slices`]: the stretched holds and hand-overs
//! counted over all slices, the longest listed on one window from the first slice's start to
//! the last one's end, each slice's own window in `window_parts`), and each slice's figures
//! under `sliced`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use crate::catalog::AcrossSlices;
use crate::checks::Check;
use crate::cli::Command;
use crate::preempt_sample::PreemptionReport;
use crate::report::{Report, SCHEMA_VERSION};
use crate::workloads::start;

/// The word between two arms' argument lists.
pub const ARM_SEPARATOR: &str = "::";

/// The `workload` of a sliced run's report: its `detail.arms` hold one report per arm.
pub const SLICED_WORKLOAD: &str = "sliced";

#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Length of every slice's measured window, in milliseconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub slice_ms: u64,
    /// From one slice's start to the next's, in milliseconds: the slice and room for its
    /// set-up and teardown. The same on every guest of a run, so their slices line up.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub period_ms: u64,
    /// From a slice's start on the schedule to its window's opening, in milliseconds: room for
    /// the workload's set-up. Every guest's window then opens at the same instant, whatever its
    /// own set-up took (a set-up that overruns it opens the window late, and says so).
    #[arg(long, value_parser = clap::value_parser!(u64))]
    pub open_after_ms: u64,
    /// Slices of every arm.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub slices_per_arm: u32,
    /// The arms: workload command lines separated by `::`, e.g.
    /// `-- lock --algo ticket :: lock --algo tas`. Their durations are set to the slice.
    #[arg(last = true, required = true, num_args = 1..)]
    pub arms: Vec<String>,
}

impl Args {
    /// Each arm's workload command, with its duration set to one slice.
    pub fn commands(&self) -> Result<Vec<Command>, String> {
        if self.period_ms < self.slice_ms + self.open_after_ms {
            return Err(format!(
                "--period-ms {} is shorter than --open-after-ms {} + --slice-ms {}",
                self.period_ms, self.open_after_ms, self.slice_ms
            ));
        }
        let arms: Vec<&[String]> = self.arms.split(|a| a == ARM_SEPARATOR).collect();
        if arms.len() < 2 || arms.iter().any(|a| a.is_empty()) {
            return Err(format!(
                "a sliced run needs two or more arms, each a workload command line, separated by `{ARM_SEPARATOR}`"
            ));
        }
        arms.iter()
            .map(|argv| {
                let command =
                    crate::cli::validate(argv).map_err(|e| format!("arm `{}`: {e}", argv.join(" ")))?;
                with_duration(command, self.slice_ms)
            })
            .collect()
    }
}

/// Whether a workload runs for a time (so can be sliced), and the argument that sets it.
pub fn duration_flag(workload: &str) -> Option<&'static str> {
    match workload {
        "lock" => Some("--duration-ms"),
        "ebizzy" => Some("--seconds"),
        _ => None,
    }
}

/// How long `command` runs, in milliseconds, where it runs for a time (its argument or its
/// default): what each arm of a sliced run gets in all.
pub fn duration_ms(command: &Command) -> Option<u64> {
    match command {
        Command::Lock(a) => Some(a.duration_ms),
        Command::Ebizzy(a) => Some((a.seconds * 1000.0).round() as u64),
        _ => None,
    }
}

/// `command` set to run for `ms` milliseconds; an error for a workload that runs a fixed
/// amount of work rather than for a time.
pub fn with_duration(command: Command, ms: u64) -> Result<Command, String> {
    match command {
        Command::Lock(mut a) => {
            a.duration_ms = ms;
            Ok(Command::Lock(a))
        }
        Command::Ebizzy(mut a) => {
            a.seconds = ms as f64 / 1000.0;
            Ok(Command::Ebizzy(a))
        }
        other => Err(format!(
            "workload `{}` runs a fixed amount of work, not for a time: it cannot be sliced",
            other.workload_name().unwrap_or("?")
        )),
    }
}

/// How many slices an arm's report is over (its `detail.sliced.slices`), or None for a report
/// of a whole run.
pub fn slices_in(report: &Report) -> Option<u32> {
    let n = report.detail.get("sliced")?.get("slices")?.as_array()?.len();
    u32::try_from(n).ok()
}

/// The arm of every slice: mirrored passes over the arms (0 1 1 0 0 1 …; 0 1 2 2 1 0 …), so
/// each arm's slices have the same mean position and a linear drift favours none.
pub fn order(arms: usize, slices_per_arm: u32) -> Vec<usize> {
    (0..slices_per_arm as usize)
        .flat_map(|pass| (0..arms).map(move |i| if pass % 2 == 0 { i } else { arms - 1 - i }))
        .collect()
}

/// One slice as the arm's report keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SliceFigures {
    /// Position in the run's schedule.
    pub index: u32,
    /// When the slice was due, and how late it started, ms after the go signal.
    pub due_ms: f64,
    pub late_ms: f64,
    /// When its set-up ended (every worker at the start gate) and when its window opened,
    /// ms after the go signal: the window opens at `due_ms` + `--open-after-ms`, or at
    /// `ready_ms` where the set-up overran that. None for a workload without a start gate.
    #[serde(default)]
    pub ready_ms: Option<f64>,
    #[serde(default)]
    pub opened_ms: Option<f64>,
    /// The slice's measured window, ns.
    pub elapsed_ns: u64,
    pub metrics: BTreeMap<String, f64>,
}

/// Runs every slice of `args` from now on (the go signal); the run's report, whose
/// `detail.arms` holds each arm's merged report. An error of any slice ends the run.
pub fn run(args: &Args) -> anyhow::Result<Report> {
    let commands = args
        .commands()
        .map_err(|e| anyhow::anyhow!(crate::workloads::BadInput(e)))?;
    let go = Instant::now();
    let period = Duration::from_millis(args.period_ms);
    let open_after = Duration::from_millis(args.open_after_ms);
    let order = order(commands.len(), args.slices_per_arm);
    let mut slices: Vec<Vec<(SliceFigures, Report)>> = vec![Vec::new(); commands.len()];
    for (j, &arm) in order.iter().enumerate() {
        let due = period * j as u32;
        let now = go.elapsed();
        if now < due {
            std::thread::sleep(due - now);
        }
        let late = go.elapsed().saturating_sub(due);
        start::schedule_next_opening(go + due + open_after);
        let report = crate::cli::run(&commands[arm])?.expect("a workload command reports");
        let opening = start::take_opening();
        let after_go = |at: Option<Instant>| at.map(|t| t.duration_since(go).as_secs_f64() * 1e3);
        let figures = SliceFigures {
            index: j as u32,
            due_ms: due.as_secs_f64() * 1e3,
            late_ms: late.as_secs_f64() * 1e3,
            ready_ms: after_go(opening.and_then(|o| o.ready)),
            opened_ms: after_go(opening.and_then(|o| o.opened)),
            elapsed_ns: report.elapsed_ns,
            metrics: report.metrics.clone(),
        };
        slices[arm].push((figures, report));
    }
    let arms: Vec<Report> = slices.into_iter().map(|s| merge(s, args)).collect();
    let checks: Vec<Check> = arms
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            a.checks.iter().filter(|c| !c.ok).map(move |c| Check {
                detail: format!("arm {i}: {}", c.detail),
                ..c.clone()
            })
        })
        .collect();
    let detail = serde_json::json!({
        "slice_ms": args.slice_ms,
        "period_ms": args.period_ms,
        "open_after_ms": args.open_after_ms,
        "order": order,
        "arms": arms,
    });
    let elapsed_ns = go.elapsed().as_nanos() as u64;
    Ok(Report::new(
        SLICED_WORKLOAD,
        elapsed_ns,
        crate::env::Env::read(),
        BTreeMap::new(),
        &detail,
    )?
    .with_checks(checks))
}

/// One arm's report from its slices (in schedule order): metrics measured in every slice
/// averaged, every slice's checks named by slice, the slices' `preemption` reports merged
/// ([`merged_preemption`]), the slices' own figures under `sliced`.
fn merge(slices: Vec<(SliceFigures, Report)>, args: &Args) -> Report {
    let first = &slices[0].1;
    let checks = merged_checks(&slices);
    let elapsed_ns = slices.iter().map(|(f, _)| f.elapsed_ns).sum();
    let figures: Vec<&SliceFigures> = slices.iter().map(|(f, _)| f).collect();
    let mut detail = first.detail.clone();
    // The slices' other details (the work as run, histograms, the kernel's counts) are not
    // merged: a figure that would need them is absent rather than one slice's.
    for key in [
        "preemption",
        "preemption_unavailable",
        "work_as_run",
        "acquire_latency",
        "kernel",
    ] {
        detail.remove(key);
    }
    match merged_preemption(&slices) {
        Ok(None) => {}
        Ok(Some(p)) => {
            let p = serde_json::to_value(p).expect("a preemption report is plain data");
            detail.insert("preemption".into(), p);
        }
        // As a lock run without the timing reports it: null, and why.
        Err(why) => {
            detail.insert("preemption".into(), serde_json::Value::Null);
            detail.insert("preemption_unavailable".into(), serde_json::json!(why));
        }
    }
    let metrics = merged_metrics(&slices, &mut detail);
    detail.insert(
        "sliced".into(),
        serde_json::json!({
            "slice_ms": args.slice_ms,
            "period_ms": args.period_ms,
            "open_after_ms": args.open_after_ms,
            "slices": figures,
        }),
    );
    Report {
        schema: SCHEMA_VERSION,
        workload: first.workload.clone(),
        elapsed_ns,
        env: first.env.clone(),
        metrics,
        checks,
        detail,
    }
}

/// How an arm of `workload` reports `metric` from its slices, as the catalogue declares it (a
/// metric it does not declare, which its test forbids, is averaged).
fn across_slices(workload: &str, metric: &str) -> AcrossSlices {
    crate::catalog::workload(workload)
        .and_then(|w| w.metric(metric))
        .map_or(AcrossSlices::Mean, |m| m.across_slices)
}

/// Per-thread counts of a workload's report (`detail`) and the name its fairness metrics end
/// in: summed thread by thread over the slices, the arm's fairness is theirs.
const PER_THREAD: [(&str, &str); 2] = [
    ("ops_per_thread", "thread_ops"),
    ("records_per_thread", "thread_records"),
];

/// An arm's metrics from its slices' (totals summed, rates averaged, a metric some slice did
/// not measure left out rather than averaged over a subset); those that are ratios of totals
/// (contention, fairness, the stretched shares) made again from the arm's totals. The figures
/// of `detail` (the first slice's) that are also metrics, and its per-thread counts, become the
/// arm's, so the report never mixes one slice's counts with the arm's.
fn merged_metrics(
    slices: &[(SliceFigures, Report)],
    detail: &mut serde_json::Map<String, serde_json::Value>,
) -> BTreeMap<String, f64> {
    use serde_json::{Value, json};
    let n = slices.len() as f64;
    let mut metrics = BTreeMap::new();
    let workload = slices[0].1.workload.as_str();
    for name in slices[0].1.metrics.keys() {
        let values: Vec<f64> = slices
            .iter()
            .filter_map(|(_, r)| r.metrics.get(name).copied())
            .collect();
        if values.len() == slices.len() {
            let sum: f64 = values.iter().sum();
            // A remade metric's mean stands until it is made again below (where its totals
            // are missing, it is the best there is).
            let value = match across_slices(workload, name) {
                AcrossSlices::Sum => sum,
                AcrossSlices::Mean | AcrossSlices::Remade => sum / n,
            };
            metrics.insert(name.clone(), value);
        }
    }
    if let (Some(&c), Some(&o)) = (metrics.get("contended"), metrics.get("ops_total"))
        && metrics.contains_key("contention_rate")
        && o > 0.0
    {
        metrics.insert("contention_rate".into(), c / o);
    }
    for (list, suffix) in PER_THREAD {
        let each: Vec<Vec<u64>> = slices
            .iter()
            .filter_map(|(_, r)| serde_json::from_value(r.detail.get(list)?.clone()).ok())
            .collect();
        if each.len() != slices.len() || each.iter().any(|t| t.len() != each[0].len()) {
            continue;
        }
        let per_thread: Vec<u64> = (0..each[0].len())
            .map(|t| each.iter().map(|s| s[t]).sum())
            .collect();
        let fairness = crate::metrics::Fairness::of(&per_thread);
        for (name, value) in [
            ("jain".to_string(), fairness.jain),
            (format!("min_{suffix}"), fairness.min as f64),
            (format!("max_{suffix}"), fairness.max as f64),
        ] {
            if metrics.contains_key(&name) {
                metrics.insert(name, value);
            }
        }
        detail.insert(list.into(), json!(per_thread));
        if detail.contains_key("fairness") {
            detail.insert("fairness".into(), json!(fairness));
        }
    }
    // The stretched shares from the merged timing (its shares are over the arm's sums).
    for (side, name) in [("holds", "hold"), ("handovers", "handover")] {
        let merged = detail.get("preemption").map(|p| &p[side]);
        for (key, metric) in [
            ("stretched_share", format!("stretched_{name}_share")),
            ("lost_share", format!("stretched_{name}_lost_share")),
        ] {
            if let (true, Some(v)) = (
                metrics.contains_key(&metric),
                merged.and_then(|s| s[key].as_f64()),
            ) {
                metrics.insert(metric, v);
            }
        }
    }
    for (name, &value) in &metrics {
        match detail.get(name) {
            Some(Value::Number(old)) if old.is_u64() => {
                detail.insert(name.clone(), json!(value.round() as u64));
            }
            Some(Value::Number(_)) => {
                detail.insert(name.clone(), json!(value));
            }
            _ => {}
        }
    }
    metrics
}

/// An arm's `preemption` from its slices' ([`PreemptionReport::merge_slices`], each with its
/// slice's measured time). None where the workload reports none (no slice has the field); Err
/// with the reason where some slice's is null (the reason its own) or unreadable.
fn merged_preemption(slices: &[(SliceFigures, Report)]) -> Result<Option<PreemptionReport>, String> {
    if slices.iter().all(|(_, r)| !r.detail.contains_key("preemption")) {
        return Ok(None);
    }
    let mut each = Vec::with_capacity(slices.len());
    for (f, r) in slices {
        let why = |what: &str| {
            format!(
                "a sliced run: slice {} (due at {:.0} ms): {what}",
                f.index, f.due_ms
            )
        };
        let report = match r.detail.get("preemption") {
            None | Some(serde_json::Value::Null) => {
                let own = r.detail.get("preemption_unavailable").and_then(|w| w.as_str());
                return Err(why(own.unwrap_or("no preemption report")));
            }
            Some(p) => PreemptionReport::deserialize(p)
                .map_err(|e| why(&format!("unreadable preemption report: {e}")))?,
        };
        each.push((report, f.elapsed_ns));
    }
    Ok(Some(PreemptionReport::merge_slices(&each)))
}

/// Checks of the work as it ran (its median against the asked length): an arm's slices are
/// judged together, as one run's samples are, by the median slice. A slice has a fraction of a
/// run's samples, so its median alone jumps between the modes a clock read makes (under TCG a
/// read right after another vCPU's costs ~250 ns, not ~35); judged slice by slice, a run of 40
/// slices failed when any one did.
pub const JUDGED_OVER_SLICES: [&str; 2] = ["hold_as_asked", "gap_as_asked"];

/// An arm's checks from its slices': each check of [`JUDGED_OVER_SLICES`] once, by the median
/// slice (value and bound the medians of the slices' judged ones); every other check failed in
/// any slice as that slice's (named by slice); one held in every slice once, by its worst slice.
fn merged_checks(slices: &[(SliceFigures, Report)]) -> Vec<Check> {
    let mut names: Vec<&str> = Vec::new();
    for c in slices.iter().flat_map(|(_, r)| &r.checks) {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    let mut out = Vec::new();
    for name in names {
        let each: Vec<(&SliceFigures, &Check)> = slices
            .iter()
            .flat_map(|(f, r)| r.checks.iter().filter(|c| c.name == name).map(move |c| (f, c)))
            .collect();
        let named = |f: &SliceFigures, c: &Check| Check {
            detail: format!("slice {} (due at {:.0} ms): {}", f.index, f.due_ms, c.detail),
            ..c.clone()
        };
        let failed: Vec<Check> = each
            .iter()
            .filter(|(_, c)| !c.ok)
            .map(|(f, c)| named(f, c))
            .collect();
        if JUDGED_OVER_SLICES.contains(&name) {
            let judged: Vec<(f64, f64)> = each
                .iter()
                .filter_map(|(_, c)| Some((c.value?, c.bound?)))
                .collect();
            if judged.is_empty() {
                out.push(named(each[0].0, each[0].1));
                continue;
            }
            let value = median(judged.iter().map(|j| j.0).collect());
            let bound = median(judged.iter().map(|j| j.1).collect());
            let cmp = if value <= bound { "<=" } else { ">" };
            let mut detail = format!(
                "judged over the arm's {} slices by the median slice: error {value:.4} {cmp} bound {bound:.4}",
                judged.len()
            );
            if let Some(first) = failed.first() {
                detail.push_str(&format!(
                    "; {} slice(s) over their own bound, the first {}",
                    failed.len(),
                    first.detail
                ));
            }
            out.push(Check::at_most(name, value, bound, detail));
        } else if failed.is_empty() {
            let worst = each
                .iter()
                .max_by(|a, b| {
                    a.1.value
                        .unwrap_or(f64::MIN)
                        .total_cmp(&b.1.value.unwrap_or(f64::MIN))
                })
                .expect("a check named by some slice");
            let mut c = named(worst.0, worst.1);
            c.detail = format!("held in all {} slices; the worst, {}", each.len(), c.detail);
            out.push(c);
        } else {
            out.extend(failed);
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics `merged_metrics` makes again from an arm's totals (the catalogue's
    /// [`AcrossSlices::Remade`] ones of the workloads that can be sliced, as its test checks).
    const REMADE: [&str; 10] = [
        "contention_rate",
        "jain",
        "min_thread_ops",
        "max_thread_ops",
        "min_thread_records",
        "max_thread_records",
        "stretched_hold_share",
        "stretched_hold_lost_share",
        "stretched_handover_share",
        "stretched_handover_lost_share",
    ];

    /// The catalogue's word on every metric of a workload that can be sliced is what the merge
    /// does: the remade metrics are the ones it makes again.
    #[test]
    fn the_catalogue_says_how_each_sliced_metric_is_merged() {
        for spec in crate::catalog::WORKLOADS {
            if duration_flag(spec.name).is_none() {
                continue;
            }
            for m in spec.metrics {
                assert_eq!(
                    m.across_slices == AcrossSlices::Remade,
                    REMADE.contains(&m.name),
                    "{}: {}",
                    spec.name,
                    m.name
                );
            }
        }
        assert_eq!(across_slices("lock", "ops_total"), AcrossSlices::Sum);
        assert_eq!(across_slices("lock", "ops_per_sec"), AcrossSlices::Mean);
        assert_eq!(across_slices("ebizzy", "sys_s"), AcrossSlices::Sum);
    }

    #[test]
    fn the_order_mirrors_every_other_pass() {
        assert_eq!(order(2, 4), [0, 1, 1, 0, 0, 1, 1, 0]);
        assert_eq!(order(3, 2), [0, 1, 2, 2, 1, 0]);
        // Every arm's mean position is the same over an even number of passes.
        for arms in 2..6 {
            let o = order(arms, 4);
            let mean = |a: usize| {
                let p: Vec<usize> = o
                    .iter()
                    .enumerate()
                    .filter(|&(_, &x)| x == a)
                    .map(|(i, _)| i)
                    .collect();
                p.iter().sum::<usize>() as f64 / p.len() as f64
            };
            for a in 1..arms {
                assert_eq!(mean(a), mean(0), "arms {arms}");
            }
        }
    }

    fn args(arms: &[&str]) -> Args {
        Args {
            slice_ms: 50,
            period_ms: 150,
            open_after_ms: 60,
            slices_per_arm: 2,
            arms: arms.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn arms_are_parsed_and_set_to_the_slice() {
        let c = args(&["lock", "--algo", "tas", "::", "lock", "--algo", "ticket"])
            .commands()
            .unwrap();
        assert_eq!(c.len(), 2);
        match &c[1] {
            Command::Lock(a) => assert_eq!((a.algo.as_str(), a.duration_ms), ("ticket", 50)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_arms_are_refused_with_the_reason() {
        let e = args(&["lock", "--algo", "tas"]).commands().unwrap_err();
        assert!(e.contains("two or more arms"), "{e}");
        let e = args(&["lock", "::", "::", "lock"]).commands().unwrap_err();
        assert!(e.contains("two or more arms"), "{e}");
        let e = args(&["lock", "::", "mutex"]).commands().unwrap_err();
        assert!(e.contains("cannot be sliced"), "{e}");
        let e = args(&["lock", "::", "lock", "--algo", "bogus"])
            .commands()
            .unwrap_err();
        assert!(e.contains("unknown lock algorithm"), "{e}");
        let mut a = args(&["lock", "::", "lock"]);
        a.period_ms = 10;
        assert!(a.commands().unwrap_err().contains("shorter than --open-after-ms"));
        // Room for the set-up and the slice, but not both.
        a.period_ms = 100;
        let e = a.commands().unwrap_err();
        assert!(
            e.contains("--period-ms 100") && e.contains("60 + --slice-ms 50"),
            "{e}"
        );
    }

    fn slice(index: u32, checks: Vec<Check>) -> (SliceFigures, Report) {
        let mut r = Report::new(
            "lock",
            1,
            crate::env::Env::read(),
            BTreeMap::new(),
            &serde_json::json!({}),
        )
        .unwrap();
        r.checks = checks;
        let f = SliceFigures {
            index,
            due_ms: 0.0,
            late_ms: 0.0,
            ready_ms: None,
            opened_ms: None,
            elapsed_ns: 1,
            metrics: BTreeMap::new(),
        };
        (f, r)
    }

    /// The work checks are judged by the median slice; any other check failed in a slice
    /// fails the arm.
    #[test]
    fn work_is_judged_by_the_median_slice_and_other_checks_by_every_slice() {
        let gap = |v: f64| Check::at_most("gap_as_asked", v, 0.157, format!("gap error {v}"));
        let owner = |ok: bool| Check {
            name: "owner_held".into(),
            ok,
            value: None,
            bound: None,
            detail: "owner".into(),
        };
        // One slice of three over its bound: the median slice holds.
        let merged = merged_checks(&[
            slice(0, vec![gap(0.05), owner(true)]),
            slice(1, vec![gap(0.26), owner(true)]),
            slice(2, vec![gap(0.08), owner(true)]),
        ]);
        assert_eq!(merged.len(), 2);
        assert!(merged.iter().all(|c| c.ok), "{merged:?}");
        assert_eq!(merged[0].value, Some(0.08));
        assert!(
            merged[0]
                .detail
                .contains("1 slice(s) over their own bound, the first slice 1"),
            "{}",
            merged[0].detail
        );
        assert!(merged[1].detail.contains("held in all 3 slices"));
        // Two of three over: the median slice fails; an owner failure in one slice fails.
        let merged = merged_checks(&[
            slice(0, vec![gap(0.30), owner(true)]),
            slice(1, vec![gap(0.26), owner(false)]),
            slice(2, vec![gap(0.08), owner(true)]),
        ]);
        assert!(!merged[0].ok);
        assert_eq!(merged[0].value, Some(0.26));
        assert!(!merged[1].ok);
        assert!(merged[1].detail.starts_with("slice 1"));
    }

    /// Two arms of the real lock workload, sliced: each arm's report holds its slices, its
    /// metrics are their mean, and the slices kept their schedule.
    #[test]
    fn a_sliced_run_reports_each_arm_from_its_slices() {
        let a = args(&[
            "lock",
            "--algo",
            "tas",
            "--threads",
            "1",
            "::",
            "lock",
            "--algo",
            "ticket",
            "--threads",
            "1",
        ]);
        let report = run(&a).unwrap();
        assert_eq!(report.workload, SLICED_WORKLOAD);
        let arms: Vec<Report> = serde_json::from_value(report.detail["arms"].clone()).unwrap();
        assert_eq!(arms.len(), 2);
        for (arm, algo) in arms.iter().zip(["tas", "ticket"]) {
            assert_eq!(arm.detail["algo"], algo);
            let slices: Vec<SliceFigures> =
                serde_json::from_value(arm.detail["sliced"]["slices"].clone()).unwrap();
            assert_eq!(slices.len(), 2);
            assert_eq!(slices_in(arm), Some(2));
            let mean = slices.iter().map(|s| s.metrics["ops_per_sec"]).sum::<f64>() / 2.0;
            assert!((arm.metrics["ops_per_sec"] - mean).abs() < 1e-6 * mean);
            for s in &slices {
                assert_eq!(s.due_ms, 150.0 * f64::from(s.index));
                // The window opened on the schedule (60 ms after the slice's start), or at
                // once where the set-up took longer.
                let (ready, opened) = (s.ready_ms.unwrap(), s.opened_ms.unwrap());
                let at = s.due_ms + 60.0;
                assert!(opened >= at && opened >= ready, "{s:?}");
                assert!(ready > at || opened - at < 20.0, "{s:?}");
            }
            // One preemption report over both slices: on one window from the first slice's
            // start to the second's end, each slice's own window listed, in order.
            assert!(
                arm.detail.get("preemption_unavailable").is_none(),
                "{:?}",
                arm.detail
            );
            let p: PreemptionReport = serde_json::from_value(arm.detail["preemption"].clone()).unwrap();
            let (w, parts) = (p.window.unwrap(), &p.window_parts);
            assert_eq!(parts.len(), 2);
            assert_eq!(
                (w.start_tick, w.end_tick),
                (parts[0].start_tick, parts[1].end_tick)
            );
            assert!(parts[0].end_tick < parts[1].start_tick, "{parts:?}");
            // Totals are the arm's (both slices'), in the metrics and in the detail alike, and
            // the ratios are made from them.
            let total: f64 = slices.iter().map(|s| s.metrics["ops_total"]).sum();
            assert_eq!(arm.metrics["ops_total"], total);
            assert_eq!(arm.detail["ops_total"], total as u64);
            assert_eq!(arm.detail["ops_per_thread"], serde_json::json!([total as u64]));
            let contended: f64 = slices.iter().map(|s| s.metrics["contended"]).sum();
            assert_eq!(arm.metrics["contention_rate"], contended / total);
            assert_eq!((arm.metrics["jain"], arm.metrics["min_thread_ops"]), (1.0, total));
            // Every acquisition of both slices timed; one thread: no hand-over, and why.
            assert_eq!(p.holds.as_ref().map(|h| h.timed as f64), Some(total));
            assert_eq!(
                arm.metrics["stretched_hold_share"],
                p.holds.as_ref().unwrap().stretched_share
            );
            let why = p.handovers_unavailable.unwrap();
            assert!(why.contains("no acquisition waited"), "{why}");
        }
        assert_eq!(report.detail["order"], serde_json::json!([0, 1, 1, 0]));
    }

    /// A slice without the timing leaves the arm without it, with that slice's reason; a
    /// workload that reports none leaves both fields out.
    #[test]
    fn an_arm_without_every_slices_preemption_says_why() {
        use crate::preempt_sample::{Settings, ThreadSamples, TscCalibration, TscWindow, report};
        let with = |index: u32, detail: serde_json::Value| {
            let (mut f, mut r) = slice(index, vec![]);
            f.due_ms = 120.0 * f64::from(index);
            r.detail = serde_json::from_value(detail).unwrap();
            (f, r)
        };
        // Slice 0 timed (a report with nothing timed, as a thread that made no cycle gives).
        let tsc = TscCalibration {
            hz: 1e9,
            window_ns: 1,
            read_spread_ns: 0,
        };
        let settings = Settings {
            every: 64,
            threshold_ns: 50_000,
            hold_ns: 1_000.0,
            tsc_hz: 1e9,
            runqueue_wait: false,
            max_work_error: 0.1,
        };
        let window = TscWindow::of((0, 0), (1_000, 1_000));
        let timed = report(
            &settings,
            1.0 / 64.0,
            vec![ThreadSamples::default()],
            1_000,
            window,
            tsc.clone(),
            tsc,
        );
        let off = "hold/hand-over timing switched off (--no-hold-sampling)";
        let merged = merge(
            vec![
                with(
                    0,
                    serde_json::json!({ "preemption": timed, "preemption_unavailable": null }),
                ),
                with(
                    1,
                    serde_json::json!({ "preemption": null, "preemption_unavailable": off }),
                ),
            ],
            &args(&["lock", "::", "lock"]),
        );
        assert!(merged.detail["preemption"].is_null());
        assert_eq!(
            merged.detail["preemption_unavailable"],
            format!("a sliced run: slice 1 (due at 120 ms): {off}")
        );
        let none = merge(
            vec![with(0, serde_json::json!({})), with(1, serde_json::json!({}))],
            &args(&["ebizzy", "::", "ebizzy"]),
        );
        assert!(
            !none.detail.contains_key("preemption") && !none.detail.contains_key("preemption_unavailable")
        );
    }
}
