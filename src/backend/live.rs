//! Every guest process this ocrig started on this machine, held by pidfd, so that a signal
//! kills them all at once, before anything else of the sweep is dropped.
//!
//! Dropping the sweep (on SIGINT or SIGTERM) kills each guest as its owner is dropped, but
//! other parts are dropped first, and some of them wait on the guest: libssh2 frees an open
//! channel by asking the guest to close it and waiting for the answer, up to the session's
//! timeout (a payload's: its run deadline + 30 s). A busy guest answered only after ~5 s in
//! CI, with the guest alive all that time. Killed first, the guest's end of every connection
//! is gone, and every such wait ends at once.
//!
//! A pidfd names the process itself: a guest that exited and was reaped meanwhile cannot be
//! confused with a new process that got its pid.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};

static LIVE: Mutex<BTreeMap<u64, (u32, OwnedFd)>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A guest process on the kill list while this lives.
#[derive(Debug)]
pub struct LiveProcess(u64);

impl LiveProcess {
    /// Puts `pid` on the kill list. None (logged) when it cannot be held: it is gone already,
    /// or the kernel has no pidfds (< 5.3); its owner's drop still kills it.
    pub fn register(pid: u32) -> Option<Self> {
        let fd = Pid::from_raw(pid as i32)
            .ok_or(rustix::io::Errno::SRCH)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()));
        match fd {
            Ok(fd) => {
                let id = NEXT.fetch_add(1, Ordering::Relaxed);
                lock().insert(id, (pid, fd));
                Some(Self(id))
            }
            Err(e) => {
                tracing::debug!("guest process {pid} not held for a signal's kill: {e}");
                None
            }
        }
    }
}

impl Drop for LiveProcess {
    fn drop(&mut self) {
        lock().remove(&self.0);
    }
}

fn lock() -> std::sync::MutexGuard<'static, BTreeMap<u64, (u32, OwnedFd)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pids on the list (this ocrig's live local guest processes).
pub fn pids() -> Vec<u32> {
    lock().values().map(|&(pid, _)| pid).collect()
}

/// SIGKILLs every guest process on the list; returns the pids the signal reached.
pub fn kill_all() -> Vec<u32> {
    kill_matching(|_| true)
}

/// SIGKILLs the guest processes on the list whose pid `which` picks (tests pick their own:
/// other tests of the same binary hold guests too).
pub fn kill_matching(which: impl Fn(u32) -> bool) -> Vec<u32> {
    lock()
        .values()
        .filter(|&&(pid, ref fd)| which(pid) && pidfd_send_signal(fd, Signal::KILL).is_ok())
        .map(|&(pid, _)| pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_all_kills_what_is_held_and_nothing_dropped_or_reaped() {
        let mut held = std::process::Command::new("sleep").arg("600").spawn().unwrap();
        let mut dropped = std::process::Command::new("sleep").arg("600").spawn().unwrap();
        let mut reaped = std::process::Command::new("true").spawn().unwrap();
        let h = LiveProcess::register(held.id()).expect("a pidfd for a live child");
        drop(LiveProcess::register(dropped.id()).unwrap());
        let r = LiveProcess::register(reaped.id());
        reaped.wait().unwrap();
        // Other tests hold guests of their own: only these three are picked.
        let mine = [held.id(), dropped.id(), reaped.id()];
        let killed = kill_matching(|p| mine.contains(&p));
        assert!(killed.contains(&held.id()), "{killed:?}");
        assert!(!killed.contains(&dropped.id()) && !killed.contains(&reaped.id()));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(held.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert_eq!(
            dropped.try_wait().unwrap(),
            None,
            "a process off the list lives on"
        );
        dropped.kill().unwrap();
        dropped.wait().unwrap();
        drop((h, r));
    }
}
