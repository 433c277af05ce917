//! The host scheduler's own record of a run: which thread ran on each pinned host CPU when,
//! from `sched:sched_switch` in a tracefs instance of our own, turned into a vCPU timeline.
//!
//! - An instance of our own (`/sys/kernel/tracing/instances/ocrig-<pid>-<n>`), one per guest
//!   set ([`Tracer`]), recording only during each of its runs ([`SchedTrace`]): the global
//!   buffer and any other tracer (another ocrig, perf, trace-cmd) are left alone.
//! - `tracing_cpumask` = the run's host CPUs, and no pid filter: every switch on those CPUs is
//!   kept, so the timeline shows what else ran there ("other", by command name) and idle.
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

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::hostfs::{FileOp, HostFs};

const TRACEFS: &str = "/sys/kernel/tracing";
/// Per-CPU ring buffer. A sched_switch event takes about 68 bytes, so this keeps ~30k switches
/// per CPU: a 2x run switches a few hundred times a second per CPU (tens of seconds kept).
pub const BUFFER_KB: u64 = 2048;
/// Most segments written to one side file (about 30 bytes each in it).
pub const MAX_SEGMENTS: usize = 200_000;
const PREFIX: &str = "ocrig-";

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

/// How the traced host's trace clock was tied to this machine's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockTie {
    /// The traced host's CLOCK_MONOTONIC minus this machine's, ns.
    pub offset_ns: i64,
    /// How far off `offset_ns` can be (half the marker write's round trip), ns.
    pub error_ns: u64,
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

const MARKER: &str = "ocrig-clock-";
/// Markers written to tie a remote host's trace clock to this one's; the one with the shortest
/// round trip is kept.
const MARKERS: u32 = 3;

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
    /// Also hands back the timeline and the trace's clock minus this machine's (ns), for what
    /// is read against it while it is in memory.
    pub fn finish_keeping(mut self, run: (u64, u64), file: &Path) -> (Value, Option<(Timeline, i64)>) {
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
        let dropped: u64 = files
            .filter_map(Result::ok)
            .map(|s| stat_field(&s, "dropped events") + stat_field(&s, "overrun"))
            .sum();
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
        let switches = parse(&text);
        let mut tl = timeline(
            &switches,
            &t.cpus,
            &self.guests,
            (there(self.started_ns), there(stopped_ns)),
            (there(run.0), there(run.1)),
        );
        tl.dropped_events = dropped;
        drop(text);
        let written = write_gz(&tl, file);
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
                (s, Some((tl, tie.offset_ns)))
            }
            Err(e) => (
                json!({ "unavailable": format!("the timeline could not be kept: {e}") }),
                None,
            ),
        }
    }
}

impl Drop for SchedTrace {
    fn drop(&mut self) {
        if !self.finished {
            self.tracer.reset_in_background();
        }
    }
}

/// The traced host's clock against this one's from the markers `(index, before, after)` and
/// where they landed in the trace: the marker with the shortest round trip, its trace time
/// against the middle of its write.
pub fn clock_tie(trace: &str, markers: &[(u32, u64, u64)]) -> Option<ClockTie> {
    let landed: BTreeMap<u32, u64> = trace.lines().filter_map(parse_marker).collect();
    markers
        .iter()
        .filter_map(|&(i, t0, t1)| {
            let at = *landed.get(&i)?;
            let mid = t0 / 2 + t1 / 2 + (t0 % 2 + t1 % 2) / 2;
            Some(ClockTie {
                offset_ns: at as i64 - mid as i64,
                error_ns: t1.saturating_sub(t0).div_ceil(2),
            })
        })
        .min_by_key(|t| t.error_ns)
}

/// A marker line of ours: (its index, its time on the trace clock).
fn parse_marker(line: &str) -> Option<(u32, u64)> {
    let (head, body) = line.split_once(": tracing_mark_write: ")?;
    let i = body.trim().strip_prefix(MARKER)?.parse().ok()?;
    Some((i, head_cpu_ns(head)?.1))
}

/// Writes the timeline as gzip'd JSON (about a quarter of the plain size); returns its bytes.
fn write_gz(tl: &Timeline, file: &Path) -> Result<usize, String> {
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

/// One `sched_switch` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub cpu: usize,
    pub ns: u64,
    pub prev_pid: i32,
    pub prev_comm: String,
    /// `R` (preempted, still runnable), `S` (slept), `D`, ... with `+` for preempted in the kernel.
    pub prev_state: String,
    pub next_pid: i32,
    pub next_comm: String,
}

/// Parses the text `trace` of a tracefs instance: every `sched_switch` line, in order. Other
/// lines (comments, other events) are skipped. Command names may hold spaces (`CPU 0/TCG`).
pub fn parse(text: &str) -> Vec<Switch> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Switch> {
    let (head, body) = line.split_once(": sched_switch: ")?;
    let (cpu, ns) = head_cpu_ns(head)?;
    let (prev, next) = body.split_once(" ==> ")?;
    let field = |s: &str, key: &str, until: &str| -> Option<String> {
        let at = s.rfind(key)? + key.len();
        let rest = &s[at..];
        Some(match rest.find(until) {
            Some(end) if !until.is_empty() => rest[..end].to_string(),
            _ => rest.to_string(),
        })
    };
    Some(Switch {
        cpu,
        ns,
        prev_pid: field(prev, " prev_pid=", " ")?.parse().ok()?,
        prev_comm: field(prev, "prev_comm=", " prev_pid=")?,
        prev_state: field(prev, " prev_state=", "")?.trim().to_string(),
        next_pid: field(next, " next_pid=", " ")?.parse().ok()?,
        next_comm: field(next, "next_comm=", " next_pid=")?,
    })
}

/// An event line's head, "<task>-<pid> [CPU] flags TIMESTAMP" (flags absent without
/// irq-info): (CPU, timestamp in ns).
fn head_cpu_ns(head: &str) -> Option<(usize, u64)> {
    let mut words = head.split_whitespace().rev();
    let ts = words.next()?;
    let cpu = words.find_map(|w| w.strip_prefix('[')?.strip_suffix(']')?.parse::<usize>().ok())?;
    let (secs, frac) = ts.split_once('.')?;
    let frac_ns = format!("{frac:0<9}");
    let ns = secs.parse::<u64>().ok()? * 1_000_000_000 + frac_ns.get(..9)?.parse::<u64>().ok()?;
    Some((cpu, ns))
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
/// starts when the trace did, the last ends when it stopped (or where the kept events end).
pub fn timeline(
    switches: &[Switch],
    cpus: &[usize],
    guests: &[Vec<i32>],
    traced: (u64, u64),
    run: (u64, u64),
) -> Timeline {
    let vcpu_of: BTreeMap<i32, (u32, u32)> = guests
        .iter()
        .enumerate()
        .flat_map(|(g, tids)| {
            tids.iter()
                .enumerate()
                .map(move |(v, &t)| (t, (g as u32, v as u32)))
        })
        .collect();
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
    let end = if clipped.is_some() { last_ns } else { traced.1 };
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
fn quantile(sorted: &[f64], p: f64) -> Option<f64> {
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

/// The host scheduler's slice setting, read where that host's kernel keeps it, or null with
/// why.
pub fn host_slice_setting(fs: &dyn HostFs) -> Value {
    let candidates = [
        ("base_slice_ns", "/sys/kernel/debug/sched/base_slice_ns"),
        ("min_granularity_ns", "/sys/kernel/debug/sched/min_granularity_ns"),
        ("min_granularity_ns", "/proc/sys/kernel/sched_min_granularity_ns"),
    ];
    let mut paths: Vec<String> = candidates.iter().map(|c| c.1.to_string()).collect();
    paths.extend([
        "/proc/sys/kernel/osrelease".into(),
        "/sys/devices/system/cpu/online".into(),
    ]);
    let read = fs.read_many(&paths);
    let hz = read[3].as_ref().ok().and_then(|r| hz(fs, r.trim()));
    let mut why = Vec::new();
    for ((name, path), r) in candidates.iter().zip(&read) {
        match r {
            Ok(t) => {
                if let Ok(ns) = t.trim().parse::<u64>() {
                    return json!({ "name": name, "ns": ns, "from": path, "hz": hz });
                }
            }
            // Not there is expected (each kernel has one of them); there and unreadable is news.
            Err(e) if fs.exists(path) => why.push(e.clone()),
            Err(_) => {}
        }
    }
    if why.is_empty() {
        why.push(if fs.exists("/sys/kernel/debug/sched") {
            "no base_slice_ns or min_granularity_ns in /sys/kernel/debug/sched".into()
        } else {
            "debugfs is not mounted at /sys/kernel/debug (base_slice_ns lives there)".into()
        });
    }
    let cpus = read[4].as_ref().ok().map_or(1, |t| cpu_count(t));
    json!({
        "name": "base_slice_ns", "ns": null, "unavailable": why.join("; "), "hz": hz,
        "kernel_default_ns": default_slice_ns(cpus),
        "kernel_default_rule": "not read from the host: the kernel's default, 0.75 ms × (1 + log2(min(online CPUs, 8))) \
            (base_slice_ns since 6.6, min_granularity_ns before), unless someone changed it",
    })
}

/// CPUs in a kernel CPU list such as `0-3,8,10-11`.
fn cpu_count(list: &str) -> usize {
    list.trim()
        .split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => Some(b.parse::<usize>().ok()? + 1 - a.parse::<usize>().ok()?),
            None => r.parse::<usize>().ok().map(|_| 1),
        })
        .sum()
}

/// The kernel's default slice for a host of `cpus` online CPUs (`sysctl_sched_base_slice`,
/// formerly `sysctl_sched_min_granularity`: 0.75 ms scaled by 1 + ilog2(min(CPUs, 8))).
fn default_slice_ns(cpus: usize) -> u64 {
    750_000 * (1 + cpus.clamp(1, 8).ilog2() as u64)
}

/// That host kernel's CONFIG_HZ (its tick decides when a slice that ran out is noticed), from
/// /boot/config-<release>, or on this machine /proc/config.gz; null when neither says.
fn hz(fs: &dyn HostFs, release: &str) -> Option<u64> {
    let text = fs.read(&format!("/boot/config-{release}")).ok().or_else(|| {
        // Binary: only read here, not through a remote host's text reader.
        if !fs.is_local() {
            return None;
        }
        let gz = std::fs::File::open("/proc/config.gz").ok()?;
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut s).ok()?;
        Some(s)
    })?;
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ=")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXCERPT: &str = include_str!("testdata/sched_switch_2x.txt");

    #[test]
    fn the_default_slice_grows_with_the_log_of_the_cpus() {
        assert_eq!(
            [1, 2, 4, 8, 200].map(default_slice_ns),
            [750_000, 1_500_000, 2_250_000, 3_000_000, 3_000_000]
        );
        assert_eq!(
            [cpu_count("0-1\n"), cpu_count("0-3,8,10-11"), cpu_count("5")],
            [2, 7, 1]
        );
        let s = host_slice_setting(&crate::hostfs::LocalFs);
        assert!(
            s["ns"].as_u64().is_some() || s["unavailable"].as_str().is_some(),
            "{s}"
        );
    }

    #[test]
    fn a_remote_clock_is_tied_by_the_marker_with_the_shortest_round_trip() {
        let trace = "# tracer: nop\n\
            sh-4242 [003] ..... 100.000050: tracing_mark_write: ocrig-clock-0\n\
            sh-4242 [003] ..... 100.001000: tracing_mark_write: ocrig-clock-1\n\
            sh-4242 [001] ..... 100.002000: tracing_mark_write: someone else's\n";
        // Marker 0 took 100 µs there and back, marker 1 only 10 µs; marker 2 never landed.
        let markers = [
            (0, 40_000, 140_000),
            (1, 1_000_000, 1_010_000),
            (2, 2_000_000, 2_000_002),
        ];
        let t = clock_tie(trace, &markers).unwrap();
        assert_eq!(
            t,
            ClockTie {
                offset_ns: 100_001_000_000 - 1_005_000,
                error_ns: 5_000
            }
        );
        assert_eq!(clock_tie("nothing", &markers), None);
    }

    #[test]
    fn cpumask_words() {
        assert_eq!(cpumask(&[0, 1]), "00000003");
        assert_eq!(cpumask(&[33]), "00000002,00000000");
    }

    #[test]
    fn parses_lines_with_spaces_in_command_names() {
        let l = "       CPU 0/TCG-20311   [001] d..2.  9949.456880: sched_switch: prev_comm=CPU 0/TCG prev_pid=20311 prev_prio=120 prev_state=R ==> next_comm=CPU 0/TCG next_pid=20400 next_prio=120";
        let s = parse_line(l).unwrap();
        assert_eq!(
            s,
            Switch {
                cpu: 1,
                ns: 9_949_456_880_000,
                prev_pid: 20311,
                prev_comm: "CPU 0/TCG".into(),
                prev_state: "R".into(),
                next_pid: 20400,
                next_comm: "CPU 0/TCG".into()
            }
        );
        assert!(parse_line("# tracer: nop").is_none());
    }

    /// A real excerpt: 2x on this machine's 2 CPUs, four 1-vCPU TCG guests (threads 27066 and
    /// 27071 pinned to CPU 0, 27067 and 27070 to CPU 1), and a compiler of another user on CPU 0.
    #[test]
    fn a_real_2x_trace_becomes_a_timeline_that_tiles_each_cpu() {
        let switches = parse(EXCERPT);
        let lines = EXCERPT.lines().filter(|l| l.contains(": sched_switch: ")).count();
        assert_eq!(switches.len(), lines);
        assert!(switches.windows(2).all(|w| w[0].ns <= w[1].ns));
        let guests = vec![vec![27066], vec![27067], vec![27071], vec![27070]];
        let first = switches[0].ns;
        let last = switches.last().unwrap().ns;
        // The run: 10 ms after the first switch to 10 ms before the last.
        let run = (first + 10_000_000, last - 10_000_000);
        let tl = timeline(&switches, &[0, 1], &guests, (first - 1000, last + 1000), run);
        assert_eq!(
            tl.segments.len(),
            lines + 2,
            "one segment per switch, plus each CPU's last"
        );
        for cpu in [0, 1] {
            let mine: Vec<&[i64; 4]> = tl.segments.iter().filter(|s| s[0] == cpu).collect();
            // Contiguous: each segment starts where the previous one ended, from trace start to stop.
            assert_eq!(mine[0][1], tl.traced_from_us);
            assert_eq!(mine.last().unwrap()[2], tl.traced_to_us);
            assert!(mine.windows(2).all(|w| w[0][2] == w[1][1]), "cpu {cpu}");
        }
        // CPU 1: guests 1 and 3 take turns, many times; neither shows up on CPU 0.
        let turns = tl.vcpu_turns();
        let on1 = &turns[&1];
        assert!(on1.iter().all(|g| *g == (1, 0) || *g == (3, 0)), "{on1:?}");
        assert!(on1.len() > 20, "{on1:?}");
        assert!(turns[&0].iter().all(|g| *g == (0, 0) || *g == (2, 0)));
        assert!(tl.who.contains(&Who::Other {
            comm: "qemu-system-x86".into()
        }));
        // Physical: every stint and every turn is shorter than the run and longer than 0.
        let slices = tl.vcpu_slices_ms();
        let turns = tl.vcpu_turns_ms();
        for (g, ms) in slices.iter().chain(turns.iter()) {
            assert!(ms.iter().all(|&m| m > 0.0 && m < 100.0), "{g:?} {ms:?}");
        }
        let t1: f64 = turns[&(1, 0)].iter().sum::<f64>() / turns[&(1, 0)].len() as f64;
        let s1: f64 = slices[&(1, 0)].iter().sum::<f64>() / slices[&(1, 0)].len() as f64;
        assert!(t1 >= s1, "a turn holds one or more stints: {t1} {s1}");
        let shares = tl.cpu_shares();
        for cpu in [0, 1] {
            let s = &shares[&cpu];
            let total =
                s["vcpus"].as_f64().unwrap() + s["idle"].as_f64().unwrap() + s["other"].as_f64().unwrap();
            assert!(
                (total - 1.0).abs() < 1e-9,
                "the run's time is all accounted for: {s}"
            );
        }
        assert_eq!(
            shares[&0]["top_other"][0][0], "rustc",
            "the compiler crowding CPU 0"
        );
        let sum = summary(&tl, Path::new("/x.json"), 1, 0.0, Value::Null);
        assert_eq!(sum["segments"], tl.segments.len());
        assert!(
            sum["vcpu_slices"][1]["turn_p50_ms"].as_f64().unwrap() > 0.1,
            "{sum}"
        );
        // Compact: the side file stays small per segment, and reads back as written.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.json.gz");
        let bytes = write_gz(&tl, &file).unwrap();
        assert!(bytes < 15 * tl.segments.len() + 1000, "{bytes}");
        assert_eq!(read_timeline(&file).unwrap(), tl);
        assert!(
            !tl.who.contains(&Who::Other { comm: String::new() }),
            "every thread named"
        );
    }

    /// A thread on host CPU 0 that sleeps `n` times for 1 ms (two switches each); its tid.
    fn sleeper_on_cpu0(n: usize) -> (i32, std::thread::JoinHandle<()>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // SAFETY: a zeroed cpu_set_t with CPU 0 set, for this thread (pid 0).
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            for _ in 0..n {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        (rx.recv().unwrap(), h)
    }

    #[test]
    #[cfg_attr(not(feature = "full-tests"), ignore = "full tier: root and tracefs")]
    fn one_instance_serves_every_run_of_a_guest_set_and_is_removed_when_dropped() {
        let fs: Arc<dyn HostFs> = Arc::new(crate::hostfs::LocalFs);
        match Tracer::new(&fs, &[0]) {
            Ok(tracer) => {
                let dir = std::path::PathBuf::from(&tracer.dir);
                assert!(dir.is_dir());
                // The ring buffer is on the traced CPU only.
                let kb = |c: usize| {
                    std::fs::read_to_string(dir.join(format!("per_cpu/cpu{c}/buffer_size_kb"))).unwrap()
                };
                // (The kernel rounds up to whole pages: 2048 or 2051 read back here.)
                let traced = kb(0).trim().parse::<u64>().unwrap();
                assert!((BUFFER_KB..BUFFER_KB + 64).contains(&traced), "{traced}");
                if dir.join("per_cpu/cpu1").is_dir() {
                    assert!(kb(1).trim().parse::<u64>().unwrap() < 64, "{}", kb(1));
                }
                let tmp = tempfile::tempdir().unwrap();
                let switch_lines = || {
                    std::fs::read_to_string(dir.join("trace"))
                        .unwrap()
                        .lines()
                        .filter(|l| l.contains("sched_switch:"))
                        .count()
                };
                // Nothing is recorded outside a run.
                let (_, idle) = sleeper_on_cpu0(20);
                idle.join().unwrap();
                assert_eq!(switch_lines(), 0);
                for run in 0..2 {
                    let (tid, h) = sleeper_on_cpu0(50);
                    let t = tracer.begin(&[vec![tid]]).unwrap();
                    let from = mono_ns();
                    h.join().unwrap();
                    let file = tmp.path().join(format!("run{run}.json.gz"));
                    let s = t.finish_keeping((from, mono_ns()), &file).0;
                    assert!(s.get("unavailable").is_none(), "{s}");
                    let tl = read_timeline(&file).unwrap();
                    assert_eq!(tl.dropped_events, 0);
                    // Each run's own thread: recording restarted after the previous run's reset.
                    let mine = tl.vcpu_slices_ms().get(&(0, 0)).map_or(0, Vec::len);
                    assert!(mine >= 25, "run {run}: {mine} slices of its thread in {s}");
                    // Emptied once read: the next run starts with an empty buffer.
                    tracer.wait_reset().unwrap();
                    assert_eq!(switch_lines(), 0, "run {run}");
                }
                // A run dropped unread (failed, interrupted) stops recording too.
                drop(tracer.begin(&[]).unwrap());
                tracer.wait_reset().unwrap();
                let on = std::fs::read_to_string(dir.join("tracing_on")).unwrap();
                assert_eq!(on.trim(), "0");
                let t0 = std::time::Instant::now();
                drop(tracer);
                // Removed on a thread of its own: the drop itself does not wait for it.
                assert!(
                    t0.elapsed() < std::time::Duration::from_millis(20),
                    "{:?}",
                    t0.elapsed()
                );
                assert_eq!(wait_cleanups(std::time::Duration::from_secs(30)), 0);
                assert!(!dir.exists(), "{} left behind", dir.display());
            }
            // Not traceable here (not root, no tracefs): the reason names what is missing.
            Err(why) => {
                let expected =
                    crate::hostfs::HostWrite::apply(&crate::hostfs::LocalFs, &preconditions(TRACEFS), false);
                assert_eq!(expected, Err(why));
            }
        }
    }
    /// An instance the kernel still holds when it is dropped (here: a trace file left open,
    /// which makes the rmdir EBUSY) is removed once the kernel lets go, not left behind.
    #[test]
    #[cfg_attr(not(feature = "full-tests"), ignore = "full tier: root and tracefs")]
    fn an_instance_the_kernel_holds_is_removed_once_it_lets_go() {
        let fs: Arc<dyn HostFs> = Arc::new(crate::hostfs::LocalFs);
        let Ok(tracer) = Tracer::new(&fs, &[0]) else {
            // Not traceable here: the test above checks the reason.
            return;
        };
        let dir = std::path::PathBuf::from(&tracer.dir);
        let held = std::fs::File::open(dir.join("trace")).unwrap();
        drop(tracer);
        std::thread::sleep(std::time::Duration::from_millis(800));
        assert!(
            dir.exists(),
            "the kernel refuses the rmdir while the file is open"
        );
        drop(held);
        // (Polled: another test's wait_cleanups may take this removal's handle.)
        let t0 = std::time::Instant::now();
        while dir.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
