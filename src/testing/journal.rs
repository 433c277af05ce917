//! Journal fixtures: headers and records of today's format, the two-variant journal the
//! statistics and report tests share, and records carrying payload reports (a kernel profile,
//! preemption figures).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::journal::{
    BootInfo, Entry, JOURNAL_FORMAT, Journal, RunRecord, RunsOn, ScheduleInfo, SweepHeader,
};
use crate::stats::cells::{CONTENTION_METRIC, CTXSW_INVOLUNTARY_METRIC, CTXSW_VOLUNTARY_METRIC, JAIN_METRIC};

/// A one-variant, one-level header of today's format.
pub(crate) fn header() -> SweepHeader {
    SweepHeader {
        journal_format: JOURNAL_FORMAT,
        scenario: "t".into(),
        runs_on: RunsOn {
            scenario_sha256: "00".into(),
            backend: "qemu".into(),
            accel: "tcg".into(),
            host_cpus: vec![0, 1],
            boots: vec![BootInfo {
                level: 1.0,
                guests: 1,
                variants: vec!["base".into()],
            }],
            ..RunsOn::default()
        },
        baseline: "base".into(),
        variants: vec!["base".into()],
        levels: vec![1.0],
        workloads: BTreeMap::new(),
        guest_vcpus: 1,
        scenario_path: None,
        overrides: Vec::new(),
        kernel_identity: BTreeMap::new(),
        schedule: ScheduleInfo {
            guests: crate::vocabulary::GuestSharing::Shared,
            order: crate::vocabulary::RunOrder::RoundRobin,
            seed: None,
            runs_per_bring_up: 1,
            bring_ups_per_level: 1,
        },
        started_at: "now".into(),
        ocrig_version: "0".into(),
        guest_start: "boot".into(),
        margin: None,
        looks: None,
        headline_from: crate::vocabulary::HeadlineFrom::PrimaryGuest,
        host_speed: None,
        host_handover: None,
        noise_floor: None,
    }
}

/// A header of today's format with `fields` over [`header`]'s (a fixture names what it needs).
pub(crate) fn header_with(fields: serde_json::Value) -> SweepHeader {
    let mut v = serde_json::to_value(header()).unwrap();
    for (k, x) in fields.as_object().expect("header fields").clone() {
        v[k] = x;
    }
    serde_json::from_value(v).expect("sweep header fixture")
}

/// A finished one-guest record of `variant` at `level` with these metrics (built from JSON, as
/// the journal stores it).
pub(crate) fn record(
    variant: &str,
    level: f64,
    workload: &str,
    run: u32,
    metrics: &[(&str, f64)],
) -> RunRecord {
    let metrics: BTreeMap<&str, f64> = metrics.iter().copied().collect();
    serde_json::from_value(serde_json::json!({
        "variant": variant, "level": level, "workload": workload, "run": run, "warmup": false,
        "guest": 0, "guests": 1, "ok": true, "attempt": 1, "attempt_records": 1, "metrics": metrics, "argv": [],
        "timings": {}, "finished_at": "2025-01-01T00:00:00Z",
        // Every variant its own guests, every run a bring-up of its own, all in one block:
        // the sides are compared unpaired over bring-ups (here, runs).
        "slot": {"boot": 2 * u32::from(level >= 1.0) + u32::from(variant != "base"), "bring_up": run + 1, "seq": 0, "block": 0},
        // The host's other load read around the run, as every local run has it.
        "extra": {(crate::telemetry::host_load::KEY): 0.001},
    }))
    .expect("run record fixture")
}

/// What the run probe journals for one guest of a KVM run: one vCPU waiting `wait` of the
/// run, steal share `steal`, `halts` halt exits.
pub(crate) fn telemetry_extra(
    wait: f64,
    steal: f64,
    halts: u64,
) -> serde_json::Map<String, serde_json::Value> {
    let v = serde_json::json!({
        (crate::telemetry::host_load::KEY): 0.001,
        "vcpu_sched": {"wall_s": 2.0, "mean_wait_share": wait, "vcpus": [{
            "vcpu": 0, "tid": 100, "run_s": 2.0 * (1.0 - wait), "wait_s": 2.0 * wait, "wait_share": wait,
            "timeslices": 10, "voluntary_switches": 5, "involuntary_switches": 5}]},
        "guest_stat": {"user": 190, "system": 0, "idle": 0, "steal": 10, "steal_share": steal, "busy_share": 0.95},
        "kvm": {"source": "qmp query-stats", "counters": {"halt_exits": halts, "directed_yield_attempted": 7}},
        // 4 s of pinned CPU time, busy for the vCPU's run time plus 0.4 s: other load 0.1.
        "host_stat": {"cpus": [0, 1], "user": (200.0 * (1.0 - wait)).round() as u64 + 40, "system": 0,
                      "idle": 160 + (200.0 * wait).round() as u64, "steal": 0, "per_cpu": []},
    });
    v.as_object().unwrap().clone()
}

/// A two-variant, two-level journal: `hackbench` (seconds, lower is better; journaled without
/// telemetry) and a lock workload (`ops_per_sec`, higher is better,
/// with contention, fairness and context-switch metrics and the run probe's telemetry).
pub(crate) fn journal() -> Journal {
    let header: SweepHeader = header_with(serde_json::json!({
        "scenario": "demo", "scenario_sha256": "00", "baseline": "base",
        "variants": ["base", "patched"], "levels": [0.5, 1.0],
        "workloads": {
            "hackbench": { "command": "hackbench", "metric": "seconds", "better": "lower" },
            "lock-ticket": { "command": "lock", "metric": "ops_per_sec", "better": "higher" },
        },
        "backend": "qemu", "accel": "kvm", "host_cpus": [0, 1], "guest_vcpus": 2,
        "started_at": "2025-01-01T00:00:00Z", "ocrig_version": "0.1.0",
        "journal_format": JOURNAL_FORMAT, "guest_start": "boot", "kernels": {},
        "boots": [{"level": 0.5, "guests": 1, "variants": ["base"]}, {"level": 0.5, "guests": 1, "variants": ["patched"]},
                  {"level": 1.0, "guests": 1, "variants": ["base"]}, {"level": 1.0, "guests": 1, "variants": ["patched"]}],
        "schedule": {"guests": "per-variant", "order": "round-robin", "runs_per_bring_up": 3},
    }));
    let mut runs = Vec::new();
    let hb: [(&str, f64, [f64; 3]); 4] = [
        ("base", 0.5, [10.0, 10.2, 9.8]),
        ("patched", 0.5, [9.0, 9.1, 8.9]),
        ("base", 1.0, [20.0, 21.0, 19.0]),
        ("patched", 1.0, [20.5, 21.5, 19.5]),
    ];
    for (v, l, xs) in hb {
        for (i, x) in xs.into_iter().enumerate() {
            runs.push(record(v, l, "hackbench", i as u32, &[("seconds", x)]));
        }
    }
    let lk: [(&str, f64, [f64; 3], f64, f64); 4] = [
        ("base", 0.5, [1000.0, 1100.0, 900.0], 0.25, 0.99),
        ("patched", 0.5, [1200.0, 1300.0, 1100.0], 0.20, 0.98),
        ("base", 1.0, [500.0, 520.0, 480.0], 0.5, 0.75),
        ("patched", 1.0, [800.0, 820.0, 780.0], 0.4, 0.9),
    ];
    for (v, l, xs, c, j) in lk {
        for (i, x) in xs.into_iter().enumerate() {
            let cs = 100.0 * l + i as f64;
            let m = [
                ("ops_per_sec", x),
                (CONTENTION_METRIC, c),
                (JAIN_METRIC, j),
                (CTXSW_VOLUNTARY_METRIC, cs),
                (CTXSW_INVOLUNTARY_METRIC, 2.0 * cs),
            ];
            let mut r = record(v, l, "lock-ticket", i as u32, &m);
            // vCPU wait 0.02 / 0.04 / 0.06 at 0.5x, 0.42 / 0.44 / 0.46 at 1x; steal 5 %.
            let wait = if l < 1.0 { 0.02 } else { 0.42 } + 0.02 * i as f64;
            r.extra = telemetry_extra(wait, 0.05, 1000 * (i as u64 + 1));
            runs.push(r);
        }
    }
    // Not counted as primary: a warm-up, a failure, and another guest.
    let mut warm = record("base", 0.5, "hackbench", 0, &[("seconds", 99.0)]);
    warm.warmup = true;
    let mut failed = record("base", 0.5, "hackbench", 3, &[]);
    failed.ok = false;
    failed.error = Some("timeout".into());
    let mut other = record("base", 0.5, "hackbench", 0, &[("seconds", 11.0)]);
    other.guest = 1;
    // Run 0 of that cell ran on two guests: its attempt journaled both records.
    other.attempt_records = 2;
    runs[0].attempt_records = 2;
    runs.extend([warm, failed, other]);
    Journal { header, runs }
}

/// A record of `variant` at `level` whose payload carries a kernel profile of `stacks`
/// (plus `other` samples beyond them).
pub(crate) fn profiled(variant: &str, level: f64, stacks: &[(&str, u64)], other: u64) -> RunRecord {
    let mut r = record(variant, level, "sysfs-mutex", 0, &[("ops_per_sec", 1.0)]);
    let samples: u64 = stacks.iter().map(|s| s.1).sum::<u64>() + other;
    let payload = serde_json::json!({
        "schema": 2, "workload": "sysfs-mutex", "elapsed_ns": 1_000_000_000u64,
        "env": serde_json::to_value(ocrig_payload::env::Env::read()).unwrap(),
        "metrics": {"ops_per_sec": 1.0},
        "kernel": {
            "source": "perf", "kernel": "6.1.0", "cpus": [0, 1], "window_ns": 1_000_000_000u64,
            "window_end": "workers_stopped", "counts": {}, "per_sec": {}, "per_op": {},
            "ops_field": null, "not_measured": {}, "trace_events": [],
            "profile": {
                "event": "cpu-clock", "rate_hz": 999, "samples": samples,
                "kernel_samples": samples, "user_samples": 0, "lost": 0,
                "folded": stacks, "other_samples": other, "processing_ns": 1,
                "max_sample_rate": 100000,
            },
        },
    });
    r.payload = Some(serde_json::from_value(payload).unwrap());
    r
}

/// A lock payload report's `preemption` object (holds: 1000 timed, `h` stretched, 4 of them
/// with a guest switch; hand-overs: 500 timed, `o` stretched, none with one).
pub(crate) fn preemption_json(h: u64, o: u64, lost_h: f64, lost_o: f64) -> serde_json::Value {
    let tsc = serde_json::json!({"hz": 2.0e9, "window_ns": 20_000_000, "read_spread_ns": 100});
    let stretch = |n: u64, s: u64, guest: u64, lost: f64| {
        serde_json::json!({
            "timed": n, "stretched": s, "stretched_share": s as f64 / n as f64,
            "lost_ns": lost * 3e9, "lost_share": lost,
            "stretched_guest": guest, "stretched_vcpu": s - guest, "sampled_p50_ns": 300, "sampled": n / 64,
            "stretched_len": if s == 0 { serde_json::Value::Null } else {
                serde_json::json!({"count": s, "p50_ns": 2_000_000, "p99_ns": null, "max_ns": 4_000_000})
            },
        })
    };
    serde_json::json!({
        "sample_rate": 0.015625, "sample_every": 64, "sampling": "1 in 64", "threshold_ns": 50000,
        "calibrated_hold_ns": 200.0, "tsc_before": tsc, "tsc_after": tsc,
        "holds": stretch(1000, h, h.min(4), lost_h), "holds_unavailable": null,
        "handovers": stretch(500, o, 0, lost_o), "handovers_unavailable": null,
        "not_handed_over": 0, "clock_behind": 0, "split": "test",
    })
}

/// Puts a payload report with these detail fields on `r`.
pub(crate) fn with_payload(r: &mut RunRecord, detail: serde_json::Value) {
    let mut v = serde_json::json!({
        "schema": 2, "workload": "lock", "elapsed_ns": 3_000_000_000u64,
        "env": {"kernel": "6.1", "cpus": 2, "cpus_allowed": 2, "clocksource": "tsc", "hypervisor": null, "cmdline": ""},
        "metrics": {},
    });
    for (k, x) in detail.as_object().unwrap() {
        v[k] = x.clone();
    }
    r.payload = Some(serde_json::from_value(v).expect("payload report fixture"));
}

/// `journal` written as a journal file, as `ocrig run` writes one, and its path: a report reads
/// a fixture as it reads any journal (streamed, its timelines read back from the file). Named
/// by its content's hash under the temp dir, so a fixture is one file however often a test
/// reads it, written whole by a rename; files of earlier test runs (an hour old: fixtures that
/// carry the time or a temp path differ from run to run) are removed once per process.
pub(crate) fn on_disk(journal: &Journal) -> PathBuf {
    use sha2::{Digest, Sha256};
    use std::sync::atomic::{AtomicU64, Ordering};
    let line = |e: Entry| serde_json::to_string(&e).expect("a fixture serializes") + "\n";
    let mut text = line(Entry::Sweep(Box::new(journal.header.clone())));
    for r in &journal.runs {
        text += &line(Entry::Run(Box::new(r.clone())));
    }
    let dir = std::env::temp_dir().join("ocrig-test-journals");
    std::fs::create_dir_all(&dir).unwrap();
    static TIDY: std::sync::Once = std::sync::Once::new();
    TIDY.call_once(|| {
        let old = |e: &std::fs::DirEntry| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 3600))
        };
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if old(&e) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    });
    let path = dir.join(format!("{:x}.jsonl", Sha256::digest(&text)));
    if !path.exists() {
        static N: AtomicU64 = AtomicU64::new(0);
        let part = dir.join(format!(
            ".{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&part, &text).unwrap();
        std::fs::rename(&part, &path).unwrap();
    }
    path
}
