//! Bad input is refused with a located message and exit status 2, before anything boots and
//! without leaving a results directory behind.

use std::process::{Command, Output};

fn ocrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(args)
        .output()
        .expect("running ocrig")
}

fn run_scenario(yaml: &str) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("bad.yaml");
    std::fs::write(&scenario, yaml).unwrap();
    let results = dir.path().join("results");
    let out = ocrig(&[
        "run",
        scenario.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    assert!(!results.exists(), "a results directory was created for bad input");
    (out, dir)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const GOOD_HEAD: &str = "name: bad\nlevels: [0.5]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n";

#[test]
fn missing_scenario_file() {
    let (out, _d) = run_scenario_path("/nonexistent/scenario.yaml");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/nonexistent/scenario.yaml"),
        "{}",
        stderr(&out)
    );
}

fn run_scenario_path(path: &str) -> (Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    let out = ocrig(&["run", path, "--results", results.to_str().unwrap()]);
    assert!(!results.exists());
    (out, dir)
}

#[test]
fn unknown_field_is_located() {
    let (out, d) = run_scenario(&format!("{GOOD_HEAD}    args: {{threads: 2}}\nrunz: 3\n"));
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    let file = d.path().join("bad.yaml");
    assert!(e.contains(&format!("{}:7:", file.display())), "{e}");
    assert!(e.contains("runz"), "{e}");
}

#[test]
fn zero_threads_is_located_at_its_field() {
    let (out, _d) = run_scenario(&format!("{GOOD_HEAD}    args:\n      threads: 0\n"));
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains(":7:") && e.contains("workloads[0].args.threads"),
        "{e}"
    );
}

#[test]
fn unknown_workload_is_located_at_command() {
    let (out, _d) =
        run_scenario("name: bad\nlevels: [0.5]\nworkloads:\n  - command: frobnicate\n    metric: x\n");
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(
        e.contains(":4:") && e.contains("workloads[0].command") && e.contains("frobnicate"),
        "{e}"
    );
}

#[test]
fn fractional_guest_count_is_explained() {
    let (out, _d) = run_scenario(
        "name: bad\nhost: {cpus: 2}\nguest: {vcpus: 2}\nlevels: [1.0, 1.5]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
    );
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("levels[1]") && e.contains("1.500 guests"), "{e}");
}

#[test]
fn validate_accepts_every_shipped_scenario() {
    let files: Vec<String> = crate::schema::shipped_scenarios()
        .into_iter()
        // Their build trees are the user's; tests/guests/own_kernel.rs, locktorture.rs and
        // reproductions.rs validate them with real ones.
        .filter(|p| {
            !["own-kernels.yaml", "locktorture.yaml", "seed004-spinfirst.yaml"]
                .iter()
                .any(|s| p.ends_with(s))
        })
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert!(!files.is_empty());
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let out = ocrig(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).matches(": ok").count(),
        files.len()
    );
}
