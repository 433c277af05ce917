use super::*;

const EXCERPT: &str = include_str!("../testdata/sched_switch_2x.txt");

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

/// A CPU whose buffer filled keeps only its earlier switches: the timeline ends at its last
/// kept one, and the thread it last switched to is not taken to have run on until the stop
/// (as a 50 s sliced run's trace once showed QEMU's main thread holding CPU 1 for 40 s).
#[test]
fn a_cpu_whose_buffer_filled_ends_the_timeline_at_its_last_kept_event() {
    let (switches, _) = parse_with_wakeups(EXCERPT);
    let guests = vec![vec![27066], vec![27067], vec![27071], vec![27070]];
    let (first, last) = (switches[0].ns, switches.last().unwrap().ns);
    let on1: Vec<u64> = switches.iter().filter(|s| s.cpu == 1).map(|s| s.ns).collect();
    let cut = on1[on1.len() / 2];
    let kept: Vec<Switch> = switches
        .iter()
        .filter(|s| s.cpu == 0 || s.ns <= cut)
        .cloned()
        .collect();
    let traced = (first - 1000, last + 1000);
    let run = (first, last);
    let us = |ns: u64| (ns as i64 - run.0 as i64).div_euclid(1000);
    let tl = timeline(&kept, &[0, 1], &guests, traced, run, &[1]);
    assert_eq!(tl.traced_to_us, us(cut));
    assert!(
        tl.segments.iter().all(|s| s[2] <= us(cut) || s[0] == 0),
        "CPU 1 ends at its cut"
    );
    let longest = |tl: &Timeline| {
        tl.segments
            .iter()
            .filter(|s| s[0] == 1)
            .map(|s| s[2] - s[1])
            .max()
            .unwrap()
    };
    let whole = timeline(&switches, &[0, 1], &guests, traced, run, &[]);
    assert!(
        longest(&tl) <= longest(&whole),
        "no segment stretched past the cut"
    );
    // Not told of the drop, the last segment runs on to the stop: what the drop guards against.
    let blind = timeline(&kept, &[0, 1], &guests, traced, run, &[]);
    assert!(longest(&blind) >= us(last) - us(cut), "{}", longest(&blind));
    // Only the CPUs that dropped end it (here CPU 0, whose trace is whole up to its last
    // switch); a CPU outside the trace is not asked.
    assert_eq!(
        timeline(&kept, &[0, 1], &guests, traced, run, &[0]).traced_to_us,
        us(switches.iter().rev().find(|s| s.cpu == 0).unwrap().ns)
    );
    assert_eq!(
        timeline(&kept, &[0, 1], &guests, traced, run, &[7]).traced_to_us,
        us(traced.1)
    );
}

/// A real excerpt: 2x on this machine's 2 CPUs, four 1-vCPU TCG guests (threads 27066 and
/// 27071 pinned to CPU 0, 27067 and 27070 to CPU 1), and a compiler of another user on CPU 0.
#[test]
fn a_real_2x_trace_becomes_a_timeline_that_tiles_each_cpu() {
    let (switches, wakeups) = parse_with_wakeups(EXCERPT);
    assert!(wakeups.is_empty(), "the excerpt traced switches only");
    let lines = EXCERPT.lines().filter(|l| l.contains(": sched_switch: ")).count();
    assert_eq!(switches.len(), lines);
    assert!(switches.windows(2).all(|w| w[0].ns <= w[1].ns));
    let guests = vec![vec![27066], vec![27067], vec![27071], vec![27070]];
    let first = switches[0].ns;
    let last = switches.last().unwrap().ns;
    // The run: 10 ms after the first switch to 10 ms before the last.
    let run = (first + 10_000_000, last - 10_000_000);
    let tl = timeline(&switches, &[0, 1], &guests, (first - 1000, last + 1000), run, &[]);
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
        let total = s["vcpus"].as_f64().unwrap() + s["idle"].as_f64().unwrap() + s["other"].as_f64().unwrap();
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
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: root and tracefs (~1 s)")]
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
                // Its wakeups are traced (the timer that wakes it fires on its own CPU): each
                // of its 50 sleeps ends in a wait, however short, until it runs.
                #[derive(serde::Deserialize)]
                struct Side {
                    vcpu_waits: VcpuWaits,
                }
                let gz = flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap());
                let waits = serde_json::from_reader::<_, Side>(gz).unwrap().vcpu_waits;
                assert!(waits.wakeups_traced);
                let woken = waits.waits.len() as u64 + waits.wakeups_unseen;
                assert!(
                    woken >= 25 && waits.waits.len() as u64 >= woken / 2,
                    "run {run}: {waits:?}"
                );
                assert_eq!(s["vcpu_waits"]["waits"], waits.waits.len(), "{s}");
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
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: root and tracefs (~1 s)")]
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
