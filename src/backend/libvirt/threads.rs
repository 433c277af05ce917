//! A domain's QEMU process and its vCPU threads, found here or on the remote host, and the CPU
//! maps libvirt pins with.

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::backend::remote::HostSsh;
use crate::hostfs::HostFs;

/// The QEMU pid of domain `name` on a remote host, from libvirt's pid file there.
pub(super) fn remote_qemu_pid(r: &HostSsh, name: &str) -> anyhow::Result<i32> {
    let path = format!("/run/libvirt/qemu/{name}.pid");
    let text = r.read(&path).map_err(anyhow::Error::msg)?;
    text.trim()
        .parse()
        .with_context(|| format!("{path} on {} holds '{}'", r.remote.label(), text.trim()))
}

/// [`vcpu_tids`] on the host behind `fs`.
pub(super) fn vcpu_tids_on(fs: &dyn HostFs, pid: i32, vcpus: u32) -> anyhow::Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let tids: Vec<String> = fs.list_dir(&dir).map_err(anyhow::Error::msg)?;
    let comms = fs.read_many(&tids.iter().map(|t| format!("{dir}/{t}/comm")).collect::<Vec<_>>());
    let threads: Vec<(i32, String)> = tids
        .iter()
        .zip(comms)
        .filter_map(|(t, c)| Some((t.parse().ok()?, c.ok()?.trim().to_string())))
        .collect();
    vcpu_tids_from(pid, vcpus, threads)
}

/// The QEMU process of a running domain: libvirt's pid file, else a /proc scan for `guest=<name>,`.
pub(super) fn qemu_pid(uri: &str, name: &str) -> anyhow::Result<i32> {
    let mut files = vec![];
    if uri.contains("/system") {
        files.push(PathBuf::from(format!("/run/libvirt/qemu/{name}.pid")));
    }
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR") {
        files.push(PathBuf::from(rt).join(format!("libvirt/qemu/run/{name}.pid")));
    }
    for f in files {
        if let Ok(s) = std::fs::read_to_string(&f)
            && let Ok(pid) = s.trim().parse::<i32>()
            && Path::new(&format!("/proc/{pid}")).exists()
        {
            return Ok(pid);
        }
    }
    let needle = format!("guest={name},");
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmd
            .split(|&b| b == 0)
            .any(|a| a == needle.as_bytes() || a.starts_with(needle.as_bytes()))
        {
            return Ok(pid);
        }
    }
    anyhow::bail!("no QEMU process found for domain {name}")
}

/// Host tids of the vCPU threads of QEMU `pid`, in vCPU order, from thread names `CPU <n>/TCG|KVM`
/// (libvirt always starts QEMU with `debug-threads=on`). Fails unless there is one per vCPU.
pub(super) fn vcpu_tids(pid: i32, vcpus: u32) -> anyhow::Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let mut threads = Vec::new();
    for e in std::fs::read_dir(&dir)
        .with_context(|| format!("reading {dir}"))?
        .flatten()
    {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
            continue;
        };
        threads.push((tid, comm.trim().to_string()));
    }
    vcpu_tids_from(pid, vcpus, threads)
}

/// The vCPU thread ids among QEMU `pid`'s (tid, thread name) pairs.
pub(super) fn vcpu_tids_from(pid: i32, vcpus: u32, threads: Vec<(i32, String)>) -> anyhow::Result<Vec<i32>> {
    let mut found: Vec<(u32, i32)> = Vec::new();
    let mut names = Vec::new();
    for (tid, comm) in threads {
        if let Some(n) = parse_vcpu_comm(&comm) {
            found.push((n, tid));
        }
        names.push(comm);
    }
    found.sort();
    let ok = found.len() == vcpus as usize && found.iter().enumerate().all(|(i, (n, _))| *n == i as u32);
    anyhow::ensure!(
        ok,
        "QEMU (pid {pid}) should run {vcpus} vCPU thread(s) named `CPU <n>/TCG|KVM`, one per vCPU, but its \
         threads are {names:?} (single-threaded TCG shows up as `ALL CPUs/TCG`; overcommit results would be \
         meaningless)"
    );
    Ok(found.into_iter().map(|(_, t)| t).collect())
}

pub(super) fn parse_vcpu_comm(comm: &str) -> Option<u32> {
    let rest = comm.strip_prefix("CPU ")?;
    let (n, acc) = rest.split_once('/')?;
    matches!(acc, "TCG" | "KVM").then_some(())?;
    n.parse().ok()
}

/// A cpumap for `virDomainPinVcpu` with only `cpu` set.
/// libvirt's CPU bitmap: bit c of byte c/8 for each CPU c.
pub(super) fn cpumap(cpus: &[usize]) -> Vec<u8> {
    let mut m = vec![0u8; cpus.iter().max().map_or(0, |c| c / 8) + 1];
    for &cpu in cpus {
        m[cpu / 8] |= 1 << (cpu % 8);
    }
    m
}
