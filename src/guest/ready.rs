//! Waiting for a booted guest: the console's ready marker first (cheap, and it tells a guest
//! that is still booting from one that is dead), then an SSH login.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::image::{BOOT_MARKER, READY_MARKER};

/// Waits until `console` contains the ready marker, or fails at `deadline` with the last
/// console lines. `alive` is polled so a guest whose process died fails at once.
pub fn wait_for_marker(
    console: &Path,
    deadline: Instant,
    mut alive: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    loop {
        let text = std::fs::read(console)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if text.lines().any(|l| l.trim_start().starts_with(READY_MARKER)) {
            return Ok(());
        }
        if let Some(fail) = text.lines().find(|l| l.trim_start().starts_with("OCRIG-FAIL")) {
            anyhow::bail!(
                "the guest's /init failed: {}; console ends with:\n{}",
                fail.trim(),
                tail(&text, 15)
            );
        }
        if !alive() {
            anyhow::bail!(
                "the guest stopped while booting; console ends with:\n{}",
                tail(&text, 15)
            );
        }
        if Instant::now() >= deadline {
            let stage = if text.contains(BOOT_MARKER) {
                "the kernel started /init, but no ready marker came"
            } else {
                "the kernel never started /init"
            };
            anyhow::bail!(
                "{stage} before the boot deadline; console ends with:\n{}",
                tail(&text, 15)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last `n` lines of a file (empty if unreadable).
pub fn tail_file(path: &Path, n: usize) -> String {
    std::fs::read(path)
        .map(|b| tail(&String::from_utf8_lossy(&b), n))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_found_and_dead_guest_reported_with_console_tail() {
        let dir = tempfile::tempdir().unwrap();
        let con = dir.path().join("c.log");
        std::fs::write(&con, "boot\nOCRIG-READY kernel=6.1 ip=10.0.2.15\n").unwrap();
        wait_for_marker(&con, Instant::now() + Duration::from_secs(1), || true).unwrap();
        std::fs::write(&con, "line1\nKernel panic - not syncing\n").unwrap();
        let e = wait_for_marker(&con, Instant::now() + Duration::from_secs(5), || false).unwrap_err();
        assert!(e.to_string().contains("Kernel panic"), "{e}");
        let e = wait_for_marker(&con, Instant::now(), || true).unwrap_err();
        assert!(e.to_string().contains("never started /init"), "{e}");
        std::fs::write(&con, "OCRIG-BOOT kernel=x\nOCRIG-FAIL no eth0\n").unwrap();
        let e = wait_for_marker(&con, Instant::now() + Duration::from_secs(5), || true).unwrap_err();
        assert!(e.to_string().contains("no eth0"), "{e}");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
