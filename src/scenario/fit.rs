//! Whether a scenario's guests fit a host: its CPUs (an explicit list or a count taken in the
//! topology's order), the guests each level needs, their memory with QEMU's own, the file
//! descriptors and how many guests may start at once. Validation refuses what does not fit;
//! the plan sizes itself by the same arithmetic.

use std::collections::BTreeSet;

use crate::scenario::CpuSet;

/// What validation needs to know about the host.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// The CPUs a sweep may measure on (this process's, and the host's isolated CPUs:
    /// [`crate::topology::usable_cpus`]), in the order a CPU count takes them
    /// ([`crate::topology::Topology::preference`]: isolated first, one thread a core, one L3
    /// domain, one node, CPU 0 last).
    pub allowed_cpus: Vec<usize>,
    pub mem_available_mib: u64,
    /// Per NUMA node: its CPUs and the memory it has available (MiB); empty where unknown (a
    /// remote host). Guest memory is bound to the measured CPUs' nodes, so that is what fits.
    pub node_of_cpu: std::collections::BTreeMap<usize, usize>,
    pub node_mem_available_mib: std::collections::BTreeMap<usize, u64>,
    /// The host's online CPUs, where known (a CPU listed in `host.cpus` that is offline is
    /// named as such).
    pub online_cpus: Option<Vec<usize>>,
    /// The host these facts are about when it is not this machine (a remote libvirt host).
    pub remote: Option<String>,
}

impl HostFacts {
    pub fn read() -> Self {
        Self {
            allowed_cpus: crate::topology::preferred_order(
                &crate::hostfs::LocalFs,
                &crate::topology::usable_cpus(&crate::hostfs::LocalFs, &crate::host::allowed_cpus()),
            ),
            mem_available_mib: crate::host::memory_mib().1,
            node_of_cpu: crate::topology::node_map(&crate::hostfs::LocalFs),
            node_mem_available_mib: crate::topology::node_memory_mib(&crate::hostfs::LocalFs),
            online_cpus: Some(crate::topology::online_cpus(&crate::hostfs::LocalFs))
                .filter(|c| !c.is_empty()),
            remote: None,
        }
    }

    /// The memory the guests of a sweep on `cpus` may take (MiB), and where, in words: the
    /// available memory of the nodes their memory is bound to (never more than the host's),
    /// or the host's where the nodes are not known.
    pub fn memory_for(&self, cpus: &[usize]) -> (u64, String) {
        let nodes: Option<std::collections::BTreeSet<usize>> =
            cpus.iter().map(|c| self.node_of_cpu.get(c).copied()).collect();
        let per_node: Option<Vec<u64>> = nodes
            .iter()
            .flatten()
            .map(|n| self.node_mem_available_mib.get(n).copied())
            .collect();
        match (nodes, per_node) {
            (Some(nodes), Some(mib)) if !nodes.is_empty() => {
                let list: Vec<String> = nodes.iter().map(usize::to_string).collect();
                (
                    mib.iter().sum::<u64>().min(self.mem_available_mib),
                    format!(
                        " on NUMA node(s) {} (the guests' memory is bound there)",
                        list.join(",")
                    ),
                )
            }
            _ => (self.mem_available_mib, String::new()),
        }
    }
}

/// Guest memory overhead of QEMU beyond the guest's RAM (measured RSS ~260 MiB at -m 512
/// under TCG, of which the guest touches little; this allowance covers QEMU itself).
pub const QEMU_OVERHEAD_MIB: u64 = 150;

/// The host CPUs a scenario uses, ascending: every allowed one, the first N of `allowed` (in
/// its order of preference, [`HostFacts::allowed_cpus`]), or the list as written.
pub fn host_cpus(set: &Option<CpuSet>, allowed: &[usize]) -> Result<Vec<usize>, String> {
    let sorted = |cpus: &[usize]| {
        let mut v = cpus.to_vec();
        v.sort_unstable();
        v
    };
    match set {
        None => Ok(sorted(allowed)),
        Some(CpuSet::Count(0)) => Err("must name at least one CPU".into()),
        Some(CpuSet::Count(n)) if *n > allowed.len() => Err(format!(
            "asks for {n} CPUs but this process may use {} ({:?})",
            allowed.len(),
            sorted(allowed)
        )),
        Some(CpuSet::Count(n)) => Ok(sorted(&allowed[..*n])),
        Some(CpuSet::List(list)) => {
            if list.is_empty() {
                return Err("must name at least one CPU".into());
            }
            let unique: BTreeSet<usize> = list.iter().copied().collect();
            if unique.len() != list.len() {
                return Err(format!("lists a CPU twice: {list:?}"));
            }
            if let Some(bad) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(format!(
                    "CPU {bad} is not available to this process (allowed: {:?})",
                    sorted(allowed)
                ));
            }
            Ok(list.clone())
        }
    }
}

/// Guests needed at an overcommit level: level × host CPUs / vCPUs per guest, which must be a
/// whole number of at least one.
pub fn guests_at(level: f64, host_cpus: usize, vcpus: u32) -> Result<u32, String> {
    if !(level.is_finite() && level > 0.0) {
        return Err(format!("level {level} must be a positive number"));
    }
    let exact = level * host_cpus as f64 / vcpus as f64;
    let rounded = exact.round();
    if (exact - rounded).abs() > 1e-9 || rounded < 1.0 {
        return Err(format!(
            "level {level} needs {level} × {host_cpus} host CPUs / {vcpus} vCPUs per guest = {exact:.3} guests, \
             not a whole number ≥ 1; pick a level that is a multiple of {:.3}",
            vcpus as f64 / host_cpus as f64
        ));
    }
    Ok(rounded as u32)
}

/// What the fit of a level's guests is checked against.
#[derive(Debug, Clone, PartialEq)]
pub struct FitHost {
    /// Host CPUs the sweep uses.
    pub cpus: usize,
    pub mem_available_mib: u64,
    /// Where that memory is, in words (` on NUMA node(s) 1 (…)`; empty: the host's).
    pub mem_where: String,
    /// This process's open-file limit (soft, hard) and the files it has open; `None` when
    /// unknown (not checked).
    pub fds: Option<FdLimits>,
    /// Loopback ports the kernel hands out for `bind(127.0.0.1:0)` (each guest's SSH forward
    /// takes one); `None` when unknown.
    pub ephemeral_ports: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FdLimits {
    pub soft: u64,
    pub hard: u64,
    pub open: u64,
}

/// Files the orchestrator holds per live guest: measured 3 at 1–24 clones (issue 24: 21 open
/// with 1 guest, 90 with 24 — the SSH socket, the QMP socket, QEMU's stderr pipe), planned
/// with room for a libvirt or remote backend's extra connections and for growth.
pub const FDS_PER_GUEST: u64 = 8;

/// Files the orchestrator holds besides its guests (journal, log, locks, runtime), with room.
pub const FDS_BASE: u64 = 64;

/// The files a level of `guests` guests needs open at once.
pub fn fds_needed(guests: u64) -> u64 {
    FDS_BASE + guests * FDS_PER_GUEST
}

/// `8300 MiB`, or `184320 MiB = 180 GiB` when GiB read better.
pub(crate) fn mib_text(mib: u64) -> String {
    if mib >= 10 * 1024 {
        format!("{mib} MiB = {:.0} GiB", mib as f64 / 1024.0)
    } else {
        format!("{mib} MiB")
    }
}

/// Whether the guests of the largest level fit the host, each refusal with its arithmetic
/// (`2.5x × 192 CPUs / 1 vCPU = 480 guests × 662 MiB = 310 GiB > 120 GiB available`) and the
/// scenario field it is about.
pub fn fit_problems(level: f64, vcpus: u32, memory_mib: u32, host: &FitHost) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let exact = level * host.cpus as f64 / vcpus.max(1) as f64;
    let guests = exact.round().max(0.0) as u64;
    let vcpu_word = if vcpus == 1 { "vCPU" } else { "vCPUs" };
    let head = format!(
        "{level}x × {} CPUs / {vcpus} {vcpu_word} = {guests} guests",
        host.cpus
    );
    let per_guest = memory_mib as u64 + QEMU_OVERHEAD_MIB;
    let need = guests * per_guest;
    if need > host.mem_available_mib {
        out.push((
            "memory_mib",
            format!(
                "the largest level does not fit in memory: {head} × ({memory_mib} MiB + {QEMU_OVERHEAD_MIB} MiB QEMU) \
                 = {} > {} available{}",
                mib_text(need),
                mib_text(host.mem_available_mib),
                host.mem_where
            ),
        ));
    }
    if let Some(fd) = host.fds {
        let need = fds_needed(guests) + fd.open;
        if need > fd.hard {
            out.push((
                "vcpus",
                format!(
                    "the largest level needs more open files than this process may have: {head} × {FDS_PER_GUEST} files \
                     + {FDS_BASE} + {} open now = {need} > hard limit {} (RLIMIT_NOFILE; raise it with `ulimit -Hn` \
                     or /etc/security/limits.conf as root)",
                    fd.open, fd.hard
                ),
            ));
        }
    }
    if let Some(ports) = host.ephemeral_ports {
        // Half the range: other programs on the host take ports from it too.
        if guests > ports / 2 {
            out.push((
                "vcpus",
                format!(
                    "the largest level needs more loopback ports than the host hands out: {head} × 1 SSH forward \
                     = {guests} > {} (half of the {ports} ports of net.ipv4.ip_local_port_range)",
                    ports / 2
                ),
            ));
        }
    }
    out
}

/// How many guests are started at once, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct StartBound {
    pub at_once: usize,
    pub why: String,
}

/// Guests started per host CPU at once: a clone's restore, its SSH key exchange and clock
/// setting take host CPU, and more at once than this only makes each slower (and at 12x on 2
/// CPUs risks the boot deadline) without making the group ready sooner.
pub const STARTS_PER_CPU: usize = 2;

/// Start concurrency for `guests` guests on `cpus` host CPUs with room for `fd_headroom`
/// more open files (`None`: unknown). Memory is not a bound here: every guest of a level is
/// up at once during its runs anyway, and validation checked that they fit.
pub fn start_concurrency(cpus: usize, guests: usize, fd_headroom: Option<u64>) -> StartBound {
    let by_cpu = (cpus * STARTS_PER_CPU).max(2);
    let mut at_once = by_cpu.min(guests.max(1));
    let mut why = format!("{STARTS_PER_CPU} per host CPU × {cpus} CPUs = {by_cpu}");
    if let Some(room) = fd_headroom {
        let by_fd = (room / FDS_PER_GUEST).max(1) as usize;
        if by_fd < at_once {
            at_once = by_fd;
            why =
                format!("{why}, but only {room} more files may be opened ({FDS_PER_GUEST} a guest): {by_fd}");
        }
    }
    if guests <= at_once {
        why = format!("{why}; all {guests} at once");
    }
    StartBound { at_once, why }
}

/// This process's open-file limits and open files, from the kernel.
pub fn fd_limits() -> Option<FdLimits> {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(FdLimits {
        soft: lim.current?,
        hard: lim.maximum?,
        open,
    })
}

/// Ports in net.ipv4.ip_local_port_range.
pub fn ephemeral_ports() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    Some(hi.saturating_sub(lo) + 1)
}
