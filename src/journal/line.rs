//! One journal line parsed for what its reader needs: the small fields of a run record parsed
//! with serde, its big values (payload, extra) handed to the reader to read or skip.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::*;

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
/// those to its caller); `argv` and `timings` must be there but are skipped. It repeats
/// [`RunRecord`]'s fields rather than share them through `#[serde(flatten)]`: flattened, serde
/// buffers every field it does not know (the kilobytes of `payload` and `extra`) into a tree
/// first, 3.8x slower over real records (2026-12-05), on the path `--resume` takes a million
/// records through.
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
    pub attempt_records: u32,
    pub slot: Slot,
    pub metrics: BTreeMap<String, f64>,
    #[serde(default)]
    pub slices: Option<u32>,
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
            slices: self.slices,
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
pub(super) enum Line<R> {
    Run(R),
    Resume(Box<ResumeNote>),
    Sweep,
}

/// One journal line. A run record as ocrig writes it (its `type` tag first) is parsed straight
/// into `R` (which ignores the tag): serde's internally tagged [`Entry`] would first buffer the
/// whole line as a generic tree, which costs about as much again.
pub(super) fn parse_entry<R: RunLine>(line: &[u8]) -> serde_json::Result<Line<R>> {
    if line.starts_with(br#"{"type":"run","#) {
        return R::parse(line).map(Line::Run);
    }
    Ok(match serde_json::from_slice::<Entry>(line)? {
        Entry::Run(_) => Line::Run(R::parse(line)?),
        Entry::Resume(n) => Line::Resume(n),
        Entry::Sweep(_) => Line::Sweep,
    })
}
