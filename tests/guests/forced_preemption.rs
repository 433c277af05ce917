//! Ground truth for the stretched holds and hand-overs (issue 34, item 4a): the host takes one
//! vCPU away for known intervals and the payload must find exactly those.
//!
//! A 2-vCPU guest alone on the 2 host CPUs (1x), 2 threads of the ticket lock (FIFO), hold
//! 20 µs, gap 200 ns. A thread of this test, pinned to the host CPU of the guest's vCPU 1 at
//! SCHED_FIFO, takes that CPU for [`ON`] every [`PERIOD`] through the whole sweep, so the vCPU
//! thread (pinned there by ocrig) cannot run for those [`ON`]. Each time, the guest thread on
//! vCPU 1 is frozen either holding the lock (its hold is stretched by [`ON`]), or waiting in
//! line (the hand-over to it is), or outside the lock, in its gap and bookkeeping (nothing of
//! the lock's is stretched: the other thread takes the lock uncontended meanwhile). With a
//! 20 µs hold that is a few per cent of its time (with 2 µs, under TCG, two or three bursts
//! in ten found nothing: 8 of 10 in one run, 2026-12-05). So, per run:
//! - the intervals of at least [`ON`] / 2 that last a burst, as the hog measured its own bursts
//!   (within [`SLACK`]), ended on vCPU 1 (`sched_getcpu`) and began on the bursts' grid
//!   ([`PERIOD`] apart on the guest's TSC, within [`SLACK`]) number the bursts that fell in the
//!   run's window, less at most two that froze the thread in its gap; at most one other
//!   interval that long (the host's own load) is tolerated;
//! - each is labelled `vcpu`: the guest kept the thread
//!   on its runqueue for less than half of it (its runqueue wait is read; it may switch the
//!   thread out for a moment once the vCPU is back: its clock jumped the whole stall);

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// How long each burst takes the CPU: above any stretch the host's own load made at 1x here
/// (the longest other than the bursts: 3.1 and 8.7 ms in two runs, 2026-12-05; the test prints
/// it), far below RT throttling (950 ms a second) and the guest's lockup detectors.
const ON: Duration = Duration::from_millis(30);
const PERIOD: Duration = Duration::from_millis(300);
/// How far a recovered interval may be from the injected one: a resumed vCPU's pending timer
/// interrupt and the hog's own wake-up, tens of µs natively, up to a TCG block under emulation.
const SLACK: Duration = Duration::from_millis(3);
const DURATION_MS: u64 = 3000;

/// The sweep: `stall` adds the payload's `debug-guest-stall` (the guest preempts itself).
fn scenario(stall: bool) -> String {
    let stall = if stall {
        format!(
            "\n      debug-guest-stall: \"1:{}:{}\"",
            ON.as_millis(),
            PERIOD.as_millis()
        )
    } else {
        String::new()
    };
    format!(
        "\
name: forced-preemption-e2e
description: vCPU 1 taken for {on} ms every {period} ms; ticket, 1x
host:
  cpus: 2
  backend: qemu
  # The test's own hog takes {on}/{period} of one of the two CPUs: known, not a disturbance.
  max_other_load: 0.5
guest:
  vcpus: 2
  memory_mib: 384
levels: [1.0]
variants:
  - {{name: ticket, baseline: true, args: {{algo: ticket}}}}
workloads:
  - name: lock
    command: lock
    args:
      threads: 2
      duration-ms: {DURATION_MS}
      hold-ns: 20000
      gap-ns: 200
      split-runqueue-wait: true{stall}
    metric: ops_per_sec
    better: higher
runs: 2
",
        on = ON.as_millis(),
        period = PERIOD.as_millis()
    )
}

/// A thread at SCHED_FIFO pinned to one CPU that spins for [`ON`] at the start of every
/// [`PERIOD`] until stopped; returns each burst's length as it measured it.
struct Hog {
    stop: Arc<AtomicBool>,
    /// Each burst's start on CLOCK_MONOTONIC (ns) and its length.
    thread: JoinHandle<Vec<(u64, Duration)>>,
}

impl Hog {
    fn start(cpu: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            // SAFETY: plain syscalls on the calling thread (pid 0) with initialised arguments.
            let err = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                let param = libc::sched_param { sched_priority: 10 };
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                    || libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0
                {
                    Some(std::io::Error::last_os_error())
                } else {
                    None
                }
            };
            ready_tx.send(err.map(|e| e.to_string())).unwrap();
            let mut bursts = Vec::new();
            let t0 = Instant::now();
            let mut next = t0 + PERIOD;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                let began = Instant::now();
                let at = ocrig_payload::clock::monotonic_ns();
                while began.elapsed() < ON {
                    std::hint::spin_loop();
                }
                bursts.push((at, began.elapsed()));
                next += PERIOD;
            }
            bursts
        });
        if let Some(e) = ready_rx.recv().unwrap() {
            panic!(
                "cannot make a SCHED_FIFO hog on CPU {cpu} (needs root or CAP_SYS_NICE and RT runtime): {e}"
            );
        }
        Self { stop, thread }
    }

    fn stop(self) -> Vec<(u64, Duration)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The CPUs this process may run on, in order (ocrig's `host.cpus: 2` takes the first two).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set for the calling process.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// How long the host's record (`extra.stretched_on_host`) says the vCPU of `s`, one of the
/// record's `kind` intervals, was off its host CPU during it, ns.
fn off_on_host(r: &Value, kind: &str, s: &Value) -> i64 {
    let list = r["payload"]["preemption"][kind]["longest"].as_array().unwrap();
    let i = list.iter().position(|x| x == s).unwrap();
    let on_host = &r["extra"]["stretched_on_host"];
    on_host[kind][i]["off_ns"]
        .as_i64()
        .unwrap_or_else(|| panic!("{kind} {s}: not on the host's record: {on_host}"))
}

/// The report's judgement of the one cell's listed stretched intervals by the host's record
/// (`report.json`: `preemption.observed`).
fn observed(results: &std::path::Path) -> Value {
    let dir = common::results_dir(results);
    let model: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let cell = &model["workloads"][0]["series"][0]["cells"][0];
    let o = cell["preemption"]["observed"].clone();
    assert!(
        o.is_object(),
        "judged by the host's record: {}",
        cell["preemption"]
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("on the host's record") && md.contains("(tie ±"),
        "{md}"
    );
    o
}

fn valid_runs(all: &[Value]) -> Vec<&Value> {
    all.iter()
        .filter(|r| r["ok"] == true && r["guest"] == 0 && r.get("superseded").is_none())
        .filter(|r| r["warmup"] == false)
        .collect()
}

/// The mirror of the host's stall: the guest takes its own CPU 1 from the lock thread for known
/// intervals (`--debug-guest-stall`: a SCHED_FIFO thread in the guest, its bursts timed on the
/// same TSC and reported beside the stretched intervals). Each burst that finds the thread in
/// the lock (all but at most two in ten, as above) must come back as a stretched hold or
/// hand-over that began within [`SLACK`] of the burst and lasted it within [`SLACK`],
/// labelled guest, with the guest's runqueue wait over at least half of it.
#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~16 s)")]
fn a_cpu_the_guest_takes_for_known_intervals_comes_back_as_guest_preemptions() {
    let _one = common::one_sweep();
    let (_tmp, results) = common::run_scenario("stall.yaml", &scenario(true));
    let (_, all) = common::journal(&common::results_dir(&results));
    let runs = valid_runs(&all);
    assert_eq!(runs.len(), 2, "2 valid runs");
    let slack = SLACK.as_nanos() as i64;
    let mut found_bursts = 0;
    for r in runs {
        let p = &r["payload"];
        let window = p["elapsed_ns"].as_i64().unwrap();
        let bursts: Vec<&Value> = p["debug_guest_stall"]["bursts"]
            .as_array()
            .unwrap_or_else(|| panic!("the report carries its bursts: {}", p["debug_guest_stall"]))
            .iter()
            .filter(|b| b["at_ns"].as_i64().unwrap() + b["len_ns"].as_i64().unwrap() <= window)
            .collect();
        assert!(
            bursts.len() >= 8,
            "a burst every {PERIOD:?} of {window} ns: {bursts:?}"
        );
        let pre = &p["preemption"];
        let stretched: Vec<(&str, &Value)> = ["holds", "handovers"]
            .iter()
            .flat_map(|k| pre[k]["longest"].as_array().unwrap().iter().map(move |s| (*k, s)))
            .collect();
        let mut matched = 0;
        for b in &bursts {
            let (at, len) = (b["at_ns"].as_i64().unwrap(), b["len_ns"].as_i64().unwrap());
            let Some((kind, s)) = stretched.iter().find(|(_, s)| {
                (s["at_ns"].as_i64().unwrap() - at).abs() <= slack
                    && (s["len_ns"].as_i64().unwrap() - len).abs() <= slack
            }) else {
                eprintln!("run {}: burst {b} found no stretched interval", r["run"]);
                continue;
            };
            matched += 1;
            let wait = s["guest_wait_ns"]
                .as_i64()
                .unwrap_or_else(|| panic!("{s}: no runqueue wait read"));
            assert_eq!(s["guest"], true, "burst {b}: {kind} {s} labelled vcpu");
            assert!(wait >= len / 2, "burst {b}: {s}");
            // The host's record agrees: the vCPU ran (the guest's own thread) through most of
            // it (the host's own load may take it for a slice meanwhile: 4.8 ms of one, seen).
            let off = off_on_host(r, kind, s);
            assert!(off < len / 2, "burst {b}: {s} off the host CPU {off} ns");
        }
        eprintln!(
            "run {}: {matched} of {} guest bursts found as guest preemptions",
            r["run"],
            bursts.len()
        );
        assert!(
            matched + 2 >= bursts.len(),
            "{matched} of {} bursts found",
            bursts.len()
        );
        found_bursts += matched;
    }
    // The report, judging with the host's record, counts each as guest.
    let o = observed(&results);
    eprintln!("the report's judgement: {o}");
    assert!(
        o["guest"]["count"].as_u64().unwrap() >= found_bursts as u64,
        "{o}"
    );
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~33 s)")]
fn a_vcpu_the_host_takes_for_known_intervals_comes_back_as_those_stretched_intervals() {
    let _one = common::one_sweep();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED LOUDLY: the forced-preemption test needs root for its SCHED_FIFO hog");
        return;
    }
    let cpus = allowed_cpus();
    assert!(cpus.len() >= 2, "two CPUs to run the guest on: {cpus:?}");
    let hogged = cpus[1];
    let hog = Hog::start(hogged);
    let (_tmp, results) = common::run_scenario("forced.yaml", &scenario(false));
    let bursts = hog.stop();
    let lengths = bursts.iter().map(|b| b.1);
    let (shortest, longest) = (lengths.clone().min().unwrap(), lengths.max().unwrap());
    eprintln!(
        "{} bursts of {shortest:?}..{longest:?} on host CPU {hogged}",
        bursts.len()
    );

    let (header, all) = common::journal(&common::results_dir(&results));
    assert_eq!(header["host_cpus"][1], hogged, "{header}");
    let refs: Vec<&Value> = all.iter().collect();
    let runs = valid_runs(&all);
    assert_eq!(runs.len(), 2, "2 valid runs");

    let mut found_bursts = 0;
    let (on, period, slack) = (
        ON.as_nanos() as i64,
        PERIOD.as_nanos() as i64,
        SLACK.as_nanos() as i64,
    );
    for r in runs {
        // The guest vCPU ocrig pinned to the hogged host CPU.
        let facts = common::group_facts(&refs, r);
        let pins = facts["pinning"][0]["vcpu_to_cpu"]
            .as_array()
            .unwrap_or_else(|| panic!("{facts}"));
        let vcpu = pins
            .iter()
            .find(|p| p[1] == hogged)
            .map(|p| p[0].as_u64().unwrap())
            .unwrap_or_else(|| panic!("no vCPU on host CPU {hogged}: {pins:?}"));
        let p = &r["payload"];
        let pre = &p["preemption"];
        assert!(pre["holds"].is_object(), "{pre}");
        let mut found: Vec<(&str, &Value)> = Vec::new();
        let mut background = 0_i64;
        for kind in ["holds", "handovers"] {
            for s in pre[kind]["longest"].as_array().unwrap() {
                if s["len_ns"].as_i64().unwrap() >= on / 2 {
                    found.push((kind, s));
                } else {
                    background = background.max(s["len_ns"].as_i64().unwrap());
                }
            }
        }
        found.sort_by_key(|(_, s)| s["at_ns"].as_i64().unwrap());
        let window = p["elapsed_ns"].as_i64().unwrap();
        let injected = window as f64 / period as f64;
        eprintln!(
            "run {}: {} found for {injected:.1} bursts in the window of {:.3} s; the longest other: {:.3} ms; {}",
            r["run"],
            found.len(),
            window as f64 / 1e9,
            background as f64 / 1e6,
            found
                .iter()
                .map(|(k, s)| format!(
                    "{k} at {:.1} ms {:.3} ms cpu {} wait {} {}",
                    s["at_ns"].as_f64().unwrap() / 1e6,
                    s["len_ns"].as_f64().unwrap() / 1e6,
                    s["cpu"],
                    s["guest_wait_ns"],
                    if s["guest"] == true { "guest" } else { "vcpu" }
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        // The bursts' phase in the guest's window (they began PERIOD apart on the host).
        let phase_of = |s: &Value| s["at_ns"].as_i64().unwrap().rem_euclid(period);
        let mut phases: Vec<i64> = found.iter().map(|(_, s)| phase_of(s)).collect();
        phases.sort();
        let phase = phases.get(phases.len() / 2).copied().unwrap_or(0);
        let on_grid = |s: &Value| {
            let d = (phase_of(s) - phase).rem_euclid(period);
            d.min(period - d) <= slack
        };
        let (lo, hi) = (
            shortest.as_nanos() as i64 - slack,
            longest.as_nanos() as i64 + slack,
        );
        let (matched, others): (Vec<_>, Vec<_>) = found.iter().partition(|(_, s)| {
            (lo..=hi).contains(&s["len_ns"].as_i64().unwrap())
                && on_grid(s)
                && s["cpu"].as_u64() == Some(vcpu)
        });
        // Each burst in the window is found once (less those that froze the thread in its gap),
        // on vCPU `vcpu`, a burst long, on the bursts' grid. Other intervals that long are the
        // host's own load or the emulator's: under TCG a vCPU stalls for ~100 ms now and then
        // with no hog at all (the same sweep without the hog, 6 runs of 3 s: 0-2 such holds or
        // hand-overs a run with this payload, 0-3 with the payload before issue 44, on either
        // vCPU, 2026-12-06). So they are tolerated, up to one for every two bursts: more would
        // mean the bursts are found twice or intervals made up.
        let n = matched.len() as f64;
        assert!(
            n >= injected.floor() - 2.0 && n <= injected.ceil(),
            "{n} of {injected:.1} injected found on vCPU {vcpu}, {lo}..{hi} ns long, every {period} ns; others: {others:?}"
        );
        for (kind, s) in &others {
            let list = r["payload"]["preemption"][*kind]["longest"].as_array().unwrap();
            let i = list.iter().position(|x| x == *s).unwrap();
            eprintln!(
                "run {}: not a burst: {kind} {s}; on the host: {}",
                r["run"], r["extra"]["stretched_on_host"][*kind][i]
            );
        }
        assert!(
            others.len() as f64 <= (injected / 2.0).ceil(),
            "{} long intervals that are not bursts: {others:?}",
            others.len()
        );
        // The guest believed it ran the thread: it may have switched it out for a moment once
        // the vCPU was back, and then the split still says vcpu. But where the guest had
        // switched the thread out just before the host took the vCPU, the thread waited on the
        // guest's runqueue through the whole stall (its clock ran on): from inside the guest
        // that is a guest preemption, and only the host's record can tell (seen once in 20:
        // a hold 30.58 ms long, its runqueue wait 30.38 ms, 2026-12-05). So at most one a run.
        let mut inferred_guest = Vec::new();
        for (kind, s) in &matched {
            // It began on the vCPU it ended on (the guest cannot move a thread it believes
            // runs), read with the TSC at its start (`rdtscp`: QEMU's `max` CPU has it under
            // TCG, as KVM hosts' CPUs do).
            assert_eq!(s["cpu_at_start"], s["cpu"], "{kind} {s}");
            // The host's own record: the vCPU's thread was off its CPU for (nearly) all of it.
            let off = off_on_host(r, kind, s);
            let len = s["len_ns"].as_i64().unwrap();
            assert!(
                off >= len * 9 / 10,
                "{kind} {s}: off the host CPU {off} ns of {len}"
            );
            s["guest_wait_ns"]
                .as_i64()
                .unwrap_or_else(|| panic!("{kind} {s}: no runqueue wait read"));
            if s["guest"] != false {
                inferred_guest.push(s);
            }
        }
        assert!(inferred_guest.len() <= 1, "labelled guest: {inferred_guest:?}");
        found_bursts += matched.len();
        // On the host's clock: the guest's TSC tied to it before and after the run
        // (`extra.guest_clock`) put each found interval on a burst the hog timed, within the
        // placement's error: every one lasts until the burst's end (the vCPU came back); a hold also
        // began by the burst's start (its holder was taken), and may begin earlier (a hold the
        // emulator had already stalled: 0.95 ms before, in CI, 2026-12-05); a hand-over begins
        // at the running holder's release, which may fall anywhere in the burst (0.82 ms in,
        // 2026-12-05), as the stalled vCPU was the next owner's.
        // The guest's TSC ran fast against the host's clock under TCG while its vCPUs read it
        // (QEMU keeps it from going back across host CPUs with an offset that only grows): at
        // the guest's own rate a run's intervals landed up to 3 ms late by its end, in 5 of 6
        // sweeps one morning (2026-12-07). So, as the report does, the rate inside the window
        // is the one that makes the ties before and after the run agree, at the guest's rate
        // outside it.
        let clock = &r["extra"]["guest_clock"];
        let tie = |c: &Value| {
            let at = |k: &str| {
                c[k].as_i64()
                    .unwrap_or_else(|| panic!("no {k} in the tie {clock}"))
            };
            (at("host_mono_ns") as f64, at("tsc") as f64, at("error_ns"))
        };
        let ((h0, t0, e0), (h1, t1, e1)) = (tie(clock), tie(&clock["after"]));
        // The report's error for the placement: the ties' errors plus all the drift between
        // them (it only adds, and may come and go within the run: put evenly over the window,
        // intervals landed up to 1.2 ms off in 2 of 10 sweeps that drifted, 2026-12-07).
        let error = r["extra"]["stretched_on_host"]["error_ns"]
            .as_i64()
            .unwrap_or_else(|| panic!("no placement error: {}", r["extra"]["stretched_on_host"]));
        assert!(
            error >= e0.max(e1),
            "{error} below the ties' own errors {e0}, {e1}"
        );
        let w = &pre["window"];
        let tick = |k: &str| w[k].as_i64().unwrap() as f64;
        let (start_tick, end_tick, guest_hz) =
            (tick("start_tick"), tick("end_tick"), w["hz"].as_f64().unwrap());
        let inside_ns = h1 - h0 - (start_tick - t0 + t1 - end_tick) * 1e9 / guest_hz;
        let hz = (end_tick - start_tick) * 1e9 / inside_ns;
        let offset = h0 + (start_tick - t0) * 1e9 / guest_hz;
        let on_host = |ns: i64| (offset + ns as f64 * guest_hz / hz) as i64;
        // (kind, start of interval − start of burst, end of burst − end of interval).
        let mut overhangs: Vec<(&str, i64, i64)> = matched
            .iter()
            .map(|(kind, s)| {
                let at = s["at_ns"].as_i64().unwrap();
                let (start, end) = (on_host(at), on_host(at + s["len_ns"].as_i64().unwrap()));
                let b = bursts
                    .iter()
                    .max_by_key(|b| {
                        let b_end = b.0 as i64 + b.1.as_nanos() as i64;
                        end.min(b_end) - start.max(b.0 as i64)
                    })
                    .unwrap();
                (
                    *kind,
                    start - b.0 as i64,
                    b.0 as i64 + b.1.as_nanos() as i64 - end,
                )
            })
            .collect();
        overhangs.sort_unstable();
        eprintln!(
            "run {}: on the host's clock the found intervals began and ended (start, end) µs from their bursts: {:?}; the placement's error {} µs ({} exchanges, round trips {}); the TSC's rate on the host's clock over the window {hz:.0} Hz, {:+.0} ppm off the guest's",
            r["run"],
            overhangs
                .iter()
                .map(|(k, a, b)| format!("{k} ({}, {})", a / 1000, -b / 1000))
                .collect::<Vec<_>>(),
            error / 1000,
            clock["exchanges"],
            clock["round_trip_ns"],
            (hz / guest_hz - 1.0) * 1e6
        );
        let bound = error + 100_000;
        for (kind, early, late) in &overhangs {
            assert!(
                *late <= bound && (*kind != "holds" || *early <= bound),
                "a {kind} interval off its burst by ({early}, {late}) ns, the placement's error {error} ns: {overhangs:?}"
            );
        }
        // The ties place them: most holds start within the error of their burst.
        let holds: Vec<i64> = overhangs.iter().filter(|o| o.0 == "holds").map(|o| o.1).collect();
        let close = holds.iter().filter(|e| e.abs() <= bound).count();
        assert!(
            close * 2 >= holds.len(),
            "{close} of {} holds start within the placement's error of their burst: {overhangs:?}",
            holds.len()
        );
    }
    // The report, judging with the host's record, counts each as vcpu (or both, where the
    // guest had switched the thread out just before).
    let o = observed(&results);
    eprintln!("the report's judgement: {o}");
    let host = o["vcpu"]["count"].as_u64().unwrap() + o["both"]["count"].as_u64().unwrap();
    assert!(host >= found_bursts as u64, "{o}");
}
