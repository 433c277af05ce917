//! A report's compact digest of each journal record: what the statistics read of it (its run,
//! standing, headline numbers and every figure that explains a cell), taken by [`digest_with`] as
//! the record is parsed, so a report of a million records holds a million digests (a few
//! hundred bytes each), never the records (kilobytes each, with their telemetry).
//!
//! A streamed journal's records are parsed only as far as a digest reads them ([`ForReport`]:
//! the payload report's lock and profile fields, the telemetry the figures are computed from);
//! what a report draws from only a few records (the vCPU timeline of a cell's first counted
//! run) stays in the journal, and the digest says where ([`TimelineAt`]).
//!
//! A new per-record figure is one more field of [`RunDigest`] and one more call in
//! [`digest_with`] of the pure function that computes it from a `&RunRecord`; if it reads a part of the record
//! [`ForReport`] skips, that part joins its list of kept keys.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::explain::{self, HostOtherPart, RecordContext, Telemetry};
use super::timeline_ref::TimelineAt;
#[cfg(test)]
use crate::journal::Journal;
use crate::journal::accounting::{GuestSet, Headline};
use crate::journal::{Big, RunLine, RunRecord, SweepHeader, scan, split_record};

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
    /// The boot group and bring-up that ran it ([`crate::journal::Slot`]): warm-ups count
    /// once per guest set.
    pub slot: (u32, u32),
    /// The design's block ([`crate::journal::Slot::block`]).
    pub block: u32,
    pub ok: bool,
    /// Marked superseded (some guest of its attempt failed).
    pub superseded: bool,
    /// What judged whether the host disturbed it: read ([`RunDigest::disturbed`]) or not
    /// ([`RunDigest::load_unread`]).
    pub host_judged: HostJudged,
    pub attempt: u32,
    pub attempt_records: u32,
    /// Why a run that finished was not counted, in the journal's words with their prefix: the
    /// payload's self-checks rejected it ([`SELF_CHECK_REASON`]), or the host disturbed it
    /// ([`crate::journal::DISTURBED_REASON`]).
    pub rejected: Option<Why>,
    /// The payload's headline numbers (name → value), in name order.
    pub metrics: Keyed<f64>,
    /// [`RunRecord::slices`].
    pub slices: Option<u32>,
    /// [`explain::vcpu_wait_of`], over the run's own window where the record has it
    /// ([`crate::telemetry::vcpu::VcpuSched::wait_share`]) (the primary guest's; [`NOT_PRIMARY`] on other guests' records:
    /// a cell reads it of its primary samples only, and at 480 guests per attempt the others
    /// are nearly every digest).
    pub vcpu_wait: Figure,
    /// [`explain::guest_steal_of`] (the primary guest's, as `vcpu_wait`).
    pub guest_steal: Figure,
    /// This record's part of its run's [`explain::host_other_of`].
    pub host_other: HostOtherPart<Why>,
    /// [`explain::kvm_counters_of`] (the primary guest's, as `vcpu_wait`).
    pub kvm: Counters,
    /// [`explain::pv_words`]: whether the boot facts name guests, and their PV lines (one
    /// copy shared by the digests that say the same).
    pub pv_words: Option<PvWords>,
    /// [`super::preemption::of_record`]: stretched lock holds and hand-overs (lock runs);
    /// `None` on other guests' records, like every figure read of the primary guest only.
    pub preemption: Option<Box<super::preemption::RunPreemption<Why>>>,
    /// The guest kernel's profile of the run (`kernel.profile`), when it was sampled: at most
    /// the payload's stored stacks, so only profiled sweeps pay for it.
    pub profile: Option<Box<ocrig_payload::probe::profile::Profile>>,
    /// Where the host's vCPU timeline summary is (`extra.timeline`, on the attempt's first
    /// record; every record of a one-guest sweep carries one): the report draws one per cell,
    /// so a streamed digest keeps the record's place in the journal, not the summary.
    pub timeline: Option<TimelineAt>,
}

/// A record's guests' kernel words on PV features: whether its boot facts name guests, and
/// their lines.
pub type PvWords = Arc<(bool, Box<[Why]>, Option<explain::PvIntent>)>;

/// Whether a record is of the guest whose results are a cell's samples (the statistics read
/// every per-run figure but the headline metric and the host's share of the primary guest's
/// records only, see `cells::primary`).
pub fn is_primary_guest(guest: u32) -> bool {
    guest == 0
}

/// What a digest of another guest than the primary one says of a figure read of the primary
/// guest only.
pub const NOT_PRIMARY: &str = "not kept: not the primary guest's record";

/// One copy of each name and reason a parser thread has seen, shared by its digests.
#[derive(Debug, Default)]
pub struct Names {
    names: HashMap<Box<str>, Arc<str>>,
    /// Lists of names (of metrics, of counters) seen, most recent first.
    lists: Vec<Keys>,
    /// PV words seen, most recent first.
    pv: Vec<PvWords>,
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

    /// One shared copy of these PV words.
    pub fn pv_words(&mut self, w: &explain::PvWords) -> PvWords {
        let same = |p: &PvWords| {
            p.0 == w.guests
                && p.2 == w.intent
                && p.1.iter().map(|l| &**l).eq(w.lines.iter().map(String::as_str))
        };
        if let Some(i) = self.pv.iter().position(same) {
            self.pv[..=i].rotate_right(1);
            return self.pv[0].clone();
        }
        let words: PvWords = Arc::new((w.guests, w.lines.iter().map(|l| self.name(l)).collect(), w.intent));
        self.pv.insert(0, words.clone());
        self.pv.truncate(64);
        words
    }
}

/// The digest of one record: every per-record figure a report shows, computed here by the
/// functions that compute it from the record, whose telemetry is `telemetry`, whose payload
/// report's workload fields read `detail` and whose timeline is at `timeline`.
fn digest_with(
    r: &RunRecord,
    telemetry: &Telemetry,
    detail: Option<Detail>,
    timeline: Option<TimelineAt>,
    ctx: &RecordContext,
    names: &mut Names,
) -> RunDigest {
    use crate::journal::SELF_CHECK_REASON;
    let primary = is_primary_guest(r.guest);
    let (vcpu_wait, guest_steal, kvm) = if primary {
        (
            // Over the run's own window where the record has it (`vcpu_sched.run_window`), else
            // over the probe's.
            explain::vcpu_wait_of(telemetry, ctx)
                .map(|probe| match telemetry.vcpu_sched.read("") {
                    Ok(sched) => sched.wait_share().unwrap_or(probe),
                    Err(_) => probe,
                })
                .map_err(|e| names.name(&e)),
            explain::guest_steal_of(telemetry, explain::guest_cpu(r), ctx).map_err(|e| names.name(&e)),
            explain::kvm_counters_of(telemetry, ctx)
                .map_err(|e| names.name(&e))
                .map(|c| match explain::kvm_window_ms(telemetry) {
                    // The window beside the counters, so the cell can give rates.
                    Some(ms) => {
                        let mut c = c.clone();
                        c.insert(explain::KVM_WINDOW_MS.into(), ms);
                        Keyed::of(&c, names)
                    }
                    None => Keyed::of(c, names),
                }),
        )
    } else {
        let not = names.name(NOT_PRIMARY);
        (Err(not.clone()), Err(not.clone()), Err(not))
    };
    let host_other = explain::host_other_part_of(telemetry, ctx).map_err(|e| names.name(&e));
    let pv_words = explain::pv_words(r).map(|w| names.pv_words(&w));
    RunDigest {
        variant: names.name(&r.variant),
        level: r.level,
        workload: names.name(&r.workload),
        run: r.run,
        warmup: r.warmup,
        guest: r.guest,
        host: r.host.as_deref().map(|h| names.name(h)),
        slot: (r.slot.boot, r.slot.bring_up),
        block: r.slot.block,
        ok: r.ok,
        superseded: r.superseded.is_some(),
        host_judged: if r.ok && crate::journal::counted_disturbed(&r.extra) {
            HostJudged::CountedDisturbed
        } else {
            HostJudged::of(&r.extra)
        },
        attempt: r.attempt,
        attempt_records: r.attempt_records,
        rejected: r
            .error
            .as_deref()
            .filter(|e| e.starts_with(SELF_CHECK_REASON) || e.starts_with(crate::journal::DISTURBED_REASON))
            .map(|w| names.name(w)),
        metrics: Keyed::of(&r.metrics, names),
        slices: r.slices,
        vcpu_wait,
        guest_steal,
        host_other,
        kvm,
        pv_words,
        preemption: detail
            .as_ref()
            .filter(|_| primary)
            .and_then(|d| {
                super::preemption::of_reported(
                    d.preemption.as_ref(),
                    d.preemption_unavailable.as_deref(),
                    d.elapsed_ns,
                    telemetry
                        .stretched_on_host
                        .read(super::preemption::NO_HOST_RECORD),
                )
            })
            .map(|p| Box::new(p.map_err(|e| names.name(&e)))),
        profile: detail.and_then(|d| d.profile),
        timeline,
    }
}

/// The kernel profile a record's payload report carries, if any.
#[cfg(test)] // digests take it from the report's fields
pub fn profile_of(r: &RunRecord) -> Option<ocrig_payload::probe::profile::Profile> {
    Detail::of(&r.payload.as_ref()?.detail).profile.map(|p| *p)
}

/// What a digest reads of a record's payload report (its workload fields), typed: a report
/// of a million records parses these straight from each line ([`Detail::set_raw`]), skipping
/// the rest of the report (its prose, checks, calibration) unbuilt.
#[derive(Debug, Default)]
pub struct Detail {
    /// `preemption` ([`super::preemption::of_reported`]), if the report has the field.
    preemption: Option<super::preemption::Reported>,
    preemption_unavailable: Option<String>,
    /// `kernel.profile`, when the run was profiled and it reads as one.
    profile: Option<Box<ocrig_payload::probe::profile::Profile>>,
    /// `elapsed_ns`: the run's length (what a stretched share's rate per second is over).
    elapsed_ns: Option<u64>,
}

impl Detail {
    /// Of a record in memory.
    #[cfg(test)] // records in memory are digested in tests only
    fn of(detail: &Map<String, Value>) -> Self {
        let mut d = Detail::default();
        for (key, value) in detail {
            d.set_raw(key, &value.to_string());
        }
        d
    }

    /// The report's fields it is read from.
    const KEYS: [&str; 4] = ["preemption", "preemption_unavailable", "kernel", "elapsed_ns"];

    /// Sets the field `key` of the report from its JSON text; false if a digest does not
    /// read it.
    fn set_raw(&mut self, key: &str, raw: &str) -> bool {
        match key {
            "preemption" => self.preemption = Some(super::preemption::Reported::of_raw(raw)),
            "preemption_unavailable" => self.preemption_unavailable = serde_json::from_str(raw).ok(),
            "elapsed_ns" => self.elapsed_ns = raw.trim().parse().ok(),
            "kernel" => {
                // Of its kilobyte or so, only the profile: the rest is passed over unparsed.
                self.profile = scan::members(raw.as_bytes())
                    .map_while(Result::ok)
                    .find(|m| m.key == "profile")
                    .and_then(|m| serde_json::from_slice(m.value).ok())
            }
            _ => return false,
        }
        true
    }
}

/// How the host's other load judged a record ([`crate::telemetry::host_load`]): read, and
/// counted though above its bound, or not read and why — one byte, so the digest keeps its
/// size. The report counts the unread among the runs the accounting counts, once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HostJudged {
    #[default]
    Read,
    /// Counted although the host disturbed it ([`crate::journal::counted_disturbed`]).
    CountedDisturbed,
    /// Not read: on a remote host ([`crate::telemetry::host_load::REMOTE`]).
    Remote,
    /// Not read: reading it failed (the record's `foreign_load.unavailable` says how).
    Failed,
    /// Not read: not in the record.
    Absent,
}

impl HostJudged {
    /// A counted run's reading, as its record holds it.
    fn of(extra: &serde_json::Map<String, serde_json::Value>) -> Self {
        use crate::telemetry::host_load::{KEY, REMOTE};
        match extra.get(KEY) {
            Some(v) if v.is_number() => Self::Read,
            Some(v) if v.get("unavailable").and_then(|w| w.as_str()) == Some(REMOTE) => Self::Remote,
            Some(_) => Self::Failed,
            None => Self::Absent,
        }
    }
}

impl RunDigest {
    /// Counted although the host disturbed it ([`crate::journal::counted_disturbed`]).
    pub fn disturbed(&self) -> bool {
        self.host_judged == HostJudged::CountedDisturbed
    }

    /// Why nothing judged this counted run for a host disturbance (its record holds no reading
    /// of the host's other load), or None.
    pub fn load_unread(&self) -> Option<&'static str> {
        match self.host_judged {
            HostJudged::Read | HostJudged::CountedDisturbed => None,
            HostJudged::Remote => Some(crate::telemetry::host_load::REMOTE),
            HostJudged::Failed => Some("reading it failed; each record's foreign_load.unavailable says how"),
            HostJudged::Absent => {
                Some("not in the record: the host backend, or an ocrig from before the reading")
            }
        }
    }
}

/// A run record's line parsed as far as [`digest_with`] reads it: the record without its payload
/// report and telemetry but for what a digest reads of the report ([`Detail`]), its
/// [`Telemetry`], both typed, and what [`EXTRA`] picks of the rest; of its timeline summary
/// only whether there is one.
pub struct ForReport {
    pub record: RunRecord,
    pub telemetry: Telemetry,
    pub detail: Option<Detail>,
    pub timeline: bool,
}

/// The record's `extra` fields a digest reads (the functions of [`explain`], and whether a
/// counted run was disturbed) besides its [`Telemetry`], each as far as it reads it: of the
/// boot group's facts (kilobytes: every guest's start, dmesg lines, memory) only the guests'
/// `-cpu` and their kernels' PV lines.
pub static EXTRA: [(&str, Pick); 3] = [
    (
        crate::journal::DISTURBED_KEY,
        Pick::Fields(&[("counted", Pick::All)]),
    ),
    (crate::telemetry::host_load::KEY, Pick::All),
    (
        "group",
        Pick::Fields(&[
            (
                "start",
                Pick::Each(&Pick::Fields(&[
                    ("guest", Pick::All),
                    ("start", Pick::Fields(&[("boot", Pick::Keys(&["cpu"]))])),
                ])),
            ),
            (
                "guest_kernel",
                Pick::Each(&Pick::Fields(&[
                    ("cmdline", Pick::All),
                    ("pv_words", Pick::StringsWith(&explain::PV_WORDS)),
                    ("dmesg", Pick::StringsWith(&explain::PV_WORDS)),
                ])),
            ),
        ]),
    ),
];

impl RunLine for ForReport {
    fn parse(line: &[u8]) -> serde_json::Result<Self> {
        let (mut detail, mut extra) = (None, Kept::<Telemetry>::default());
        let head = split_record(line, |big, line, at| match big {
            Big::Payload => Kept::<Detail>::at(line, at).map(|(kept, end)| {
                detail = Some(kept.typed);
                end
            }),
            Big::Extra => Kept::<Telemetry>::at(line, at).map(|(kept, end)| {
                extra = kept;
                end
            }),
        })?;
        let mut record = head.record();
        record.extra = extra.fields;
        Ok(Self {
            record,
            telemetry: extra.typed,
            detail,
            timeline: extra.timeline,
        })
    }
}

/// What of a JSON value a digest reads; the rest is passed over by the scanner, never parsed or
/// built (a generic tree of a record's telemetry was most of a report's time). A value of
/// another kind than the pick expects is kept whole (a field that says why it was not measured
/// is a string).
#[derive(Debug)]
pub enum Pick {
    /// The whole value.
    All,
    /// Of an object, these fields, whole.
    Keys(&'static [&'static str]),
    /// Of an object, these fields, each as picked.
    Fields(&'static [(&'static str, Pick)]),
    /// Of an array, every element as picked.
    Each(&'static Pick),
    /// Of an array, the strings that contain one of these; its other elements are skipped.
    StringsWith(&'static [&'static str]),
}

impl Pick {
    /// Of the value whose JSON text is `text`, what this pick keeps; the rest is passed over by
    /// the scanner, unparsed.
    #[cfg(test)] // readers take a pick in place (take_at)
    pub fn take(&self, text: &[u8]) -> serde_json::Result<Value> {
        let (value, end) = self.take_at(text, 0)?;
        if scan::skip_ws(text, end) != text.len() {
            return Err(scan::json_error("text after the value"));
        }
        Ok(value)
    }

    /// [`Pick::take`] of the value that starts at `at` in `b`, and where it ends: a value is
    /// scanned once, its picked parts read as the scan reaches them.
    fn take_at(&self, b: &[u8], at: usize) -> serde_json::Result<(Value, usize)> {
        let at = scan::skip_ws(b, at);
        match (self, b.get(at)) {
            (Pick::Keys(_) | Pick::Fields(_), Some(b'{')) => {
                let mut out = Map::new();
                let mut obj = scan::Members::new(b, at, false);
                while let Some(k) = obj.next_key().map_err(scan::json_error)? {
                    let pick = match self {
                        Pick::Keys(keys) => keys.contains(&&*k.key).then_some(&Pick::All),
                        Pick::Fields(fields) => fields.iter().find(|(f, _)| *f == k.key).map(|(_, p)| p),
                        _ => None,
                    };
                    let end = match pick {
                        Some(pick) => {
                            let (value, end) = pick.take_at(b, k.value)?;
                            out.insert(k.key.into_owned(), value);
                            end
                        }
                        None => scan::skip_value(b, k.value).map_err(scan::json_error)?,
                    };
                    obj.value_ends_at(end).map_err(scan::json_error)?;
                }
                Ok((Value::Object(out), obj.end()))
            }
            (Pick::Each(_) | Pick::StringsWith(_), Some(b'[')) => {
                let mut out = Vec::new();
                let mut arr = scan::Elements::new(b, at, false);
                while let Some(e) = arr.next_value().map_err(scan::json_error)? {
                    let end = match self {
                        Pick::Each(pick) => {
                            let (value, end) = pick.take_at(b, e)?;
                            out.push(value);
                            end
                        }
                        Pick::StringsWith(needles) => {
                            let end = scan::skip_value(b, e).map_err(scan::json_error)?;
                            let text = &b[e..end];
                            // Only a string that may hold a needle is parsed (one with an
                            // escape may, whatever its bytes).
                            let may = text.first() == Some(&b'"')
                                && (text.contains(&b'\\')
                                    || needles
                                        .iter()
                                        .any(|n| memchr::memmem::find(text, n.as_bytes()).is_some()));
                            if may {
                                let s: String = serde_json::from_slice(text)?;
                                if needles.iter().any(|n| s.contains(n)) {
                                    out.push(Value::String(s));
                                }
                            }
                            end
                        }
                        _ => unreachable!("an array pick"),
                    };
                    arr.value_ends_at(end).map_err(scan::json_error)?;
                }
                Ok((Value::Array(out), arr.end()))
            }
            // The whole value: a pick's own, or one of another kind than it expects.
            _ => {
                let end = scan::skip_value(b, at).map_err(scan::json_error)?;
                Ok((serde_json::from_slice(&b[at..end])?, end))
            }
        }
    }
}

/// The fields of a JSON object that are parsed from their text straight into a type, no tree:
/// a record's [`Telemetry`] of its `extra`, a payload report's [`Detail`].
trait Typed: Default {
    /// The fields' keys.
    const KEYS: &'static [&'static str];
    /// The object's other fields kept, as picked.
    const PICKS: &'static [(&'static str, Pick)];
    /// Sets the field `key` from its JSON text.
    fn set_raw(&mut self, key: &str, raw: &str) -> bool;
}

impl Typed for Telemetry {
    const KEYS: &'static [&'static str] = &Telemetry::KEYS;
    const PICKS: &'static [(&'static str, Pick)] = &EXTRA;
    fn set_raw(&mut self, key: &str, raw: &str) -> bool {
        Telemetry::set_raw(self, key, raw)
    }
}

impl Typed for Detail {
    const KEYS: &'static [&'static str] = &Detail::KEYS;
    const PICKS: &'static [(&'static str, Pick)] = &[];
    fn set_raw(&mut self, key: &str, raw: &str) -> bool {
        Detail::set_raw(self, key, raw)
    }
}

/// Of a JSON object: its [`Typed`] fields, the fields `T::PICKS` picks, as picked, and whether
/// it has a `timeline`; the others are skipped unbuilt.
#[derive(Default)]
struct Kept<T> {
    typed: T,
    fields: Map<String, Value>,
    /// A `timeline` field was there.
    timeline: bool,
}

impl<T: Typed> Kept<T> {
    /// Of the object that starts at `at` in `b`, and where it ends: the fields read are parsed
    /// from their text as the scan reaches them, the others passed over unparsed.
    fn at(b: &[u8], at: usize) -> serde_json::Result<(Self, usize)> {
        let mut kept = Kept::<T>::default();
        let mut obj = scan::Members::new(b, at, false);
        while let Some(k) = obj.next_key().map_err(scan::json_error)? {
            let end = if T::KEYS.contains(&&*k.key) {
                // Its text as it is in the line, parsed into its type: no tree.
                let end = scan::skip_value(b, k.value).map_err(scan::json_error)?;
                let raw = std::str::from_utf8(&b[k.value..end]).map_err(scan::json_error)?;
                kept.typed.set_raw(&k.key, raw);
                end
            } else if let Some((_, pick)) = T::PICKS.iter().find(|(f, _)| *f == k.key) {
                let (value, end) = pick.take_at(b, k.value)?;
                kept.fields.insert(k.key.into_owned(), value);
                end
            } else {
                kept.timeline |= k.key == "timeline";
                scan::skip_value(b, k.value).map_err(scan::json_error)?
            };
            obj.value_ends_at(end).map_err(scan::json_error)?;
        }
        Ok((kept, obj.end()))
    }
}

impl RunDigest {
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name)
    }
}

crate::journal::accounting::attempted_by_fields!(
    RunDigest,
    finished: |r| r.ok && !r.superseded,
    guest_set: |r| GuestSet {
        host: r.host.as_deref().map(str::to_string),
        boot: r.slot.0,
        bring_up: r.slot.1,
    },
);

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
                let timeline = r.timeline.then(|| TimelineAt {
                    file: file.clone(),
                    offset,
                });
                digest_with(&r.record, &r.telemetry, r.detail, timeline, &context(h), names)
            },
        )?;
        Ok(Self {
            header: read.header,
            runs: read.runs,
        })
    }

    #[cfg(test)]
    /// The digests of a journal held in memory (a test's fixture), read as every journal is:
    /// from its file ([`crate::testing::on_disk`]).
    pub fn of(journal: &Journal) -> Self {
        Self::read(&crate::testing::on_disk(journal), false).expect("a fixture journal reads back")
    }
}

/// What the header says about how the records were made.
pub fn context(h: &SweepHeader) -> RecordContext<'_> {
    RecordContext {
        accel: &h.runs_on.accel,
        backend: &h.runs_on.backend,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Entry, JournalWriter};
    use crate::stats::cells::build_digested;
    use crate::stats::timeline_ref::TimelineRef;
    use crate::testing::{build, journal};

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
    /// figures and a kernel profile, boot group facts in each shape ocrig wrote them (an
    /// attempt's first record's whole facts, another guest's own part, a later attempt's start
    /// facts of no guest of its own), and telemetry no digest reads.
    fn rich_journal() -> Journal {
        use serde_json::json;
        let mut j = journal();
        let start = |guest: u32, cpu: &str| {
            json!({"guest": guest, "start": {"method": "clone", "ram": "state", "template": "43e7",
                "boot": {"bios": "seabios", "cpu": cpu, "kernel": "pvh", "clock": {"args": "tsc=reliable"}}}})
        };
        let dmesg = json!(["[    0.069122] clocksource: refined-jiffies: mask: 0xffffffff",
            "[    0.1] kvm-guest: PV spinlocks enabled", "[    0.05] kvm-guest: stealtime: cpu 0", 7, {"not": "a line"}, ["nested"],
            "[    0.2] PV spinlocks disabled, single CPU", "[    1.3] clocksource: Switched to clocksource tsc"]);
        let lock_records = j.runs.iter_mut().filter(|r| r.workload == "lock-ticket");
        for (i, r) in lock_records.enumerate() {
            let path = format!("/nonexistent/{}-{}-run{}.json.gz", r.variant, r.level, r.run);
            r.extra.insert(
                "timeline".into(),
                json!({"path": path, "segments": 3, "vcpu_slices": [], "host_slice": {"name": "base_slice_ns", "ns": 3000000, "hz": 250}}),
            );
            r.extra.insert("console_tail".into(), "naïve → ü".into());
            // Counted though disturbed, on some; a failed disturbed run's marks on another.
            match i % 3 {
                0 => r.extra.insert(
                    crate::journal::DISTURBED_KEY.into(),
                    json!({"foreign_load": 0.07, "bound": 0.05, "counted": true, "why": "disturbed: ..."}),
                ),
                1 => r.extra.insert(
                    crate::journal::DISTURBED_KEY.into(),
                    json!({"foreign_load": 0.07, "bound": 0.05}),
                ),
                _ => None,
            };
            // The host's other load read, unavailable with a reason, or not in the record.
            match i % 5 {
                0 | 1 => r
                    .extra
                    .insert(crate::telemetry::host_load::KEY.into(), json!(0.004)),
                2 => r.extra.insert(
                    crate::telemetry::host_load::KEY.into(),
                    json!({"unavailable": "reading /proc/stat: gone"}),
                ),
                _ => r.extra.remove(crate::telemetry::host_load::KEY),
            };
            let group = match i % 4 {
                // An attempt's first record: every guest's facts.
                0 => json!({"boot_s": 1.5, "start": [start(1, "max"), start(0, "host,kvm-steal-time=off")],
                    "guest_kernel": [{"clocksource": "tsc", "cmdline": "quiet", "dmesg": dmesg, "pv_words": ["[    0.1] kvm-guest: PV spinlocks enabled"]},
                                     {"dmesg": [], "pv_words": []}],
                    "guest_memory": {"guests": 2, "pss_mib_mean": 150.4}, "pinning": [{"guest": 0, "vcpu_to_cpu": [[0, 1]]}]}),
                // Another guest's own part.
                1 => {
                    json!({"start": [start(0, "host,kvm-pv-unhalt=off")], "guest_kernel": [{"dmesg": dmesg, "pv_words": []}]})
                }
                // The start facts of no guest of this record.
                2 => json!({"start": [start(3, "max")], "guest_kernel": [{"dmesg": dmesg, "pv_words": []}]}),
                _ => json!("not recorded: the host backend"),
            };
            r.extra.insert("group".into(), group);
            if let Some(h) = r.extra.get_mut("host_stat") {
                h["per_cpu"] = json!([{"cpu": 0, "user": 1, "idle": 2}, {"cpu": 1, "user": 3, "idle": 4}]);
            }
            let mut detail = json!({"preemption": crate::testing::preemption_json(10, 5, 0.01, 0.02), "algo": "ticket", "ops_per_thread": [1, 2]});
            if i % 3 == 0 {
                detail["kernel"] = json!({"source": "perf", "counts": {"spin": 3}, "not_measured": {"mutex": "not asked for"},
                    "profile": {"event": "cpu-clock", "rate_hz": 999, "samples": 5, "kernel_samples": 4, "user_samples": 1,
                        "lost": 0, "folded": [["a;b", 3], ["[user]", 1]], "other_samples": 1, "processing_ns": 1, "max_sample_rate": 100000}});
            }
            if i % 5 == 1 {
                detail["preemption"] = json!(null);
                detail["preemption_unavailable"] = json!("not a lock with sampling");
            }
            crate::testing::with_payload(r, detail);
        }
        j
    }

    #[test]
    fn a_pick_keeps_what_it_names_and_skips_the_rest() {
        use serde_json::json;
        let pick = |p: &'static Pick, v: &Value| -> Value {
            p.take(serde_json::to_string(v).unwrap().as_bytes()).unwrap()
        };
        static KEYS: Pick = Pick::Keys(&["a", "b"]);
        let v = json!({"a": {"x": [1, 2.5, null]}, "c": {"deep": [1, {"y": "z"}]}, "b": "é\"q"});
        assert_eq!(pick(&KEYS, &v), json!({"a": {"x": [1, 2.5, null]}, "b": "é\"q"}));
        // Another kind than the pick expects: whole.
        assert_eq!(pick(&KEYS, &json!("why")), json!("why"));
        assert_eq!(pick(&KEYS, &json!([{"c": 1}])), json!([{"c": 1}]));
        static EACH: Pick = Pick::Each(&Pick::Fields(&[("f", Pick::Keys(&["k"]))]));
        let v = json!([{"f": {"k": -1, "j": 2}, "g": 3}, {"g": 4}, 5, {"f": true}]);
        assert_eq!(pick(&EACH, &v), json!([{"f": {"k": -1}}, {}, 5, {"f": true}]));
        assert_eq!(pick(&EACH, &json!({"f": 1})), json!({"f": 1}));
        static WITH: Pick = Pick::StringsWith(&["PV", "kvm"]);
        let v = json!(["a PV line", "other", 1, null, ["PV nested"], {"PV": "x"}, "kvm-guest: x"]);
        assert_eq!(pick(&WITH, &v), json!(["a PV line", "kvm-guest: x"]));
        assert_eq!(pick(&WITH, &json!("PV")), json!("PV"));
        // Numbers keep their exact value.
        static ALL_A: Pick = Pick::Keys(&["a"]);
        let v = json!({"a": [u64::MAX, i64::MIN, 0.1, 1e300]});
        assert_eq!(pick(&ALL_A, &v), v);
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
        // Each timeline read back is its record's own summary, its stalls placed on it.
        let own: Vec<Option<TimelineRef>> = j
            .runs
            .iter()
            .map(|r| {
                r.extra.get("timeline").map(|t| TimelineRef {
                    stalls: crate::stats::timeline_ref::stalls_of(r),
                    ..TimelineRef::of(t)
                })
            })
            .collect();
        assert!(own.iter().any(Option::is_some));
        // Small chunks: many of them, over every parser thread, must come back in order.
        for chunk in [1 << 20, 700, 64] {
            let streamed = Digested::read_in_chunks(dir.path(), false, chunk).unwrap();
            let (runs, timelines): (Vec<_>, Vec<_>) = loaded(&streamed.runs).into_iter().unzip();
            assert_eq!(timelines, own, "chunk {chunk}");
            assert_eq!(
                runs,
                loaded(&digests.runs)
                    .into_iter()
                    .map(|(r, _)| r)
                    .collect::<Vec<_>>(),
                "chunk {chunk}"
            );
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
                crate::testing::render(&j, format, &opts).unwrap()
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
        let section_of =
            |d: &Digested| crate::report::timeline::section(d, &crate::journal::accounting::settle(&d.runs));
        let section = section_of(&streamed);
        assert_eq!(section, section_of(&Digested::of(&j)));
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
        let mut counted_disturbed = 0;
        let mut unread = std::collections::HashSet::new();
        for r in &j.runs {
            let line = serde_json::to_vec(&Entry::Run(Box::new(r.clone()))).unwrap();
            let lite = ForReport::parse(&line).unwrap();
            assert_eq!(lite.timeline, r.extra.contains_key("timeline"));
            assert!(
                lite.record
                    .extra
                    .keys()
                    .all(|k| EXTRA.iter().any(|(e, _)| e == k))
            );
            let mut names = Names::default();
            let streamed = digest_with(&lite.record, &lite.telemetry, lite.detail, None, &ctx, &mut names);
            // The whole record as serde parses it, each figure read from its parsed value.
            let detail = r.payload.as_ref().map(|p| Detail {
                elapsed_ns: Some(p.elapsed_ns),
                ..Detail::of(&p.detail)
            });
            let whole = digest_with(
                r,
                &Telemetry::of(&r.extra),
                detail,
                None,
                &ctx,
                &mut Names::default(),
            );
            assert_eq!(streamed, whole);
            counted_disturbed += usize::from(streamed.disturbed());
            unread.insert(streamed.host_judged);
        }
        assert!(
            counted_disturbed > 0,
            "the fixture has runs counted though disturbed"
        );
        // Read, counted disturbed, failed and absent readings.
        assert_eq!(unread.len(), 4, "{unread:?}");
    }

    /// The vCPU wait a report reads is over the run's own window where the record has it
    /// (`vcpu_sched.run_window`), else over the probe's, as records from before it read.
    #[test]
    fn the_vcpu_wait_is_the_run_windows_where_there_is_one() {
        use serde_json::json;
        let j = rich_journal();
        let ctx = context(&j.header);
        let mut r = j
            .runs
            .iter()
            .find(|r| r.guest == 0 && r.extra.contains_key("vcpu_sched"))
            .unwrap()
            .clone();
        let probe = r.extra["vcpu_sched"]["mean_wait_share"].as_f64().unwrap();
        let wait = |r: &RunRecord| {
            digest_with(
                r,
                &Telemetry::of(&r.extra),
                None,
                None,
                &ctx,
                &mut Names::default(),
            )
            .vcpu_wait
        };
        assert_eq!(wait(&r), Ok(probe), "an older record: the probe's window");
        r.extra.get_mut("vcpu_sched").unwrap()["run_window"] =
            json!({"unavailable": "the run has no vCPU timeline (see extra.timeline)"});
        assert_eq!(wait(&r), Ok(probe), "no run window: the probe's");
        r.extra.get_mut("vcpu_sched").unwrap()["run_window"] = json!({
            "window": "payload", "start_s": 0.2, "end_s": 3.2, "wall_s": 3.0, "mean_wait_share": 0.6,
            "vcpus": [{"vcpu": 0, "run_s": 1.2, "wait_s": 1.8, "idle_s": 0.0, "wait_share": 0.6}],
        });
        assert_eq!(wait(&r), Ok(0.6));
    }

    /// A record line torn anywhere (the damage a crash leaves) is never read as a shorter
    /// record, by a report or by the accounting: the scanner passes over most of the line
    /// unparsed, so its shape checks are what catch the tear.
    #[test]
    fn a_torn_record_line_is_an_error_never_a_record() {
        use crate::journal::ForAccounting;
        for r in &rich_journal().runs {
            let line = serde_json::to_vec(&Entry::Run(Box::new(r.clone()))).unwrap();
            assert!(ForReport::parse(&line).is_ok() && ForAccounting::parse(&line).is_ok());
            for cut in 1..line.len() {
                let torn = &line[..cut];
                assert!(
                    ForReport::parse(torn).is_err(),
                    "{}",
                    String::from_utf8_lossy(torn)
                );
                assert!(
                    ForAccounting::parse(torn).is_err(),
                    "{}",
                    String::from_utf8_lossy(torn)
                );
            }
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
