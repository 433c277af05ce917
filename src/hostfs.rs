//! Reading a host's /proc and /sys: this machine's directly, a remote libvirt host's over SSH
//! (`backend::remote`). Telemetry (vCPU scheduler counters, /proc/stat), vCPU thread names and
//! the accelerator evidence are read through this, so they describe the host the guests run on.

/// Read-only access to a host's files.
pub trait HostFs: Send + Sync {
    /// Which host, for messages: `this host`, or `root@hostA:22`.
    fn label(&self) -> String;
    /// Reads every file; each result is the text or why it could not be read.
    fn read_many(&self, paths: &[String]) -> Vec<Result<String, String>>;
    /// The entry names of a directory.
    fn list_dir(&self, path: &str) -> Result<Vec<String>, String>;
    /// Whether a path exists.
    fn exists(&self, path: &str) -> bool;
    /// Whether this is the machine ocrig runs on (its thread ids are this kernel's).
    fn is_local(&self) -> bool {
        false
    }

    fn read(&self, path: &str) -> Result<String, String> {
        self.read_many(&[path.to_string()])
            .pop()
            .unwrap_or_else(|| Err("no answer".into()))
    }

    /// Changing files there, where ocrig may (the host scheduler trace's tracefs instance);
    /// None: this host is only read.
    fn writer(&self) -> Option<&dyn HostWrite> {
        None
    }
}

/// One change to a host's files, or a condition for the ones after it.
#[derive(Debug, Clone, PartialEq)]
pub enum FileOp {
    /// Fails with the words given unless ocrig acts as root there.
    RequireRoot(String),
    /// Fails with the words given unless the path is a directory.
    RequireDir(String, String),
    Mkdir(String),
    /// Writes the text (no newline added) to the path, which must exist (a control file).
    Write(String, String),
    Rmdir(String),
}

/// Changing a host's files: this machine's directly, a remote host's in one shell command per
/// batch (one round trip).
pub trait HostWrite: Send + Sync {
    /// Applies `ops` in order. Stops at the first failure and returns why, unless
    /// `keep_going` (clean-up): then every op is tried and the first failure returned.
    fn apply(&self, ops: &[FileOp], keep_going: bool) -> Result<(), String>;
    /// Writes `text` to `path` with the least delay this host allows between the call and the
    /// write (a trace marker that ties that host's clock to this one's).
    fn write_now(&self, path: &str, text: &str) -> Result<(), String>;
    /// A process on that host that lives as long as this ocrig's hold on it (this process
    /// here; the shell of ocrig's SSH session on a remote host): what ocrig leaves there is
    /// named after it, so a later start can tell what a dead ocrig left.
    fn owner_pid(&self) -> Result<i32, String>;
}

impl HostWrite for LocalFs {
    fn apply(&self, ops: &[FileOp], keep_going: bool) -> Result<(), String> {
        let mut first = None;
        for op in ops {
            let r = match op {
                FileOp::RequireRoot(why) => {
                    // SAFETY: geteuid has no preconditions.
                    (unsafe { libc::geteuid() } == 0)
                        .then_some(())
                        .ok_or_else(|| why.clone())
                }
                FileOp::RequireDir(p, why) => std::path::Path::new(p)
                    .is_dir()
                    .then_some(())
                    .ok_or_else(|| why.clone()),
                FileOp::Mkdir(p) => std::fs::create_dir(p).map_err(|e| format!("creating {p}: {e}")),
                FileOp::Write(p, text) => {
                    std::fs::write(p, text).map_err(|e| format!("writing '{text}' to {p}: {e}"))
                }
                FileOp::Rmdir(p) => std::fs::remove_dir(p).map_err(|e| format!("removing {p}: {e}")),
            };
            if let Err(e) = r {
                if !keep_going {
                    return Err(e);
                }
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
    fn write_now(&self, path: &str, text: &str) -> Result<(), String> {
        std::fs::write(path, text).map_err(|e| format!("writing '{text}' to {path}: {e}"))
    }
    fn owner_pid(&self) -> Result<i32, String> {
        Ok(std::process::id() as i32)
    }
}

/// This machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFs;

impl HostFs for LocalFs {
    fn label(&self) -> String {
        "this host".into()
    }
    fn read_many(&self, paths: &[String]) -> Vec<Result<String, String>> {
        paths
            .iter()
            .map(|p| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}")))
            .collect()
    }
    fn list_dir(&self, path: &str) -> Result<Vec<String>, String> {
        let rd = std::fs::read_dir(path).map_err(|e| format!("{path}: {e}"))?;
        Ok(rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect())
    }
    fn exists(&self, path: &str) -> bool {
        std::path::Path::new(path).exists()
    }
    fn is_local(&self) -> bool {
        true
    }
    fn writer(&self) -> Option<&dyn HostWrite> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_reads_say_which_file_failed() {
        let r = LocalFs.read_many(&["/proc/self/stat".into(), "/nonexistent/x".into()]);
        assert!(r[0].as_ref().unwrap().contains('('));
        assert!(r[1].as_ref().unwrap_err().contains("/nonexistent/x"));
        assert!(!LocalFs.list_dir("/proc/self/task").unwrap().is_empty());
        assert!(LocalFs.exists("/proc/self") && !LocalFs.exists("/nonexistent"));
    }
}
