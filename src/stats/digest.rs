//! A report's compact digest of each journal record: what the statistics read of it (its run,
//! standing, headline numbers and every figure that explains a cell), taken by [`digest`] as
//! the record is parsed, so a report of a million records holds a million digests (a few
//! hundred bytes each), never the records (kilobytes each, with their telemetry).
//!
//! A streamed journal's records are parsed only as far as a digest reads them ([`ForReport`]:
//! the payload report's lock and profile fields, the telemetry the figures are computed from);
//! what a report draws from only a few records (the vCPU timeline of a cell's first counted
//! run) stays in the journal, and the digest says where ([`TimelineAt`]).
//!
//! A new per-record figure is one more field of [`RunDigest`] and one more call in [`digest`]
//! of the pure function that computes it from a `&RunRecord`; if it reads a part of the record
//! [`ForReport`] skips, that part joins its list of kept keys.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use super::explain::{self, HostOtherPart, RecordContext};
#[cfg(test)]
use crate::journal::Journal;
use crate::journal::accounting::{Attempted, GuestSet, Headline};
use crate::journal::{RecordHead, RunLine, RunRecord, SweepHeader};
use crate::report::timeline::TimelineAt;
#[cfg(test)]
use crate::report::timeline::TimelineRef;

/// Why a figure was not measured (shared: most records give one of a few reasons).
pub type Why = Arc<str>;
/// A per-run figure, or why it was not measured.
pub type Figure = Result<f64, Why>;
/// KVM counters (name → count over the run), or why there are none.
pub type Counters = Result<Keyed<u64>, Why>;

/// Values by name, in name order, the names shared by every digest of a parser thread that has
/// the same ones (a sweep's records all report the same metrics and counters).
#[derive(Debug, Clone, PartialEq)]
pub struct Keyed<V> {
    /// (A thin pointer: a digest holds two of these.)
    keys: Keys,
    values: Box<[V]>,
}

/// A shared list of names.
type Keys = Arc<Vec<Arc<str>>>;

impl<V> Default for Keyed<V> {
    fn default() -> Self {
        Self {
            keys: Arc::new(Vec::new()),
            values: Box::new([]),
        }
    }
}

impl<V: Copy> Keyed<V> {
    /// `pairs` (in name order), their names from `names`.
    fn of(pairs: &std::collections::BTreeMap<String, V>, names: &mut Names) -> Self {
        Self {
            keys: names.keys(pairs.keys().map(String::as_str)),
            values: pairs.values().copied().collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<V> {
        self.keys
            .binary_search_by(|k| k.as_ref().cmp(name))
            .ok()
            .map(|i| self.values[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, V)> + '_ {
        self.keys.iter().zip(self.values.iter().copied())
    }
}

/// What the reports read of one journal record.
#[derive(Debug, Clone, PartialEq)]
pub struct RunDigest {
    pub variant: Arc<str>,
    pub level: f64,
    pub workload: Arc<str>,
    pub run: u32,
    pub warmup: bool,
    pub guest: u32,
    pub host: Option<Arc<str>>,
    /// The boot group and bring-up that ran it ([`crate::journal::Slot`]), if the record says:
    /// warm-ups count once per guest set.
    pub slot: Option<(u32, u32)>,
    pub ok: bool,
    /// Marked superseded (some guest of its attempt failed).
    pub superseded: bool,
    pub attempt: u32,
    pub attempt_records: Option<u32>,
    /// The payload's own words when it rejected this run by a self-check.
    pub self_check: Option<Why>,
    /// The payload's headline numbers (name → value), in name order.
    pub metrics: Keyed<f64>,
    /// [`explain::vcpu_wait`].
    pub vcpu_wait: Figure,
    /// [`explain::guest_steal`].
    pub guest_steal: Figure,
    /// This record's part of its run's [`explain::host_other`].
    pub host_other: HostOtherPart<Why>,
    /// [`explain::kvm_counters`].
    pub kvm: Counters,
    /// [`explain::pv_words`]: whether the boot facts name guests, and their PV lines.
    /// (Boxed: only an attempt's first record carries boot facts.)
    pub pv_words: Option<Box<(bool, Box<[Why]>)>>,
    /// [`super::preemption::of_record`]: stretched lock holds and hand-overs (lock runs).
    pub preemption: Option<Box<super::preemption::RunPreemption>>,
    /// The guest kernel's profile of the run (`kernel.profile`), when it was sampled: at most
    /// the payload's stored stacks, so only profiled sweeps pay for it.
    pub profile: Option<Box<ocrig_payload::probe::profile::Profile>>,
    /// Where the host's vCPU timeline summary is (`extra.timeline`, on the attempt's first
    /// record; every record of a one-guest sweep carries one): the report draws one per cell,
    /// so a streamed digest keeps the record's place in the journal, not the summary.
    pub timeline: Option<TimelineAt>,
}

/// One copy of each name and reason a parser thread has seen, shared by its digests.
#[derive(Debug, Default)]
pub struct Names {
    names: HashMap<Box<str>, Arc<str>>,
    /// Lists of names (of metrics, of counters) seen, most recent first.
    lists: Vec<Keys>,
}

impl Names {
    pub fn name(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.names.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        // Reasons may carry numbers that differ per record; keep the table bounded.
        if self.names.len() < 4096 {
            self.names.insert(Box::from(s), a.clone());
        }
        a
    }

    /// One shared copy of this list of names.
    pub fn keys<'a>(&mut self, keys: impl Iterator<Item = &'a str> + Clone) -> Keys {
        let n = keys.clone().count();
        let same = |l: &Keys| l.len() == n && l.iter().map(|k| &**k).eq(keys.clone());
        if let Some(i) = self.lists.iter().position(same) {
            // A sweep alternates between a few lists: keep the latest at the front.
            self.lists[..=i].rotate_right(1);
            return self.lists[0].clone();
        }
        let list: Keys = Arc::new(keys.map(|k| self.name(k)).collect());
        self.lists.insert(0, list.clone());
        self.lists.truncate(64);
        list
    }
}

/// The digest of one record: every per-record figure a report shows, computed here by the
/// functions that compute it from the record.
#[cfg(test)] // a streamed journal's records are digested as parsed (`ForReport`)
pub fn digest(r: &RunRecord, ctx: &RecordContext, names: &mut Names) -> RunDigest {
    let timeline = r
        .extra
        .get("timeline")
        .map(|t| TimelineAt::Here(Box::new(TimelineRef::of(t))));
    digest_with(r, r.payload.as_ref().map(|p| &p.detail), timeline, ctx, names)
}

/// [`digest`] of a record whose payload report's workload fields are `detail` and whose
/// timeline is at `timeline`.
fn digest_with(
    r: &RunRecord,
    detail: Option<&Map<String, Value>>,
    timeline: Option<TimelineAt>,
    ctx: &RecordContext,
    names: &mut Names,
) -> RunDigest {
    use crate::journal::SELF_CHECK_REASON;
    let mut why = |e: String| names.name(&e);
    let vcpu_wait = explain::vcpu_wait(r, ctx).map_err(&mut why);
    let guest_steal = explain::guest_steal(r, ctx).map_err(&mut why);
    let host_other = explain::host_other_part(r, ctx).map_err(&mut why);
    let kvm = explain::kvm_counters(r, ctx).map_err(&mut why);
    let kvm = kvm.map(|c| Keyed::of(&c, names));
    let pv_words =
        explain::pv_words(r).map(|w| Box::new((w.guests, w.lines.iter().map(|l| names.name(l)).collect())));
    RunDigest {
        variant: names.name(&r.variant),
        level: r.level,
        workload: names.name(&r.workload),
        run: r.run,
        warmup: r.warmup,
        guest: r.guest,
        host: r.host.as_deref().map(|h| names.name(h)),
        slot: r.slot.map(|s| (s.boot, s.bring_up)),
        ok: r.ok,
        superseded: r.superseded.is_some(),
        attempt: r.attempt,
        attempt_records: r.attempt_records,
        self_check: r
            .error
            .as_deref()
            .and_then(|e| e.strip_prefix(SELF_CHECK_REASON))
            .map(|w| names.name(w)),
        metrics: Keyed::of(&r.metrics, names),
        vcpu_wait,
        guest_steal,
        host_other,
        kvm,
        pv_words,
        preemption: detail.and_then(super::preemption::of_detail).map(Box::new),
        profile: detail.and_then(profile_of_detail).map(Box::new),
        timeline,
    }
}

/// The kernel profile a record's payload report carries, if any.
#[cfg(test)] // digests take it from the report's fields
pub fn profile_of(r: &RunRecord) -> Option<ocrig_payload::probe::profile::Profile> {
    profile_of_detail(&r.payload.as_ref()?.detail)
}

fn profile_of_detail(detail: &Map<String, Value>) -> Option<ocrig_payload::probe::profile::Profile> {
    serde::Deserialize::deserialize(detail.get("kernel")?.get("profile")?).ok()
}

/// A run record's line parsed as far as [`digest`] reads it: the record without its payload
/// report and telemetry but for [`DETAIL_KEYS`] of the report (in `detail`) and
/// [`EXTRA_KEYS`] of the telemetry; of its timeline summary only whether there is one.
pub struct ForReport {
    pub record: RunRecord,
    pub detail: Option<Map<String, Value>>,
    pub timeline: bool,
}

/// The payload report's fields a digest reads ([`super::preemption::of_detail`],
/// [`profile_of`]).
pub const DETAIL_KEYS: [&str; 3] = ["preemption", "preemption_unavailable", "kernel"];
/// The record's `extra` fields a digest reads (the functions of [`explain`]).
pub const EXTRA_KEYS: [&str; 5] = ["vcpu_sched", "guest_stat", "host_stat", "kvm", "group"];

impl RunLine for ForReport {
    fn parse(line: &[u8]) -> serde_json::Result<Self> {
        let mut head: RecordHead<Kept<false>, Kept<true>> = serde_json::from_slice(line)?;
        let detail = head.payload.take().map(|p| p.fields);
        let extra = std::mem::take(&mut head.extra);
        let timeline = extra.timeline;
        let mut record = head.record();
        record.extra = extra.fields;
        Ok(Self {
            record,
            detail,
            timeline,
        })
    }
}

/// A JSON object's fields named in [`EXTRA_KEYS`] (`EXTRA`) or [`DETAIL_KEYS`]; the others
/// are skipped unbuilt.
#[derive(Default)]
struct Kept<const EXTRA: bool> {
    fields: Map<String, Value>,
    /// A `timeline` field was there.
    timeline: bool,
}

impl<'de, const EXTRA: bool> serde::Deserialize<'de> for Kept<EXTRA> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const E: bool>;
        impl<'de, const E: bool> Visitor<'de> for V<E> {
            type Value = Kept<E>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept<E>, A::Error> {
                let mut kept = Kept::<E>::default();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    let key = key.0;
                    let keep = if E {
                        EXTRA_KEYS.contains(&&*key)
                    } else {
                        DETAIL_KEYS.contains(&&*key)
                    };
                    if keep {
                        kept.fields.insert(key.into_owned(), map.next_value()?);
                    } else {
                        kept.timeline |= E && key == "timeline";
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(kept)
            }
        }
        d.deserialize_map(V::<EXTRA>)
    }
}

/// An object key, borrowed from the line when it has no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(s.into()))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(s.to_string().into()))
            }
        }
        d.deserialize_str(V)
    }
}

impl RunDigest {
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name)
    }
}

impl Attempted for RunDigest {
    fn variant(&self) -> &str {
        &self.variant
    }
    fn level(&self) -> f64 {
        self.level
    }
    fn workload(&self) -> &str {
        &self.workload
    }
    fn warmup(&self) -> bool {
        self.warmup
    }
    fn run(&self) -> u32 {
        self.run
    }
    fn guest(&self) -> u32 {
        self.guest
    }
    fn attempt(&self) -> u32 {
        self.attempt
    }
    fn finished(&self) -> bool {
        self.ok && !self.superseded
    }
    fn attempt_records(&self) -> Option<u32> {
        self.attempt_records
    }
    fn guest_set(&self) -> Option<GuestSet> {
        self.slot.map(|(boot, bring_up)| GuestSet {
            host: self.host.as_deref().map(str::to_string),
            boot,
            bring_up,
        })
    }
}

impl Headline for RunDigest {
    fn metric(&self, name: &str) -> Option<f64> {
        RunDigest::metric(self, name)
    }
}

/// A journal as the reports read it: its header and one digest per record, in journal order.
#[derive(Debug, Clone)]
pub struct Digested {
    pub header: SweepHeader,
    pub runs: Vec<RunDigest>,
}

impl Digested {
    /// Streams the journal at `path` (a results directory or the file), digesting each record
    /// as it is parsed; `progress`: a bar on stderr once it takes longer than a second.
    pub fn read(path: &Path, progress: bool) -> anyhow::Result<Self> {
        Self::read_in_chunks(path, progress, crate::journal::CHUNK)
    }

    /// [`Digested::read`] handing parsers `chunk` bytes at a time (tests make it small).
    pub(crate) fn read_in_chunks(path: &Path, progress: bool, chunk: usize) -> anyhow::Result<Self> {
        let file = Arc::new(crate::journal::journal_file(path));
        let read = crate::journal::read_lines(
            path,
            progress,
            chunk,
            |h: &SweepHeader, names: &mut Names, offset, r: ForReport| {
                let timeline = r.timeline.then(|| TimelineAt::Journal {
                    file: file.clone(),
                    offset,
                });
                digest_with(&r.record, r.detail.as_ref(), timeline, &context(h), names)
            },
        )?;
        Ok(Self {
            header: read.header,
            runs: read.runs,
        })
    }

    #[cfg(test)]
    /// The digests of a journal already in memory.
    pub fn of(journal: &Journal) -> Self {
        let ctx = context(&journal.header);
        let mut names = Names::default();
        Self {
            header: journal.header.clone(),
            runs: journal.runs.iter().map(|r| digest(r, &ctx, &mut names)).collect(),
        }
    }
}

/// What the header says about how the records were made.
pub fn context(h: &SweepHeader) -> RecordContext<'_> {
    RecordContext {
        accel: &h.accel,
        backend: &h.backend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Entry, JournalWriter};
    use crate::stats::cells::{build, build_digested, tests::journal};

    /// `j` written as a journal in `dir`.
    fn write(dir: &Path, j: &Journal) {
        let mut w = JournalWriter::open(dir).unwrap();
        w.append(&Entry::Sweep(Box::new(j.header.clone()))).unwrap();
        for r in &j.runs {
            w.append(&Entry::Run(Box::new(r.clone()))).unwrap();
        }
    }

    /// The fixture journal with what a streamed digest skips or keeps elsewhere: a timeline
    /// summary on every lock record (naming its run), a lock payload report with preemption
    /// figures, and telemetry no digest reads.
    fn rich_journal() -> Journal {
        let mut j = journal();
        for r in j.runs.iter_mut().filter(|r| r.workload == "lock-ticket") {
            let path = format!("/nonexistent/{}-{}-run{}.json.gz", r.variant, r.level, r.run);
            r.extra.insert(
                "timeline".into(),
                serde_json::json!({"path": path, "segments": 3, "vcpu_slices": [], "host_slice": {"name": "base_slice_ns", "ns": 3000000, "hz": 250}}),
            );
            r.extra.insert("console_tail".into(), "naïve → ü".into());
            crate::stats::preemption::tests::with_payload(
                r,
                serde_json::json!({"preemption": crate::stats::preemption::tests::preemption_json(10, 5, 0.01, 0.02), "algo": "ticket", "ops_per_thread": [1, 2]}),
            );
        }
        j
    }

    /// Digests with each timeline summary loaded (streamed ones are read back from the journal).
    fn loaded(runs: &[RunDigest]) -> Vec<(RunDigest, Option<TimelineRef>)> {
        runs.iter()
            .map(|r| {
                let t = r.timeline.as_ref().map(|t| t.load().unwrap());
                (
                    RunDigest {
                        timeline: None,
                        ..r.clone()
                    },
                    t,
                )
            })
            .collect()
    }

    #[test]
    fn a_streamed_journal_gives_the_model_of_the_journal_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let j = rich_journal();
        write(dir.path(), &j);
        let in_memory = build(&j, 0.05, None);
        let digests = Digested::of(&j);
        assert!(digests.runs.iter().any(|r| r.preemption.is_some()));
        // Small chunks: many of them, over every parser thread, must come back in order.
        for chunk in [1 << 20, 700, 64] {
            let streamed = Digested::read_in_chunks(dir.path(), false, chunk).unwrap();
            assert!(
                streamed
                    .runs
                    .iter()
                    .all(|r| !matches!(r.timeline, Some(TimelineAt::Here(_)))),
                "a streamed digest holds no timeline summary"
            );
            assert_eq!(loaded(&streamed.runs), loaded(&digests.runs), "chunk {chunk}");
            assert_eq!(build_digested(&streamed, 0.05, None), in_memory, "chunk {chunk}");
        }
        let streamed = Digested::read(dir.path(), false).unwrap();
        assert_eq!(build_digested(&streamed, 0.05, None), in_memory);
        // And the rendered reports are the same text, the HTML one's timelines read back.
        let opts = crate::report::ReportOptions::default();
        for format in [
            crate::report::Format::Table,
            crate::report::Format::Json,
            crate::report::Format::Html,
        ] {
            assert_eq!(
                crate::report::render_digested(&streamed, format, &opts).unwrap(),
                crate::report::render(&j, format, &opts).unwrap()
            );
        }
    }

    #[test]
    fn the_timeline_drawn_is_the_first_counted_runs_read_back_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = rich_journal();
        // Run 0 of one cell failed: its timeline is not drawn, run 1's is.
        for r in j.runs.iter_mut() {
            if (r.workload.as_str(), r.variant.as_str(), r.level, r.run) == ("lock-ticket", "base", 0.5, 0) {
                r.ok = false;
                r.error = Some("timeout".into());
            }
        }
        write(dir.path(), &j);
        let streamed = Digested::read(dir.path(), false).unwrap();
        let section = crate::report::timeline::section(&streamed);
        assert_eq!(section, crate::report::timeline::section(&Digested::of(&j)));
        assert!(section.contains("base-0.5-run1.json.gz") && !section.contains("base-0.5-run0.json.gz"));
        assert!(section.contains("lock-ticket, base at 0.5x, run 1"), "{section}");
        assert!(
            section.contains("patched-0.5-run0.json.gz") && !section.contains("patched-0.5-run1.json.gz")
        );
        // A journal changed under the report says so where the timeline would be.
        let at = streamed.runs.iter().find_map(|r| r.timeline.clone()).unwrap();
        std::fs::write(dir.path().join(crate::journal::JOURNAL_FILE), "").unwrap();
        assert!(at.load().is_err());
    }

    #[test]
    fn a_record_parsed_for_the_report_digests_as_the_whole_record() {
        let j = rich_journal();
        let ctx = context(&j.header);
        for r in &j.runs {
            let line = serde_json::to_vec(&Entry::Run(Box::new(r.clone()))).unwrap();
            let lite = ForReport::parse(&line).unwrap();
            assert_eq!(lite.timeline, r.extra.contains_key("timeline"));
            assert!(lite.record.extra.keys().all(|k| EXTRA_KEYS.contains(&k.as_str())));
            let timeline = r
                .extra
                .get("timeline")
                .map(|t| TimelineAt::Here(Box::new(TimelineRef::of(t))));
            let mut names = Names::default();
            let streamed = digest_with(&lite.record, lite.detail.as_ref(), timeline, &ctx, &mut names);
            assert_eq!(streamed, digest(r, &ctx, &mut Names::default()));
        }
    }

    #[test]
    fn a_digest_holds_a_few_hundred_bytes_not_the_record() {
        // The stack part of a digest; its heap part is the metric and counter values (names
        // shared through `Names`), 136 bytes for a lock run's 10 metrics and 7 counters.
        // Was 272 bytes and 902 on the heap with the timeline summary held.
        assert!(
            std::mem::size_of::<RunDigest>() <= 280,
            "{}",
            std::mem::size_of::<RunDigest>()
        );
    }
}
