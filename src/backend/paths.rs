//! Where a guest's files live in its work directory (console log, QMP socket, pid file): one
//! place both backends and the template cache name them, below all three.

use std::path::{Path, PathBuf};

/// The guest's serial console log.
pub fn console_path(workdir: &Path, name: &str) -> PathBuf {
    workdir.join(format!("{name}.console.log"))
}

/// The guest's QMP socket: beside its console log, unless that path is too long for a Unix
/// socket (108 bytes with the NUL, which a deep results directory exceeds); then in a short
/// per-user directory under the temp dir, where the guest's unique name keeps it apart.
pub fn qmp_path(workdir: &Path, name: &str) -> PathBuf {
    let beside = workdir.join(format!("{name}.qmp"));
    if beside.as_os_str().len() < 100 {
        return beside;
    }
    // SAFETY: getuid has no preconditions.
    let dir = std::env::temp_dir().join(format!("ocrig-qmp-{}", unsafe { libc::getuid() }));
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!("{name}.qmp"))
}

/// The QEMU process's pid file.
pub fn pid_path(workdir: &Path, name: &str) -> PathBuf {
    workdir.join(format!("{name}.pid"))
}
