//! The YAML scenario as serde types. Unknown fields are refused everywhere.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::vocabulary::{Better, GuestSharing, RunOrder};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub host: HostSpec,
    #[serde(default)]
    pub guest: GuestShape,
    /// Overcommit levels: (guests × vCPUs) / host CPUs.
    pub levels: Vec<f64>,
    /// Variants to compare; empty means one implicit baseline called `base`.
    #[serde(default)]
    pub variants: Vec<Variant>,
    pub workloads: Vec<Workload>,
    /// What the guests other than guest 0 run.
    #[serde(default)]
    pub background: Background,
    /// Measured runs per cell: a count, or `{min, max, target_cv, target_mde}` to keep running a
    /// cell until its coefficient of variation is under target and/or an effect of
    /// `target_mde` against the baseline is detectable (or max is reached), or
    /// `{until: concluded, min, max}` to run each comparison until it is concluded.
    #[serde(default)]
    pub runs: RunCount,
    /// `runs` where the guests run under KVM (a scenario sized for TCG wants more, shorter-lived
    /// runs there: see [`Scenario::sized_for`]); absent: `runs` everywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_runs: Option<RunCount>,
    /// Warm-up rounds, made on every freshly brought-up guest set before its first measured
    /// round and never counted: `warmup_runs: N` is N warm-up runs of every cell on every
    /// fresh set, in N rounds (0: none). Absent: [`DEFAULT_WARMUP_RUNS`], one round. A fresh
    /// guest's first runs are cold (TCG's translated code, page cache, the payload's pages, the
    /// kernel's slabs, a loop still speeding up), and the first measured round would take that
    /// start on whichever variant runs first in it; after a whole round every variant's code
    /// has run once on the set, so the first measured run is no colder than the rest. It costs
    /// one round per bring-up (a block of own-guest variants included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_runs: Option<u32>,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// How boots are shared between variants and in which order runs are made.
    #[serde(default)]
    pub schedule: ScheduleSpec,
    /// Equivalence margin of the comparisons, a fraction in (0, 1): a variant is
    /// "equivalent" to the baseline when the (1 − 2α) interval of its ratio lies within
    /// [1/(1 + margin), 1 + margin] (Holm-adjusted two one-sided tests). Default 0.05; a margin
    /// given to `ocrig report --margin` afterwards marks the conclusions post hoc.
    #[serde(default)]
    pub margin: Option<f64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleSpec {
    /// `shared` (default): variants with identical guests share one boot per level;
    /// `per-variant`: fresh guests for every variant.
    pub guests: GuestSharing,
    /// `round-robin` (default) or `shuffle`: the order of the cells within each round of a
    /// boot group, and of the boot groups within each block of a level.
    pub order: RunOrder,
    /// Seed of `order: shuffle`; default: one picked at start and recorded in the journal.
    pub seed: Option<u64>,
    /// At a level with more than one boot group (variants with guests of their own), the
    /// measured runs each group makes on one bring-up: its runs are made in blocks of this
    /// many, each block on freshly brought-up guests, block k of every group before block k+1
    /// of any. Between boots is where such variants differ, so each block is one replicate
    /// of the comparison. Default 1 (every run of such a variant on its own guests); a level
    /// with one boot group makes its runs on `bring_ups_per_level` bring-ups whatever this says.
    pub runs_per_bring_up: u32,
    /// At a level of one boot group (variants sharing guests), the bring-ups its rounds are
    /// made on: the rounds always made (`runs`, or `runs.min`) are split into this many blocks
    /// of nearly equal size, each on freshly brought-up guests, and the rounds a stopping rule
    /// adds past them run on the last block's. The levels take turns block by block in a
    /// mirrored order (1x 2x, 2x 1x, 1x 2x, …), so a level's retention is replicated over
    /// bring-ups (boot-to-boot variation and the host's drift between the levels are in its
    /// interval) and a host drifting evenly weighs every level alike. Default: 2 where the
    /// scenario has two levels or more (retention exists) and the runs always made allow, else
    /// one. With one, each level's rounds are made on one bring-up and retention is labelled
    /// `within one boot a level`. At most the runs always made; the host backend boots nothing,
    /// so it takes 1 only. Levels with more than one boot group follow `runs_per_bring_up`.
    pub bring_ups_per_level: Option<u32>,
}

/// `schedule.bring_ups_per_level` where the scenario names none and retention exists (two
/// levels or more): two bring-ups a level, the fewest that let retention's interval hold
/// boot-to-boot variation (it needs two a side), for one extra boot and warm-up round a level.
pub const DEFAULT_BRING_UPS_PER_LEVEL: u32 = 2;

impl Scenario {
    /// The scenario as the sweep runs it on an accelerator: under KVM (`kvm`) each workload's
    /// `kvm_args` merged over its `args` (a key written with `_` or `-` replaces its other
    /// spelling) and `kvm_runs` in place of `runs`; elsewhere both ignored. Either way the
    /// result has no KVM block left, so it is what the plan, the journal's argv and the
    /// reports see.
    pub fn sized_for(&self, kvm: bool) -> Scenario {
        let mut s = self.clone();
        let kvm_runs = s.kvm_runs.take();
        if kvm && let Some(r) = kvm_runs {
            s.runs = r;
        }
        for w in &mut s.workloads {
            let extra = std::mem::take(&mut w.kvm_args);
            if kvm {
                for (k, v) in extra {
                    let norm = k.replace('_', "-");
                    w.args.retain(|old, _| old.replace('_', "-") != norm);
                    w.args.insert(k, v);
                }
            }
        }
        s
    }

    /// The bring-ups each level of one boot group makes ([`ScheduleSpec::bring_ups_per_level`]):
    /// as given, else [`DEFAULT_BRING_UPS_PER_LEVEL`] where there is a retention to replicate
    /// (two levels or more) and guests to bring up, as far as the runs always made allow (each
    /// bring-up makes one of them at least), else 1.
    pub fn bring_ups_per_level(&self) -> u32 {
        if let Some(given) = self.schedule.bring_ups_per_level {
            return given;
        }
        let always_made = self.runs.bounds().0;
        if self.levels.len() >= 2 && self.host.backend != BackendKind::Host {
            DEFAULT_BRING_UPS_PER_LEVEL.min(always_made).max(1)
        } else {
            1
        }
    }

    /// True when the scenario says anything for KVM (`kvm_runs`, a workload's `kvm_args`).
    pub fn has_kvm_sizing(&self) -> bool {
        self.kvm_runs.is_some() || self.workloads.iter().any(|w| !w.kvm_args.is_empty())
    }
}

impl Default for ScheduleSpec {
    fn default() -> Self {
        Self {
            guests: GuestSharing::default(),
            order: RunOrder::default(),
            seed: None,
            runs_per_bring_up: 1,
            bring_ups_per_level: None,
        }
    }
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum RunCount {
    Fixed(u32),
    Dynamic(DynamicRuns),
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DynamicRuns {
    pub min: u32,
    pub max: u32,
    /// Coefficient of variation to reach, as a fraction (0.05 = 5 %).
    #[serde(default)]
    pub target_cv: Option<f64>,
    /// Effect to make detectable against the baseline variant (two-sided α = 0.05, power
    /// 0.8), as a fraction of the baseline mean (0.05 = 5 %).
    #[serde(default)]
    pub target_mde: Option<f64>,
    /// `concluded`: run each comparison with the baseline until the report's own rule
    /// concludes it (`differs` or `equivalent`) or `max`, the baseline while any of its
    /// comparisons at the level still runs (see `sweep::stopping`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Until>,
}

/// What a stopping rule runs until.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Until {
    /// The comparison with the baseline is concluded.
    Concluded,
}

impl Default for RunCount {
    fn default() -> Self {
        RunCount::Fixed(1)
    }
}

impl RunCount {
    /// (runs always made, most runs, CV target).
    pub fn bounds(&self) -> (u32, u32, Option<f64>) {
        match *self {
            RunCount::Fixed(n) => (n, n, None),
            RunCount::Dynamic(d) => (d.min, d.max, d.target_cv),
        }
    }

    /// The detectable-effect target, if any.
    pub fn target_mde(&self) -> Option<f64> {
        match *self {
            RunCount::Fixed(_) => None,
            RunCount::Dynamic(d) => d.target_mde,
        }
    }

    /// Whether runs go on until each comparison is concluded.
    pub fn until_concluded(&self) -> bool {
        matches!(
            *self,
            RunCount::Dynamic(DynamicRuns {
                until: Some(Until::Concluded),
                ..
            })
        )
    }
}

#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Qemu,
    Libvirt,
    Host,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AccelSetting {
    #[default]
    Auto,
    Kvm,
    Tcg,
}

/// Host CPUs to use: a count (the first N allowed CPUs) or an explicit list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum CpuSet {
    Count(usize),
    List(Vec<usize>),
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Default: every CPU this process may use.
    pub cpus: Option<CpuSet>,
    #[serde(default)]
    pub backend: BackendKind,
    #[serde(default)]
    pub accel: AccelSetting,
    #[serde(default = "default_uri")]
    pub libvirt_uri: String,
    /// Several interchangeable libvirt hosts (URIs, or `{uri, cpus}`); each cell's runs are
    /// spread over them. Empty: the one host `libvirt_uri`.
    #[serde(default)]
    pub hosts: Vec<HostEntry>,
    /// Record each run's vCPU timeline from the host scheduler (default true; `false` turns
    /// the tracefs instance off, e.g. where its cost matters; `OCRIG_TIMELINE=off` does the
    /// same for one invocation).
    #[serde(default)]
    pub timeline: Option<bool>,
    /// A run during which other processes took more than this share of the sweep's CPUs'
    /// time (their busy time less this sweep's own processes', as far as a running process
    /// can be named for it: [`crate::telemetry::host_load`]) is disturbed: journaled as such,
    /// not a sample, waited out and retried on the same guests; once the host stayed busy
    /// through a whole wait, counted marked disturbed (named in its cell) until a run runs
    /// quiet. Default [`DEFAULT_MAX_OTHER_LOAD`].
    #[serde(default)]
    pub max_other_load: Option<f64>,
}

/// Default of `host.max_other_load`. On this project's 2-CPU VMs (2026-12-04) the report's
/// other load of a quiet run was 1.0-2.2 % (cell means, ticket-vs-tas under TCG), and the
/// processes other than the sweep's own took ~0 % of a quiet run; a busy loop taking 25 % of
/// one of the 2 CPUs is 12.5 % of their time.
pub const DEFAULT_MAX_OTHER_LOAD: f64 = 0.05;

/// Warm-up rounds a fresh guest set gets when the scenario names no `warmup_runs`: one, so no
/// variant's measured run takes the guests' cold start (one run of whichever cell came first
/// did, and round 0 then started with the first-listed variant, the baseline by default).
pub const DEFAULT_WARMUP_RUNS: u32 = 1;

/// One host of a sweep over several hosts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum HostEntry {
    Uri(String),
    /// With its own CPUs (e.g. two "hosts" that are one machine, each given its own CPUs).
    Spec {
        uri: String,
        cpus: Option<CpuSet>,
    },
}

impl HostEntry {
    pub fn uri(&self) -> &str {
        match self {
            HostEntry::Uri(u) | HostEntry::Spec { uri: u, .. } => u.trim(),
        }
    }
    pub fn cpus(&self) -> Option<&CpuSet> {
        match self {
            HostEntry::Uri(_) => None,
            HostEntry::Spec { cpus, .. } => cpus.as_ref(),
        }
    }
}

pub fn default_uri() -> String {
    "qemu:///system".into()
}

/// A kernel: a Debian kernel release (e.g. `6.1.0-41-amd64`, or `default`), a kernel file
/// (`{path: …/bzImage}` or a PVH `vmlinux`), or a build tree (`{tree: /path/to/linux}`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum KernelRef {
    Debian(String),
    File(KernelFile),
    Tree(KernelTree),
}

/// A kernel build tree: its vmlinux (PVH) or arch/x86/boot/bzImage, .config, System.map and
/// the modules it built (see src/image/tree.rs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelTree {
    pub tree: PathBuf,
}

impl KernelRef {
    /// What the image builder makes of this kernel.
    pub fn source(&self) -> crate::image::KernelSource {
        use crate::image::KernelSource;
        match self {
            KernelRef::Debian(r) => KernelSource::Debian(r.clone()),
            KernelRef::File(f) => KernelSource::File {
                kernel: f.path.clone(),
                initrd: f.initrd.clone(),
            },
            KernelRef::Tree(t) => KernelSource::Tree(t.tree.clone()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelFile {
    pub path: PathBuf,
    pub initrd: Option<PathBuf>,
}

impl Default for KernelRef {
    fn default() -> Self {
        KernelRef::Debian("default".into())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestShape {
    #[serde(default = "one")]
    pub vcpus: u32,
    #[serde(default = "default_memory")]
    pub memory_mib: u32,
    #[serde(default)]
    pub kernel: KernelRef,
    /// Extra kernel command-line arguments.
    #[serde(default)]
    pub cmdline: String,
    /// QEMU `-cpu` value; default `max` under TCG, `host` under KVM.
    pub cpu: Option<String>,
    /// Size of a raw ext4 scratch disk mounted at /scratch; 0 = none.
    #[serde(default)]
    pub scratch_disk_mib: u32,
    /// `boot` (cold boot) or `clone` (restore a saved template of this guest; falls back to a
    /// boot where the host cannot). Default: clone.
    #[serde(default = "default_start")]
    pub start: crate::vocabulary::StartMethod,
    /// A 1-vCPU guest in a scenario whose variants switch PV spinlocks (`nopvspin`,
    /// `kvm-pv-unhalt`) is refused, because such a guest turns PV spinlocks off by itself
    /// ("PV spinlocks disabled, single CPU"); `true` says that is the point (a warning then).
    #[serde(default)]
    pub single_vcpu_intended: bool,
    /// Host files copied into every guest once per boot, before any run (a benchmark's static
    /// binary or script for an `exec` workload, its input data); executable in the guest where
    /// executable here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<GuestFile>,
    /// Debian packages put in every guest with their dependencies (e.g. `[sysbench,
    /// stress-ng, linux-perf]`), from this host's apt; the image is cached with the package
    /// set and its versions in its key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
}

/// A package list as the image builder keys it: sorted, each name once.
pub fn normalised_packages(names: &[String]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(|n| n.trim().to_string()).collect();
    v.sort();
    v.dedup();
    v
}

/// One host file copied into the guests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuestFile {
    /// The file on this machine (a relative path is taken from the working directory).
    pub from: PathBuf,
    /// Where it goes in the guest: an absolute path of letters, digits and `/._-` (its
    /// directories are made).
    pub to: String,
}

fn default_start() -> crate::vocabulary::StartMethod {
    crate::vocabulary::StartMethod::Clone
}

fn default_memory() -> u32 {
    512
}

impl Default for GuestShape {
    fn default() -> Self {
        Self {
            vcpus: 1,
            memory_mib: default_memory(),
            kernel: KernelRef::default(),
            cmdline: String::new(),
            cpu: None,
            scratch_disk_mib: 0,
            start: default_start(),
            single_vcpu_intended: false,
            files: Vec::new(),
            packages: Vec::new(),
        }
    }
}

/// One side of the comparison: overrides applied to the guest or the workloads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    #[serde(default)]
    pub baseline: bool,
    pub kernel: Option<KernelRef>,
    /// Appended to the guest command line (e.g. `nopvspin`).
    #[serde(default)]
    pub cmdline: String,
    /// Replaces the guest's `-cpu` value (e.g. `host,kvm-pv-unhalt=off`).
    pub cpu: Option<String>,
    /// Merged into every workload's arguments (e.g. `{algo: ticket}`).
    #[serde(default, deserialize_with = "unique_keys")]
    #[schemars(with = "BTreeMap<String, ArgValue>")]
    pub args: BTreeMap<String, ArgValue>,
    /// Guest trace events (`system:name`) switched on through tracefs for this variant's runs
    /// and off after each (the payload's `--trace-event`), e.g. `[lock:contention_begin]`.
    #[serde(default)]
    pub trace_events: Vec<String>,
    /// Count guest kernel lock contention and scheduler events in each run's window (the
    /// payload's `--kernel-counts`; off by default, since it switches the tracepoints on).
    #[serde(default)]
    pub kernel_counts: bool,
    /// A system-wide kernel profile of each run's window (off when absent).
    pub profile: Option<ProfileSwitch>,
}

/// `profile: {rate_hz: N}`: cpu-clock samples per second and CPU (the payload's `--profile-hz`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfileSwitch {
    pub rate_hz: u64,
}

/// A workload argument: a scalar, or a list that expands into a matrix.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ArgValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<ArgValue>),
}

impl ArgValue {
    /// The value as a command-line word; None for `false` (flag omitted) and lists.
    pub fn as_word(&self) -> Option<String> {
        match self {
            ArgValue::Bool(_) | ArgValue::List(_) => None,
            ArgValue::Int(i) => Some(i.to_string()),
            ArgValue::Float(f) => Some(f.to_string()),
            ArgValue::Str(s) => Some(s.clone()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Label in reports; default: the command.
    pub name: Option<String>,
    /// Payload subcommand (`lock`, `hackbench`, ...).
    pub command: String,
    /// `--key value` arguments; lists expand into a matrix.
    #[serde(default, deserialize_with = "unique_keys")]
    #[schemars(with = "BTreeMap<String, ArgValue>")]
    pub args: BTreeMap<String, ArgValue>,
    /// Arguments merged over `args` where the guests run under KVM, e.g. `{loops: 1000}` for a
    /// hackbench sized to last a second under TCG, which KVM runs ~10x faster.
    #[serde(
        default,
        deserialize_with = "unique_keys",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    #[schemars(with = "BTreeMap<String, ArgValue>")]
    pub kvm_args: BTreeMap<String, ArgValue>,
    /// Headline metric, a key of the payload report's `metrics`.
    pub metric: String,
    /// Which way the headline metric improves (default: as its `metrics:` entry says for
    /// `exec`, else `higher`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better: Option<Better>,
    /// For `command: exec`: the metrics read from the command's output, each by one rule
    /// (`regex`, `json` or `wall`) and with its direction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<ExecMetric>,
    /// Variants that share guests run this workload as one payload run of alternating slices
    /// of this many milliseconds each (A B B A …, every variant the run's whole duration in
    /// all), so both sides of a comparison meet the same host states (`lock` and `ebizzy`,
    /// which run for a time). Default 300 ([`DEFAULT_SLICE_MS`]); `0`: each variant's run
    /// whole, one after the other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_ms: Option<u64>,
}

/// One metric an `exec` workload reads from its command's output (one of `regex`, `json`,
/// `wall`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecMetric {
    /// Its name in the report (letters, digits, `_`, `-`, `.`).
    pub name: String,
    /// A regular expression: the first match in the standard output (then the standard
    /// error); its group named `value`, else its first group, else the whole match, read as a
    /// number, e.g. `'events per second:\s*(?P<value>[\d.]+)'`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// A dot-separated path into the standard output read as JSON, e.g. `jobs.0.read.iops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<String>,
    /// The command's wall time, seconds.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wall: bool,
    /// Which way it improves.
    pub better: Better,
}

impl ExecMetric {
    /// The payload's `--metric NAME=RULE` value; Err where it names no rule or several.
    pub fn rule(&self) -> Result<String, String> {
        match (&self.regex, &self.json, self.wall) {
            (Some(r), None, false) => Ok(format!("{}=regex:{r}", self.name)),
            (None, Some(p), false) => Ok(format!("{}=json:{p}", self.name)),
            (None, None, true) => Ok(format!("{}=wall", self.name)),
            _ => Err("give exactly one of `regex`, `json` or `wall: true`".into()),
        }
    }
}

impl Workload {
    /// Which way its headline metric improves: as the workload says, else as its `metrics:`
    /// entry says, else higher.
    pub fn better(&self) -> Better {
        self.better
            .or_else(|| {
                self.metrics
                    .iter()
                    .find(|m| m.name == self.metric)
                    .map(|m| m.better)
            })
            .unwrap_or_default()
    }
}

/// The slice of a workload whose variants share guests, unless it sets `slice_ms`. Measured on
/// a 2-CPU host whose state changes within seconds (ticket, mcs and tas, 2-vCPU guests, 8
/// rounds): the SD of a round's log ratio fell from 0.25–0.35 with whole runs to 0.08–0.15 at
/// 300 ms; 150 ms gained little more and spends more of each period on set-up, 1000 ms kept
/// half the spread. A slice keeps what the explanations need (each variant's vCPU wait over
/// its own slices, its stretched holds on the host's record).
pub const DEFAULT_SLICE_MS: Option<u64> = Some(300);

/// The shortest slice: each slice has its own set-up and teardown (a lock run calibrates the
/// TSC for 20 ms before and after its window), so a shorter one is mostly set-up, and gives
/// the self-checks too few samples.
pub const MIN_SLICE_MS: u64 = 100;

/// A mapping of arguments in which a key given twice is an error (a plain map would keep the
/// last one silently), phrased as serde phrases duplicate fields so it is located the same way.
fn unique_keys<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, ArgValue>, D::Error> {
    struct Keys;
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = BTreeMap<String, ArgValue>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a mapping of arguments")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = map.next_entry::<String, ArgValue>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format_args!("duplicate field `{k}`")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Keys)
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Background {
    /// Every guest runs the same workload (the published tables' setup).
    #[default]
    Same,
    /// Other guests boot but stay idle.
    Idle,
    /// Other guests burn CPU on every vCPU.
    Hog,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    pub boot_s: u64,
    pub deploy_s: u64,
    /// Per run; None = derived from the workload's own duration.
    pub run_s: Option<u64>,
    pub collect_s: u64,
    /// Retries of a run whose guests failed (timed out, crashed, lost SSH, never came up),
    /// each on freshly brought-up guests.
    pub retries: u32,
    /// Retries of a run the payload's own self-checks rejected, each on the same guests (they
    /// answered and ran; what the checks saw was the host moving under the run, e.g. the
    /// loop's speed drifting). Counted apart from `retries`: a retry here costs one run, not a
    /// bring-up, and rejections are common on a busy host (2026-12-03: 37 of 157 attempts of
    /// spinlock-variants rejected with other processes running; were they independent, 2 in a
    /// row would leave ~6 % of slots empty, 4 in a row ~0.3 %; and they come in streaks, which
    /// a few more tries ride out): the default of 3 keeps slots from ending empty where 1
    /// did (two sweeps in about twenty on the quiet machine lost a slot to 2 in a row).
    pub self_check_retries: u32,
    /// Retries of a run the host disturbed (`host.max_other_load`), each on the same guests
    /// after the host was quiet again or `disturbed_wait_s` passed.
    pub disturbed_retries: u32,
    /// How long to wait for a quiet host before retrying a disturbed run.
    pub disturbed_wait_s: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            boot_s: 180,
            deploy_s: 120,
            run_s: None,
            collect_s: 60,
            retries: 1,
            self_check_retries: 3,
            disturbed_retries: 3,
            disturbed_wait_s: 30,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_sized_for_kvm_takes_its_kvm_block_and_elsewhere_drops_it() {
        let s: Scenario = yaml_serde::from_str(
            "name: x\nlevels: [1]\nworkloads:\n  - command: hackbench\n    metric: time_s\n    \
             args: {groups: 4, loops: 100}\n    kvm_args: {loops: 2000, 'groups': 8}\n  \
             - command: sysfs-mutex\n    metric: total_s\n    args: {tasks-per-cpu: 4}\n    kvm_args: {tasks_per_cpu: 8}\n\
             runs: 3\nkvm_runs: {min: 5, max: 20, target_cv: 0.02}\n",
        )
        .unwrap();
        assert!(s.has_kvm_sizing());
        let kvm = s.sized_for(true);
        assert!(!kvm.has_kvm_sizing());
        let words = |w: &Workload| {
            w.args
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_word().unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        assert_eq!(words(&kvm.workloads[0]), ["groups=8", "loops=2000"]);
        // The other spelling of a key is replaced, not kept beside it.
        assert_eq!(words(&kvm.workloads[1]), ["tasks_per_cpu=8"]);
        assert_eq!(kvm.runs.bounds(), (5, 20, Some(0.02)));
        let tcg = s.sized_for(false);
        assert!(!tcg.has_kvm_sizing());
        assert_eq!(words(&tcg.workloads[0]), ["groups=4", "loops=100"]);
        assert_eq!(tcg.runs, RunCount::Fixed(3));
        // A scenario without a KVM block is the same either way.
        let plain = tcg.clone();
        assert_eq!(plain.sized_for(true), tcg);
    }
}
