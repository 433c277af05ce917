//! Backends: one narrow interface for "boot a guest, tell me how to reach it, stop it".
//!
//! The sweep never sees QEMU arguments or libvirt XML; a backend never sees SSH or workloads.

pub mod boot;
pub mod isolation;
pub mod launcher;
pub mod libvirt;
pub mod live;
pub mod owned;
pub mod paths;
pub mod qemu;
pub mod qmp;
#[cfg(test)]
mod real_tests;
pub mod remote;
pub mod started;
pub mod template;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use crate::host::Accel;
use crate::vocabulary::StartMethod;

pub type Liveness = Box<dyn Fn() -> bool + Send + Sync>;

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// vCPU index → the host CPUs it may run on, as applied.
pub type VcpuCpus = Vec<(u32, Vec<usize>)>;

/// The kernel in a form QEMU can boot directly: the image's (so `image/` needs nothing of
/// the backends).
pub use crate::image::FastKernel;

/// Everything a backend needs to start one guest.
#[derive(Debug, Clone)]
pub struct GuestSpec {
    /// Unique name, `ocrig-<run id>-<index>`; also the libvirt domain name.
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u32,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
    pub accel: Accel,
    /// `-cpu` model and flags, e.g. `max` (TCG) or `host,kvm-pv-unhalt=off` (KVM).
    pub cpu: String,
    pub scratch_disk: Option<PathBuf>,
    /// Where the console log, QMP socket and pid file go.
    pub workdir: PathBuf,
    /// The image's PVH-bootable kernel, preferred over `kernel` when QEMU can use it.
    pub fast_kernel: FastKernel,
    pub start: StartMethod,
    /// Where the guest's RAM lives (set by the template code for templates and clones).
    pub ram: RamBacking,
}

/// Where a guest's RAM lives.
///
/// A clone restored with its RAM inside the state file gets all of it as its own anonymous
/// memory (≈140 MiB private per 256 MiB clone, measured). With the template's RAM in a file
/// instead, every clone maps that file private: the pages it only reads stay the page cache's,
/// one copy for all clones, and only the pages it writes become its own (copy on write).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RamBacking {
    /// QEMU's own anonymous memory.
    #[default]
    Anonymous,
    /// A template being built: RAM in this file, mapped shared so that the guest's memory is
    /// the file, and left out of the saved state (`x-ignore-shared`).
    TemplateFile(PathBuf),
    /// A clone: the template's RAM file mapped private (`share=off`), so the file is never
    /// written and the state loads only devices and the non-RAM blocks.
    CloneOf(PathBuf),
}

/// A started guest. Dropping it must kill whatever it started.
pub trait Guest: Send + Sync {
    fn name(&self) -> &str;
    /// SSH endpoint on the host's loopback.
    fn ssh_addr(&self) -> SocketAddr;
    /// The serial console log (kept with the results).
    fn console_log(&self) -> PathBuf;
    /// Host thread ids of the vCPUs, in vCPU order.
    fn vcpu_threads(&self) -> BoxFut<'_, anyhow::Result<Vec<i32>>>;
    /// Restricts the vCPU threads: vCPU i may run on the host CPUs `cpus[i mod len]` (one CPU
    /// pins it; several let the host scheduler share them). Returns the mapping applied
    /// (vCPU index → its host CPUs).
    fn pin_vcpus<'a>(&'a self, cpus: &'a [Vec<usize>]) -> BoxFut<'a, anyhow::Result<VcpuCpus>>;
    /// True while the guest's process or domain exists.
    fn is_running(&mut self) -> bool;
    /// A cheap, thread-safe "is it still running?" probe for blocking waits that must not hold
    /// the guest itself (so the guest can still be dropped, and killed, meanwhile).
    fn liveness(&self) -> Liveness {
        Box::new(|| true)
    }
    /// How this guest was started, for the journal (e.g. `{"method": "boot"}`, or a clone with
    /// the template it was restored from).
    fn start_facts(&self) -> serde_json::Value {
        serde_json::json!({ "method": "boot" })
    }
    /// A shell command to run in the guest once it is reachable over SSH and before anything
    /// else, given the host's wall clock (Unix seconds) at that moment — e.g. a guest restored
    /// from a snapshot sets its wall clock and reseeds its RNG. None: nothing to do.
    fn post_ready_command(&self, _host_unix_time: f64) -> Option<String> {
        None
    }
    /// The guest's KVM statistics now, raw, as QMP `query-stats` returns them per target:
    /// `{"vm": [...], "vcpu": [...]}` (empty lists under TCG). An error says why there are
    /// none; the telemetry then tries debugfs.
    fn kvm_stats(&self) -> BoxFut<'_, anyhow::Result<serde_json::Value>> {
        Box::pin(async { anyhow::bail!("this backend does not query QEMU's statistics") })
    }
    /// Orderly stop within `grace`, then forced; idempotent.
    fn shutdown(&mut self, grace: Duration) -> BoxFut<'_, anyhow::Result<()>>;
}

pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    /// The host the guests run on, for host-side telemetry: this machine unless the backend
    /// drives a remote one.
    fn host_fs(&self) -> std::sync::Arc<dyn crate::hostfs::HostFs> {
        std::sync::Arc::new(crate::hostfs::LocalFs)
    }
    /// Whether the host can still be reached (blocking); Err says why not.
    fn reachable(&self) -> Result<(), String> {
        Ok(())
    }
    fn boot<'a>(&'a self, spec: &'a GuestSpec) -> BoxFut<'a, anyhow::Result<Box<dyn Guest>>>;
}

/// Where a local guest's QEMU starts, before it touches guest RAM: its threads on the measured
/// CPUs (vCPUs are pinned one by one once they are known), its memory bound to their NUMA
/// nodes, and under libvirt its other threads (main loop, I/O) on `others`. Empty fields leave
/// that to the host (the default: wherever the caller's affinity and the kernel put it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartPlacement {
    pub cpus: Vec<usize>,
    /// NUMA nodes guest memory is bound to (`MPOL_BIND`; libvirt `numatune` strict).
    pub memory_nodes: Vec<usize>,
    /// CPUs outside the measured set for QEMU's non-vCPU threads (libvirt `emulatorpin`); empty
    /// where the host has none.
    pub others: Vec<usize>,
}

impl StartPlacement {
    /// The measured `cpus`, their nodes as the host's topology gives them, and the usable CPUs
    /// outside them.
    pub fn of(cpus: &[usize], topology: &crate::topology::Topology, others: Vec<usize>) -> Self {
        let nodes: std::collections::BTreeSet<usize> = topology
            .cpus
            .iter()
            .filter(|p| cpus.contains(&p.cpu))
            .filter_map(|p| p.node)
            .collect();
        Self {
            cpus: cpus.to_vec(),
            memory_nodes: nodes.into_iter().collect(),
            others,
        }
    }

    /// In words for the log and the journal.
    pub fn describe(&self) -> String {
        let list = cpu_list_text;
        let mut words = vec![match self.cpus.is_empty() {
            true => "QEMU starts with ocrig's affinity".to_string(),
            false => format!("QEMU starts on CPUs {}", list(&self.cpus)),
        }];
        words.push(match self.memory_nodes.is_empty() {
            true => "guest memory where first touched (NUMA nodes unknown)".into(),
            false => format!("guest memory bound to NUMA node(s) {}", list(&self.memory_nodes)),
        });
        if !self.others.is_empty() {
            words.push(format!(
                "under libvirt its other threads start on CPUs {}",
                list(&self.others)
            ));
        }
        words.join("; ")
    }
}

/// CPUs or nodes as a comma list (`2,4`), as libvirt's `cpuset` and `nodeset` take them.
pub fn cpu_list_text(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// Restricts one host thread to a set of CPUs (one CPU pins it).
pub fn pin_thread(tid: i32, cpus: &[usize]) -> anyhow::Result<()> {
    anyhow::ensure!(!cpus.is_empty(), "no host CPUs to pin thread {tid} to");
    let pid = rustix::process::Pid::from_raw(tid)
        .ok_or_else(|| anyhow::anyhow!("thread id {tid} is not a valid id"))?;
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    rustix::thread::sched_setaffinity(Some(pid), &set)
        .map_err(|e| anyhow::anyhow!("sched_setaffinity(tid {tid}, cpus {cpus:?}): {e}"))
}

/// True while process `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain spaces.
        Ok(stat) => {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

/// A free TCP port on 127.0.0.1 (the OS picks it; a race with another process is possible and
/// shows up as QEMU failing to bind, which the caller retries).
pub fn free_loopback_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::StartPlacement;
    use crate::topology::{CpuPlace, Topology};

    /// Memory goes to the nodes of the measured CPUs only, each named once.
    #[test]
    fn a_start_placement_binds_memory_to_the_measured_cpus_nodes() {
        let place = |cpu, node| CpuPlace {
            cpu,
            core: cpu,
            siblings: vec![cpu],
            package: node,
            node,
            l3: node,
        };
        // Two sockets: CPUs 0-3 on node 0, 4-7 on node 1.
        let two = Topology {
            cpus: (0..8).map(|c| place(c, Some(c / 4))).collect(),
            isolated: Vec::new(),
        };
        assert_eq!(StartPlacement::of(&[5, 6], &two, vec![0]).memory_nodes, vec![1]);
        assert_eq!(
            StartPlacement::of(&[1, 2, 3, 4], &two, vec![]).memory_nodes,
            vec![0, 1]
        );
        // No NUMA information: nothing bound, and said so.
        let unknown = Topology {
            cpus: (0..2).map(|c| place(c, None)).collect(),
            isolated: Vec::new(),
        };
        let s = StartPlacement::of(&[0, 1], &unknown, vec![]);
        assert!(s.memory_nodes.is_empty());
        assert_eq!(
            s.describe(),
            "QEMU starts on CPUs 0,1; guest memory where first touched (NUMA nodes unknown)"
        );
    }
}
