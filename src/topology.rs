//! The host's CPU topology (sysfs: each CPU's core siblings, package and NUMA node) and the
//! order in which ocrig takes CPUs to measure on when a scenario gives a count (`host.cpus: N`).
//!
//! Why an order: the first N usable CPUs are, on most machines, CPU 0 (interrupts, timers,
//! housekeeping) and, where SMT numbers siblings next to each other, two threads of one core —
//! which share its execution units, so a "2-CPU host" would be one core. The preference (see
//! [`Topology::preference`]): one logical CPU per physical core, the cores of one NUMA node
//! before another's (and within a node one L3 domain's before another's: a cache line crosses
//! an EPYC CCX or a sub-NUMA cluster at 2–3x the cost), the core of CPU 0 last, and only then
//! the cores' other threads; where the host isolates CPUs (`isolcpus=`, `nohz_full=`), those
//! first. An explicit list (`host.cpus: [2, 4]`) is taken as written. The other threads of a
//! sweep (QEMU's main loop and I/O, libvirt's emulator pin, ocrig itself) go to the CPUs left
//! to the host ([`Topology::others`]): never a measured core's sibling, never an isolated CPU,
//! while anything else is left.

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
    /// The lowest CPU sharing its L3 cache (`cache/index3`): the L3 domain's name. None where
    /// the host does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3: Option<usize>,
}

/// The places of a set of CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Topology {
    pub cpus: Vec<CpuPlace>,
    /// The CPUs the host keeps apart for chosen work (`isolcpus=` and `nohz_full=`, from
    /// /sys/devices/system/cpu/{isolated,nohz_full}), ascending; empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isolated: Vec<usize>,
}

const CPU_DIR: &str = "/sys/devices/system/cpu";
const NODE_DIR: &str = "/sys/devices/system/node";

impl Topology {
    /// The places of `cpus` on the host behind `fs`; a CPU whose topology files cannot be read
    /// is its own core in no package (so it is still ordered, just without a sibling).
    pub fn read(fs: &dyn HostFs, cpus: &[usize]) -> Self {
        const PER_CPU: usize = 4;
        let mut paths: Vec<String> = cpus
            .iter()
            .flat_map(|c| {
                [
                    format!("{CPU_DIR}/cpu{c}/topology/thread_siblings_list"),
                    format!("{CPU_DIR}/cpu{c}/topology/physical_package_id"),
                    format!("{CPU_DIR}/cpu{c}/cache/index3/level"),
                    format!("{CPU_DIR}/cpu{c}/cache/index3/shared_cpu_list"),
                ]
            })
            .collect();
        paths.push(format!("{CPU_DIR}/isolated"));
        paths.push(format!("{CPU_DIR}/nohz_full"));
        let texts = fs.read_many(&paths);
        let text = |i: usize| texts.get(i).and_then(|t| t.as_ref().ok()).map(|t| t.trim());
        let node_of = node_map(fs);
        let places = cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                let at = PER_CPU * i;
                let siblings = text(at)
                    .and_then(parse_cpu_list)
                    .filter(|s| s.contains(&cpu))
                    .unwrap_or_else(|| vec![cpu]);
                let l3 = (text(at + 2) == Some("3"))
                    .then(|| text(at + 3).and_then(parse_cpu_list))
                    .flatten()
                    .filter(|s| s.contains(&cpu))
                    .map(|s| s[0]);
                CpuPlace {
                    cpu,
                    core: siblings[0],
                    package: text(at + 1).and_then(|t| t.parse().ok()),
                    node: node_of.get(&cpu).copied(),
                    siblings,
                    l3,
                }
            })
            .collect();
        // `nohz_full` reads `(null)` where the kernel was built with it but none was given.
        let list = |i: usize| text(i).and_then(parse_cpu_list).unwrap_or_default();
        let isolated: BTreeSet<usize> = list(PER_CPU * cpus.len())
            .into_iter()
            .chain(list(PER_CPU * cpus.len() + 1))
            .collect();
        Self {
            cpus: places,
            isolated: isolated.into_iter().collect(),
        }
    }

    fn place(&self, cpu: usize) -> Option<&CpuPlace> {
        self.cpus.iter().find(|p| p.cpu == cpu)
    }

    /// Every CPU of the topology in the order ocrig takes them: the host's isolated CPUs first,
    /// if it has any, then the others, each part ordered alike: first one thread (the lowest)
    /// of each core, node by node — the node with the most such cores first, the one without
    /// CPU 0 winning a tie — and within a node L3 domain by L3 domain (the most cores first),
    /// with CPU 0's core after every other core; then the cores' other threads in the same
    /// order. So N CPUs are N whole cores of one L3 domain, or else of one node, where the host
    /// has them, cores of the next node before any core's second thread (a sibling shares the
    /// core it would measure against), and CPU 0 only when nothing else is left.
    pub fn preference(&self) -> Vec<usize> {
        // CPU 0's core, whether or not CPU 0 itself is in the set (a sibling of CPU 0 shares
        // its interrupts and housekeeping).
        let cpu0_core = self.cpus.iter().find(|p| p.siblings.contains(&0)).map(|p| p.core);
        // Core → its threads in the set, ascending.
        let mut cores: BTreeMap<usize, Vec<&CpuPlace>> = BTreeMap::new();
        for p in &self.cpus {
            cores.entry(p.core).or_default().push(p);
        }
        for threads in cores.values_mut() {
            threads.sort_by_key(|p| p.cpu);
        }
        let (isolated, rest): (Vec<_>, Vec<_>) = cores
            .into_iter()
            .partition(|(_, t)| self.isolated.contains(&t[0].cpu));
        let mut out = threads_in_order(&cores_in_order(isolated, cpu0_core));
        out.extend(threads_in_order(&cores_in_order(rest, cpu0_core)));
        out
    }

    /// The CPUs of `allowed` that a sweep measuring `measured` leaves to the host's other work
    /// (QEMU's main loop and I/O threads, libvirt's emulator pin, ocrig itself): outside the
    /// measured CPUs, and neither a measured CPU's SMT sibling (it shares the core measured)
    /// nor an isolated CPU (kept for chosen work). With nothing else left, the siblings (and
    /// isolated CPUs) are taken, and the note says so; with nothing at all, none (they share
    /// the measured CPUs).
    pub fn others(&self, measured: &[usize], allowed: &[usize]) -> Others {
        let siblings: BTreeSet<usize> = measured
            .iter()
            .filter_map(|c| self.place(*c))
            .flat_map(|p| p.siblings.iter().copied())
            .collect();
        let outside: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|c| !measured.contains(c))
            .collect();
        let clean: Vec<usize> = outside
            .iter()
            .copied()
            .filter(|c| !siblings.contains(c) && !self.isolated.contains(c))
            .collect();
        if !clean.is_empty() || outside.is_empty() {
            return Others {
                cpus: clean,
                note: None,
            };
        }
        let note = format!(
            "no CPU outside the measured cores and the isolated CPUs: QEMU's other threads and \
             ocrig run on {} (SMT sibling(s) of measured CPUs, or isolated CPUs), so that work \
             shares the measured cores",
            cpu_words(&outside)
        );
        Others {
            cpus: outside,
            note: Some(note),
        }
    }

    /// `chosen` in words: cores, siblings shared, nodes, L3 domains, CPU 0, isolation, and
    /// where the other threads go of `allowed` (None: not known, a remote host).
    pub fn describe(&self, chosen: &[usize], allowed: Option<&[usize]>) -> String {
        let places: Vec<&CpuPlace> = chosen.iter().filter_map(|c| self.place(*c)).collect();
        let cores: BTreeSet<usize> = places.iter().map(|p| p.core).collect();
        let nodes: BTreeSet<usize> = places.iter().filter_map(|p| p.node).collect();
        let l3s: BTreeSet<usize> = places.iter().filter_map(|p| p.l3).collect();
        let shared = chosen.len() - cores.len();
        let mut words = vec![format!(
            "CPUs {}: {} core(s){}",
            cpu_words(chosen),
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
        match l3s.len() {
            0 => {}
            1 => words.push(format!("one L3 domain (CPU {}'s)", l3s.first().unwrap())),
            n => words.push(format!(
                "{n} L3 domains (more CPUs than one domain's cores: a cache line between them \
                 crosses domains)"
            )),
        }
        if chosen.contains(&0) {
            words.push("CPU 0 among them (no other CPU was free)".into());
        }
        let shared_with_host: Vec<usize> = chosen
            .iter()
            .copied()
            .filter(|c| !self.isolated.contains(c))
            .collect();
        if !self.isolated.is_empty() && !shared_with_host.is_empty() {
            words.push(format!(
                "CPUs {} not isolated although the host isolates {}: the host's own tasks and \
                 interrupts share them",
                cpu_words(&shared_with_host),
                cpu_words(&self.isolated)
            ));
        }
        if let Some(allowed) = allowed {
            let others = self.others(chosen, allowed);
            words.push(match (&others.note, others.cpus.is_empty()) {
                (Some(note), _) => note.clone(),
                (None, true) => {
                    "no CPU left for QEMU's other threads and ocrig itself: they share the measured CPUs"
                        .into()
                }
                (None, false) => format!("left to the host: {}", cpu_words(&others.cpus)),
            });
        }
        words.join("; ")
    }
}

/// Where a sweep's other threads go ([`Topology::others`]), and why there when it had to fall
/// back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Others {
    pub cpus: Vec<usize>,
    pub note: Option<String>,
}

type Core<'a> = (usize, Vec<&'a CpuPlace>);

/// `cores` (each its name and threads) in the order [`Topology::preference`] takes them.
fn cores_in_order(mut cores: Vec<Core<'_>>, cpu0_core: Option<usize>) -> Vec<Core<'_>> {
    // Nodes, and L3 domains, by their cores other than CPU 0's (most first), then the one
    // without CPU 0's core, then id.
    let mut per_node: BTreeMap<Option<usize>, (usize, bool)> = BTreeMap::new();
    let mut per_l3: BTreeMap<Option<usize>, (usize, bool)> = BTreeMap::new();
    for (core, threads) in &cores {
        let is_cpu0 = Some(*core) == cpu0_core;
        for (map, key) in [(&mut per_node, threads[0].node), (&mut per_l3, threads[0].l3)] {
            let e = map.entry(key).or_default();
            e.0 += usize::from(!is_cpu0);
            e.1 |= is_cpu0;
        }
    }
    let ranks = |map: &BTreeMap<Option<usize>, (usize, bool)>| {
        let mut keys: Vec<Option<usize>> = map.keys().copied().collect();
        keys.sort_by_key(|k| (std::cmp::Reverse(map[k].0), map[k].1, *k));
        keys
    };
    let (nodes, l3s) = (ranks(&per_node), ranks(&per_l3));
    let rank_in = |keys: &[Option<usize>], k: Option<usize>| keys.iter().position(|n| *n == k);
    cores.sort_by_key(|(core, t)| {
        (
            Some(*core) == cpu0_core,
            rank_in(&nodes, t[0].node),
            rank_in(&l3s, t[0].l3),
            t[0].cpu,
        )
    });
    cores
}

/// The first thread of every core in order, then the second threads, and so on.
fn threads_in_order(cores: &[Core<'_>]) -> Vec<usize> {
    let depth = cores.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
    (0..depth)
        .flat_map(|k| cores.iter().filter_map(move |(_, t)| t.get(k)).map(|p| p.cpu))
        .collect()
}

/// A CPU list in brackets, shortened past 16 CPUs (`[0, 1, … 255] (254 CPUs)`).
pub fn cpu_words(cpus: &[usize]) -> String {
    match cpus.len() {
        0..=16 => format!("{cpus:?}"),
        n => format!(
            "[{}, … {}] ({n} CPUs)",
            cpus[..8]
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            cpus[n - 1]
        ),
    }
}

/// The CPUs a sweep may measure on: those this process may use (`allowed`, its affinity),
/// and the host's isolated CPUs too where the affinity is the host's default (every online
/// CPU but the isolated ones: the kernel keeps them out of it, not the user). An affinity the
/// user narrowed (`taskset`) is kept as given.
pub fn usable_cpus(fs: &dyn HostFs, allowed: &[usize]) -> Vec<usize> {
    let isolated = Topology::read(fs, &[]).isolated;
    let online = online_cpus(fs);
    let default_mask: BTreeSet<usize> = online.iter().copied().filter(|c| !isolated.contains(c)).collect();
    let mine: BTreeSet<usize> = allowed.iter().copied().collect();
    if isolated.is_empty() || mine != default_mask {
        return allowed.to_vec();
    }
    mine.into_iter()
        .chain(isolated.into_iter().filter(|c| online.contains(c)))
        .collect::<BTreeSet<usize>>()
        .into_iter()
        .collect()
}

/// /sys/devices/system/cpu/online (empty where it cannot be read).
pub fn online_cpus(fs: &dyn HostFs) -> Vec<usize> {
    fs.read(&format!("{CPU_DIR}/online"))
        .ok()
        .and_then(|t| parse_cpu_list(t.trim()))
        .unwrap_or_default()
}

/// `cpus` (a host's usable CPUs) in the order ocrig takes them ([`Topology::preference`]).
pub fn preferred_order(fs: &dyn HostFs, cpus: &[usize]) -> Vec<usize> {
    Topology::read(fs, cpus).preference()
}

/// Each NUMA node's `file` (/sys/devices/system/node/node<n>/<file>), read in one batch; none
/// where the host has no NUMA information.
fn per_node(fs: &dyn HostFs, file: &str) -> Vec<(usize, Result<String, String>)> {
    let nodes: Vec<usize> = fs
        .list_dir(NODE_DIR)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.strip_prefix("node")?.parse().ok())
        .collect();
    let paths: Vec<String> = nodes
        .iter()
        .map(|n| format!("{NODE_DIR}/node{n}/{file}"))
        .collect();
    nodes.into_iter().zip(fs.read_many(&paths)).collect()
}

/// NUMA node → the memory its guests could take now, in MiB, from each node's meminfo: free,
/// plus the file cache and reclaimable slab the kernel gives back on demand (the per-node
/// counterpart of MemAvailable; empty: no NUMA information).
pub fn node_memory_mib(fs: &dyn HostFs) -> BTreeMap<usize, u64> {
    let mut out = BTreeMap::new();
    for (n, text) in per_node(fs, "meminfo") {
        let Ok(text) = text else { continue };
        // `Node 0 MemFree:        123456 kB`
        let kib = |field: &str| {
            text.lines().find_map(|l| {
                let rest = l.split_once(':').filter(|(k, _)| k.ends_with(field))?.1;
                rest.split_whitespace().next()?.parse::<u64>().ok()
            })
        };
        if let Some(free) = kib(" MemFree") {
            let reclaimable = ["Active(file)", "Inactive(file)", "SReclaimable"]
                .iter()
                .filter_map(|f| kib(&format!(" {f}")))
                .sum::<u64>();
            out.insert(n, (free + reclaimable) / 1024);
        }
    }
    out
}

/// CPU → NUMA node, from /sys/devices/system/node/node*/cpulist (empty: no NUMA information).
pub fn node_map(fs: &dyn HostFs) -> BTreeMap<usize, usize> {
    let mut map = BTreeMap::new();
    for (n, text) in per_node(fs, "cpulist") {
        for cpu in text
            .ok()
            .and_then(|t| parse_cpu_list(t.trim()))
            .unwrap_or_default()
        {
            map.insert(cpu, n);
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

    use crate::testing::host_trees;

    /// The CPUs `host.cpus: n` takes on a host measured from the default affinity (`allowed`),
    /// sorted as the plan keeps them.
    fn take(tree: &host_trees::Tree, allowed: &[usize], n: usize) -> (Topology, Vec<usize>) {
        let usable = usable_cpus(&tree.fs, allowed);
        let t = Topology::read(&tree.fs, &usable);
        let mut chosen = t.preference()[..n].to_vec();
        chosen.sort_unstable();
        (t, chosen)
    }

    #[test]
    fn a_two_socket_intel_host_measures_whole_cores_of_one_package_and_leaves_their_siblings_idle() {
        let tree = host_trees::intel_two_socket();
        let (t, chosen) = take(&tree, &tree.cpus, 2);
        // Node 1 (8 cores, none CPU 0's), one thread a core, one L3.
        assert_eq!(chosen, [8, 9]);
        assert_eq!(t.place(8).unwrap().l3, Some(8));
        let others = t.others(&chosen, &tree.cpus);
        assert_eq!(others.note, None);
        assert!(
            !others.cpus.contains(&24) && !others.cpus.contains(&25),
            "{others:?}"
        );
        assert_eq!(others.cpus.len(), 32 - 4);
        let d = t.describe(&chosen, Some(&tree.cpus));
        assert!(
            d.starts_with("CPUs [8, 9]: 2 core(s), one thread each; NUMA node 1; one L3 domain (CPU 8's); left to the host: [0, 1, 2,"),
            "{d}"
        );
        assert!(d.contains("(28 CPUs)"), "{d}");
        // Sixteen: every core of both packages before any sibling; two L3 domains, said.
        let (t, chosen) = take(&tree, &tree.cpus, 16);
        assert_eq!(chosen, (0..16).collect::<Vec<_>>());
        let d = t.describe(&chosen, Some(&tree.cpus));
        assert!(
            d.contains("NUMA nodes {0, 1}") && d.contains("2 L3 domains"),
            "{d}"
        );
    }

    #[test]
    fn an_epyc_host_measures_cores_of_one_ccx_before_another() {
        let tree = host_trees::epyc_four_ccx_per_node();
        let (t, chosen) = take(&tree, &tree.cpus, 4);
        // Node 1 (16 cores, none CPU 0's), its first CCX whole.
        assert_eq!(chosen, [16, 17, 18, 19]);
        let l3: BTreeSet<Option<usize>> = chosen.iter().map(|c| t.place(*c).unwrap().l3).collect();
        assert_eq!(l3.len(), 1, "{l3:?}");
        assert!(t.describe(&chosen, None).contains("one L3 domain (CPU 16's)"));
        // Five: a second CCX of the same node, said.
        let (t, chosen) = take(&tree, &tree.cpus, 5);
        assert_eq!(chosen, [16, 17, 18, 19, 20]);
        assert!(t.describe(&chosen, None).contains("2 L3 domains"));
        // Restricted to node 0 (CPU 0's node): the CCX without CPU 0 first, CPU 0's last.
        let node0: Vec<usize> = (0..16).chain(32..48).collect();
        let t = Topology::read(&tree.fs, &node0);
        assert_eq!(t.preference()[..4], [4, 5, 6, 7]);
        assert_eq!(t.preference()[12..16], [1, 2, 3, 0]);
    }

    #[test]
    fn an_isolated_host_measures_on_its_isolated_cpus_and_keeps_the_rest_for_the_host() {
        let tree = host_trees::isolated_host();
        // The kernel's default affinity: every CPU but the isolated ones.
        let housekeeping: Vec<usize> = (0..8).collect();
        assert_eq!(usable_cpus(&tree.fs, &housekeeping), tree.cpus);
        let (t, chosen) = take(&tree, &housekeeping, 2);
        assert_eq!(t.isolated, (8..16).collect::<Vec<_>>());
        assert_eq!(chosen, [8, 9]);
        let others = t.others(&chosen, &housekeeping);
        assert_eq!((others.cpus, others.note), (housekeeping.clone(), None));
        let d = t.describe(&chosen, Some(&housekeeping));
        assert!(!d.contains("not isolated"), "{d}");
        // More CPUs than it isolates: the isolated ones, then housekeeping ones, said.
        let (t, chosen) = take(&tree, &housekeeping, 10);
        assert_eq!(chosen, [1, 2, 8, 9, 10, 11, 12, 13, 14, 15]);
        let d = t.describe(&chosen, Some(&housekeeping));
        assert!(
            d.contains("CPUs [1, 2] not isolated although the host isolates [8, 9, 10, 11, 12, 13, 14, 15]"),
            "{d}"
        );
        // Other threads never go to isolated CPUs, even the ones not measured.
        assert!(!t.others(&[8], &tree.cpus).cpus.iter().any(|c| *c >= 8));
        // An affinity the user narrowed (taskset 0-3) is kept as given.
        assert_eq!(usable_cpus(&tree.fs, &[0, 1, 2, 3]), [0, 1, 2, 3]);
    }

    #[test]
    fn with_nothing_but_siblings_left_the_other_threads_take_them_and_say_so() {
        // 2 cores × 2 threads, AMD numbering; two cores measured.
        let (_d, fs) = host(&["0-1", "0-1", "2-3", "2-3"], &[0; 4], &["0-3"]);
        let all = [0, 1, 2, 3];
        let t = Topology::read(&fs, &all);
        let others = t.others(&[0, 2], &all);
        assert_eq!(others.cpus, [1, 3]);
        let note = others.note.unwrap();
        assert!(
            note.contains("run on [1, 3] (SMT sibling(s) of measured CPUs"),
            "{note}"
        );
        assert!(t.describe(&[0, 2], Some(&all)).contains(&note));
    }

    #[test]
    fn a_256_cpu_host_is_placed_and_described_in_a_line() {
        let tree = host_trees::big_host();
        let (t, chosen) = take(&tree, &tree.cpus, 64);
        // Node 1's 64 cores, one thread each; their siblings (192-255) left idle.
        assert_eq!(chosen, (64..128).collect::<Vec<_>>());
        let others = t.others(&chosen, &tree.cpus);
        assert_eq!(others.cpus.len(), 256 - 128);
        assert!(others.cpus.iter().all(|c| !(64..128).contains(&(c % 128))));
        let d = t.describe(&chosen, Some(&tree.cpus));
        assert!(d.len() < 400, "{} characters: {d}", d.len());
        assert!(
            d.contains("64 core(s), one thread each; NUMA node 1; one L3 domain"),
            "{d}"
        );
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
