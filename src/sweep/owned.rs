//! Guests ocrig owns, so none outlives it. Every sweep writes an owner file (its run id, pid
//! and process start time) before it boots anything; every guest's name carries the run id
//! (`ocrig-<run id>-<n>`). A later ocrig removes any guest whose run's owner is gone — after
//! a SIGKILL of ocrig, say — by scanning QEMU processes (and libvirt domains) for that name.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Directory of owner files: `$OCRIG_STATE`, else /run/ocrig (root), else the temp dir.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OCRIG_STATE") {
        return PathBuf::from(d);
    }
    let run = Path::new("/run/ocrig");
    if std::fs::create_dir_all(run).is_ok() {
        return run.to_path_buf();
    }
    std::env::temp_dir().join("ocrig-state")
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Owner {
    pid: u32,
    /// Process start time (clock ticks since boot) to tell a live owner from a reused pid.
    start_ticks: u64,
    results_dir: PathBuf,
}

/// The owner file of a running sweep; removed when dropped.
pub struct RunOwnership {
    path: PathBuf,
}

impl RunOwnership {
    pub fn claim(run_id: &str, results_dir: &Path) -> anyhow::Result<Self> {
        let dir = state_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("run-{run_id}.json"));
        let pid = std::process::id();
        let owner = Owner {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            results_dir: results_dir.to_path_buf(),
        };
        std::fs::write(&path, serde_json::to_vec(&owner)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for RunOwnership {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 (starttime); fields after the ")" that closes the command name start at 3.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// True when the sweep `run_id` has a live owner.
fn owner_alive(dir: &Path, run_id: &str) -> bool {
    let Ok(bytes) = std::fs::read(dir.join(format!("run-{run_id}.json"))) else {
        return false;
    };
    let Ok(owner) = serde_json::from_slice::<Owner>(&bytes) else {
        return false;
    };
    crate::backend::process_alive(owner.pid) && start_ticks(owner.pid) == Some(owner.start_ticks)
}

/// The run id in a guest name `ocrig-<run id>-<n>`.
pub fn run_id_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("ocrig-")?;
    let (id, n) = rest.rsplit_once('-')?;
    (n.chars().all(|c| c.is_ascii_digit()) && !id.is_empty()).then_some(id)
}

/// QEMU processes of ocrig guests: (pid, guest name).
fn qemu_guests() -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if !args.first()?.contains("qemu-system") {
                return None;
            }
            let i = args.iter().position(|a| a == "-name")?;
            let name = args.get(i + 1)?.split(',').next()?.to_string();
            name.starts_with("ocrig-").then_some((pid, name))
        })
        .collect()
}

/// Kills every QEMU guest whose sweep has no live owner; returns their names.
pub fn reap_orphan_qemus() -> Vec<String> {
    let dir = state_dir();
    let mut reaped = Vec::new();
    for (pid, name) in qemu_guests() {
        let Some(run_id) = run_id_of(&name) else { continue };
        if owner_alive(&dir, run_id) {
            continue;
        }
        // SAFETY: kill has no memory-safety preconditions.
        if unsafe { libc::kill(pid as i32, libc::SIGKILL) } == 0 {
            tracing::warn!("removed orphan guest {name} (QEMU pid {pid}) left by an earlier ocrig");
            reaped.push(name);
        }
    }
    remove_stale_owner_files(&dir);
    reaped
}

/// True when a libvirt domain name belongs to a sweep with no live owner.
pub fn is_orphan_name(name: &str) -> bool {
    run_id_of(name).is_some_and(|id| !owner_alive(&state_dir(), id))
}

fn remove_stale_owner_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_prefix("run-").and_then(|n| n.strip_suffix(".json"))
            && !owner_alive(dir, id)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_parse_from_guest_names() {
        assert_eq!(run_id_of("ocrig-5f3a12ab-0"), Some("5f3a12ab"));
        assert_eq!(run_id_of("ocrig-a-b-12"), Some("a-b"));
        assert_eq!(run_id_of("ocrig-x"), None);
        assert_eq!(run_id_of("other-1-2"), None);
    }

    #[test]
    fn ownership_is_live_while_claimed() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: tests in this module are the only users of OCRIG_STATE in this process.
        unsafe { std::env::set_var("OCRIG_STATE", dir.path()) };
        let claim = RunOwnership::claim("t1", dir.path()).unwrap();
        assert!(owner_alive(dir.path(), "t1"));
        assert!(!is_orphan_name("ocrig-t1-0"));
        assert!(is_orphan_name("ocrig-gone-0"));
        drop(claim);
        assert!(!owner_alive(dir.path(), "t1"));
    }
}
