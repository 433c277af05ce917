//! The guest's tracefs: where it is (mounting it if nobody has; the guest's /init does not),
//! tracepoint ids for perf, and switching trace events on and off.

use std::path::{Path, PathBuf};

/// A tracepoint as `system:name` (perf's spelling, e.g. `lock:contention_begin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub system: String,
    pub name: String,
}

impl Event {
    /// Parses `system:name`; both parts non-empty and made of `[A-Za-z0-9_]` (tracefs directory
    /// names), so a name can never walk out of `events/`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match s.split_once(':') {
            Some((system, name)) if ok(system) && ok(name) => Ok(Self {
                system: system.into(),
                name: name.into(),
            }),
            _ => Err(format!(
                "'{s}' is not a trace event: expected system:name (letters, digits, '_'), e.g. lock:contention_begin"
            )),
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.system, self.name)
    }
}

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The tracefs root. When tracefs is not mounted (the guest's /init does not mount it), it is
/// mounted on `/sys/kernel/tracing` in a mount namespace of this process's own, so that on the
/// host backend the payload leaves the host's mounts as they were (the namespace ends with the
/// process). Call it while the process has one thread (unshare refuses otherwise).
pub fn root() -> Result<PathBuf, String> {
    for dir in [TRACEFS, DEBUGFS_TRACING] {
        if Path::new(dir).join("events").is_dir() {
            return Ok(dir.into());
        }
    }
    let target = std::ffi::CString::new(TRACEFS).expect("no NUL");
    let fstype = std::ffi::CString::new("tracefs").expect("no NUL");
    let slash = std::ffi::CString::new("/").expect("no NUL");
    // SAFETY: NUL-terminated strings that outlive the calls; no mount data. Making every mount
    // private first keeps the new one from propagating back to the parent namespace.
    let r = unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0
            || libc::mount(
                std::ptr::null(),
                slash.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
        {
            -1
        } else {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        }
    };
    if r != 0 {
        return Err(format!(
            "tracefs is not mounted and mounting it on {TRACEFS} failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    if Path::new(TRACEFS).join("events").is_dir() {
        Ok(TRACEFS.into())
    } else {
        Err(format!("tracefs mounted on {TRACEFS} has no events/ directory"))
    }
}

/// The running kernel's release (`uname -r`), to name the kernel in messages.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "(unknown release)".into())
}

fn event_dir(root: &Path, e: &Event) -> PathBuf {
    root.join("events").join(&e.system).join(&e.name)
}

/// The tracepoint's id for `PERF_TYPE_TRACEPOINT`, or why there is none.
pub fn event_id(root: &Path, e: &Event) -> Result<u64, String> {
    let path = event_dir(root, e).join("id");
    match std::fs::read_to_string(&path) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("{} does not hold a number: {s:?}", path.display())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(missing(e)),
        Err(err) => Err(format!("reading {} failed: {err}", path.display())),
    }
}

/// The message for a tracepoint the running kernel lacks.
pub fn missing(e: &Event) -> String {
    format!(
        "kernel {} has no tracepoint {e} (no events/{}/{} in tracefs)",
        kernel_release(),
        e.system,
        e.name
    )
}

/// Writes `1` or `0` to the event's `enable` file.
pub fn set_enabled(root: &Path, e: &Event, on: bool) -> Result<(), String> {
    let dir = event_dir(root, e);
    if !dir.is_dir() {
        return Err(missing(e));
    }
    let path = dir.join("enable");
    std::fs::write(&path, if on { "1" } else { "0" })
        .map_err(|err| format!("writing {} failed: {err}", path.display()))
}

/// The CPUs the kernel has online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> Result<Vec<usize>, String> {
    let path = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path} failed: {e}"))?;
    parse_cpu_list(text.trim()).ok_or_else(|| format!("{path} is not a CPU list: {text:?}"))
}

/// A kernel CPU list (`0-3,8,10-11`, as sysfs and tracefs write them); None for anything else.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_parse_and_cannot_leave_events_dir() {
        let e = Event::parse("lock:contention_begin").unwrap();
        assert_eq!((e.system.as_str(), e.name.as_str()), ("lock", "contention_begin"));
        assert_eq!(e.to_string(), "lock:contention_begin");
        for bad in ["lock", ":x", "lock:", "../x:y", "lock:a/b", "a:b:c", "lock:.."] {
            assert!(Event::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }
}
