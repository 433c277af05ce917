//! The append-only results journal: `journal.jsonl` in a results directory, and (in
//! [`accounting`]) the one rule for which of its records count. Below both the sweep that
//! writes it and the statistics that read it, so neither imports the other for it.
//!
//! The first line is a [`SweepHeader`] (what was asked); every later line is a [`RunRecord`]
//! (one guest's result of one run), appended and fsync'd as soon as it is known, so a crash
//! loses nothing that had finished. Statistics and reports are computed from this file alone.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub mod accounting;
pub mod host;
pub mod scan;

pub const JOURNAL_FILE: &str = "journal.jsonl";

/// The journal format this ocrig writes and the newest it reads. 1: journals without the field;
/// 2: `resume` entries (what each `--resume` ran on, and which differences it accepted).
pub const JOURNAL_FORMAT: u32 = 2;

/// A file that is not a journal this ocrig can read (no header, a newer format, a malformed
/// line): bad input, exit status 2, and nothing is written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAJournal(pub String);

/// Appending to the journal failed (no space, I/O error, read-only file system): the sweep stops
/// at once. The journal ends at its last whole record, so `--resume` continues it once the cause
/// is gone.
#[derive(Debug, thiserror::Error)]
#[error("cannot append to {}: {cause}", path.display())]
pub struct JournalWriteFailed {
    pub path: PathBuf,
    pub cause: String,
}

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

/// What a sweep runs on: compared by `--resume` with what it ran on before, so a resume
/// continues exactly the sweep it started (or says, and records, what it accepted as changed).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunsOn {
    pub scenario_sha256: String,
    pub backend: String,
    /// What the accelerator setting resolved to (`auto` → `kvm` or `tcg`).
    pub accel: String,
    pub host_cpus: Vec<usize>,
    /// Guests booted per boot group (level and variants as labelled in the plan).
    pub guests: Vec<BootInfo>,
    /// Guest kernel release per variant (empty for the host backend).
    pub kernels: BTreeMap<String, String>,
    /// SHA-256 of the payload binary the guests (or the host) run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_sha256: Option<String>,
    /// Guest image id (hash of its inputs) per variant (empty for the host backend).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, String>,
    /// The hosts of a sweep over several (empty: this machine or its one remote host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// What the host is ([`host::HostRecord`]); absent in older journals and over several
    /// hosts, and then not compared.
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
}

/// What the sweep was asked to do; written once, first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepHeader {
    pub scenario: String,
    /// SHA-256 of the scenario file's bytes as run.
    pub scenario_sha256: String,
    pub baseline: String,
    pub variants: Vec<String>,
    pub levels: Vec<f64>,
    /// Workload id → what it reports.
    pub workloads: BTreeMap<String, WorkloadInfo>,
    pub backend: String,
    pub accel: String,
    pub host_cpus: Vec<usize>,
    pub guest_vcpus: u32,
    /// Where the scenario file was when the sweep started (a resume checks it is unchanged).
    #[serde(default)]
    pub scenario_path: Option<PathBuf>,
    /// Guest kernel release per variant (empty for the host backend).
    #[serde(default)]
    pub kernels: BTreeMap<String, String>,
    /// What each variant's kernel is (release, `uname -v`, sha256, config digest): tells two
    /// builds of one release apart. Absent in journals of older ocrig versions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kernel_identity: BTreeMap<String, crate::image::KernelIdentity>,
    /// How boots were shared and runs ordered (absent in journals of older ocrig versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleInfo>,
    pub started_at: String,
    pub ocrig_version: String,
    /// `guest.start` as asked (`boot` | `clone`); each guest's start facts say
    /// whether it was cloned. Absent in journals written before it existed.
    #[serde(default)]
    pub guest_start: Option<String>,
    /// The host the sweep ran on when it is not this machine, or the hosts of a sweep over
    /// several (labels as in every record's `host`). Empty: this machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The journal's format ([`JOURNAL_FORMAT`]); 1 when absent (older ocrig).
    #[serde(default = "format_1")]
    pub journal_format: u32,
    /// SHA-256 of the payload binary (absent in journals of older ocrig versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_sha256: Option<String>,
    /// Guest image id per variant (absent in older journals, empty for the host backend).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, String>,
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
    /// The host's busy-loop speed on the sweep's CPUs, probed before the first guest booted
    /// (`telemetry::host_speed`): whether the host itself was steady. Absent: not probed (a
    /// remote host, a resumed sweep's later passes, an older ocrig).
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
    /// What the host is: kernel, CPU and microcode, SMT, NUMA, KVM parameters, THP, governor,
    /// QEMU, whether it is a VM ([`host::HostRecord`]). Absent in older journals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<host::HostRecord>,
}

fn format_1() -> u32 {
    1
}

impl SweepHeader {
    /// What the sweep started on.
    pub fn runs_on(&self) -> RunsOn {
        RunsOn {
            scenario_sha256: self.scenario_sha256.clone(),
            backend: self.backend.clone(),
            accel: self.accel.clone(),
            host_cpus: self.host_cpus.clone(),
            guests: self
                .schedule
                .as_ref()
                .map(|s| s.boots.clone())
                .unwrap_or_default(),
            kernels: self.kernels.clone(),
            payload_sha256: self.payload_sha256.clone(),
            images: self.images.clone(),
            hosts: self.hosts.clone(),
            host: self.host.clone(),
        }
    }
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
    /// with holds that far from what was asked, and every report says so. Absent: none (or
    /// an ocrig before it was recorded).
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
    /// Boot groups in plan order; [`Slot::boot`] indexes this list.
    pub boots: Vec<BootInfo>,
    /// Measured runs per bring-up at a level of more than one boot group (variants with
    /// guests of their own): each such group's runs are made in blocks of this many, one
    /// fresh bring-up each ([`Slot::block`]); a level of one boot group is one block. Absent
    /// in journals of an ocrig before blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_per_bring_up: Option<u32>,
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
    /// Index of the boot group in [`ScheduleInfo::boots`].
    pub boot: u32,
    /// Which bring-up of that group's guests ran it, from 1 (a failed attempt brings up fresh
    /// guests before the next one).
    pub bring_up: u32,
    /// Position of this attempt among the group's attempts in this `ocrig run`, from 0.
    pub seq: u32,
    /// The block of the design this run belongs to: the unit a comparison pairs. At a level
    /// of more than one boot group (variants with guests of their own) every group makes its
    /// measured runs in blocks of [`ScheduleInfo::runs_per_bring_up`] (runs `k·B .. (k+1)·B`
    /// are block k), each on a fresh bring-up, block k of every group before block k+1 of any
    /// (block k of a variant pairs with block k of the baseline); a level of one boot group is
    /// one block (0). Variants sharing a boot group pair by run (round) inside it. Every
    /// record of a block has it: warm-ups, failed and unattempted attempts too. None: a
    /// journal from an ocrig before blocks (its comparisons cannot pair own-guest variants and
    /// say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<u32>,
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
    /// Absent in journals of older ocrig versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_records: Option<u32>,
    /// Where this attempt stood in the sweep's order (absent in older journals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<Slot>,
    /// The payload's headline numbers (name → value); empty when the run failed.
    pub metrics: BTreeMap<String, f64>,
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

/// Appends entries to a journal, fsync'ing each one. Every append lands whole or not at all: a
/// write that fails is cut back off the file, and once one has failed every later append fails
/// too (with the first cause), so no scheduler of any host appends after a failed one.
pub struct JournalWriter {
    file: File,
    path: PathBuf,
    /// Length of the file's whole records.
    len: u64,
    failed: Option<String>,
}

impl JournalWriter {
    /// Opens (creating if needed) `dir/journal.jsonl` for appending. A journal whose tail is
    /// not a whole line (a crash or full disk mid-write) is first cut back to its last newline;
    /// the cut bytes are kept beside it as `journal.jsonl.torn-<n>` and the cut is said on
    /// stderr.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening journal {}", path.display()))?;
        let len = cut_torn_tail(&mut file, &path)?;
        Ok(Self {
            file,
            path,
            len,
            failed: None,
        })
    }

    pub fn append(&mut self, entry: &Entry) -> anyhow::Result<()> {
        self.append_all(std::slice::from_ref(entry))
    }

    /// Appends entries with one write and one fsync (an attempt's records land together; should
    /// a crash cut the write short, [`RunRecord::attempt_records`] tells the attempt is partial
    /// and the next open cuts the torn line off). Fails with [`JournalWriteFailed`].
    pub fn append_all(&mut self, entries: &[Entry]) -> anyhow::Result<()> {
        if let Some(cause) = &self.failed {
            return Err(self.write_failed(format!("an earlier append failed: {cause}")));
        }
        let mut text = String::new();
        for e in entries {
            text.push_str(&serde_json::to_string(e)?);
            text.push('\n');
        }
        match self
            .file
            .write_all(text.as_bytes())
            .and_then(|_| self.file.sync_data())
        {
            Ok(()) => {
                self.len += text.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Take back whatever part of the write landed; if even that fails, the next
                // open cuts the torn tail.
                let _ = self.file.set_len(self.len).and_then(|_| self.file.sync_data());
                let cause = e.to_string();
                self.failed = Some(cause.clone());
                Err(self.write_failed(cause))
            }
        }
    }

    fn write_failed(&self, cause: String) -> anyhow::Error {
        JournalWriteFailed {
            path: self.path.clone(),
            cause,
        }
        .into()
    }
}

/// Refuses a header line of a newer journal format (told before its fields are parsed: a newer
/// header may lack or rename some).
fn newer_format(line: &[u8]) -> Result<(), String> {
    #[derive(Deserialize)]
    struct Format {
        #[serde(rename = "type")]
        kind: String,
        #[serde(default = "format_1")]
        journal_format: u32,
        #[serde(default)]
        ocrig_version: Option<String>,
    }
    match serde_json::from_slice::<Format>(line) {
        Ok(f) if f.kind == "sweep" && f.journal_format > JOURNAL_FORMAT => Err(format!(
            "written by ocrig {} in journal format {}; this ocrig ({}) reads formats up to {JOURNAL_FORMAT}: use a newer ocrig",
            f.ocrig_version.as_deref().unwrap_or("?"),
            f.journal_format,
            env!("CARGO_PKG_VERSION")
        )),
        _ => Ok(()),
    }
}

/// Cuts a tail that is not a whole line off `file`, keeping it beside the journal; returns the
/// length left.
fn cut_torn_tail(file: &mut File, path: &Path) -> anyhow::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    // Find the last newline, reading backwards in blocks (a torn record is at most one line).
    let mut end = len;
    let mut keep = 0;
    let mut buf = vec![0u8; 64 * 1024];
    'scan: while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            keep = start + i as u64 + 1;
            break 'scan;
        }
        end = start;
    }
    if keep == len {
        return Ok(len);
    }
    let mut torn = Vec::with_capacity((len - keep) as usize);
    file.seek(SeekFrom::Start(keep))?;
    file.read_to_end(&mut torn)?;
    let name = path
        .file_name()
        .map_or("journal".into(), |n| n.to_string_lossy().into_owned());
    let mut n = 1;
    let mut aside = path.with_file_name(format!("{name}.torn-{n}"));
    while aside.exists() {
        n += 1;
        aside = path.with_file_name(format!("{name}.torn-{n}"));
    }
    std::fs::write(&aside, &torn)
        .and_then(|_| File::open(&aside)?.sync_all())
        .with_context(|| {
            format!(
                "keeping the torn tail of {} in {}",
                path.display(),
                aside.display()
            )
        })?;
    file.set_len(keep)
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cutting the torn tail off {}", path.display()))?;
    eprintln!(
        "ocrig: {} ended in a torn line ({} bytes, left by a crash or a full disk mid-write): cut back to its last whole record; the cut bytes are in {}",
        path.display(),
        torn.len(),
        aside.display()
    );
    Ok(keep)
}

/// A journal read back: the header and every complete run record, in order.
#[derive(Debug, Clone)]
pub struct Journal {
    pub header: SweepHeader,
    /// Read only by tests: every reader streams the journal ([`read_lines`]).
    #[cfg_attr(not(test), allow(dead_code))]
    pub runs: Vec<RunRecord>,
}

impl Journal {
    #[cfg(test)]
    /// Reads `dir/journal.jsonl` (or the file itself if `path` is a file). A torn tail (bytes
    /// after the last newline: a crash mid-write, whatever they hold) is ignored; any other
    /// malformed line is a [`NotAJournal`] error naming its number.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let read = read_mapped(path, false, |_: &SweepHeader, _: &mut (), r: RunRecord| r)?;
        Ok(Self {
            header: read.header,
            runs: read.runs,
        })
    }
}

/// How a reader parses a run record's line: the whole [`RunRecord`], or only what it reads
/// (a report's digest or the accounting rule need a fraction of a record, and skipping the rest
/// costs a fraction of building it).
pub trait RunLine: Sized + Send {
    fn parse(line: &[u8]) -> serde_json::Result<Self>;
}

impl RunLine for RunRecord {
    fn parse(line: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(line)
    }
}

/// A run record's fields other than its payload report and telemetry ([`split_record`] hands
/// those to its caller); `argv` and `timings` must be there but are skipped.
#[derive(Deserialize)]
pub struct RecordHead {
    pub variant: String,
    pub level: f64,
    pub workload: String,
    pub run: u32,
    pub warmup: bool,
    pub guest: u32,
    pub guests: u32,
    #[serde(default)]
    pub host: Option<String>,
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    pub attempt: u32,
    #[serde(default)]
    pub superseded: Option<String>,
    #[serde(default)]
    pub attempt_records: Option<u32>,
    #[serde(default)]
    pub slot: Option<Slot>,
    pub metrics: BTreeMap<String, f64>,
    #[allow(dead_code)] // required in a record; never read here
    argv: serde::de::IgnoredAny,
    #[allow(dead_code)]
    timings: serde::de::IgnoredAny,
    pub finished_at: String,
}

impl RecordHead {
    /// The record these fields are of, without payload report, argv, timings and telemetry.
    pub fn record(self) -> RunRecord {
        RunRecord {
            variant: self.variant,
            level: self.level,
            workload: self.workload,
            run: self.run,
            warmup: self.warmup,
            guest: self.guest,
            guests: self.guests,
            host: self.host,
            ok: self.ok,
            error: self.error,
            attempt: self.attempt,
            superseded: self.superseded,
            attempt_records: self.attempt_records,
            slot: self.slot,
            metrics: self.metrics,
            payload: None,
            argv: Vec::new(),
            timings: BTreeMap::new(),
            extra: serde_json::Map::new(),
            finished_at: self.finished_at,
        }
    }
}

/// One of a run record's two big fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Big {
    /// The payload report (never given when null).
    Payload,
    /// The telemetry.
    Extra,
}

/// A run record's [`RecordHead`], from its line: its payload report and telemetry (~9 of a
/// record's ~10 KB) are `big`'s to read or skip (given the line and where the field's value
/// starts, it returns where it ends: the value is scanned once, in place); the head's members
/// are copied into an object of their own and parsed by serde ([`RecordHead`] stays the one
/// definition of a record's fields).
pub fn split_record(
    line: &[u8],
    mut big: impl FnMut(Big, &[u8], usize) -> serde_json::Result<usize>,
) -> serde_json::Result<RecordHead> {
    thread_local! {
        // The copy's buffer, kept per parser thread: a new kilobyte per line is a "large"
        // request to glibc's malloc, which then consolidates its free lists every time (a
        // tenth of a report's CPU). Taken out while in use, so nothing is borrowed across `big`.
        static HEAD: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut head = HEAD.take();
    head.clear();
    let parsed = split_record_into(&mut head, line, &mut big);
    HEAD.set(head);
    parsed
}

fn split_record_into(
    head: &mut Vec<u8>,
    line: &[u8],
    big: &mut impl FnMut(Big, &[u8], usize) -> serde_json::Result<usize>,
) -> serde_json::Result<RecordHead> {
    head.push(b'{');
    let mut top = scan::Members::new(line, 0, true);
    while let Some(k) = top.next_key().map_err(scan::json_error)? {
        let end = match &*k.key {
            "payload" if !line[k.value..].starts_with(b"null") => big(Big::Payload, line, k.value)?,
            "extra" => big(Big::Extra, line, k.value)?,
            key => {
                let end = scan::skip_value(line, k.value).map_err(scan::json_error)?;
                if key != "payload" {
                    if head.len() > 1 {
                        head.push(b',');
                    }
                    head.extend_from_slice(&line[k.start..end]);
                }
                end
            }
        };
        top.value_ends_at(end).map_err(scan::json_error)?;
    }
    head.push(b'}');
    // One UTF-8 check of the copy, not one per string; its place in the copy is no place in
    // the line.
    let head = std::str::from_utf8(head).map_err(scan::json_error)?;
    serde_json::from_str(head).map_err(|e| scan::json_error(scan::without_place(e)))
}

/// A record as [`RunRecord::for_accounting`] keeps it, parsed without building what it drops.
pub struct ForAccounting(pub RunRecord);

impl RunLine for ForAccounting {
    fn parse(line: &[u8]) -> serde_json::Result<Self> {
        let skip = |_, line: &[u8], at| scan::skip_value(line, at).map_err(scan::json_error);
        split_record(line, skip).map(|h| Self(h.record()))
    }
}

/// One journal line, its run record parsed as `R`.
enum Line<R> {
    Run(R),
    Resume(Box<ResumeNote>),
    Sweep,
}

/// One journal line. A run record as ocrig writes it (its `type` tag first) is parsed straight
/// into `R` (which ignores the tag): serde's internally tagged [`Entry`] would first buffer the
/// whole line as a generic tree, which costs about as much again.
fn parse_entry<R: RunLine>(line: &[u8]) -> serde_json::Result<Line<R>> {
    if line.starts_with(br#"{"type":"run","#) {
        return R::parse(line).map(Line::Run);
    }
    Ok(match serde_json::from_slice::<Entry>(line)? {
        Entry::Run(_) => Line::Run(R::parse(line)?),
        Entry::Resume(n) => Line::Resume(n),
        Entry::Sweep(_) => Line::Sweep,
    })
}

/// The run record whose line starts `offset` bytes into the journal at `path` (a results
/// directory or the file), read again: a report keeps where a record is, not what only a few
/// of its records are drawn from.
pub fn read_record_at(path: &Path, offset: u64) -> anyhow::Result<RunRecord> {
    use std::io::BufRead;
    let file_path = journal_file(path);
    let mut f = File::open(&file_path).with_context(|| format!("opening {}", file_path.display()))?;
    f.seek(SeekFrom::Start(offset))?;
    let mut line = Vec::new();
    std::io::BufReader::new(f).read_until(b'\n', &mut line)?;
    match parse_entry::<RunRecord>(&line) {
        Ok(Line::Run(r)) => Ok(r),
        Ok(_) => anyhow::bail!("{}: no run record at byte {offset}", file_path.display()),
        Err(e) => anyhow::bail!(
            "{}: byte {offset}: malformed journal line: {e}",
            file_path.display()
        ),
    }
}

/// The journal file of `path`: a results directory's `journal.jsonl`, or `path` itself.
pub fn journal_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(JOURNAL_FILE)
    } else {
        path.to_path_buf()
    }
}

/// A journal read by [`read_mapped`]: its header, each record as `map` made it, the resume
/// notes.
#[derive(Debug)]
pub struct Mapped<T> {
    pub header: SweepHeader,
    pub runs: Vec<T>,
    pub resumes: Vec<ResumeNote>,
}

/// Bytes handed to one parser at a time: whole lines, about this much.
pub const CHUNK: usize = 4 << 20;

/// Reads a journal (a results directory or the file itself) line by line, turning each run
/// record into `map(header, state, record)` as soon as it is parsed, so a caller that keeps a
/// small digest of each record holds only those, never the journal. Lines are parsed on every
/// CPU (`state` is one per parser thread; results keep journal order). With `progress`, a bar
/// on stderr tells how far it is once reading has taken longer than a second (indicatif draws
/// nothing when stderr is not a terminal).
///
/// A torn tail (bytes after the last newline: a crash mid-write, whatever they hold) is
/// ignored, and so is a malformed last whole line (an older ocrig appended onto a torn tail);
/// any other malformed line is a [`NotAJournal`] error naming its number.
#[cfg(test)] // readers pick what to parse of a record (read_lines)
pub fn read_mapped<T, S, F>(path: &Path, progress: bool, map: F) -> anyhow::Result<Mapped<T>>
where
    T: Send,
    S: Default,
    F: Fn(&SweepHeader, &mut S, RunRecord) -> T + Sync,
{
    read_lines(path, progress, CHUNK, |h, s, _, r| map(h, s, r))
}

/// [`read_mapped`] with each run record parsed as `R` and `map` told where its line starts in
/// the file (`map(header, state, offset, record)`; [`read_record_at`] reads it again);
/// parsers take `chunk` bytes at a time ([`CHUNK`]; tests make it small).
pub fn read_lines<R, T, S, F>(path: &Path, progress: bool, chunk: usize, map: F) -> anyhow::Result<Mapped<T>>
where
    R: RunLine,
    T: Send,
    S: Default,
    F: Fn(&SweepHeader, &mut S, u64, R) -> T + Sync,
{
    use std::io::BufRead;
    let file_path = journal_file(path);
    let cannot = |e: std::io::Error| {
        NotAJournal(format!(
            "{}: cannot read the journal: {e} (expected a results directory of `ocrig run`)",
            file_path.display()
        ))
    };
    let bad = |line: usize, what: String| -> anyhow::Error {
        NotAJournal(format!("{}:{line}: {what}", file_path.display())).into()
    };
    let file = File::open(&file_path).map_err(cannot)?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);

    // The header: the first non-blank whole line.
    let mut line_no = 0usize;
    let mut consumed = 0u64;
    let mut line = Vec::new();
    let header = loop {
        line.clear();
        let n = input.read_until(b'\n', &mut line).map_err(cannot)?;
        if n == 0 || line.last() != Some(&b'\n') {
            return Err(NotAJournal(format!(
                "{}: no sweep header line (expected a journal written by `ocrig run`)",
                file_path.display()
            ))
            .into());
        }
        line_no += 1;
        consumed += n as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        newer_format(&line).map_err(|what| bad(line_no, what))?;
        match serde_json::from_slice::<Entry>(&line) {
            Ok(Entry::Sweep(h)) => break *h,
            Ok(_) => {
                return Err(bad(
                    line_no,
                    "expected the sweep header as the journal's first line, found a record".into(),
                ));
            }
            Err(e) => {
                return Err(bad(
                    line_no,
                    format!(
                        "expected the sweep header of an ocrig journal, found a line that is not one ({e})"
                    ),
                ));
            }
        }
    };

    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::hidden());
    if progress {
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "reading {msg} [{bar:30}] {bytes}/{total_bytes} ({eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(file_path.display().to_string());
    }
    bar.set_position(consumed);
    let started = std::time::Instant::now();

    /// Whole lines of the journal (numbered by the collector, from the line counts of the
    /// chunks before: the reader only finds the last newline).
    struct Chunk {
        index: usize,
        /// Where its first line starts in the file.
        offset: u64,
        bytes: Vec<u8>,
    }
    enum Item<T> {
        Run(T),
        Resume(Box<ResumeNote>),
    }
    /// A chunk parsed: its items, its lines, and the first malformed line (its index in the
    /// chunk, what, whether it was the chunk's last line).
    struct Parsed<T> {
        index: usize,
        items: Vec<Item<T>>,
        bytes: usize,
        lines: usize,
        malformed: Option<(usize, String, bool)>,
    }
    // Parses a chunk; its buffer goes back to the reader (`free`) for a later chunk.
    let parse_chunk = |state: &mut S, c: Chunk, free: &std::sync::mpsc::SyncSender<Vec<u8>>| -> Parsed<T> {
        let mut items = Vec::new();
        let mut malformed = None;
        let body = c.bytes.strip_suffix(b"\n").unwrap_or(&c.bytes);
        // memchr finds the newlines a word at a time (a byte loop cost 5 % of a report).
        let mut lines = 0;
        let mut at = c.offset;
        let mut start = 0;
        for (i, end) in memchr::memchr_iter(b'\n', body).chain([body.len()]).enumerate() {
            let l = &body[start..end];
            start = end + 1;
            lines = i + 1;
            let offset = at;
            at += l.len() as u64 + 1;
            if l.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse_entry::<R>(l) {
                Ok(Line::Run(r)) => items.push(Item::Run(map(&header, state, offset, r))),
                Ok(Line::Resume(n)) => items.push(Item::Resume(n)),
                // A resumed sweep may re-state its header; the first one stands.
                Ok(Line::Sweep) => {}
                Err(e) => {
                    let last = end == body.len();
                    malformed = Some((i, format!("malformed journal line: {e}"), last));
                    break;
                }
            }
        }
        let bytes = c.bytes.len();
        // Full (the reader has spares) or gone (it is done): the buffer is dropped.
        let _ = free.try_send(c.bytes);
        Parsed {
            index: c.index,
            items,
            bytes,
            lines,
            malformed,
        }
    };

    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).max(1);
    let (chunk_tx, chunk_rx) = std::sync::mpsc::sync_channel::<Chunk>(2 * workers);
    // Parsed chunks' buffers, for the reader to fill again: a new 4 MiB buffer per chunk is
    // fresh pages from the kernel, zeroed and faulted in (13 % of a report's time).
    let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(3 * workers);
    let chunk_rx = std::sync::Mutex::new(chunk_rx);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Parsed<T>>();
    // Set when the collector stops early (a malformed line): the reader stops reading and the
    // parsers drain what is queued without parsing it, so every thread ends.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut runs = Vec::new();
    let mut resumes = Vec::new();
    let outcome: anyhow::Result<()> = std::thread::scope(|scope| {
        for _ in 0..workers {
            let (rx, tx, stop, free) = (&chunk_rx, done_tx.clone(), &stop, free_tx.clone());
            let parse_chunk = &parse_chunk;
            scope.spawn(move || {
                let mut state = S::default();
                loop {
                    let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(chunk) = next else { break };
                    if !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = tx.send(parse_chunk(&mut state, chunk, &free));
                    }
                }
            });
        }
        drop(done_tx);
        drop(free_tx);
        // The reader: whole lines only, in chunks; what follows the last newline is a torn
        // write and never parsed.
        let stop_reading = &stop;
        let header_bytes = consumed;
        let reader = scope.spawn(move || -> std::io::Result<usize> {
            let mut index = 0;
            let mut offset = header_bytes;
            let mut carry: Vec<u8> = Vec::new();
            loop {
                let mut buf = free_rx.try_recv().unwrap_or_default();
                buf.clear();
                buf.append(&mut carry);
                buf.reserve(chunk + (1 << 16));
                // Into the buffer's spare room, never zeroed first.
                let got = (&mut input).take(chunk as u64).read_to_end(&mut buf)?;
                let eof = got < chunk;
                let Some(last_nl) = buf.iter().rposition(|&b| b == b'\n') else {
                    if eof {
                        return Ok(index);
                    }
                    carry = buf;
                    continue;
                };
                carry = buf[last_nl + 1..].to_vec();
                buf.truncate(last_nl + 1);
                let len = buf.len() as u64;
                let chunk = Chunk {
                    index,
                    offset,
                    bytes: buf,
                };
                index += 1;
                offset += len;
                if stop_reading.load(std::sync::atomic::Ordering::Relaxed)
                    || chunk_tx.send(chunk).is_err()
                    || eof
                {
                    return Ok(index);
                }
            }
        });
        let mut waiting: BTreeMap<usize, Parsed<T>> = BTreeMap::new();
        let mut next = 0usize;
        let mut first_line = line_no + 1;
        let mut soft: Option<(usize, String)> = None;
        let fail = |e: anyhow::Error| -> anyhow::Result<()> {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            Err(e)
        };
        for parsed in done_rx.iter() {
            waiting.insert(parsed.index, parsed);
            while let Some(p) = waiting.remove(&next) {
                next += 1;
                if let Some((line, what)) = soft.take() {
                    // Something followed the malformed line: it was not the last.
                    if !p.items.is_empty() || p.malformed.is_some() || p.bytes > 0 {
                        return fail(bad(line, what));
                    }
                }
                consumed += p.bytes as u64;
                for item in p.items {
                    match item {
                        Item::Run(t) => runs.push(t),
                        Item::Resume(n) => resumes.push(*n),
                    }
                }
                match p.malformed {
                    Some((i, what, true)) => soft = Some((first_line + i, what)),
                    Some((i, what, false)) => return fail(bad(first_line + i, what)),
                    None => {}
                }
                first_line += p.lines;
                if progress {
                    if started.elapsed() > std::time::Duration::from_secs(1) && bar.is_hidden() {
                        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                    }
                    bar.set_position(consumed);
                }
            }
        }
        // Every parser is done, so the reader is too (or failed).
        let chunks = reader.join().unwrap_or(Ok(0)).map_err(cannot)?;
        anyhow::ensure!(
            next == chunks,
            "journal reader stopped early at chunk {next} of {chunks}"
        );
        // A malformed last whole line is an older ocrig's torn tail: ignored.
        Ok(())
    });
    bar.finish_and_clear();
    outcome?;
    Ok(Mapped {
        header,
        runs,
        resumes,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn header() -> SweepHeader {
        SweepHeader {
            scenario: "t".into(),
            scenario_sha256: "00".into(),
            baseline: "base".into(),
            variants: vec!["base".into()],
            levels: vec![1.0],
            workloads: BTreeMap::new(),
            backend: "qemu".into(),
            accel: "tcg".into(),
            host_cpus: vec![0, 1],
            guest_vcpus: 1,
            scenario_path: None,
            kernels: BTreeMap::new(),
            kernel_identity: BTreeMap::new(),
            schedule: None,
            started_at: "now".into(),
            ocrig_version: "0".into(),
            guest_start: None,
            hosts: Vec::new(),
            journal_format: JOURNAL_FORMAT,
            payload_sha256: None,
            images: BTreeMap::new(),
            margin: None,
            looks: None,
            host_speed: None,
            host_handover: None,
            noise_floor: None,
            host: None,
        }
    }

    fn record(run: u32) -> RunRecord {
        RunRecord {
            variant: "base".into(),
            level: 1.0,
            workload: "lock".into(),
            run,
            warmup: false,
            guest: 0,
            guests: 1,
            host: None,
            ok: true,
            error: None,
            attempt: 1,
            superseded: None,
            attempt_records: Some(1),
            slot: None,
            metrics: BTreeMap::from([("ops_per_sec".into(), 1.5)]),
            payload: None,
            argv: vec![],
            timings: BTreeMap::new(),
            extra: Default::default(),
            finished_at: "now".into(),
        }
    }

    #[test]
    fn append_then_read_back_ignoring_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = JournalWriter::open(dir.path()).unwrap();
        w.append(&Entry::Sweep(Box::new(header()))).unwrap();
        w.append(&Entry::Run(Box::new(record(0)))).unwrap();
        w.append(&Entry::Run(Box::new(record(1)))).unwrap();
        drop(w);
        let path = dir.path().join(JOURNAL_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"type\":\"run\",\"variant\":").unwrap();
        let j = Journal::read(dir.path()).unwrap();
        assert_eq!(j.header, header());
        assert_eq!(j.runs, vec![record(0), record(1)]);
    }

    fn whole_journal(dir: &Path) -> Vec<u8> {
        let mut w = JournalWriter::open(dir).unwrap();
        w.append(&Entry::Sweep(Box::new(header()))).unwrap();
        let mut r = record(0);
        // A multi-byte character near the end, as a console tail carries them.
        r.extra.insert("console_tail".into(), "naïve → ü".into());
        w.append_all(&[Entry::Run(Box::new(record(1))), Entry::Run(Box::new(r))])
            .unwrap();
        std::fs::read(dir.join(JOURNAL_FILE)).unwrap()
    }

    #[test]
    fn each_record_is_read_again_at_its_offset_and_parsed_for_accounting_as_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        whole_journal(dir.path());
        // A resume note and a re-stated header between records, as a resumed sweep writes.
        let mut w = JournalWriter::open(dir.path()).unwrap();
        let note = ResumeNote {
            at: "now".into(),
            ocrig_version: "0".into(),
            runs_on: header().runs_on(),
            accepted_changes: Vec::new(),
        };
        let mut r = record(3);
        r.payload = None;
        r.timings.insert("run_s".into(), 1.5);
        r.argv = vec!["lock".into()];
        r.extra
            .insert("vcpu_sched".into(), serde_json::json!({"wall_s": 1.0}));
        w.append_all(&[
            Entry::Resume(Box::new(note.clone())),
            Entry::Sweep(Box::new(header())),
            Entry::Run(Box::new(r)),
        ])
        .unwrap();
        let full = Journal::read(dir.path()).unwrap().runs;
        for chunk in [1 << 20, 100] {
            let read = read_lines(dir.path(), false, chunk, |_, _: &mut (), offset, r: RunRecord| {
                (offset, r)
            })
            .unwrap();
            assert_eq!(read.resumes, vec![note.clone()]);
            for ((offset, r), whole) in read.runs.iter().zip(&full) {
                assert_eq!(r, whole);
                assert_eq!(
                    &read_record_at(dir.path(), *offset).unwrap(),
                    whole,
                    "at {offset}"
                );
            }
            let trimmed =
                read_lines(dir.path(), false, chunk, |_, _: &mut (), _, r: ForAccounting| r.0).unwrap();
            let expected: Vec<RunRecord> = full.iter().cloned().map(RunRecord::for_accounting).collect();
            assert_eq!(trimmed.runs, expected, "chunk {chunk}");
        }
        // The header's line is no record.
        assert!(read_record_at(dir.path(), 0).is_err());
    }

    #[test]
    fn a_tail_torn_at_any_byte_is_cut_before_appending_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let whole = whole_journal(dir.path());
        let last_start = whole[..whole.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .unwrap()
            + 1;
        for cut in last_start + 1..whole.len() {
            let path = dir.path().join(JOURNAL_FILE);
            std::fs::write(&path, &whole[..cut]).unwrap();
            // Reading never fails on a torn tail, even one that splits a UTF-8 character.
            let j = Journal::read(dir.path()).unwrap();
            assert_eq!(j.runs, vec![record(1)], "cut at {cut}");
            let mut w = JournalWriter::open(dir.path()).unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                &whole[..last_start],
                "cut at {cut}"
            );
            w.append(&Entry::Run(Box::new(record(2)))).unwrap();
            let j = Journal::read(dir.path()).unwrap();
            assert_eq!(j.runs, vec![record(1), record(2)], "cut at {cut}");
            let aside: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().contains(".torn-"))
                .collect();
            assert_eq!(aside.len(), 1);
            assert_eq!(std::fs::read(&aside[0]).unwrap(), &whole[last_start..cut]);
            std::fs::remove_file(&aside[0]).unwrap();
        }
    }

    #[test]
    fn a_failed_append_is_taken_back_and_every_later_one_fails_too() {
        let dir = tempfile::tempdir().unwrap();
        // /dev/full fails every write with ENOSPC, as a full disk does.
        std::os::unix::fs::symlink("/dev/full", dir.path().join(JOURNAL_FILE)).unwrap();
        let mut w = JournalWriter::open(dir.path()).unwrap();
        let e = w.append(&Entry::Run(Box::new(record(0)))).unwrap_err();
        let failed = e
            .downcast_ref::<JournalWriteFailed>()
            .expect("a JournalWriteFailed");
        assert!(failed.cause.contains("No space left"), "{e}");
        assert!(e.to_string().contains(JOURNAL_FILE), "{e}");
        let again = w.append(&Entry::Run(Box::new(record(1)))).unwrap_err();
        assert!(again.to_string().contains("an earlier append failed"), "{again}");
    }

    #[test]
    fn not_a_journal_is_refused_naming_the_file_and_what_was_expected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let run = serde_json::to_string(&Entry::Run(Box::new(record(0)))).unwrap();
        for (text, expected) in [
            (format!("{run}\n"), "expected the sweep header"),
            ("hello\n".to_string(), "expected the sweep header"),
            (String::new(), "no sweep header"),
            (
                r#"{"type":"sweep","journal_format":3,"ocrig_version":"9.0.0"}"#.to_string() + "\n",
                "written by ocrig 9.0.0 in journal format 3",
            ),
        ] {
            std::fs::write(&path, &text).unwrap();
            let e = Journal::read(dir.path()).unwrap_err();
            assert!(e.is::<NotAJournal>(), "{e:#}");
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()) && msg.contains(expected),
                "{msg}"
            );
        }
    }

    /// A journal line exactly as ocrig wrote it before attempts were settled and boots shared.
    pub(crate) const OLD_FORMAT_RUN: &str = r#"{"type":"run","variant":"base","level":0.5,"workload":"lock-tas","run":0,"warmup":false,"guest":0,"guests":1,"ok":true,"attempt":1,"metrics":{"ops_per_sec":123.5},"argv":["lock","--algo","tas"],"timings":{"run_s":1.6},"extra":{"start_skew_us":0.0},"finished_at":"2026-11-30T10:00:00Z"}"#;

    #[test]
    fn journals_of_older_versions_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let h = r#"{"type":"sweep","scenario":"smoke","scenario_sha256":"00","baseline":"base","variants":["base"],"levels":[0.5],"workloads":{"lock-tas":{"command":"lock","metric":"ops_per_sec","better":"higher"}},"backend":"qemu","accel":"tcg","host_cpus":[0,1],"guest_vcpus":1,"started_at":"2026-11-30T10:00:00Z","ocrig_version":"0.1.0"}"#;
        std::fs::write(dir.path().join(JOURNAL_FILE), format!("{h}\n{OLD_FORMAT_RUN}\n")).unwrap();
        let j = Journal::read(dir.path()).unwrap();
        assert_eq!(j.header.schedule, None);
        let r = &j.runs[0];
        assert_eq!(
            (r.superseded.as_deref(), r.attempt_records, r.slot),
            (None, None, None)
        );
        assert_eq!(r.metrics["ops_per_sec"], 123.5);
    }

    #[test]
    fn a_schedule_without_blocks_reads_and_one_with_them_round_trips() {
        let before: ScheduleInfo = serde_json::from_str(
            r#"{"guests":"shared","order":"round-robin","boots":[{"level":1.0,"guests":2,"variants":["a"]}]}"#,
        )
        .unwrap();
        assert_eq!(before.runs_per_bring_up, None);
        let blocked = ScheduleInfo {
            runs_per_bring_up: Some(2),
            ..before
        };
        let text = serde_json::to_string(&blocked).unwrap();
        assert!(text.contains(r#""runs_per_bring_up":2"#), "{text}");
        assert_eq!(serde_json::from_str::<ScheduleInfo>(&text).unwrap(), blocked);
    }

    #[test]
    fn malformed_middle_line_is_an_error_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let h = serde_json::to_string(&Entry::Sweep(Box::new(header()))).unwrap();
        std::fs::write(&path, format!("{h}\nnot json\n{h}\n")).unwrap();
        let e = Journal::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains(":2:"), "{e}");
    }
}
