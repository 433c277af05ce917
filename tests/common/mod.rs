//! What the end-to-end tests that run one real sweep share.

use std::path::PathBuf;
use std::process::Command;

/// Writes `scenario` to `file` in a fresh temporary directory and runs `ocrig run` on it there
/// (queued behind any other sweep on these CPUs), failing the test with ocrig's stderr if the
/// sweep fails. Returns the directory (removed when dropped) and the results root inside it.
pub fn run_scenario(file: &str, scenario: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(file);
    std::fs::write(&path, scenario).unwrap();
    let results = tmp.path().join("results");
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--wait-for-cpus", "--results"])
        .arg(&results)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ocrig run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (tmp, results)
}
