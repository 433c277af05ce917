//! Guest packages (`guest.packages`) on real guests: Debian's sysbench, with the libraries it
//! needs, put into the guest image from this host's apt and run there as an `exec` workload.
//!
//! Checked: the image lists sysbench and its dependencies; sysbench's own report is read in
//! every guest at 1x (one 2-vCPU guest on two CPUs); the guest kernel is profiled over the
//! command's life; the guest's root is a ramfs. Then what a
//! user gets wrong, refused before anything boots (exit 2, the field named): a package Debian
//! does not have (with the closest names), and a guest too small to hold the packages.

use std::process::Command;

use serde_json::Value;

use crate::common;

const SCENARIO: &str = r#"
name: packages
description: Debian's sysbench in the guest
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 2
  memory_mib: 320
  packages: [sysbench]
levels: [1.0]
variants:
  - {name: base, profile: {rate_hz: 999}}
workloads:
  - name: cpu
    command: exec
    args:
      run: 'sysbench cpu --threads=2 --cpu-max-prime=2000 --events=400 --time=0 run; cat /proc/cmdline'
    metrics:
      - {name: events_per_s, regex: 'events per second:\s+([0-9.]+)', better: higher}
      - {name: events, regex: 'total number of events:\s+(\d+)', better: higher}
    metric: events_per_s
runs: 2
"#;

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: builds an image with Debian packages and boots a guest (~60 s; ~11 MB downloaded once)"
)]
fn a_debian_package_runs_in_the_guest_with_its_dependencies() {
    let _one = common::one_sweep();
    let (_tmp, results) = common::run_scenario("packages.yaml", SCENARIO);
    let dir = common::results_dir(&results);
    let (_header, runs) = common::journal(&dir);
    let measured: Vec<&Value> = runs
        .iter()
        .filter(|r| r["ok"] == true && r["warmup"] != true)
        .collect();
    assert_eq!(measured.len(), 2, "{runs:?}");
    for r in &measured {
        // sysbench did the events asked for and said how fast.
        assert_eq!(r["metrics"]["events"], 400.0, "{r}");
        let rate = r["metrics"]["events_per_s"].as_f64().unwrap();
        assert!(rate > 1.0, "{r}");
        // The guest kernel was profiled over the command's life (the exec workload's window).
        let profile = &r["payload"]["kernel"]["profile"];
        let samples = profile["samples"].as_u64().unwrap_or(0);
        assert!(
            samples > 0,
            "no kernel profile of the command: {}",
            r["payload"]["kernel"]
        );
        let cmdline = r["payload"]["env"]["cmdline"].as_str().unwrap();
        assert!(cmdline.contains("rootfstype=ramfs"), "{cmdline}");
    }

    // The image behind it: sysbench and the libraries apt would install with it, pinned.
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["image", "build", "--package", "sysbench"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("(cached)"), "the sweep built it: {text}");
    let n: usize = text
        .split("sysbench with their dependencies, ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        n >= 10,
        "sysbench needs libc6, libluajit, libmariadb, libpq …: {text}"
    );

    // A misspelt package, and a guest too small for what the packages hold: refused before
    // anything boots, at the field.
    let tmp = tempfile::tempdir().unwrap();
    let validate = |yaml: &str| {
        let path = tmp.path().join("bad.yaml");
        std::fs::write(&path, yaml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
            .args(["run", "--quiet", "--results"])
            .arg(tmp.path().join("results"))
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).replace('\n', " ");
        assert_eq!(out.status.code(), Some(2), "{err}");
        let journals = std::fs::read_dir(tmp.path().join("results"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().join("journal.jsonl").exists())
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(journals, 0, "nothing ran: {err}");
        err
    };
    let err = validate(&SCENARIO.replace("packages: [sysbench]", "packages: [sysbnech]"));
    assert!(
        err.contains("guest.packages[0]") && err.contains("closest: sysbench"),
        "{err}"
    );
    let err = validate(&SCENARIO.replace("memory_mib: 320", "memory_mib: 200"));
    assert!(
        err.contains("guest.memory_mib") && err.contains("too small for guest.packages"),
        "{err}"
    );
}
