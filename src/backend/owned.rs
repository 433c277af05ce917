//! Guests ocrig owns, so none outlives its sweep. Before it boots anything, a sweep takes an
//! exclusive `flock` on its owner file `<system dir>/owners/<run id>.lock` and holds it until
//! it exits; every guest's name carries the run id (`ocrig-<run id>-<n>`). A later ocrig, run
//! by any user, removes a guest only when that lock can be taken — its
//! sweep is gone (the kernel drops a dead process's locks, SIGKILL included).

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

/// The directory every ocrig on this host shares, whoever runs it: /run/lock/ocrig (the
/// world-writable lock directory), else `ocrig-lock` in the temp dir.
pub fn system_dir() -> PathBuf {
    let lock = Path::new("/run/lock");
    if lock.is_dir() {
        lock.join("ocrig")
    } else {
        std::env::temp_dir().join("ocrig-lock")
    }
}

/// `dir/sub`, created world-writable with the sticky bit (like /tmp) so that any user's
/// ocrig can add its own files and none can remove another's.
pub fn shared_subdir(dir: &Path, sub: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(sub);
    for d in [dir, path.as_path()] {
        if !d.is_dir() {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777));
        }
    }
    Ok(path)
}

/// Opens (creating, readable and writable by all) a lock file in a shared directory.
pub fn open_lock_file(path: &Path) -> anyhow::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .or_else(|_| File::open(path))
        .with_context(|| format!("opening {}", path.display()))?;
    if f.metadata()
        .is_ok_and(|m| m.permissions().mode() & 0o777 != 0o666)
    {
        let _ = f.set_permissions(std::fs::Permissions::from_mode(0o666));
    }
    Ok(f)
}

/// Who holds an owner lock, written into it for a person who looks (the lock alone says
/// whether the sweep lives).
#[derive(Serialize)]
struct Owner {
    pid: u32,
    results_dir: PathBuf,
}

/// A running sweep's ownership of its guests; released (and its files removed) when dropped.
pub struct RunOwnership {
    lock_path: PathBuf,
    _lock: File,
}

impl RunOwnership {
    pub fn claim(run_id: &str, results_dir: &Path) -> anyhow::Result<Self> {
        Self::claim_in(&system_dir(), run_id, results_dir)
    }

    fn claim_in(system: &Path, run_id: &str, results_dir: &Path) -> anyhow::Result<Self> {
        let owner = Owner {
            pid: std::process::id(),
            results_dir: results_dir.to_path_buf(),
        };
        let owners = shared_subdir(system, "owners")?;
        let lock_path = owners.join(format!("{run_id}.lock"));
        let lock = open_lock_file(&lock_path)?;
        // A reaper's probe holds it for an instant at most.
        lock.lock()
            .with_context(|| format!("locking {}", lock_path.display()))?;
        std::fs::write(&lock_path, serde_json::to_vec(&owner)?)
            .with_context(|| format!("writing {}", lock_path.display()))?;
        Ok(Self {
            lock_path,
            _lock: lock,
        })
    }
}

impl Drop for RunOwnership {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// True when the sweep `run_id` is alive: its owner lock is held.
fn owner_alive(system: &Path, run_id: &str) -> bool {
    let lock_path = system.join("owners").join(format!("{run_id}.lock"));
    let Ok(f) = File::open(&lock_path) else {
        return false;
    };
    // Taken: nobody holds it (dropping `f` releases it again).
    matches!(f.try_lock_shared(), Err(TryLockError::WouldBlock))
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
            guest_name_of_qemu(&args).map(|n| (pid, n))
        })
        .collect()
}

/// The ocrig guest name of a QEMU command line (`-name ocrig-...[,debug-threads=on]`).
fn guest_name_of_qemu(args: &[String]) -> Option<String> {
    if !args.first()?.contains("qemu-system") {
        return None;
    }
    let i = args.iter().position(|a| a == "-name")?;
    let name = args.get(i + 1)?.split(',').next()?.to_string();
    name.starts_with("ocrig-").then_some(name)
}

/// Kills every QEMU guest whose sweep is not alive; returns their names.
pub fn reap_orphan_qemus() -> Vec<String> {
    reap_where(&system_dir(), |_| true)
}

/// [`reap_orphan_qemus`] limited to guest names `select` accepts.
fn reap_where(system: &Path, select: impl Fn(&str) -> bool) -> Vec<String> {
    let mut reaped = Vec::new();
    for (pid, name) in qemu_guests() {
        let Some(run_id) = run_id_of(&name) else { continue };
        if !select(&name) || owner_alive(system, run_id) {
            continue;
        }
        let Some(target) = rustix::process::Pid::from_raw(pid as i32) else {
            continue;
        };
        if rustix::process::kill_process(target, rustix::process::Signal::KILL).is_ok() {
            tracing::warn!("removed orphan guest {name} (QEMU pid {pid}) left by an earlier ocrig");
            reaped.push(name);
        }
    }
    remove_stale_owner_files(system);
    reaped
}

/// True when a libvirt domain name belongs to a sweep that is not alive.
pub fn is_orphan_name(name: &str) -> bool {
    run_id_of(name).is_some_and(|id| !owner_alive(&system_dir(), id))
}

fn remove_stale_owner_files(system: &Path) {
    let Ok(entries) = std::fs::read_dir(system.join("owners")) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".lock")
            && !owner_alive(system, id)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    #[test]
    fn run_ids_parse_from_guest_names() {
        assert_eq!(run_id_of("ocrig-5f3a12ab-0"), Some("5f3a12ab"));
        assert_eq!(run_id_of("ocrig-a-b-12"), Some("a-b"));
        assert_eq!(run_id_of("ocrig-x"), None);
        assert_eq!(run_id_of("other-1-2"), None);
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            guest_name_of_qemu(&args(&[
                "/usr/bin/qemu-system-x86_64",
                "-name",
                "ocrig-x-1,debug-threads=on"
            ])),
            Some("ocrig-x-1".into())
        );
        assert_eq!(guest_name_of_qemu(&args(&["sh", "-name", "ocrig-x-1"])), None);
    }

    #[test]
    fn ownership_is_live_while_claimed() {
        let system = tempfile::tempdir().unwrap();
        let id = format!("t{}", std::process::id());
        let claim = RunOwnership::claim_in(system.path(), &id, Path::new("/r")).unwrap();
        assert!(owner_alive(system.path(), &id));
        assert!(!owner_alive(system.path(), "gone"));
        drop(claim);
        assert!(!owner_alive(system.path(), &id));
        assert!(!system.path().join("owners").join(format!("{id}.lock")).exists());
    }

    /// A stand-in QEMU: a shell whose argv[0] says qemu-system and whose arguments name an
    /// ocrig guest, as the reaper scans /proc for them.
    fn fake_qemu(name: &str) -> std::process::Child {
        Command::new("sh")
            .arg0("qemu-system-x86_64")
            .args(["-c", "read x; :", "-name", &format!("{name},debug-threads=on")])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn the_reaper_kills_only_guests_whose_sweep_is_gone() {
        let system = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let (live_id, dead_id) = (format!("reaplive{pid}"), format!("reapdead{pid}"));
        let claim = RunOwnership::claim_in(system.path(), &live_id, Path::new("/r")).unwrap();
        let mut live = fake_qemu(&format!("ocrig-{live_id}-0"));
        let mut dead = fake_qemu(&format!("ocrig-{dead_id}-0"));
        std::thread::sleep(std::time::Duration::from_millis(200));
        // Only this test's own guests: other sweeps on this host are none of its business.
        let mine = |n: &str| n.contains(&live_id) || n.contains(&dead_id);
        let reaped = reap_where(system.path(), mine);
        assert_eq!(reaped, vec![format!("ocrig-{dead_id}-0")]);
        assert!(dead.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(
            live.try_wait().unwrap().is_none(),
            "the live sweep's guest runs on"
        );
        drop(claim);
        let reaped = reap_where(system.path(), mine);
        assert_eq!(reaped, vec![format!("ocrig-{live_id}-0")]);
        let _ = live.wait();
    }
}
