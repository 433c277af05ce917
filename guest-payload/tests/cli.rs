//! Runs the built `ocrig-payload` binary: bad arguments exit with status 2 and say what is
//! wrong; a tiny valid run prints one JSON report.

use std::process::Command;

fn payload(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig-payload"))
        .args(args)
        .output()
        .expect("running ocrig-payload")
}

#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    for (args, needle) in [
        (
            &["mutex", "--algo", "bogus"][..],
            "unknown lock algorithm 'bogus'",
        ),
        (&["hackbench", "--groups", "0"], "--groups"),
        (&["ebizzy", "--threads", "0"], "--threads"),
        (
            &["dbench", "--dir", "/nonexistent/ocrig-dir"],
            "/nonexistent/ocrig-dir",
        ),
        (&["dbench", "--dir", "/tmp", "--clients", "0"], "--clients"),
        (
            &["dbench", "--dir", "/tmp", "--loadfile", "/nonexistent/client.txt"],
            "--loadfile '/nonexistent/client.txt'",
        ),
        (
            &["mutex", "--contended-delay-ns", "1000"],
            "--acquire trylock-first",
        ),
        (&["ebizzy", "--rng", "lcg"], "--rng"),
        (&["mutex", "--max-work-error", "0"], "positive fraction"),
        (&["lock", "--hold-ns", "1"], "--hold-ns 1 cannot be made here"),
        (&["lock", "--max-work-error", "0"], "positive fraction"),
        (&["lock", "--debug-scale-hold", "0"], "positive factor"),
        (&["futexlock", "--mode", "sometimes"], "sometimes"),
        (
            &["sysfs-mutex", "--root", "/nonexistent/ocrig-root"],
            "/nonexistent/ocrig-root",
        ),
        (&["frobnicate"], "frobnicate"),
    ] {
        let out = payload(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: stderr lacks '{needle}': {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
    }
}

/// A run of a few milliseconds: 1 group, 2 fds, 5 loops (2 × 2 × 5 messages).
const TINY_HACKBENCH: [&str; 7] = ["hackbench", "--groups", "1", "--fds", "2", "--loops", "5"];

#[test]
fn a_tiny_run_prints_one_json_report() {
    let out = payload(&TINY_HACKBENCH);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["workload"], "hackbench");
    assert_eq!(v["messages_received"], 2 * 2 * 5);
    assert!(v["metrics"]["time_s"].as_f64().unwrap() > 0.0);
}

/// `--proc-stat` frames the report with the machine's /proc/stat as the host splits it: one
/// copy and an end line before the report, an empty line, an end line and one copy after.
#[test]
fn proc_stat_frames_the_report_before_and_after_the_run() {
    let end = ocrig_payload::cli::PROC_STAT_END;
    let out = payload(&[&["--proc-stat"][..], &TINY_HACKBENCH].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let (before, rest) = text
        .split_once(&format!("{end}\n"))
        .expect("an end line after the first copy");
    assert!(before.starts_with("cpu ") && before.ends_with('\n'), "{before}");
    let (report, after) = rest
        .rsplit_once(&format!("\n{end}\n"))
        .expect("an end line before the second copy");
    let v: serde_json::Value = serde_json::from_str(report).expect("the report between the copies");
    assert_eq!(v["workload"], "hackbench");
    assert!(after.starts_with("cpu ") && after.contains("\nctxt "), "{after}");
    // The run's context switches happened between the two copies.
    let ctxt = |s: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix("ctxt "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert!(ctxt(after) > ctxt(before), "{before}\n{after}");
}

/// The payload's contract for a run that breaks its own check, on the mutex workload's spun
/// work: the whole report on stdout, then exit 3 and one stderr line per failed check naming
/// it. The work inside is made twice as long as asked (the test-only scale), which its check
/// refuses wherever it runs.
#[test]
fn a_broken_work_bound_exits_3_naming_the_check() {
    let out = payload(&[
        "mutex",
        "--algo",
        "tas",
        "--threads",
        "2",
        "--num",
        "1",
        "--locks",
        "2000",
        "--loops",
        "0",
        "--work-inside",
        "2000",
        "--debug-scale-inside",
        "2",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the whole report");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let inside = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "work_inside_as_asked")
        .expect("a work check")
        .clone();
    assert_eq!(inside["ok"], false, "{inside}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("ocrig-payload: check failed: "))
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("ocrig-payload: check failed: work_inside_as_asked: the 64 sampled intervals ran"),
        "{stderr}"
    );
    assert!(v["work"]["tsc_hz"].as_f64().unwrap() > 0.0);
    assert_eq!(v["debug_scale_inside"], 2.0);
}
