//! Malformed scenarios of many kinds: each is refused by `ocrig run` with exit status 2 and a
//! message that names the file, the line and the field, before anything boots and without a
//! results directory. (tests/commands/cli_errors.rs covers an unknown top-level field, zero threads, an
//! unknown workload command and a fractional guest count; they are not repeated here.)

use std::process::Command;

/// One malformed scenario and where its error must point.
struct Case {
    name: &'static str,
    yaml: String,
    /// 1-based line of the offending field.
    line: usize,
    /// 1-based column, where the case pins it.
    column: Option<usize>,
    /// The field as the message names it (`field \`...\``); None for YAML syntax errors.
    field: Option<&'static str>,
    /// Something else the message must say (the bad value, the rule broken).
    mention: &'static str,
}

fn case(
    name: &'static str,
    yaml: &str,
    line: usize,
    field: Option<&'static str>,
    mention: &'static str,
) -> Case {
    Case {
        name,
        yaml: yaml.to_string(),
        line,
        column: None,
        field,
        mention,
    }
}

/// A case located to its column too: `file:line:col:`.
fn case_at(
    name: &'static str,
    yaml: &str,
    (line, column): (usize, usize),
    field: &'static str,
    mention: &'static str,
) -> Case {
    Case {
        column: Some(column),
        ..case(name, yaml, line, Some(field), mention)
    }
}

/// Lines 1–4 of a valid scenario: name, host, guest, levels.
const HEAD: &str = "name: bad\nhost: {cpus: 2}\nguest: {vcpus: 1, memory_mib: 256}\nlevels: [0.5]\n";
/// Lines 5–8 of a valid scenario: one lock workload.
const WORK: &str =
    "workloads:\n  - command: lock\n    args: {algo: tas, threads: 2}\n    metric: ops_per_sec\n";

/// `HEAD` + `WORK` + `tail`, whose first line is line 9.
fn with_tail(tail: &str) -> String {
    format!("{HEAD}{WORK}{tail}")
}

/// How a case is fed to ocrig.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// `ocrig run`: also checks nothing is created.
    Run,
    /// `ocrig validate`: for cases ocrig wrongly accepts, so that a miss cannot boot guests.
    Validate,
}

fn check(c: &Case) -> Option<String> {
    check_via(c, Via::Run)
}

/// Runs ocrig on `c.yaml`; returns what is wrong with the outcome, if anything.
fn check_via(c: &Case, via: Via) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{}.yaml", c.name));
    std::fs::write(&file, &c.yaml).unwrap();
    let results = dir.path().join("results");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ocrig"));
    match via {
        Via::Run => cmd
            .arg("run")
            .arg(&file)
            .arg("--quiet")
            .arg("--results")
            .arg(&results),
        Via::Validate => cmd.arg("validate").arg(&file),
    };
    let out = cmd.output().expect("running ocrig");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut problems = Vec::new();
    if out.status.code() != Some(2) {
        problems.push(format!("exit status {:?}, not 2", out.status.code()));
    }
    let at = match c.column {
        Some(col) => format!("{}:{}:{col}:", file.display(), c.line),
        None => format!("{}:{}:", file.display(), c.line),
    };
    if !stderr.contains(&at) {
        problems.push(format!("not located at {at}"));
    }
    if let Some(field) = c.field
        && !stderr.contains(&format!("field `{field}`"))
    {
        problems.push(format!("does not name field `{field}`"));
    }
    if !stderr.contains(c.mention) {
        problems.push(format!("does not mention {:?}", c.mention));
    }
    if results.exists() {
        problems.push("created a results directory".into());
    }
    if stderr.contains("ocrig: accel") || stderr.contains("results in") {
        problems.push("went on past validation (accel chosen or results made)".into());
    }
    (!problems.is_empty()).then(|| {
        format!(
            "case `{}`: {}\n  yaml:\n{}\n  exit {:?}, stderr:\n{}",
            c.name,
            problems.join("; "),
            c.yaml
                .lines()
                .map(|l| format!("    | {l}"))
                .collect::<Vec<_>>()
                .join("\n"),
            out.status.code(),
            stderr.trim_end()
        )
    })
}

fn check_all(cases: &[Case]) {
    report(cases.iter().filter_map(check).collect(), cases.len());
}

fn validate_all(cases: &[Case]) {
    report(
        cases.iter().filter_map(|c| check_via(c, Via::Validate)).collect(),
        cases.len(),
    );
}

fn report(failures: Vec<String>, total: usize) {
    assert!(
        failures.is_empty(),
        "{} of {} malformed scenarios were not refused properly:\n\n{}",
        failures.len(),
        total,
        failures.join("\n\n")
    );
}

#[test]
fn malformed_scenarios_are_refused_with_file_line_and_field() {
    let cases = vec![
        // YAML itself.
        case(
            "syntax-indent",
            "name: bad\nlevels: [0.5]\n  workloads: []\n",
            3,
            None,
            "expected key",
        ),
        case(
            "syntax-tab",
            "name: bad\nlevels: [0.5]\nworkloads:\n\t- command: lock\n",
            4,
            None,
            "cannot start any token",
        ),
        case("not-a-mapping", "- a\n- b\n", 1, None, "expected struct Scenario"),
        // Unknown fields below the top level.
        case(
            "unknown-nested-field",
            &with_tail("timeouts: {run_s: 5, boot: 3}\n"),
            9,
            Some("timeouts"),
            "unknown field `boot`",
        ),
        case(
            "unknown-variant-field",
            &format!("{HEAD}variants:\n  - name: a\n    cmdlin: x\n{WORK}"),
            7,
            Some("variants[0]"),
            "unknown field `cmdlin`",
        ),
        case(
            "unknown-guest-field",
            "name: bad\nhost: {cpus: 2}\nguest:\n  vcpuz: 1\nlevels: [0.5]\n",
            4,
            Some("guest"),
            "unknown field `vcpuz`",
        ),
        case(
            "missing-metric",
            &format!("{HEAD}workloads:\n  - command: lock\n"),
            6,
            Some("workloads[0]"),
            "missing field `metric`",
        ),
        // Levels.
        case(
            "levels-wrong-type",
            &format!("name: bad\nhost: {{cpus: 2}}\nlevels: half\n{WORK}"),
            3,
            Some("levels"),
            "expected a sequence",
        ),
        case(
            "level-negative",
            &format!("name: bad\nhost: {{cpus: 2}}\nlevels:\n  - 0.5\n  - -1\n{WORK}"),
            5,
            Some("levels[1]"),
            "positive",
        ),
        case(
            "level-zero",
            &format!("name: bad\nhost: {{cpus: 2}}\nlevels: [0]\n{WORK}"),
            3,
            Some("levels[0]"),
            "positive",
        ),
        case(
            "level-nan",
            &format!("name: bad\nhost: {{cpus: 2}}\nlevels: [.nan]\n{WORK}"),
            3,
            Some("levels[0]"),
            "positive",
        ),
        case(
            "levels-empty",
            &format!("name: bad\nhost: {{cpus: 2}}\nlevels: []\n{WORK}"),
            3,
            Some("levels"),
            "at least one",
        ),
        // Guest and host shape.
        case(
            "zero-vcpus",
            &format!("name: bad\nhost: {{cpus: 2}}\nguest:\n  vcpus: 0\nlevels: [0.5]\n{WORK}"),
            4,
            Some("guest.vcpus"),
            "at least 1",
        ),
        case(
            "memory-larger-than-host",
            &format!(
                "name: bad\nhost: {{cpus: 2}}\nguest:\n  vcpus: 1\n  memory_mib: 99999999\nlevels: [0.5]\n{WORK}"
            ),
            5,
            Some("guest.memory_mib"),
            "available",
        ),
        case(
            "memory-too-small",
            &format!("name: bad\nhost: {{cpus: 2}}\nguest: {{memory_mib: 32}}\nlevels: [0.5]\n{WORK}"),
            3,
            Some("guest.memory_mib"),
            "too small",
        ),
        case(
            "more-host-cpus-than-allowed",
            &format!("name: bad\nhost: {{cpus: 4096}}\nlevels: [0.5]\n{WORK}"),
            2,
            Some("host.cpus"),
            "4096",
        ),
        case(
            "host-cpu-listed-twice",
            &format!("name: bad\nhost: {{cpus: [0, 0]}}\nlevels: [0.5]\n{WORK}"),
            2,
            Some("host.cpus"),
            "twice",
        ),
        case(
            "unknown-backend",
            &format!("name: bad\nhost: {{cpus: 2, backend: xen}}\nlevels: [0.5]\n{WORK}"),
            2,
            Some("host.backend"),
            "xen",
        ),
        case(
            "bad-name",
            &format!("name: 'bad name'\nhost: {{cpus: 2}}\nlevels: [0.5]\n{WORK}"),
            1,
            Some("name"),
            "bad name",
        ),
        // Variants.
        case(
            "duplicate-variant-names",
            &format!("{HEAD}variants:\n  - name: a\n  - name: a\n{WORK}"),
            7,
            Some("variants[1].name"),
            "twice",
        ),
        case(
            "two-baselines",
            &format!(
                "{HEAD}variants:\n  - name: a\n    baseline: true\n  - name: b\n    baseline: true\n{WORK}"
            ),
            5,
            Some("variants"),
            "baseline",
        ),
        case(
            "missing-kernel-file",
            &format!("{HEAD}variants:\n  - name: a\n    kernel: {{path: /nonexistent/bzImage}}\n{WORK}"),
            7,
            Some("variants[0].kernel"),
            "/nonexistent/bzImage",
        ),
        // Workloads.
        case(
            "unknown-lock-algo",
            &format!(
                "{HEAD}workloads:\n  - command: lock\n    metric: ops_per_sec\n    args:\n      algo: frob\n"
            ),
            9,
            Some("workloads[0].args.algo"),
            "frob",
        ),
        case(
            "threads-not-a-number",
            &format!(
                "{HEAD}workloads:\n  - command: lock\n    args: {{threads: two}}\n    metric: ops_per_sec\n"
            ),
            7,
            Some("workloads[0].args.threads"),
            "two",
        ),
        case(
            "unknown-workload-arg",
            &format!("{HEAD}workloads:\n  - command: lock\n    args: {{frob: 1}}\n    metric: ops_per_sec\n"),
            7,
            Some("workloads[0].args.frob"),
            "--frob",
        ),
        // A workload whose kernel option the guest's kernel lacks: Debian's stock kernel has no
        // locktorture module.
        case(
            "locktorture-on-a-debian-kernel",
            &format!("{HEAD}workloads:\n  - command: locktorture\n    metric: writes_per_sec\n"),
            6,
            Some("workloads[0].command"),
            "CONFIG_LOCK_TORTURE_TEST=m",
        ),
        case(
            "locktorture-long-hold-not-shorter-than-the-run",
            &format!(
                "{HEAD}workloads:\n  - command: locktorture\n    args: {{long-hold: 2000, duration-ms: 1000}}\n    metric: writes_per_sec\n"
            ),
            7,
            Some("workloads[0].args"),
            "long-hold 2000 ms is not shorter than the run",
        ),
        case(
            "empty-workloads",
            &format!("{HEAD}workloads: []\n"),
            5,
            Some("workloads"),
            "at least one workload",
        ),
        case(
            "empty-metric",
            &format!("{HEAD}workloads:\n  - command: lock\n    metric: ''\n"),
            7,
            Some("workloads[0].metric"),
            "metric",
        ),
        case(
            "unknown-better",
            &format!("{HEAD}workloads:\n  - command: lock\n    metric: ops_per_sec\n    better: sideways\n"),
            8,
            Some("workloads[0].better"),
            "sideways",
        ),
        case(
            "duplicate-workload-ids",
            &with_tail("  - command: lock\n    args: {algo: tas, threads: 2}\n    metric: ops_per_sec\n"),
            9,
            Some("workloads[1].name"),
            "twice",
        ),
        case(
            "unknown-background",
            &with_tail("background: foo\n"),
            9,
            Some("background"),
            "foo",
        ),
        // Run counts and timeouts.
        case(
            "runs-zero",
            &with_tail("runs: 0\n"),
            9,
            Some("runs"),
            "at least 1",
        ),
        case(
            "dynamic-runs-max-below-min",
            &with_tail("runs: {min: 5, max: 3, target_cv: 0.05}\n"),
            9,
            Some("runs.max"),
            "below min 5",
        ),
        case(
            "dynamic-runs-min-below-two",
            &with_tail("runs: {min: 1, max: 3, target_cv: 0.05}\n"),
            9,
            Some("runs.min"),
            "at least 2",
        ),
        case(
            "dynamic-runs-cv-not-a-fraction",
            &with_tail("runs: {min: 2, max: 3, target_cv: 2}\n"),
            9,
            Some("runs.target_cv"),
            "fraction",
        ),
        case(
            "dynamic-runs-mde-not-a-fraction",
            &with_tail("runs: {min: 2, max: 3, target_mde: 0}\n"),
            9,
            Some("runs.target_mde"),
            "fraction",
        ),
        case(
            "dynamic-runs-without-a-target",
            &with_tail("runs: {min: 2, max: 3}\n"),
            9,
            Some("runs"),
            "target_mde",
        ),
        case(
            "until-concluded-with-one-variant",
            &with_tail("runs: {until: concluded, min: 3, max: 8}\n"),
            9,
            Some("runs.until"),
            "nothing to compare",
        ),
        case(
            "until-concluded-with-a-cv-target",
            &with_tail(
                "variants:\n  - {name: a}\n  - {name: b, args: {algo: ticket}}\nruns: {until: concluded, min: 3, max: 8, target_cv: 0.05}\n",
            ),
            12,
            Some("runs.until"),
            "give one",
        ),
        case(
            "until-something-else",
            &with_tail("runs: {until: stable, min: 3, max: 8}\n"),
            9,
            Some("runs"),
            "until",
        ),
        case(
            "warmup-runs-negative",
            &with_tail("warmup_runs: -2\n"),
            9,
            Some("warmup_runs"),
            "-2",
        ),
        case(
            "retries-negative",
            &with_tail("timeouts: {retries: -1}\n"),
            9,
            Some("timeouts.retries"),
            "-1",
        ),
        case(
            "self-check-retries-too-many",
            &with_tail("timeouts: {self_check_retries: 11}\n"),
            9,
            Some("timeouts.self_check_retries"),
            "11 is more than the 10 retries",
        ),
        // The schedule.
        case(
            "runs-per-bring-up-zero",
            &with_tail("schedule: {runs_per_bring_up: 0}\n"),
            9,
            Some("schedule.runs_per_bring_up"),
            "must be at least 1",
        ),
        case(
            "bring-ups-per-level-zero",
            &with_tail("schedule: {bring_ups_per_level: 0}\n"),
            9,
            Some("schedule.bring_ups_per_level"),
            "must be at least 1",
        ),
        case(
            "bring-ups-per-level-above-the-runs",
            &with_tail("runs: 2\nschedule: {bring_ups_per_level: 3}\n"),
            10,
            Some("schedule.bring_ups_per_level"),
            "each bring-up makes one round at least",
        ),
        case(
            "own-guests-one-bring-up-a-side",
            &with_tail(
                "variants:\n  - {name: base, baseline: true}\n  - {name: own, cmdline: mitigations=off}\nruns: 1\n",
            ),
            12,
            Some("runs"),
            "the comparison needs at least 2 bring-ups per side",
        ),
        case(
            "own-guests-one-block-a-side",
            &with_tail(
                "variants:\n  - {name: base, baseline: true}\n  - {name: own, cmdline: mitigations=off}\nruns: 3\nschedule: {runs_per_bring_up: 2}\n",
            ),
            13,
            Some("schedule.runs_per_bring_up"),
            "the comparison needs at least 2 bring-ups per side",
        ),
    ];
    check_all(&cases);
}

/// Malformed scenarios that yaml_serde reports at the document start or clap misreads; ocrig
/// relocates them to their field.
#[test]
fn bad_run_counts_are_located() {
    check_all(&[
        case("runs-negative", &with_tail("runs: -1\n"), 9, Some("runs"), "-1"),
        case(
            "runs-fractional",
            &with_tail("runs: 1.5\n"),
            9,
            Some("runs"),
            "1.5",
        ),
    ]);
}

#[test]
fn duplicate_keys_are_located() {
    check_all(&[case(
        "duplicate-key",
        &with_tail("runs: 2\nruns: 3\n"),
        10,
        None,
        "duplicate field `runs`",
    )]);
}

#[test]
fn negative_duration_is_located_at_its_field() {
    check_all(&[case(
        "duration-negative",
        &format!(
            "{HEAD}workloads:\n  - command: lock\n    args: {{duration-ms: -5}}\n    metric: ops_per_sec\n"
        ),
        7,
        Some("workloads[0].args.duration-ms"),
        "-5",
    )]);
}

#[test]
fn zero_timeouts_are_refused() {
    validate_all(&[
        case(
            "run-timeout-zero",
            &with_tail("timeouts: {run_s: 0}\n"),
            9,
            Some("timeouts.run_s"),
            "0",
        ),
        case(
            "boot-timeout-zero",
            &with_tail("timeouts: {boot_s: 0}\n"),
            9,
            Some("timeouts.boot_s"),
            "0",
        ),
        case(
            "deploy-timeout-zero",
            &with_tail("timeouts: {deploy_s: 0}\n"),
            9,
            Some("timeouts.deploy_s"),
            "0",
        ),
    ]);
}

/// The table's HEAD + WORK is a valid scenario, so each case fails for its one defect only.
#[test]
fn the_tables_base_scenario_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, format!("{HEAD}{WORK}")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .arg("validate")
        .arg(&good)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The gaps a new user found: each refused at file:line:col and its field, exit 2, before
/// anything boots and without a results directory.
#[test]
fn metric_names_timeouts_and_duplicates_are_checked_where_they_stand() {
    check_all(&[
        case_at(
            "metric-never-reported",
            &format!("{HEAD}workloads:\n  - command: lock\n    args: {{algo: tas}}\n    metric: time_s\n"),
            (8, 5),
            "workloads[0].metric",
            "never reports 'time_s'",
        ),
        case_at(
            "variant-name-escapes",
            &format!("{HEAD}variants:\n  - name: ../../etc\n{WORK}"),
            (6, 5),
            "variants[0].name",
            "../../etc",
        ),
        case_at(
            "variant-name-with-slash",
            &format!("{HEAD}variants:\n  - name: base\n  - name: a/b\n{WORK}"),
            (7, 5),
            "variants[1].name",
            "a/b",
        ),
        case_at(
            "variant-name-dotdot",
            &format!("{HEAD}variants:\n  - name: '..'\n{WORK}"),
            (6, 5),
            "variants[0].name",
            "not starting with '.'",
        ),
        case_at(
            "scenario-name-dotdot",
            &format!("name: '..'\nhost: {{cpus: 2}}\nlevels: [0.5]\n{WORK}"),
            (1, 1),
            "name",
            "not starting with '.'",
        ),
        case_at(
            "boot-timeout-huge",
            &with_tail("timeouts: {boot_s: 18446744073709551615}\n"),
            (9, 12),
            "timeouts.boot_s",
            "more than the 3600 s",
        ),
        case_at(
            "run-timeout-huge",
            &with_tail("timeouts:\n  run_s: 99999999999\n"),
            (10, 3),
            "timeouts.run_s",
            "more than the 86400 s",
        ),
        case_at(
            "retries-huge",
            &with_tail("timeouts: {retries: 4000000000}\n"),
            (9, 12),
            "timeouts.retries",
            "more than the 10 retries",
        ),
        case_at(
            "run-timeout-below-duration",
            &format!(
                "{HEAD}workloads:\n  - command: lock\n    args: {{algo: tas, duration-ms: 6000}}\n    metric: ops_per_sec\ntimeouts:\n  run_s: 5\n"
            ),
            (10, 3),
            "timeouts.run_s",
            "own duration of 6 s",
        ),
        case_at(
            "duplicate-nested-key",
            &with_tail("timeouts:\n  run_s: 30\n  boot_s: 20\n  run_s: 40\n"),
            (12, 3),
            "timeouts.run_s",
            "duplicate field `run_s`",
        ),
        case_at(
            "duplicate-workload-key",
            &format!("{HEAD}workloads:\n  - command: lock\n    metric: ops_per_sec\n    metric: ops_total\n"),
            (8, 5),
            "workloads[0].metric",
            "duplicate field `metric`",
        ),
        case_at(
            "duplicate-flow-arg",
            &format!(
                "{HEAD}workloads:\n  - command: lock\n    args: {{algo: tas, threads: 2, algo: ttas}}\n    metric: ops_per_sec\n"
            ),
            (7, 35),
            "workloads[0].args.algo",
            "duplicate field `algo`",
        ),
        case_at(
            "duplicate-guest-key",
            "name: bad\nhost: {cpus: 2}\nguest:\n  vcpus: 1\n  memory_mib: 256\n  vcpus: 2\nlevels: [0.5]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
            (6, 3),
            "guest.vcpus",
            "duplicate field `vcpus`",
        ),
    ]);
}

/// Whether this host could give `accel: kvm` (hardware virtualization with kvm_intel/kvm_amd
/// and a /dev/kvm this process opens read-write): there the `accel: kvm` case does not apply.
fn host_has_usable_kvm() -> bool {
    let module = |m: &str| std::path::Path::new("/sys/module").join(m).exists();
    (module("kvm_intel") || module("kvm_amd"))
        && !module("kvm_pvm")
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok()
}

/// Accelerator, CPU model and PV-variant problems (issue 21): each refused at validation with
/// exit 2, located, before anything boots.
#[test]
fn accelerator_cpu_models_and_single_vcpu_pv_variants_are_refused_at_validation() {
    let head = "name: bad\nhost: {cpus: 2, accel: tcg}\nguest: {vcpus: 2, memory_mib: 256}\nlevels: [1.0]\n";
    let mut cases = vec![
        case_at(
            "cpu-host-under-tcg",
            &format!(
                "{head}{WORK}variants:\n  - {{name: base, baseline: true}}\n  - {{name: unhalt-off, cpu: \"host,kvm-pv-unhalt=off\"}}\nruns: 2\n"
            ),
            (11, 24),
            "variants[1].cpu",
            "CPU model 'host' requires KVM or HVF",
        ),
        case(
            "single-vcpu-pv-variants",
            &format!(
                "name: bad\nhost: {{cpus: 2}}\nguest: {{vcpus: 1, memory_mib: 256}}\nlevels: [0.5]\n{WORK}variants:\n  - {{name: base, baseline: true}}\n  - {{name: nopvspin, cmdline: nopvspin}}\nruns: 2\n"
            ),
            3,
            Some("guest.vcpus"),
            "PV spinlocks disabled, single CPU",
        ),
    ];
    if host_has_usable_kvm() {
        eprintln!("this host has usable KVM: the accel: kvm case does not apply");
    } else {
        cases.push(case(
            "accel-kvm-without-usable-kvm",
            &format!("name: bad\nhost: {{cpus: 2, accel: kvm}}\nguest: {{vcpus: 1, memory_mib: 256}}\nlevels: [0.5]\n{WORK}"),
            2,
            Some("host.accel"),
            "accel: kvm cannot be had here",
        ));
    }
    check_all(&cases);
    validate_all(&cases);
}

/// The same 1-vCPU PV variants marked as intended: a warning, and the scenario is valid.
#[test]
fn single_vcpu_pv_variants_marked_as_intended_are_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("intended.yaml");
    std::fs::write(
        &file,
        format!(
            "name: ok\nhost: {{cpus: 2}}\nguest: {{vcpus: 1, memory_mib: 256, single_vcpu_intended: true}}\nlevels: [0.5]\n{WORK}variants:\n  - {{name: base, baseline: true}}\n  - {{name: nopvspin, cmdline: nopvspin}}\nruns: 2\n"
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("single_vcpu_intended"),
        "{stderr}"
    );
}

/// Kernels that cannot be guests (issue 20's bad input): a tree without a built kernel, a path
/// that is not a kernel image, a config without what the image needs. Each is refused at
/// validation, exit 2, naming the file, the line, the field and the reason; nothing boots.
#[test]
fn kernels_that_cannot_be_guests_are_refused_at_validation() {
    let trees = tempfile::tempdir().unwrap();
    let t = trees.path();
    let good = "CONFIG_PCI=y\nCONFIG_VIRTIO=y\nCONFIG_VIRTIO_PCI=y\nCONFIG_VIRTIO_NET=y\nCONFIG_NET=y\n\
CONFIG_INET=y\nCONFIG_UNIX=y\nCONFIG_DEVTMPFS=y\nCONFIG_BLK_DEV_INITRD=y\nCONFIG_BINFMT_ELF=y\nCONFIG_BINFMT_SCRIPT=y\n\
CONFIG_PROC_FS=y\nCONFIG_SYSFS=y\nCONFIG_TMPFS=y\nCONFIG_FUTEX=y\nCONFIG_TTY=y\nCONFIG_SERIAL_8250=y\n\
CONFIG_SERIAL_8250_CONSOLE=y\nCONFIG_PVH=y\nCONFIG_MODULES=y\n";
    let tree = |name: &str, config: &str, bzimage: bool| {
        let d = t.join(name);
        std::fs::create_dir_all(d.join("arch/x86/boot")).unwrap();
        std::fs::write(d.join(".config"), config).unwrap();
        if bzimage {
            std::fs::write(d.join("arch/x86/boot/bzImage"), "bz").unwrap();
        }
        d
    };
    let unbuilt = tree("unbuilt", good, false);
    let no_net = tree("no-net", &good.replace("CONFIG_VIRTIO_NET=y\n", ""), true);
    let modular = tree(
        "modular",
        &good.replace("CONFIG_VIRTIO_NET=y", "CONFIG_VIRTIO_NET=m"),
        true,
    );
    let no_ext4 = tree("no-ext4", good, true);
    let not_kernel = t.join("README");
    std::fs::write(&not_kernel, "just text\n").unwrap();
    let variant = |k: String| format!("{HEAD}variants:\n  - name: a\n  - name: b\n    kernel: {k}\n{WORK}");
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let cases = vec![
        case(
            "tree-without-kernel",
            &variant(format!("{{tree: {}}}", unbuilt.display())),
            8,
            Some("variants[1].kernel.tree"),
            leak(format!("{} has no built kernel", unbuilt.display())),
        ),
        case(
            "path-not-a-kernel",
            &variant(format!("{{path: {}}}", not_kernel.display())),
            8,
            Some("variants[1].kernel.path"),
            leak(format!("{} is not a kernel image", not_kernel.display())),
        ),
        case(
            "tree-without-virtio-net",
            &variant(format!("{{tree: {}}}", no_net.display())),
            8,
            Some("variants[1].kernel.tree"),
            leak(format!(
                "{}/.config: CONFIG_VIRTIO_NET is not set",
                no_net.display()
            )),
        ),
        case(
            "tree-virtio-net-module-not-built",
            &variant(format!("{{tree: {}}}", modular.display())),
            8,
            Some("variants[1].kernel.tree"),
            "CONFIG_VIRTIO_NET=m, but the module virtio_net.ko is not built",
        ),
        case(
            "scratch-disk-without-ext4",
            &format!(
                "name: bad\nhost: {{cpus: 2}}\nguest: {{vcpus: 1, memory_mib: 256, scratch_disk_mib: 64, kernel: {{tree: {}}}}}\nlevels: [0.5]\n{WORK}",
                no_ext4.display()
            ),
            3,
            Some("guest.kernel.tree"),
            "CONFIG_EXT4_FS is not set (the scratch disk is ext4)",
        ),
    ];
    check_all(&cases);
    validate_all(&cases);
}
