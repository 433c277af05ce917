//! The command line's conventions (issue 46, item 5): every argument documented with examples in
//! `--help`, shell completions and man pages generated from the same definitions, `--color`,
//! `--json` on `validate` and `doctor`, and a format version in report.json. Each runs the
//! binary as a user would; none boots a guest.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn ocrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(args)
        .env_remove("NO_COLOR")
        .output()
        .expect("running ocrig")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_subcommands_help_documents_its_positionals_and_shows_examples() {
    // (subcommand, words its help must say about its positional arguments)
    let cases: [(&[&str], &[&str]); 9] = [
        (&["run"], &["[SCENARIO]", "Scenario YAML file"]),
        (&["validate"], &["<FILE>...", "Scenario YAML files", "--json"]),
        (&["report"], &["<DIR>", "A results directory"]),
        (&["compare"], &["<DIR> <DIR>...", "The base first", "--fail-on"]),
        (&["image", "build"], &["--kernel"]),
        (
            &["doctor"],
            &["--measure", "--json", "not supported with --measure"],
        ),
        (
            &["completions"],
            &["<SHELL>", "bash", "zsh", "fish", "elvish", "powershell"],
        ),
        (&["man"], &["<DIR>", "Directory to write the pages into"]),
        (&[], &["--color <WHEN>", "Exit status", "2 bad input"]),
    ];
    for (sub, words) in cases {
        let mut args = sub.to_vec();
        args.push("--help");
        let out = ocrig(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let help = stdout(&out);
        assert!(
            help.contains("Examples:\n  ocrig "),
            "{args:?} has no examples:\n{help}"
        );
        for w in words {
            assert!(help.contains(w), "{args:?} does not say {w:?}:\n{help}");
        }
        // The short help shows the examples too.
        args.pop();
        args.push("-h");
        assert!(stdout(&ocrig(&args)).contains("Examples:"), "{args:?} -h");
    }
}

#[test]
fn bash_completion_knows_the_subcommands_and_their_flags() {
    let out = ocrig(&["completions", "bash"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = stdout(&out);
    assert!(script.contains("run"), "{script}");
    assert!(script.contains("--results"), "{script}");
    assert!(script.contains("complete -F"), "not a bash completion:\n{script}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = ocrig(&["completions", shell]);
        assert!(
            out.status.success() && stdout(&out).contains("validate"),
            "{shell}"
        );
    }
    // A shell clap_complete does not know: bad input.
    assert_eq!(ocrig(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn man_writes_a_page_for_ocrig_and_one_per_subcommand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    let out = ocrig(&["man", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let page = |name: &str| {
        let p = dir.join(name);
        assert!(p.is_file(), "{name} not written: {}", stdout(&out));
        std::fs::read_to_string(p).unwrap()
    };
    let top = page("ocrig.1");
    assert!(top.starts_with(".ie") || top.contains(".TH"), "not roff: {top}");
    assert!(top.contains("overcommit test rig"), "{top}");
    let run = page("ocrig-run.1");
    assert!(!run.is_empty());
    // The subcommand's about text (roff escapes a hyphen as `\-`, nothing in these words).
    assert!(
        run.contains("boot guests per level and variant, run workloads, journal results"),
        "{run}"
    );
    assert!(run.contains("results"), "{run}");
    for name in [
        "ocrig-validate.1",
        "ocrig-report.1",
        "ocrig-compare.1",
        "ocrig-doctor.1",
        "ocrig-image-build.1",
    ] {
        assert!(!page(name).is_empty(), "{name}");
    }
    // It says what it wrote, one path a line.
    assert!(
        stdout(&out).lines().any(|l| l.ends_with("ocrig-run.1")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn color_is_a_global_flag_with_three_values() {
    // Accepted before or after the subcommand; a bad value is bad input.
    let tmp = tempfile::tempdir().unwrap();
    let good = write_good(tmp.path());
    for args in [
        vec!["--color", "never", "validate", good.as_str()],
        vec!["validate", good.as_str(), "--color", "always"],
        vec!["validate", "--color=auto", good.as_str()],
    ] {
        let out = ocrig(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let out = ocrig(&["--color", "sometimes", "validate", good.as_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("sometimes"), "{}", stderr(&out));
}

/// A scenario that validates on any host: the host backend (no guests, no kernel, one CPU).
fn write_good(dir: &Path) -> String {
    let file = dir.join("good.yaml");
    std::fs::write(
        &file,
        "name: good\nhost: {cpus: 1, backend: host}\nlevels: [1.0]\nworkloads:\n  - command: lock\n    \
         args: {algo: tas, threads: 1}\n    metric: ops_per_sec\nruns: 2\n",
    )
    .unwrap();
    file.to_str().unwrap().to_string()
}

#[test]
fn validate_json_says_per_file_ok_or_its_located_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let good = write_good(tmp.path());
    let bad = tmp.path().join("bad.yaml");
    // Line 6: `threads: 0`, refused by validation; line 9: an unknown field.
    std::fs::write(
        &bad,
        "name: bad\nhost: {cpus: 1, backend: host}\nlevels: [1.0]\nworkloads:\n  - command: lock\n    \
         args: {algo: tas, threads: 0}\n    metric: ops_per_sec\nruns: 2\nrunz: 3\n",
    )
    .unwrap();
    let bad = bad.to_str().unwrap();

    // Good alone: exit 0, one object.
    let out = ocrig(&["validate", "--json", &good]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("validate --json prints JSON");
    assert_eq!(v[0]["file"], json!(good));
    assert_eq!(v[0]["ok"], true);
    assert_eq!(v[0]["plan"]["levels"], 1);
    assert_eq!(v[0]["plan"]["workloads"], 1);
    assert!(v[0]["plan"]["runs"].as_u64().unwrap() >= 2, "{v}");
    assert!(v[0].get("errors").is_none(), "{v}");

    // Bad and good: exit 2 as without --json, stdout still a JSON array of both, in order.
    let out = ocrig(&["validate", "--json", bad, &good]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("validate --json prints JSON");
    let files = v.as_array().unwrap();
    assert_eq!(files.len(), 2, "{v}");
    assert_eq!(files[0]["file"], json!(bad));
    assert_eq!(files[0]["ok"], false);
    assert_eq!(files[1]["ok"], true);
    let errors = files[0]["errors"].as_array().unwrap();
    assert!(!errors.is_empty(), "{v}");
    for e in errors {
        assert_eq!(e["file"], json!(bad), "{e}");
        assert!(e["line"].as_u64().is_some(), "located: {e}");
        assert!(!e["message"].as_str().unwrap().is_empty(), "{e}");
    }
    assert!(
        errors
            .iter()
            .any(|e| e["line"] == 9 && e["message"].as_str().unwrap().contains("runz")),
        "{v}"
    );
    // The same errors as the text says on stderr (file:line: ...).
    assert!(stderr(&out).contains(&format!("{bad}:9")), "{}", stderr(&out));

    // Without --json the text is as it was.
    let out = ocrig(&["validate", &good]);
    assert!(
        stdout(&out).starts_with(&format!("{good}: ok")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn doctor_json_is_one_object_of_the_hosts_facts() {
    // ~11 s: doctor probes the host's speed, hand-over and noise floor as it always does.
    let out = ocrig(&["doctor", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("doctor --json prints JSON");
    let facts = v.as_object().unwrap();
    for key in [
        "host_cpus",
        "cpu_order",
        "host_cpus_2",
        "guests_start",
        "memory_mib",
        "accel",
        "accel_evidence",
        "accel_libvirt",
        "host_is_a_vm",
        "qemu",
        "libvirt_client",
        "libvirtd",
        "libvirt_qemu",
        "default_kernel",
        "image",
        "start_boot",
        "start_clone",
        "guest_clock",
        "vcpu_timeline",
        "host_speed",
        "host_handover",
        "host",
        "timing_hazards",
        "noise_floor",
    ] {
        assert!(facts.contains_key(key), "no {key}: {v:#}");
    }
    assert!(v["host_cpus"]["online"].as_u64().unwrap() >= 1, "{v:#}");
    assert!(v["memory_mib"]["total"].as_u64().unwrap() > 0, "{v:#}");
    assert!(
        ["kvm", "tcg"].contains(&v["accel"]["choice"].as_str().unwrap()),
        "{v:#}"
    );
    assert!(v["timing_hazards"].is_array(), "{v:#}");
    // Each probe: measured with its description, or why not.
    for probe in ["host_speed", "host_handover", "noise_floor"] {
        assert!(
            v[probe]["description"].is_string() || v[probe]["error"].is_string(),
            "{probe}: {v:#}"
        );
    }
    // With --measure it is refused as bad input, before anything runs.
    let out = ocrig(&["doctor", "--measure", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).is_empty());
}

/// A two-variant journal (base and tas at 1x, three runs each), as the runner writes it.
fn journal(dir: &Path) {
    journal_scaled(dir, 1.5, 1.0);
}

/// [`journal`] with tas's operations `scale` times base's, at `level`.
pub(crate) fn journal_scaled(dir: &Path, scale: f64, level: f64) {
    let header = json!({
        "type": "sweep", "scenario": "ticket-vs-tas", "scenario_sha256": "00", "baseline": "base",
        "variants": ["base", "tas"], "levels": [level],
        "workloads": {"lock": {"command": "lock", "metric": "ops_per_sec", "better": "higher"}},
        "backend": "qemu", "accel": "tcg", "host_cpus": [0, 1], "guest_vcpus": 1,
        "started_at": "2026-12-06T12:00:00Z", "ocrig_version": "0.1.0",
        "journal_format": 3, "guest_start": "boot", "kernels": {},
        "boots": [{"level": level, "guests": 2, "variants": ["base"]}, {"level": level, "guests": 2, "variants": ["tas"]}],
        "schedule": {"guests": "per-variant", "order": "round-robin", "runs_per_bring_up": 3},
    });
    let mut lines = vec![header.to_string()];
    for (v, variant) in ["base", "tas"].iter().enumerate() {
        for run in 0..3u32 {
            for guest in 0..2u32 {
                let ops = 900_000.0 * scale.powi(v as i32) * (1.0 + 0.02 * run as f64);
                lines.push(
                    json!({
                        "type": "run", "variant": variant, "level": level, "workload": "lock",
                        "run": run, "warmup": false, "guest": guest, "guests": 2, "ok": true,
                        "attempt": 1, "attempt_records": 2, "argv": ["lock"], "timings": {"run_s": 3.1},
                        "slot": {"boot": v, "bring_up": run + 1, "seq": 0, "block": 0},
                        "finished_at": "2026-12-06T12:00:00Z",
                        "metrics": {"ops_per_sec": ops},
                    })
                    .to_string(),
                );
            }
        }
    }
    std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
}

#[test]
fn report_json_carries_its_format_version() {
    let tmp = tempfile::tempdir().unwrap();
    journal(tmp.path());
    let out = ocrig(&["report", tmp.path().to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let v: Value = serde_json::from_str(&text).expect("report --format json prints JSON");
    assert_eq!(v["format_version"], 3, "{text}");
    assert!(
        text.starts_with("{\n  \"format_version\": 3,"),
        "first: {}",
        &text[..60]
    );
    // And the report itself is there.
    assert_eq!(v["workloads"][0]["workload"], "lock", "{text}");
}

/// `--fail-on worse[:MARGIN]` as a CI gate, and `compare` over N directories: a variant with
/// half the baseline's operations fails the gate (exit 1, the row named), one 1.5 times as fast
/// passes it (exit 0), a margin wider than the loss passes it too, and directories of other
/// levels are refused as bad input (exit 2) with the difference named.
#[test]
fn the_gate_fails_on_a_variant_shown_worse_and_compare_takes_n_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| tmp.path().join(name);
    for (name, scale, level) in [
        ("fast", 1.5, 1.0),
        ("slow", 0.5, 1.0),
        ("again", 1.5, 1.0),
        ("2x", 1.5, 2.0),
    ] {
        std::fs::create_dir_all(dir(name)).unwrap();
        journal_scaled(&dir(name), scale, level);
    }
    let path = |name: &str| dir(name).to_str().unwrap().to_string();

    let out = ocrig(&["report", &path("slow"), "--fail-on", "worse"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("gate: lock ops_per_sec 1x tas: 0.500"), "{err}");
    assert!(
        err.contains("gate: FAILED — 1 of 1 rows shown worse than base"),
        "{err}"
    );
    assert!(
        stdout(&out).contains("verdict"),
        "the report is printed all the same"
    );
    let out = ocrig(&["report", &path("slow"), "--fail-on", "worse:55%"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("gate: passed — no row of 1 shown worse than base by more than"));
    let out = ocrig(&["report", &path("fast"), "--fail-on", "worse"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Three directories in one table, the first one's baseline against every other variant.
    let out = ocrig(&[
        "compare",
        &path("fast"),
        &path("again"),
        &path("slow"),
        "--format",
        "json",
    ]);
    let model: Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(
        model["variants"],
        json!([
            "fast/base",
            "fast/tas",
            "again/base",
            "again/tas",
            "slow/base",
            "slow/tas"
        ])
    );
    let out = ocrig(&[
        "compare",
        &path("fast"),
        &path("again"),
        &path("slow"),
        "--fail-on",
        "worse:10%",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("1x slow/tas: 0.500"), "{err}");
    assert!(
        !err.contains("again/base:") && !err.contains("fast/tas:"),
        "{err}"
    );

    let out = ocrig(&["compare", &path("fast"), &path("again"), &path("2x")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains("fast and 2x ran different overcommit levels: only in fast: [1x]; only in 2x: [2x]"),
        "{}",
        stderr(&out)
    );
    let out = ocrig(&["report", &path("fast"), "--fail-on", "better"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not worse[:MARGIN]"), "{}", stderr(&out));
}
