//! The kernel probe of the built `ocrig-payload`, on the machine the tests run on: the counts
//! cover the measured window (no shorter, barely longer), scheduler events are seen where a
//! workload switches tasks, and a trace event the kernel lacks is refused naming it and the kernel.

use std::process::Command;

/// One payload at a time: the tests of this file run in parallel threads, and the probe counts
/// kernel events system-wide, so one payload's task switches would land in another's window.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn payload(args: &[&str]) -> std::process::Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_ocrig-payload"))
        .args(args)
        .output()
        .expect("running ocrig-payload")
}

fn kernel_of(out: &std::process::Output) -> (serde_json::Value, serde_json::Value) {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    (report["kernel"].clone(), report)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn counts_cover_exactly_the_window_and_see_task_switches() {
    // A futex lock with more threads than this machine may have CPUs: waiters sleep in the
    // kernel, so the scheduler must switch tasks inside the window.
    let out = payload(&[
        "--kernel-counts",
        "lock",
        "--algo",
        "futex",
        "--threads",
        "4",
        "--duration-ms",
        "300",
    ]);
    let (k, report) = kernel_of(&out);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(k["kernel"], release.trim());
    if !is_root() {
        // Unprivileged: system-wide counters are refused; the figures are null with the reason.
        assert!(k["counts"]["sched_switch"].is_null(), "{k}");
        assert!(k["not_measured"]["sched_switch"].as_str().is_some(), "{k}");
        return;
    }
    assert_eq!(k["window_end"], "workers_stopped", "{k}");
    let window = k["window_ns"].as_u64().expect("window_ns");
    let elapsed = report["elapsed_ns"].as_u64().unwrap();
    // Opened before the start stamp and closed after the elapsed time was taken...
    assert!(window >= elapsed, "window {window} < elapsed {elapsed}");
    // ...and not around the setup or the report building.
    assert!(
        window < elapsed + 50_000_000,
        "window {window} vs elapsed {elapsed}"
    );
    let switches = k["counts"]["sched_switch"]
        .as_u64()
        .expect("sched_switch counted");
    assert!(switches > 0, "{k}");
    assert!(k["counts"]["sched_wakeup"].as_u64().unwrap() > 0, "{k}");
    let rate = k["per_sec"]["sched_switch"].as_f64().unwrap();
    assert!((rate - switches as f64 / (window as f64 / 1e9)).abs() < 1e-6 * rate.max(1.0));
    let ops = report["ops_total"].as_f64().unwrap();
    assert_eq!(
        k["per_op"]["sched_switch"].as_f64().unwrap(),
        switches as f64 / ops
    );
    // Where the kernel has the lock tracepoints: sleep + spin = all begins.
    if let (Some(all), Some(spin), Some(sleep)) = (
        k["counts"]["contention_begin"].as_u64(),
        k["counts"]["spin"].as_u64(),
        k["counts"]["sleep"].as_u64(),
    ) {
        assert_eq!(all.saturating_sub(spin), sleep);
    } else {
        assert!(
            k["not_measured"]["contention_begin"]
                .as_str()
                .unwrap()
                .contains("lock:contention_begin"),
            "{k}"
        );
    }
}

#[test]
fn counting_is_off_unless_asked_for_and_says_so() {
    let out = payload(&["lock", "--threads", "1", "--duration-ms", "20"]);
    let (k, _) = kernel_of(&out);
    assert!(k["counts"]["contention_begin"].is_null(), "{k}");
    assert!(
        k["not_measured"]["sched_switch"]
            .as_str()
            .unwrap()
            .contains("--kernel-counts"),
        "{k}"
    );
}

#[test]
fn a_trace_event_the_kernel_lacks_fails_naming_the_event_and_the_kernel() {
    let out = payload(&[
        "--trace-event",
        "lock:no_such_event",
        "lock",
        "--threads",
        "1",
        "--duration-ms",
        "20",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lock:no_such_event"), "{err}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    if is_root() {
        assert!(err.contains(release.trim()), "{err}");
    }
    let out = payload(&["--trace-event", "../x:y", "lock"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a trace event"));
}

#[test]
fn a_profile_samples_the_window_and_folds_kernel_stacks() {
    let out = payload(&[
        "--profile-hz",
        "997",
        "lock",
        "--algo",
        "futex",
        "--threads",
        "4",
        "--duration-ms",
        "400",
    ]);
    let (k, _) = kernel_of(&out);
    if !is_root() {
        assert!(k["not_measured"]["profile"].as_str().is_some(), "{k}");
        return;
    }
    let p = &k["profile"];
    assert_eq!(p["rate_hz"], 997, "{k}");
    // Hardware cycles where this machine has a PMU, else cpu-clock with the reason recorded.
    let event = p["event"].as_str().unwrap();
    let pmu = std::fs::read_dir("/sys/bus/event_source/devices")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name() == "cpu" || e.file_name() == "cpu_core")
        })
        .unwrap_or(false);
    if event.starts_with("cycles") {
        assert!(pmu && p.get("event_fallback").is_none(), "{p}");
    } else {
        assert!(event.starts_with("cpu-clock"), "{p}");
        let why = p["event_fallback"]
            .as_str()
            .expect("the reason cycles were not used");
        assert!(
            why.contains("hardware cycles") && why.contains("perf_event_open"),
            "{why}"
        );
        // A machine without a PMU (this one's CPUs: a PVM guest, like TCG guests) must fall back.
        assert!(!pmu || why.contains("failed"), "{why}");
    }
    let samples = p["samples"].as_u64().unwrap();
    // 0.4 s on at least one CPU at 997 Hz: a few hundred samples (cpu-clock ticks on idle CPUs too).
    assert!(samples >= 100, "{p}");
    assert_eq!(
        p["kernel_samples"].as_u64().unwrap() + p["user_samples"].as_u64().unwrap(),
        samples
    );
    let folded = p["folded"].as_array().unwrap();
    assert!(!folded.is_empty() && folded.len() <= 200, "{p}");
    let kept: u64 = folded.iter().map(|s| s[1].as_u64().unwrap()).sum();
    assert_eq!(kept + p["other_samples"].as_u64().unwrap(), samples);
    // Kernel stacks are symbolised from /proc/kallsyms: named frames, not addresses.
    let kernel_stack = folded.iter().find(|s| s[0] != "[user]").expect("a kernel stack");
    assert!(
        kernel_stack[0]
            .as_str()
            .unwrap()
            .chars()
            .next()
            .unwrap()
            .is_ascii_alphabetic()
            || kernel_stack[0].as_str().unwrap().starts_with('_'),
        "{kernel_stack}"
    );
}

#[test]
fn profile_rates_out_of_range_are_refused() {
    for rate in ["0", "100001"] {
        let out = payload(&[
            "--profile-hz",
            rate,
            "lock",
            "--threads",
            "1",
            "--duration-ms",
            "20",
        ]);
        assert_eq!(out.status.code(), Some(2), "{rate}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("profile-hz"),
            "{rate}"
        );
    }
}
