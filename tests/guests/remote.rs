//! A remote libvirt host, for real: the test starts a private OpenSSH server (Debian's
//! openssh-server, `/usr/sbin/sshd`) on a free 127.0.0.1 port with its own host key and an
//! authorized key made for the test, in front of this machine's libvirtd. ocrig reaches libvirt
//! through `qemu+ssh://root@127.0.0.1:<port>/system`, pins the server's key from a known_hosts
//! file, uploads the guest image as storage volumes, reaches the guests' SSH through tunnels
//! and reads the host-side telemetry over SSH. The "remote" host is this machine, so the
//! figures are the remote path's overhead, not another machine's speed.
//!
//! Bad input (unreachable, unpinned or changed host key, too many CPUs or too much memory,
//! too old a libvirt) is refused at preflight, exit 2, with the host named and nothing made.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// A private sshd for one test; killed (by its pid) when dropped.
struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen (openssh-client)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sshd {
    fn start() -> Self {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "openssh-server is not installed (scripts/setup installs it)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("hostkey"));
        keygen(&d.join("client"));
        std::fs::copy(d.join("client.pub"), d.join("authorized_keys")).unwrap();
        let port = free_port();
        // `SetEnv SHLVL=1`: every session runs through root's login shell; bash reads
        // ~/.bashrc for an ssh command only at shell level 1, and it counts itself as 2. So the
        // test does not depend on root's dotfiles (this host's runs `pyenv rehash`, which waits
        // 60 s on a lock that a session killed mid-rehash leaves behind).
        let cfg = format!(
            "ListenAddress 127.0.0.1:{port}\nHostKey {hk}\nAuthorizedKeysFile {ak}\nUsePAM no\nStrictModes no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
             PidFile {pid}\nMaxSessions 100\nMaxStartups 100\nSetEnv SHLVL=1\n",
            hk = d.join("hostkey").display(),
            ak = d.join("authorized_keys").display(),
            pid = d.join("sshd.pid").display(),
        );
        std::fs::write(d.join("sshd_config"), cfg).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let child = Command::new(sshd)
            .arg("-D")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let pubkey = std::fs::read_to_string(d.join("hostkey.pub")).unwrap();
        let key: Vec<&str> = pubkey.split_whitespace().take(2).collect();
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {}\n", key.join(" ")),
        )
        .unwrap();
        // libvirt's ssh transport runs the ssh binary, which reads the user's known_hosts; this
        // wrapper (the URI's `command=`) points it at the test's, with strict checking.
        let wrapper = d.join("ssh-pinned");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec ssh -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes \"$@\"\n",
                d.join("known_hosts").display()
            ),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
        Self { dir, port, child }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// `qemu+ssh://` through the private sshd, with the key and the pinned host key.
    fn ssh_uri(&self) -> String {
        format!(
            "qemu+ssh://root@127.0.0.1:{}/system?keyfile={}&known_hosts={}&command={}",
            self.port,
            self.path("client").display(),
            self.path("known_hosts").display(),
            self.path("ssh-pinned").display()
        )
    }

    /// `qemu+libssh2://`: libvirt checks the host key itself against the same file.
    fn libssh2_uri(&self, known_hosts: &Path) -> String {
        format!(
            "qemu+libssh2://root@127.0.0.1:{}/system?keyfile={}&known_hosts={}&sshauth=privkey",
            self.port,
            self.path("client").display(),
            known_hosts.display()
        )
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The smoke scenario with libvirt at `uri` and `extra` host/guest lines.
fn scenario(dir: &Path, uri: &str, cpus: &str, memory_mib: u32) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("scenarios/ci/smoke.yaml")).unwrap();
    let text = text
        .replace(
            "  backend: qemu\n",
            &format!("  backend: libvirt\n  libvirt_uri: \"{uri}\"\n"),
        )
        .replace("  cpus: 2 ", &format!("  cpus: {cpus} "))
        .replace("  memory_mib: 256\n", &format!("  memory_mib: {memory_mib}\n"));
    assert!(text.contains("libvirt_uri") && text.contains(&format!("memory_mib: {memory_mib}")));
    let p = dir.join("remote-smoke.yaml");
    std::fs::File::create(&p)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    p
}

fn ocrig(args: &[&str], results: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ocrig"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .arg("--results")
        .arg(results);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Refused at preflight: exit 2, the message contains every `want`, no results directory.
fn refused(scenario: &Path, env: &[(&str, &str)], want: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    let t0 = Instant::now();
    let out = ocrig(&["run", &scenario.to_string_lossy(), "--quiet"], &results, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "expected exit 2:\n{stderr}");
    for w in want {
        assert!(stderr.contains(w), "no '{w}' in:\n{stderr}");
    }
    assert!(!results.exists(), "a refused sweep made {}", results.display());
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "preflight took {:?}",
        t0.elapsed()
    );
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests on a remote host over SSH (~2 s)"
)]
fn bad_remote_hosts_are_refused_at_preflight_naming_the_host() {
    let _one = common::one_sweep();
    let sshd = Sshd::start();
    let tmp = tempfile::tempdir().unwrap();
    let host = format!("root@127.0.0.1:{}", sshd.port);

    // Nothing listens there.
    let dead = free_port();
    let uri = sshd.ssh_uri().replace(&sshd.port.to_string(), &dead.to_string());
    refused(
        &scenario(tmp.path(), &uri, "2", 256),
        &[],
        &[&format!("root@127.0.0.1:{dead}"), "cannot reach"],
    );

    // The pinned key is another machine's.
    keygen(&tmp.path().join("other"));
    let other = std::fs::read_to_string(tmp.path().join("other.pub")).unwrap();
    let other: Vec<&str> = other.split_whitespace().take(2).collect();
    let wrong = tmp.path().join("wrong_known_hosts");
    std::fs::write(&wrong, format!("[127.0.0.1]:{} {}\n", sshd.port, other.join(" "))).unwrap();
    refused(
        &scenario(tmp.path(), &sshd.libssh2_uri(&wrong), "2", 256),
        &[],
        &[&host, "host key mismatch"],
    );

    // No key pinned for it at all.
    let empty = tmp.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    refused(
        &scenario(tmp.path(), &sshd.libssh2_uri(&empty), "2", 256),
        &[],
        &[&host, "is not in", "SHA256:"],
    );

    // More CPUs or memory than the remote host has (its node info, through libvirt).
    let pinned = sshd.path("known_hosts");
    refused(
        &scenario(tmp.path(), &sshd.libssh2_uri(&pinned), "4096", 256),
        &[],
        &["host.cpus", "4096"],
    );
    refused(
        &scenario(tmp.path(), &sshd.libssh2_uri(&pinned), "2", 64 * 1024 * 1024),
        &[],
        &["memory", &format!("on remote host {host}")],
    );

    // A libvirt older than the oldest supported one (the minimum raised above the real 11.x).
    refused(
        &scenario(tmp.path(), &sshd.ssh_uri(), "2", 256),
        &[("OCRIG_MIN_LIBVIRT", "99.0.0")],
        &[&host, "older than 99.0.0"],
    );

    // Its CPUs held by a live sweep there (the CPU lock files on that host, here this
    // machine's): refused, naming the host and the CPUs.
    let lock_dir = Path::new("/run/lock/ocrig/cpus");
    if !lock_dir.is_dir() {
        // As ocrig makes it (shared by every user's sweeps).
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(lock_dir).unwrap();
        for d in [lock_dir.parent().unwrap(), lock_dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
    }
    {
        // Waiting for the lock (not -n): the sweep refused just above may still be letting go
        // of it, and a holder that gave up at once would leave the CPU free (seen once in a full-tier run,
        // 2026-12-06).
        let mut holder = Command::new("flock")
            .args(["-w", "20"])
            .arg(lock_dir.join("cpu1.lock"))
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let held = |_: ()| {
            !Command::new("flock")
                .arg("-n")
                .arg(lock_dir.join("cpu1.lock"))
                .arg("true")
                .status()
                .unwrap()
                .success()
        };
        let deadline = Instant::now() + Duration::from_secs(25);
        while !held(()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            held(()),
            "could not take {}",
            lock_dir.join("cpu1.lock").display()
        );
        {
            refused(
                &scenario(tmp.path(), &sshd.libssh2_uri(&pinned), "2", 256),
                &[],
                &[&format!(
                    "host CPU(s) [0, 1] on {host} are in use by a live sweep"
                )],
            );
        }
        let _ = holder.kill();
        let _ = holder.wait();
    }

    // A transport that is not SSH is bad input located in the scenario.
    refused(
        &scenario(tmp.path(), "qemu+tcp://127.0.0.1/system", "2", 256),
        &[],
        &["remote-smoke.yaml:", "host.libvirt_uri", "over SSH"],
    );
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests on a remote host over SSH (~35 s)"
)]
fn smoke_sweep_on_a_remote_host_through_qemu_ssh() {
    let _one = common::one_sweep();
    let sshd = Sshd::start();
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    let s = scenario(tmp.path(), &sshd.ssh_uri(), "2", 256);
    // A scratch disk, made on the remote host beside the guest's console.
    let text = std::fs::read_to_string(&s).unwrap();
    let with_disk = text.replace(
        "  memory_mib: 256\n",
        "  memory_mib: 256\n  scratch_disk_mib: 32\n",
    );
    assert_ne!(text, with_disk);
    // One bring-up a level: the test is about the remote host; a level's second bring-up (the
    // smoke scenario's default, for retention) would only cost two more remote boots.
    std::fs::write(&s, format!("{with_disk}schedule: {{bring_ups_per_level: 1}}\n")).unwrap();
    let out = ocrig(
        &["run", &s.to_string_lossy(), "--quiet", "--wait-for-cpus"],
        &results,
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ocrig run failed:\n{stderr}");
    assert!(stderr.contains("SSH tunnel(s) set up"), "{stderr}");

    let dir = common::only_results_dir(&results);
    let (header, all) = common::journal(&dir);
    assert_eq!(header["backend"], "libvirt");
    // An attempt the payload's self-checks rejected is retried, as it should be (a cloud VM's
    // CPU speed moves); its records do not count. Any other failed attempt fails the test.
    let self_check = |r: &Value| {
        let said = |k: &str| r[k].as_str().is_some_and(|e| e.contains("self-check failed: "));
        said("error") || said("superseded")
    };
    // Measured runs only: every fresh guest set's warm-up is journaled too (never counted).
    let (runs, rejected): (Vec<Value>, Vec<Value>) = all
        .into_iter()
        .filter(|r| r["warmup"] == false)
        .partition(|r| r["ok"] == true && r["superseded"].is_null());
    for r in &rejected {
        assert!(self_check(r), "a failed attempt that no self-check rejected: {r}");
        eprintln!("retried after a self-check: {}", r["error"]);
    }
    let at = |level: f64| runs.iter().filter(move |r| r["level"].as_f64() == Some(level));
    assert_eq!(at(0.5).count(), 2, "0.5x: 1 guest × 2 runs");
    assert_eq!(at(1.0).count(), 4, "1.0x: 2 guests × 2 runs");
    for r in &runs {
        assert_eq!(r["ok"], true, "failed run: {r}");
        let p = &r["payload"];
        assert_eq!(p["workload"], "lock");
        assert!(p["ops_total"].as_u64().unwrap() > 0);
        assert_eq!(p["lost_updates"], 0);
        // Host-side telemetry read on the remote host over SSH: real numbers, not zeros.
        let sched = &r["extra"]["vcpu_sched"];
        let vcpu = &sched["vcpus"][0];
        assert!(vcpu["run_s"].as_f64().unwrap() > 0.1, "{sched}");
        assert!(vcpu["wait_share"].is_f64(), "{sched}");
        assert!(vcpu["tid"].as_i64().unwrap() > 0);
        assert!(r["extra"]["host_stat"]["busy_share"].is_f64(), "{r}");
        // KVM counters through libvirt's monitor passthrough: under TCG QEMU says there are none.
        match &r["extra"]["kvm"] {
            Value::String(why) => assert!(why.contains("does not run under KVM"), "{why}"),
            counters => assert!(counters["counters"].is_object(), "{counters}"),
        }
        // Clones are not made on a remote host: booted, saying why.
        let start = &r["extra"]["group"]["start"][0]["start"];
        assert_eq!(start["method"], "boot");
        assert!(
            start["fallback_reason"].as_str().unwrap().contains("remote host"),
            "{start}"
        );
        assert_eq!(start["boot"]["kernel"], "pvh");
    }
    // The host scheduler's timeline, traced on the remote host through its SSH session (root
    // there, as on a real remote host): its clock tied to this one's by trace markers. The
    // "remote" host is this machine, so the true offset is 0, and the measured one must lie
    // within its own error bound (plus the trace's 1 µs resolution).
    let traced: Vec<&Value> = runs
        .iter()
        .filter(|r| r["extra"].get("timeline").is_some())
        .collect();
    assert!(!traced.is_empty(), "no record holds a timeline");
    for r in traced {
        let tl = &r["extra"]["timeline"];
        assert!(tl["unavailable"].is_null(), "{tl}");
        let clock = &tl["clock"];
        assert!(clock["host"].as_str().unwrap().contains("127.0.0.1"), "{clock}");
        let (off, err) = (
            clock["offset_ns"].as_i64().unwrap(),
            clock["error_ns"].as_i64().unwrap(),
        );
        assert!(
            off.abs() <= err + 1_000,
            "offset {off} ns beyond its bound {err} ns: {clock}"
        );
        assert!(err < 50_000_000, "a marker round trip of {err} ns x 2: {clock}");
        assert!(tl["segments"].as_u64().unwrap() > 0, "{tl}");
        let slices = tl["vcpu_slices"].as_array().unwrap();
        assert!(
            !slices.is_empty() && slices.iter().all(|v| v["segments"].as_u64() > Some(0)),
            "{tl}"
        );
        assert!(Path::new(tl["path"].as_str().unwrap()).is_file(), "{tl}");
        eprintln!("remote timeline: {} segments, clock {clock}", tl["segments"]);
    }
    // Nothing of ours is left in the host's tracefs.
    let left: Vec<String> = std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(!left.iter().any(|n| n.starts_with("ocrig-")), "{left:?}");

    // The console came back through the mirror.
    let console = std::fs::read_dir(dir.join("guests/1x-base/boot1"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".console.log"))
        .expect("a mirrored console log");
    let text = std::fs::read_to_string(&console).unwrap();
    assert!(text.contains("OCRIG-READY"), "{text}");
    assert!(
        text.contains("scratch=mounted"),
        "the remote scratch disk: {text}"
    );

    // The image is in the remote host's storage pool, named by content hash.
    let vols = Command::new("virsh")
        .args([
            "-c",
            &sshd.libssh2_uri(&sshd.path("known_hosts")),
            "vol-list",
            "ocrig",
        ])
        .output()
        .unwrap();
    let vols = String::from_utf8_lossy(&vols.stdout);
    assert!(
        vols.contains("-vmlinux ") && vols.contains("-initrd.img "),
        "{vols}"
    );
    assert!(vols.contains("-vmlinux.ok "), "{vols}");
}

/// Every descendant of `pid` (children first found by their parent in /proc/<pid>/stat).
fn descendants(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(c) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{c}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|x| x.parse::<u32>().ok());
            if ppid == Some(p) && !all.contains(&c) {
                all.push(c);
                frontier.push(c);
            }
        }
    }
    all
}

impl Sshd {
    /// Cuts the host off: the listening sshd and every session it started (libvirt's
    /// connection, the tunnels, the CPU claim), by their pids.
    fn cut_off(&mut self) {
        let kids = descendants(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        for k in kids {
            // SAFETY: kill(2) on a pid this test's sshd started.
            unsafe { libc::kill(k as i32, libc::SIGKILL) };
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests on a remote host over SSH (~88 s)"
)]
fn two_host_sweep_survives_losing_the_ssh_host_mid_sweep() {
    let _one = common::one_sweep();
    let mut sshd = Sshd::start();
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    // Two "hosts" that are one machine: each its own host CPU, so neither's guests share a CPU
    // with the other's.
    let text = format!(
        "name: two-hosts\nhost:\n  backend: libvirt\n  hosts:\n    - uri: \"qemu:///system\"\n      cpus: [0]\n    \
         - uri: \"{}\"\n      cpus: [1]\nguest:\n  vcpus: 1\n  memory_mib: 256\n  start: boot\nlevels: [1.0, 2.0]\n\
         workloads:\n  - name: lock-tas\n    command: lock\n    args: {{algo: tas, threads: 2, duration-ms: 1000, hold-ns: 200, gap-ns: 200}}\n    \
         metric: ops_per_sec\n    better: higher\nruns: 4\n\
         schedule: {{bring_ups_per_level: 1}}\n",
        sshd.libssh2_uri(&sshd.path("known_hosts"))
    );
    let s = tmp.path().join("two-hosts.yaml");
    std::fs::write(&s, text).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "run",
            &s.to_string_lossy(),
            "--quiet",
            "--wait-for-cpus",
            "--results",
        ])
        .arg(&results)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the ssh host has finished a measured run (not only its guests' warm-up), cut it off.
    let ssh_label = format!("root@127.0.0.1:{}", sshd.port);
    let deadline = Instant::now() + Duration::from_secs(300);
    let finished_there = loop {
        assert!(Instant::now() < deadline, "the ssh host finished no run in time");
        std::thread::sleep(Duration::from_millis(200));
        let Ok(mut dirs) = std::fs::read_dir(&results) else {
            continue;
        };
        let Some(Ok(d)) = dirs.next() else { continue };
        let Ok(text) = std::fs::read_to_string(d.path().join("journal.jsonl")) else {
            continue;
        };
        let n = text
            .lines()
            .skip(1)
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["host"] == ssh_label.as_str() && r["ok"] == true && r["warmup"] == false)
            .count();
        if n > 0 {
            break n;
        }
    };
    sshd.cut_off();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ocrig run failed:\n{stderr}");
    assert!(stderr.contains(&format!("host {ssh_label} was lost")), "{stderr}");
    assert!(stderr.contains("go to local (qemu:///system)"), "{stderr}");

    let dir = common::only_results_dir(&results);
    let (header, runs) = common::journal(&dir);
    assert_eq!(header["hosts"][1], ssh_label.as_str(), "{header}");
    // The report compares the hosts cell by cell.
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("| lock-tas | base | 1x | local (qemu:///system): "),
        "{md}"
    );
    // Every run slot has its valid result: all of guest 0's ok records, one per (level, run).
    for level in [1.0, 2.0] {
        let mut valid: Vec<u64> = runs
            .iter()
            .filter(|r| r["level"].as_f64() == Some(level) && r["guest"] == 0 && r["ok"] == true)
            .filter(|r| r.get("superseded").is_none())
            .map(|r| r["run"].as_u64().unwrap())
            .collect();
        valid.sort();
        valid.dedup();
        assert_eq!(valid, vec![0, 1, 2, 3], "level {level}: {runs:?}");
    }
    // What the ssh host finished before the cut is still there, and counted.
    let kept = runs
        .iter()
        .filter(|r| r["host"] == ssh_label.as_str() && r["ok"] == true)
        .count();
    assert!(kept >= finished_there, "{kept} < {finished_there}");
    // Both hosts ran measured runs; the local one also took over the ssh host's share.
    let local = |r: &&Value| r["host"] == "local (qemu:///system)" && r["ok"] == true && r["guest"] == 0;
    assert!(
        runs.iter()
            .filter(local)
            .any(|r| r["run"].as_u64().unwrap() % 2 == 1),
        "no takeover: {runs:?}"
    );

    // Resuming goes on with the hosts that answer (the ssh host is still gone); nothing is
    // left to run, nothing is lost.
    let before = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--wait-for-cpus", "--resume"])
        .arg(&dir)
        .output()
        .unwrap();
    // (Its lines wrapped within 120 columns, unwrapped.)
    let stderr = String::from_utf8_lossy(&out.stderr)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(out.status.success(), "resume failed:\n{stderr}");
    // A finished sweep is seen as one before any host is asked: nothing changes.
    assert!(
        stderr.contains("the sweep is finished") && stderr.contains("nothing to do"),
        "{stderr}"
    );
    let after = std::fs::read_to_string(dir.join("journal.jsonl")).unwrap();
    assert_eq!(after, before, "resuming a finished sweep changes nothing");
}
