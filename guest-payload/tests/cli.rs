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

#[test]
fn a_tiny_run_prints_one_json_report() {
    let out = payload(&["hackbench", "--groups", "1", "--fds", "2", "--loops", "5"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["workload"], "hackbench");
    assert_eq!(v["messages_received"], 2 * 2 * 5);
    assert!(v["metrics"]["time_s"].as_f64().unwrap() > 0.0);
}
