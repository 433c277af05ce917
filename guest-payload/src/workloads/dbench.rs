//! `dbench`: N clients replay a dbench loadfile (client.txt format) against a local file
//! system, as dbench 4.0 with its `fileio` backend.
//!
//! The loadfile is Debian's `/usr/share/dbench/client.txt` (26 MB, 458k operations) by
//! default: in a guest ocrig uploads it gzip-compressed to [`CLIENT_TXT_GUEST`] once per boot
//! (declared in the catalog); elsewhere the payload reads [`CLIENT_TXT_HOST`]. `--loadfile
//! PATH` takes another loadfile (plain or gzip, told apart by its first bytes) and
//! `--loadfile builtin` ocrig's small built-in one (72 operations, for quick tests).
//!
//! As dbench, each client is a process (`fork`; `--threads` makes them threads of one process,
//! sharing one fd table) working in `<dir>/clients/clientN` (every `client1` in the loadfile's
//! paths becomes the client's name), looping over the loadfile until time is up; the
//! operations are in [`super::dbench_client`]. As dbench's clients, each tokenizes every line
//! as it replays it and, as a process, checks before each line that its parent is alive
//! (`kill(parent, 0)`): client work that dbench does per operation. The loadfile is validated
//! once before the start, so a malformed line is reported before anything is measured. The
//! clients are released together through a start gate after each has set up.
//!
//! Throughput is counted as dbench 4.0 counts it (dbench.c `sig_alarm`): bytes of WriteX and
//! ReadX (their `size` arguments, added when the operation returns) done after the warm-up,
//! divided by the time since the warm-up ended, in MB/s with MB = 10^6 bytes (`mb_per_sec`,
//! higher is better). The warm-up lasts `--warmup` seconds (default `seconds / 5`, as dbench)
//! and, as in dbench, goes on until every client has moved some bytes. Per-operation counts
//! and latencies are for the measured phase only, as dbench resets them when warm-up ends.
//! dbench's `-t T` measures T seconds after the warm-up and prints the throughput of its last
//! one-second tick inside them, i.e. over T − 1 seconds: `--seconds T-1` is the same window.
//!
//! CPU inside the window: each client reads its own CPU clock (a client process has one
//! thread) when it first sees the measured phase and when it sees the stop, with the
//! monotonic time of both. The run checks that those CPU times fit in the span from the first
//! client's start to the last one's stop on the CPUs allowed (a client notices each phase
//! change between two operations, so its window can begin and end a little after the
//! coordinator's), and that they are within what the kernel charged the clients in all.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use super::dbench_client::{Client, ClientCounters, ClientOutcome, Control, MEASURE, STOP};
use super::dbench_loadfile::{self as lf, OpKind};
use super::shm::{SharedArray, ZeroValid};
use super::start::PipeGate;
use crate::env::Env;
use crate::metrics::{Fairness, Latency, new_latency_histogram};
use crate::report::Report;

/// Where ocrig puts Debian's client.txt (gzip-compressed) inside a guest.
pub const CLIENT_TXT_GUEST: &str = "/opt/ocrig/client.txt.gz";
/// Debian's dbench package's loadfile, on the host.
pub const CLIENT_TXT_HOST: &str = "/usr/share/dbench/client.txt";
/// `--loadfile` value that selects ocrig's small built-in loadfile.
pub const BUILTIN: &str = "builtin";

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Working directory (must exist); clients work in DIR/clients/clientN. In a guest, the
    /// scratch disk is mounted at /scratch.
    #[arg(long, short = 'D', default_value = "/scratch", value_parser = parse_path)]
    pub dir: PathBuf,
    /// Loadfile in dbench's client.txt format, plain or gzip; `builtin` for ocrig's small one
    /// (default: Debian's client.txt, from /opt/ocrig/client.txt.gz in a guest, else
    /// /usr/share/dbench/client.txt).
    #[arg(long, short = 'c', value_parser = parse_path)]
    pub loadfile: Option<PathBuf>,
    /// Number of clients.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: u32,
    /// Measured time in seconds, after the warm-up (dbench -t).
    #[arg(long, short = 't', default_value_t = 60.0, value_parser = super::ebizzy::parse_seconds)]
    pub seconds: f64,
    /// Warm-up seconds before measuring (default: seconds / 5, as dbench 4).
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<f64>,
    /// Run the clients as threads of one process instead of one process each (dbench's way).
    #[arg(long)]
    pub threads: bool,
}

/// Path arguments are only checked for being non-empty here; their existence is checked when
/// the workload runs (see [`super::BadInput`]).
fn parse_path(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err("an empty path".into());
    }
    Ok(PathBuf::from(s))
}

fn parse_warmup(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v.is_finite() && (0.0..=86_400.0).contains(&v)) {
        return Err(format!("{s} is not a warm-up in [0, 86400] seconds"));
    }
    Ok(v)
}

/// One operation kind's numbers in the measured phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpStats {
    pub count: u64,
    pub latency: Latency,
}

/// The `dbench` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DbenchResult {
    pub dir: String,
    /// "builtin" or the loadfile path.
    pub loadfile: String,
    pub loadfile_ops: u64,
    pub clients: u32,
    /// "process" (dbench's way) or "thread".
    pub client_mode: String,
    pub seconds: f64,
    /// Warm-up asked for.
    pub warmup_s: f64,
    /// Warm-up as it happened: from the start until every client had moved bytes and the
    /// asked warm-up had passed.
    pub warmup_actual_s: f64,
    /// Measured seconds (from the end of warm-up until the stop signal).
    pub measured_s: f64,
    /// WriteX + ReadX bytes in the measured phase.
    pub bytes: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub mb_per_sec: f64,
    /// Operations started and finished in the measured phase (= sum of `ops` counts).
    pub ops_total: u64,
    pub ops_per_sec: f64,
    pub ops: BTreeMap<String, OpStats>,
    pub ops_per_client: Vec<u64>,
    pub bytes_per_client: Vec<u64>,
    pub fairness: Fairness,
    /// Complete passes over the loadfile, all clients, whole run.
    pub loadfile_passes: u64,
    /// Slowest single operation in the measured phase, ms (dbench's max_latency).
    pub max_latency_ms: f64,
    /// NTCreateX that failed although the loadfile expected success (dbench prints these).
    pub open_failures: u64,
    /// ReadX that returned fewer bytes than the loadfile recorded (dbench prints these).
    pub short_reads: u64,
    /// The clients' CPU time inside their measured windows, ns, and the span those windows
    /// cover (first client's start to last client's stop), ns.
    #[serde(default)]
    pub window_cpu_ns: u64,
    #[serde(default)]
    pub window_span_ns: u64,
    /// What the kernel charged the clients over the whole run, set-up included (getrusage),
    /// ns, and whose account that is.
    #[serde(default)]
    pub kernel_cpu_ns: u64,
    #[serde(default)]
    pub kernel_cpu_source: String,
}

// SAFETY: atomics only, valid at zero.
unsafe impl ZeroValid for Control {}
// SAFETY: atomics only, valid at zero.
unsafe impl ZeroValid for ClientCounters {}

/// The loadfile to replay: where it comes from, and its text.
fn load(args: &Args) -> anyhow::Result<(String, String)> {
    let path = match &args.loadfile {
        Some(p) if p.as_os_str() == BUILTIN => {
            return Ok((lf::DEFAULT_LOADFILE.to_string(), BUILTIN.to_string()));
        }
        Some(p) if p.is_file() => p.clone(),
        Some(p) => {
            return Err(
                super::BadInput(format!("--loadfile '{}' is not a readable file", p.display())).into(),
            );
        }
        None => default_loadfile()?,
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading loadfile {}", path.display()))?;
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .with_context(|| format!("decompressing loadfile {}", path.display()))?;
        s
    } else {
        String::from_utf8(bytes).with_context(|| format!("loadfile {} is not text", path.display()))?
    };
    Ok((text, path.display().to_string()))
}

fn default_loadfile() -> Result<PathBuf, super::BadInput> {
    [CLIENT_TXT_GUEST, CLIENT_TXT_HOST]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            super::BadInput(format!(
                "--loadfile: the default loadfile is missing: neither {CLIENT_TXT_GUEST} (uploaded by ocrig into \
                 guests) nor {CLIENT_TXT_HOST} (Debian's dbench package) exists; pass --loadfile PATH or \
                 --loadfile {BUILTIN}"
            ))
        })
}

/// Everything the clients and the coordinator share; the arrays survive `fork`.
struct Run {
    /// The loadfile's text, validated; clients tokenize it as they go.
    text: String,
    /// The coordinator's pid, which client processes check before each line.
    coordinator: libc::pid_t,
    loadfile_ops: u64,
    dir: PathBuf,
    ctl: SharedArray<Control>,
    counters: SharedArray<ClientCounters>,
    gate: PipeGate,
}

// Only SharedArray, PipeGate (fds) and immutable data: shareable with client threads.
fn client_main(run: &Run, id: usize) -> Result<ClientOutcome, String> {
    let mut c = Client::new(&run.dir, id);
    run.gate
        .arrive()
        .map_err(|e| format!("client {id}: start gate: {e}"))?;
    let parent = (std::process::id() as libc::pid_t != run.coordinator).then_some(run.coordinator);
    let out = c.run(&run.text, run.ctl.get(0), run.counters.get(id), parent);
    c.cleanup();
    out.map_err(|e| format!("{e:#}"))
}

/// A running client and how to collect its outcome.
enum Handle {
    /// A forked client: its pid and the read end of the pipe its outcome comes through.
    Process {
        pid: libc::pid_t,
        result: std::fs::File,
    },
    Thread(std::thread::JoinHandle<Result<ClientOutcome, String>>),
}

/// Forks client `id`: it runs, sends its outcome as JSON through a pipe and leaves with _exit.
fn fork_client(run: &Run, id: usize) -> anyhow::Result<Handle> {
    let mut fds = [-1i32; 2];
    // SAFETY: room for the two descriptors.
    anyhow::ensure!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0,
        "creating a result pipe failed: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the child runs only the client (file-system calls, glibc's fork-safe malloc, no
    // locks shared with other threads: it prints nothing) and leaves through _exit, so it
    // never unwinds into or runs destructors of the parent's frames.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => anyhow::bail!("fork failed: {}", std::io::Error::last_os_error()),
        0 => {
            // SAFETY: dying with the coordinator, as dbench's clients do (they poll kill(parent,
            // 0)); closing our copy of the read end.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                libc::close(fds[0]);
            }
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| client_main(run, id)))
                .unwrap_or_else(|_| Err(format!("client {id} panicked")));
            // SAFETY: the write end is ours; File takes it over.
            let mut w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
            let sent = serde_json::to_vec(&outcome)
                .ok()
                .is_some_and(|b| w.write_all(&b).is_ok());
            // SAFETY: ends the child.
            unsafe { libc::_exit(if sent && outcome.is_ok() { 0 } else { 1 }) }
        }
        pid => {
            // SAFETY: the parent keeps only the read end.
            unsafe { libc::close(fds[1]) };
            // SAFETY: the read end is ours; File takes it over.
            let result = unsafe { std::fs::File::from_raw_fd(fds[0]) };
            Ok(Handle::Process { pid, result })
        }
    }
}

fn collect(h: Handle) -> anyhow::Result<ClientOutcome> {
    match h {
        Handle::Thread(t) => t
            .join()
            .map_err(|_| anyhow::anyhow!("a dbench client panicked"))?
            .map_err(anyhow::Error::msg),
        Handle::Process { pid, mut result } => {
            let mut text = Vec::new();
            let read = result.read_to_end(&mut text);
            let mut status = 0;
            // SAFETY: reaping our own child.
            while unsafe { libc::waitpid(pid, &mut status, 0) } == -1
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {}
            read.context("reading a dbench client's outcome")?;
            let outcome: Result<ClientOutcome, String> =
                serde_json::from_slice(&text).with_context(|| {
                    format!("dbench client {pid} died without reporting (wait status {status:#x})")
                })?;
            outcome.map_err(anyhow::Error::msg)
        }
    }
}

fn kill_all(handles: &[Handle]) {
    for h in handles {
        if let Handle::Process { pid, .. } = h {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
    }
}

fn spawn_thread(run: &Arc<Run>, id: usize) -> anyhow::Result<Handle> {
    let run = Arc::clone(run);
    let t = std::thread::Builder::new()
        .name(format!("dbench-client{id}"))
        .spawn(move || client_main(&run, id))?;
    Ok(Handle::Thread(t))
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    super::require_dir("directory", &args.dir)?;
    let (text, name) = load(args)?;
    let loadfile_ops = lf::validate(&text).with_context(|| format!("parsing loadfile {name}"))?;
    let n = args.clients as usize;
    let kernel_cpu = crate::checks::RusageOf::for_tasks(args.threads);
    let kernel_cpu0 = crate::checks::rusage_cpu_ns(kernel_cpu);
    let run = Arc::new(Run {
        loadfile_ops,
        text,
        coordinator: std::process::id() as libc::pid_t,
        dir: args.dir.clone(),
        ctl: SharedArray::new(1)?,
        counters: SharedArray::new(n)?,
        gate: PipeGate::new()?,
    });
    let mut handles = Vec::with_capacity(n);
    for id in 0..n {
        let h = if args.threads {
            spawn_thread(&run, id)
        } else {
            fork_client(&run, id)
        };
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                // Threads parked at the gate cannot be cancelled; they end with the process,
                // which is about to report this error.
                kill_all(&handles);
                return Err(e.context("starting the dbench clients"));
            }
        }
    }
    if !args.threads {
        run.gate.close_ready_writer();
    }
    match phases(args, &run) {
        Ok(p) => report(args, &run, &name, p, handles, (kernel_cpu, kernel_cpu0)),
        Err(e) => {
            kill_all(&handles);
            run.ctl.get(0).phase.store(STOP, Ordering::Relaxed);
            // Reap the killed processes; threads that may still be parked at the gate are left
            // to end with the process, which is about to report this error.
            for h in handles {
                if matches!(h, Handle::Process { .. }) {
                    let _ = collect(h);
                }
            }
            Err(e)
        }
    }
}

/// The measured window: byte counters at its start and end, and its length.
struct Phases {
    warmup_actual: Duration,
    before: Vec<[u64; 3]>,
    after: Vec<[u64; 3]>,
    measured: Duration,
}

/// Releases the clients, warms up, measures, and tells them to stop.
fn phases(args: &Args, run: &Run) -> anyhow::Result<Phases> {
    let n = args.clients as usize;
    let snap = || -> Vec<[u64; 3]> {
        (0..n)
            .map(|i| {
                let c = run.counters.get(i);
                [&c.bytes, &c.written, &c.read].map(|a| a.load(Ordering::Relaxed))
            })
            .collect()
    };
    // Parsing is done before the gate; setting up is quick: a generous bound.
    let start = run.gate.open(n, Duration::from_secs(60 + n as u64))?;
    let warmup = args.warmup.unwrap_or(args.seconds / 5.0);
    std::thread::sleep(Duration::from_secs_f64(warmup));
    // As dbench, warm-up lasts until every client has moved some bytes — bounded here, so a
    // loadfile without reads or writes still gets measured.
    let limit = start + Duration::from_secs_f64(warmup + args.seconds);
    while snap().iter().any(|c| c[0] == 0) && Instant::now() < limit {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = snap();
    run.ctl.get(0).phase.store(MEASURE, Ordering::Relaxed);
    let t0 = Instant::now();
    let warmup_actual = t0 - start;
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let after = snap();
    let measured = t0.elapsed();
    run.ctl.get(0).phase.store(STOP, Ordering::Relaxed);
    Ok(Phases {
        warmup_actual,
        before,
        after,
        measured,
    })
}

/// `kernel_cpu`: whose getrusage account holds the clients, and its value before any started.
fn report(
    args: &Args,
    run: &Run,
    name: &str,
    p: Phases,
    handles: Vec<Handle>,
    kernel_cpu: (crate::checks::RusageOf, u64),
) -> anyhow::Result<Report> {
    let mut outcomes = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        match collect(h) {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e.context("a dbench client failed"));
    }
    let kernel_cpu_ns = crate::checks::rusage_cpu_ns(kernel_cpu.0).saturating_sub(kernel_cpu.1);
    let windows: Vec<&ClientOutcome> = outcomes.iter().filter(|o| o.window_end_ns > 0).collect();
    let window_span_ns = match (
        windows.iter().map(|o| o.window_start_ns).min(),
        windows.iter().map(|o| o.window_end_ns).max(),
    ) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let col = |k: usize| -> Vec<u64> { p.before.iter().zip(&p.after).map(|(a, b)| b[k] - a[k]).collect() };
    let bytes_per_client = col(0);
    let bytes: u64 = bytes_per_client.iter().sum();
    let mut ops = BTreeMap::new();
    let (mut ops_total, mut max_ns) = (0, 0u64);
    for (k, kind) in OpKind::ALL.iter().enumerate() {
        let mut h = new_latency_histogram();
        let mut count = 0;
        for o in &outcomes {
            let rec = o.ops.get(k).cloned().unwrap_or_default();
            count += rec.count;
            h.add(&rec.histogram()?)?;
        }
        if count > 0 {
            max_ns = max_ns.max(h.max());
            ops_total += count;
            ops.insert(
                kind.name().to_string(),
                OpStats {
                    count,
                    latency: Latency::of(&h),
                },
            );
        }
    }
    let ops_per_client: Vec<u64> = outcomes
        .iter()
        .map(|o| o.ops.iter().map(|x| x.count).sum())
        .collect();
    let secs = p.measured.as_secs_f64();
    let result = DbenchResult {
        dir: args.dir.display().to_string(),
        loadfile: name.to_string(),
        loadfile_ops: run.loadfile_ops,
        clients: args.clients,
        client_mode: if args.threads { "thread" } else { "process" }.into(),
        seconds: args.seconds,
        warmup_s: args.warmup.unwrap_or(args.seconds / 5.0),
        warmup_actual_s: p.warmup_actual.as_secs_f64(),
        measured_s: secs,
        bytes,
        bytes_written: col(1).iter().sum(),
        bytes_read: col(2).iter().sum(),
        mb_per_sec: 1e-6 * bytes as f64 / secs,
        ops_total,
        ops_per_sec: ops_total as f64 / secs,
        ops,
        fairness: Fairness::of(&ops_per_client),
        ops_per_client,
        bytes_per_client,
        loadfile_passes: outcomes.iter().map(|o| o.passes).sum(),
        max_latency_ms: max_ns as f64 / 1e6,
        open_failures: outcomes.iter().map(|o| o.open_failures).sum(),
        short_reads: outcomes.iter().map(|o| o.short_reads).sum(),
        window_cpu_ns: windows.iter().map(|o| o.window_cpu_ns).sum(),
        window_span_ns,
        kernel_cpu_ns,
        kernel_cpu_source: kernel_cpu.0.describe().into(),
    };
    let env = Env::read();
    let checks = vec![
        ops_per_loadfile_line(&result),
        crate::checks::cpu_within_elapsed(result.window_cpu_ns, window_span_ns, env.cpus_allowed),
        crate::checks::window_cpu_within_rusage(result.window_cpu_ns, kernel_cpu_ns, kernel_cpu.0),
    ];
    Ok(Report::new(
        "dbench",
        p.measured.as_nanos() as u64,
        env,
        metrics_of(&result),
        &result,
    )?
    .with_checks(checks))
}

/// Operations against the loadfile: a client counts one operation per loadfile line it
/// replays while measuring, so it cannot count more than a loadfile per pass it started
/// (its completed passes + the one it was in when stopped).
fn ops_per_loadfile_line(r: &DbenchResult) -> crate::checks::Check {
    let most = (r.loadfile_passes + r.clients as u64) * r.loadfile_ops;
    crate::checks::Check::at_most(
        "ops_per_loadfile_line",
        r.ops_total as f64,
        most as f64,
        format!(
            "{} operations measured; {} clients replaying a {}-operation loadfile in {} completed passes can make at most {most}",
            r.ops_total, r.clients, r.loadfile_ops, r.loadfile_passes
        ),
    )
}

fn metrics_of(r: &DbenchResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("mb_per_sec".into(), r.mb_per_sec);
    m.insert("ops_per_sec".into(), r.ops_per_sec);
    m.insert("max_latency_ms".into(), r.max_latency_ms);
    m.insert("jain".into(), r.fairness.jain);
    for (name, key) in [
        ("WriteX", "writex"),
        ("ReadX", "readx"),
        ("NTCreateX", "ntcreatex"),
        ("Flush", "flush"),
    ] {
        if let Some(s) = r.ops.get(name) {
            m.insert(format!("{key}_p99_ms"), s.latency.p99_ns as f64 / 1e6);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ocrig-dbench-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn args(dir: PathBuf, loadfile: &str, clients: u32, threads: bool) -> Args {
        Args {
            dir,
            loadfile: Some(loadfile.into()),
            clients,
            seconds: 0.4,
            warmup: Some(0.1),
            threads,
        }
    }

    #[test]
    fn per_op_counts_sum_and_bytes_add_up_for_processes_and_threads() {
        for threads in [false, true] {
            let dir = tmpdir(if threads { "threads" } else { "procs" });
            let report = run(&args(dir.clone(), BUILTIN, 2, threads)).unwrap();
            let r: DbenchResult = report.detail_as().unwrap();
            assert_eq!(r.client_mode, if threads { "thread" } else { "process" });
            assert_eq!(r.loadfile, BUILTIN);
            assert_eq!(r.ops.values().map(|s| s.count).sum::<u64>(), r.ops_total);
            assert_eq!(r.ops_per_client.iter().sum::<u64>(), r.ops_total);
            assert_eq!(r.bytes_per_client.iter().sum::<u64>(), r.bytes);
            assert_eq!(r.bytes_written + r.bytes_read, r.bytes);
            assert!(r.ops_total > 0 && r.bytes > 0, "{r:?}");
            assert!(r.bytes_per_client.iter().all(|&b| b > 0), "every client measured");
            assert!(r.loadfile_passes > 0);
            assert_eq!(r.open_failures, 0);
            assert!(r.warmup_actual_s >= 0.1);
            assert!((report.metrics["mb_per_sec"] - r.bytes as f64 / 1e6 / r.measured_s).abs() < 1e-6);
            // Every client counted its CPU inside its own window. The windows begin and end an
            // operation after the coordinator's phase changes (one fsync can take a few hundred
            // ms on a loaded disk, so their span may be shorter than `measured_s`, and a little
            // longer), never before the start nor after the clients were collected.
            assert!(r.window_cpu_ns > 0 && r.kernel_cpu_ns > 0, "{r:?}");
            let span = r.window_span_ns as f64 / 1e9;
            assert!(
                span > 0.0 && span < r.warmup_actual_s + r.measured_s + 1.0,
                "{span} vs {}",
                r.measured_s
            );
            for name in [
                "ops_per_loadfile_line",
                "cpu_within_elapsed",
                "window_cpu_within_rusage",
            ] {
                let c = report.checks.iter().find(|c| c.name == name).unwrap();
                assert!(c.ok, "{threads}: {c:?}");
            }
            // Cleanup removed the clients' trees.
            assert!(!dir.join("clients").exists());
            let back: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
            assert_eq!(back, report);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn replays_a_gzip_prefix_of_the_real_client_txt() {
        let Ok(text) = std::fs::read_to_string(CLIENT_TXT_HOST) else {
            return;
        };
        let dir = tmpdir("real");
        let head: String = text.lines().take(3000).map(|l| format!("{l}\n")).collect();
        let lf_path = dir.join("head.txt.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(head.as_bytes()).unwrap();
        std::fs::write(&lf_path, gz.finish().unwrap()).unwrap();
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let mut a = args(work, lf_path.to_str().unwrap(), 1, false);
        a.seconds = 0.3;
        a.warmup = Some(0.0);
        let r: DbenchResult = run(&a).unwrap().detail_as().unwrap();
        assert_eq!(r.loadfile_ops, lf::parse(&head).unwrap().len() as u64);
        assert!(r.ops_total > 0);
        assert!(r.ops.contains_key("NTCreateX") && r.ops.contains_key("WriteX"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_default_loadfile_is_debians_client_txt_here() {
        match default_loadfile() {
            Ok(p) if Path::new(CLIENT_TXT_GUEST).is_file() => assert_eq!(p, Path::new(CLIENT_TXT_GUEST)),
            Ok(p) => assert_eq!(p, Path::new(CLIENT_TXT_HOST)),
            Err(e) => {
                assert!(!Path::new(CLIENT_TXT_HOST).exists());
                assert!(
                    e.0.contains("--loadfile") && e.0.contains(CLIENT_TXT_GUEST),
                    "{}",
                    e.0
                );
            }
        }
    }

    #[test]
    fn a_failing_client_process_fails_the_run_with_its_reason() {
        let dir = tmpdir("fail");
        let lf_path = dir.join("bad.txt");
        std::fs::write(
            &lf_path,
            "Unlink \"\\clients\\client1\\nothere\" 0x10 NT_STATUS_OK\n",
        )
        .unwrap();
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let e = run(&args(work, lf_path.to_str().unwrap(), 2, false)).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("unlink") && msg.contains("nothere"), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rejects_missing_directory_and_loadfile() {
        let mut a = args("/nonexistent/ocrig".into(), BUILTIN, 1, false);
        let e = run(&a).unwrap_err();
        assert!(
            e.is::<super::super::BadInput>() && e.to_string().contains("not usable"),
            "{e}"
        );
        a.dir = "/etc/hostname".into();
        assert!(run(&a).unwrap_err().to_string().contains("not a directory"));
        a.dir = std::env::temp_dir();
        a.loadfile = Some("/nonexistent.txt".into());
        let e = run(&a).unwrap_err();
        assert!(
            e.is::<super::super::BadInput>() && e.to_string().contains("--loadfile"),
            "{e}"
        );
        assert!(parse_path("").is_err());
        assert!(parse_warmup("-1").is_err());
    }
}
