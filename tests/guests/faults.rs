//! Fault injection on real guests: while `ocrig run` is in the middle of a run, the test breaks
//! something — stops or kills a guest's QEMU, panics the guest kernel, drops the SSH session,
//! or signals/kills ocrig itself — and checks that the failure is journaled, retried on fresh
//! guests, and that no QEMU outlives the sweep.
//!
//! The scenario is the smallest there is: level 0.5 on 2 host CPUs = one 1-vCPU guest, the
//! test-and-set lock for a few seconds, 2 measured runs, a 20 s run deadline. The tests run one
//! at a time ([`common::one_sweep`]): each boots guests under TCG on a 2-core host, and the timing
//! assertions only make sense without a second sweep competing for the CPUs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;

use crate::common;

/// Payload duration: long enough to find the payload running over SSH and inject a fault.
const DURATION_MS: u32 = 6000;

fn scenario_yaml(name: &str) -> String {
    format!(
        "name: {name}
host: {{cpus: 2, backend: qemu, accel: auto}}
guest: {{vcpus: 1, memory_mib: 256}}
levels: [0.5]
workloads:
  - name: lock-tas
    command: lock
    args: {{algo: tas, threads: 2, duration-ms: {DURATION_MS}}}
    metric: ops_per_sec
runs: 2
# Faults are injected into the first payload run seen and looked up by run and attempt: no
# warm-up run before it (by default a fresh guest set gets one, keyed by its guest set).
warmup_runs: 0
timeouts: {{run_s: 20, boot_s: 120, retries: 1}}
"
    )
}

fn say(msg: impl AsRef<str>) {
    eprintln!("[faults] {}", msg.as_ref());
}

// ------------------------------------------------------------------ QEMU processes on the host

/// Command line of a process, split at NULs; None once it is gone (or a zombie).
fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if raw.is_empty() {
        return None;
    }
    Some(
        raw.split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// QEMU processes whose guest name belongs to sweep `run_id` (`-name ocrig-<run id>-<n>,...`).
fn qemus_of(run_id: &str) -> Vec<u32> {
    let prefix = format!("ocrig-{run_id}-");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            cmdline(pid).is_some_and(|args| {
                args.first().is_some_and(|a| a.contains("qemu-system"))
                    && args
                        .windows(2)
                        .any(|w| w[0] == "-name" && w[1].starts_with(&prefix))
            })
        })
        .collect()
}

fn kill(pid: u32, sig: Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Waits until no QEMU of `run_id` is left; returns how long that took, None on timeout.
fn wait_qemus_gone(run_id: &str, limit: Duration) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if qemus_of(run_id).is_empty() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    qemus_of(run_id).is_empty().then(|| t.elapsed())
}

/// The SSH port QEMU forwards to the guest (`hostfwd=tcp:127.0.0.1:PORT-:22`).
fn ssh_port(qemu_pid: u32) -> Option<u16> {
    let args = cmdline(qemu_pid)?;
    args.iter().find_map(|a| {
        let rest = &a[a.find("hostfwd=tcp:127.0.0.1:")? + "hostfwd=tcp:127.0.0.1:".len()..];
        rest.split('-').next()?.parse().ok()
    })
}

// ------------------------------------------------------------------ the guest over SSH

/// The client key of the image the guest behind `port` booted from: its QEMU's `-initrd` lies
/// in the image's cache directory, beside the key. (Several images may be cached — other
/// work on this host builds its own — so "the newest key" is not necessarily this guest's.)
fn client_key(port: u16) -> PathBuf {
    let fwd = format!("hostfwd=tcp:127.0.0.1:{port}-");
    let entries = std::fs::read_dir("/proc").expect("reading /proc");
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(cmdline)
        .filter(|args| args.iter().any(|a| a.contains(&fwd)))
        .find_map(|args| {
            // The initrd lives in the image's cache directory beside its key (the kernel may be
            // the per-kernel PVH vmlinux, kept elsewhere).
            ["-initrd", "-kernel"].iter().find_map(|flag| {
                let i = args.iter().position(|a| a == flag)?;
                let key = Path::new(args.get(i + 1)?).parent()?.join("id_ed25519");
                key.is_file().then_some(key)
            })
        })
        .unwrap_or_else(|| panic!("no QEMU forwarding port {port} with a cached image key"))
}

fn ssh_cmd(port: u16, remote: &str) -> Command {
    let mut c = Command::new("ssh");
    c.arg("-i")
        .arg(client_key(port))
        .args(["-p", &port.to_string()])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=10",
            "root@127.0.0.1",
            remote,
        ])
        .stdin(Stdio::null());
    c
}

/// Runs `remote` in the guest, killing the client if it has not finished within `limit`
/// (a command that panics the guest never returns). None when it was cut off.
fn guest_sh(port: u16, remote: &str, limit: Duration) -> Option<Output> {
    let dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = ssh_cmd(port, remote)
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .expect("running ssh");
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(Output {
                status,
                stdout: std::fs::read(&out_path).unwrap_or_default(),
                stderr: std::fs::read(&err_path).unwrap_or_default(),
            });
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------------ one sweep under test

/// A running `ocrig run` in its own temp dir. Dropping it kills ocrig and every QEMU of every
/// sweep that wrote into its results, so a failing test leaves nothing behind.
struct Sweep {
    tmp: tempfile::TempDir,
    scenario: PathBuf,
    results: PathBuf,
    child: Option<Child>,
    started: Instant,
    log: PathBuf,
}

impl Sweep {
    fn start(name: &str) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let scenario = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(&scenario, scenario_yaml(name)).unwrap();
        let results = tmp.path().join("results");
        let mut s = Sweep {
            scenario,
            results,
            child: None,
            started: Instant::now(),
            log: tmp.path().join("ocrig-1.log"),
            tmp,
        };
        let args: Vec<std::ffi::OsString> = vec![
            "run".into(),
            s.scenario.clone().into(),
            "--quiet".into(),
            // Queue behind another live sweep on these CPUs (another engineer's, say).
            "--wait-for-cpus".into(),
            "--results".into(),
            s.results.clone().into(),
        ];
        s.spawn(&args);
        s
    }

    fn spawn(&mut self, args: &[std::ffi::OsString]) {
        let log = File::create(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_ocrig"))
            .current_dir(self.tmp.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("running ocrig");
        say(format!("ocrig pid {} started: {args:?}", child.id()));
        self.child = Some(child);
        self.started = Instant::now();
    }

    /// Starts `ocrig run --resume DIR` once the previous ocrig is gone.
    fn resume(&mut self, dir: &Path) {
        assert!(self.child.is_none(), "the first ocrig is still running");
        self.log = self.tmp.path().join("ocrig-2.log");
        self.spawn(&[
            "run".into(),
            "--resume".into(),
            dir.into(),
            "--quiet".into(),
            "--wait-for-cpus".into(),
        ]);
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("ocrig running").id()
    }

    fn output(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().unwrap()?;
        self.child = None;
        Some(status)
    }

    /// Waits for ocrig to exit; panics (with its output) after `limit`.
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(s) = self.exited() {
                return s;
            }
            assert!(
                t.elapsed() < limit,
                "ocrig did not finish within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_running(&mut self, what: &str) {
        if let Some(s) = self.exited() {
            panic!("ocrig exited ({s}) while {what}:\n{}", self.output());
        }
    }

    /// The results directory ocrig created (`results/<name>-<UTC>`).
    /// The last `lines` lines of ocrig's own debug log (`<results dir>/ocrig.log`): what it
    /// was doing when a check failed.
    fn debug_log_tail(&self, lines: usize) -> String {
        let text = self
            .results_dir()
            .and_then(|d| std::fs::read_to_string(d.join("ocrig.log")).ok())
            .unwrap_or_else(|| "(no ocrig.log)".into());
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn results_dir(&self) -> Option<PathBuf> {
        let dirs = self.results_dirs();
        assert!(dirs.len() <= 1, "more than one results directory: {dirs:?}");
        dirs.into_iter().next()
    }

    fn results_dirs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.results) else {
            return vec![];
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        dirs
    }

    /// Guest pid files under `<results dir>/guests/*/boot*/`: (file, guest name).
    fn pid_files(&self) -> Vec<(PathBuf, String)> {
        self.results_dirs()
            .iter()
            .filter_map(|d| std::fs::read_dir(d.join("guests")).ok())
            .flat_map(|groups| groups.flatten())
            .filter_map(|g| std::fs::read_dir(g.path()).ok())
            .flat_map(|files| files.flatten().map(|f| f.path()))
            // Each boot of a group has its own directory: guests/<level>x-<variant>/boot<k>/.
            .flat_map(|p| match std::fs::read_dir(&p) {
                Ok(files) => files.flatten().map(|f| f.path()).collect::<Vec<_>>(),
                Err(_) => vec![p],
            })
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.strip_suffix(".pid")?.to_string();
                Some((p, name))
            })
            .collect()
    }

    /// Run ids of every sweep that booted a guest into this results directory.
    fn run_ids(&self) -> BTreeSet<String> {
        self.pid_files()
            .into_iter()
            .filter_map(|(_, name)| {
                let (id, _n) = name.strip_prefix("ocrig-")?.rsplit_once('-')?;
                Some(id.to_string())
            })
            .collect()
    }

    /// Waits for guest 0's QEMU to be running; returns (QEMU pid, run id, SSH port).
    fn wait_guest(&mut self, limit: Duration) -> (u32, String, u16) {
        let t = Instant::now();
        loop {
            self.assert_running("waiting for a guest to boot");
            for (file, name) in self.pid_files() {
                if !name.ends_with("-0") {
                    continue;
                }
                let pid = std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok());
                if let Some(pid) = pid
                    && let Some(port) = ssh_port(pid)
                {
                    let id = name["ocrig-".len()..name.len() - 2].to_string();
                    return (pid, id, port);
                }
            }
            assert!(
                t.elapsed() < limit,
                "no guest QEMU after {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the payload runs in guest 0 (gated or working: either is mid-run).
    fn wait_payload(&mut self, port: u16, limit: Duration) {
        let t = Instant::now();
        loop {
            self.assert_running("waiting for the payload to run");
            if let Some(o) = guest_sh(port, "pidof ocrig-payload", Duration::from_secs(15))
                && o.status.success()
            {
                say(format!(
                    "payload running in the guest (pid {}) {:.1} s after ocrig started",
                    String::from_utf8_lossy(&o.stdout).trim(),
                    self.started.elapsed().as_secs_f64()
                ));
                return;
            }
            assert!(
                t.elapsed() < limit,
                "the payload never ran within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Run records journaled so far, counting whole lines only (ocrig may be mid-write).
    fn finished_runs(&self) -> usize {
        let Some(dir) = self.results_dir() else { return 0 };
        let text = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap_or_default();
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        whole.lines().filter(|l| l.contains("\"type\":\"run\"")).count()
    }

    fn journal(&self) -> Journal {
        Journal::read(&self.results_dir().expect("a results directory"))
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for id in self.run_ids() {
            for pid in qemus_of(&id) {
                say(format!("cleanup: killing leftover QEMU {pid} of sweep {id}"));
                kill(pid, Signal::KILL);
            }
        }
    }
}

// ------------------------------------------------------------------ the journal

struct Journal {
    headers: Vec<Value>,
    runs: Vec<Value>,
}

impl Journal {
    /// Reads a journal, insisting on whole lines: each one parses and the file ends in a newline.
    fn read(dir: &Path) -> Journal {
        let path = dir.join("journal.jsonl");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(text.ends_with('\n'), "journal ends in a partial line:\n{text}");
        let all: Vec<Value> = text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("journal line {} is not JSON ({e}): {l}", i + 1))
            })
            .collect();
        assert_eq!(
            all.first().map(|h| &h["type"]),
            Some(&Value::from("sweep")),
            "no header"
        );
        let (headers, rest): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|v| v["type"] == "sweep");
        // `resume` entries (what each --resume ran on) are neither.
        let runs = rest.into_iter().filter(|v| v["type"] == "run").collect();
        Journal { headers, runs }
    }

    fn brief(&self) -> String {
        self.runs
            .iter()
            .map(|r| {
                format!(
                    "run {} attempt {} guest {} ok {} {}",
                    r["run"],
                    r["attempt"],
                    r["guest"],
                    r["ok"],
                    r["error"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The injected fault's record (the only failed one), its retry, and that every measured
    /// run of the cell ended ok exactly once.
    fn failed_then_retried(&self) -> &Value {
        // An attempt the host disturbed (other load on these CPUs: this shared machine, this
        // test's own ssh) is named as such and retried; it is not the injected fault.
        let failed: Vec<&Value> = self
            .runs
            .iter()
            .filter(|r| r["ok"] == false)
            .filter(|r| !r["error"].as_str().is_some_and(|e| e.starts_with("disturbed: ")))
            .collect();
        assert_eq!(
            failed.len(),
            1,
            "expected exactly one failed run:\n{}",
            self.brief()
        );
        let f = failed[0];
        assert_eq!(f["attempt"], 1, "{f}");
        assert!(f["error"].as_str().is_some_and(|e| !e.is_empty()), "{f}");
        assert!(
            f["superseded"].is_string(),
            "a failed attempt is marked superseded: {f}"
        );
        // The retry: attempt 2, or a later one where the host disturbed those between.
        let retry = self.runs.iter().find(|r| {
            r["run"] == f["run"]
                && r["warmup"] == f["warmup"]
                && r["attempt"].as_u64() > Some(1)
                && r["ok"] == true
        });
        retry.unwrap_or_else(|| panic!("no successful retry of the failed run:\n{}", self.brief()));
        self.assert_each_run_ok_once(&[0, 1]);
        f
    }

    fn assert_each_run_ok_once(&self, runs: &[u64]) {
        let mut ok: BTreeMap<u64, u32> = BTreeMap::new();
        for r in self
            .runs
            .iter()
            .filter(|r| r["ok"] == true && r["warmup"] == false)
        {
            assert_eq!(r["level"], 0.5);
            assert_eq!(r["guest"], 0);
            assert!(
                r["metrics"]["ops_per_sec"].as_f64().is_some_and(|v| v > 0.0),
                "{r}"
            );
            *ok.entry(r["run"].as_u64().unwrap()).or_default() += 1;
        }
        let want: BTreeMap<u64, u32> = runs.iter().map(|&r| (r, 1)).collect();
        assert_eq!(ok, want, "each run ok exactly once:\n{}", self.brief());
    }
}

/// Injects `fault` once the payload runs, then checks the sweep journaled a failure, retried
/// it on fresh guests, finished with exit status 0 and left no QEMU behind.
fn fault_is_retried(name: &str, fault: impl FnOnce(u32, u16)) -> (Journal, Value) {
    let mut sweep = Sweep::start(name);
    let (qemu, run_id, port) = sweep.wait_guest(Duration::from_secs(180));
    say(format!("sweep {run_id}: guest QEMU {qemu}, SSH on port {port}"));
    sweep.wait_payload(port, Duration::from_secs(180));
    let t_fault = Instant::now();
    let fault_at = jiff::Timestamp::now();
    fault(qemu, port);
    let status = sweep.wait(Duration::from_secs(400));
    say(format!(
        "ocrig exited {status} {:.1} s after the fault, {:.1} s in all",
        t_fault.elapsed().as_secs_f64(),
        sweep.started.elapsed().as_secs_f64()
    ));
    assert!(
        status.success(),
        "ocrig failed after the fault:\n{}",
        sweep.output()
    );
    let gone = wait_qemus_gone(&run_id, Duration::from_secs(5));
    assert!(gone.is_some(), "QEMUs of {run_id} left: {:?}", qemus_of(&run_id));
    let journal = sweep.journal();
    let failed = journal.failed_then_retried().clone();
    let detected: jiff::Timestamp = failed["finished_at"].as_str().unwrap().parse().unwrap();
    say(format!(
        "failure journaled {:.1} s after the fault: {}",
        detected.duration_since(fault_at).as_secs_f64(),
        failed["error"]
    ));
    (journal, failed)
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~73 s)")]
fn sigstop_of_a_guest_times_out_and_is_retried() {
    let _one = common::one_sweep();
    let (_j, failed) = fault_is_retried("fault-sigstop", |qemu, _| {
        say(format!("SIGSTOP to QEMU {qemu}"));
        kill(qemu, Signal::STOP);
    });
    let error = failed["error"].as_str().unwrap().to_lowercase();
    assert!(
        error.contains("timed out") || error.contains("timeout"),
        "the error does not name the timeout: {error}"
    );
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~33 s)")]
fn sigkill_of_a_guest_is_retried() {
    let _one = common::one_sweep();
    fault_is_retried("fault-qemu-kill", |qemu, _| {
        say(format!("SIGKILL to QEMU {qemu}"));
        kill(qemu, Signal::KILL);
    });
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~49 s)")]
fn guest_kernel_panic_is_retried_with_the_console_tail() {
    let _one = common::one_sweep();
    let (_j, failed) = fault_is_retried("fault-panic", |_, port| {
        say("echo c > /proc/sysrq-trigger in the guest");
        // The guest dies under the command: the client is cut off, or sees the link drop.
        let _ = guest_sh(port, "echo c > /proc/sysrq-trigger", Duration::from_secs(10));
    });
    // The panic line stands above the oops trace that follows it; ocrig keeps such lines
    // ahead of the console tail, so the journal names the panic itself.
    let tail = failed["extra"]["console_tail"].to_string();
    assert!(
        tail.contains("Kernel panic"),
        "console tail does not show the panic: {tail}"
    );
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~27 s)")]
fn dropped_ssh_session_is_retried() {
    let _one = common::one_sweep();
    fault_is_retried("fault-ssh-drop", |_, port| {
        // dropbear runs in the foreground under init (-F, pid file /run/dropbear.pid); each
        // connection is served by a forked child. Kill every child but the one serving us, all
        // at once. ocrig reacts by tearing the guest down, which may cut this session before
        // its output arrives: the journal, not this output, shows the drop took effect.
        let script = "L=$(cat /run/dropbear.pid); v=; \
            for p in $(pidof dropbear); do [ \"$p\" = \"$L\" ] || [ \"$p\" = \"$PPID\" ] || v=\"$v $p\"; done; \
            echo \"listener $L, this session $PPID, killing:${v:- none}\"; [ -n \"$v\" ] && kill -9 $v";
        let out = guest_sh(port, script, Duration::from_secs(20));
        let stdout = out
            .as_ref()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        say(format!(
            "dropbear: {} {}",
            stdout.as_deref().unwrap_or("(ssh cut off)").trim(),
            out.as_ref()
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default()
                .trim()
        ));
        assert!(
            !stdout.is_some_and(|s| s.contains("killing: none")),
            "no dropbear session to kill"
        );
    });
}

/// Sends `sig` to ocrig mid-run; checks its exit status, that every guest is gone within 5 s
/// and that the journal holds only whole lines.
fn signal_stops_everything(name: &str, sig: Signal, code: i32) {
    let mut sweep = Sweep::start(name);
    let (_, run_id, port) = sweep.wait_guest(Duration::from_secs(180));
    sweep.wait_payload(port, Duration::from_secs(180));
    assert!(!qemus_of(&run_id).is_empty());
    let t = Instant::now();
    kill(sweep.pid(), sig);
    let gone = wait_qemus_gone(&run_id, Duration::from_secs(5));
    let status = sweep.wait(Duration::from_secs(10));
    let exited = t.elapsed();
    say(format!(
        "{name}: last guest gone {:.0} ms after the signal; ocrig exited ({status}) after {:.0} ms",
        gone.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        exited.as_secs_f64() * 1e3
    ));
    assert!(
        gone.is_some(),
        "QEMUs of {run_id} still there 5 s after the signal: {:?}\nocrig's output:\n{}\nits debug log:\n{}",
        qemus_of(&run_id),
        sweep.output(),
        sweep.debug_log_tail(60)
    );
    assert_eq!(status.code(), Some(code), "exit status:\n{}", sweep.output());
    assert!(
        exited < Duration::from_secs(5),
        "ocrig took {exited:?} to exit; its debug log:\n{}",
        sweep.debug_log_tail(60)
    );
    let journal = sweep.journal();
    assert_eq!(journal.headers.len(), 1);
    assert_eq!(journal.headers[0]["scenario"], name);
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~33 s)")]
fn sigint_exits_130_and_stops_every_guest() {
    let _one = common::one_sweep();
    signal_stops_everything("fault-sigint", Signal::INT, 130);
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~58 s)")]
fn sigterm_exits_143_and_stops_every_guest() {
    let _one = common::one_sweep();
    signal_stops_everything("fault-sigterm", Signal::TERM, 143);
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~47 s)")]
fn sigkill_of_ocrig_then_resume_finishes_the_sweep() {
    let _one = common::one_sweep();
    let mut sweep = Sweep::start("fault-resume");
    let (_, run_id, port) = sweep.wait_guest(Duration::from_secs(180));
    // Let run 0 finish and be journaled, then kill ocrig in the middle of run 1.
    let t = Instant::now();
    while sweep.finished_runs() == 0 {
        sweep.assert_running("waiting for the first run");
        assert!(
            t.elapsed() < Duration::from_secs(240),
            "no run finished:\n{}",
            sweep.output()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    sweep.wait_payload(port, Duration::from_secs(60));
    kill(sweep.pid(), Signal::KILL);
    let gone = wait_qemus_gone(&run_id, Duration::from_secs(5));
    say(format!(
        "SIGKILL of ocrig: last guest gone {:.0} ms later (PDEATHSIG)",
        gone.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    ));
    assert!(
        gone.is_some(),
        "QEMUs of {run_id} outlived ocrig: {:?}",
        qemus_of(&run_id)
    );
    let status = sweep.wait(Duration::from_secs(5));
    assert_eq!(status.code(), None, "ocrig should have died by SIGKILL");

    let dir = sweep.results_dir().unwrap();
    let before = sweep.journal();
    let done: BTreeSet<u64> = before
        .runs
        .iter()
        .filter(|r| r["ok"] == true)
        .map(|r| r["run"].as_u64().unwrap())
        .collect();
    assert_eq!(done, BTreeSet::from([0]), "before the kill:\n{}", before.brief());

    let resume_start = jiff::Timestamp::now();
    sweep.resume(&dir);
    let status = sweep.wait(Duration::from_secs(300));
    let wall = sweep.started.elapsed();
    assert!(status.success(), "resume failed ({status}):\n{}", sweep.output());

    let after = sweep.journal();
    after.assert_each_run_ok_once(&[0, 1]);
    // Every attempt succeeded, or was one the rig retried in place as it should: refused by
    // the payload's self-checks, or disturbed by other load on the host.
    assert!(
        after.runs.iter().all(|r| r["ok"] == true
            || r["error"]
                .as_str()
                .is_some_and(|e| e.contains("self-check failed: ") || e.starts_with("disturbed: "))),
        "a run failed:\n{}",
        after.brief()
    );
    let new: Vec<&Value> = after.runs[before.runs.len()..].iter().collect();
    assert!(
        new.iter().all(|r| r["run"] == 1),
        "the resume redid finished runs:\n{}",
        after.brief()
    );
    let first = new.first().expect("the resume journaled a run");
    let finished: jiff::Timestamp = first["finished_at"].as_str().unwrap().parse().unwrap();
    let until_finished = finished.duration_since(resume_start).as_secs_f64();
    let run_s = first["timings"]["run_s"].as_f64().unwrap_or(0.0);
    say(format!(
        "resume cost: first new run finished {until_finished:.1} s after the resume started, \
         it ran {run_s:.1} s, so it started ~{:.1} s in; resume wall {:.1} s",
        until_finished - run_s,
        wall.as_secs_f64()
    ));
    for id in sweep.run_ids() {
        assert!(qemus_of(&id).is_empty(), "QEMUs of {id} left after the resume");
    }
}

/// A second sweep on host CPUs a live sweep uses is refused at once: exit 2, naming the live
/// sweep's pid and results directory, with nothing booted and no results directory made. The
/// live sweep here runs on the host backend (no guest to boot), holding both CPUs for a while.
#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: runs sweeps on this host's CPUs (~2 s)"
)]
fn a_second_sweep_on_busy_cpus_is_refused_naming_the_first() {
    let _one = common::one_sweep();
    let tmp = tempfile::tempdir().unwrap();
    let first_yaml = tmp.path().join("holder.yaml");
    std::fs::write(
        &first_yaml,
        "name: holder\nhost: {cpus: 2, backend: host}\nlevels: [0.5]\nworkloads:\n  - command: hog\n    args: {seconds: 20}\n    metric: iterations\n",
    )
    .unwrap();
    let first_results = tmp.path().join("results-1");
    let mut first = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["run", "--quiet", "--wait-for-cpus", "--results"])
        .arg(&first_results)
        .arg(&first_yaml)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // It holds the CPUs once its results directory exists.
    let t = Instant::now();
    let first_dir = loop {
        if let Some(d) = std::fs::read_dir(&first_results).ok().and_then(|mut e| e.next()) {
            break d.unwrap().path();
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the first sweep never started"
        );
        assert!(first.try_wait().unwrap().is_none(), "the first sweep ended early");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));

    let second_yaml = tmp.path().join("second.yaml");
    std::fs::write(&second_yaml, scenario_yaml("second")).unwrap();
    let second_results = tmp.path().join("results-2");
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["run", "--quiet", "--results"])
        .arg(&second_results)
        .arg(&second_yaml)
        .output()
        .unwrap();
    let refused_after = t.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    say(format!(
        "second sweep refused after {:.0} ms: {}",
        refused_after.as_secs_f64() * 1e3,
        stderr.trim()
    ));
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", first.id())),
        "names the live sweep's pid: {stderr}"
    );
    assert!(
        stderr.contains(&first_dir.display().to_string()),
        "names its results directory: {stderr}"
    );
    assert!(!second_results.exists(), "a results directory was made");
    assert!(
        !stderr.contains("ocrig: accel"),
        "it went on past the CPU check: {stderr}"
    );
    assert!(
        refused_after < Duration::from_secs(10),
        "took {refused_after:?} to refuse"
    );
}
