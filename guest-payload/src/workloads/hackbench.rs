//! `hackbench`: the scheduler/IPC messaging benchmark of rt-tests (`hackbench`) and
//! `perf bench sched messaging`, with the same semantics:
//!
//! - `groups` groups, each of `fds` receivers and `fds` senders; one fd pair (AF_UNIX
//!   SOCK_STREAM socketpair, or a pipe with `--pipe`) per receiver;
//! - every sender writes `loops` rounds of one `datasize`-byte message to each receiver of its
//!   group (round-robin over receivers, partial writes completed); every receiver reads
//!   `fds * loops` messages (partial reads completed);
//! - tasks are processes (fork, the default) or threads (`--threads`); each task writes a byte
//!   to a shared "ready" fd pair and polls a shared "wake" fd; the parent waits for every ready
//!   byte, starts the clock, writes one wake byte (which wakes all pollers, nobody reads it) and
//!   stops the clock once every task has been reaped. That time is the result (`time_s`).
//!
//! Process mode forks from the calling thread before any worker thread exists; the children
//! touch only preallocated memory and raw syscalls (read/write/poll/clock_gettime/_exit), so
//! forking is safe even when the caller (e.g. the test harness) has other threads.
//! Each task records its finish time and counts in a shared anonymous mapping, which gives
//! per-task durations (fairness) and a consistency check on the message counts.
//!
//! Each task also reads its own CPU clock once woken and again as it finishes (a forked task is
//! a one-thread process, so its thread clock is its process clock), so the CPU time inside the
//! window is known for processes as for threads: the run checks elapsed ≥ that CPU time (plus
//! the coordinator's) / CPUs, and that it is within what the kernel charged the tasks in all
//! (getrusage of the reaped children, or of the process for threads).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use super::shm::{SharedArray, ZeroValid};
use crate::checks::RusageOf;
use crate::clock::thread_cpu_ns;
use crate::env::Env;
use crate::metrics::Fairness;
use crate::report::Report;

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Number of groups (each `fds` senders + `fds` receivers).
    #[arg(long, short = 'g', default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub groups: u32,
    /// Senders and receivers per group.
    #[arg(long, short = 'f', default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub fds: u32,
    /// Messages each sender sends to each receiver.
    #[arg(long, short = 'l', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub loops: u32,
    /// Message size in bytes.
    #[arg(long, short = 's', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub datasize: u32,
    /// Use pipes instead of AF_UNIX socketpairs.
    #[arg(long, short = 'p')]
    pub pipe: bool,
    /// Use threads instead of processes.
    #[arg(long, short = 'T')]
    pub threads: bool,
}

/// The `hackbench` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HackbenchResult {
    pub groups: u32,
    pub fds: u32,
    pub loops: u32,
    pub datasize: u32,
    /// "process" or "thread".
    pub mode: String,
    /// "socket" or "pipe".
    pub transport: String,
    pub tasks: u64,
    /// Seconds from the wake-up write until every task was reaped (hackbench's `Time:`).
    pub time_s: f64,
    /// groups × fds × fds × loops.
    pub messages_expected: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub bytes_received: u64,
    /// Per receiver: seconds from the start until it had read its last message.
    pub receiver_finish_s: Vec<f64>,
    /// Per sender: seconds from the start until its last write returned.
    pub sender_finish_s: Vec<f64>,
    /// Fairness of receiver finish times (in µs): 1.0 when all receivers finish together.
    pub receiver_fairness: Fairness,
    pub sender_fairness: Fairness,
    /// CPU time inside the window: every task's (its CPU clock from waking to finishing) plus
    /// the coordinator thread's (from the wake-up write until the last task was reaped), ns.
    #[serde(default)]
    pub window_cpu_ns: u64,
    /// The tasks' part of `window_cpu_ns`.
    #[serde(default)]
    pub tasks_window_cpu_ns: u64,
    /// What the kernel charged the tasks over the whole run, set-up included (getrusage), ns,
    /// and whose account that is.
    #[serde(default)]
    pub kernel_cpu_ns: u64,
    #[serde(default)]
    pub kernel_cpu_source: String,
}

/// One task's outcome, written by the task itself into shared memory (works across fork).
#[repr(C, align(64))]
struct Slot {
    finish_ns: AtomicU64,
    msgs: AtomicU64,
    bytes: AtomicU64,
    ok: AtomicU64,
    /// The task's CPU time from waking until it finished, ns.
    cpu_ns: AtomicU64,
}

// SAFETY: only atomics, all valid at zero; no pointers.
unsafe impl ZeroValid for Slot {}

/// The slots of every task, in memory that forked children share.
type SharedSlots = SharedArray<Slot>;

/// CLOCK_MONOTONIC, async-signal-safe (read in forked children).
fn mono_ns() -> u64 {
    crate::clock::monotonic_ns()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn fdpair(pipe: bool) -> anyhow::Result<[i32; 2]> {
    let mut fds = [-1i32; 2];
    // SAFETY: fds has room for the two descriptors both calls write.
    let rc = unsafe {
        if pipe {
            libc::pipe(fds.as_mut_ptr())
        } else {
            libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr())
        }
    };
    anyhow::ensure!(
        rc == 0,
        "creating {} failed: {} (raise `ulimit -n`?)",
        if pipe { "pipe" } else { "socketpair" },
        std::io::Error::last_os_error()
    );
    Ok(fds)
}

fn close(fd: i32) {
    // SAFETY: closing a descriptor we own; errors are irrelevant here.
    unsafe { libc::close(fd) };
}

/// Tell the parent we are ready, then block until the wake fd becomes readable.
fn ready(ready_out: i32, wakefd: i32) -> Result<(), i32> {
    let b = [b'*'];
    // SAFETY: one byte from a valid buffer.
    if unsafe { libc::write(ready_out, b.as_ptr().cast(), 1) } != 1 {
        return Err(errno());
    }
    let mut pfd = libc::pollfd {
        fd: wakefd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, -1) };
        if r == 1 {
            return Ok(());
        }
        if r < 0 && errno() != libc::EINTR {
            return Err(errno());
        }
    }
}

#[derive(Clone, Copy)]
struct Common {
    ready_out: i32,
    wakefd: i32,
    loops: u32,
}

/// Receiver: reads `packets` messages of `buf.len()` bytes each.
fn receiver(c: Common, in_fd: i32, packets: u64, buf: &mut [u8], slot: &Slot) -> Result<(), i32> {
    ready(c.ready_out, c.wakefd)?;
    let cpu0 = thread_cpu_ns();
    let size = buf.len();
    let mut bytes = 0u64;
    for _ in 0..packets {
        let mut done = 0usize;
        while done < size {
            // SAFETY: reading into the unfilled tail of `buf`.
            let r = unsafe { libc::read(in_fd, buf[done..].as_mut_ptr().cast(), size - done) };
            if r < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                return Err(errno());
            }
            if r == 0 {
                // Every writer went away before sending all messages.
                return Err(libc::EPIPE);
            }
            done += r as usize;
        }
        bytes += size as u64;
    }
    slot.cpu_ns
        .store(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
    slot.finish_ns.store(mono_ns(), Ordering::Relaxed);
    slot.msgs.store(packets, Ordering::Relaxed);
    slot.bytes.store(bytes, Ordering::Relaxed);
    slot.ok.store(1, Ordering::Release);
    Ok(())
}

/// Sender: `loops` rounds of one message to every receiver fd, in order.
fn sender(c: Common, out_fds: &[i32], buf: &[u8], slot: &Slot) -> Result<(), i32> {
    ready(c.ready_out, c.wakefd)?;
    let cpu0 = thread_cpu_ns();
    let size = buf.len();
    let mut msgs = 0u64;
    for _ in 0..c.loops {
        for &fd in out_fds {
            let mut done = 0usize;
            while done < size {
                // SAFETY: writing from the unsent tail of `buf`.
                let r = unsafe { libc::write(fd, buf[done..].as_ptr().cast(), size - done) };
                if r < 0 {
                    if errno() == libc::EINTR {
                        continue;
                    }
                    return Err(errno());
                }
                done += r as usize;
            }
            msgs += 1;
        }
    }
    slot.cpu_ns
        .store(thread_cpu_ns().saturating_sub(cpu0), Ordering::Relaxed);
    slot.finish_ns.store(mono_ns(), Ordering::Relaxed);
    slot.msgs.store(msgs, Ordering::Relaxed);
    slot.bytes.store(msgs * size as u64, Ordering::Relaxed);
    slot.ok.store(1, Ordering::Release);
    Ok(())
}

enum Worker {
    Pid(libc::pid_t),
    Thread(std::thread::JoinHandle<Result<(), i32>>),
}

/// Forks a child that runs `f` and exits with 0 (success) or 1; the child never returns.
fn fork_worker(f: impl FnOnce() -> Result<(), i32>) -> anyhow::Result<Worker> {
    // SAFETY: the child only runs `f`, which uses preallocated buffers and raw syscalls, then
    // leaves through _exit (no atexit handlers, no stdio flush, no unwinding into the parent's
    // stack frames).
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => anyhow::bail!("fork failed: {}", std::io::Error::last_os_error()),
        0 => {
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                Ok(Ok(())) => 0,
                _ => 1,
            };
            // SAFETY: terminating the child.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(Worker::Pid(pid)),
    }
}

fn spawn_thread(f: impl FnOnce() -> Result<(), i32> + Send + 'static) -> anyhow::Result<Worker> {
    // hackbench uses PTHREAD_STACK_MIN; our workers need a few KiB more for Rust's runtime.
    let h = std::thread::Builder::new()
        .name("hackbench".into())
        .stack_size(64 * 1024)
        .spawn(f)?;
    Ok(Worker::Thread(h))
}

/// Reaps every worker; returns how many failed.
fn reap(workers: Vec<Worker>) -> u64 {
    let mut failed = 0;
    for w in workers {
        match w {
            Worker::Pid(pid) => {
                let mut status = 0;
                loop {
                    // SAFETY: waiting for our own child.
                    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
                    if r == pid {
                        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                            failed += 1;
                        }
                        break;
                    }
                    if r < 0 && errno() != libc::EINTR {
                        failed += 1;
                        break;
                    }
                }
            }
            Worker::Thread(h) => {
                if !matches!(h.join(), Ok(Ok(()))) {
                    failed += 1;
                }
            }
        }
    }
    failed
}

fn kill_all(workers: &[Worker]) {
    for w in workers {
        if let Worker::Pid(pid) = w {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
    }
}

/// Wrapper so raw pointers to the shared slots can move into worker threads.
#[derive(Clone, Copy)]
struct SlotPtr(*const Slot);
// SAFETY: points into SharedSlots, which outlives every worker (they are reaped before drop).
unsafe impl Send for SlotPtr {}

impl SlotPtr {
    /// # Safety
    /// The mapping must still be alive.
    unsafe fn get(&self) -> &Slot {
        // SAFETY: upheld by the caller.
        unsafe { &*self.0 }
    }
}

/// Creates one group's receivers then senders (as hackbench's `group()`). In thread mode the fd
/// pairs stay open (the threads share them) and are returned in `thread_fds` for closing later.
fn group(
    args: &Args,
    c: Common,
    slots: &SharedSlots,
    first_slot: usize,
    workers: &mut Vec<Worker>,
    thread_fds: &mut Vec<i32>,
) -> anyhow::Result<()> {
    let n = args.fds as usize;
    let process = !args.threads;
    let mut out_fds = Vec::with_capacity(n);
    let packets = args.fds as u64 * args.loops as u64;
    for i in 0..n {
        let fds = fdpair(args.pipe)?;
        if !process {
            thread_fds.extend(fds);
        }
        let slot = SlotPtr(slots.get(first_slot + i));
        let mut buf = vec![0u8; args.datasize as usize];
        let w = if process {
            fork_worker(|| {
                close(fds[1]);
                // SAFETY: the mapping lives in this child until _exit.
                receiver(c, fds[0], packets, &mut buf, unsafe { slot.get() })
            })?
        } else {
            spawn_thread(move || {
                // SAFETY: the parent reaps every worker before unmapping.
                receiver(c, fds[0], packets, &mut buf, unsafe { slot.get() })
            })?
        };
        workers.push(w);
        out_fds.push(fds[1]);
        if process {
            close(fds[0]);
        }
    }
    let out_fds = std::sync::Arc::new(out_fds);
    for i in 0..n {
        let slot = SlotPtr(slots.get(first_slot + n + i));
        let buf = vec![b'-'; args.datasize as usize];
        let w = if process {
            let fds = std::sync::Arc::clone(&out_fds);
            // SAFETY: see receivers.
            fork_worker(|| sender(c, &fds, &buf, unsafe { slot.get() }))?
        } else {
            let fds = std::sync::Arc::clone(&out_fds);
            // SAFETY: see receivers.
            spawn_thread(move || sender(c, &fds, &buf, unsafe { slot.get() }))?
        };
        workers.push(w);
    }
    if process {
        for &fd in out_fds.iter() {
            close(fd);
        }
    }
    Ok(())
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    let tasks = args.groups as usize * args.fds as usize * 2;
    let kernel_cpu = RusageOf::for_tasks(args.threads);
    let kernel_cpu0 = crate::checks::rusage_cpu_ns(kernel_cpu);
    let slots = SharedSlots::new(tasks)?;
    let readyfds = fdpair(args.pipe)?;
    let wakefds = fdpair(args.pipe)?;
    let c = Common {
        ready_out: readyfds[1],
        wakefd: wakefds[0],
        loops: args.loops,
    };
    let mut workers: Vec<Worker> = Vec::with_capacity(tasks);
    // Thread mode keeps every fd until the end (the threads share them), as hackbench does.
    let mut thread_fds: Vec<i32> = Vec::new();

    for g in 0..args.groups as usize {
        let first = g * args.fds as usize * 2;
        if let Err(e) = group(args, c, &slots, first, &mut workers, &mut thread_fds) {
            // Processes are killed and reaped. Threads blocked in poll cannot be cancelled: keep
            // their fds and the shared mapping alive (leaked) so they stay safely parked; the
            // payload is about to report the error and exit, which ends them.
            if args.threads {
                std::mem::forget(slots);
            } else {
                kill_all(&workers);
                reap(workers);
                for fd in readyfds.into_iter().chain(wakefds) {
                    close(fd);
                }
            }
            return Err(e.context(format!("creating hackbench group {g}")));
        }
    }

    // Wait for everyone to be ready.
    let mut dummy = [0u8; 1];
    for _ in 0..workers.len() {
        // SAFETY: one byte into a valid buffer.
        let r = unsafe { libc::read(readyfds[0], dummy.as_mut_ptr().cast(), 1) };
        if r != 1 {
            let e = std::io::Error::last_os_error();
            kill_all(&workers);
            if args.threads {
                std::mem::forget(slots); // parked threads still point into it
            } else {
                reap(workers);
            }
            anyhow::bail!("reading ready bytes from workers failed: {e}");
        }
    }
    crate::probe::window_open();
    let coordinator_cpu0 = thread_cpu_ns();
    let start_ns = mono_ns();
    let start = std::time::Instant::now();
    // SAFETY: one byte from a valid buffer.
    if unsafe { libc::write(wakefds[1], dummy.as_ptr().cast(), 1) } != 1 {
        let e = std::io::Error::last_os_error();
        kill_all(&workers);
        if args.threads {
            std::mem::forget(slots); // parked threads still point into it
        } else {
            reap(workers);
        }
        anyhow::bail!("waking the workers failed: {e}");
    }
    let failed = reap(workers);
    let elapsed = start.elapsed();
    let coordinator_cpu_ns = thread_cpu_ns().saturating_sub(coordinator_cpu0);
    crate::probe::window_close();
    let kernel_cpu_ns = crate::checks::rusage_cpu_ns(kernel_cpu).saturating_sub(kernel_cpu0);
    for fd in readyfds.into_iter().chain(wakefds).chain(thread_fds) {
        close(fd);
    }
    anyhow::ensure!(failed == 0, "{failed} hackbench task(s) failed");

    let n = args.fds as usize;
    let mut receiver_finish_ns = Vec::with_capacity(tasks / 2);
    let mut sender_finish_ns = Vec::with_capacity(tasks / 2);
    let (mut sent, mut received, mut bytes_received) = (0u64, 0u64, 0u64);
    let mut tasks_cpu_ns = 0u64;
    for g in 0..args.groups as usize {
        for i in 0..2 * n {
            let s = slots.get(g * 2 * n + i);
            anyhow::ensure!(
                s.ok.load(Ordering::Acquire) == 1,
                "a hackbench task did not report"
            );
            let fin = s.finish_ns.load(Ordering::Relaxed).saturating_sub(start_ns);
            tasks_cpu_ns += s.cpu_ns.load(Ordering::Relaxed);
            if i < n {
                received += s.msgs.load(Ordering::Relaxed);
                bytes_received += s.bytes.load(Ordering::Relaxed);
                receiver_finish_ns.push(fin);
            } else {
                sent += s.msgs.load(Ordering::Relaxed);
                sender_finish_ns.push(fin);
            }
        }
    }
    let us = |v: &[u64]| v.iter().map(|&x| x / 1000).collect::<Vec<u64>>();
    let expected = args.groups as u64 * args.fds as u64 * args.fds as u64 * args.loops as u64;
    let result = HackbenchResult {
        groups: args.groups,
        fds: args.fds,
        loops: args.loops,
        datasize: args.datasize,
        mode: if args.threads { "thread" } else { "process" }.into(),
        transport: if args.pipe { "pipe" } else { "socket" }.into(),
        tasks: tasks as u64,
        time_s: elapsed.as_secs_f64(),
        messages_expected: expected,
        messages_sent: sent,
        messages_received: received,
        bytes_received,
        receiver_fairness: Fairness::of(&us(&receiver_finish_ns)),
        sender_fairness: Fairness::of(&us(&sender_finish_ns)),
        receiver_finish_s: receiver_finish_ns.iter().map(|&x| super::secs(x)).collect(),
        sender_finish_s: sender_finish_ns.iter().map(|&x| super::secs(x)).collect(),
        window_cpu_ns: tasks_cpu_ns + coordinator_cpu_ns,
        tasks_window_cpu_ns: tasks_cpu_ns,
        kernel_cpu_ns,
        kernel_cpu_source: kernel_cpu.describe().into(),
    };
    let env = Env::read();
    let mut checks = checks_of(&result);
    checks.push(crate::checks::cpu_within_elapsed(
        result.window_cpu_ns,
        elapsed.as_nanos() as u64,
        env.cpus_allowed,
    ));
    // In thread mode the process's account also holds the coordinator; for processes only the
    // tasks are the kernel's reaped children.
    let counted = if args.threads {
        result.window_cpu_ns
    } else {
        result.tasks_window_cpu_ns
    };
    checks.push(crate::checks::window_cpu_within_rusage(
        counted,
        kernel_cpu_ns,
        kernel_cpu,
    ));
    Ok(Report::new(
        "hackbench",
        elapsed.as_nanos() as u64,
        env,
        metrics_of(&result),
        &result,
    )?
    .with_checks(checks))
}

/// Every message sent is received, whole: groups × fds senders each send `loops` messages to
/// each of the group's fds receivers, `datasize` bytes each. (The CPU bounds are added by
/// [`run`], which has the window.)
fn checks_of(r: &HackbenchResult) -> Vec<crate::checks::Check> {
    use crate::checks::Check;
    let expected = r.messages_expected;
    let words = |what: &str, n: u64| {
        format!(
            "{n} messages {what}, {} groups x {} senders x {} receivers x {} loops = {expected} expected",
            r.groups, r.fds, r.fds, r.loops
        )
    };
    let bytes = expected * r.datasize as u64;
    vec![
        Check::equal(
            "messages_sent",
            r.messages_sent,
            expected,
            words("sent", r.messages_sent),
        ),
        Check::equal(
            "messages_received",
            r.messages_received,
            expected,
            words("received", r.messages_received),
        ),
        Check::equal(
            "bytes_received",
            r.bytes_received,
            bytes,
            format!(
                "{} bytes received for {expected} messages of {} bytes (expected {bytes})",
                r.bytes_received, r.datasize
            ),
        ),
    ]
}

fn metrics_of(r: &HackbenchResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("time_s".into(), r.time_s);
    m.insert(
        "messages_per_sec".into(),
        r.messages_received as f64 / r.time_s.max(1e-9),
    );
    m.insert("receiver_jain".into(), r.receiver_fairness.jain);
    m.insert("sender_jain".into(), r.sender_fairness.jain);
    let max_rx = r.receiver_finish_s.iter().cloned().fold(0.0, f64::max);
    let min_rx = r.receiver_finish_s.iter().cloned().fold(f64::MAX, f64::min);
    m.insert("receiver_finish_max_s".into(), max_rx);
    m.insert(
        "receiver_finish_min_s".into(),
        if min_rx == f64::MAX { 0.0 } else { min_rx },
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(threads: bool, pipe: bool) -> Args {
        Args {
            groups: 2,
            fds: 4,
            loops: 10,
            datasize: 100,
            pipe,
            threads,
        }
    }

    #[test]
    fn every_mode_delivers_every_message() {
        for (threads, pipe) in [(false, false), (false, true), (true, false), (true, true)] {
            let a = args(threads, pipe);
            let report = run(&a).unwrap();
            let r: HackbenchResult = report.detail_as().unwrap();
            let expected = 2 * 4 * 4 * 10;
            assert_eq!(r.messages_expected, expected);
            assert_eq!(r.messages_sent, expected);
            assert_eq!(r.messages_received, expected);
            assert_eq!(r.bytes_received, expected * 100);
            assert_eq!(r.tasks, 16);
            assert_eq!(r.receiver_finish_s.len(), 8);
            assert_eq!(r.sender_finish_s.len(), 8);
            assert!(r.receiver_finish_s.iter().all(|&t| t <= r.time_s + 1e-3));
            assert!(r.time_s > 0.0 && report.metrics["time_s"] == r.time_s);
            assert_eq!(r.mode, if threads { "thread" } else { "process" });
            // CPU inside the window, for processes as for threads, and both CPU checks hold.
            assert!(r.tasks_window_cpu_ns > 0 && r.window_cpu_ns >= r.tasks_window_cpu_ns);
            for name in ["cpu_within_elapsed", "window_cpu_within_rusage"] {
                let c = report.checks.iter().find(|c| c.name == name).unwrap();
                assert!(c.ok, "{threads} {pipe}: {c:?}");
            }
        }
    }

    #[test]
    fn odd_sizes_and_json_round_trip() {
        let a = Args {
            groups: 1,
            fds: 3,
            loops: 7,
            datasize: 5000,
            pipe: true,
            threads: false,
        };
        let report = run(&a).unwrap();
        let text = serde_json::to_string(&report).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        let r: HackbenchResult = back.detail_as().unwrap();
        assert_eq!(r.bytes_received, 3 * 3 * 7 * 5000);
    }
}
