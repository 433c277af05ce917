//! A report's compact digest of each journal record: what the statistics read of it (its run,
//! standing, headline numbers and every figure that explains a cell), taken by [`digest`] as
//! the record is parsed, so a report of a million records holds a million digests (a few
//! hundred bytes each), never the records (kilobytes each, with their telemetry).
//!
//! A new per-record figure is one more field of [`RunDigest`] and one more call in [`digest`]
//! of the pure function that computes it from a `&RunRecord`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::explain::{self, HostOtherPart, RecordContext};
#[cfg(test)]
use crate::journal::Journal;
use crate::journal::accounting::{Attempted, GuestSet, Headline};
use crate::journal::{RunRecord, SweepHeader};

/// Why a figure was not measured (shared: most records give one of a few reasons).
pub type Why = Arc<str>;
/// A per-run figure, or why it was not measured.
pub type Figure = Result<f64, Why>;
/// KVM counters (name → count over the run), or why there are none.
pub type Counters = Result<Box<[(Arc<str>, u64)]>, Why>;

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
    pub metrics: Box<[(Arc<str>, f64)]>,
    /// [`explain::vcpu_wait`].
    pub vcpu_wait: Figure,
    /// [`explain::guest_steal`].
    pub guest_steal: Figure,
    /// This record's part of its run's [`explain::host_other`].
    pub host_other: HostOtherPart<Why>,
    /// [`explain::kvm_counters`].
    pub kvm: Counters,
    /// [`explain::pv_words`]: whether the boot facts name guests, and their PV lines.
    pub pv_words: Option<(bool, Box<[Why]>)>,
    /// [`super::preemption::of_record`]: stretched lock holds and hand-overs (lock runs).
    pub preemption: Option<Box<super::preemption::RunPreemption>>,
    /// The guest kernel's profile of the run (`kernel.profile`), when it was sampled: at most
    /// the payload's stored stacks, so only profiled sweeps pay for it.
    pub profile: Option<Box<ocrig_payload::probe::profile::Profile>>,
    /// The host's vCPU timeline (`extra.timeline`, on the attempt's first record), reduced to
    /// what the report draws from: every record of a one-guest sweep carries one.
    pub timeline: Option<Box<crate::report::timeline::TimelineRef>>,
}

/// One copy of each name and reason a parser thread has seen, shared by its digests.
#[derive(Debug, Default)]
pub struct Names(HashMap<Box<str>, Arc<str>>);

impl Names {
    pub fn name(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.0.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        // Reasons may carry numbers that differ per record; keep the table bounded.
        if self.0.len() < 4096 {
            self.0.insert(Box::from(s), a.clone());
        }
        a
    }
}

/// The digest of one record: every per-record figure a report shows, computed here by the
/// functions that compute it from the record.
pub fn digest(r: &RunRecord, ctx: &RecordContext, names: &mut Names) -> RunDigest {
    use crate::journal::SELF_CHECK_REASON;
    let mut why = |e: String| names.name(&e);
    let vcpu_wait = explain::vcpu_wait(r, ctx).map_err(&mut why);
    let guest_steal = explain::guest_steal(r, ctx).map_err(&mut why);
    let host_other = explain::host_other_part(r, ctx).map_err(&mut why);
    let kvm = explain::kvm_counters(r, ctx).map_err(&mut why);
    let kvm = kvm.map(|c| c.into_iter().map(|(k, v)| (names.name(&k), v)).collect());
    let pv_words = explain::pv_words(r).map(|w| (w.guests, w.lines.iter().map(|l| names.name(l)).collect()));
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
        metrics: r.metrics.iter().map(|(k, v)| (names.name(k), *v)).collect(),
        vcpu_wait,
        guest_steal,
        host_other,
        kvm,
        pv_words,
        preemption: super::preemption::of_record(r).map(Box::new),
        profile: profile_of(r).map(Box::new),
        timeline: r
            .extra
            .get("timeline")
            .map(|t| Box::new(crate::report::timeline::TimelineRef::of(t))),
    }
}

/// The kernel profile a record's payload report carries, if any.
pub fn profile_of(r: &RunRecord) -> Option<ocrig_payload::probe::profile::Profile> {
    let kernel = r.payload.as_ref()?.detail.get("kernel")?;
    serde_json::from_value(kernel.get("profile")?.clone()).ok()
}

impl RunDigest {
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics
            .binary_search_by(|(k, _)| k.as_ref().cmp(name))
            .ok()
            .map(|i| self.metrics[i].1)
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
        let read = crate::journal::read_mapped(path, progress, |h: &SweepHeader, names: &mut Names, r| {
            digest(&r, &context(h), names)
        })?;
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

    #[test]
    fn a_streamed_journal_gives_the_model_of_the_journal_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal();
        let mut w = JournalWriter::open(dir.path()).unwrap();
        w.append(&Entry::Sweep(Box::new(j.header.clone()))).unwrap();
        for r in &j.runs {
            w.append(&Entry::Run(Box::new(r.clone()))).unwrap();
        }
        drop(w);
        let in_memory = build(&j, 0.05, None);
        // Small chunks: many of them, over every parser thread, must come back in order.
        for chunk in [1 << 20, 700, 64] {
            let read =
                crate::journal::read_mapped_in_chunks(dir.path(), false, chunk, |h, names: &mut Names, r| {
                    digest(&r, &context(h), names)
                })
                .unwrap();
            assert_eq!(read.runs, Digested::of(&j).runs, "chunk {chunk}");
            let streamed = Digested {
                header: read.header,
                runs: read.runs,
            };
            assert_eq!(build_digested(&streamed, 0.05, None), in_memory, "chunk {chunk}");
        }
        let streamed = Digested::read(dir.path(), false).unwrap();
        assert_eq!(build_digested(&streamed, 0.05, None), in_memory);
        // And the rendered reports are the same text.
        let opts = crate::report::ReportOptions::default();
        for format in [crate::report::Format::Table, crate::report::Format::Json] {
            assert_eq!(
                crate::report::render_digested(&streamed, format, &opts).unwrap(),
                crate::report::render(&j, format, &opts).unwrap()
            );
        }
    }

    #[test]
    fn a_digest_holds_a_few_hundred_bytes_not_the_record() {
        // The stack part of a digest; its heap part is the metric and counter lists (names
        // shared through `Names`).
        assert!(
            std::mem::size_of::<RunDigest>() <= 320,
            "{}",
            std::mem::size_of::<RunDigest>()
        );
    }
}
