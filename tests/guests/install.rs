//! An installed `ocrig` works on its own: copied into a prefix (what `cargo install` does once
//! it has built the binary; this reuses the test build rather than compiling a second time),
//! run from another directory with the source tree hidden (a tmpfs mounted over it in a
//! private mount namespace) and cargo off `PATH`, it deploys the payload it carries and
//! journals that payload's hash, the one `ocrig --version` names.

use std::path::Path;
use std::process::Command;

use crate::common;

const SCENARIO: &str = "\
name: installed
description: an installed ocrig, away from its source tree
host:
  cpus: 2
  backend: qemu
  accel: auto
guest:
  vcpus: 1
  memory_mib: 256
levels: [0.5]
workloads:
  - name: lock-tas
    command: lock
    args: {algo: tas, threads: 2, duration-ms: 1000, hold-ns: 2000, gap-ns: 2000}
    metric: ops_per_sec
    better: higher
runs: 2
";

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots a guest, needs root for a mount namespace (~30 s)"
)]
fn an_installed_ocrig_runs_a_sweep_without_its_source_tree_or_cargo() {
    let _one = common::one_sweep();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED LOUDLY: hiding the source tree takes a mount namespace, which needs root");
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("prefix/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_ocrig"), bin.join("ocrig")).unwrap();
    let work = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("installed.yaml"), SCENARIO).unwrap();

    let version = Command::new(bin.join("ocrig")).arg("--version").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let carried = version
        .lines()
        .find_map(|l| l.strip_prefix("payload sha256 "))
        .unwrap_or_else(|| panic!("--version names no payload: {version}"))
        .to_string();
    assert_eq!(carried.len(), 64, "{version}");

    // The tree hidden, then checked hidden, then the installed binary by name from PATH.
    let script = r#"mount -t tmpfs -o ro,size=1m ocrig-source-hidden "$1" && shift &&
        test ! -e "$SRC/Cargo.toml" && ! command -v cargo >/dev/null && exec ocrig "$@""#;
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(src)
        .args([
            "run",
            "installed.yaml",
            "--quiet",
            "--wait-for-cpus",
            "--results",
            "results",
        ])
        .current_dir(&work)
        .env_clear()
        .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()))
        .env("HOME", std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
        .env("SRC", src)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the installed ocrig failed ({}):\n{stderr}",
        out.status
    );
    assert!(
        src.join("Cargo.toml").is_file(),
        "the tree was hidden only inside the namespace"
    );

    let dir = common::only_results_dir(&work.join("results"));
    let (header, runs) = common::journal(&dir);
    assert_eq!(header["payload_sha256"], carried.as_str(), "{header}");
    let measured = runs
        .iter()
        .filter(|r| r["ok"] == true && r.get("superseded").is_none() && r["warmup"] == false)
        .count();
    assert_eq!(measured, 2, "two valid runs: {runs:?}");
}
