//! The host scheduler's own record of a run: which thread ran on each pinned host CPU when,
//! from `sched:sched_switch` in a tracefs instance of our own, turned into a vCPU timeline.
//!
//! - An instance of our own (`/sys/kernel/tracing/instances/ocrig-<pid>-<n>`), one per guest
//!   set ([`Tracer`]), recording only during each of its runs ([`SchedTrace`]): the global
//!   buffer and any other tracer (another ocrig, perf, trace-cmd) are left alone.
//! - `tracing_cpumask` = the run's host CPUs, and no pid filter: every switch on those CPUs is
//!   kept, so the timeline shows what else ran there ("other", by command name) and idle.
//! - `sched:sched_wakeup` too, so each vCPU thread's waits for a CPU are known with their times
//!   ([`VcpuWaits`]): the wait over any part of the run, such as the payload's own window
//!   (`telemetry::run_window`). A wakeup made on a CPU outside the mask is not recorded (the
//!   waits then say how many they missed).
//! - `trace_clock` = `mono`, the clock of [`mono_ns`] (and of Rust's `Instant` on Linux), so the
//!   run's start and end line up with the switches.
//! - Bounded: the per-CPU buffer is [`BUFFER_KB`] with overwrite off, so a long run keeps its
//!   *first* part (the kernel drops later events and counts them) and the summary says where
//!   the kept window ends; at most [`MAX_SEGMENTS`] segments go to the side file.
//! - The instance is removed when the [`Tracer`] is dropped (the guest set shut down, an
//!   error, or a signal that drops the sweep's future); instances left by a killed ocrig are
//!   removed at the next start ([`remove_stale`]).
//!
//! The timeline is written to a side file (compact JSON, [`Timeline`]); the run's record gets
//! only [`summary`]: the file, its size, whether it was clipped, each guest vCPU's measured
//! slice lengths and the host scheduler's slice setting next to them.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use crate::hostfs::{FileOp, HostFs};

mod clock;
mod parse;
mod slice;
mod timeline;
mod waits;

pub use clock::*;
pub use parse::*;
pub use slice::*;
pub use timeline::*;
pub use waits::*;

const TRACEFS: &str = "/sys/kernel/tracing";

/// Per-CPU ring buffer. A sched_switch event takes about 68 bytes, so this keeps ~30k switches
/// per CPU. A 2x run switches about 1,700–2,500 times a second per CPU and records as many
/// wakeups: a whole 3 s run is kept, a 50 s sliced round about its first 10 s (its later
/// slices' figures are then read over the slices kept, and say so).
pub const BUFFER_KB: u64 = 2048;

/// Most segments written to one side file (about 30 bytes each in it).
pub const MAX_SEGMENTS: usize = 200_000;

const PREFIX: &str = "ocrig-";

/// The wakeup event's switch, below an instance's directory.
const WAKEUP_ENABLE: &str = "events/sched/sched_wakeup/enable";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// CLOCK_MONOTONIC now, nanoseconds (the tracefs `mono` clock).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A tracefs instance of ours on one host, set up once for a guest set and used by each of its
/// runs ([`Tracer::begin`]); dropping it removes the instance.
///
/// Why one per guest set and not one per run: making an instance ready costs ~60 ms here
/// (`trace_clock` and each buffer size wait for RCU grace periods: 20 + 8 per CPU), and
/// removing it ~55 ms; a run needs only `tracing_on` (0.1 ms) and, after it, a reset of the
/// buffer (15 ms), which runs in the background while the next run's payload starts.
///
/// A handle: clones share the one instance, which is removed when the last of them (and of
/// the runs' [`SchedTrace`]s) is dropped, so a run's trace can be started and read on a
/// blocking thread, never on the thread that must notice a signal and kill the guests
/// (tracefs writes wait for RCU grace periods, seconds on a busy host).
#[derive(Clone)]
pub struct Tracer(Arc<Instance>);

/// A [`Tracer`]'s instance on the traced host.
pub struct Instance {
    /// The traced host (this machine, or a remote host over SSH); it has a writer.
    fs: Arc<dyn HostFs>,
    dir: String,
    cpus: Vec<usize>,
    /// The instance's mask as created (every CPU of that host): a remote run's markers are
    /// written under it, since the shell that writes them may run on any CPU.
    all_cpus_mask: String,
    /// The previous run's reset (tracing off, buffer emptied), going on in the background.
    reset: std::sync::Mutex<Option<std::thread::JoinHandle<Result<(), String>>>>,
    /// Orchestrator CPU spent setting the instance up, ns; charged to the first run.
    setup_cost_ns: std::sync::atomic::AtomicU64,
    /// That host's slice setting and tick ([`host_slice_setting`]), read once per guest set:
    /// a root-only knob nobody turns mid-sweep, and its tick from a decompressed kernel config
    /// (~2 ms a run).
    host_slice: Value,
}

/// One run's trace on a [`Tracer`]; [`SchedTrace::finish`] reads it (dropping it unread, as a
/// failed or interrupted run does, only resets the buffer).
pub struct SchedTrace {
    tracer: Arc<Instance>,
    /// Per guest, per vCPU: host thread ids.
    guests: Vec<Vec<i32>>,
    /// This machine's CLOCK_MONOTONIC right before the switches were enabled.
    started_ns: u64,
    /// Trace markers written on the traced host: (index, this machine's mono ns before and
    /// after the write); empty where the traced host is this machine (one clock).
    markers: Vec<(u32, u64, u64)>,
    /// Orchestrator CPU spent starting it, ns.
    cost_ns: u64,
    /// Read by `finish`: the buffer's reset is already under way.
    finished: bool,
}

/// What a run's trace needs of its host before anything is created: why it cannot be
/// traced, in words for the record.
fn preconditions(root: &str) -> Vec<FileOp> {
    vec![
        FileOp::RequireRoot("tracing the host scheduler needs root (tracefs instances)".into()),
        FileOp::RequireDir(
            format!("{root}/instances"),
            format!("tracefs is not mounted at {root} (as root: mount -t tracefs nodev {root})"),
        ),
        FileOp::RequireDir(
            format!("{root}/events/sched/sched_switch"),
            format!("{root} has no sched:sched_switch event"),
        ),
    ]
}

/// Whether the host `fs` reads could be traced, without making anything there: Err says why
/// not (`ocrig doctor`).
pub fn traceable(fs: &dyn HostFs) -> Result<(), String> {
    let w = fs
        .writer()
        .ok_or_else(|| format!("{} is only read from here", fs.label()))?;
    w.apply(&preconditions(TRACEFS), false)
}

/// Removes the instances of ocrig processes that no longer exist on that host (a killed
/// sweep's; an instance is named after its owner, [`HostWrite::owner_pid`]).
pub fn remove_stale(fs: &dyn HostFs, root: &str) {
    let (Some(w), Ok(entries)) = (fs.writer(), fs.list_dir(&format!("{root}/instances"))) else {
        return;
    };
    let stale: Vec<FileOp> = entries
        .iter()
        .filter(|name| {
            name.strip_prefix(PREFIX)
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
                .is_some_and(|pid| !fs.exists(&format!("/proc/{pid}")))
        })
        .map(|name| FileOp::Rmdir(format!("{root}/instances/{name}")))
        .collect();
    let _ = w.apply(&stale, true);
}

impl Tracer {
    /// Makes an instance tracing every switch on `cpus` of the host `fs` reads, recording
    /// nothing until a run begins. Err: why this host cannot be traced (each run's record
    /// says it as `unavailable`).
    pub fn new(fs: &Arc<dyn HostFs>, cpus: &[usize]) -> Result<Self, String> {
        Self::new_at(fs, TRACEFS, cpus)
    }

    fn new_at(fs: &Arc<dyn HostFs>, root: &str, cpus: &[usize]) -> Result<Self, String> {
        let cpu0 = super::probe::process_cpu_ns();
        let Some(w) = fs.writer() else {
            return Err(format!(
                "{} is only read from here, and a tracefs instance needs writes",
                fs.label()
            ));
        };
        if cpus.is_empty() || cpus.iter().any(|&c| c >= 1024) {
            return Err(format!("no host CPU set to trace ({cpus:?})"));
        }
        remove_stale(&**fs, root);
        let name = format!(
            "{PREFIX}{}-{}",
            w.owner_pid()?,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = format!("{root}/instances/{name}");
        let mut ops = preconditions(root);
        ops.push(FileOp::Mkdir(dir.clone()));
        w.apply(&ops, false)?;
        // From here on, Drop removes the instance whatever fails.
        let mut tracer = Instance {
            fs: Arc::clone(fs),
            dir,
            cpus: cpus.to_vec(),
            all_cpus_mask: String::new(),
            reset: std::sync::Mutex::new(None),
            setup_cost_ns: std::sync::atomic::AtomicU64::new(0),
            host_slice: host_slice_setting(&**fs),
        };
        let at = |f: &str| format!("{}/{f}", tracer.dir);
        tracer.all_cpus_mask = fs
            .read(&at("tracing_cpumask"))
            .map_err(|e| format!("reading the new instance's CPU mask: {e}"))?
            .trim()
            .to_string();
        // The ring buffer only on the traced CPUs: an instance gets one per possible CPU, and
        // 2 MiB on each of a 200-CPU host's would be 400 MiB of kernel memory.
        let mut ops = vec![
            FileOp::Write(at("tracing_on"), "0".into()),
            FileOp::Write(at("trace_clock"), "mono".into()),
            FileOp::Write(at("options/overwrite"), "0".into()),
            FileOp::Write(at("buffer_size_kb"), "4".into()),
        ];
        ops.extend(cpus.iter().map(|c| {
            FileOp::Write(
                at(&format!("per_cpu/cpu{c}/buffer_size_kb")),
                BUFFER_KB.to_string(),
            )
        }));
        if fs.is_local() {
            // One clock, no markers: the mask and the event stay set, `tracing_on` decides.
            ops.push(FileOp::Write(at("tracing_cpumask"), cpumask(cpus)));
            ops.push(FileOp::Write(at("events/sched/sched_switch/enable"), "1".into()));
            ops.push(FileOp::Write(at(WAKEUP_ENABLE), "1".into()));
        }
        w.apply(&ops, false)?;
        tracer.setup_cost_ns.store(
            super::probe::process_cpu_ns().saturating_sub(cpu0),
            Ordering::Relaxed,
        );
        Ok(Self(Arc::new(tracer)))
    }

    /// Starts recording one run; `guests[g][v]` is the traced host's thread of guest g's
    /// vCPU v. Waits for the previous run's reset first (it normally ended while this run's
    /// payload started).
    pub fn begin(&self, guests: &[Vec<i32>]) -> Result<SchedTrace, String> {
        let cpu0 = super::probe::process_cpu_ns();
        self.wait_reset()?;
        let w = self.fs.writer().expect("a tracer's host has a writer");
        let at = |f: &str| format!("{}/{f}", self.dir);
        let mut trace = SchedTrace {
            tracer: Arc::clone(&self.0),
            guests: guests.to_vec(),
            started_ns: 0,
            markers: Vec::new(),
            cost_ns: 0,
            finished: false,
        };
        if self.fs.is_local() {
            trace.started_ns = mono_ns();
            w.apply(&[FileOp::Write(at("tracing_on"), "1".into())], false)?;
        } else {
            // Markers before the event is on and under the whole-host mask, so that a marker
            // written on any of that host's CPUs is kept (its other CPUs' buffers are small):
            // each one's time on that host's trace clock, against this machine's clock around
            // the write.
            w.apply(
                &[
                    FileOp::Write(at("tracing_cpumask"), self.all_cpus_mask.clone()),
                    FileOp::Write(at("tracing_on"), "1".into()),
                ],
                false,
            )?;
            for i in 0..MARKERS {
                let t0 = mono_ns();
                w.write_now(&at("trace_marker"), &format!("{MARKER}{i}"))?;
                trace.markers.push((i, t0, mono_ns()));
            }
            trace.started_ns = mono_ns();
            w.apply(
                &[
                    FileOp::Write(at("tracing_cpumask"), cpumask(&self.cpus)),
                    FileOp::Write(at("events/sched/sched_switch/enable"), "1".into()),
                    FileOp::Write(at(WAKEUP_ENABLE), "1".into()),
                ],
                false,
            )?;
        }
        trace.cost_ns = super::probe::process_cpu_ns().saturating_sub(cpu0)
            + self.setup_cost_ns.swap(0, Ordering::Relaxed);
        Ok(trace)
    }
}

impl std::ops::Deref for Tracer {
    type Target = Instance;
    fn deref(&self) -> &Instance {
        &self.0
    }
}

impl Instance {
    /// Stops recording and empties the buffer on a thread of its own; the next
    /// [`Tracer::begin`] (or the instance's removal) waits for it.
    fn reset_in_background(&self) {
        let (fs, dir) = (Arc::clone(&self.fs), self.dir.clone());
        let mut ops = vec![FileOp::Write(format!("{dir}/tracing_on"), "0".into())];
        if !fs.is_local() {
            ops.push(FileOp::Write(
                format!("{dir}/events/sched/sched_switch/enable"),
                "0".into(),
            ));
            ops.push(FileOp::Write(format!("{dir}/{WAKEUP_ENABLE}"), "0".into()));
        }
        // Opening `trace` for writing with O_TRUNC empties every CPU's buffer and its
        // dropped/overrun counts.
        ops.push(FileOp::Write(format!("{dir}/trace"), String::new()));
        let reset = move || {
            fs.writer()
                .expect("a tracer's host has a writer")
                .apply(&ops, false)
        };
        let mut slot = self.reset.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(previous) = slot.take() {
            let _ = previous.join();
        }
        *slot = Some(
            std::thread::Builder::new()
                .name("ocrig-trace-reset".into())
                .spawn(reset)
                .unwrap_or_else(|e| {
                    let why = format!("no thread to reset the trace: {e}");
                    std::thread::spawn(move || Err(why))
                }),
        );
    }

    fn wait_reset(&self) -> Result<(), String> {
        let pending = self.reset.lock().unwrap_or_else(|e| e.into_inner()).take();
        match pending.map(std::thread::JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(format!("resetting the trace after the previous run: {e}")),
            Some(Err(_)) => Err("resetting the trace after the previous run: its thread panicked".into()),
        }
    }
}

impl SchedTrace {
    /// Stops the trace, writes the timeline to `file` and returns the record's summary.
    /// `run` is the measured window (this machine's mono ns: the first go signal, the last
    /// guest's end).
    /// Also hands back the timeline, the vCPUs' waits and the trace's clock minus this
    /// machine's ([`Kept`]), for what is read against them while they are in memory.
    pub fn finish_keeping(mut self, run: (u64, u64), file: &Path) -> (Value, Option<Kept>) {
        let cpu0 = super::probe::process_cpu_ns();
        let stopped_ns = mono_ns();
        let t = &self.tracer;
        let w = t.fs.writer().expect("a tracer's host has a writer");
        let mut paths = vec![format!("{}/trace", t.dir)];
        paths.extend(t.cpus.iter().map(|c| format!("{}/per_cpu/cpu{c}/stats", t.dir)));
        let read = w
            .apply(
                &[FileOp::Write(format!("{}/tracing_on", t.dir), "0".into())],
                false,
            )
            .map(|()| t.fs.read_many(&paths));
        // Read: the buffer may be emptied for the next run.
        self.finished = true;
        t.reset_in_background();
        let mut files = match read {
            Ok(files) => files.into_iter(),
            Err(e) => return (json!({ "unavailable": format!("stopping the trace: {e}") }), None),
        };
        let text = match files.next() {
            Some(Ok(t)) => t,
            Some(Err(e)) => return (json!({ "unavailable": format!("reading the trace: {e}") }), None),
            None => return (json!({ "unavailable": "reading the trace: no answer" }), None),
        };
        // Per CPU (the stats files follow `t.cpus`): events its full buffer dropped.
        let dropped_per_cpu: Vec<(usize, u64)> = t
            .cpus
            .iter()
            .zip(files)
            .map(|(&cpu, s)| {
                let s = s.unwrap_or_default();
                (cpu, stat_field(&s, "dropped events") + stat_field(&s, "overrun"))
            })
            .collect();
        let dropped: u64 = dropped_per_cpu.iter().map(|(_, n)| n).sum();
        let dropped_on: Vec<usize> = dropped_per_cpu
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(cpu, _)| *cpu)
            .collect();
        let tie = if t.fs.is_local() {
            ClockTie {
                offset_ns: 0,
                error_ns: 0,
            }
        } else {
            match clock_tie(&text, &self.markers) {
                Some(t) => t,
                None => {
                    return (
                        json!({ "unavailable": format!(
                            "none of the {MARKERS} clock markers written to {} came back in its trace", t.fs.label()
                        ) }),
                        None,
                    );
                }
            }
        };
        let there = |ns: u64| ns.saturating_add_signed(tie.offset_ns);
        let (switches, wakeups) = parse_with_wakeups(&text);
        let mut tl = timeline(
            &switches,
            &t.cpus,
            &self.guests,
            (there(self.started_ns), there(stopped_ns)),
            (there(run.0), there(run.1)),
            &dropped_on,
        );
        tl.dropped_events = dropped;
        drop(text);
        // Known up to the timeline's end (where a full buffer's kept events end, if any did).
        let known_to = (tl.run_start_mono_ns as i64 + tl.traced_to_us * 1000).max(0) as u64;
        let waits = vcpu_waits(
            &switches,
            Some(&wakeups),
            &self.guests,
            (there(self.started_ns), known_to),
            tl.run_start_mono_ns,
        );
        drop((switches, wakeups));
        let written = write_gz(
            &SideFile {
                timeline: &tl,
                vcpu_waits: &waits,
            },
            file,
        );
        let slice = t.host_slice.clone();
        let cost_ms = (self.cost_ns + super::probe::process_cpu_ns().saturating_sub(cpu0)) as f64 / 1e6;
        match written {
            Ok(bytes) => {
                let mut s = summary(&tl, file, bytes, cost_ms, slice);
                s["clock"] = json!({
                    "host": t.fs.label(),
                    "offset_ns": tie.offset_ns,
                    "error_ns": tie.error_ns,
                    "from": if t.fs.is_local() {
                        "this machine's CLOCK_MONOTONIC (one clock)".to_string()
                    } else {
                        format!("trace markers written over SSH, the shortest round trip of {MARKERS}")
                    },
                });
                s["vcpu_waits"] = json!({
                    "waits": waits.waits.len(),
                    "wakeups_unseen": waits.wakeups_unseen,
                });
                (
                    s,
                    Some(Kept {
                        timeline: tl,
                        waits,
                        offset_ns: tie.offset_ns,
                    }),
                )
            }
            Err(e) => (
                json!({ "unavailable": format!("the timeline could not be kept: {e}") }),
                None,
            ),
        }
    }
}

/// What [`SchedTrace::finish_keeping`] hands back besides the record's summary.
pub struct Kept {
    pub timeline: Timeline,
    /// Each vCPU thread's waits for a CPU, with their times.
    pub waits: VcpuWaits,
    /// The trace's clock minus this machine's, ns.
    pub offset_ns: i64,
}

impl Drop for SchedTrace {
    fn drop(&mut self) {
        if !self.finished {
            self.tracer.reset_in_background();
        }
    }
}

/// Removing an instance waits for the kernel's RCU grace periods: ~55 ms here on an idle
/// host (8 ms to disable the event, 40-50 ms for the rmdir), seconds when busy vCPUs delay
/// them (one SIGINT here waited 6.6 s for it, with the guests still alive, since they were
/// dropped after the trace). So an instance is removed on a thread of its own: off the path
/// between two guest sets, and never before the guests are killed. [`wait_cleanups`] waits
/// for them before ocrig exits; what a killed ocrig left is removed by the next one
/// ([`remove_stale`]).
static CLEANUPS: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// Further tries of an instance's rmdir the kernel refused, 0.5 s apart.
const RMDIR_RETRIES: u32 = 10;

impl Drop for Instance {
    fn drop(&mut self) {
        let (fs, dir) = (Arc::clone(&self.fs), std::mem::take(&mut self.dir));
        let reset = self.reset.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        let remove = move || {
            // The last run's reset writes into the instance: it ends first.
            if let Some(r) = reset {
                let _ = r.join();
            }
            let Some(w) = fs.writer() else { return };
            let ops = [
                FileOp::Write(format!("{dir}/tracing_on"), "0".into()),
                FileOp::Write(format!("{dir}/events/sched/sched_switch/enable"), "0".into()),
                FileOp::Write(format!("{dir}/{WAKEUP_ENABLE}"), "0".into()),
                FileOp::Rmdir(dir.clone()),
            ];
            // The rmdir is refused (EBUSY) while the kernel still holds the instance (seen 4
            // times in about 40 guest sets of one sweep here, 2026-12-05; each left an instance
            // and its ring buffers until the next ocrig): tried again for a few seconds, on
            // this thread of its own.
            let mut outcome = w.apply(&ops, true);
            for _ in 0..RMDIR_RETRIES {
                if outcome.is_ok() || fs.list_dir(&dir).is_err() {
                    outcome = Ok(());
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
                outcome = w.apply(&[FileOp::Rmdir(dir.clone())], true);
            }
            if let Err(e) = outcome {
                tracing::warn!("removing the trace instance {dir} on {}: {e}", fs.label());
            }
        };
        let mut pending = CLEANUPS.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|h| !h.is_finished());
        match std::thread::Builder::new()
            .name("ocrig-trace-rm".into())
            .spawn(remove)
        {
            Ok(h) => pending.push(h),
            Err(e) => tracing::warn!("no thread to remove a trace instance: {e}"),
        }
    }
}

/// Waits up to `timeout` for the trace instances being removed; returns how many were not
/// removed by then (the next ocrig removes them).
pub fn wait_cleanups(timeout: std::time::Duration) -> usize {
    let deadline = std::time::Instant::now() + timeout;
    let mut pending = std::mem::take(&mut *CLEANUPS.lock().unwrap_or_else(|e| e.into_inner()));
    while !pending.is_empty() && std::time::Instant::now() < deadline {
        pending.retain(|h| !h.is_finished());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    pending.retain(|h| !h.is_finished());
    if !pending.is_empty() {
        tracing::warn!(
            "{} trace instance(s) still being removed after {timeout:?}; the next ocrig removes them",
            pending.len()
        );
    }
    pending.len()
}

/// The hex `tracing_cpumask` of a CPU set, in the kernel's comma-separated 32-bit words.
fn cpumask(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |m| m / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    w.iter()
        .rev()
        .map(|x| format!("{x:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn stat_field(stats: &str, key: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(key)?.trim_start_matches(':').trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
