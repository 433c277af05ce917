//! Each guest's vCPU wait over the run's own window (`vcpu_sched.run_window`).
//!
//! The probe reads the vCPU threads' counters right before the go signal and right after the
//! last guest's end ([`super::vcpu`]), so its window also holds the payload's start before its
//! gate (process start, the TSC calibration, the workers' spawn and warm-up) and its report
//! after its end, and the gated runs of the other guests start and end at other moments. In
//! those parts the guests do not all compete: measured 2026-12-06 on a 2-CPU host, 1-vCPU
//! guests with a hog behind, a 3 s lock run: the probe's window was 3.25–3.96 s, the payload's
//! gate came 0.07–0.46 s after the go signal, and a guest's wait share over the probe's window
//! read below the level's (0.27 at 1.5x where a level with every vCPU busy means 0.33).
//!
//! Here the window is the payload's own: its start gate and its end, read on the guest's TSC
//! (the payload's `preemption.window`) and put on the host's clock with the guest's TSC tie
//! (`extra.guest_clock`, within half a round trip) and the trace's tie (0 on this machine). A
//! guest whose payload gives no window (a `background: hog` guest) is read over the measured
//! guest's window, the part of the run the cell's figures are of; where no payload gives one,
//! over the guest's go signal to its command's end. In it, from the run's vCPU timeline: how
//! long each vCPU ran, how long it waited for its CPU (each wait with its times,
//! [`VcpuWaits`]), and what held that CPU meanwhile (the run's vCPUs — the level — or other
//! threads, by command name: QEMU's own, ocrig's, other processes').

use std::collections::BTreeMap;

use serde_json::Value;

use super::guest_tsc::TscOnHost;
use super::sched_trace::{Kept, Timeline, VcpuWaits, Who};
use super::vcpu::{RunWindow, WINDOW_COMMAND, WINDOW_MEASURED, WINDOW_OWN, WaitBehind, WindowVcpu};

/// Most other threads named in a vCPU's `wait_behind.top_other`.
const TOP_OTHER: usize = 3;

/// What one guest brings to its figure.
#[derive(Debug, Clone, Copy)]
pub struct GuestWindow<'a> {
    pub guest: u32,
    /// Its vCPU threads known to the trace (the timeline's vCPUs 0..vcpus).
    pub vcpus: usize,
    /// Its payload's `preemption` object (whose `window` is on the guest's TSC), if any.
    pub preemption: Option<&'a Value>,
    /// `extra.guest_clock`: its TSC tied to this machine's clock.
    pub clock: Option<&'a Value>,
    /// Its go signal and its command's end on this machine's CLOCK_MONOTONIC, ns.
    pub command: Option<(u64, u64)>,
}

/// A guest's window on the trace's clock, ns, with where it came from and its clock error: one
/// span for an ordinary run, one per slice for an arm of a sliced run (the arm's own measured
/// time, without the gaps and the other arms' slices between them).
#[derive(Debug, Clone, PartialEq)]
struct Window {
    /// `(start, end)` spans, in time order, not overlapping.
    parts: Vec<(f64, f64)>,
    from: &'static str,
    error_ns: Option<u64>,
}

/// The payload's window on the trace's clock, ns: `preemption.window_parts` (a sliced run's
/// arm: each slice's window) where it has them, else `preemption.window` (its start gate and
/// its end on the TSC); Err says why there is none.
fn payload_window(
    preemption: Option<&Value>,
    clock: Option<&Value>,
    offset_ns: i64,
) -> Result<Window, String> {
    let preemption = preemption.ok_or("the payload gave no window on its TSC")?;
    let spans: Vec<&Value> = match preemption["window_parts"].as_array() {
        Some(parts) if !parts.is_empty() => parts.iter().collect(),
        _ => vec![&preemption["window"]],
    };
    if spans.iter().any(|w| !w.is_object()) {
        return Err("the payload gave no window on its TSC".into());
    }
    let clock = clock.ok_or("the guest's TSC was not tied to the host's clock")?;
    if let Some(why) = clock["unavailable"].as_str() {
        return Err(format!("the guest's TSC was not tied to the host's clock: {why}"));
    }
    // The whole run's window maps its TSC (a sliced arm's parts lie inside it).
    let whole = match &preemption["window"] {
        w if w.is_object() => w,
        _ => spans[0],
    };
    let map =
        TscOnHost::of(clock, whole).ok_or("the payload's window or the guest's clock tie is incomplete")?;
    let mut parts = Vec::with_capacity(spans.len());
    for w in spans {
        let at = |key: &str| w[key].as_u64().map(|t| map.host_ns(t) + offset_ns as f64);
        match (at("start_tick"), at("end_tick")) {
            (Some(start), Some(end)) if end > start => parts.push((start, end)),
            _ => return Err("the payload's window or the guest's clock tie is incomplete".into()),
        }
    }
    parts.sort_by(|a, b| a.0.total_cmp(&b.0));
    if parts.windows(2).any(|p| p[1].0 < p[0].1) {
        return Err("the payload's window parts overlap".into());
    }
    Ok(Window {
        parts,
        from: WINDOW_OWN,
        error_ns: Some(map.error_ns()),
    })
}

/// For each set of windows over one run (a sliced run: all its slices, then each arm's),
/// every guest's figure over its window, in the order of the set; the timeline indexed once.
/// `measured`: the guest whose records are the cell's samples (its window serves the guests
/// whose payload gives none).
pub fn of_runs(sets: &[Vec<GuestWindow<'_>>], kept: &Kept, measured: u32) -> Vec<Vec<RunWindow>> {
    let index = Index::of(&kept.timeline, &kept.waits);
    sets.iter()
        .map(|guests| of_run_indexed(guests, kept, &index, measured))
        .collect()
}

fn of_run_indexed(
    guests: &[GuestWindow<'_>],
    kept: &Kept,
    index: &Index<'_>,
    measured: u32,
) -> Vec<RunWindow> {
    let own: Vec<Result<Window, String>> = guests
        .iter()
        .map(|g| payload_window(g.preemption, g.clock, kept.offset_ns))
        .collect();
    let measured_window = guests
        .iter()
        .zip(&own)
        .find(|(g, _)| g.guest == measured)
        .and_then(|(_, w)| w.as_ref().ok().cloned());
    // The level held, once per distinct window (most guests share the measured guest's).
    let mut held: BTreeMap<Vec<(i64, i64)>, Option<f64>> = BTreeMap::new();
    guests
        .iter()
        .zip(own)
        .map(|(g, own)| {
            let window = own.or_else(|why| {
                if let Some(m) = &measured_window {
                    return Ok(Window {
                        from: WINDOW_MEASURED,
                        ..m.clone()
                    });
                }
                match g.command {
                    Some((go, end)) if end > go => Ok(Window {
                        parts: vec![(
                            go as f64 + kept.offset_ns as f64,
                            end as f64 + kept.offset_ns as f64,
                        )],
                        from: WINDOW_COMMAND,
                        error_ns: None,
                    }),
                    _ => Err(why),
                }
            });
            match window {
                Ok(w) => {
                    let spans = spans_us(index, &w);
                    let traced = traced_parts(&kept.timeline, &kept.waits, &spans);
                    let mut out = over(index, &kept.waits, g.guest, g.vcpus, &w, &spans, &traced);
                    if out.unavailable.is_none() {
                        out.level_held = *held
                            .entry(traced.clone())
                            .or_insert_with(|| level_held(index, &traced));
                    }
                    out
                }
                Err(why) => RunWindow {
                    unavailable: Some(why),
                    ..Default::default()
                },
            }
        })
        .collect()
}

/// A traced vCPU: (guest, vCPU).
type VcpuKey = (u32, u32);

/// One wait of a vCPU: `(start µs, end µs, the CPU it waited for)`.
type WaitSpan = (i64, i64, usize);

/// The timeline's segments by CPU and by vCPU, each in time order.
struct Index<'a> {
    tl: &'a Timeline,
    /// Per CPU: `[start, end, who]`.
    by_cpu: BTreeMap<usize, Vec<[i64; 3]>>,
    /// Per (guest, vCPU): `(start, end)`.
    by_vcpu: BTreeMap<VcpuKey, Vec<(i64, i64)>>,
    /// Per (guest, vCPU): its waits, in time order.
    waits: BTreeMap<VcpuKey, Vec<WaitSpan>>,
}

impl<'a> Index<'a> {
    fn of(tl: &'a Timeline, vcpu_waits: &VcpuWaits) -> Self {
        let mut by_cpu: BTreeMap<usize, Vec<[i64; 3]>> = BTreeMap::new();
        let mut by_vcpu: BTreeMap<VcpuKey, Vec<(i64, i64)>> = BTreeMap::new();
        for s in &tl.segments {
            by_cpu.entry(s[0] as usize).or_default().push([s[1], s[2], s[3]]);
            if let Who::Vcpu { guest, vcpu } = tl.who[s[3] as usize] {
                by_vcpu.entry((guest, vcpu)).or_default().push((s[1], s[2]));
            }
        }
        for v in by_cpu.values_mut() {
            v.sort_unstable();
        }
        for v in by_vcpu.values_mut() {
            v.sort_unstable();
        }
        let mut waits: BTreeMap<VcpuKey, Vec<WaitSpan>> = BTreeMap::new();
        for w in &vcpu_waits.waits {
            waits
                .entry((w[0] as u32, w[1] as u32))
                .or_default()
                .push((w[3], w[4], w[2] as usize));
        }
        for v in waits.values_mut() {
            v.sort_unstable();
        }
        Self {
            tl,
            by_cpu,
            by_vcpu,
            waits,
        }
    }

    /// Guest `guest`'s vCPU `vcpu`'s waits clipped to `[from, to]` µs: `(cpu, start, end)`.
    fn waits_within(
        &self,
        guest: u32,
        vcpu: u32,
        from: i64,
        to: i64,
    ) -> impl Iterator<Item = (usize, i64, i64)> + '_ {
        let waits = self.waits.get(&(guest, vcpu)).map_or(&[][..], Vec::as_slice);
        // One thread's waits do not overlap, so they end in start order.
        let first = waits.partition_point(|w| w.1 <= from);
        waits[first..]
            .iter()
            .take_while(move |w| w.0 < to)
            .map(move |&(s, e, cpu)| (cpu, s.max(from), e.min(to)))
            .filter(|(_, s, e)| e > s)
    }

    /// What ran on `cpu` within `[from, to]` µs: `(who, µs)` per segment part.
    fn on_cpu(&self, cpu: usize, from: i64, to: i64) -> impl Iterator<Item = (&'a Who, i64)> + '_ {
        let segs = self.by_cpu.get(&cpu).map_or(&[][..], Vec::as_slice);
        // Segments of one CPU do not overlap, so they end in start order.
        let first = segs.partition_point(|s| s[1] <= from);
        segs[first..]
            .iter()
            .take_while(move |s| s[0] < to)
            .map(move |s| (&self.tl.who[s[2] as usize], s[1].min(to) - s[0].max(from)))
            .filter(|(_, d)| *d > 0)
    }
}

/// The run's vCPUs runnable (on a CPU or waiting for one) within the window's `spans` (µs), on
/// average, per traced host CPU: the level the window held (with every vCPU busy throughout,
/// the level the run is reported at; less where some guest's vCPUs idled in it — a guest whose
/// command ended before the window did). None for an empty window.
fn level_held(index: &Index<'_>, spans: &[(i64, i64)]) -> Option<f64> {
    let cpus = index.tl.cpus.len();
    let span: i64 = spans.iter().map(|(a, b)| b - a).sum();
    if span <= 0 || cpus == 0 {
        return None;
    }
    let mut vcpus: Vec<VcpuKey> = index.by_vcpu.keys().chain(index.waits.keys()).copied().collect();
    vcpus.sort_unstable();
    vcpus.dedup();
    let runnable: i64 = spans
        .iter()
        .flat_map(|&(from, to)| vcpus.iter().map(move |&key| (key, from, to)))
        .map(|((g, v), from, to)| {
            let on = index.by_vcpu.get(&(g, v)).map_or(0, |s| covered_us(s, from, to));
            on + index
                .waits_within(g, v, from, to)
                .map(|(_, s, e)| e - s)
                .sum::<i64>()
        })
        .sum();
    Some(runnable as f64 / (span as f64 * cpus as f64))
}

/// The spans the trace kept whole (it is bounded: a long sliced run's later slices may lie
/// past its end).
fn traced_parts(tl: &Timeline, waits: &VcpuWaits, spans: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let known_to = waits.known_to_us.min(tl.traced_to_us);
    spans
        .iter()
        .copied()
        .filter(|&(a, b)| a >= tl.traced_from_us && b <= known_to)
        .collect()
}

/// The window's spans on the timeline, µs after the run's start.
fn spans_us(index: &Index<'_>, w: &Window) -> Vec<(i64, i64)> {
    let to_us = |ns: f64| ((ns - index.tl.run_start_mono_ns as f64) / 1e3).round() as i64;
    w.parts.iter().map(|&(a, b)| (to_us(a), to_us(b))).collect()
}

/// Time of `[from, to]` covered by `segments` (sorted, not overlapping), µs.
fn covered_us(segments: &[(i64, i64)], from: i64, to: i64) -> i64 {
    let first = segments.partition_point(|&(_, e)| e <= from);
    segments[first..]
        .iter()
        .take_while(|&&(s, _)| s < to)
        .map(|&(s, e)| (e.min(to) - s.max(from)).max(0))
        .sum()
}

/// One guest's figure over window `w` (the trace's clock), whose spans on the timeline are
/// `spans` (µs), of which the trace kept `traced` whole ([`traced_parts`]): every figure summed
/// over those, shares over their total length. A window of several parts is read over the
/// parts the trace kept whole; one of a single part, or none of whose parts the trace kept, is
/// not read.
fn over(
    index: &Index<'_>,
    waits: &VcpuWaits,
    guest: u32,
    vcpus: usize,
    w: &Window,
    spans: &[(i64, i64)],
    traced: &[(i64, i64)],
) -> RunWindow {
    let tl = index.tl;
    let (from, to) = (spans.first().map_or(0, |s| s.0), spans.last().map_or(0, |s| s.1));
    let known_to = waits.known_to_us.min(tl.traced_to_us);
    let mut out = RunWindow {
        window: Some(w.from.to_string()),
        start_s: Some(from as f64 / 1e6),
        end_s: Some(to as f64 / 1e6),
        wall_s: Some(spans.iter().map(|(a, b)| b - a).sum::<i64>() as f64 / 1e6),
        parts: (spans.len() > 1).then_some(spans.len() as u32),
        clock_error_ns: w.error_ns,
        ..Default::default()
    };
    if traced.is_empty() || (spans.len() == 1 && traced.len() < spans.len()) {
        out.unavailable = Some(format!(
            "the window ({:.3}–{:.3} s after the go signal) reaches outside what the trace kept ({:.3}–{:.3} s)",
            from as f64 / 1e6,
            to as f64 / 1e6,
            tl.traced_from_us as f64 / 1e6,
            known_to as f64 / 1e6
        ));
        return out;
    }
    let spans = traced;
    if spans.len() < out.parts.unwrap_or(1) as usize {
        out.parts_untraced = out.parts.map(|n| n - spans.len() as u32);
        out.parts = Some(spans.len() as u32);
        out.start_s = Some(spans[0].0 as f64 / 1e6);
        out.end_s = Some(spans[spans.len() - 1].1 as f64 / 1e6);
        out.wall_s = Some(spans.iter().map(|(a, b)| b - a).sum::<i64>() as f64 / 1e6);
    }
    let from = spans[0].0;
    let span: i64 = spans.iter().map(|(a, b)| b - a).sum();
    if vcpus == 0 {
        out.unavailable = Some("no vCPU thread of this guest was traced".into());
        return out;
    }
    out.vcpus = (0..vcpus as u32)
        .map(|vcpu| {
            // A thread without events ran throughout (a segment says so) or slept throughout.
            if waits.known_from(guest, vcpu).unwrap_or(tl.traced_from_us) > from {
                return WindowVcpu {
                    vcpu,
                    unavailable: Some(
                        "its thread's first event in the trace comes after the window's start, so whether it waited before is not known".into(),
                    ),
                    ..Default::default()
                };
            }
            let segs = index.by_vcpu.get(&(guest, vcpu)).map_or(&[][..], Vec::as_slice);
            let run: i64 = spans.iter().map(|&(a, b)| covered_us(segs, a, b)).sum();
            let (mut wait, mut vcpus_us, mut idle_us) = (0, 0, 0);
            let mut by: BTreeMap<&str, i64> = BTreeMap::new();
            let waited = spans
                .iter()
                .flat_map(|&(a, b)| index.waits_within(guest, vcpu, a, b));
            for (cpu, s, e) in waited {
                wait += e - s;
                for (who, d) in index.on_cpu(cpu, s, e) {
                    match who {
                        Who::Vcpu { .. } => vcpus_us += d,
                        Who::Idle => idle_us += d,
                        Who::Other { comm } => *by.entry(comm.as_str()).or_default() += d,
                    }
                }
            }
            let other_us: i64 = by.values().sum();
            let mut top: Vec<(&str, i64)> = by.into_iter().collect();
            top.sort_by_key(|&(_, d)| std::cmp::Reverse(d));
            let behind = WaitBehind {
                vcpus_s: vcpus_us as f64 / 1e6,
                other_s: other_us as f64 / 1e6,
                idle_s: idle_us as f64 / 1e6,
                top_other: top
                    .into_iter()
                    .take(TOP_OTHER)
                    .map(|(c, d)| (c.to_string(), d as f64 / 1e6))
                    .collect(),
            };
            WindowVcpu {
                vcpu,
                run_s: Some(run as f64 / 1e6),
                wait_s: Some(wait as f64 / 1e6),
                idle_s: Some((span - run - wait).max(0) as f64 / 1e6),
                wait_share: (span > 0).then(|| wait as f64 / span as f64),
                runnable_wait_share: (run + wait > 0).then(|| wait as f64 / (run + wait) as f64),
                wait_behind: Some(behind),
                unavailable: None,
            }
        })
        .collect();
    let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    out.mean_wait_share = mean(out.vcpus.iter().filter_map(|v| v.wait_share).collect());
    out.mean_runnable_wait_share = mean(out.vcpus.iter().filter_map(|v| v.runnable_wait_share).collect());
    if out.mean_wait_share.is_none() {
        out.unavailable = out.vcpus.iter().find_map(|v| v.unavailable.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// One set's figures.
    fn of_run(guests: &[GuestWindow<'_>], kept: &Kept, measured: u32) -> Vec<RunWindow> {
        of_runs(&[guests.to_vec()], kept, measured).remove(0)
    }

    /// 2 s traced on 2 CPUs, the run starting at host time 10 s. CPU 0: guests 0 and 1 take
    /// turns of 100 ms from 0 to 1.5 s, then guest 0 alone; CPU 1: guest 2 alone but for a
    /// host thread 1.0–1.2 s, and idle from 1.6 s. Traced from 0 to 2 s.
    fn kept() -> Kept {
        let who = vec![
            Who::Vcpu { guest: 0, vcpu: 0 },
            Who::Vcpu { guest: 1, vcpu: 0 },
            Who::Vcpu { guest: 2, vcpu: 0 },
            Who::Other {
                comm: "qemu-system-x86".into(),
            },
            Who::Idle,
        ];
        let mut segments = Vec::new();
        let mut waits = Vec::new();
        for k in 0..15 {
            let (s, e) = (k * 100_000, (k + 1) * 100_000);
            segments.push([0, s, e, k % 2]);
            // The one not running waits.
            waits.push([1 - k % 2, 0, 0, s, e]);
        }
        segments.push([0, 1_500_000, 2_000_000, 0]);
        segments.push([1, 0, 1_000_000, 2]);
        segments.push([1, 1_000_000, 1_200_000, 3]);
        waits.push([2, 0, 1, 1_000_000, 1_200_000]);
        segments.push([1, 1_200_000, 1_600_000, 2]);
        segments.push([1, 1_600_000, 2_000_000, 4]);
        segments.sort_by_key(|s| (s[1], s[0]));
        waits.sort_by_key(|w| w[4]);
        Kept {
            timeline: Timeline {
                clock: "mono".into(),
                run_start_mono_ns: 10_000_000_000,
                run_end_us: 2_000_000,
                traced_from_us: 0,
                traced_to_us: 2_000_000,
                cpus: vec![0, 1],
                who,
                segments,
                dropped_events: 0,
                clipped: None,
            },
            waits: VcpuWaits {
                waits,
                wakeups_traced: true,
                wakeups_unseen: 0,
                known_from_us: vec![[0, 0, 0], [1, 0, 0], [2, 0, 0]],
                known_to_us: 2_000_000,
            },
            offset_ns: 0,
        }
    }

    /// The guest's TSC runs at 1 GHz and read 0 at host time 10.2 s: a window of ticks
    /// `[a, b]` is host `[10.2 s + a ns, 10.2 s + b ns]`, 0.2 s + a ns after the go signal.
    fn clock() -> Value {
        json!({"host_mono_ns": 10_200_000_000u64, "tsc": 0u64, "error_ns": 300_000})
    }

    fn lock(start_tick: u64, end_tick: u64) -> Value {
        json!({"window": {"start_tick": start_tick, "end_tick": end_tick, "hz": 1e9}})
    }

    fn guest<'a>(guest: u32, preemption: Option<&'a Value>, clock: Option<&'a Value>) -> GuestWindow<'a> {
        GuestWindow {
            guest,
            vcpus: 1,
            preemption,
            clock,
            command: Some((10_000_000_000, 11_900_000_000)),
        }
    }

    #[test]
    fn the_wait_is_summed_over_the_payloads_window_and_not_the_probes() {
        let (k, c) = (kept(), clock());
        // Guest 0's payload window: 0.2–1.2 s of the run, where guests 0 and 1 take turns.
        let p0 = lock(0, 1_000_000_000);
        let out = of_run(&[guest(0, Some(&p0), Some(&c))], &k, 0);
        let w = &out[0];
        assert_eq!(w.window.as_deref(), Some(WINDOW_OWN));
        assert_eq!((w.start_s, w.end_s, w.wall_s), (Some(0.2), Some(1.2), Some(1.0)));
        assert_eq!(w.clock_error_ns, Some(300_000));
        let v = &w.vcpus[0];
        assert_eq!((v.run_s, v.wait_s, v.idle_s), (Some(0.5), Some(0.5), Some(0.0)));
        assert_eq!(w.mean_wait_share, Some(0.5));
        assert_eq!(v.runnable_wait_share, Some(0.5));
        let b = v.wait_behind.as_ref().unwrap();
        assert_eq!((b.vcpus_s, b.other_s, b.idle_s), (0.5, 0.0, 0.0));
        // Runnable meanwhile: guests 0 and 1 on CPU 0 throughout, guest 2 on CPU 1: 3 vCPUs
        // on 2 CPUs.
        assert_eq!(w.level_held, Some(1.5));
        // Over 0.2–1.9 s (its end at 1.9 s), it ran alone from 1.5 s: less wait.
        let p0 = lock(0, 1_700_000_000);
        let w = &of_run(&[guest(0, Some(&p0), Some(&c))], &k, 0)[0];
        assert_eq!((w.vcpus[0].run_s, w.vcpus[0].wait_s), (Some(1.1), Some(0.6)));
        assert!((w.mean_wait_share.unwrap() - 0.6 / 1.7).abs() < 1e-12);
    }

    #[test]
    fn an_arm_of_a_sliced_run_is_read_over_its_own_slices_only() {
        let (k, c) = (kept(), clock());
        // Two slices: 0.2–0.4 s (guests 0 and 1 take turns: half waited) and 1.7–1.9 s (guest 0
        // alone: none), with 1.3 s between them where it waited half the time.
        let part = |a: u64, b: u64| json!({"start_tick": a, "end_tick": b, "hz": 1e9});
        let p0 = json!({
            "window": part(0, 1_700_000_000),
            "window_parts": [part(1_500_000_000, 1_700_000_000), part(0, 200_000_000)],
        });
        let w = &of_run(&[guest(0, Some(&p0), Some(&c)), guest(2, None, Some(&c))], &k, 0);
        let (a, hog) = (&w[0], &w[1]);
        assert_eq!(a.window.as_deref(), Some(WINDOW_OWN));
        assert_eq!((a.start_s, a.end_s, a.parts), (Some(0.2), Some(1.9), Some(2)));
        assert!((a.wall_s.unwrap() - 0.4).abs() < 1e-12);
        let v = &a.vcpus[0];
        assert_eq!((v.run_s, v.wait_s, v.idle_s), (Some(0.3), Some(0.1), Some(0.0)));
        assert!((a.mean_wait_share.unwrap() - 0.25).abs() < 1e-12);
        // Runnable: 3 vCPUs on 2 CPUs in the first slice; guest 0 alone and guest 2 idle in
        // the second: (0.2 × 3 + 0.2 × 1) / 0.4 / 2.
        assert!((a.level_held.unwrap() - 1.0).abs() < 1e-12, "{a:?}");
        // A guest without a window of its own is read over the same slices.
        assert_eq!(
            (hog.window.as_deref(), hog.parts),
            (Some(WINDOW_MEASURED), Some(2))
        );
        // A part past what the trace kept (it ends at 2 s) is left out, and said so.
        let p0 = json!({
            "window_parts": [part(0, 200_000_000), part(1_500_000_000, 1_700_000_000), part(1_900_000_000, 2_100_000_000)],
        });
        let a = &of_run(&[guest(0, Some(&p0), Some(&c))], &k, 0)[0];
        assert_eq!(
            (a.parts, a.parts_untraced, a.end_s),
            (Some(2), Some(1), Some(1.9)),
            "{a:?}"
        );
        assert!((a.mean_wait_share.unwrap() - 0.25).abs() < 1e-12, "{a:?}");
        assert!((a.level_held.unwrap() - 1.0).abs() < 1e-12, "{a:?}");
        // Overlapping parts are a payload's error, not a figure.
        let bad = json!({"window_parts": [part(0, 300_000_000), part(200_000_000, 400_000_000)]});
        let w = &of_run(&[guest(0, Some(&bad), Some(&c))], &k, 0)[0];
        assert_eq!(w.window.as_deref(), Some(WINDOW_COMMAND), "{w:?}");
    }

    #[test]
    fn a_guest_without_a_window_of_its_own_is_read_over_the_measured_guests() {
        let (k, c) = (kept(), clock());
        let p0 = lock(700_000_000, 1_200_000_000);
        let out = of_run(&[guest(0, Some(&p0), Some(&c)), guest(2, None, Some(&c))], &k, 0);
        // Guest 2 over 0.9–1.4 s: a host thread held its CPU 1.0–1.2 s while it waited.
        let w = &out[1];
        assert_eq!(w.window.as_deref(), Some(WINDOW_MEASURED));
        assert_eq!((w.start_s, w.end_s), (Some(0.9), Some(1.4)));
        let v = &w.vcpus[0];
        assert_eq!((v.run_s, v.wait_s), (Some(0.3), Some(0.2)));
        assert!((w.mean_wait_share.unwrap() - 0.4).abs() < 1e-12);
        let b = v.wait_behind.as_ref().unwrap();
        assert_eq!((b.vcpus_s, b.other_s), (0.0, 0.2));
        assert_eq!(b.top_other, [("qemu-system-x86".to_string(), 0.2)]);
        // Without the measured guest's window either: its go signal to its command's end,
        // 0–1.9 s: it waited 0.2 s and idled from 1.6 s.
        let out = of_run(&[guest(2, None, Some(&c))], &k, 0);
        let w = &out[0];
        assert_eq!(w.window.as_deref(), Some(WINDOW_COMMAND));
        assert_eq!(w.clock_error_ns, None);
        let v = &w.vcpus[0];
        assert_eq!((v.run_s, v.wait_s, v.idle_s), (Some(1.4), Some(0.2), Some(0.3)));
        // Guest 1 stopped at 1.5 s and guest 2 idled from 1.6 s: (1.5 + 1.9 + 1.6) / 1.9 / 2.
        assert!((w.level_held.unwrap() - 5.0 / 3.8).abs() < 1e-12, "{w:?}");
        // Nothing at all: why.
        let none = GuestWindow {
            command: None,
            ..guest(2, None, None)
        };
        let out = of_run(&[none], &k, 0);
        assert!(
            out[0].unavailable.as_deref().unwrap().contains("no window"),
            "{:?}",
            out[0]
        );
        assert_eq!(out[0].mean_wait_share, None);
    }

    #[test]
    fn a_window_outside_the_trace_or_of_an_untied_clock_is_not_read() {
        let k = kept();
        let late = lock(1_000_000_000, 2_500_000_000);
        let c = clock();
        let w = &of_run(&[guest(0, Some(&late), Some(&c))], &k, 0)[0];
        assert!(
            w.unavailable
                .as_deref()
                .unwrap()
                .contains("outside what the trace kept"),
            "{w:?}"
        );
        assert!(w.mean_wait_share.is_none() && w.vcpus.is_empty());
        // No tie: the payload's window cannot be placed; the command's window serves.
        let untied = json!({"unavailable": "ssh: broken pipe"});
        let p0 = lock(0, 1_000_000_000);
        let w = &of_run(&[guest(0, Some(&p0), Some(&untied))], &k, 0)[0];
        assert_eq!(w.window.as_deref(), Some(WINDOW_COMMAND));
        let no_cmd = GuestWindow {
            command: None,
            ..guest(0, Some(&p0), Some(&untied))
        };
        let w = &of_run(&[no_cmd], &k, 0)[0];
        assert!(
            w.unavailable.as_deref().unwrap().contains("ssh: broken pipe"),
            "{w:?}"
        );
        // A vCPU whose state at the window's start the trace does not know.
        let mut k = kept();
        k.waits.known_from_us[0][2] = 500_000;
        let w = &of_run(&[guest(0, Some(&p0), Some(&c))], &k, 0)[0];
        assert!(w.vcpus[0].unavailable.is_some() && w.mean_wait_share.is_none());
        assert!(w.unavailable.as_deref().unwrap().contains("first event"), "{w:?}");
    }

    #[test]
    fn coverage_of_sorted_segments() {
        let segs = [(0, 10), (20, 30), (40, 50)];
        assert_eq!(covered_us(&segs, 5, 45), 5 + 10 + 5);
        assert_eq!(covered_us(&segs, 10, 20), 0);
        assert_eq!(covered_us(&segs, 60, 70), 0);
        assert_eq!(covered_us(&[], 0, 1), 0);
    }
}
