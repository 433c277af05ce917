//! Stand-in sysfs trees of the hosts ocrig's users measure on, laid out as their kernels lay
//! them out — CPU numbering, thread siblings, packages, NUMA nodes, L3 domains, isolated CPUs,
//! idle states — so placement and the host record are tested against them here:
//!
//! - [`intel_two_socket`]: 2 packages × 8 cores × 2 threads; Intel numbering (the first threads
//!   0–15, package by package, their siblings 16–31), one node and one L3 per package.
//! - [`epyc_four_ccx_per_node`]: one EPYC package in NPS2 (two nodes), 32 cores × 2 threads in
//!   8 CCXs of 4 cores (an L3 each, four per node); siblings numbered c + 32.
//! - [`isolated_host`]: 16 CPUs without SMT booted with `isolcpus=8-15 nohz_full=8-15`.
//! - [`big_host`]: 2 packages × 64 cores × 2 threads = 256 CPUs, two nodes.

use super::host::RootedFs;

const CPU: &str = "/sys/devices/system/cpu";
const NODE: &str = "/sys/devices/system/node";

/// One stand-in host: its tree on disk (removed on drop) and the files' reader.
pub struct Tree {
    _dir: tempfile::TempDir,
    pub fs: RootedFs,
    /// Every online CPU, ascending.
    pub cpus: Vec<usize>,
}

/// A host of `cpus` CPUs where CPU c's first thread is `core(c)`, its siblings `siblings(c)`,
/// its package `package(c)`, its L3 domain's CPUs `l3(c)`, and node n holds `nodes[n]`.
struct Shape<'a> {
    cpus: usize,
    siblings: &'a dyn Fn(usize) -> String,
    package: &'a dyn Fn(usize) -> usize,
    l3: &'a dyn Fn(usize) -> String,
    nodes: Vec<String>,
    isolated: &'a str,
    nohz_full: &'a str,
}

fn build(shape: Shape<'_>) -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let fs = RootedFs::new(dir.path());
    for c in 0..shape.cpus {
        let t = format!("{CPU}/cpu{c}/topology");
        fs.write(
            &format!("{t}/thread_siblings_list"),
            &format!("{}\n", (shape.siblings)(c)),
        );
        fs.write(
            &format!("{t}/physical_package_id"),
            &format!("{}\n", (shape.package)(c)),
        );
        let cache = format!("{CPU}/cpu{c}/cache");
        fs.write(&format!("{cache}/index3/level"), "3\n");
        fs.write(
            &format!("{cache}/index3/shared_cpu_list"),
            &format!("{}\n", (shape.l3)(c)),
        );
        // L2: the core's own; index2 is not an L3 and must not be read as one.
        fs.write(&format!("{cache}/index2/level"), "2\n");
        fs.write(
            &format!("{cache}/index2/shared_cpu_list"),
            &format!("{}\n", (shape.siblings)(c)),
        );
        for (k, (name, latency)) in [("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 170)]
            .iter()
            .enumerate()
        {
            let s = format!("{CPU}/cpu{c}/cpuidle/state{k}");
            fs.write(&format!("{s}/name"), &format!("{name}\n"));
            fs.write(&format!("{s}/latency"), &format!("{latency}\n"));
            fs.write(&format!("{s}/disable"), "0\n");
        }
    }
    for (n, list) in shape.nodes.iter().enumerate() {
        fs.write(&format!("{NODE}/node{n}/cpulist"), &format!("{list}\n"));
    }
    let last = shape.cpus - 1;
    fs.write(
        &format!("{NODE}/online"),
        &format!("0-{}\n", shape.nodes.len() - 1),
    );
    fs.write(&format!("{CPU}/online"), &format!("0-{last}\n"));
    fs.write(&format!("{CPU}/isolated"), &format!("{}\n", shape.isolated));
    fs.write(&format!("{CPU}/nohz_full"), &format!("{}\n", shape.nohz_full));
    fs.write(&format!("{CPU}/cpuidle/current_driver"), "intel_idle\n");
    Tree {
        _dir: dir,
        fs,
        cpus: (0..shape.cpus).collect(),
    }
}

/// 2 packages × 8 cores × 2 threads (Intel numbering: CPU c's sibling is c ± 16).
pub fn intel_two_socket() -> Tree {
    let pkg = |c: usize| (c % 16) / 8;
    build(Shape {
        cpus: 32,
        siblings: &|c| format!("{},{}", c % 16, c % 16 + 16),
        package: &pkg,
        l3: &|c| {
            let p = pkg(c) * 8;
            format!("{}-{},{}-{}", p, p + 7, p + 16, p + 23)
        },
        nodes: vec!["0-7,16-23".into(), "8-15,24-31".into()],
        isolated: "",
        nohz_full: "(null)",
    })
}

/// One EPYC package in NPS2: 32 cores × 2 threads (siblings c ± 32), 8 CCXs of 4 cores.
pub fn epyc_four_ccx_per_node() -> Tree {
    build(Shape {
        cpus: 64,
        siblings: &|c| format!("{},{}", c % 32, c % 32 + 32),
        package: &|_| 0,
        l3: &|c| {
            let first = (c % 32) / 4 * 4;
            format!("{}-{},{}-{}", first, first + 3, first + 32, first + 35)
        },
        nodes: vec!["0-15,32-47".into(), "16-31,48-63".into()],
        isolated: "",
        nohz_full: "(null)",
    })
}

/// 16 CPUs, no SMT, one node and L3, booted with `isolcpus=8-15 nohz_full=8-15`.
pub fn isolated_host() -> Tree {
    build(Shape {
        cpus: 16,
        siblings: &|c| c.to_string(),
        package: &|_| 0,
        l3: &|_| "0-15".into(),
        nodes: vec!["0-15".into()],
        isolated: "8-15",
        nohz_full: "8-15",
    })
}

/// 2 packages × 64 cores × 2 threads = 256 CPUs (Intel numbering, siblings c ± 128).
pub fn big_host() -> Tree {
    let pkg = |c: usize| (c % 128) / 64;
    build(Shape {
        cpus: 256,
        siblings: &|c| format!("{},{}", c % 128, c % 128 + 128),
        package: &pkg,
        l3: &|c| {
            let p = pkg(c) * 64;
            format!("{}-{},{}-{}", p, p + 63, p + 128, p + 191)
        },
        nodes: vec!["0-63,128-191".into(), "64-127,192-255".into()],
        isolated: "",
        nohz_full: "(null)",
    })
}
