//! `--set KEY=VALUE` on `validate` and `run`: what an override breaks is refused as a bad field
//! of the file is (exit status 2, nothing booted, no results directory), naming the flag and the
//! field; what it sets is what `validate --json` plans.

use std::process::{Command, Output};

fn ocrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(args)
        .output()
        .expect("running ocrig")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A valid scenario on one host CPU, two levels, one lock workload (any host has one CPU).
const SCENARIO: &str = "# A comment the overridden copy does not keep.\nname: sets\nhost: {cpus: 1}\n\
                        guest: {vcpus: 1, memory_mib: 256}\nlevels: [1.0, 2.0]\nworkloads:\n  \
                        - command: lock\n    args: {algo: tas, threads: 2}\n    metric: ops_per_sec\nruns: 2\n";

fn scenario() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.yaml");
    std::fs::write(&p, SCENARIO).unwrap();
    let p = p.to_str().unwrap().to_string();
    (dir, p)
}

#[test]
fn an_unknown_key_is_refused_naming_the_flag_and_the_field() {
    let (_d, file) = scenario();
    let out = ocrig(&["validate", &file, "--set", "host.cpuz=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("--set host.cpuz=1: field `host.cpuz`: unknown field `cpuz`, expected one of `cpus`"),
        "{e}"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_refused_naming_the_flag_and_the_field() {
    let (_d, file) = scenario();
    let out = ocrig(&["validate", &file, "--set", "runs=notanumber"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(e.contains("--set runs=notanumber: field `runs`:"), "{e}");
    assert!(e.contains("found `notanumber`"), "{e}");
    // A value the checks after loading refuse names the flag too.
    let out = ocrig(&["validate", &file, "--set", "runs=0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--set runs=0: field `runs`:"),
        "{}",
        stderr(&out)
    );
    // Not KEY=VALUE at all: clap's usage error, status 2.
    let out = ocrig(&["validate", &file, "--set", "runs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is not KEY=VALUE"), "{}", stderr(&out));
}

#[test]
fn run_refuses_a_bad_override_before_anything_boots() {
    let (d, file) = scenario();
    let results = d.path().join("results");
    let out = ocrig(&[
        "run",
        &file,
        "--results",
        results.to_str().unwrap(),
        "--set",
        "host.cpuz=1",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--set host.cpuz=1: field `host.cpuz`"),
        "{}",
        stderr(&out)
    );
    assert!(!results.exists(), "a results directory was created for bad input");
}

#[test]
fn a_good_override_changes_what_validate_plans() {
    let (_d, file) = scenario();
    let plan = |sets: &[&str]| {
        let mut args = vec!["validate", "--json", file.as_str()];
        for s in sets {
            args.extend(["--set", s]);
        }
        let out = ocrig(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v[0]["plan"].clone()
    };
    let before = plan(&[]);
    // At each of 2 levels, 2 measured runs on 2 bring-ups (the default at two levels or
    // more), each warmed by 1 warm-up.
    assert_eq!(
        (
            before["levels"].as_u64(),
            before["runs"].as_u64(),
            before["bring_ups"].as_u64()
        ),
        (Some(2), Some(8), Some(4))
    );
    let after = plan(&["runs=3", "levels=[1.0, 2.0, 3.0]"]);
    assert_eq!(
        (after["levels"].as_u64(), after["runs"].as_u64()),
        (Some(3), Some(15))
    );
    let after = plan(&["schedule.bring_ups_per_level=1"]);
    assert_eq!(
        (after["runs"].as_u64(), after["bring_ups"].as_u64()),
        (Some(6), Some(2))
    );
    let after = plan(&["workloads.0.args.algo=[tas, ticket]"]);
    assert_eq!(after["workloads"].as_u64(), Some(2), "{after}");
}
