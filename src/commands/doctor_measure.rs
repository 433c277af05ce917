//! `ocrig doctor --measure`: a short sweep with known answers on this host — an A/A pair and a
//! known effect — and whether the host tells them apart, with the figures (README, "On a KVM
//! host"). The sweep is an ordinary one (`ocrig run` of [`SCENARIO`]), journaled in the results
//! directory like any other; its verdict comes from the report's own conclusions.

use std::path::{Path, PathBuf};

use crate::orchestrate::{RunArgs, run};
use crate::scenario::BackendKind;
use crate::stats::effect::Conclusion;

/// Sized for about two minutes on a 2-CPU TCG machine: 1-vCPU guests at 1x on two host CPUs,
/// one thread per guest so nothing contends. `a-again` shares `a`'s guests (paired round by
/// round) and must not differ. With one thread a lock cycle is hold + gap + the lock's own
/// cost c, so holding H ns instead of 2000 with a 200 ns gap runs (2200 + c) / (H + 200 + c)
/// as often: `hold-4000` 0.524 at c = 0 (nearer 1 as c grows), the effect any host must find;
/// `hold-2400` 0.846, the smaller one a quiet host finds and a noisy one may not.
pub const SCENARIO: &str = "\
name: doctor-measure
description: ocrig doctor --measure, an A/A pair and a known effect on this host
host:
  cpus: 2
guest:
  vcpus: 1
  memory_mib: 256
levels: [1.0]
variants:
  - {name: a, baseline: true}
  - {name: a-again}
  - {name: hold-4000, args: {hold-ns: 4000}}
  - {name: hold-2400, args: {hold-ns: 2400}}
workloads:
  - name: lock
    command: lock
    args: {algo: tas, threads: 1, hold-ns: 2000, gap-ns: 200, duration-ms: 1000}
    metric: ops_per_sec
    better: higher
runs: {until: concluded, min: 3, max: 10}
";

/// A known effect's ratio when the lock itself costs nothing, the lowest it can be: holding
/// `hold` ns instead of 2000, with a 200 ns gap.
fn ratio_at_no_cost(hold: f64) -> f64 {
    2200.0 / (hold + 200.0)
}

/// The most runs the shipped KVM-sized scenarios give a comparison (`kvm_runs: {max: 20}` in
/// scenarios/examples/own-kernels.yaml, scenarios/reproductions/seed004-qspinlock.yaml and
/// seed004-spinfirst.yaml; a test keeps them in step).
pub const KVM_RUNS_MAX: usize = 20;

/// What a comparison of this host resolves at a given number of runs, from the A/A pair's
/// interval: its standard error of the log ratio over its units scaled to that many.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    /// Standard error of the A/A log ratio as measured, and its units.
    pub se_log: f64,
    pub units: usize,
    /// The smallest effect `runs` would find with 80 % power (two-sided 5 %), a fraction.
    pub detectable: f64,
    /// Runs that show equivalence within ±margin with 80 % power where there is no effect
    /// (two one-sided tests at 5 %); None beyond 1000.
    pub equivalence_runs: Option<usize>,
}

/// [`Sizing`] at `runs` from an interval `low..high` (95 %, `df` degrees of freedom) over `units`
/// units. A comparison's standard error shrinks as 1/√units and its degrees of freedom grow with
/// the units (n − 1 paired, about 2n − 2 unpaired: scaled by (runs − 1) / (units − 1)).
pub fn sizing(low: f64, high: f64, df: f64, units: usize, runs: usize, margin: f64) -> Option<Sizing> {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    if !(low > 0.0 && high > low && df > 0.0 && units >= 2 && runs >= 2) {
        return None;
    }
    let t = |p: f64, df: f64| StudentsT::new(0.0, 1.0, df).ok().map(|d| d.inverse_cdf(p));
    let se_log = (high / low).ln() / (2.0 * t(0.975, df)?);
    let at = |n: usize| {
        let df_n = df * (n as f64 - 1.0) / (units as f64 - 1.0);
        (se_log * (units as f64 / n as f64).sqrt(), df_n)
    };
    let (se, df_runs) = at(runs);
    let lambda = crate::stats::power::required_noncentrality(df_runs, 0.05, 0.8)?;
    let bound = (1.0 + margin).ln().min(-(1.0 - margin).ln());
    let equivalence_runs = (2..=1000).find(|&n| {
        let (se, df_n) = at(n);
        t(0.95, df_n)
            .zip(t(0.9, df_n))
            .is_some_and(|(a, b)| bound / se >= a + b)
    });
    Some(Sizing {
        se_log,
        units,
        detectable: (lambda * se).exp() - 1.0,
        equivalence_runs,
    })
}

/// The KVM sizing line: whether [`KVM_RUNS_MAX`] runs conclude at this host's spread.
fn sizing_words(s: &Sizing, accel: &str, margin: f64) -> String {
    let m = margin * 100.0;
    let mut w = format!(
        "KVM sizing: the shipped KVM scenarios give a comparison up to {KVM_RUNS_MAX} runs (kvm_runs); at this \
         host's spread (A/A log-ratio standard error {:.4} over {} units) {KVM_RUNS_MAX} runs find effects of {:.1} % \
         or more (80 % power, one comparison at two-sided 5 %: a report adjusts over its family and looks, so needs \
         somewhat more)",
        s.se_log,
        s.units,
        s.detectable * 100.0
    );
    match s.equivalence_runs {
        Some(n) if n <= KVM_RUNS_MAX && s.detectable <= margin => w.push_str(&format!(
            " and show equivalence within ±{m:.0} % in {n}: they conclude here"
        )),
        Some(n) => w.push_str(&format!(
            "; equivalence within ±{m:.0} % needs {n} runs: effects under {:.1} % stay \"not concluded\" here unless \
             kvm_runs.max is raised to {n}",
            s.detectable * 100.0
        )),
        None => w.push_str(&format!(
            "; equivalence within ±{m:.0} % is out of reach (over 1000 runs): this host is too noisy for claims that small"
        )),
    }
    if accel != "kvm" {
        w.push_str(&format!(
            " (measured under {}: run this on the KVM host the sizing is for)",
            accel.to_uppercase()
        ));
    }
    w
}

/// What the host showed: each comparison's words and whether it is the known answer.
#[derive(Debug)]
pub struct Verdict {
    pub lines: Vec<String>,
    pub ok: bool,
}

/// Runs the sweep into `results` (on `backend`, default the scenario's), then judges it.
pub fn measure(results: &Path, backend: Option<BackendKind>) -> anyhow::Result<()> {
    // The scenario as a file for `ocrig run` (the results directory keeps its own copy).
    let file = std::env::temp_dir().join(format!("ocrig-doctor-measure-{}.yaml", std::process::id()));
    std::fs::write(&file, SCENARIO)?;
    println!(
        "measuring: an A/A pair and two known effects (hold 4000 and 2400 vs 2000 ns) in 1-vCPU guests at 1x \
         on 2 CPUs, each comparison until concluded or 10 runs (about two minutes under TCG)"
    );
    let swept = run(&RunArgs {
        scenario: Some(file.clone()),
        results: results.to_path_buf(),
        resume: None,
        backend,
        quiet: true,
        wait_for_cpus: true,
        accept_changed: false,
        sets: Vec::new(),
    });
    let _ = std::fs::remove_file(&file);
    swept?;
    let swept = newest_sweep(results)?;
    let journal = crate::stats::digest::Digested::read(&swept, false)?;
    let model = crate::report::model_digested(&journal, &crate::report::ReportOptions::default());
    let v = judge(&model)?;
    for l in &v.lines {
        println!("{l}");
    }
    println!("results: {} (`ocrig report` reads it)", swept.display());
    anyhow::ensure!(
        v.ok,
        "this host did not give the known answers (above): its figures would not bear the bets a report offers"
    );
    println!(
        "verdict: this host tells an A/A pair from a known effect; its reports' conclusions can be bet on"
    );
    Ok(())
}

/// The newest `doctor-measure-*` sweep under `results`.
fn newest_sweep(results: &Path) -> anyhow::Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(results)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("doctor-measure-"))
        })
        .collect();
    dirs.sort();
    dirs.pop()
        .ok_or_else(|| anyhow::anyhow!("no doctor-measure sweep in {}", results.display()))
}

/// The A/A pair must not differ (and should be equivalent); the known effect must differ,
/// below 1 and not below its no-cost bound (beyond the interval's reach).
pub fn judge(model: &crate::stats::cells::Model) -> anyhow::Result<Verdict> {
    let w = model
        .workloads
        .first()
        .ok_or_else(|| anyhow::anyhow!("the sweep has no workload"))?;
    let row = |variant: &str| {
        w.comparisons
            .iter()
            .find(|c| c.variant == variant)
            .and_then(|c| c.rows.first())
            .ok_or_else(|| anyhow::anyhow!("no comparison of {variant} in the sweep"))
    };
    let words = |r: &crate::stats::cells::Row| match &r.effect {
        Some(e) => format!(
            "{:.3} [{:.3}, {:.3}] over {} {}, {}",
            e.ratio,
            e.low,
            e.high,
            e.n_variant,
            e.unit.plural(),
            r.conclusion.words()
        ),
        None => format!("no ratio: {}", r.why.as_deref().unwrap_or("not estimated")),
    };
    let aa = row("a-again")?;
    let mut lines = Vec::new();
    let aa_ok = aa.conclusion != Conclusion::Differs && aa.effect.is_some();
    lines.push(format!(
        "A/A (a-again / a, same guests): {} — {}",
        words(aa),
        match aa.conclusion {
            Conclusion::Equivalent => format!("right: shown equivalent within ±{:.0} %", model.margin * 100.0),
            Conclusion::NotConcluded => format!(
                "no false difference, but not shown equivalent within ±{:.0} %: this host's noise is too high for claims that \
                 small at 10 runs",
                model.margin * 100.0
            ),
            Conclusion::Differs => "WRONG: a difference where there is none".into(),
            Conclusion::Untested => "not tested".into(),
        }
    ));
    // Found: "differs", below 1, and not beyond what no lock cost at all allows (less a
    // tenth for the host's own speed states).
    let found = |r: &crate::stats::cells::Row, hold: f64| {
        r.conclusion == Conclusion::Differs
            && r.effect
                .as_ref()
                .is_some_and(|e| e.ratio < 1.0 && e.high > ratio_at_no_cost(hold) * 0.9)
    };
    let (large, small) = (row("hold-4000")?, row("hold-2400")?);
    let large_found = found(large, 4000.0);
    lines.push(format!(
        "large known effect (hold 4000 / 2000 ns, {:.3} to 1 by the lock's own cost): {} — {}",
        ratio_at_no_cost(4000.0),
        words(large),
        if large_found {
            "right: found, with the right sign and size"
        } else {
            "WRONG: not found, or with the wrong sign or size"
        }
    ));
    lines.push(format!(
        "small known effect (hold 2400 / 2000 ns, {:.3} to 1): {} — {}",
        ratio_at_no_cost(2400.0),
        words(small),
        if found(small, 2400.0) {
            "found: this host resolves an effect of this size in 10 runs"
        } else if small.conclusion == Conclusion::Differs {
            "WRONG: a difference of the wrong sign or size"
        } else {
            "not found in 10 runs: comparisons here need more runs (or a quieter host) for effects this small"
        }
    ));
    if let Some(s) = aa
        .effect
        .as_ref()
        .and_then(|e| sizing(e.low, e.high, e.df, e.n_variant, KVM_RUNS_MAX, model.margin))
    {
        lines.push(sizing_words(&s, &model.accel, model.margin));
    }
    let small_wrong = small.conclusion == Conclusion::Differs && !found(small, 2400.0);
    Ok(Verdict {
        lines,
        ok: aa_ok && large_found && !small_wrong,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Journal, SweepHeader};
    use crate::testing::record;

    /// A sweep of [`SCENARIO`] whose runs read `values` per variant (ops/s, one per round).
    fn model_of(values: &[(&str, [f64; 6])]) -> crate::stats::cells::Model {
        let header: SweepHeader = crate::testing::header_with(serde_json::json!({
            "scenario": "doctor-measure", "scenario_sha256": "00", "baseline": "a",
            "variants": ["a", "a-again", "hold-4000", "hold-2400"], "levels": [1.0],
            "workloads": {"lock": {"command": "lock", "metric": "ops_per_sec", "better": "higher"}},
            "backend": "qemu", "accel": "tcg", "host_cpus": [0, 1], "guest_vcpus": 1,
            "started_at": "2026-12-05T00:00:00Z", "ocrig_version": "0.1.0",
        }));
        let mut runs = Vec::new();
        for (boot, (v, xs)) in values.iter().enumerate() {
            for (i, x) in xs.iter().enumerate() {
                let mut r = record(v, 1.0, "lock", i as u32, &[("ops_per_sec", *x)]);
                // A bring-up per run, one block: compared unpaired over the runs.
                r.slot = crate::journal::Slot {
                    boot: boot as u32,
                    bring_up: i as u32 + 1,
                    seq: 0,
                    block: 0,
                };
                runs.push(r);
            }
        }
        let journal = Journal { header, runs };
        crate::testing::model(&journal, &crate::report::ReportOptions::default())
    }

    const A: [f64; 6] = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1000.0];
    const A_AGAIN: [f64; 6] = [1001.0, 1008.0, 992.0, 1003.0, 996.0, 1001.0];
    const HOLD_4000: [f64; 6] = [610.0, 600.0, 605.0, 598.0, 602.0, 606.0];

    #[test]
    fn a_host_that_gives_the_known_answers_passes_and_says_what_it_resolved() {
        let m = model_of(&[
            ("a", A),
            ("a-again", A_AGAIN),
            ("hold-4000", HOLD_4000),
            ("hold-2400", A),
        ]);
        let v = judge(&m).unwrap();
        assert!(v.ok, "{:#?}", v.lines);
        assert!(v.lines[0].contains("equivalent"), "{}", v.lines[0]);
        assert!(v.lines[1].contains("right: found"), "{}", v.lines[1]);
        // The small effect unseen: said, not a failure.
        assert!(v.lines[2].contains("not found in 10 runs"), "{}", v.lines[2]);
    }

    #[test]
    fn a_false_difference_or_a_missed_large_effect_fails_the_host() {
        let shifted = A.map(|x| x * 1.2);
        let v = judge(&model_of(&[
            ("a", A),
            ("a-again", shifted),
            ("hold-4000", HOLD_4000),
            ("hold-2400", A),
        ]))
        .unwrap();
        assert!(!v.ok);
        assert!(v.lines[0].contains("WRONG"), "{}", v.lines[0]);
        // hold-4000 no slower than a: missed.
        let v = judge(&model_of(&[
            ("a", A),
            ("a-again", A_AGAIN),
            ("hold-4000", A_AGAIN),
            ("hold-2400", A),
        ]))
        .unwrap();
        assert!(!v.ok);
        assert!(v.lines[1].contains("WRONG"), "{}", v.lines[1]);
        // An effect faster than holding longer allows (the wrong sign) fails too.
        let faster = A.map(|x| x * 1.3);
        let v = judge(&model_of(&[
            ("a", A),
            ("a-again", A_AGAIN),
            ("hold-4000", HOLD_4000),
            ("hold-2400", faster),
        ]))
        .unwrap();
        assert!(!v.ok, "{:#?}", v.lines);
    }

    #[test]
    fn the_kvm_sizing_is_said_from_the_a_a_spread() {
        // A paired A/A interval of 10 units, df 9: [0.98, 1.02] is a standard error of
        // ln(1.02/0.98) / (2 t(0.975, 9)) = 0.040005 / 4.5244 = 0.008842 (t from tables: 2.2622).
        let s = sizing(0.98, 1.02, 9.0, 10, 20, 0.05).unwrap();
        assert!((s.se_log - 0.008842).abs() < 2e-5, "{s:?}");
        // At 20 runs (df 19) the noncentrality for 80 % power is about t(0.975,19) + t(0.8,19)
        // = 2.093 + 0.861 = 2.95 (a little more exactly): 2.95 x 0.008842 x sqrt(10/20) = 1.85 %.
        assert!((s.detectable - 0.0186).abs() < 0.001, "{s:?}");
        // Equivalence: ln(1.05) / (0.008842 x sqrt(10/n)) >= t(0.95) + t(0.9) (~3.1 at small n):
        // n = 3 gives 0.0488 / 0.01614 = 3.02 < 2.92 + 1.886; n = 4: 3.49 < 2.353 + 1.638 = 3.99;
        // n = 5: 3.90 < 2.132 + 1.533 = 3.67? no, 3.90 >= 3.67: 5.
        assert_eq!(s.equivalence_runs, Some(5), "{s:?}");
        let w = sizing_words(&s, "kvm", 0.05);
        assert!(w.ends_with("in 5: they conclude here"), "{w}");
        // Ten times the spread: neither.
        let noisy = sizing(0.8, 1.25, 9.0, 10, 20, 0.05).unwrap();
        let w = sizing_words(&noisy, "tcg", 0.05);
        assert!(noisy.detectable > 0.05, "{noisy:?}");
        assert!(
            w.contains("stay \"not concluded\" here unless kvm_runs.max is raised to")
                && w.ends_with("(measured under TCG: run this on the KVM host the sizing is for)"),
            "{w}"
        );
        assert_eq!(sizing(1.0, 1.0, 9.0, 10, 20, 0.05), None);
    }

    #[test]
    fn the_shipped_kvm_scenarios_give_a_comparison_the_runs_the_sizing_judges() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
        let mut seen = 0;
        let folders = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        for e in folders
            .filter(|p| p.is_dir())
            .flat_map(|d| std::fs::read_dir(d).unwrap())
        {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            for l in text.lines().filter(|l| l.starts_with("kvm_runs:")) {
                seen += 1;
                assert!(l.contains(&format!("max: {KVM_RUNS_MAX}")), "{l}");
            }
        }
        assert!(seen >= 3, "{seen} scenarios with kvm_runs");
    }
}
