//! Preempted lock holds and hand-overs, per run and per cell, from the lock payload's
//! `preemption` object (see `ocrig_payload::preempt_sample`): the share of holds that were
//! stretched (a holder preempted), of hand-overs that were stretched (the lock handed to a
//! waiter that was not running), the time lost to each as a share of the run, and which share
//! of the stretched ones the guest did not see (the host took the vCPU).
//!
//! Two pure steps so a caller that streams the journal can keep only the small per-run digest:
//! [`of_record`] reduces one record, [`aggregate`] folds a cell's digests. A workload without a
//! lock has no `preemption` field, so [`of_record`] gives `None` and the cell's columns are
//! absent; a lock run that did not measure a figure gives the payload's reason, never 0.

use serde::{Deserialize, Serialize};

use super::explain::{Measured, OnHost};
use super::summary::summarize;
#[cfg(test)]
use crate::journal::RunRecord;
use ocrig_payload::preempt_sample::Stretch;

/// What [`of_reported`] reads of a [`ocrig_payload::preempt_sample::PreemptionReport`]: its two
/// sides (or why each is missing); not its explanations and TSC calibration, which a streamed
/// journal's reports do not even parse.
#[derive(Debug, Deserialize)]
pub struct Sides {
    holds: Option<Stretch>,
    holds_unavailable: Option<String>,
    handovers: Option<Stretch>,
    handovers_unavailable: Option<String>,
}

impl Sides {
    /// Its fields' names in the report.
    const FIELDS: [&str; 4] = ["holds", "holds_unavailable", "handovers", "handovers_unavailable"];
}

/// One run's figures, each a value or why it is missing (`E`: a digest shares its reasons).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPreemption<E = String> {
    /// Stretched / timed holds.
    pub stretched_holds: Result<f64, E>,
    /// Time lost in stretched holds / the run's time.
    pub hold_lost: Result<f64, E>,
    /// Of the stretched holds, the share with no guest context switch (the host took the vCPU).
    pub holds_vcpu: Result<f64, E>,
    /// Stretched / timed hand-overs.
    pub stretched_handovers: Result<f64, E>,
    /// Time lost in stretched hand-overs / the run's time.
    pub handover_lost: Result<f64, E>,
    /// Of the stretched hand-overs, the share with no guest context switch.
    pub handovers_vcpu: Result<f64, E>,
    /// What the hold shares are of (None where the holds were not measured).
    pub holds_timed: Option<Timed>,
    /// What the hand-over shares are of.
    pub handovers_timed: Option<Timed>,
    /// The payload's listed stretched intervals judged against the host's own record, or why
    /// they could not be.
    pub observed: Result<Observed, E>,
}

/// One label's share of a run's (or a cell's) listed stretched intervals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Labelled {
    pub count: u64,
    pub ns: f64,
}

impl Labelled {
    fn add(&mut self, other: &Labelled) {
        self.count += other.count;
        self.ns += other.ns;
    }
}

/// The listed stretched intervals (both sides) judged with the host's record:
/// - `vcpu`: the host had the vCPU's thread off its CPU for at least half of it, and the guest
///   kept the thread running (the payload's split said vcpu);
/// - `both`: off the host CPU for at least half, and the guest had switched the thread out or
///   kept it waiting (the split said guest: it waited on the guest's runqueue while the host
///   held the vCPU);
/// - `guest`: the vCPU ran for more than half of it, and the guest switched the thread out;
/// - `other_vcpu`: its vCPU ran and the guest kept the thread running, but another vCPU of the
///   guest was off its host CPU for at least half of it: the thread waited inside the guest's
///   kernel for that vCPU (a kernel lock its preempted holder kept, an IPI it had to answer;
///   under 2x most of the stretched holds whose own vCPU ran were these, a guest tick long);
/// - `unexplained`: none of these (an interrupt, an emulation stall, or the clock tie's error).
///
/// Only intervals at least [`ATTRIBUTABLE_ERRORS`] times the clock tie's error long are judged;
/// the rest are `too_short`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    pub vcpu: Labelled,
    pub both: Labelled,
    pub guest: Labelled,
    #[serde(default)]
    pub other_vcpu: Labelled,
    pub unexplained: Labelled,
    /// Of the judged, those the guest moved from one vCPU to another during the interval
    /// (`cpu_at_start` ≠ `cpu`): it switched the thread out, so they count as the guest's
    /// doing (guest, or both where a vCPU of theirs was off) whatever the payload's split said.
    #[serde(default)]
    pub moved: u64,
    /// Listed but shorter than [`ATTRIBUTABLE_ERRORS`] × the tie's error, or outside the trace.
    pub too_short: u64,
    pub unread: u64,
    /// The clock tie's error, ns (a cell: the largest of its runs').
    pub error_ns: u64,
    /// Runs judged (1 for a run).
    pub runs: usize,
}

/// An interval shorter than this many clock-tie errors is not judged: placed up to one error
/// early or late, half of it could fall on either side of a host switch.
pub const ATTRIBUTABLE_ERRORS: f64 = 4.0;

impl Observed {
    pub fn judged(&self) -> u64 {
        self.vcpu.count + self.both.count + self.guest.count + self.other_vcpu.count + self.unexplained.count
    }

    fn add(&mut self, o: &Observed) {
        self.vcpu.add(&o.vcpu);
        self.both.add(&o.both);
        self.guest.add(&o.guest);
        self.other_vcpu.add(&o.other_vcpu);
        self.unexplained.add(&o.unexplained);
        self.moved += o.moved;
        self.too_short += o.too_short;
        self.unread += o.unread;
        self.error_ns = self.error_ns.max(o.error_ns);
        self.runs += o.runs;
    }

    /// One run's listed intervals of both sides with the host's record of them.
    fn of(p: &Sides, on_host: &OnHost) -> Result<Self, String> {
        if let Some(why) = &on_host.unavailable {
            return Err(format!("not judged by the host's record: {why}"));
        }
        let error = on_host
            .error_ns
            .ok_or("not judged by the host's record: the clock tie has no error")?;
        let mut o = Observed {
            error_ns: error,
            runs: 1,
            ..Default::default()
        };
        let sides = [(&p.holds, &on_host.holds), (&p.handovers, &on_host.handovers)];
        for (side, host) in sides {
            let Some(side) = side else { continue };
            for (i, s) in side.longest.iter().enumerate() {
                let Some((off, others)) = host
                    .get(i)
                    .and_then(|h| Some((h.off_ns?, h.others_off_ns.unwrap_or(0))))
                else {
                    o.unread += 1;
                    continue;
                };
                let len = s.len_ns as f64;
                if len < ATTRIBUTABLE_ERRORS * error as f64 {
                    o.too_short += 1;
                    continue;
                }
                let half = |ns: i64| ns as f64 >= len / 2.0;
                let moved = s.cpu_at_start.is_some_and(|c| Some(c) != s.cpu);
                o.moved += u64::from(moved);
                let label = match (half(off), s.guest || moved, half(others)) {
                    (true, false, _) => &mut o.vcpu,
                    (true, true, _) => &mut o.both,
                    (false, true, _) => &mut o.guest,
                    (false, false, true) => &mut o.other_vcpu,
                    (false, false, false) => &mut o.unexplained,
                };
                label.count += 1;
                label.ns += len;
            }
        }
        Ok(o)
    }
}

/// The denominator of one run's stretched share: the intervals it timed and stretched, and
/// the run's length, for a reader to tell a share of millions from a share of five.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timed {
    pub timed: u64,
    pub stretched: u64,
    /// The run's length, s; None when its report gives none.
    pub run_s: Option<f64>,
}

/// A cell's denominator of one side: means per run over the runs that timed it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Denominator {
    pub runs: usize,
    pub timed_per_run: f64,
    pub stretched_per_run: f64,
    /// Timed per second of run; None when no run gave its length.
    pub timed_per_s: Option<f64>,
}

impl Denominator {
    fn of<'a>(runs: impl Iterator<Item = &'a Timed>) -> Option<Self> {
        let (mut n, mut timed, mut stretched) = (0usize, 0.0, 0.0);
        let (mut rated, mut per_s) = (0usize, 0.0);
        for t in runs {
            n += 1;
            timed += t.timed as f64;
            stretched += t.stretched as f64;
            if let Some(s) = t.run_s.filter(|s| *s > 0.0) {
                rated += 1;
                per_s += t.timed as f64 / s;
            }
        }
        (n > 0).then(|| Self {
            runs: n,
            timed_per_run: timed / n as f64,
            stretched_per_run: stretched / n as f64,
            timed_per_s: (rated > 0).then(|| per_s / rated as f64),
        })
    }

    /// Too few intervals a run for a share to mean what a percentage says: shown as a count.
    pub fn too_few(&self) -> bool {
        self.timed_per_run < SHARE_MIN_TIMED
    }
}

/// Intervals a run below which a stretched share is shown as a count (`3 of 41/run`), not a
/// percentage: at 1x a two-thread lock with no contention hands over a handful of times, and
/// "39 % of hand-overs stretched" then reads as "most hand-overs were preempted".
pub const SHARE_MIN_TIMED: f64 = 100.0;

impl RunPreemption {
    /// The same with its reasons mapped (a digest interns them: a million runs give a few).
    pub fn map_err<E>(self, mut f: impl FnMut(String) -> E) -> RunPreemption<E> {
        RunPreemption {
            stretched_holds: self.stretched_holds.map_err(&mut f),
            hold_lost: self.hold_lost.map_err(&mut f),
            holds_vcpu: self.holds_vcpu.map_err(&mut f),
            stretched_handovers: self.stretched_handovers.map_err(&mut f),
            handover_lost: self.handover_lost.map_err(&mut f),
            handovers_vcpu: self.handovers_vcpu.map_err(&mut f),
            holds_timed: self.holds_timed,
            handovers_timed: self.handovers_timed,
            observed: self.observed.map_err(f),
        }
    }
}

/// The run's figures; `None` when its report has no `preemption` field (a workload without a
/// lock, a failed run, or a payload older than the sampler).
#[cfg(test)] // digests read the report's fields typed (of_reported)
pub fn of_record(r: &RunRecord) -> Option<RunPreemption> {
    let p = r.payload.as_ref()?;
    of_detail(&p.detail, Some(p.elapsed_ns))
}

/// [`of_record`] from the payload report's workload fields and its length.
#[cfg(test)] // digests read the report's fields typed (`of_reported`)
pub fn of_detail(
    detail: &serde_json::Map<String, serde_json::Value>,
    elapsed_ns: Option<u64>,
) -> Option<RunPreemption> {
    let reported = detail.get("preemption").map(Reported::of_value);
    of_reported(
        reported.as_ref(),
        detail.get("preemption_unavailable").and_then(|w| w.as_str()),
        elapsed_ns,
        Err(NO_HOST_RECORD.into()),
    )
}

/// A payload report's `preemption` field as [`of_reported`] reads it.
#[derive(Debug)]
pub enum Reported {
    /// `null`: not measured (the report's `preemption_unavailable` says why).
    Null,
    /// Its [`Sides`], or why they do not read.
    Sides(Result<Box<Sides>, String>),
}

impl Reported {
    #[cfg(test)] // reports parse it from its text (`of_raw`)
    fn of_value(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Reported::Null,
            v => Reported::Sides(Sides::deserialize(v).map(Box::new).map_err(|e| e.to_string())),
        }
    }

    /// The field whose JSON text is `raw`.
    pub fn of_raw(raw: &str) -> Self {
        match raw.trim() {
            "null" => Reported::Null,
            // Its four sides only: its prose and TSC figures (more than half of it) are passed
            // over by the scanner; what is not an object is read whole, to say what it is.
            raw => Reported::Sides(
                match crate::journal::scan::filtered(raw.as_bytes(), |m| Sides::FIELDS.contains(&&*m.key)) {
                    Ok(sides) => serde_json::from_slice(&sides),
                    Err(_) => serde_json::from_str(raw),
                }
                .map(Box::new)
                .map_err(super::explain::without_place),
            ),
        }
    }
}

/// Why a run's stretched intervals were not judged by the host's record when its record has
/// none.
pub const NO_HOST_RECORD: &str =
    "no host record of the stretched intervals (extra.stretched_on_host: a run without a vCPU timeline)";

/// The run's figures from its report's `preemption` field (`None`: absent), its
/// `preemption_unavailable`, its `elapsed_ns` (the run's length) and the host's record of its
/// listed stretched intervals (or why there is none).
pub fn of_reported(
    preemption: Option<&Reported>,
    unavailable: Option<&str>,
    elapsed_ns: Option<u64>,
    on_host: Result<&OnHost, String>,
) -> Option<RunPreemption> {
    let all = |why: String| RunPreemption {
        stretched_holds: Err(why.clone()),
        hold_lost: Err(why.clone()),
        holds_vcpu: Err(why.clone()),
        stretched_handovers: Err(why.clone()),
        handover_lost: Err(why.clone()),
        handovers_vcpu: Err(why.clone()),
        holds_timed: None,
        handovers_timed: None,
        observed: Err(why),
    };
    let p = match preemption? {
        Reported::Null => {
            let why = unavailable.unwrap_or("not reported by the payload");
            return Some(all(why.to_string()));
        }
        Reported::Sides(Ok(p)) => p,
        Reported::Sides(Err(e)) => return Some(all(format!("unreadable preemption report: {e}"))),
    };
    let side = |s: &Option<Stretch>, why: &Option<String>| {
        let why = why
            .clone()
            .unwrap_or_else(|| "not reported by the payload".into());
        match s {
            Some(s) => (
                Ok(s.stretched_share),
                Ok(s.lost_share),
                if s.stretched == 0 {
                    Err("no stretched sample to split".to_string())
                } else {
                    Ok(s.stretched_vcpu as f64 / s.stretched as f64)
                },
            ),
            None => (Err(why.clone()), Err(why.clone()), Err(why)),
        }
    };
    let (stretched_holds, hold_lost, holds_vcpu) = side(&p.holds, &p.holds_unavailable);
    let (stretched_handovers, handover_lost, handovers_vcpu) = side(&p.handovers, &p.handovers_unavailable);
    let run_s = elapsed_ns.filter(|&n| n > 0).map(|n| n as f64 / 1e9);
    let timed = |s: &Option<Stretch>| {
        s.as_ref().map(|s| Timed {
            timed: s.timed,
            stretched: s.stretched,
            run_s,
        })
    };
    Some(RunPreemption {
        stretched_holds,
        hold_lost,
        holds_vcpu,
        stretched_handovers,
        handover_lost,
        handovers_vcpu,
        holds_timed: timed(&p.holds),
        handovers_timed: timed(&p.handovers),
        observed: on_host.and_then(|h| Observed::of(p, h)),
    })
}

/// A cell's figures: each a [`Measured`] over its runs (mean per run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CellPreemption {
    pub stretched_holds: Measured,
    pub hold_lost: Measured,
    pub holds_vcpu: Measured,
    pub stretched_handovers: Measured,
    pub handover_lost: Measured,
    pub handovers_vcpu: Measured,
    /// What the hold shares are of; None when no run timed a hold.
    #[serde(default)]
    pub holds_timed: Option<Denominator>,
    /// What the hand-over shares are of.
    #[serde(default)]
    pub handovers_timed: Option<Denominator>,
    /// The listed stretched intervals of the runs the host's record judged, summed; None with
    /// `observed_unavailable` where no run was.
    #[serde(default)]
    pub observed: Option<Observed>,
    #[serde(default)]
    pub observed_unavailable: Option<String>,
}

fn measured<'a, E: AsRef<str> + 'a>(runs: impl Iterator<Item = &'a Result<f64, E>>) -> Measured {
    let mut samples = Vec::new();
    let mut reason = None;
    for r in runs {
        match r {
            Ok(v) => samples.push(*v),
            Err(e) => {
                reason.get_or_insert_with(|| e.as_ref().to_string());
            }
        }
    }
    Measured {
        summary: summarize(&samples),
        unavailable: samples
            .is_empty()
            .then(|| reason.unwrap_or_else(|| "no valid runs".into())),
        samples,
    }
}

/// Folds a cell's per-run figures (its valid primary runs, in run order); `None` when no run
/// had any (the cell's workload has no lock).
pub fn aggregate<E: AsRef<str>>(runs: impl IntoIterator<Item = RunPreemption<E>>) -> Option<CellPreemption> {
    let runs: Vec<RunPreemption<E>> = runs.into_iter().collect();
    if runs.is_empty() {
        return None;
    }
    Some(CellPreemption {
        stretched_holds: measured(runs.iter().map(|r| &r.stretched_holds)),
        hold_lost: measured(runs.iter().map(|r| &r.hold_lost)),
        holds_vcpu: measured(runs.iter().map(|r| &r.holds_vcpu)),
        stretched_handovers: measured(runs.iter().map(|r| &r.stretched_handovers)),
        handover_lost: measured(runs.iter().map(|r| &r.handover_lost)),
        handovers_vcpu: measured(runs.iter().map(|r| &r.handovers_vcpu)),
        holds_timed: Denominator::of(runs.iter().filter_map(|r| r.holds_timed.as_ref())),
        handovers_timed: Denominator::of(runs.iter().filter_map(|r| r.handovers_timed.as_ref())),
        observed: runs.iter().filter_map(|r| r.observed.as_ref().ok()).fold(
            None,
            |acc: Option<Observed>, o| {
                let mut a = acc.unwrap_or_default();
                a.add(o);
                Some(a)
            },
        ),
        observed_unavailable: runs.iter().all(|r| r.observed.is_err()).then(|| {
            runs.iter()
                .find_map(|r| r.observed.as_ref().err().map(|e| e.as_ref().to_string()))
                .unwrap_or_else(|| "no valid runs".into())
        }),
    })
}

/// What the report columns mean.
pub const NOTE: &str = "stretched hold / hand-over: share of lock holds longer than the run's own median hold by more than the \
     threshold (holder preempted), and of hand-overs (a release to the waiting next owner's first instruction) longer than the \
     run's median hand-over by more than it (waiter preempted), all timed with the guest's TSC, each followed by what it is a share of (`of 388k/run, 129k/s`: holds or \
     hand-overs timed per run and per second; under 100 a run, the stretched ones are counted instead: `2 of 5/run`); \
     hold / hand-over loss: the time they took beyond normal as a share of the run; mean per run; \
     on the host's record: the payload's 32 longest stretched holds and hand-overs a run, placed on the host's clock (the guest's TSC \
     tied to it before the run, within the tie's error) and judged by the host's own timeline of their vCPU: vcpu = off its host CPU \
     for at least half and the guest kept the thread running, both = off it and the guest had switched the thread out, guest = the \
     vCPU ran and the guest switched the thread out, other vCPU = its vCPU ran and the guest kept the thread, but another vCPU of the \
     guest was off its CPU for at least half (the thread waited in the guest kernel for it: a lock its preempted holder kept, an IPI), \
     unexpl. = none of these (interrupts, emulation stalls); only those at least 4 tie errors long are judged";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{preemption_json, with_payload};

    fn lock_record(h: u64, o: u64) -> RunRecord {
        let mut r = crate::testing::record("v", 2.0, "lock", 0, &[("ops_per_sec", 1.0)]);
        with_payload(
            &mut r,
            serde_json::json!({"preemption": preemption_json(h, o, 0.1, 0.4), "preemption_unavailable": null}),
        );
        r
    }

    #[test]
    fn a_run_reduces_to_its_shares_and_a_cell_to_their_means() {
        let p = of_record(&lock_record(10, 100)).unwrap();
        assert_eq!(p.stretched_holds, Ok(0.01));
        assert_eq!(p.hold_lost, Ok(0.1));
        assert_eq!(p.holds_vcpu, Ok(0.6));
        assert_eq!(p.stretched_handovers, Ok(0.2));
        assert_eq!(p.handover_lost, Ok(0.4));
        assert_eq!(p.handovers_vcpu, Ok(1.0));
        let q = of_record(&lock_record(30, 0)).unwrap();
        assert_eq!(q.handovers_vcpu, Err("no stretched sample to split".into()));
        let c = aggregate([p, q]).unwrap();
        assert!((c.stretched_holds.mean().unwrap() - 0.02).abs() < 1e-12);
        assert_eq!(c.stretched_holds.samples.len(), 2);
        assert!((c.stretched_handovers.mean().unwrap() - 0.1).abs() < 1e-12);
        // One run could split its hand-overs: the mean is over that one.
        assert_eq!(c.handovers_vcpu.samples, [1.0]);
        // Each share with what it is a share of: 1000 holds and 500 hand-overs a 3 s run.
        let h = c.holds_timed.unwrap();
        assert_eq!((h.runs, h.timed_per_run, h.stretched_per_run), (2, 1000.0, 20.0));
        assert!((h.timed_per_s.unwrap() - 1000.0 / 3.0).abs() < 1e-9, "{h:?}");
        let o = c.handovers_timed.unwrap();
        assert_eq!((o.timed_per_run, o.stretched_per_run), (500.0, 50.0));
        assert!(!h.too_few() && !o.too_few());
    }

    #[test]
    fn listed_intervals_are_judged_by_the_hosts_record() {
        let mut p = preemption_json(5, 0, 0.0, 0.0);
        let ms = 1_000_000u64;
        let listed = |len: u64, guest: bool| serde_json::json!({"at_ns": 0, "len_ns": len, "thread": 0, "cpu": 1, "guest": guest, "guest_wait_ns": 0});
        p["holds"]["longest"] = serde_json::json!([
            listed(30 * ms, false),
            listed(30 * ms, true),
            listed(2 * ms, true),
            listed(ms, false),
            listed(ms / 10, false),
            listed(5 * ms, false),
            listed(4 * ms, false),
            // The guest moved it from vCPU 0 to 1 though the split said vcpu: the guest's
            // doing, and its vCPU off: both.
            serde_json::json!({"at_ns": 0, "len_ns": 20 * ms, "thread": 0, "cpu_at_start": 0, "cpu": 1, "guest": false}),
        ]);
        let on_host: OnHost = serde_json::from_value(serde_json::json!({
            "error_ns": 250_000,
            "holds": [{"off_ns": 30 * ms}, {"off_ns": 29 * ms}, {"off_ns": 0}, {"off_ns": 100_000}, {"off_ns": 0}, {"off_ns": null, "why": "outside what the trace kept"}, {"off_ns": 0, "others_off_ns": 3 * ms}, {"off_ns": 20 * ms, "moved_from": 0}],
            // A one-thread run times no hand-over: the record says null, and the holds are
            // still judged.
            "handovers": null,
        }))
        .unwrap();
        let reported = Reported::of_value(&p);
        let run = of_reported(Some(&reported), None, Some(3_000_000_000), Ok(&on_host)).unwrap();
        let o = run.observed.clone().unwrap();
        let counts = (
            o.vcpu.count,
            o.both.count,
            o.guest.count,
            o.unexplained.count,
            o.too_short,
            o.unread,
        );
        assert_eq!(counts, (1, 2, 1, 1, 1, 1), "{o:?}");
        assert_eq!((o.other_vcpu.count, o.other_vcpu.ns), (1, 4e6));
        assert_eq!((o.vcpu.ns, o.both.ns, o.moved), (30e6, 50e6, 1));
        assert_eq!((o.judged(), o.error_ns, o.runs), (6, 250_000, 1));
        // Without the host's record: why, and the cell says it too.
        let none = of_reported(
            Some(&reported),
            None,
            Some(3_000_000_000),
            Err(NO_HOST_RECORD.into()),
        )
        .unwrap();
        assert_eq!(none.observed.clone().unwrap_err(), NO_HOST_RECORD);
        let unavailable: OnHost =
            serde_json::from_value(serde_json::json!({"unavailable": "no vCPU timeline"})).unwrap();
        let why = of_reported(Some(&reported), None, None, Ok(&unavailable))
            .unwrap()
            .observed
            .unwrap_err();
        assert!(why.contains("no vCPU timeline"), "{why}");
        // A cell sums the judged runs and keeps the largest error.
        let c = aggregate([run.clone(), run, none.clone()]).unwrap();
        let o = c.observed.unwrap();
        assert_eq!((o.vcpu.count, o.runs, o.error_ns), (2, 2, 250_000));
        assert!(c.observed_unavailable.is_none());
        let c = aggregate([none]).unwrap();
        assert!(c.observed.is_none() && c.observed_unavailable.as_deref() == Some(NO_HOST_RECORD));
    }

    #[test]
    fn a_share_of_a_handful_of_hand_overs_is_too_few_to_be_a_percentage() {
        let mut few = preemption_json(0, 0, 0.0, 0.0);
        few["handovers"]["timed"] = 5.into();
        few["handovers"]["stretched"] = 2.into();
        few["handovers"]["stretched_share"] = 0.4.into();
        let mut r = crate::testing::record("v", 1.0, "lock", 0, &[]);
        with_payload(&mut r, serde_json::json!({"preemption": few}));
        let p = of_record(&r).unwrap();
        assert_eq!(
            p.handovers_timed,
            Some(Timed {
                timed: 5,
                stretched: 2,
                run_s: Some(3.0)
            })
        );
        let c = aggregate([p]).unwrap();
        let o = c.handovers_timed.unwrap();
        assert!(o.too_few(), "{o:?}");
        assert_eq!(o.stretched_per_run, 2.0);
        assert!(!c.holds_timed.unwrap().too_few());
    }

    #[test]
    fn absent_for_workloads_without_a_lock_and_reasons_for_unmeasured_figures() {
        let mut hb = crate::testing::record("v", 1.0, "hb", 0, &[("time_s", 1.0)]);
        assert_eq!(of_record(&hb), None);
        with_payload(&mut hb, serde_json::json!({"groups": 2}));
        assert_eq!(of_record(&hb), None);
        assert_eq!(aggregate(std::iter::empty::<RunPreemption>()), None);

        let mut off = crate::testing::record("v", 1.0, "lock", 0, &[]);
        with_payload(
            &mut off,
            serde_json::json!({"preemption": null, "preemption_unavailable": "switched off (--no-hold-sampling)"}),
        );
        let p = of_record(&off).unwrap();
        assert!(
            p.stretched_holds
                .clone()
                .unwrap_err()
                .contains("--no-hold-sampling")
        );
        let c = aggregate([p]).unwrap();
        assert_eq!(c.hold_lost.mean(), None);
        assert!(c.hold_lost.unavailable.unwrap().contains("--no-hold-sampling"));

        // One thread: holds measured, hand-overs null with the payload's reason.
        let mut one = preemption_json(0, 0, 0.0, 0.0);
        one["handovers"] = serde_json::Value::Null;
        one["handovers_unavailable"] = "no acquisition waited".into();
        let mut r = crate::testing::record("v", 1.0, "lock", 0, &[]);
        with_payload(&mut r, serde_json::json!({"preemption": one}));
        let p = of_record(&r).unwrap();
        assert_eq!(p.stretched_holds, Ok(0.0));
        assert_eq!(p.stretched_handovers, Err("no acquisition waited".into()));
    }
}
