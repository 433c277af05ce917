//! The run plan: which guests boot when, and which runs they do. Built from a validated
//! scenario; after this point nothing knows about YAML.
//!
//! Variants whose guests are identical (same kernel, command line and CPU model) share one boot
//! per level unless the scenario asks for fresh guests per variant: a boot group holds the
//! cells of every variant that runs in it.
//!
//! The design of the experiment follows what varies between the variants compared. Variants
//! sharing a boot group differ only within it, so their runs are interleaved round by round
//! on one bring-up and a comparison pairs them by round. Variants with guests of their own
//! differ between bring-ups, so a level with more than one boot group makes each group's runs
//! in blocks of `schedule.runs_per_bring_up`, one fresh bring-up per block, block k of every
//! group before block k+1 of any (A B A B): block k of a variant pairs with block k of the
//! baseline, and a difference between two boots or two stretches of the host's time is no
//! longer read as a difference between the variants.
//!
//! A level of one boot group makes its rounds on `schedule.bring_ups_per_level` bring-ups
//! (by default two where there are two levels or more): its rounds always made split into
//! that many blocks of nearly equal size, each on freshly brought-up guests. The variants
//! still pair by round inside each block; what the bring-ups replicate is the level itself,
//! so a variant's retention (its throughput at a level over its lowest level) is compared
//! over bring-ups, with boot-to-boot variation in its interval. The levels take turns block
//! by block (see `sweep::scheduler`).

use crate::executor::GroupSpec;
use crate::scenario::expand::{self, GuestVariant, WorkloadInstance};
use crate::scenario::fit::{guests_at, host_cpus};
use crate::scenario::{BackendKind, Background, Scenario, Timeouts};
use crate::vocabulary::{GuestSharing, RunOrder};

use super::order::{RoundDesign, balanced_every};

/// One set of identical guests at one level, and every cell run in them.
#[derive(Debug, Clone)]
pub struct BootGroup {
    pub level: f64,
    pub guests: u32,
    pub guest: GuestVariant,
    /// Variants sharing these guests, in scenario order (one unless boots are shared).
    pub variants: Vec<String>,
    /// Workload-major, variant-minor: every workload's cells are `variants.len()` in a row,
    /// in the order of `variants` (the round-robin order rotates within each such run).
    pub cells: Vec<Cell>,
    /// Measured runs per block (at least 1) when the group's level has other boot groups (the
    /// scenario's `schedule.runs_per_bring_up`): each block is made on a fresh bring-up, and
    /// is the unit its variants' comparisons pair. None: the level's only group, whose blocks
    /// `bring_ups_per_level` gives.
    pub runs_per_block: Option<u32>,
    /// The level's only group (`runs_per_block` None): how many blocks it makes, each on a
    /// fresh bring-up (`schedule.bring_ups_per_level`, at least 1 and at most the rounds always
    /// made). Its rounds always made are split into that many blocks of nearly equal size and
    /// the rounds a stopping rule may add past them belong to the last block, so every block
    /// is begun before any cell may stop, and a stop anywhere from then on leaves every cell
    /// with a run on every bring-up. 1 in a group with `runs_per_block`.
    pub bring_ups_per_level: u32,
}

impl BootGroup {
    /// Every how many measured rounds the group's order is balanced, where the stopping rule
    /// may look ([`balanced_every`]); 1 where every cell is sliced: a sliced run balances its
    /// variants' places inside itself (mirrored slices), so its rounds need no period.
    pub fn balanced_every(&self, order: RunOrder) -> u32 {
        if !self.cells.is_empty() && self.cells.iter().all(|c| c.slice.is_some()) {
            1
        } else {
            balanced_every(self.variants.len(), order)
        }
    }

    /// A directory name for the group's guests: `<level>x-<variant>`, or `<level>x-<first
    /// variant>+<number of others>` when shared. Short, because QEMU's QMP socket lives below
    /// it and a Unix socket path may not exceed 107 bytes.
    pub fn label(&self) -> String {
        match self.variants.len() {
            1 => format!("{}x-{}", self.level, self.variants[0]),
            n => format!("{}x-{}+{}", self.level, self.variants[0], n - 1),
        }
    }

    /// The most rounds any of its cells can be in ([`Cell::rounds_at_most`]): the group's
    /// rounds.
    pub fn rounds(&self) -> u32 {
        self.cells.iter().map(Cell::rounds_at_most).max().unwrap_or(0)
    }

    /// What [`Cell::budget_arms`] is for `cell` of this group: the arms its sliced rounds
    /// start with (the group's cells sliced with it, itself included) where it runs until
    /// concluded and the baseline is one of them.
    fn budget_arms_of(&self, cell: &Cell, baseline: &str) -> Option<u32> {
        let arms = self.cells.iter().filter(|c| c.sliced_with(cell)).count();
        let baseline_sliced = self
            .cells
            .iter()
            .any(|c| c.variant == baseline && c.sliced_with(cell));
        (cell.concluded.is_some() && arms >= 2 && baseline_sliced).then_some(arms as u32)
    }

    /// The fewest measured runs of any of its cells: the rounds always made.
    fn rounds_always_made(&self) -> u32 {
        self.cells.iter().map(|c| c.runs).min().unwrap_or(0)
    }

    /// How many blocks its rounds are made in (each on its own bring-up).
    pub fn blocks(&self) -> u32 {
        match self.runs_per_block {
            Some(b) => self.rounds().div_ceil(b),
            None => self.bring_ups_per_level.max(1),
        }
    }

    /// The first measured run of block `block` of the level's only group: the rounds always
    /// made split evenly, the first blocks taking what does not divide (block k starts at
    /// ⌈k·runs / blocks⌉: 12 rounds in 3 blocks of 4, 7 in blocks of 3, 2 and 2), as the last
    /// takes any rounds a stopping rule adds.
    fn split_start(&self, block: u32) -> u32 {
        let (runs, blocks) = (u64::from(self.rounds_always_made()), u64::from(self.blocks()));
        (u64::from(block) * runs).div_ceil(blocks) as u32
    }

    /// The block measured run `run` belongs to.
    pub fn block_of(&self, run: u32) -> u32 {
        match self.runs_per_block {
            Some(b) => run / b,
            None => (0..self.blocks())
                .rev()
                .find(|&k| self.split_start(k) <= run)
                .unwrap_or(0),
        }
    }

    /// The measured runs (rounds) of block `block`.
    pub fn block_runs(&self, block: u32) -> std::ops::Range<u32> {
        let rounds = self.rounds();
        match self.runs_per_block {
            Some(b) => (block * b).min(rounds)..((block + 1) * b).min(rounds),
            None if block + 1 >= self.blocks() => self.split_start(block).min(rounds)..rounds,
            None => self.split_start(block).min(rounds)..self.split_start(block + 1).min(rounds),
        }
    }

    /// What the hosts of a sweep over several are dealt of this group (see
    /// [`crate::sweep::scheduler::HostShare`]): each measured run, or in a blocked group each
    /// block, so a block's bring-up is never split over hosts. The level's only group is dealt
    /// by run in its blocks too: each host makes its share of every block on a bring-up of its
    /// own, so every host's rounds of a level are spread over its bring-ups alike and a
    /// comparison still pairs its rounds on one host.
    pub fn share_unit(&self, run: u32) -> u32 {
        match self.runs_per_block {
            Some(_) => self.block_of(run),
            None => run,
        }
    }

    /// Whether a cell's stopping rule may end it before run `run`: anywhere in a group of its
    /// level's only boot (its blocks are all begun within the rounds always made, before any
    /// rule may stop, and its variants pair by round, not by block), only at a block's end in a
    /// blocked group (a block stays whole, so it keeps its pair in the other groups), and
    /// always at the cell's most runs.
    pub fn may_stop_before(&self, run: u32, max_runs: u32) -> bool {
        match self.runs_per_block {
            Some(b) => run.is_multiple_of(b) || run >= max_runs,
            None => true,
        }
    }

    /// What an executor needs to bring the group's guests up.
    pub fn spec(&self) -> GroupSpec {
        GroupSpec {
            label: self.label(),
            guests: self.guests,
            guest: self.guest.clone(),
            variants: self.variants.clone(),
        }
    }
}

/// One workload instance under one variant at one level.
#[derive(Debug, Clone)]
pub struct Cell {
    pub variant: String,
    pub workload: WorkloadInstance,
    /// Payload argv (subcommand first).
    pub argv: Vec<String>,
    /// Measured runs always made.
    pub runs: u32,
    /// Most measured runs; more than `runs` only with a CV target or `until: concluded`.
    /// Of a cell with `budget_arms`, the rounds' budget in whole rounds.
    pub max_runs: u32,
    /// Set for a sliced cell under `runs: {until: concluded}` whose baseline is sliced with
    /// it: the arms its rounds start with. Its rounds are shorter once comparisons concluded
    /// and left them (each arm keeps its slices), so the comparisons still open get more
    /// rounds — more units, more degrees of freedom — within the time of `max_runs` whole
    /// rounds: a cell has enough once its rounds spent `max_runs` × this many arm-runs
    /// (`sweep::stopping`).
    pub budget_arms: Option<u32>,
    pub target_cv: Option<f64>,
    /// Effect to make detectable against the baseline (see `sweep::stopping`).
    pub target_mde: Option<f64>,
    /// `runs: {until: concluded}`: the comparison with the baseline runs until concluded
    /// (the baseline's cell while any of its comparisons at the level runs).
    pub concluded: Option<super::looks::Concluded>,
    /// Set where this cell's variant shares its guests with others and its workload is sliced
    /// ([`super::sliced`]): a round runs the workload's sliced cells as one payload run.
    pub slice: Option<super::sliced::SliceSpec>,
}

impl Cell {
    /// The most rounds the cell can be in: `max_runs`, or with [`Cell::budget_arms`],
    /// ⌈`max_runs` × arms / 2⌉, when only it and the baseline are left.
    pub fn rounds_at_most(&self) -> u32 {
        match self.budget_arms {
            Some(arms) => (self.max_runs * arms).div_ceil(2),
            None => self.max_runs,
        }
    }

    /// Whether two cells run in one sliced run when both are due: the same workload, sliced
    /// alike.
    pub fn sliced_with(&self, other: &Cell) -> bool {
        self.slice.is_some() && self.workload.id == other.workload.id && self.slice == other.slice
    }
}

/// How boots are shared and runs ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub guests: GuestSharing,
    pub order: RunOrder,
    /// Set when `order` is `Shuffle`.
    pub seed: Option<u64>,
    /// Measured runs per bring-up at a level with more than one boot group.
    pub runs_per_bring_up: u32,
    /// Bring-ups of a level of one boot group ([`BootGroup::bring_ups_per_level`]).
    pub bring_ups_per_level: u32,
    /// Warm-up rounds every freshly brought-up guest set gets before its first measured round
    /// (the scenario's `warmup_runs`, by default one): each a run of every cell of the group
    /// with a measured run left on this host, never counted, in the order of the design's rounds
    /// before that measured round ([`super::order::RoundDesign::warm_up`]).
    pub warm_up_rounds: u32,
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
    /// How guests start (`guest.start`).
    pub guest_start: crate::vocabulary::StartMethod,
    /// Host files copied into every guest (`guest.files`).
    pub guest_files: Vec<crate::scenario::GuestFile>,
    /// Whether runs record the host's vCPU timeline (`host.timeline`, default true).
    pub timeline: bool,
    pub background: Background,
    pub timeouts: Timeouts,
    pub schedule: Schedule,
    pub boots: Vec<BootGroup>,
    /// The scenario's equivalence margin (`margin`), journaled in the header.
    pub margin: Option<f64>,
    /// Under `runs: {until: concluded}`, the looks each comparison may take
    /// ([`super::looks::looks`]), journaled so that reports test at the same level.
    pub looks: Option<u32>,
    /// Above this other load on the sweep's CPUs a run is disturbed (`host.max_other_load`);
    /// None on the host backend, whose runs are the host's load themselves.
    pub max_other_load: Option<f64>,
    /// The boot groups of each of `levels`, in order: indices into `boots`.
    pub level_boots: Vec<std::ops::Range<usize>>,
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
    /// Which guests' results make a run's headline value: every guest's where each ran the
    /// measured workload (`background: same`), else guest 0's.
    pub fn headline_from(&self) -> crate::vocabulary::HeadlineFrom {
        match self.background {
            Background::Same => crate::vocabulary::HeadlineFrom::EveryGuest,
            Background::Idle | Background::Hog => crate::vocabulary::HeadlineFrom::PrimaryGuest,
        }
    }

    /// Builds the plan of a scenario that passed validation (errors here mean it did not).
    /// `seed` is the shuffle seed to use when the scenario asks for a shuffle but names none.
    pub fn build(s: &Scenario, allowed_cpus: &[usize], seed: u64) -> anyhow::Result<Self> {
        let cpus = host_cpus(&s.host.cpus, allowed_cpus).map_err(anyhow::Error::msg)?;
        let variants = expand::variants(s);
        let workloads = expand::workloads(s);
        let host = s.host.backend == BackendKind::Host;
        let (runs, max_runs, target_cv) = s.runs.bounds();
        // Validation bounds a given count by the rounds always made; a default is bounded so.
        let bring_ups_per_level = s.bring_ups_per_level().clamp(1, runs.max(1));
        let mut boots: Vec<BootGroup> = Vec::new();
        let mut level_boots = Vec::new();
        for &level in &s.levels {
            let guests = match s.host.backend {
                BackendKind::Host => 1,
                _ => guests_at(level, cpus.len(), s.guest.vcpus).map_err(anyhow::Error::msg)?,
            };
            let first_of_level = boots.len();
            for v in &variants {
                let guest = expand::guest_for(s, v);
                // The host backend boots nothing, so every variant shares its one "boot".
                let shares = host || s.schedule.guests == GuestSharing::Shared;
                let group = match boots[first_of_level..]
                    .iter_mut()
                    .find(|b| shares && b.guest == guest)
                {
                    Some(b) => b,
                    None => {
                        boots.push(BootGroup {
                            level,
                            guests,
                            guest,
                            variants: Vec::new(),
                            cells: Vec::new(),
                            runs_per_block: None,
                            bring_ups_per_level: 1,
                        });
                        boots.last_mut().expect("just pushed")
                    }
                };
                group.variants.push(v.name.clone());
            }
            // Guests of their own at the level: each group's runs in blocks, a bring-up each.
            // Else the level's one group splits its rounds over its bring-ups.
            let blocked = boots.len() - first_of_level > 1;
            for b in &mut boots[first_of_level..] {
                b.runs_per_block = blocked.then_some(s.schedule.runs_per_bring_up.max(1));
                b.bring_ups_per_level = if blocked { 1 } else { bring_ups_per_level };
                for w in &workloads {
                    for v in variants.iter().filter(|v| b.variants.contains(&v.name)) {
                        let mut argv = expand::payload_argv(w, v);
                        if host {
                            scale_threads(&mut argv, level, cpus.len());
                        }
                        let slice = (b.variants.len() > 1 && !host)
                            .then(|| super::sliced::spec_for(w, v, &argv))
                            .flatten();
                        b.cells.push(Cell {
                            variant: v.name.clone(),
                            workload: w.clone(),
                            slice,
                            argv,
                            runs,
                            max_runs,
                            budget_arms: None,
                            target_cv,
                            target_mde: s.runs.target_mde(),
                            concluded: None,
                        });
                    }
                }
            }
            level_boots.push(first_of_level..boots.len());
        }
        let order = s.schedule.order;
        // Each group's looks fall where its order is balanced; every look of every group is
        // tested at the level the most looks call for.
        let looks = s.runs.until_concluded().then(|| {
            boots
                .iter()
                .map(|g| super::looks::looks(runs, max_runs, g.balanced_every(order)))
                .max()
                .unwrap_or(1)
        });
        // The report's family: every non-baseline variant at every level in every workload.
        let family = variants.len().saturating_sub(1) * s.levels.len() * workloads.len();
        let concluded = looks.map(|k| {
            super::looks::Concluded::new(
                family,
                k,
                s.margin.unwrap_or(crate::stats::effect::DEFAULT_MARGIN),
            )
        });
        for cell in boots.iter_mut().flat_map(|b| &mut b.cells) {
            cell.concluded = concluded;
        }
        let baseline = expand::baseline(s);
        for group in &mut boots {
            let budgets: Vec<Option<u32>> = group
                .cells
                .iter()
                .map(|c| group.budget_arms_of(c, &baseline))
                .collect();
            for (cell, budget) in group.cells.iter_mut().zip(budgets) {
                cell.budget_arms = budget;
            }
        }
        Ok(Self {
            name: s.name.clone(),
            baseline,
            variants: variants.iter().map(|v| v.name.clone()).collect(),
            levels: s.levels.clone(),
            workloads,
            host_cpus: cpus,
            vcpus: s.guest.vcpus,
            memory_mib: s.guest.memory_mib,
            scratch_disk_mib: s.guest.scratch_disk_mib,
            guest_start: s.guest.start,
            guest_files: s.guest.files.clone(),
            timeline: s.host.timeline.unwrap_or(true),
            background: s.background,
            timeouts: s.timeouts.clone(),
            schedule: Schedule {
                guests: s.schedule.guests,
                order,
                seed: (order == RunOrder::Shuffle).then(|| s.schedule.seed.unwrap_or(seed)),
                runs_per_bring_up: s.schedule.runs_per_bring_up.max(1),
                bring_ups_per_level,
                warm_up_rounds: s
                    .warmup_runs
                    .unwrap_or(crate::scenario::model::DEFAULT_WARMUP_RUNS),
            },
            boots,
            margin: s.margin,
            looks,
            max_other_load: (s.host.backend != crate::scenario::BackendKind::Host).then(|| {
                s.host
                    .max_other_load
                    .unwrap_or(crate::scenario::model::DEFAULT_MAX_OTHER_LOAD)
            }),
            level_boots,
        })
    }

    /// Runs in the whole sweep on one host with no failures (the warm-up rounds of one bring-up
    /// per block included).
    pub fn total_runs(&self) -> u64 {
        let warm_ups: u64 = self
            .boots
            .iter()
            .map(|g| u64::from(g.blocks()) * u64::from(self.schedule.warm_up_rounds) * g.cells.len() as u64)
            .sum();
        self.measured_runs() + warm_ups
    }

    /// Guest sets brought up in the whole sweep on one host with no failures: one a block of
    /// every boot group.
    pub fn bring_ups(&self) -> u64 {
        self.boots.iter().map(|g| u64::from(g.blocks())).sum()
    }

    /// Measured run slots of the plan: what the progress bar counts (warm-ups are made once per
    /// fresh guest set on every host, so their number is not known beforehand).
    pub fn measured_runs(&self) -> u64 {
        self.boots
            .iter()
            .flat_map(|g| &g.cells)
            .map(|c| c.max_runs as u64)
            .sum()
    }

    /// The order of boot group `boot`'s rounds ([`RoundDesign`]). Round-robin starts measured
    /// round 0 at the variant after the baseline (the first-listed variant where the group has
    /// no baseline), one variant further at each level, so the baseline begins a group's first
    /// measured round at no more than 1/k of the levels.
    pub fn round_design(&self, boot: usize) -> RoundDesign {
        let group = &self.boots[boot];
        let k = group.variants.len().max(1);
        let level = self
            .level_boots
            .iter()
            .position(|b| b.contains(&boot))
            .unwrap_or(0);
        let baseline = group.variants.iter().position(|v| *v == self.baseline);
        RoundDesign {
            cells: group.cells.len(),
            variants: group.variants.len(),
            order: self.schedule.order,
            seed: self.schedule.seed,
            boot: boot as u32,
            first: (baseline.map_or(0, |b| b + 1) + level) % k,
        }
    }

    /// The plan's boot groups as the journal header records them.
    pub fn boot_infos(&self) -> Vec<crate::journal::BootInfo> {
        self.boots
            .iter()
            .map(|b| crate::journal::BootInfo {
                level: b.level,
                guests: b.guests,
                variants: b.variants.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(yaml: &str) -> Plan {
        let s: Scenario = yaml_serde::from_str(yaml).unwrap();
        Plan::build(&s, &[0, 1], 7).unwrap()
    }

    #[test]
    fn guests_differing_in_cmdline_boot_apart_and_counts_follow_the_level() {
        let p = plan(
            "name: p\nlevels: [0.5, 2.5]\nruns: 3\nwarmup_runs: 1\nvariants:\n  - {name: base}\n  - {name: nopv, cmdline: nopvspin}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {threads: [1, 2]}\n",
        );
        assert_eq!(p.boots.len(), 4);
        assert_eq!(p.boots.iter().map(|g| g.guests).collect::<Vec<_>>(), [1, 1, 5, 5]);
        assert_eq!(p.boots[1].guest.cmdline, "nopvspin");
        assert_eq!(p.boots[1].variants, ["nopv"]);
        // Two boot groups a level: each group's 3 rounds in blocks of one run, a bring-up
        // each, every bring-up warmed with one warm-up of each of its 2 cells.
        assert!(
            p.boots
                .iter()
                .all(|g| g.runs_per_block == Some(1) && g.blocks() == 3)
        );
        assert_eq!(p.total_runs(), 4 * (2 * 3 + 3 * 2));
        assert_eq!(p.baseline, "base");
        assert_eq!(p.schedule.seed, None);
    }

    #[test]
    fn the_vcpu_timeline_is_on_unless_the_scenario_switches_it_off() {
        let base = "name: p\nlevels: [1.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n";
        assert!(plan(base).timeline);
        assert!(plan(&format!("host: {{timeline: true}}\n{base}")).timeline);
        assert!(!plan(&format!("host: {{timeline: false}}\n{base}")).timeline);
        let bad: Result<Scenario, _> =
            yaml_serde::from_str(&format!("host: {{timeline: sometimes}}\n{base}"));
        let e = bad.unwrap_err().to_string();
        assert!(e.contains("timeline") || e.contains("boolean"), "{e}");
    }

    /// Looks fall where each group's order is balanced, and every group is tested at the level
    /// of the one with the most; round 0 starts one variant further at each level, never at
    /// the baseline before every other variant has had its turn.
    #[test]
    fn looks_follow_each_groups_balance_and_round_0_moves_on_by_level() {
        let p = plan(
            "name: p\nlevels: [0.5, 1.0, 1.5, 2.0, 2.5]\nruns: {until: concluded, min: 3, max: 12}\nvariants:\n  - {name: a}\n  - {name: b, args: {algo: ticket}}\n  - {name: c, args: {algo: mcs}}\n  - {name: d, args: {algo: clh}}\n  - {name: e, cmdline: nopvspin}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
        );
        // Four variants sharing guests look at 4, 8, 12; e, on guests of its own, at 3, 5, 8, 12.
        assert_eq!(p.boots[0].variants.len(), 4);
        assert_eq!(p.looks, Some(4));
        let alpha = p.boots[0].cells[0].concluded.unwrap().alpha;
        assert!((alpha - 0.05 / (4.0 * 5.0 * 4.0)).abs() < 1e-12, "{alpha}");
        let starts: Vec<usize> = p
            .level_boots
            .iter()
            .map(|b| p.round_design(b.start).first)
            .collect();
        assert_eq!(starts, [1, 2, 3, 0, 1], "the baseline (0) once in 4 levels");
        assert_eq!(p.round_design(1).first, 0, "e's own group: one variant");
        assert_eq!(p.schedule.warm_up_rounds, 1, "a round by default");
    }

    const ARGS_ONLY: &str = "name: p\nlevels: [1.0, 2.0]\nvariants:\n  - {name: ticket, args: {algo: ticket}}\n  - {name: tas, args: {algo: tas}}\n  - {name: nopv, cmdline: nopvspin, args: {algo: tas}}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {hold-ns: [200, 2000]}\n";

    #[test]
    fn variants_with_identical_guests_share_one_boot_per_level() {
        let p = plan(ARGS_ONLY);
        assert_eq!(p.boots.len(), 4, "two guest shapes × two levels");
        let b = &p.boots[0];
        assert_eq!(b.variants, ["ticket", "tas"]);
        assert_eq!(b.label(), "1x-ticket+1");
        // Workload-major, variant-minor: the variants of a workload run next to each other.
        let order: Vec<(String, String)> = b
            .cells
            .iter()
            .map(|c| (c.workload.id.clone(), c.variant.clone()))
            .collect();
        assert_eq!(
            order,
            [
                ("lock[hold-ns=200]".to_string(), "ticket".to_string()),
                ("lock[hold-ns=200]".into(), "tas".into()),
                ("lock[hold-ns=2000]".into(), "ticket".into()),
                ("lock[hold-ns=2000]".into(), "tas".into()),
            ]
        );
        assert!(b.cells[1].argv.contains(&"tas".to_string()));
        assert_eq!(p.boots[1].variants, ["nopv"]);
    }

    /// Two variants sharing guests, run whole (so balanced every 2 rounds, not sliced).
    const SHARED: &str = "name: p\nvariants:\n  - {name: ticket, args: {algo: ticket}}\n  - {name: tas, args: {algo: tas}}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    slice_ms: 0\n";

    /// Each boot group's blocks, as (first run, end) of each.
    fn blocks(p: &Plan) -> Vec<Vec<(u32, u32)>> {
        p.boots
            .iter()
            .map(|g| {
                (0..g.blocks())
                    .map(|b| g.block_runs(b))
                    .map(|r| (r.start, r.end))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_shared_level_splits_its_rounds_over_two_bring_ups_where_retention_exists() {
        // Two levels: two bring-ups a level by default, the rounds split evenly.
        let p = plan(&format!("{SHARED}levels: [1.0, 2.0]\nruns: 8\n"));
        assert_eq!(p.schedule.bring_ups_per_level, 2);
        assert!(p.boots.iter().all(|g| g.runs_per_block.is_none()));
        assert_eq!(blocks(&p), [[(0, 4), (4, 8)], [(0, 4), (4, 8)]]);
        assert_eq!(
            (0..8).map(|r| p.boots[0].block_of(r)).collect::<Vec<_>>(),
            [0, 0, 0, 0, 1, 1, 1, 1]
        );
        // Every round is dealt to the hosts of a sweep over several on its own, as before.
        assert_eq!(p.boots[0].share_unit(5), 5);
        assert_eq!(
            p.total_runs(),
            2 * 2 * 8 + 2 * 2 * 2,
            "a warm-up round per bring-up"
        );
        // One level: no retention, one bring-up.
        let p = plan(&format!("{SHARED}levels: [1.0]\nruns: 8\n"));
        assert_eq!(blocks(&p), [[(0, 8)]]);
        // Two levels but one run: one bring-up (each makes one run at least).
        let p = plan(&format!("{SHARED}levels: [1.0, 2.0]\nruns: 1\n"));
        assert_eq!(blocks(&p), [[(0, 1)], [(0, 1)]]);
        // The host backend brings nothing up.
        let p = plan(&format!(
            "{SHARED}levels: [1.0, 2.0]\nruns: 8\nhost: {{backend: host}}\n"
        ));
        assert_eq!(p.schedule.bring_ups_per_level, 1);
        assert_eq!(blocks(&p), [[(0, 8)], [(0, 8)]]);
        // Given: 12 rounds in 3 blocks of 4; 7 in 3 nearly equal ones; 1 keeps every round
        // of a level on one bring-up.
        let given = |n: u32, runs: u32| {
            plan(&format!(
                "{SHARED}levels: [1.0, 2.0]\nruns: {runs}\nschedule: {{bring_ups_per_level: {n}}}\n"
            ))
        };
        assert_eq!(blocks(&given(3, 12))[0], [(0, 4), (4, 8), (8, 12)]);
        assert_eq!(blocks(&given(3, 7))[0], [(0, 3), (3, 5), (5, 7)]);
        assert_eq!(blocks(&given(1, 8))[0], [(0, 8)]);
        // A level of several boot groups keeps its blocks of runs_per_bring_up.
        let p = plan(
            "name: p\nvariants:\n  - {name: ticket}\n  - {name: nopv, cmdline: nopvspin}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\nlevels: [1.0, 2.0]\nruns: 4\nschedule: {runs_per_bring_up: 2, bring_ups_per_level: 4}\n",
        );
        assert_eq!(p.boots.len(), 4);
        assert!(p.boots.iter().all(|g| g.runs_per_block == Some(2)));
        assert_eq!(blocks(&p)[0], [(0, 2), (2, 4)]);
    }

    /// Under a stopping rule the rounds always made (`min`) are split, and the rounds past
    /// them run on the last bring-up: every bring-up is begun before any cell may stop, so a
    /// cell stopped anywhere has had all of them, and the rule may stop it anywhere (its
    /// variants pair by round; no look waits for a block's end).
    #[test]
    fn under_a_stopping_rule_every_bring_up_is_begun_within_the_runs_always_made() {
        let p = plan(&format!(
            "{SHARED}levels: [1.0, 2.0]\nruns: {{until: concluded, min: 3, max: 12}}\n"
        ));
        let g = &p.boots[0];
        assert_eq!(blocks(&p)[0], [(0, 2), (2, 12)]);
        assert!((0..=12).all(|r| g.may_stop_before(r, 12)));
        // The looks the plan corrects α for are those of one group with no block to wait for:
        // 4, 6, 10, 12 for two variants balanced every 2 rounds.
        assert_eq!(super::super::looks::look_points(3, 12, 2), [4, 6, 10, 12]);
        assert_eq!(p.looks, Some(4));
        let p = plan(&format!(
            "{SHARED}levels: [1.0, 2.0]\nruns: {{min: 6, max: 20, target_cv: 0.05}}\nschedule: {{bring_ups_per_level: 3}}\n"
        ));
        assert_eq!(blocks(&p)[0], [(0, 2), (2, 4), (4, 20)]);
    }

    /// Validation judges where `bring_ups_per_level` applies by the scenario alone
    /// ([`expand::one_boot_group_per_level`]); it must agree with the plan's grouping.
    #[test]
    fn validation_knows_which_levels_are_one_boot_group() {
        for yaml in [
            format!("{SHARED}levels: [1.0, 2.0]\n"),
            format!("{SHARED}levels: [1.0, 2.0]\nschedule: {{guests: per-variant}}\n"),
            format!("{SHARED}levels: [1.0, 2.0]\nhost: {{backend: host}}\nschedule: {{guests: per-variant}}\n"),
            ARGS_ONLY.to_string(),
            "name: p\nlevels: [1.0]\nschedule: {guests: per-variant}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n".to_string(),
        ] {
            let s: Scenario = yaml_serde::from_str(&yaml).unwrap();
            let p = Plan::build(&s, &[0, 1], 7).unwrap();
            assert_eq!(
                expand::one_boot_group_per_level(&s),
                p.level_boots.iter().all(|b| b.len() == 1),
                "{yaml}"
            );
        }
    }

    #[test]
    fn per_variant_guests_and_a_shuffle_seed_are_kept() {
        let p = plan(&format!(
            "{ARGS_ONLY}schedule: {{guests: per-variant, order: shuffle}}\n"
        ));
        assert_eq!(p.boots.len(), 6);
        assert!(p.boots.iter().all(|b| b.variants.len() == 1));
        assert_eq!(p.schedule.seed, Some(7), "the seed picked at start");
        let p = plan(&format!("{ARGS_ONLY}schedule: {{order: shuffle, seed: 42}}\n"));
        assert_eq!(p.schedule.seed, Some(42));
    }

    #[test]
    fn host_backend_scales_threads_by_level() {
        let p = plan(
            "name: h\nhost: {backend: host}\nlevels: [0.5, 2.5]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {threads: 2}\n  - command: lock\n    name: auto\n    metric: ops_per_sec\n",
        );
        let threads = |g: usize, c: usize| {
            let a = &p.boots[g].cells[c].argv;
            a[a.iter().position(|x| x == "--threads").unwrap() + 1].clone()
        };
        assert_eq!((threads(0, 0), threads(1, 0)), ("1".into(), "5".into()));
        assert_eq!((threads(0, 1), threads(1, 1)), ("1".into(), "5".into()));
        assert!(p.boots.iter().all(|g| g.guests == 1));
    }
}
