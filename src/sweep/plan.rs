//! The run plan: which guests boot when, and which runs they do. Built from a validated
//! scenario; after this point nothing knows about YAML.

use crate::scenario::expand::{self, GuestVariant, WorkloadInstance};
use crate::scenario::validate::{guests_at, host_cpus};
use crate::scenario::{BackendKind, Background, Scenario, Timeouts};

/// One boot of a set of guests: a level under a variant, and every cell run in it.
#[derive(Debug, Clone)]
pub struct Group {
    pub level: f64,
    pub guests: u32,
    pub variant: String,
    pub guest: GuestVariant,
    pub cells: Vec<Cell>,
}

/// One workload instance under one variant at one level.
#[derive(Debug, Clone)]
pub struct Cell {
    pub workload: WorkloadInstance,
    /// Payload argv (subcommand first).
    pub argv: Vec<String>,
    pub warmup_runs: u32,
    /// Measured runs always made.
    pub runs: u32,
    /// Most measured runs; more than `runs` only with a CV target.
    pub max_runs: u32,
    pub target_cv: Option<f64>,
    /// Measured runs already in the journal (resume): run index → headline metric.
    pub done: std::collections::BTreeMap<u32, f64>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub baseline: String,
    pub variants: Vec<String>,
    pub levels: Vec<f64>,
    pub workloads: Vec<WorkloadInstance>,
    pub host_cpus: Vec<usize>,
    pub vcpus: u32,
    pub memory_mib: u32,
    pub scratch_disk_mib: u32,
    /// issue 12: how guests start (`guest.start`).
    pub guest_start: crate::backend::StartMethod,
    pub background: Background,
    pub timeouts: Timeouts,
    pub backend: BackendKind,
    pub groups: Vec<Group>,
}

/// On the host backend the level scales the thread count: `--threads T` (default: one per
/// host CPU) becomes round(T × level), at least 1 — 2.5x on 2 CPUs runs 5 threads.
fn scale_threads(argv: &mut Vec<String>, level: f64, host_cpus: usize) {
    let scaled = |t: f64| ((t * level).round() as u64).max(1).to_string();
    match argv.iter().position(|a| a == "--threads") {
        Some(i) if i + 1 < argv.len() => {
            if let Ok(t) = argv[i + 1].parse::<f64>() {
                argv[i + 1] = scaled(t);
            }
        }
        _ => {
            argv.push("--threads".into());
            argv.push(scaled(host_cpus as f64));
        }
    }
}

impl Plan {
    /// Builds the plan of a scenario that passed validation (errors here mean it did not).
    pub fn build(s: &Scenario, allowed_cpus: &[usize]) -> anyhow::Result<Self> {
        let cpus = host_cpus(&s.host.cpus, allowed_cpus).map_err(anyhow::Error::msg)?;
        let variants = expand::variants(s);
        let workloads = expand::workloads(s);
        let mut groups = Vec::new();
        for &level in &s.levels {
            let guests = match s.host.backend {
                BackendKind::Host => 1,
                _ => guests_at(level, cpus.len(), s.guest.vcpus).map_err(anyhow::Error::msg)?,
            };
            for v in &variants {
                let cells = workloads
                    .iter()
                    .map(|w| {
                        let mut argv = expand::payload_argv(w, v);
                        if s.host.backend == BackendKind::Host {
                            scale_threads(&mut argv, level, cpus.len());
                        }
                        let (runs, max_runs, target_cv) = s.runs.bounds();
                        Cell {
                            workload: w.clone(),
                            argv,
                            warmup_runs: s.warmup_runs,
                            runs,
                            max_runs,
                            target_cv,
                            done: Default::default(),
                        }
                    })
                    .collect();
                groups.push(Group {
                    level,
                    guests,
                    variant: v.name.clone(),
                    guest: expand::guest_for(s, v),
                    cells,
                });
            }
        }
        Ok(Self {
            name: s.name.clone(),
            baseline: expand::baseline(s),
            variants: variants.iter().map(|v| v.name.clone()).collect(),
            levels: s.levels.clone(),
            workloads,
            host_cpus: cpus,
            vcpus: s.guest.vcpus,
            memory_mib: s.guest.memory_mib,
            scratch_disk_mib: s.guest.scratch_disk_mib,
            guest_start: s.guest.start, // issue 12
            background: s.background,
            timeouts: s.timeouts.clone(),
            backend: s.host.backend,
            groups,
        })
    }

    pub fn is_host_backend(&self) -> bool {
        self.backend == BackendKind::Host
    }

    /// Runs in the whole sweep (warm-ups included).
    pub fn total_runs(&self) -> u64 {
        self.groups
            .iter()
            .flat_map(|g| &g.cells)
            .map(|c| (c.warmup_runs + c.max_runs) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_levels_times_variants_with_guest_counts() {
        let s: Scenario = yaml_serde::from_str(
            "name: p\nlevels: [0.5, 2.5]\nruns: 3\nwarmup_runs: 1\nvariants:\n  - {name: base}\n  - {name: nopv, cmdline: nopvspin}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {threads: [1, 2]}\n",
        )
        .unwrap();
        let p = Plan::build(&s, &[0, 1]).unwrap();
        assert_eq!(p.groups.len(), 4);
        assert_eq!(
            p.groups.iter().map(|g| g.guests).collect::<Vec<_>>(),
            [1, 1, 5, 5]
        );
        assert_eq!(p.groups[1].guest.cmdline, "nopvspin");
        assert_eq!(p.total_runs(), 4 * 2 * 4);
        assert_eq!(p.baseline, "base");
    }

    #[test]
    fn host_backend_scales_threads_by_level() {
        let s: Scenario = yaml_serde::from_str(
            "name: h\nhost: {backend: host}\nlevels: [0.5, 2.5]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {threads: 2}\n  - command: lock\n    name: auto\n    metric: ops_per_sec\n",
        )
        .unwrap();
        let p = Plan::build(&s, &[0, 1]).unwrap();
        let threads = |g: usize, c: usize| {
            let a = &p.groups[g].cells[c].argv;
            a[a.iter().position(|x| x == "--threads").unwrap() + 1].clone()
        };
        assert_eq!((threads(0, 0), threads(1, 0)), ("1".into(), "5".into()));
        assert_eq!((threads(0, 1), threads(1, 1)), ("1".into(), "5".into()));
        assert!(p.groups.iter().all(|g| g.guests == 1));
    }
}
