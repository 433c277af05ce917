//! The host's CPU locks (the `flock` files a local sweep takes there), held by a process on it
//! while our SSH channel stays open.

use std::io::Read;
use std::time::Duration;

use anyhow::Context;
use ssh2::Session;

use super::*;

/// The host's CPU locks, held by `flock` processes on it while our channel is open. When ocrig
/// dies the connection closes, `cat` sees end of input, and the locks go with it.
pub struct RemoteCpuClaim {
    _session: Session,
    _channel: ssh2::Channel,
}

pub(super) fn claim_command(cpus: &[usize], wait: bool) -> String {
    let flag = if wait { "" } else { "-n -E 75 " };
    let mut cmd = String::from(
        "d=/run/lock/ocrig; [ -d /run/lock ] || d=/tmp/ocrig-lock; mkdir -p \"$d/cpus\" && chmod 1777 \"$d\" \"$d/cpus\" 2>/dev/null; ",
    );
    for c in cpus {
        cmd.push_str(&format!("flock {flag}\"$d/cpus/cpu{c}.lock\" "));
    }
    cmd.push_str("sh -c 'echo CLAIMED; exec cat >/dev/null'");
    cmd
}

impl RemoteCpuClaim {
    /// Takes every CPU's lock on the host or none. Busy without `wait`: an error naming the host
    /// and CPUs; with `wait`, queues behind the holder, telling `on_wait` first.
    pub fn claim(
        r: &RemoteUri,
        cpus: &[usize],
        wait: bool,
        on_wait: impl FnOnce(&str),
    ) -> anyhow::Result<Self> {
        let mut sorted = cpus.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let busy_msg = format!(
            "host CPU(s) {sorted:?} on {} are in use by a live sweep; two sweeps on the same CPUs spoil each other's \
             measurements. Wait for it, choose other CPUs (host.cpus), or pass --wait-for-cpus to queue behind it",
            r.label()
        );
        match Self::try_claim(r, &sorted, false)? {
            Some(c) => Ok(c),
            None if !wait => Err(crate::backend::isolation::RemoteCpusBusy(busy_msg).into()),
            None => {
                on_wait(&busy_msg);
                Self::try_claim(r, &sorted, true)?.context("the remote CPU claim ended without the locks")
            }
        }
    }

    fn try_claim(r: &RemoteUri, cpus: &[usize], wait: bool) -> anyhow::Result<Option<Self>> {
        let s = open_session(r, Duration::from_secs(10))?;
        let mut ch = s.channel_session()?;
        ch.exec(&claim_command(cpus, wait))?;
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        loop {
            match ch.read(&mut b) {
                Ok(0) => break,
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) => line.push(b[0]),
                Err(e) => return Err(e).context("reading the remote CPU claim"),
            }
        }
        if line == b"CLAIMED" {
            return Ok(Some(Self {
                _session: s,
                _channel: ch,
            }));
        }
        let mut err = String::new();
        let _ = ch.stderr().read_to_string(&mut err);
        let _ = ch.wait_close();
        match ch.exit_status() {
            Ok(75) | Ok(1) if err.trim().is_empty() => Ok(None),
            st => anyhow::bail!(
                "claiming CPUs {cpus:?} on {}: exit {st:?}: {}",
                r.label(),
                err.trim()
            ),
        }
    }
}
