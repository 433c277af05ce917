//! The append-only results journal: `journal.jsonl` in a results directory.
//!
//! The first line is a [`SweepHeader`] (what was asked); every later line is a [`RunRecord`]
//! (one guest's result of one run), appended and fsync'd as soon as it is known, so a crash
//! loses nothing that had finished. Statistics and reports are computed from this file alone.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub const JOURNAL_FILE: &str = "journal.jsonl";

pub use crate::vocabulary::Better;
use crate::vocabulary::{GuestSharing, RunOrder};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Entry {
    Sweep(Box<SweepHeader>),
    Run(Box<RunRecord>),
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadInfo {
    /// Payload subcommand, e.g. `lock`.
    pub command: String,
    /// The headline metric (a key of the payload's `metrics`).
    pub metric: String,
    pub better: Better,
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
    /// The payload's full JSON report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<ocrig_payload::report::Report>,
    /// Exact payload command line run in the guest.
    pub argv: Vec<String>,
    /// Phase timings of this run, milliseconds.
    pub timings: BTreeMap<String, f64>,
    /// Anything else measured around the run (telemetry, start skew, console tail).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
    pub finished_at: String,
}

/// Appends entries to a journal, fsync'ing each one.
pub struct JournalWriter {
    file: File,
    path: PathBuf,
}

impl JournalWriter {
    /// Opens (creating if needed) `dir/journal.jsonl` for appending.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening journal {}", path.display()))?;
        Ok(Self { file, path })
    }

    pub fn append(&mut self, entry: &Entry) -> anyhow::Result<()> {
        self.append_all(std::slice::from_ref(entry))
    }

    /// Appends entries with one write and one fsync (an attempt's records land together; should
    /// a crash cut the write short, [`RunRecord::attempt_records`] tells the attempt is partial).
    pub fn append_all(&mut self, entries: &[Entry]) -> anyhow::Result<()> {
        let mut text = String::new();
        for e in entries {
            text.push_str(&serde_json::to_string(e)?);
            text.push('\n');
        }
        self.file
            .write_all(text.as_bytes())
            .and_then(|_| self.file.sync_data())
            .with_context(|| format!("appending to {}", self.path.display()))
    }
}

/// A journal read back: the header and every complete run record, in order.
#[derive(Debug, Clone)]
pub struct Journal {
    pub header: SweepHeader,
    pub runs: Vec<RunRecord>,
}

impl Journal {
    /// Reads `dir/journal.jsonl` (or the file itself if `path` is a file). A torn last line (a
    /// crash mid-write) is ignored; any other malformed line is an error naming its number.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file_path = if path.is_dir() {
            path.join(JOURNAL_FILE)
        } else {
            path.to_path_buf()
        };
        let file =
            File::open(&file_path).with_context(|| format!("opening journal {}", file_path.display()))?;
        let lines: Vec<String> = BufReader::new(file)
            .lines()
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading {}", file_path.display()))?;
        let mut header = None;
        let mut runs = Vec::new();
        let last = lines.len();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry: Entry = match serde_json::from_str(line) {
                Ok(e) => e,
                Err(_) if i + 1 == last => break,
                Err(e) => anyhow::bail!("{}:{}: malformed journal line: {e}", file_path.display(), i + 1),
            };
            match entry {
                Entry::Sweep(h) if header.is_none() => header = Some(*h),
                Entry::Sweep(_) => {} // a resumed sweep re-states its header; the first one stands
                Entry::Run(r) => runs.push(*r),
            }
        }
        let header = header.with_context(|| format!("{}: no sweep header line", file_path.display()))?;
        Ok(Self { header, runs })
    }
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
    fn malformed_middle_line_is_an_error_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let h = serde_json::to_string(&Entry::Sweep(Box::new(header()))).unwrap();
        std::fs::write(&path, format!("{h}\nnot json\n{h}\n")).unwrap();
        let e = Journal::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains(":2:"), "{e}");
    }
}
