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
        // A console that already says the guest cannot come up fails now, not at the deadline.
        if let Some(why) = cannot_come_up(&text) {
            anyhow::bail!("{why}; console ends with:\n{}", tail(&text, 15));
        }
        if text.lines().any(|l| l.trim_start().starts_with(READY_MARKER)) {
            return Ok(());
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

/// Why a guest whose console reads `text` will never answer SSH, if it says so: the image's
/// own failure lines (`OCRIG-FAIL …`; `ocrig: no eth0`, after which dropbear still starts and
/// the ready marker comes, but no connection can reach it) or a kernel panic.
pub fn cannot_come_up(text: &str) -> Option<String> {
    for l in text.lines().map(str::trim) {
        if l.starts_with("OCRIG-FAIL") {
            return Some(format!("the guest's /init failed: {l}"));
        }
        if l.starts_with("ocrig: no eth0") {
            return Some(
                "the guest has no network interface (`ocrig: no eth0`): its kernel has no usable virtio-net driver (CONFIG_VIRTIO_NET, CONFIG_VIRTIO_PCI)"
                    .into(),
            );
        }
        if let Some(i) = l.find("Kernel panic - not syncing") {
            return Some(format!("the guest kernel panicked: {}", &l[i..]));
        }
    }
    None
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
        std::fs::write(&con, "line1\nBUG: unable to handle page fault\n").unwrap();
        let e = wait_for_marker(&con, Instant::now() + Duration::from_secs(5), || false).unwrap_err();
        assert!(
            e.to_string().contains("stopped while booting") && e.to_string().contains("BUG"),
            "{e}"
        );
        std::fs::write(&con, "line1\n").unwrap();
        let e = wait_for_marker(&con, Instant::now(), || true).unwrap_err();
        assert!(e.to_string().contains("never started /init"), "{e}");
        std::fs::write(&con, "OCRIG-BOOT kernel=x\nOCRIG-FAIL no eth0\n").unwrap();
        let e = wait_for_marker(&con, Instant::now() + Duration::from_secs(5), || true).unwrap_err();
        assert!(e.to_string().contains("no eth0"), "{e}");
    }

    #[test]
    fn a_console_that_says_the_guest_cannot_come_up_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let con = dir.path().join("c.log");
        let far = Instant::now() + Duration::from_secs(120);
        // No eth0: /init goes on and even prints the ready marker, but SSH can never connect.
        std::fs::write(
            &con,
            "OCRIG-BOOT kernel=6.1.192 uptime=0.9\nocrig: no eth0\nOCRIG-READY kernel=6.1.192 ip=none scratch=none uptime=1.2\n",
        )
        .unwrap();
        let t0 = Instant::now();
        let e = wait_for_marker(&con, far, || true).unwrap_err().to_string();
        assert!(e.contains("no network interface") && e.contains("ip=none"), "{e}");
        std::fs::write(
            &con,
            "[    1.2] Kernel panic - not syncing: VFS: Unable to mount root fs\n",
        )
        .unwrap();
        let e = wait_for_marker(&con, far, || true).unwrap_err().to_string();
        assert!(e.contains("panicked: Kernel panic - not syncing: VFS"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(
            cannot_come_up("OCRIG-BOOT kernel=x\nOCRIG-READY ip=10.0.2.15\n"),
            None
        );
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
