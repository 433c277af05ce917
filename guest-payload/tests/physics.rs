//! Time obeys physics: a CPU-bound run with more threads than CPUs can never report less wall
//! time than its CPU time spread over every CPU it may use. Each workload runs as its own
//! process with 16 threads (or tasks) on this machine's CPUs.
//!
//! Where the payload checks this itself (`cpu_within_elapsed` in its report's `checks`: the
//! workers' own thread CPU clocks, read after the start gate and at the stop, so thread start-up
//! is never charged to the window), the test asserts that check, and checks its CPU figure
//! against an independent source: it cannot exceed what the kernel charged the whole process
//! (`wait4`'s rusage, which includes the payload's reaped children: hackbench's and dbench's
//! task processes read their own CPU clocks inside the window too). For a workload without the
//! check, the kernel's figure for the whole process, start-up included, is held to the elapsed
//! time with a 10 % margin.
//! A start stamped after the workers were released (the main thread preempted behind them)
//! breaks the bound; other load on the machine only makes it easier to meet.

use std::io::Read;
use std::process::{Command, Stdio};

/// Runs the payload; returns its report and the CPU seconds the kernel charged it.
// Reaped with wait4 (for its rusage), not Child::wait.
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[&str]) -> (serde_json::Value, f64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ocrig-payload"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting ocrig-payload");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let mut status = 0;
    // SAFETY: reaping our own child (std's Child is not waited on afterwards); the rusage is a
    // zeroed out-parameter.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        let pid = child.id() as libc::pid_t;
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut ru), pid);
        ru
    };
    assert!(libc::WIFEXITED(status), "{args:?} died: {status:#x}");
    // 3: the run completed but one of its own checks failed; the report says which.
    assert!(
        matches!(libc::WEXITSTATUS(status), 0 | 3),
        "{args:?} failed: {status:#x}"
    );
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
    (report, tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// CPUs this process (and so the payload, which inherits the mask) may run on.
fn usable_cpus() -> f64 {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        libc::CPU_COUNT(&set) as f64
    }
}

#[test]
fn no_workload_reports_less_time_than_its_cpu_time_allows() {
    let cpus = usable_cpus();
    let runs: &[&[&str]] = &[
        // The case (with 20 000 locks a thread it once reported 87 µs), made longer: the
        // ~4 ms of CPU that starting a process and 16 threads costs lies outside any window,
        // so every run here takes well over 40 ms of CPU.
        &[
            "mutex",
            "--threads",
            "16",
            "--num",
            "1",
            "--locks",
            "100000",
            "--loops",
            "0",
        ],
        &[
            "mutex",
            "--threads",
            "16",
            "--num",
            "4096",
            "--locks",
            "500",
            "--loops",
            "10000",
        ],
        // Spun work inside and outside one lock: the workers make it themselves, and its work
        // and hold bounds are checked with the CPU bound.
        &[
            "mutex",
            "--threads",
            "16",
            "--num",
            "1",
            "--locks",
            "5000",
            "--loops",
            "0",
            "--work-inside",
            "300",
            "--work-outside",
            "300",
        ],
        &[
            "futexlock",
            "--threads",
            "16",
            "--iterations",
            "300",
            "--mode",
            "plain",
        ],
        &[
            "futexlock",
            "--threads",
            "16",
            "--iterations",
            "300",
            "--mode",
            "adaptive",
        ],
        &[
            "sysfs-mutex",
            "--cpus",
            "2",
            "--tasks-per-cpu",
            "8",
            "--rounds",
            "1",
        ],
        // hackbench's tasks (processes by default) count their own CPU inside the window; the
        // runs are long enough to time well (300 loops took 13 ms).
        &["hackbench", "--groups", "1", "--fds", "8", "--loops", "3000"],
        &[
            "hackbench",
            "--groups",
            "1",
            "--fds",
            "8",
            "--loops",
            "3000",
            "--threads",
            "--pipe",
        ],
        &["lock", "--algo", "tas", "--threads", "16", "--duration-ms", "300"],
        &[
            "ebizzy",
            "--threads",
            "16",
            "--seconds",
            "0.3",
            "--chunks",
            "4",
            "--chunk-size",
            "65536",
        ],
    ];
    // dbench's clients (16 processes) on the built-in loadfile in a scratch directory.
    let dbench_dir = std::env::temp_dir().join(format!("ocrig-physics-dbench-{}", std::process::id()));
    std::fs::create_dir_all(&dbench_dir).unwrap();
    let dbench: &[&str] = &[
        "dbench",
        "--dir",
        dbench_dir.to_str().unwrap(),
        "--loadfile",
        "builtin",
        "--clients",
        "16",
        "--seconds",
        "0.3",
        "--warmup",
        "0.05",
    ];
    for args in runs.iter().copied().chain([dbench]) {
        let (report, cpu_s) = run_measured(args);
        let elapsed_s = report["elapsed_ns"].as_f64().unwrap() / 1e9;
        let checks = report["checks"].as_array().expect("a checks array");
        // Physics, counts and the work as asked must hold whatever the load: 16 threads on this
        // machine's CPUs preempt each other, which only lengthens intervals, and the work is
        // spun to the TSC, so the CPU's speed does not move it.
        for c in checks {
            assert!(c["ok"].as_bool().unwrap(), "{args:?}: check failed: {c}");
        }
        match checks.iter().find(|c| c["name"] == "cpu_within_elapsed") {
            Some(c) => {
                let busy = c["value"].as_f64().unwrap();
                // The CPU as the workload reports it where it does (dbench's check spans its
                // clients' own windows, not `elapsed_ns`), else from the check's figure.
                let window_cpu_s = report["window_cpu_ns"]
                    .as_f64()
                    .map_or(busy * elapsed_s, |ns| ns / 1e9);
                eprintln!(
                    "{args:?}: elapsed {elapsed_s:.4} s, CPU {window_cpu_s:.4} s inside the window ({cpu_s:.4} s for the process) on {cpus} CPUs"
                );
                assert!(c["bound"].as_f64().unwrap() <= cpus * 1.02 + 1e-9, "{c}");
                assert!(
                    window_cpu_s <= cpu_s * 1.02 + 0.002,
                    "{args:?}: {window_cpu_s:.4} CPU-s inside the window, more than the {cpu_s:.4} s the kernel charged the whole process"
                );
            }
            None => {
                let floor = cpu_s / cpus;
                eprintln!("{args:?}: elapsed {elapsed_s:.4} s, CPU {cpu_s:.4} s on {cpus} CPUs");
                assert!(
                    elapsed_s >= 0.9 * floor,
                    "{args:?}: reported {elapsed_s:.4} s, but its {cpu_s:.4} CPU seconds on {cpus} CPUs need at least {floor:.4} s"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dbench_dir).unwrap();
}
