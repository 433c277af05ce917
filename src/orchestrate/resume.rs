//! `ocrig run --resume DIR`: what an interrupted sweep already finished, and whether its
//! scenario is still the one it ran.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::BadInput;
use crate::scenario::hex;
use crate::sweep::journal::{Journal, RunRecord};

pub struct Previous {
    pub dir: PathBuf,
    /// The scenario as run, kept in the results directory.
    pub scenario_copy: PathBuf,
    journal: Journal,
}

impl Previous {
    /// Reads a results directory and refuses it when the scenario changed since: the one named
    /// on the command line, or else the file the sweep was started from.
    pub fn read(dir: &Path, given: Option<&Path>) -> anyhow::Result<Self> {
        let journal =
            Journal::read(dir).map_err(|e| BadInput(format!("cannot resume {}: {e:#}", dir.display())))?;
        let scenario_copy = dir.join("scenario.yaml");
        let as_run = std::fs::read_to_string(&scenario_copy)
            .map_err(|e| BadInput(format!("cannot resume: {}: {e}", scenario_copy.display())))?;
        let current = given
            .map(Path::to_path_buf)
            .or_else(|| journal.header.scenario_path.clone());
        if let Some(path) = current.filter(|p| given.is_some() || p.exists()) {
            let now = std::fs::read_to_string(&path)
                .map_err(|e| BadInput(format!("cannot read scenario {}: {e}", path.display())))?;
            if hex(&Sha256::digest(now.as_bytes())) != journal.header.scenario_sha256 {
                return Err(BadInput(format!(
                    "{} changed since the sweep in {} started; refusing to mix results. Differences (- as run, + now):\n{}",
                    path.display(),
                    dir.display(),
                    line_diff(&as_run, &now)
                ))
                .into());
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            scenario_copy,
            journal,
        })
    }

    /// Every record the interrupted sweep journaled; the scheduler settles them (what counts,
    /// which attempt comes next) by the same rule as the reports.
    pub fn records(&self) -> &[RunRecord] {
        &self.journal.runs
    }

    /// The shuffle seed the sweep started with, if it shuffled.
    pub fn seed(&self) -> Option<u64> {
        self.journal.header.schedule.as_ref().and_then(|s| s.seed)
    }
}

/// Lines only in `a` (prefixed -) and only in `b` (+), at most 20 of each.
fn line_diff(a: &str, b: &str) -> String {
    let a_lines: Vec<&str> = a.lines().collect();
    let b_lines: Vec<&str> = b.lines().collect();
    let mut out: Vec<String> = Vec::new();
    out.extend(
        a_lines
            .iter()
            .filter(|l| !b_lines.contains(l))
            .take(20)
            .map(|l| format!("- {l}")),
    );
    out.extend(
        b_lines
            .iter()
            .filter(|l| !a_lines.contains(l))
            .take(20)
            .map(|l| format!("+ {l}")),
    );
    if out.is_empty() {
        out.push("  (same lines in another order or with other whitespace)".into());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_changed_lines() {
        let d = line_diff("name: a\nruns: 2\n", "name: a\nruns: 3\n");
        assert_eq!(d, "- runs: 2\n+ runs: 3");
    }
}
