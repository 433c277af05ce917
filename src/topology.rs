//! The host's CPU topology (sysfs: each CPU's core siblings, package and NUMA node) and the
//! order in which ocrig takes CPUs to measure on when a scenario gives a count (`host.cpus: N`).
//!
//! Why an order: the first N usable CPUs are, on most machines, CPU 0 (interrupts, timers,
//! housekeeping) and, where SMT numbers siblings next to each other, two threads of one core —
//! which share its execution units, so a "2-CPU host" would be one core. The preference (see
//! [`Topology::preference`]): one logical CPU per physical core, the cores of one NUMA node
//! before another's, the core of CPU 0 last, and only then the cores' other threads. An
//! explicit list (`host.cpus: [2, 4]`) is taken as written.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::hostfs::HostFs;
use ocrig_payload::probe::tracefs::parse_cpu_list;

/// One logical CPU's place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuPlace {
    pub cpu: usize,
    /// The lowest CPU of its core (its thread siblings, itself included): the core's name.
    pub core: usize,
    /// Every thread of its core, ascending (itself only: no SMT).
    pub siblings: Vec<usize>,
    pub package: Option<usize>,
    /// Its NUMA node, where the host has /sys/devices/system/node.
    pub node: Option<usize>,
}

/// The places of a set of CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Topology {
    pub cpus: Vec<CpuPlace>,
}

const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

impl Topology {
    /// The places of `cpus` on the host behind `fs`; a CPU whose topology files cannot be read
    /// is its own core in no package (so it is still ordered, just without a sibling).
    pub fn read(fs: &dyn HostFs, cpus: &[usize]) -> Self {
        let paths: Vec<String> = cpus
            .iter()
            .flat_map(|c| {
                [
                    format!("{CPU_DIR}/cpu{c}/topology/thread_siblings_list"),
                    format!("{CPU_DIR}/cpu{c}/topology/physical_package_id"),
                ]
            })
            .collect();
        let texts = fs.read_many(&paths);
        let node_of = node_map(fs);
        let places = cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let siblings = texts
                    .get(2 * i)
                    .and_then(|t| t.as_ref().ok())
                    .and_then(|t| parse_cpu_list(t.trim()))
                    .filter(|s| s.contains(&cpu))
                    .unwrap_or_else(|| vec![cpu]);
                CpuPlace {
                    cpu,
                    core: siblings[0],
                    package: texts
                        .get(2 * i + 1)
                        .and_then(|t| t.as_ref().ok())
                        .and_then(|t| t.trim().parse().ok()),
                    node: node_of.get(&cpu).copied(),
                    siblings,
                }
            })
            .collect();
        Self { cpus: places }
    }

    fn place(&self, cpu: usize) -> Option<&CpuPlace> {
        self.cpus.iter().find(|p| p.cpu == cpu)
    }

    /// Every CPU of the topology in the order ocrig takes them: first one thread (the lowest)
    /// of each core, node by node — the node with the most such cores first, the one without
    /// CPU 0 winning a tie — with CPU 0's core after every other core; then the cores' other
    /// threads in the same node order. So N CPUs are N whole cores of one node where one node
    /// has them, cores of the next node before any core's second thread (a sibling shares the
    /// core it would measure against), and CPU 0 only when nothing else is left.
    pub fn preference(&self) -> Vec<usize> {
        // CPU 0's core, whether or not CPU 0 itself is in the set (a sibling of CPU 0 shares
        // its interrupts and housekeeping).
        let cpu0 = self.cpus.iter().find(|p| p.siblings.contains(&0));
        let cpu0_core = cpu0.map(|p| p.core);
        // Core → its threads in the set, ascending.
        let mut cores: BTreeMap<usize, Vec<&CpuPlace>> = BTreeMap::new();
        for p in &self.cpus {
            cores.entry(p.core).or_default().push(p);
        }
        for threads in cores.values_mut() {
            threads.sort_by_key(|p| p.cpu);
        }
        // Nodes by their cores other than CPU 0's (most first), then without CPU 0, then id.
        let mut per_node: BTreeMap<Option<usize>, usize> = BTreeMap::new();
        for (core, threads) in &cores {
            *per_node.entry(threads[0].node).or_default() += usize::from(Some(*core) != cpu0_core);
        }
        let cpu0_node = cpu0.map(|p| p.node);
        let mut nodes: Vec<Option<usize>> = per_node.keys().copied().collect();
        nodes.sort_by_key(|n| (std::cmp::Reverse(per_node[n]), Some(*n) == cpu0_node, *n));
        let rank = |core: usize, threads: &[&CpuPlace]| {
            let node = nodes
                .iter()
                .position(|n| *n == threads[0].node)
                .unwrap_or(usize::MAX);
            (Some(core) == cpu0_core, node, threads[0].cpu)
        };
        let mut order: Vec<(usize, &Vec<&CpuPlace>)> = cores.iter().map(|(c, t)| (*c, t)).collect();
        order.sort_by_key(|(c, t)| rank(*c, t));
        let mut out: Vec<usize> = order.iter().map(|(_, t)| t[0].cpu).collect();
        let depth = order.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
        for k in 1..depth {
            out.extend(order.iter().filter_map(|(_, t)| t.get(k)).map(|p| p.cpu));
        }
        out
    }

    /// `chosen` in words: cores, siblings shared, nodes, CPU 0, and what is left to the host of
    /// `allowed` (None: not known, a remote host).
    pub fn describe(&self, chosen: &[usize], allowed: Option<&[usize]>) -> String {
        let places: Vec<&CpuPlace> = chosen.iter().filter_map(|c| self.place(*c)).collect();
        let cores: BTreeSet<usize> = places.iter().map(|p| p.core).collect();
        let nodes: BTreeSet<usize> = places.iter().filter_map(|p| p.node).collect();
        let shared = chosen.len() - cores.len();
        let mut words = vec![format!(
            "CPUs {chosen:?}: {} core(s){}",
            cores.len(),
            if shared > 0 {
                format!(", {shared} of them SMT sibling(s) of another measured CPU (they share a core)")
            } else {
                ", one thread each".into()
            }
        )];
        match nodes.len() {
            0 => words.push("NUMA node unknown".into()),
            1 => words.push(format!("NUMA node {}", nodes.first().unwrap())),
            _ => words.push(format!("NUMA nodes {nodes:?} (more CPUs than one node's cores)")),
        }
        if chosen.contains(&0) {
            words.push("CPU 0 among them (no other CPU was free)".into());
        }
        if let Some(allowed) = allowed {
            let rest: Vec<usize> = allowed.iter().copied().filter(|c| !chosen.contains(c)).collect();
            words.push(if rest.is_empty() {
                "no CPU left for QEMU's other threads and ocrig itself: they share the measured CPUs".into()
            } else {
                format!("left to the host: {rest:?}")
            });
        }
        words.join("; ")
    }
}

/// `cpus` (a host's usable CPUs) in the order ocrig takes them ([`Topology::preference`]).
pub fn preferred_order(fs: &dyn HostFs, cpus: &[usize]) -> Vec<usize> {
    Topology::read(fs, cpus).preference()
}

/// CPU → NUMA node, from /sys/devices/system/node/node*/cpulist (empty: no NUMA information).
fn node_map(fs: &dyn HostFs) -> BTreeMap<usize, usize> {
    let Ok(entries) = fs.list_dir(NODE_DIR) else {
        return BTreeMap::new();
    };
    let nodes: Vec<usize> = entries
        .iter()
        .filter_map(|e| e.strip_prefix("node")?.parse().ok())
        .collect();
    let paths: Vec<String> = nodes
        .iter()
        .map(|n| format!("{NODE_DIR}/node{n}/cpulist"))
        .collect();
    let mut map = BTreeMap::new();
    for (n, text) in nodes.iter().zip(fs.read_many(&paths)) {
        for cpu in text
            .ok()
            .and_then(|t| parse_cpu_list(t.trim()))
            .unwrap_or_default()
        {
            map.insert(cpu, *n);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::RootedFs;

    /// A stand-in host whose CPU `c` has the siblings `siblings[c]`, package `package[c]`, and
    /// whose nodes hold `nodes[n]` (a CPU list).
    fn host(siblings: &[&str], package: &[usize], nodes: &[&str]) -> (tempfile::TempDir, RootedFs) {
        let dir = tempfile::tempdir().unwrap();
        let fs = RootedFs::new(dir.path());
        for (c, s) in siblings.iter().enumerate() {
            fs.write(
                &format!("{CPU_DIR}/cpu{c}/topology/thread_siblings_list"),
                &format!("{s}\n"),
            );
            fs.write(
                &format!("{CPU_DIR}/cpu{c}/topology/physical_package_id"),
                &format!("{}\n", package[c]),
            );
        }
        for (n, list) in nodes.iter().enumerate() {
            fs.write(&format!("{NODE_DIR}/node{n}/cpulist"), &format!("{list}\n"));
        }
        fs.write(&format!("{NODE_DIR}/online"), "0\n");
        (dir, fs)
    }

    #[test]
    fn a_two_socket_smt_server_gives_whole_cores_of_one_node_and_keeps_cpu_0() {
        // Intel numbering: 2 packages x 4 cores x 2 threads; CPUs 0-3 and 8-11 on node 0
        // (4-7, 12-15 on node 1); CPU c's sibling is c + 8.
        let siblings: Vec<String> = (0..16).map(|c| format!("{},{}", c % 8, c % 8 + 8)).collect();
        let siblings: Vec<&str> = siblings.iter().map(String::as_str).collect();
        let package: Vec<usize> = (0..16).map(|c| (c % 8) / 4).collect();
        let (_d, fs) = host(&siblings, &package, &["0-3,8-11", "4-7,12-15"]);
        let all: Vec<usize> = (0..16).collect();
        let t = Topology::read(&fs, &all);
        assert_eq!(t.cpus[9].siblings, [1, 9]);
        assert_eq!(
            (t.cpus[9].core, t.cpus[9].package, t.cpus[9].node),
            (1, Some(0), Some(0))
        );
        let order = t.preference();
        // Node 1's four cores first (node 0 has three besides CPU 0's), then node 0's, then
        // CPU 0; the second threads after every core.
        assert_eq!(order, [4, 5, 6, 7, 1, 2, 3, 0, 12, 13, 14, 15, 9, 10, 11, 8]);
        let d = t.describe(&order[..2], Some(&all));
        assert!(
            d.starts_with("CPUs [4, 5]: 2 core(s), one thread each; NUMA node 1"),
            "{d}"
        );
        assert!(d.contains("left to the host: [0, 1, 2, 3, 6, "), "{d}");
        // Six CPUs: more than a node's cores, so two nodes, still one thread per core.
        let d = t.describe(&order[..6], Some(&all));
        assert!(d.contains("6 core(s), one thread each; NUMA nodes {0, 1}"), "{d}");
    }

    #[test]
    fn a_laptop_with_adjacent_siblings_gets_one_thread_per_core_before_any_second_thread() {
        // AMD numbering: siblings 0-1, 2-3, 4-5, 6-7, one package, one node.
        let siblings = ["0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"];
        let (_d, fs) = host(&siblings, &[0; 8], &["0-7"]);
        let all: Vec<usize> = (0..8).collect();
        let t = Topology::read(&fs, &all);
        let order = t.preference();
        assert_eq!(order, [2, 4, 6, 0, 3, 5, 7, 1]);
        // The first two allowed CPUs would have been one core (0 and its sibling 1).
        let d = t.describe(&[0, 1], Some(&all));
        assert!(d.contains("1 core(s), 1 of them SMT sibling(s)"), "{d}");
        assert!(d.contains("CPU 0 among them"), "{d}");
        // A restricted affinity mask: CPU 1 is CPU 0's sibling, so its core still goes last.
        let t = Topology::read(&fs, &[1, 3, 4]);
        assert_eq!(t.preference(), [3, 4, 1]);
    }

    #[test]
    fn this_machine_two_cpus_no_smt_one_node_says_nothing_is_left_for_the_host() {
        let (_d, fs) = host(&["0", "1"], &[0, 0], &["0-1"]);
        let t = Topology::read(&fs, &[0, 1]);
        assert_eq!(t.preference(), [1, 0]);
        let d = t.describe(&[0, 1], Some(&[0, 1]));
        assert_eq!(
            d,
            "CPUs [0, 1]: 2 core(s), one thread each; NUMA node 0; CPU 0 among them (no other CPU was free); \
             no CPU left for QEMU's other threads and ocrig itself: they share the measured CPUs"
        );
    }

    #[test]
    fn unreadable_topology_leaves_each_cpu_its_own_core_in_numeric_order_cpu_0_last() {
        let dir = tempfile::tempdir().unwrap();
        let fs = RootedFs::new(dir.path());
        let t = Topology::read(&fs, &[0, 1, 2]);
        assert_eq!(t.cpus[1].siblings, [1]);
        assert_eq!(t.cpus[1].node, None);
        assert_eq!(t.preference(), [1, 2, 0]);
    }
}
