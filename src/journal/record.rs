//! The journal's lines: the header of a sweep, a resume's note, one guest's result of one run,
//! and the words a record's reasons start with.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::*;

/// The words every self-check rejection's `error` starts with (the sweep writes them, the
/// reports count rejections by them).
pub const SELF_CHECK_REASON: &str = "self-check failed: ";

/// How a record's `error` begins when the payload refused its arguments (exit status 2): the
/// sweep stops there, as every retry would be refused alike.
pub const BAD_ARGS_REASON: &str = "payload refused its arguments: ";

/// The words a disturbed run's `error` starts with: the host's other load on the sweep's CPUs
/// was above `host.max_other_load` during it (the sweep writes them, the reports count by them).
pub const DISTURBED_REASON: &str = "disturbed: ";

/// Where a disturbed run's records keep what disturbed them: `{"foreign_load", "bound"}`, and
/// `"counted": true` with the disturbance's words (`"why"`) on a run counted all the same
/// (the host stayed busy through a whole wait: the sweep's `records::Disturbed::Count`).
pub const DISTURBED_KEY: &str = "disturbed";

/// Whether a record's `extra` marks a run counted although the host disturbed it.
pub fn counted_disturbed(extra: &serde_json::Map<String, serde_json::Value>) -> bool {
    extra
        .get(DISTURBED_KEY)
        .and_then(|d| d.get("counted"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

pub use crate::vocabulary::Better;
use crate::vocabulary::{GuestSharing, RunOrder};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Entry {
    Sweep(Box<SweepHeader>),
    Run(Box<RunRecord>),
    /// Written by every `ocrig run --resume` before its first record (format 2).
    Resume(Box<ResumeNote>),
}

/// What a sweep runs on: the part of its [`SweepHeader`] a `--resume` compares with what it
/// would run on now, so a resume continues exactly the sweep it started (or says, and records
/// in its [`ResumeNote`], what it accepted as changed).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunsOn {
    /// SHA-256 of the scenario file's bytes as run.
    pub scenario_sha256: String,
    pub backend: String,
    /// What the accelerator setting resolved to (`auto` → `kvm` or `tcg`).
    pub accel: String,
    pub host_cpus: Vec<usize>,
    /// Boot groups in plan order: guests booted at a level, shared by these variants;
    /// [`Slot::boot`] indexes this list.
    pub boots: Vec<BootInfo>,
    /// Guest kernel release per variant (empty for the host backend).
    pub kernels: BTreeMap<String, String>,
    /// SHA-256 of the payload binary the guests (or the host) run; none until it is built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_sha256: Option<String>,
    /// Guest image id (hash of its inputs) per variant (empty for the host backend).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, String>,
    /// The host the sweep ran on when it is not this machine, or the hosts of a sweep over
    /// several (labels as in every record's `host`). Empty: this machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// What the host is: kernel, CPU and microcode, SMT, NUMA, KVM parameters, THP, governor,
    /// QEMU, whether it is a VM ([`host::HostRecord`]). None over several hosts, and then not
    /// compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<host::HostRecord>,
}

/// One `ocrig run --resume`: when, by which ocrig, on what, and which differences from the
/// sweep as it ran before it was told to accept (`--accept-changed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeNote {
    pub at: String,
    pub ocrig_version: String,
    pub runs_on: RunsOn,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_changes: Vec<String>,
    /// The `--set KEY=VALUE` overrides the resume was given (each as `KEY=VALUE`), if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<String>,
}

/// What the sweep was asked to do; written once, first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepHeader {
    /// The journal's format ([`JOURNAL_FORMAT`]): a reader refuses any other, before it reads
    /// the rest of the header ([`readable_format`]).
    pub journal_format: u32,
    pub scenario: String,
    /// What it runs on (its fields sit in the header's object, beside the others).
    #[serde(flatten)]
    pub runs_on: RunsOn,
    pub baseline: String,
    pub variants: Vec<String>,
    pub levels: Vec<f64>,
    /// Workload id → what it reports.
    pub workloads: BTreeMap<String, WorkloadInfo>,
    pub guest_vcpus: u32,
    /// Where the scenario file was when the sweep started (a resume checks it is unchanged).
    #[serde(default)]
    pub scenario_path: Option<PathBuf>,
    /// The `--set KEY=VALUE` overrides the sweep was started with (each as `KEY=VALUE`), in
    /// order; the results directory's `scenario.yaml` is the scenario with them applied.
    /// Absent: none (and in journals written before there were overrides).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<String>,
    /// What each variant's kernel is (release, `uname -v`, sha256, config digest): tells two
    /// builds of one release apart. Empty for the host backend.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kernel_identity: BTreeMap<String, crate::image::KernelIdentity>,
    /// How boots were shared and runs ordered.
    pub schedule: ScheduleInfo,
    pub started_at: String,
    pub ocrig_version: String,
    /// `guest.start` as asked (`boot` | `clone`); each guest's start facts say
    /// whether it was cloned.
    pub guest_start: String,
    /// The scenario's equivalence margin (`margin`), when it set one: reports conclude
    /// "equivalent" within 1 ± margin (`ocrig report --margin` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<f64>,
    /// Under `runs: {until: concluded}`, how many times the sweep may have looked at each
    /// comparison to decide whether to stop: reports multiply its p values by it (Bonferroni
    /// over the looks, as the stopping rule did). Absent: runs were a fixed count or stopped
    /// by another rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub looks: Option<u32>,
    /// Which guests' results make a run's headline value (the scenario's `background: same`:
    /// every guest's mean). Absent: guest 0's, as every journal before the choice was read.
    #[serde(default)]
    pub headline_from: crate::vocabulary::HeadlineFrom,
    /// The host's busy-loop speed on the sweep's CPUs, probed before the first guest booted
    /// (`telemetry::host_speed`): whether the host itself was steady. Absent: not probed (a
    /// remote host, a resumed sweep's later passes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_speed: Option<serde_json::Value>,
    /// The host's hand-over of a cache line between two of the sweep's CPUs, probed beside
    /// its speed (`telemetry::host_handover`). Absent as `host_speed` is, or with one CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_handover: Option<serde_json::Value>,
    /// The noise floor of the sweep's CPUs, from the same preflight samples as `host_speed` in
    /// short blocks (`telemetry::host_speed::NoiseFloor`): the effect a comparison could detect
    /// with nothing but this host's own noise. Absent as `host_speed` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_floor: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadInfo {
    /// Payload subcommand, e.g. `lock`.
    pub command: String,
    /// The headline metric (a key of the payload's `metrics`).
    pub metric: String,
    pub better: Better,
    /// The payload's self-check bounds this workload's arguments set looser than the
    /// payload's defaults, e.g. `--max-work-error 1 (default 0.1)`: its runs were accepted
    /// with holds that far from what was asked, and every report says so. Absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loosened_bounds: Vec<String>,
}

/// The sweep's schedule as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    pub guests: GuestSharing,
    pub order: RunOrder,
    /// The seed of `order: shuffle` (picked at start when the scenario names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Measured runs per bring-up at a level of more than one boot group (variants with
    /// guests of their own): each such group's runs are made in blocks of this many, one
    /// fresh bring-up each ([`Slot::block`]).
    pub runs_per_bring_up: u32,
    /// Bring-ups of a level of one boot group (variants sharing guests,
    /// `schedule.bring_ups_per_level`): its rounds always made split into this many blocks,
    /// each on a fresh bring-up ([`Slot::block`]). 1 where a journal written before the field
    /// says nothing: its levels of one group were one block.
    #[serde(default = "one")]
    pub bring_ups_per_level: u32,
}

fn one() -> u32 {
    1
}

/// One boot group: guests booted at a level, shared by these variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootInfo {
    pub level: f64,
    pub guests: u32,
    pub variants: Vec<String>,
}

/// Where an attempt stood in the sweep's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Index of the boot group in [`RunsOn::boots`].
    pub boot: u32,
    /// Which bring-up of that group's guests ran it, from 1 (a failed attempt brings up fresh
    /// guests before the next one).
    pub bring_up: u32,
    /// Position of this attempt among the group's attempts in this `ocrig run`, from 0.
    pub seq: u32,
    /// The block of the design this run belongs to. At a level of more than one boot group
    /// (variants with guests of their own) every group makes its measured runs in blocks of
    /// [`ScheduleInfo::runs_per_bring_up`] (runs `k·B .. (k+1)·B` are block k), each on a fresh
    /// bring-up, block k of every group before block k+1 of any: the unit a comparison pairs
    /// (block k of a variant with block k of the baseline). A level of one boot group makes
    /// its rounds in [`ScheduleInfo::bring_ups_per_level`] blocks, each on a fresh bring-up;
    /// its variants pair by run (round) inside them, and a level's retention is replicated
    /// over them. Block k of every level is made before block k+1 of any. Every record of a
    /// block has it: warm-ups, failed and unattempted attempts too.
    pub block: u32,
}

/// One guest's result of one run of one cell (variant × level × workload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub variant: String,
    pub level: f64,
    /// Workload id (scenario workload name plus expanded matrix parameters).
    pub workload: String,
    /// Run index within the cell, 0-based; warm-up runs are marked and not counted.
    pub run: u32,
    pub warmup: bool,
    /// Guest index at this level; guest 0's result is the primary one.
    pub guest: u32,
    pub guests: u32,
    /// The host the run ran on, in a sweep over several hosts (`hosts:`): its label, e.g.
    /// `root@hostA:22` or `local`. None: the sweep's one host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Attempt number (1 = first try); a resumed sweep goes on counting.
    pub attempt: u32,
    /// Set on every record of an attempt that does not count because some guest of it failed:
    /// why. Such a record may be `ok` (its own guest finished) and is still never a sample: its
    /// level's conditions did not hold for the whole run. The run is retried, or given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded: Option<String>,
    /// How many records this attempt journaled (one per guest that ran something). An attempt
    /// with fewer in the journal was cut short (a crash mid-append) and does not count.
    pub attempt_records: u32,
    /// Where this attempt stood in the sweep's order.
    pub slot: Slot,
    /// The payload's headline numbers (name → value); empty when the run failed.
    pub metrics: BTreeMap<String, f64>,
    /// How many slices of a sliced run its figures are over (the payload's
    /// `detail.sliced.slices`): a comparison weighs its rounds by them. None: a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<u32>,
    /// The payload's full JSON report (boxed: a sweep keeps every record's accounting copy, which
    /// has none, and inline it was 248 of the record's 544 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Box<ocrig_payload::report::Report>>,
    /// Exact payload command line run in the guest.
    pub argv: Vec<String>,
    /// Phase timings of this run, milliseconds.
    pub timings: BTreeMap<String, f64>,
    /// Anything else measured around the run (telemetry, start skew, console tail).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    pub finished_at: String,
}

impl RunRecord {
    /// The record without what only a reader of the journal needs (payload report, telemetry,
    /// argv, timings): what the accounting rule and the stopping rule read, for a sweep that
    /// keeps every record of its journal in memory.
    pub fn for_accounting(mut self) -> Self {
        self.payload = None;
        self.extra = serde_json::Map::new();
        self.argv = Vec::new();
        self.timings = BTreeMap::new();
        self
    }
}
