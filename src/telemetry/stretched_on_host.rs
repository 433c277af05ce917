//! What the host's own record says about each stretched hold and hand-over the payload listed
//! (`preemption.{holds,handovers}.longest`): how long that interval's vCPU thread was off its
//! host CPU during it, from the run's vCPU timeline ([`super::sched_trace`]).
//!
//! The interval is put on the host's clock with the guest's TSC tie (`extra.guest_clock`: the
//! host's time of one guest TSC reading, within half a round trip) and the run's own TSC rate
//! (`preemption.window`), then onto the trace's clock with the trace's own tie (0 on this
//! machine, the markers' offset for a remote host). The result is a measurement, per interval,
//! aligned with the payload's lists: `at_us` (its start on the timeline, µs from the run's
//! start), `off_ns` (null, with `why`, where it cannot be read: the
//! interval lies outside what was traced, or its vCPU was not traced), and `others_off_ns`:
//! how long at least one of the guest's other vCPUs was off its CPU meanwhile (a thread whose
//! own vCPU ran but waited inside the guest's kernel for another vCPU: a kernel lock its
//! preempted holder kept, an IPI it had to answer). Judging it (vcpu, guest,
//! both, unexplained) is the report's (`stats::preemption`).
//!
//! An interval that began on one vCPU and ended on another (`cpu_at_start` ≠ `cpu`: the guest
//! moved the thread, so it had switched it out) keeps `moved_from` and the longer of the two
//! vCPUs' off times as `off_ns` (where the migration fell is not known; the thread waited on the
//! first or ran on the second, and either vCPU off held it); `others_off_ns` is then over the
//! guest's other vCPUs than those two.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::guest_tsc::TscOnHost;
use super::sched_trace::{Timeline, Who};

/// Each listed interval's off-CPU time on the host, or why there is none for the run.
///
/// `preemption`: the payload's `preemption` object; `clock`: `extra.guest_clock`; `guest`: the
/// guest's index in the timeline; `trace_offset_ns`: the trace's clock minus this machine's.
pub fn of_run(preemption: &Value, clock: &Value, tl: &Timeline, guest: u32, trace_offset_ns: i64) -> Value {
    let Some(map) = TscOnHost::of(clock, &preemption["window"]) else {
        return json!({ "unavailable": unavailable(preemption, clock) });
    };
    let on_trace_us =
        |ns: i64| (map.host_ns_in_window(ns) + trace_offset_ns as f64 - tl.run_start_mono_ns as f64) / 1e3;
    let on_cpu = vcpu_segments(tl, guest);
    let side = |kind: &str| -> Value {
        let Some(list) = preemption[kind]["longest"].as_array() else {
            return Value::Null;
        };
        list.iter()
            .map(|s| {
                let (Some(at), Some(len), Some(vcpu)) = (s["at_ns"].as_i64(), s["len_ns"].as_i64(), s["cpu"].as_u64())
                else {
                    return json!({ "off_ns": null, "why": "the interval has no time, length or vCPU" });
                };
                let (start_us, end_us) = (on_trace_us(at), on_trace_us(at + len));
                if start_us < tl.traced_from_us as f64 || end_us > tl.traced_to_us as f64 {
                    return json!({ "off_ns": null, "why": "outside what the trace kept" });
                }
                let vcpu = vcpu as u32;
                let began_on = s["cpu_at_start"].as_u64().map_or(vcpu, |c| c as u32);
                let mut off_us = 0.0f64;
                for v in [began_on, vcpu] {
                    let Some(segments) = on_cpu.get(&v) else {
                        return json!({ "off_ns": null, "why": format!("vCPU {v} of guest {guest} is not in the trace") });
                    };
                    off_us = off_us.max(end_us - start_us - overlap_us(segments, start_us, end_us));
                }
                let mut others: Vec<(f64, f64)> = on_cpu
                    .iter()
                    .filter(|(v, _)| **v != vcpu && **v != began_on)
                    .flat_map(|(_, segs)| gaps_us(segs, start_us, end_us))
                    .collect();
                let others_off_us = union_us(&mut others);
                let mut out = json!({
                    "at_us": start_us.round() as i64,
                    "off_ns": (off_us * 1e3).max(0.0).round() as i64,
                    "others_off_ns": (others_off_us * 1e3).round() as i64,
                });
                if began_on != vcpu {
                    out["moved_from"] = json!(began_on);
                }
                out
            })
            .collect()
    };
    json!({
        "error_ns": map.error_ns(),
        // How far the guest's clock ran off this machine's over the window (TCG: fast).
        "tsc_ppm": (map.window_ppm() * 10.0).round() / 10.0,
        "holds": side("holds"),
        "handovers": side("handovers"),
    })
}

fn unavailable(preemption: &Value, clock: &Value) -> String {
    if let Some(why) = clock["unavailable"].as_str() {
        format!("the guest's TSC was not tied to the host's clock: {why}")
    } else if clock.is_null() {
        "the guest's TSC was not tied to the host's clock".into()
    } else if preemption["window"].is_null() {
        "the payload gave no window on its TSC (an older payload, or no hold timing)".into()
    } else {
        "the guest's clock tie or the payload's window is incomplete".into()
    }
}

/// Each vCPU's on-CPU segments of guest `guest`, µs from the run's start, in time order.
fn vcpu_segments(tl: &Timeline, guest: u32) -> BTreeMap<u32, Vec<(i64, i64)>> {
    let mut out: BTreeMap<u32, Vec<(i64, i64)>> = BTreeMap::new();
    for s in &tl.segments {
        if let Who::Vcpu { guest: g, vcpu } = tl.who[s[3] as usize]
            && g == guest
        {
            out.entry(vcpu).or_default().push((s[1], s[2]));
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

/// Time of `[start, end]` covered by `segments` (sorted, not overlapping: one thread), µs.
fn overlap_us(segments: &[(i64, i64)], start: f64, end: f64) -> f64 {
    // The first segment that may reach into the interval: segments end in start order.
    let from = segments.partition_point(|&(_, e)| (e as f64) <= start);
    segments[from..]
        .iter()
        .take_while(|&&(s, _)| (s as f64) < end)
        .map(|&(s, e)| (e as f64).min(end) - (s as f64).max(start))
        .filter(|d| *d > 0.0)
        .sum()
}

/// The parts of `[start, end]` that `segments` (sorted, one thread's) do not cover, µs.
fn gaps_us(segments: &[(i64, i64)], start: f64, end: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut at = start;
    let from = segments.partition_point(|&(_, e)| (e as f64) <= start);
    for &(s, e) in segments[from..].iter().take_while(|&&(s, _)| (s as f64) < end) {
        if s as f64 > at {
            out.push((at, s as f64));
        }
        at = at.max(e as f64);
    }
    if at < end {
        out.push((at, end));
    }
    out
}

/// The length of the union of `parts`, µs (sorts them).
fn union_us(parts: &mut [(f64, f64)]) -> f64 {
    parts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut reach) = (0.0, f64::NEG_INFINITY);
    for &(s, e) in parts.iter() {
        let s = s.max(reach);
        if e > s {
            total += e - s;
            reach = e;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline() -> Timeline {
        Timeline {
            clock: "mono".into(),
            run_start_mono_ns: 1_000_000_000,
            run_end_us: 100_000,
            traced_from_us: -500,
            traced_to_us: 100_500,
            cpus: vec![0, 1],
            who: vec![
                Who::Vcpu { guest: 0, vcpu: 0 },
                Who::Vcpu { guest: 0, vcpu: 1 },
                Who::Other { comm: "hog".into() },
            ],
            // vCPU 1 runs on CPU 1 except 30-60 ms, when a hog has it; vCPU 0 runs throughout.
            segments: vec![
                [0, -500, 100_500, 0],
                [1, -500, 30_000, 1],
                [1, 30_000, 60_000, 2],
                [1, 60_000, 100_500, 1],
            ],
            dropped_events: 0,
            clipped: None,
        }
    }

    /// A payload whose window starts 10 ms into the run on the host's clock: its TSC (1 GHz,
    /// one tick a ns) read 5_000 at host time 1.002 s, and the window starts at tick
    /// 8_005_000, 8 ms later.
    fn preemption(longest: Value) -> Value {
        json!({
            "window": {"start_tick": 8_005_000u64, "hz": 1e9},
            "holds": {"longest": longest},
            "handovers": {"longest": []},
        })
    }

    fn clock() -> Value {
        json!({"host_mono_ns": 1_002_000_000u64, "tsc": 5_000u64, "error_ns": 250_000})
    }

    #[test]
    fn each_interval_gets_the_time_its_vcpu_was_off_the_host_cpu() {
        let p = preemption(json!([
            // 25-55 ms of the run on vCPU 1: off 30-55 = 25 ms.
            {"at_ns": 15_000_000, "len_ns": 30_000_000, "cpu": 1},
            // The same on vCPU 0, which ran throughout: off 0.
            {"at_ns": 15_000_000, "len_ns": 30_000_000, "cpu": 0},
            // Wholly inside the hog's turn: off all of it.
            {"at_ns": 25_000_000, "len_ns": 10_000_000, "cpu": 1},
            // Past the trace's end.
            {"at_ns": 89_000_000, "len_ns": 5_000_000, "cpu": 1},
            // A vCPU the timeline does not know.
            {"at_ns": 0, "len_ns": 1_000_000, "cpu": 7},
        ]));
        let out = of_run(&p, &clock(), &timeline(), 0, 0);
        let off: Vec<Value> = out["holds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["off_ns"].clone())
            .collect();
        assert_eq!(
            off,
            [
                json!(25_000_000),
                json!(0),
                json!(10_000_000),
                Value::Null,
                Value::Null
            ]
        );
        assert_eq!(out["holds"][3]["why"], "outside what the trace kept");
        // Meanwhile the other vCPU: vCPU 0 never off; for vCPU 0's interval, vCPU 1 off 25 ms.
        let others: Vec<Value> = (0..3).map(|i| out["holds"][i]["others_off_ns"].clone()).collect();
        assert_eq!(others, [json!(0), json!(25_000_000), json!(0)]);
        assert_eq!(out["holds"][0]["at_us"], 25_000);
        assert!(out["holds"][4]["why"].as_str().unwrap().contains("vCPU 7"));
        assert_eq!(out["error_ns"], 250_000);
        assert_eq!(out["handovers"], json!([]));
        // A remote trace 1 ms ahead of this machine's clock: the same interval lands 1 ms later.
        let later = of_run(&p, &clock(), &timeline(), 0, 1_000_000);
        assert_eq!(later["holds"][0]["off_ns"], 26_000_000);
    }

    /// An interval the guest moved from one vCPU to the other: judged by the longer off time of
    /// the two, said where it began; one that stayed carries no `moved_from`.
    #[test]
    fn an_interval_the_guest_moved_is_read_on_both_its_vcpus() {
        let p = preemption(json!([
            // Began on vCPU 1 (off 25 of its 30 ms), ended on vCPU 0 (never off).
            {"at_ns": 15_000_000, "len_ns": 30_000_000, "cpu_at_start": 1, "cpu": 0},
            // The other way round: the same.
            {"at_ns": 15_000_000, "len_ns": 30_000_000, "cpu_at_start": 0, "cpu": 1},
            // Stayed on vCPU 0.
            {"at_ns": 15_000_000, "len_ns": 30_000_000, "cpu_at_start": 0, "cpu": 0},
            // Began on a vCPU the trace does not know.
            {"at_ns": 15_000_000, "len_ns": 30_000_000, "cpu_at_start": 5, "cpu": 0},
        ]));
        let out = of_run(&p, &clock(), &timeline(), 0, 0);
        let h = &out["holds"];
        assert_eq!(
            (&h[0]["off_ns"], &h[0]["moved_from"]),
            (&json!(25_000_000), &json!(1))
        );
        assert_eq!(
            (&h[1]["off_ns"], &h[1]["moved_from"]),
            (&json!(25_000_000), &json!(0))
        );
        // No other vCPU than the two it ran on.
        assert_eq!(h[0]["others_off_ns"], 0);
        assert_eq!(h[2]["off_ns"], 0);
        assert!(h[2].get("moved_from").is_none());
        assert!(h[3]["why"].as_str().unwrap().contains("vCPU 5"), "{}", h[3]);
    }

    #[test]
    fn without_a_clock_tie_or_a_window_the_run_says_why() {
        let p = preemption(json!([]));
        let no_tie = of_run(&p, &json!({"unavailable": "ssh: broken pipe"}), &timeline(), 0, 0);
        assert!(
            no_tie["unavailable"]
                .as_str()
                .unwrap()
                .contains("ssh: broken pipe")
        );
        let old = json!({"holds": {"longest": []}});
        let no_window = of_run(&old, &clock(), &timeline(), 0, 0);
        assert!(no_window["unavailable"].as_str().unwrap().contains("no window"));
    }

    #[test]
    fn gaps_and_their_union() {
        let segs = [(0, 10), (20, 30), (40, 50)];
        assert_eq!(gaps_us(&segs, 5.0, 45.0), [(10.0, 20.0), (30.0, 40.0)]);
        assert_eq!(
            gaps_us(&segs, -5.0, 55.0),
            [(-5.0, 0.0), (10.0, 20.0), (30.0, 40.0), (50.0, 55.0)]
        );
        assert_eq!(gaps_us(&[], 1.0, 2.0), [(1.0, 2.0)]);
        let mut parts = [(30.0, 40.0), (0.0, 10.0), (5.0, 15.0), (12.0, 14.0)];
        assert_eq!(union_us(&mut parts), 15.0 + 10.0);
    }

    #[test]
    fn overlap_sums_the_covered_parts() {
        let segs = [(0, 10), (20, 30), (40, 50)];
        assert_eq!(overlap_us(&segs, 5.0, 45.0), 5.0 + 10.0 + 5.0);
        assert_eq!(overlap_us(&segs, 10.0, 20.0), 0.0);
        assert_eq!(overlap_us(&segs, 60.0, 70.0), 0.0);
        assert_eq!(overlap_us(&[], 0.0, 1.0), 0.0);
    }
}
