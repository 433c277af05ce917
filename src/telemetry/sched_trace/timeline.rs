//! A run's vCPU timeline from the switches: per host CPU who ran when (a guest's vCPU, another
//! thread, idle), its side file (gzip'd compact JSON), and the summary the run's record keeps.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::*;

/// A run's side file: its timeline, and beside it (a key [`read_timeline`] skips) the vCPU
/// threads' waits (`vcpu_waits`, a [`VcpuWaits`]).
#[derive(Serialize)]
pub(super) struct SideFile<'a> {
    #[serde(flatten)]
    pub timeline: &'a Timeline,
    pub vcpu_waits: &'a VcpuWaits,
}

/// Writes a timeline (or its [`SideFile`]) as gzip'd JSON (about a quarter of the plain size);
/// returns its bytes.
pub(super) fn write_gz(tl: &impl Serialize, file: &Path) -> Result<usize, String> {
    use std::io::Write;
    let json = serde_json::to_vec(tl).map_err(|e| e.to_string())?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json).map_err(|e| e.to_string())?;
    let bytes = gz.finish().map_err(|e| e.to_string())?;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(file, &bytes).map_err(|e| format!("writing {}: {e}", file.display()))?;
    Ok(bytes.len())
}

/// Reads a timeline side file ([`SchedTrace::finish`] writes it gzip'd).
pub fn read_timeline(file: &Path) -> Result<Timeline, String> {
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    serde_json::from_reader(std::io::BufReader::new(flate2::read::GzDecoder::new(f)))
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// Who ran in a segment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Who {
    Vcpu { guest: u32, vcpu: u32 },
    Other { comm: String },
    Idle,
}

/// The side file of one run. Times are µs from the run's start (the go signal), so a segment
/// is three small integers and an index into `who`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The clock the times come from.
    pub clock: String,
    /// The run's start on that clock, ns.
    pub run_start_mono_ns: u64,
    /// The run's end, µs from its start.
    pub run_end_us: i64,
    /// What was traced, µs from the run's start.
    pub traced_from_us: i64,
    pub traced_to_us: i64,
    pub cpus: Vec<usize>,
    pub who: Vec<Who>,
    /// `[cpu, start µs, end µs, who index]`.
    pub segments: Vec<[i64; 4]>,
    /// Events the kernel dropped (buffer full): the trace stops short of `traced_to_us`.
    pub dropped_events: u64,
    /// Why the timeline is shorter than the trace, if it is.
    pub clipped: Option<String>,
}

impl Timeline {
    /// Segment durations per guest vCPU, ms, within the run, in time order.
    pub fn vcpu_slices_ms(&self) -> BTreeMap<(u32, u32), Vec<f64>> {
        let mut out: BTreeMap<(u32, u32), Vec<f64>> = BTreeMap::new();
        for s in &self.segments {
            // Only whole slices inside the run: the ends cut the first and last.
            if let Who::Vcpu { guest, vcpu } = self.who[s[3] as usize]
                && s[1] >= 0
                && s[2] <= self.run_end_us
                && s[1] > self.traced_from_us
                && s[2] < self.traced_to_us
            {
                out.entry((guest, vcpu))
                    .or_default()
                    .push((s[2] - s[1]) as f64 / 1e3);
            }
        }
        out
    }

    /// Turn lengths per guest vCPU, ms: a turn on a CPU runs from the moment the vCPU takes
    /// it over from another vCPU to the moment another vCPU gets it, the host's own short
    /// threads in between included (QEMU's main loop wakes every millisecond or so and
    /// splits a vCPU's time into several segments; the scheduler's slice is the turn). Only
    /// turns wholly inside the run count.
    pub fn vcpu_turns_ms(&self) -> BTreeMap<(u32, u32), Vec<f64>> {
        let mut out: BTreeMap<(u32, u32), Vec<f64>> = BTreeMap::new();
        let mut current: BTreeMap<i64, ((u32, u32), i64)> = BTreeMap::new();
        for s in &self.segments {
            let Who::Vcpu { guest, vcpu } = self.who[s[3] as usize] else {
                continue;
            };
            match current.get(&s[0]) {
                Some(&(owner, _)) if owner == (guest, vcpu) => {}
                previous => {
                    if let Some(&(owner, since)) = previous
                        && since >= 0
                        && s[1] <= self.run_end_us
                    {
                        out.entry(owner).or_default().push((s[1] - since) as f64 / 1e3);
                    }
                    // A turn that began before the first switch seen on this CPU is not whole.
                    let since = if s[1] <= self.traced_from_us { -1 } else { s[1] };
                    current.insert(s[0], ((guest, vcpu), since));
                }
            }
        }
        out
    }

    /// Per CPU, the shares of the run each kind of thread had: guest vCPUs, idle, and the
    /// other threads by command name (the largest few), so a crowded CPU says who crowded it.
    pub fn cpu_shares(&self) -> BTreeMap<usize, Value> {
        let mut time: BTreeMap<usize, BTreeMap<String, i64>> = BTreeMap::new();
        let (lo, hi) = (
            0i64.max(self.traced_from_us),
            self.run_end_us.min(self.traced_to_us),
        );
        for s in &self.segments {
            let d = s[2].min(hi) - s[1].max(lo);
            if d <= 0 {
                continue;
            }
            let key = match &self.who[s[3] as usize] {
                Who::Vcpu { .. } => "vcpus".to_string(),
                Who::Idle => "idle".to_string(),
                Who::Other { comm } => comm.clone(),
            };
            *time.entry(s[0] as usize).or_default().entry(key).or_default() += d;
        }
        let span = (hi - lo).max(1) as f64;
        time.into_iter()
            .map(|(cpu, t)| {
                let share = |k: &str| t.get(k).map_or(0.0, |&d| d as f64 / span);
                let mut others: Vec<(&String, &i64)> =
                    t.iter().filter(|(k, _)| *k != "vcpus" && *k != "idle").collect();
                others.sort_by_key(|(_, d)| std::cmp::Reverse(**d));
                let other: i64 = others.iter().map(|(_, d)| **d).sum();
                let top: Vec<Value> = others
                    .iter()
                    .take(3)
                    .map(|(k, d)| json!([k, **d as f64 / span]))
                    .collect();
                (
                    cpu,
                    json!({ "vcpus": share("vcpus"), "idle": share("idle"),
                            "other": other as f64 / span, "top_other": top }),
                )
            })
            .collect()
    }

    /// Per CPU, the guest vCPUs in the order they held it within the run, with repeats
    /// collapsed (other threads in between ignored): `[A, B, A, B]` is alternation.
    pub fn vcpu_turns(&self) -> BTreeMap<usize, Vec<(u32, u32)>> {
        let mut out: BTreeMap<usize, Vec<(u32, u32)>> = BTreeMap::new();
        for s in &self.segments {
            if let Who::Vcpu { guest, vcpu } = self.who[s[3] as usize]
                && s[2] > 0
                && s[1] < self.run_end_us
            {
                let turns = out.entry(s[0] as usize).or_default();
                if turns.last() != Some(&(guest, vcpu)) {
                    turns.push((guest, vcpu));
                }
            }
        }
        out
    }
}

/// Builds the timeline of `cpus` from the switches: each switch ends the segment of the thread
/// it switches out and starts one of the thread it switches in. The first segment on a CPU
/// starts when the trace did, the last ends when it stopped — or, where a CPU's buffer
/// filled and dropped its later events (`dropped_on`), the timeline ends at the earliest of
/// those CPUs' last kept events: past it, who ran on such a CPU is not known (the thread it
/// last switched to need not have run on until the stop).
pub fn timeline(
    switches: &[Switch],
    cpus: &[usize],
    guests: &[Vec<i32>],
    traced: (u64, u64),
    run: (u64, u64),
    dropped_on: &[usize],
) -> Timeline {
    let vcpu_of = vcpu_index(guests);
    let us = |ns: u64| (ns as i64 - run.0 as i64).div_euclid(1000);
    let mut who: Vec<Who> = Vec::new();
    let mut index = |w: Who| -> i64 {
        match who.iter().position(|x| *x == w) {
            Some(i) => i as i64,
            None => {
                who.push(w);
                (who.len() - 1) as i64
            }
        }
    };
    let classify = |pid: i32, comm: &str| match vcpu_of.get(&pid) {
        Some(&(guest, vcpu)) => Who::Vcpu { guest, vcpu },
        None if pid == 0 => Who::Idle,
        None => Who::Other {
            comm: comm.to_string(),
        },
    };
    // Per CPU: who runs since when (unknown before the CPU's first switch: its prev_pid ran).
    let mut current: BTreeMap<usize, (u64, i32, String)> = BTreeMap::new();
    let mut segments = Vec::new();
    let mut clipped = None;
    let mut last_ns = traced.0;
    for sw in switches.iter().filter(|s| cpus.contains(&s.cpu)) {
        if segments.len() >= MAX_SEGMENTS {
            clipped = Some(format!(
                "kept the first {MAX_SEGMENTS} segments (up to {:.3} s into the run)",
                us(sw.ns) as f64 / 1e6
            ));
            break;
        }
        last_ns = last_ns.max(sw.ns);
        let (since, pid, comm) = current
            .remove(&sw.cpu)
            .unwrap_or_else(|| (traced.0, sw.prev_pid, sw.prev_comm.clone()));
        let w = index(classify(pid, &comm));
        segments.push([sw.cpu as i64, us(since), us(sw.ns), w]);
        current.insert(sw.cpu, (sw.ns, sw.next_pid, sw.next_comm.clone()));
    }
    let kept_until = |cpu: &usize| current.get(cpu).map_or(traced.0, |c| c.0);
    let end = match (
        &clipped,
        dropped_on
            .iter()
            .filter(|c| cpus.contains(c))
            .map(kept_until)
            .min(),
    ) {
        (Some(_), _) => last_ns,
        (None, Some(lost_after)) => lost_after,
        (None, None) => traced.1,
    };
    for (cpu, (since, pid, comm)) in current {
        let w = index(classify(pid, &comm));
        segments.push([cpu as i64, us(since), us(end.max(since)), w]);
    }
    segments.sort_by_key(|s| (s[1], s[0]));
    Timeline {
        clock: "mono".into(),
        run_start_mono_ns: run.0,
        run_end_us: us(run.1),
        traced_from_us: us(traced.0),
        traced_to_us: us(end),
        cpus: cpus.to_vec(),
        who,
        segments,
        dropped_events: 0,
        clipped,
    }
}

/// The p-th quantile (0..=1) of sorted values, nearest rank.
pub(super) fn quantile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[i])
}

/// What the run's record gets: where the timeline is and what it measured.
/// `host_slice`: [`host_slice_setting`] of the traced host.
pub fn summary(tl: &Timeline, file: &Path, bytes: usize, cost_ms: f64, host_slice: Value) -> Value {
    let mut turns_ms = tl.vcpu_turns_ms();
    let slices: Vec<Value> = tl
        .vcpu_slices_ms()
        .into_iter()
        .map(|((guest, vcpu), mut ms)| {
            ms.sort_by(f64::total_cmp);
            let mut turns = turns_ms.remove(&(guest, vcpu)).unwrap_or_default();
            turns.sort_by(f64::total_cmp);
            json!({
                "guest": guest, "vcpu": vcpu,
                "segments": ms.len(), "segment_p50_ms": quantile(&ms, 0.5), "segment_p90_ms": quantile(&ms, 0.9),
                "turns": turns.len(), "turn_p50_ms": quantile(&turns, 0.5), "turn_p90_ms": quantile(&turns, 0.9),
            })
        })
        .collect();
    let turns: BTreeMap<String, usize> = tl
        .vcpu_turns()
        .into_iter()
        .map(|(cpu, t)| (cpu.to_string(), t.len().saturating_sub(1)))
        .collect();
    let clipped = match (&tl.clipped, tl.dropped_events) {
        (Some(why), _) => Some(why.clone()),
        (None, 0) => None,
        (None, n) => Some(format!(
            "the trace buffer ({BUFFER_KB} KiB per CPU) filled: {n} later events dropped, \
             the timeline ends {:.3} s into the run",
            tl.traced_to_us as f64 / 1e6
        )),
    };
    json!({
        "path": file,
        "segments": tl.segments.len(),
        "bytes": bytes,
        "clipped": clipped,
        "vcpu_slices": slices,
        "vcpu_handovers_per_cpu": turns,
        "cpu_shares": tl.cpu_shares().into_iter().map(|(c, v)| (c.to_string(), v)).collect::<serde_json::Map<_, _>>(),
        "host_slice": host_slice,
        "cost_cpu_ms": cost_ms,
    })
}

/// Each vCPU thread id of `guests` (per guest, its vCPU threads' ids in vCPU order) → (guest,
/// vCPU).
pub(super) fn vcpu_index(guests: &[Vec<i32>]) -> BTreeMap<i32, (u32, u32)> {
    guests
        .iter()
        .enumerate()
        .flat_map(|(g, tids)| {
            tids.iter()
                .enumerate()
                .map(move |(v, &t)| (t, (g as u32, v as u32)))
        })
        .collect()
}
