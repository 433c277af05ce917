//! Measurement isolation: one live sweep per host CPU. A sweep takes an exclusive `flock` on
//! `<system dir>/cpus/cpu<N>.lock` for every host CPU it uses before it boots anything, and
//! holds them until it exits (the kernel drops the locks of a dead process, SIGKILL included,
//! so a crashed sweep never blocks the next). The holder writes its pid and results directory
//! into each file, so a refused sweep can say whose sweep is in the way. Independent of the
//! user: every ocrig on the host uses the same directory.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::owned::{open_lock_file, shared_subdir, system_dir};

/// Who holds a CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    #[serde(default)]
    pub results_dir: Option<PathBuf>,
    pub since: String,
}

/// CPUs another live sweep holds.
#[derive(Debug, Clone, PartialEq)]
pub struct CpusBusy {
    /// (CPU, who holds it when it could be read).
    pub busy: Vec<(usize, Option<Holder>)>,
}

impl std::fmt::Display for CpusBusy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpus: Vec<String> = self.busy.iter().map(|(c, _)| c.to_string()).collect();
        let mut holders: Vec<String> = self
            .busy
            .iter()
            .map(|(_, h)| match h {
                Some(h) => format!(
                    "pid {} writing to {}",
                    h.pid,
                    h.results_dir
                        .as_ref()
                        .map_or("a results directory not made yet".into(), |d| d
                            .display()
                            .to_string())
                ),
                None => "a sweep that has not said who it is yet".into(),
            })
            .collect();
        holders.dedup();
        write!(
            f,
            "host CPU(s) {} are in use by a live sweep ({}); two sweeps on the same CPUs spoil \
             each other's measurements. Wait for it, choose other CPUs (host.cpus), or pass \
             --wait-for-cpus to queue behind it",
            cpus.join(", "),
            holders.join("; ")
        )
    }
}

impl std::error::Error for CpusBusy {}

/// CPUs of a remote host that a live sweep holds (the message names the host).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteCpusBusy(pub String);

impl std::fmt::Display for RemoteCpusBusy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RemoteCpusBusy {}

/// The CPUs a sweep holds; released when dropped.
pub struct CpuClaim {
    files: Vec<(usize, File)>,
    holder: Holder,
}

impl CpuClaim {
    /// Claims `cpus` under the shared system directory.
    pub fn claim(cpus: &[usize], wait: bool, on_wait: impl FnMut(&CpusBusy)) -> anyhow::Result<Self> {
        Self::claim_in(&system_dir(), cpus, wait, on_wait)
    }

    /// Takes every CPU's lock or none. Without `wait`, a CPU held by a live sweep is an error
    /// ([`CpusBusy`]); with it, the sweep queues (CPUs in ascending order, so two waiting
    /// sweeps cannot deadlock), telling `on_wait` once who it waits for.
    pub fn claim_in(
        dir: &Path,
        cpus: &[usize],
        wait: bool,
        mut on_wait: impl FnMut(&CpusBusy),
    ) -> anyhow::Result<Self> {
        let cpu_dir = shared_subdir(dir, "cpus")?;
        let mut sorted = cpus.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut files = Vec::new();
        let mut busy = Vec::new();
        for &cpu in &sorted {
            let path = cpu_dir.join(format!("cpu{cpu}.lock"));
            let f = open_lock_file(&path)?;
            match f.try_lock() {
                Ok(()) => files.push((cpu, f)),
                Err(TryLockError::WouldBlock) => busy.push((cpu, read_holder(&path), f)),
                Err(TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
        if !busy.is_empty() {
            let report = CpusBusy {
                busy: busy.iter().map(|(c, h, _)| (*c, h.clone())).collect(),
            };
            if !wait {
                return Err(report.into());
            }
            on_wait(&report);
            for (cpu, _, f) in busy {
                f.lock().with_context(|| format!("waiting for host CPU {cpu}"))?;
                files.push((cpu, f));
            }
        }
        let mut claim = Self {
            files,
            holder: Holder {
                pid: std::process::id(),
                results_dir: None,
                since: jiff::Timestamp::now().to_string(),
            },
        };
        claim.publish();
        Ok(claim)
    }

    /// Names the results directory in every held CPU's file (for a refused sweep to quote).
    pub fn note_results_dir(&mut self, dir: &Path) {
        self.holder.results_dir = Some(dir.to_path_buf());
        self.publish();
    }

    #[cfg(test)]
    pub fn cpus(&self) -> Vec<usize> {
        self.files.iter().map(|(c, _)| *c).collect()
    }

    fn publish(&mut self) {
        let Ok(text) = serde_json::to_vec(&self.holder) else {
            return;
        };
        for (_, f) in &mut self.files {
            // Through the locked handle itself: truncate, then one write.
            let _ = f.set_len(0).and_then(|_| {
                use std::io::Seek;
                f.seek(std::io::SeekFrom::Start(0))?;
                f.write_all(&text)
            });
        }
    }
}

fn read_holder(path: &Path) -> Option<Holder> {
    // The holder may be between truncating and writing; a second look usually finds it.
    for _ in 0..3 {
        if let Some(h) = std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
        {
            return Some(h);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_on_a_held_cpu_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = CpuClaim::claim_in(dir.path(), &[1, 0], false, |_| {}).unwrap();
        assert_eq!(first.cpus(), [0, 1]);
        first.note_results_dir(Path::new("/results/x-1"));
        // flock locks belong to the open file: a second open in this process conflicts too.
        let e = CpuClaim::claim_in(dir.path(), &[1, 2], false, |_| {})
            .err()
            .unwrap();
        let busy = e.downcast_ref::<CpusBusy>().expect("a CpusBusy error");
        assert_eq!(busy.busy.len(), 1);
        assert_eq!(busy.busy[0].0, 1);
        let h = busy.busy[0].1.as_ref().unwrap();
        assert_eq!(
            (h.pid, h.results_dir.as_deref()),
            (std::process::id(), Some(Path::new("/results/x-1")))
        );
        let text = e.to_string();
        assert!(
            text.contains("CPU(s) 1 ") && text.contains("/results/x-1"),
            "{text}"
        );
        // Nothing was kept of the refused claim: CPU 2 is free.
        let other = CpuClaim::claim_in(dir.path(), &[2], false, |_| {}).unwrap();
        drop((first, other));
        CpuClaim::claim_in(dir.path(), &[0, 1, 2], false, |_| {}).unwrap();
    }

    #[test]
    fn a_waiting_claim_gets_the_cpus_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = CpuClaim::claim_in(dir.path(), &[0], false, |_| {}).unwrap();
        let path = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            let mut told = 0;
            let c = CpuClaim::claim_in(&path, &[0], true, |_| told += 1).unwrap();
            (c.cpus(), told)
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!waiter.is_finished(), "it waits while the CPU is held");
        drop(first);
        assert_eq!(waiter.join().unwrap(), (vec![0], 1));
    }
}
