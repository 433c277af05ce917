//! End to end with kernels of one's own (issue 20, seed 004's "base vs patched" workflow):
//! builds a small guest kernel from Debian's linux-source-6.1 in two trees — `base`, and
//! `patched` with a one-line change in kernel/locking/qspinlock.c, same release — through
//! tests/kernel/build-test-kernel (cached by source, config and patch hash under
//! ~/.cache/ocrig/test-kernels, so a machine pays the build once), validates the shipped
//! scenarios/examples/own-kernels.yaml with them, then boots both trees and the base tree's bzImage
//! through `ocrig run` and checks that the journal, the guests' consoles, the report and
//! `ocrig compare` tell the two same-release builds apart.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::common;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The two built trees (building them the first time on this machine).
fn trees() -> (PathBuf, PathBuf) {
    let t = common::test_kernel_trees();
    (t["base"].clone(), t["patched"].clone())
}

fn ocrig(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("running ocrig")
}

/// `ocrig run` of `scenario` into `results`, queueing behind other sweeps for the CPUs.
fn run(scenario: &Path, results: &Path) -> std::process::Output {
    let (s, r) = (scenario.to_str().unwrap(), results.to_str().unwrap());
    ocrig(&["run", s, "--quiet", "--wait-for-cpus", "--results", r])
}

/// Every `*.console.log` under `dir`.
fn consoles(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            consoles(&p, out);
        } else if p.to_string_lossy().ends_with(".console.log") {
            out.push(p);
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests of kernels built here (~34 s)"
)]
fn own_kernel_trees_boot_and_two_builds_of_one_release_are_told_apart() {
    let _one = common::one_sweep();
    let (base, patched) = trees();
    let tmp = tempfile::tempdir().unwrap();

    // The shipped scenario, its two tree paths pointed at the built trees, validates.
    common::validate_shipped_with_trees(
        "examples/own-kernels.yaml",
        &[("/srv/kernels/base", &base), ("/srv/kernels/patched", &patched)],
    );

    // The base tree's bzImage alone cannot serve a guest with a scratch disk: virtio_blk is a
    // module in the test kernel, and a lone image brings none (its tree does: see below).
    let bz = base.join("arch/x86/boot/bzImage");
    let lone = tmp.path().join("lone.yaml");
    std::fs::write(
        &lone,
        format!(
            "name: lone\nhost: {{cpus: 2}}\nguest: {{vcpus: 1, memory_mib: 256, scratch_disk_mib: 32, kernel: {{path: {}}}}}\n\
             levels: [0.5]\nworkloads:\n  - command: hackbench\n    metric: time_s\n",
            bz.display()
        ),
    )
    .unwrap();
    let out = ocrig(&["validate", lone.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:3:", lone.display()))
            && stderr.contains("guest.kernel.path")
            && stderr.contains("CONFIG_VIRTIO_BLK=m, but a lone kernel image brings no modules"),
        "{stderr}"
    );

    // A small sweep: the two trees (vmlinux, PVH), cold boots so each guest's console shows
    // its own boot and ready lines, with a scratch disk (the tree's virtio_blk module must be
    // shipped in the image and loaded for /init to mount it).
    let scenario = tmp.path().join("own.yaml");
    std::fs::write(
        &scenario,
        format!(
            "name: own-kernel-e2e\nhost: {{cpus: 2, backend: qemu}}\n\
             guest: {{vcpus: 1, memory_mib: 256, scratch_disk_mib: 32, start: boot, single_vcpu_intended: true}}\n\
             levels: [0.5]\nvariants:\n  - name: base\n    baseline: true\n    kernel: {{tree: {}}}\n\
             \x20 - name: patched\n    kernel: {{tree: {}}}\n\
             workloads:\n  - name: hackbench\n    command: hackbench\n    args: {{groups: 1, loops: 20}}\n\
             \x20   metric: time_s\n    better: lower\nruns: 2\n",
            base.display(),
            patched.display(),
        ),
    )
    .unwrap();
    let results = tmp.path().join("results");
    let t0 = Instant::now();
    let out = run(&scenario, &results);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ocrig run failed:\n{stderr}");
    eprintln!("sweep took {:.1} s", t0.elapsed().as_secs_f64());
    let dir = &common::only_results_dir(&results);
    let (header, runs) = common::journal(dir);

    // Identity in the journal header: one release, three kernels.
    let id = &header["kernel_identity"];
    let (b, p) = (&id["base"], &id["patched"]);
    for (k, boot) in [(b, "pvh"), (p, "pvh")] {
        assert_eq!(k["release"], "6.1.192", "{header}");
        assert_eq!(k["boot"], boot, "{k}");
        assert_eq!(k["sha256"].as_str().unwrap().len(), 64, "{k}");
        assert!(k["version"].as_str().unwrap().starts_with('#'), "{k}");
    }
    assert_eq!(header["kernels"]["base"], header["kernels"]["patched"]);
    assert_ne!(b["sha256"], p["sha256"], "the patched build is another kernel");
    assert_ne!(
        b["version"], p["version"],
        "a second build has its own build stamp"
    );
    assert_eq!(
        b["config_sha256"], p["config_sha256"],
        "the patch changed no option"
    );
    assert_eq!(b["source"], format!("tree {}", base.display()));
    assert!(b["config_from"].as_str().unwrap().ends_with("/.config"), "{b}");
    let digest = b["config_sha256"].as_str().unwrap();
    let kept = std::fs::read_to_string(dir.join("kernel-configs").join(format!("{digest}.config"))).unwrap();
    assert!(kept.contains("CONFIG_VIRTIO_BLK=m\n") && kept.contains("CONFIG_PVH=y\n"));

    // Every variant ran, on the kernel its header names, as its guest reports it.
    for v in ["base", "patched"] {
        let r: Vec<&Value> = runs
            .iter()
            .filter(|r| r["variant"] == v && r["ok"] == true)
            .collect();
        assert!(!r.is_empty(), "no successful run of {v}: {runs:?}");
        assert_eq!(r[0]["payload"]["env"]["kernel"], "6.1.192", "{}", r[0]);
    }
    let mut logs = Vec::new();
    consoles(&dir.join("guests"), &mut logs);
    for v in ["base", "patched"] {
        let want = id[v]["version"].as_str().unwrap();
        let log = logs
            .iter()
            .find(|p| p.to_string_lossy().contains(&format!("x-{v}/")))
            .unwrap_or_else(|| panic!("no console of {v} in {logs:?}"));
        let text = std::fs::read_to_string(log).unwrap();
        let boot = text
            .lines()
            .find(|l| l.starts_with("OCRIG-BOOT"))
            .unwrap_or_else(|| panic!("no boot line in {}", log.display()));
        assert!(
            boot.ends_with(&format!("version={want}")),
            "{v}: {boot} vs {want}"
        );
        let ready = text.lines().find(|l| l.starts_with("OCRIG-READY")).unwrap();
        assert!(
            ready.contains("scratch=mounted"),
            "{v}: virtio_blk.ko loaded: {ready}"
        );
    }

    // The report names kernels apart: never "for all" for different builds.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let short = |k: &Value| k["sha256"].as_str().unwrap()[..8].to_string();
    assert!(!md.contains("for all"), "{md}");
    for k in [b, p] {
        assert!(md.contains(&short(k)), "report lacks {}: {md}", short(k));
    }
    eprintln!(
        "report opening line: {}",
        md.lines().find(|l| l.contains("kernel `")).unwrap_or("?")
    );

    // `ocrig compare` of the base part and the patched part says how the kernels differ.
    let (da, db) = (tmp.path().join("A"), tmp.path().join("B"));
    common::split_variant(dir, "base", &da);
    common::split_variant(dir, "patched", &db);
    let out = ocrig(&["compare", da.to_str().unwrap(), db.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "compare failed:\n{stderr}");
    eprintln!("compare says:\n{stderr}");
    assert!(
        stderr.contains("kernels differ between A/base and B/patched"),
        "{stderr}"
    );
    assert!(stderr.contains("release: both 6.1.192"), "{stderr}");
    assert!(
        stderr.contains(&format!("sha256: {} → {}", short(b), short(p))),
        "{stderr}"
    );
    assert!(stderr.contains("config: the same"), "{stderr}");
}

/// A guest whose console says it cannot come up fails at once, on the cold-boot path and on
/// the template path (a template is booted, saved and cloned): here the base tree's kernel
/// with its virtio-net driver's initcall blacklisted, so /init prints `ocrig: no eth0` (and
/// still prints its ready marker: dropbear listens, but nothing can reach it). Before, such a
/// sweep waited out the 180-s boot timeout for every attempt.
#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests of kernels built here (~19 s)"
)]
fn a_guest_without_eth0_fails_at_once_on_both_start_paths() {
    let _one = common::one_sweep();
    let (base, _) = trees();
    let tmp = tempfile::tempdir().unwrap();
    for start in ["boot", "clone"] {
        let scenario = tmp.path().join(format!("{start}.yaml"));
        std::fs::write(
            &scenario,
            format!(
                "name: no-eth0-{start}\nhost: {{cpus: 2, backend: qemu}}\n\
                 guest: {{vcpus: 1, memory_mib: 256, start: {start}, kernel: {{tree: {}}}, \
                 cmdline: initcall_blacklist=virtio_net_driver_init}}\n\
                 levels: [0.5]\nworkloads:\n  - command: hackbench\n    args: {{groups: 1, loops: 5}}\n\
                 \x20   metric: time_s\n    better: lower\ntimeouts: {{boot_s: 180, retries: 0}}\nruns: 1\n",
                base.display()
            ),
        )
        .unwrap();
        let results = tmp.path().join(format!("results-{start}"));
        let t0 = Instant::now();
        let out = run(&scenario, &results);
        let took = t0.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "start: {start}: ocrig run ended after {took:.1} s (exit {:?})",
            out.status.code()
        );
        let dir = common::results_dir(&results);
        let journal = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
        assert!(
            journal.contains("no network interface"),
            "start: {start}: the failure names its cause:\n{journal}\n{stderr}"
        );
        assert!(
            journal.contains("ocrig: no eth0"),
            "the console tail is kept:\n{journal}"
        );
        // The boot timeout is 180 s; failing at once leaves the whole sweep far below it.
        assert!(took < 120.0, "start: {start}: {took:.1} s:\n{stderr}");
    }
}
