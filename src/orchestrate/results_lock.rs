//! One writer per results directory: an exclusive lock (flock) on its `journal.jsonl`, held for
//! as long as a process may write the directory. A second `ocrig run --resume DIR` is refused
//! naming the holder (whom `DIR/ocrig.lock` describes), or with `--wait-for-cpus` queues behind
//! it; either way it reads the journal only once it holds the lock, so it never redoes what the
//! other finished. Locking writes nothing: a directory that turns out not to be a results
//! directory is left as it was.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::BadInput;

use crate::journal::JOURNAL_FILE;

/// Who holds the lock (pid, start, command line), written once the lock is held.
pub const HOLDER_FILE: &str = "ocrig.lock";

/// The held lock; dropping it (or the process ending, however it ends) releases it.
#[derive(Debug)]
pub struct ResultsLock {
    _file: File,
    dir: PathBuf,
}

impl ResultsLock {
    /// Takes the lock of `dir`; a directory another process writes is bad input (exit 2) naming
    /// that process, unless `wait`.
    pub fn take(dir: &Path, wait: bool) -> anyhow::Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        let file = File::open(&path).map_err(|e| {
            BadInput(format!(
                "{}: {e} (expected the journal of a results directory of `ocrig run`)",
                path.display()
            ))
        })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = holder(dir);
                if !wait {
                    return Err(BadInput(format!(
                        "{} is being written by another ocrig ({holder}); wait for it to end, or pass --wait-for-cpus to queue behind it",
                        dir.display()
                    ))
                    .into());
                }
                crate::terminal::say(&format!(
                    "ocrig: waiting (--wait-for-cpus): {} is being written by another ocrig ({holder})",
                    dir.display()
                ));
                file.lock()
                    .with_context(|| format!("waiting for {}", path.display()))?;
            }
            Err(TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(Self {
            _file: file,
            dir: dir.to_path_buf(),
        })
    }

    /// Writes who holds the lock into `DIR/ocrig.lock`, for whoever is refused; the lock, not
    /// this text, excludes.
    pub fn say_holder(&self) -> anyhow::Result<()> {
        let who = format!(
            "pid {}, since {}: {}\n",
            std::process::id(),
            jiff::Timestamp::now(),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        let path = self.dir.join(HOLDER_FILE);
        std::fs::write(&path, who).with_context(|| format!("writing {}", path.display()))
    }
}

fn holder(dir: &Path) -> String {
    match std::fs::read_to_string(dir.join(HOLDER_FILE)) {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => "its holder has not said who it is yet".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let e = ResultsLock::take(dir.path(), false).unwrap_err();
        assert!(e.to_string().contains("expected the journal"), "{e:#}");
        assert!(!dir.path().join(HOLDER_FILE).exists(), "nothing written");
        std::fs::write(dir.path().join(JOURNAL_FILE), "").unwrap();
        let first = ResultsLock::take(dir.path(), false).unwrap();
        first.say_holder().unwrap();
        let e = ResultsLock::take(dir.path(), false).unwrap_err();
        assert!(e.is::<BadInput>(), "{e:#}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        drop(first);
        ResultsLock::take(dir.path(), false).expect("free once the first is gone");
    }
}
