//! The guest's serial console on the host, mirrored as it grows to the local path the sweep reads.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;

use super::*;

/// Copies a console file on the host to a local file as it grows, until QEMU exits or the
/// mirror is dropped.
pub struct ConsoleMirror {
    stop: Arc<AtomicBool>,
}

impl ConsoleMirror {
    pub fn start(r: &RemoteUri, remote_path: &str, local: &Path, qemu_pid: i32) -> anyhow::Result<Self> {
        let s = open_session(r, Duration::from_secs(10))?;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(local)
            .with_context(|| format!("creating {}", local.display()))?;
        let cmd = format!(
            "exec tail -c +1 --pid={qemu_pid} -F {} 2>/dev/null",
            shlex::try_quote(remote_path)?
        );
        let mut ch = s.channel_session()?;
        ch.exec(&cmd)?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("console-mirror".into())
            .spawn(move || {
                s.set_timeout(250);
                let mut buf = vec![0u8; 16 * 1024];
                while !st.load(Ordering::Relaxed) {
                    match ch.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                            ) => {}
                        Err(_) => break,
                    }
                }
                let _ = ch.close();
            })?;
        Ok(Self { stop })
    }
}

impl Drop for ConsoleMirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
