//! The scenario files that ship with ocrig, and what a JSON Schema of the scenario says of them.

use std::path::{Path, PathBuf};

/// Every `*.yaml` under `scenarios/`, in any folder.
pub fn shipped_scenarios() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if e.is_dir() {
                walk(&e, out);
            } else if e.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(e);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"), &mut out);
    out.sort();
    assert!(out.len() >= 10, "{out:?}");
    out
}
