//! What the end-to-end tests that run one real sweep share (the `guests` test binary).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

static ONE_SWEEP: Mutex<()> = Mutex::new(());

/// One sweep at a time in this test binary: every test that boots guests or runs a sweep on this
/// host's CPUs holds it throughout (taken first thing), since the guests of two sweeps would
/// share the 2 host CPUs and distort each other's timings (and the test kernels' build takes
/// them too). A test that failed holding it does not poison it for the others.
pub fn one_sweep() -> MutexGuard<'static, ()> {
    ONE_SWEEP.lock().unwrap_or_else(|e| e.into_inner())
}

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

/// The one results directory of a sweep run by [`run_scenario`] under `results`.
pub fn results_dir(results: &std::path::Path) -> PathBuf {
    std::fs::read_dir(results)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
}

/// [`results_dir`], checked to be the only directory under `results`.
pub fn only_results_dir(results: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(results)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "expected one results directory, got {dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// The journal of the results directory `dir` (`journal.jsonl`, every line JSON): its header
/// and the lines after it (run records, and a resume's entries).
pub fn journal(dir: &Path) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    let mut lines = text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().unwrap();
    (header, lines.collect())
}

/// The boot group facts that apply to `rec` (`extra.group`), whole: its own when its attempt
/// was its guest set's first, else those of the record its `facts_on` names (same boot group
/// and bring-up), where a guest set's facts are journaled once.
pub fn group_facts<'a>(
    runs: &'a [&'a serde_json::Value],
    rec: &'a serde_json::Value,
) -> &'a serde_json::Value {
    let group = &rec["extra"]["group"];
    let Some(on) = group.get("facts_on") else {
        return group;
    };
    let same_set = |r: &serde_json::Value| {
        ["boot", "bring_up"]
            .iter()
            .all(|k| r["slot"][k] == rec["slot"][k])
    };
    let holder = runs
        .iter()
        .find(|r| {
            same_set(r)
                && ["run", "warmup", "attempt", "guest"]
                    .iter()
                    .all(|k| r[k] == on[k])
        })
        .unwrap_or_else(|| panic!("no record holds the facts {on} points at"));
    &holder["extra"]["group"]
}

/// `ocrig validate` of the shipped `scenarios/<name>` (`examples/own-kernels.yaml`), each `(path, tree)` of `trees` put in
/// place of the user's tree path it names (`/srv/kernels/base`): the scenario must name every
/// one, and validate with the built trees.
pub fn validate_shipped_with_trees(name: &str, trees: &[(&str, &std::path::Path)]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut text = std::fs::read_to_string(dir.join(name)).unwrap();
    for (path, tree) in trees {
        assert!(text.contains(path), "{name} does not name {path}");
        text = text.replace(path, &tree.display().to_string());
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join(std::path::Path::new(name).file_name().unwrap());
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "validate {name}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test kernel trees tests/kernel/build-test-kernel builds (`base`, `patched`,
/// `spinfirst`), building them the first time on this machine (about 6 minutes here).
pub fn test_kernel_trees() -> std::collections::BTreeMap<String, PathBuf> {
    let t0 = std::time::Instant::now();
    let out =
        Command::new(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernel/build-test-kernel"))
            .output()
            .expect("running tests/kernel/build-test-kernel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "building the test kernel failed (scripts/setup installs linux-source-6.1 and the build tools):\n{stderr}"
    );
    eprintln!(
        "test kernel trees ready after {:.1} s:\n{}",
        t0.elapsed().as_secs_f64(),
        stderr.trim()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('=').filter(|(k, _)| !k.contains(' ')))
        .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
        .collect()
}

/// A report comparison row's effect (`report.json`): its ratio and interval, checked to hold the
/// ratio inside the interval.
pub fn checked_effect(row: &serde_json::Value) -> (f64, f64, f64) {
    let e = &row["effect"];
    let (ratio, low, high) = (
        e["ratio"].as_f64().unwrap(),
        e["low"].as_f64().unwrap(),
        e["high"].as_f64().unwrap(),
    );
    assert!(low < ratio && ratio < high, "{row}");
    (ratio, low, high)
}

/// The records of one `variant` of the results directory `src` as a results directory of their
/// own in `dest` (a sweep of that variant alone: its header names it as the only variant and
/// the baseline, its kernels' facts and configurations kept), for `ocrig compare`.
pub fn split_variant(src: &Path, variant: &str, dest: &Path) {
    std::fs::create_dir_all(dest).unwrap();
    let (mut header, runs) = journal(src);
    header["variants"] = serde_json::json!([variant]);
    header["baseline"] = serde_json::json!(variant);
    for key in ["kernels", "kernel_identity"] {
        if let Some(keep) = header[key].get(variant).cloned() {
            header[key] = serde_json::json!({ variant: keep });
        }
    }
    let mut text = format!("{header}\n");
    for r in runs.iter().filter(|r| r["variant"] == variant) {
        text.push_str(&format!("{r}\n"));
    }
    std::fs::write(dest.join("journal.jsonl"), text).unwrap();
    let configs = src.join("kernel-configs");
    if configs.is_dir() {
        std::fs::create_dir_all(dest.join("kernel-configs")).unwrap();
        for e in std::fs::read_dir(&configs).unwrap().flatten() {
            std::fs::copy(e.path(), dest.join("kernel-configs").join(e.file_name())).unwrap();
        }
    }
}
