use super::*;

#[test]
fn the_hosts_judgement_reads_per_run_with_its_bounds() {
    use crate::stats::preemption::{Labelled, Observed};
    let l = |count| Labelled { count, ns: 0.0 };
    let o = Observed {
        vcpu: l(19),
        both: l(1),
        guest: l(0),
        other_vcpu: l(4),
        unexplained: l(3),
        moved: 0,
        too_short: 40,
        unread: 0,
        error_ns: 250_000,
        runs: 2,
    };
    assert_eq!(
        observed_text(&o),
        "vcpu 9.5 · both 0.5 · guest 0 · other vCPU 2 · unexpl. 1.5 of 13.5/run ≥ 1.0 ms (tie ±0.25 ms)"
    );
}
use crate::testing::{journal, model, render};

#[test]
fn number_formats() {
    let fmt_num = |x: f64| fmt_fixed(x, decimals_for(x));
    assert_eq!(fmt_num(18.9326), "18.9326");
    assert_eq!(fmt_num(20499.375), "20499.4");
    assert_eq!(fmt_num(1234567.8), "1234568");
    assert_eq!(fmt_num(0.25), "0.250000");
    assert_eq!(fmt_level(0.5), "0.5x");
    assert_eq!(fmt_level(2.0), "2x");
    assert_eq!(fmt_pct(Some(-6.000232403367732)), "-6.00%");
    assert_eq!(fmt_p(Some(0.0123), Some(true)), "0.0123 *");
    assert_eq!(fmt_p(Some(1e-6), Some(true)), "<0.0001 *");
    // Confidences: two significant digits of what they leave out.
    assert_eq!(fmt_confidence(0.95), "95 %");
    assert_eq!(fmt_confidence(1.0 - 0.05 / 2.0), "97.5 %");
    assert_eq!(fmt_confidence(1.0 - 0.05 / 3.0), "98.3 %");
    assert_eq!(fmt_confidence(1.0 - 0.05 / 144.0), "99.965 %");
    assert_eq!(fmt_confidence(1.0 - 0.05 / 76.0), "99.934 %");
    assert_eq!(fmt_confidence(0.9), "90 %");
    // Ratios: three decimals where they read, scientific where an interval of two runs a side
    // at a family's level spans orders of magnitude (never `0.000`, never a 30-digit column).
    assert_eq!(fmt_ratio_value(0.952), "0.952");
    assert_eq!(
        fmt_ratio_interval(1.166, 1.6e-15, 6.285_761_013_485_39e14),
        "1.166 [1.6e-15, 6.3e14]"
    );
    assert_eq!(
        fmt_ratio_interval(0.633, 0.0004, 14011.832),
        "0.633 [4.0e-4, 1.4e4]"
    );
    assert_eq!(
        fmt_confidence_range([0.975, 0.9875, 0.975].into_iter()).as_deref(),
        Some("97.5–98.8 %")
    );
    assert_eq!(fmt_confidence_range([0.95].into_iter()).as_deref(), Some("95 %"));
    assert_eq!(fmt_confidence_range(std::iter::empty()), None);
}

#[test]
fn merge_names_sides_and_refuses_other_matrices() {
    let (mut a, b) = (journal(), journal());
    a.header.runs_on.kernels = BTreeMap::from([("patched".into(), "6.8.0-pv".into())]);
    let m = merge(Digested::of(&a), Digested::of(&b), "v6.8", "v6.9").unwrap();
    assert_eq!(
        m.header.runs_on.kernels,
        BTreeMap::from([("v6.8/patched".into(), "6.8.0-pv".into())])
    );
    assert_eq!(m.header.baseline, "v6.8/base");
    assert_eq!(
        m.header.variants,
        ["v6.8/base", "v6.8/patched", "v6.9/base", "v6.9/patched"]
    );
    assert_eq!(m.runs.len(), a.runs.len() * 2);
    // A's records, then B's, each in journal order, renamed.
    let (da, db) = (Digested::of(&a), Digested::of(&b));
    let side = |d: &Digested, name: &str| -> Vec<RunDigest> {
        d.runs
            .iter()
            .map(|r| RunDigest {
                variant: Arc::from(format!("{name}/{}", r.variant)),
                slot: (r.slot.0 + if name == "v6.9" { OTHER_SWEEP } else { 0 }, r.slot.1),
                block: r
                    .block
                    .saturating_add(if name == "v6.9" { OTHER_SWEEP } else { 0 }),
                ..r.clone()
            })
            .collect()
    };
    assert_eq!(m.runs, [side(&da, "v6.8"), side(&db, "v6.9")].concat());

    let mut single = journal();
    single.header.variants = vec!["base".into()];
    single.runs.retain(|r| r.variant == "base");
    let single_j = single;
    let single = Digested::of(&single_j);
    let m = merge(single.clone(), single.clone(), "old", "new").unwrap();
    assert_eq!(
        (m.header.baseline.as_str(), m.header.variants.clone()),
        ("old", vec!["old".into(), "new".into()])
    );
    let opts = ReportOptions {
        compare_names: Some(vec!["old".into(), "new".into()]),
        ..Default::default()
    };
    let text = compare(single.clone(), single.clone(), Format::Table, &opts).unwrap();
    assert!(text.contains("hackbench: new vs old"), "{text}");
    let text = compare(
        single.clone(),
        single.clone(),
        Format::Table,
        &ReportOptions::default(),
    )
    .unwrap();
    assert!(text.contains("hackbench: B vs A"), "{text}");
    let mut renamed = single_j.clone();
    renamed.header.variants = vec!["v6.9".into()];
    renamed.header.baseline = "v6.9".into();
    renamed.runs.iter_mut().for_each(|r| r.variant = "v6.9".into());
    let renamed = Digested::of(&renamed);
    let text = compare(
        single.clone(),
        renamed.clone(),
        Format::Table,
        &ReportOptions::default(),
    )
    .unwrap();
    assert!(text.contains("hackbench: v6.9 vs base"), "{text}");

    let mut other = journal();
    other.header.levels = vec![0.5, 2.0];
    let e = merge(Digested::of(&a), Digested::of(&other), "A", "B")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("only in A: [1x]") && e.contains("only in B: [2x]"),
        "{e}"
    );
    let mut other = journal();
    other.header.workloads.remove("hackbench");
    let e = merge(Digested::of(&a), Digested::of(&other), "A", "B")
        .unwrap_err()
        .to_string();
    assert!(e.contains("different workloads: only in A: [hackbench]"), "{e}");
}

#[test]
fn one_kernel_for_all_variants_is_named_once() {
    let mut m = model(&journal(), &ReportOptions::default());
    let code = |v: &str| format!("`{v}`");
    assert_eq!(variants_line(&m, code), "`base`, `patched`");
    m.kernels = BTreeMap::from([("base".into(), "6.1".into()), ("patched".into(), "6.1".into())]);
    assert_eq!(
        variants_line(&m, code),
        "`base`, `patched` (kernel `6.1` for all)"
    );
    m.kernels.insert("patched".into(), "6.8".into());
    assert_eq!(
        variants_line(&m, code),
        "`base` (kernel `6.1`), `patched` (kernel `6.8`)"
    );
}

#[test]
fn every_format_says_how_many_attempts_the_self_checks_rejected() {
    let mut j = journal();
    assert!(
        !render(&j, Format::Table, &ReportOptions::default())
            .unwrap()
            .contains("rejected by self-checks (failed and retried)")
    );
    // Two records of one attempt and one of another, rejected for two reasons.
    let mut rejected = |run: u32, attempt: u32, guest: u32, why: &str| {
        let mut r = j.runs[0].clone();
        (r.run, r.attempt, r.guest, r.ok) = (run, attempt, guest, false);
        r.error = Some(format!("{}{why}", crate::journal::SELF_CHECK_REASON));
        j.runs.push(r);
    };
    rejected(
        0,
        7,
        0,
        "calibration_drift: calibration drifted x1.31 during the run",
    );
    rejected(
        0,
        7,
        1,
        "calibration_drift: calibration drifted x1.31 during the run",
    );
    rejected(
        1,
        7,
        0,
        "gap_as_asked: ran x1.25 the asked; holds_serialised: ops/s × hold = 1.13 > 1.02 for an exclusive lock",
    );
    // Counted per check (a record rejected by two counts under each), one example given.
    let line = "2 attempts rejected by self-checks (failed and retried); records rejected per check: \
                calibration_drift 2, gap_as_asked 1, holds_serialised 1; 2 distinct reasons, \
                e.g. calibration_drift: calibration drifted x1.31 during the run (2×)";
    for format in [Format::Table, Format::Md, Format::Html] {
        let text = render(&j, format, &ReportOptions::default()).unwrap();
        let text = text.replace("&#39;", "'").replace("&gt;", ">");
        // (The terminal wraps it within 120 columns.)
        assert!(one_line(&text).contains(line), "{format:?}:\n{text}");
    }
    let json = render(&j, Format::Json, &ReportOptions::default()).unwrap();
    let m: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(m["self_checks"]["attempts"], 2);
    assert_eq!(
        m["self_checks"]["by_check"][0],
        serde_json::json!(["calibration_drift", 2])
    );
}

#[test]
fn every_format_says_which_runs_nothing_judged_for_a_host_disturbance() {
    use crate::telemetry::host_load::KEY;
    let mut j = journal();
    for r in &mut j.runs {
        r.extra.insert(KEY.into(), serde_json::json!(0.002));
    }
    let quiet = render(&j, Format::Table, &ReportOptions::default()).unwrap();
    assert!(!quiet.contains("not judged for a host disturbance"), "{quiet}");
    let counted: Vec<usize> = (0..j.runs.len())
        .filter(|&i| j.runs[i].ok && !j.runs[i].warmup && j.runs[i].guest == 0)
        .collect();
    assert!(counted.len() > 2);
    j.runs[counted[0]].extra.insert(
        KEY.into(),
        serde_json::json!({"unavailable": crate::telemetry::host_load::REMOTE}),
    );
    j.runs[counted[1]].extra.remove(KEY);
    let line = format!(
        "not judged for a host disturbance: 2 of {} counted runs, the host's other load not read during them \
         (a remote host: ocrig reads this machine's processes only)",
        counted.len()
    );
    for format in [Format::Table, Format::Md, Format::Html] {
        let text = render(&j, format, &ReportOptions::default())
            .unwrap()
            .replace("&#39;", "'");
        assert!(one_line(&text).contains(&line), "{format:?}:\n{text}");
    }
    let m: serde_json::Value =
        serde_json::from_str(&render(&j, Format::Json, &ReportOptions::default()).unwrap()).unwrap();
    assert_eq!(m["disturbed"]["unjudged"], 2);
    assert_eq!(m["disturbed"]["runs"], counted.len());
}

#[test]
fn a_workload_run_under_loosened_bounds_says_so_in_every_format() {
    let mut j = journal();
    let wl = j.header.workloads.keys().next().unwrap().clone();
    j.header.workloads.get_mut(&wl).unwrap().loosened_bounds =
        vec!["--max-work-error 1 (default 0.1)".into()];
    for format in [Format::Table, Format::Md, Format::Html] {
        let text = render(&j, format, &ReportOptions::default())
            .unwrap()
            .replace("&#39;", "'");
        assert!(
            text.contains(
                "self-check bounds looser than the payload's defaults: --max-work-error 1 (default 0.1)"
            ),
            "{format:?}:\n{text}"
        );
    }
    let json = render(&j, Format::Json, &ReportOptions::default()).unwrap();
    assert!(json.contains("--max-work-error 1 (default 0.1)"));
}

#[test]
fn every_format_says_how_steady_the_host_was_before_the_sweep() {
    let mut j = journal();
    assert!(
        !render(&j, Format::Table, &ReportOptions::default())
            .unwrap()
            .contains("host speed")
    );
    j.header.host_speed = Some(serde_json::json!({
        "cpus": [0, 1], "samples": 2000, "seconds": 0.5, "p5_ns_per_iter": 0.27,
        "p50_ns_per_iter": 0.33, "p95_ns_per_iter": 0.48, "spread": 1.78, "slow_share": 0.57
    }));
    j.header.host_handover = Some(serde_json::json!({
        "cpus": [0, 1], "samples": 3000, "seconds": 0.5, "p5_ns": 54.0, "p50_ns": 58.0,
        "p95_ns": 86.0, "spread": 1.59, "slow_share": 0.31
    }));
    // CV 2 % of 0.1 s blocks: 3 runs a side detect about 2.4 × 2 % × 2 (Cohen's d ×
    // CV), 10 runs about 1.3 × 2 % × 2 (stats::power).
    j.header.noise_floor = Some(serde_json::json!({
        "cpus": [0, 1], "seconds": 1.0, "p10": 0.27, "p50": 0.33, "p90": 0.46,
        "largest_step": 1.9, "block_s": 0.1, "blocks": 20, "block_cv": 0.02
    }));
    let json = render(&j, Format::Json, &ReportOptions::default()).unwrap();
    assert!(json.contains("blocks of 0.1 s vary by CV 2.00 %"), "{json}");
    for format in [Format::Table, Format::Md, Format::Html] {
        let text = render(&j, format, &ReportOptions::default()).unwrap();
        assert!(
            text.contains(
                "host speed before the sweep: NOT steady, x1.78 between its fast and slow samples, 57 %"
            ),
            "{format:?}:\n{text}"
        );
        assert!(
            text.contains(
                "host hand-over before the sweep: NOT steady, x1.59 between its fast and slow samples, 31 %"
            ),
            "{format:?}:\n{text}"
        );
        assert!(
            text.contains(
                "host noise floor before the sweep: busy loop 0.270 / 0.330 / 0.460 ns per iteration"
            ) && text.contains("a comparison of 3 runs a side could detect"),
            "{format:?}:\n{text}"
        );
    }
}

#[test]
fn two_builds_of_one_release_are_not_one_kernel_for_all() {
    let mut j = journal();
    j.header.runs_on.kernels = BTreeMap::from([
        ("base".into(), "6.1.192".into()),
        ("patched".into(), "6.1.192".into()),
    ]);
    let code = |v: &str| format!("`{v}`");
    // Before kernel identities: the releases alone make it read as one kernel.
    let before = variants_line(&model(&j, &ReportOptions::default()), code);
    assert_eq!(before, "`base`, `patched` (kernel `6.1.192` for all)");
    let build = |n: u32, sha: &str| crate::image::KernelIdentity {
        release: "6.1.192".into(),
        version: Some(format!("#{n} SMP PREEMPT_DYNAMIC Tue Dec  1 21:0{n}:00 UTC 2026")),
        sha256: sha.into(),
        source: "tree /src/linux".into(),
        boot: "pvh".into(),
        config_sha256: Some("c0nf".into()),
        config_from: "/src/linux/.config".into(),
    };
    j.header.kernel_identity = BTreeMap::from([
        ("base".into(), build(1, "1111aaaa2222")),
        ("patched".into(), build(2, "3333bbbb4444")),
    ]);
    let after = variants_line(&model(&j, &ReportOptions::default()), code);
    assert_eq!(
        after,
        "`base` (kernel `6.1.192 #1 1111aaaa`), `patched` (kernel `6.1.192 #2 3333bbbb`)"
    );
    // The same file for both: one kernel for all again.
    j.header
        .kernel_identity
        .insert("patched".into(), build(1, "1111aaaa2222"));
    let same = variants_line(&model(&j, &ReportOptions::default()), code);
    assert_eq!(same, "`base`, `patched` (kernel `6.1.192` for all)");
    // Merged for `ocrig compare`, the identities follow the renamed variants.
    let m = merge(Digested::of(&j), Digested::of(&j), "A", "B").unwrap();
    assert_eq!(m.header.kernel_identity.len(), 4);
    assert!(m.header.kernel_identity.contains_key("B/patched"));
}

#[test]
fn write_all_writes_four_files() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_all(&Digested::of(&journal()), dir.path()).unwrap();
    let names: Vec<String> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into())
        .collect();
    assert_eq!(names, ["report.md", "report.csv", "report.json", "report.html"]);
    for p in paths {
        assert!(std::fs::metadata(p).unwrap().len() > 0);
    }
}

/// `text` with every run of white space (a wrapped line's break and indent) as one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
