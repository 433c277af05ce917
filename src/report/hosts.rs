//! Sweeps over several hosts: every table split by host ([`split_by_host`]: each variant
//! becomes `variant@host`, so every report format shows one row per host), and the agreement
//! check ([`agreement`]): per cell, the valid results of each host against those of the other
//! hosts (Welch's t-test); a cell whose hosts differ at `p < alpha` is flagged, since hosts that
//! were declared interchangeable should not.

use std::collections::BTreeMap;

use crate::stats::compare::welch_t_test;
use crate::stats::digest::{Digested, RunDigest};

/// The hosts named in the journal's records, in the header's order first.
pub fn hosts(j: &Digested) -> Vec<String> {
    let mut named: Vec<&str> = Vec::new();
    for r in &j.runs {
        if let Some(h) = r.host.as_deref()
            && !named.contains(&h)
        {
            named.push(h);
        }
    }
    let mut out: Vec<String> = j
        .header
        .runs_on
        .hosts
        .iter()
        .filter(|h| named.contains(&h.as_str()))
        .cloned()
        .collect();
    for h in named {
        if !out.iter().any(|o| o == h) {
            out.push(h.to_string());
        }
    }
    out
}

/// The journal with each variant split per host (`base@hostA`, `base@hostB`, …); the baseline
/// is the baseline on the first host. The journal is settled once, over every host, before it
/// is split: a run whose valid result one host made keeps only that result (a host that lost
/// it, and whose runs another host took over, does not count it as failed), and a run with no
/// valid result anywhere stays failed on each host that attempted it.
pub fn split_by_host(j: &Digested) -> Digested {
    let settled = crate::journal::accounting::settle(&j.runs);
    let hs = hosts(j);
    let tag = |v: &str, h: Option<&str>| match h {
        Some(h) => format!("{v}@{h}"),
        None => v.to_string(),
    };
    let mut header = j.header.clone();
    let first = hs.first().map(String::as_str);
    header.baseline = tag(&j.header.baseline, first);
    header.variants = j
        .header
        .variants
        .iter()
        .flat_map(|v| hs.iter().map(move |h| format!("{v}@{h}")))
        .collect();
    if !header.variants.contains(&header.baseline) {
        header.variants.insert(0, header.baseline.clone());
    }
    header.runs_on.kernels = j
        .header
        .runs_on
        .kernels
        .iter()
        .flat_map(|(v, k)| hs.iter().map(move |h| (format!("{v}@{h}"), k.clone())))
        .collect();
    let mut tags: BTreeMap<(&str, Option<&str>), std::sync::Arc<str>> = BTreeMap::new();
    let runs = j
        .runs
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            settled.counts(*i) || !settled.has_valid_result(&crate::journal::accounting::RunKey::of(*r))
        })
        .map(|(_, r)| RunDigest {
            variant: tags
                .entry((&*r.variant, r.host.as_deref()))
                .or_insert_with(|| tag(&r.variant, r.host.as_deref()).into())
                .clone(),
            ..r.clone()
        })
        .collect();
    Digested { header, runs }
}

/// One cell's results per host, and whether its hosts disagree.
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    pub workload: String,
    pub variant: String,
    pub level: f64,
    /// (host, valid results' headline metric).
    pub per_host: Vec<(String, Vec<f64>)>,
    /// The smallest p of each host against the others pooled (None: too few runs to test).
    pub p: Option<f64>,
    pub disagree: bool,
}

/// Every cell's agreement across hosts (cells with a single host are left out).
pub fn agreement(j: &Digested, settled: &crate::journal::accounting::Settled, alpha: f64) -> Vec<Agreement> {
    let mut cells: BTreeMap<(String, String, String), BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    for result in settled.measured_results(&j.runs) {
        let Some(r) = result
            .iter()
            .find(|r| crate::stats::digest::is_primary_guest(r.guest))
        else {
            continue;
        };
        let (Some(h), Some(info)) = (&r.host, j.header.workloads.get(&*r.workload)) else {
            continue;
        };
        let Some(v) = crate::journal::accounting::headline_of(&result, &info.metric, j.header.headline_from)
        else {
            continue;
        };
        cells
            .entry((
                r.workload.to_string(),
                r.variant.to_string(),
                format!("{:020.6}", r.level),
            ))
            .or_default()
            .entry(h.to_string())
            .or_default()
            .push(v);
    }
    cells
        .into_iter()
        .filter(|(_, by)| by.len() > 1)
        .map(|((workload, variant, level), by)| {
            let p = by
                .iter()
                .filter_map(|(h, xs)| {
                    let rest: Vec<f64> = by
                        .iter()
                        .filter(|(o, _)| *o != h)
                        .flat_map(|(_, ys)| ys.iter().copied())
                        .collect();
                    welch_t_test(xs, &rest).map(|w| w.p)
                })
                .filter(|p| p.is_finite())
                .min_by(f64::total_cmp);
            Agreement {
                workload,
                variant,
                level: level.trim().parse().unwrap_or(f64::NAN),
                per_host: by.into_iter().collect(),
                p,
                disagree: p.is_some_and(|p| p < alpha),
            }
        })
        .collect()
}

/// The agreement as a Markdown-style text table (empty when the sweep had one host).
pub fn agreement_text(j: &Digested, settled: &crate::journal::accounting::Settled, alpha: f64) -> String {
    let rows = agreement(j, settled, alpha);
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nhosts: each cell's valid runs per host (mean, n); p = Welch's t-test of a host against the others, \
         ! = hosts disagree at p < {alpha}\n\n| workload | variant | oc | per host | p | |\n|---|---|---|---|---|---|\n"
    );
    for a in &rows {
        let per: Vec<String> = a
            .per_host
            .iter()
            .map(|(h, xs)| {
                let m = crate::stats::summary::mean(xs).unwrap_or(f64::NAN);
                format!("{h}: {m:.0} (n={})", xs.len())
            })
            .collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            a.workload,
            a.variant,
            super::fmt_level(a.level),
            per.join("; "),
            a.p.map_or("-".into(), |p| format!("{p:.3}")),
            if a.disagree { "!" } else { "" }
        ));
    }
    let bad = rows.iter().filter(|a| a.disagree).count();
    if bad > 0 {
        s.push_str(&format!(
            "\n{bad} cell(s) differ between hosts declared interchangeable: check the hosts (CPU, kernel, load) before \
             pooling their runs.\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Journal, RunRecord};
    use crate::testing::header;

    fn rec(host: &str, run: u32, level: f64, v: f64) -> RunRecord {
        let mut r: RunRecord = serde_json::from_value(serde_json::json!({
            "variant": "base", "level": level, "workload": "lock", "run": run, "warmup": false,
            "guest": 0, "guests": 1, "ok": true, "attempt": 1, "attempt_records": 1,
            "metrics": {"ops_per_sec": v}, "argv": [], "timings": {}, "finished_at": "t",
            "slot": {"boot": 0, "bring_up": 1, "seq": run, "block": 0},
        }))
        .unwrap();
        r.host = Some(host.into());
        r
    }

    fn journal(runs: Vec<RunRecord>) -> Digested {
        let mut h = header();
        h.runs_on.hosts = vec!["a".into(), "b".into()];
        h.levels = vec![1.0, 2.0];
        h.workloads.insert(
            "lock".into(),
            serde_json::from_value(
                serde_json::json!({"command": "lock", "metric": "ops_per_sec", "better": "higher"}),
            )
            .unwrap(),
        );
        Digested::of(&Journal { header: h, runs })
    }

    #[test]
    fn a_cell_whose_hosts_differ_is_flagged_and_one_that_agrees_is_not() {
        let mut runs = Vec::new();
        for (i, (x, y)) in [(100.0, 101.0), (102.0, 99.0), (98.0, 100.5), (101.0, 100.0)]
            .iter()
            .enumerate()
        {
            runs.push(rec("a", 2 * i as u32, 1.0, *x));
            runs.push(rec("b", 2 * i as u32 + 1, 1.0, *y));
            runs.push(rec("a", 2 * i as u32, 2.0, *x));
            runs.push(rec("b", 2 * i as u32 + 1, 2.0, y * 2.0));
        }
        let j = journal(runs);
        let rows = agreement(&j, &crate::journal::accounting::settle(&j.runs), 0.05);
        assert_eq!(rows.len(), 2);
        assert!(!rows[0].disagree && rows[0].level == 1.0, "{rows:?}");
        assert!(rows[1].disagree && rows[1].p.unwrap() < 0.01, "{rows:?}");
        assert_eq!(rows[1].per_host[0].0, "a");
        let t = agreement_text(&j, &crate::journal::accounting::settle(&j.runs), 0.05);
        assert!(
            t.contains("| lock | base | 2x | a: 100 (n=4); b: 200 (n=4) |"),
            "{t}"
        );
        assert!(t.contains("1 cell(s) differ"), "{t}");

        let split = split_by_host(&j);
        assert_eq!(split.header.baseline, "base@a");
        assert!(split.header.variants.contains(&"base@b".to_string()));
        assert!(
            split
                .runs
                .iter()
                .all(|r| *r.variant == format!("base@{}", r.host.as_deref().unwrap()))
        );
        // The split journal renders like any other, one row per host.
        let text =
            super::super::render_digested(&split, super::super::Format::Md, &Default::default()).unwrap();
        assert!(text.contains("base@b"), "{text}");
    }

    #[test]
    fn a_run_taken_over_by_another_host_is_not_failed_on_the_lost_one() {
        let mut lost = rec("a", 1, 1.0, 0.0);
        (lost.ok, lost.metrics) = (false, Default::default());
        let mut taken_over = rec("b", 1, 1.0, 100.0);
        taken_over.attempt = 2;
        let mut never = rec("a", 3, 1.0, 0.0);
        (never.ok, never.metrics) = (false, Default::default());
        let j = journal(vec![rec("a", 0, 1.0, 100.0), lost, taken_over, never]);
        let split = split_by_host(&j);
        let s = crate::journal::accounting::settle(&split.runs);
        assert_eq!(
            s.failed_runs("base@a", 1.0, "lock"),
            1,
            "only run 3, which no host finished"
        );
        assert_eq!(s.failed_runs("base@b", 1.0, "lock"), 0);
        assert_eq!(s.counted(&split.runs).count(), 2);
    }

    #[test]
    fn a_single_host_sweep_has_no_agreement_table() {
        let j = Digested::of(&Journal {
            header: header(),
            runs: vec![],
        });
        assert!(agreement_text(&j, &crate::journal::accounting::settle(&j.runs), 0.05).is_empty());
        assert!(hosts(&j).is_empty());
    }
}
