//! Host-side preemption of each vCPU: how long its host thread ran and how long it sat
//! runnable on a run queue waiting for a host CPU, over one run.
//!
//! Under TCG and under KVM alike a vCPU is one host thread, so `/proc/<tid>/schedstat`
//! (run time, run-queue wait, time slices) and the context-switch counts in
//! `/proc/<tid>/status` describe exactly what the guest cannot see: at 2x overcommit with
//! every vCPU busy, each vCPU thread waits about half the time. "vCPU wait share" is the
//! run-queue wait divided by the run's wall time.
//!
//! Two windows: the counters are read by the probe right before the go signal and right after
//! the last guest's end (`wall_s`), so that window also holds the payload's start before its
//! gate and its report after its end, where the guests do not all compete. Where the run
//! has a vCPU timeline, [`RunWindow`] (`vcpu_sched.run_window`) is the same over the run's own
//! window, the payload's gate to its end ([`crate::telemetry::run_window`]), and it is the
//! figure reports read ([`VcpuSched::wait_share`]).

use std::time::Instant;

use procfs::process::Process;

use crate::hostfs::HostFs;
use serde::{Deserialize, Serialize};

/// One vCPU thread's counters at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuCounters {
    pub run_ns: u64,
    pub wait_ns: u64,
    pub timeslices: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl VcpuCounters {
    /// Reads thread `tid`'s counters (any thread id works as a /proc entry).
    pub fn read(tid: i32) -> Result<Self, String> {
        let task = Process::new(tid).map_err(|e| format!("/proc/{tid}: {e}"))?;
        let sched = task
            .schedstat()
            .map_err(|e| format!("/proc/{tid}/schedstat: {e} (kernel without CONFIG_SCHEDSTATS?)"))?;
        let status = task.status().map_err(|e| format!("/proc/{tid}/status: {e}"))?;
        Ok(Self {
            run_ns: sched.sum_exec_runtime,
            wait_ns: sched.run_delay,
            timeslices: sched.pcount,
            voluntary_switches: status.voluntary_ctxt_switches.unwrap_or(0),
            involuntary_switches: status.nonvoluntary_ctxt_switches.unwrap_or(0),
        })
    }

    /// The counters from the texts of `/proc/<tid>/schedstat` and `/proc/<tid>/status` (read on
    /// another host).
    pub fn parse(tid: i32, schedstat: &str, status: &str) -> Result<Self, String> {
        let f: Vec<u64> = schedstat
            .split_whitespace()
            .map(|x| x.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("/proc/{tid}/schedstat: {e}"))?;
        if f.len() < 3 {
            return Err(format!(
                "/proc/{tid}/schedstat: '{}' has fewer than 3 fields",
                schedstat.trim()
            ));
        }
        let field = |key: &str| {
            status.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim_start_matches(':').trim().parse::<u64>().ok())
            })
        };
        Ok(Self {
            run_ns: f[0],
            wait_ns: f[1],
            timeslices: f[2],
            voluntary_switches: field("voluntary_ctxt_switches").unwrap_or(0),
            involuntary_switches: field("nonvoluntary_ctxt_switches").unwrap_or(0),
        })
    }
}

/// Every vCPU thread of one guest at one instant, in vCPU order.
#[derive(Debug, Clone)]
pub struct VcpuSnapshot {
    at: Instant,
    tids: Vec<i32>,
    counters: Vec<Result<VcpuCounters, String>>,
}

impl VcpuSnapshot {
    pub fn take(tids: &[i32]) -> Self {
        Self {
            at: Instant::now(),
            tids: tids.to_vec(),
            counters: tids.iter().map(|&t| VcpuCounters::read(t)).collect(),
        }
    }

    /// A snapshot in which nothing could be read.
    pub fn unavailable(why: &str) -> Self {
        Self {
            at: Instant::now(),
            tids: Vec::new(),
            counters: vec![Err(why.to_string())],
        }
    }

    /// Every guest's vCPU threads on the host behind `fs`: this machine's directly, a remote
    /// host's in one read of all their /proc files.
    pub fn take_all(fs: &dyn HostFs, guests: &[Vec<i32>]) -> Vec<Self> {
        if fs.is_local() {
            return guests.iter().map(|t| Self::take(t)).collect();
        }
        Self::take_all_with(fs, guests, None).0
    }

    /// [`take_all`](Self::take_all) on a remote host, reading the file `with` in the same
    /// round trip: `(path, true)` before the vCPUs' files, `(path, false)` after them.
    pub fn take_all_with(
        fs: &dyn HostFs,
        guests: &[Vec<i32>],
        with: Option<(&str, bool)>,
    ) -> (Vec<Self>, Option<Result<String, String>>) {
        let at = Instant::now();
        let mut paths: Vec<String> = guests
            .iter()
            .flatten()
            .flat_map(|t| [format!("/proc/{t}/schedstat"), format!("/proc/{t}/status")])
            .collect();
        match with {
            Some((p, true)) => paths.insert(0, p.to_string()),
            Some((p, false)) => paths.push(p.to_string()),
            None => {}
        }
        let mut all = fs.read_many(&paths);
        let extra = match with {
            Some((_, true)) if !all.is_empty() => Some(all.remove(0)),
            Some((_, false)) => all.pop(),
            _ => None,
        };
        let mut texts = all.into_iter();
        let snaps = guests
            .iter()
            .map(|tids| Self {
                at,
                tids: tids.clone(),
                counters: tids
                    .iter()
                    .map(|&t| {
                        let sched = texts.next().unwrap_or_else(|| Err("no answer".into()));
                        let status = texts.next().unwrap_or_else(|| Err("no answer".into()));
                        VcpuCounters::parse(t, &sched?, &status?)
                    })
                    .collect(),
            })
            .collect();
        (snaps, extra)
    }
}

/// One vCPU over one run. `None` fields were not measured; `unavailable` says why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VcpuRun {
    pub vcpu: u32,
    pub tid: i32,
    pub run_s: Option<f64>,
    pub wait_s: Option<f64>,
    /// Run-queue wait / wall time of the run.
    pub wait_share: Option<f64>,
    /// Run-queue wait / (run + wait): of the time the vCPU wanted a host CPU, the share it
    /// waited. Equals `wait_share` for a vCPU that is busy all the time; unlike it, it does not
    /// shrink when the vCPU idles (sleeping lock waiters, the run's start and collect).
    #[serde(default)]
    pub runnable_wait_share: Option<f64>,
    pub timeslices: Option<u64>,
    pub voluntary_switches: Option<u64>,
    pub involuntary_switches: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// One guest's vCPUs over one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VcpuSched {
    pub wall_s: f64,
    pub vcpus: Vec<VcpuRun>,
    /// Mean of the measured vCPUs' wait shares; `None` when none was measured.
    pub mean_wait_share: Option<f64>,
    /// Mean of the measured vCPUs' runnable wait shares.
    #[serde(default)]
    pub mean_runnable_wait_share: Option<f64>,
    /// The same over the run's own window, from the vCPU timeline; absent where the run has
    /// none (and in records from before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_window: Option<RunWindow>,
}

/// One guest's vCPUs over the run's own window (`vcpu_sched.run_window`): the payload's start
/// gate to its end, on the host's clock, from the run's vCPU timeline (each wait of a vCPU
/// thread with its times: `sched_switch` and `sched_wakeup`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunWindow {
    /// Whose window: [`WINDOW_OWN`], [`WINDOW_MEASURED`] or [`WINDOW_COMMAND`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The window, seconds after the run's go signal.
    #[serde(default)]
    pub start_s: Option<f64>,
    #[serde(default)]
    pub end_s: Option<f64>,
    /// Its length: the sum of its parts' where it has several.
    #[serde(default)]
    pub wall_s: Option<f64>,
    /// How many spans the window is made of where more than one: an arm of a sliced run is
    /// measured over its own slices (`preemption.window_parts`), not the gaps and the other
    /// arms' slices between them; `start_s`..`end_s` is then its first slice's start to its
    /// last one's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<u32>,
    /// Parts left out because the trace did not keep them whole (it is bounded: a long sliced
    /// run's later slices may lie past its end); `parts` and the figures are then those read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts_untraced: Option<u32>,
    /// How far the window's place on the host's clock can be off (half the round trip of the
    /// exchange that tied the guest's TSC to it), ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_error_ns: Option<u64>,
    #[serde(default)]
    pub vcpus: Vec<WindowVcpu>,
    /// Mean of the measured vCPUs' `wait_share`: the figure of [`VcpuSched::wait_share`].
    #[serde(default)]
    pub mean_wait_share: Option<f64>,
    #[serde(default)]
    pub mean_runnable_wait_share: Option<f64>,
    /// The run's vCPUs runnable (running or waiting) in the window, on average, per host CPU
    /// of the run: the level the window held. With every vCPU busy throughout it is the level
    /// the run is reported at (and `mean_wait_share` is 1 − 1/level_held); less where some
    /// guest's vCPUs idled in the window (its command ended before the window did).
    #[serde(default)]
    pub level_held: Option<f64>,
    /// Why there is no figure (no timeline, no window, the trace does not cover it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// `run_window.window`: the guest's own payload window (its TSC window, tied to the host).
pub const WINDOW_OWN: &str = "payload";
/// `run_window.window`: the measured guest's payload window, for a guest whose payload gives
/// none (a `background: hog` guest): the part of the run the measured guest's figures are of.
pub const WINDOW_MEASURED: &str = "measured guest's payload";
/// `run_window.window`: no payload window to be had (a workload that gives none, or a payload
/// from before sliced runs kept each slice's window): the guest's go signal to its command's
/// end, as the host saw them (the payload's start and report inside, and a sliced run's set-up
/// and pauses between its slices).
pub const WINDOW_COMMAND: &str = "go signal to the command's end";

/// One vCPU over the run's window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowVcpu {
    pub vcpu: u32,
    /// On its host CPU.
    #[serde(default)]
    pub run_s: Option<f64>,
    /// Runnable and not running: the run-queue wait.
    #[serde(default)]
    pub wait_s: Option<f64>,
    /// Neither: the guest idled it, or its thread slept in the host.
    #[serde(default)]
    pub idle_s: Option<f64>,
    /// `wait_s` / the window.
    #[serde(default)]
    pub wait_share: Option<f64>,
    /// `wait_s` / (`run_s` + `wait_s`).
    #[serde(default)]
    pub runnable_wait_share: Option<f64>,
    /// What held the CPU it waited for, meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_behind: Option<WaitBehind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// What ran on the host CPU a vCPU waited for, while it waited, seconds: the run's vCPUs (the
/// level), other threads (QEMU's own, ocrig's, other processes': the most by command name),
/// and idle (a wakeup's few µs, or a vCPU moved meanwhile).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitBehind {
    pub vcpus_s: f64,
    pub other_s: f64,
    pub idle_s: f64,
    #[serde(default)]
    pub top_other: Vec<(String, f64)>,
}

impl VcpuSched {
    /// CPU time the vCPU threads got over the run, seconds (`None` if none was measured).
    pub fn run_s(&self) -> Option<f64> {
        let runs: Vec<f64> = self.vcpus.iter().filter_map(|v| v.run_s).collect();
        (!runs.is_empty()).then(|| runs.iter().sum())
    }

    /// The vCPU wait share a report shows: over the run's own window where it was measured
    /// ([`RunWindow::mean_wait_share`]), else over the probe's window (`mean_wait_share`).
    pub fn wait_share(&self) -> Option<f64> {
        self.run_window
            .as_ref()
            .and_then(|w| w.mean_wait_share)
            .or(self.mean_wait_share)
    }

    /// Why nothing was measured, when nothing was.
    pub fn unavailable(&self) -> Option<String> {
        if self.mean_wait_share.is_some() {
            return None;
        }
        Some(
            self.vcpus
                .iter()
                .find_map(|v| v.unavailable.clone())
                .unwrap_or_else(|| "no vCPU thread ids (the backend could not name them)".into()),
        )
    }
}

/// The process (thread group) a thread belongs to: for a vCPU thread, its QEMU.
pub fn process_of(tid: i32) -> Option<i32> {
    Process::new(tid).ok()?.status().ok().map(|s| s.tgid)
}

/// The change between two snapshots of the same guest.
pub fn delta(before: &VcpuSnapshot, after: &VcpuSnapshot) -> VcpuSched {
    let wall_s = after.at.duration_since(before.at).as_secs_f64();
    let vcpus: Vec<VcpuRun> = before
        .tids
        .iter()
        .enumerate()
        .map(|(i, &tid)| {
            let a = after
                .tids
                .iter()
                .position(|&t| t == tid)
                .map(|j| &after.counters[j]);
            match (&before.counters[i], a) {
                (Ok(b), Some(Ok(a))) => {
                    let wait_s = a.wait_ns.saturating_sub(b.wait_ns) as f64 / 1e9;
                    let run_s = a.run_ns.saturating_sub(b.run_ns) as f64 / 1e9;
                    VcpuRun {
                        vcpu: i as u32,
                        tid,
                        run_s: Some(run_s),
                        wait_s: Some(wait_s),
                        wait_share: (wall_s > 0.0).then(|| wait_s / wall_s),
                        runnable_wait_share: (run_s + wait_s > 0.0).then(|| wait_s / (run_s + wait_s)),
                        timeslices: Some(a.timeslices.saturating_sub(b.timeslices)),
                        voluntary_switches: Some(a.voluntary_switches.saturating_sub(b.voluntary_switches)),
                        involuntary_switches: Some(
                            a.involuntary_switches.saturating_sub(b.involuntary_switches),
                        ),
                        unavailable: None,
                    }
                }
                (b, a) => VcpuRun {
                    vcpu: i as u32,
                    tid,
                    run_s: None,
                    wait_s: None,
                    wait_share: None,
                    runnable_wait_share: None,
                    timeslices: None,
                    voluntary_switches: None,
                    involuntary_switches: None,
                    unavailable: Some(match (b, a) {
                        (Err(e), _) | (_, Some(Err(e))) => e.clone(),
                        _ => format!("thread {tid} missing from the second snapshot"),
                    }),
                },
            }
        })
        .collect();
    let mean = |xs: Vec<f64>| (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
    VcpuSched {
        wall_s,
        mean_wait_share: mean(vcpus.iter().filter_map(|v| v.wait_share).collect()),
        mean_runnable_wait_share: mean(vcpus.iter().filter_map(|v| v.runnable_wait_share).collect()),
        vcpus,
        run_window: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::thread_cpu_s;

    fn gettid() -> i32 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    }

    #[test]
    fn counters_parse_from_text_as_procfs_reads_them() {
        let me = gettid();
        let local = VcpuCounters::read(me).unwrap();
        let t = |f: &str| std::fs::read_to_string(format!("/proc/{me}/{f}")).unwrap();
        let parsed = VcpuCounters::parse(me, &t("schedstat"), &t("status")).unwrap();
        assert!(parsed.run_ns >= local.run_ns && parsed.timeslices >= local.timeslices);
        assert!(parsed.voluntary_switches >= local.voluntary_switches);
        assert!(parsed.involuntary_switches >= local.involuntary_switches);
        let status = t("status");
        let wanted = status
            .lines()
            .find(|l| l.starts_with("voluntary_ctxt_switches"))
            .unwrap();
        let later: u64 = wanted.split_whitespace().last().unwrap().parse().unwrap();
        assert!(later >= parsed.voluntary_switches, "{wanted}");
        assert!(VcpuCounters::parse(1, "12 x", "").is_err());
    }

    #[test]
    fn the_wait_share_is_the_run_windows_and_old_records_still_read() {
        // A record from before `run_window`: read as it was.
        let old: VcpuSched = serde_json::from_value(serde_json::json!({
            "wall_s": 3.9, "mean_wait_share": 0.27,
            "vcpus": [{"vcpu": 0, "tid": 7, "run_s": 2.79, "wait_s": 1.05, "wait_share": 0.27,
                       "timeslices": 1, "voluntary_switches": 0, "involuntary_switches": 1}]
        }))
        .unwrap();
        assert_eq!((old.run_window.as_ref(), old.wait_share()), (None, Some(0.27)));
        assert!(
            !serde_json::to_value(&old)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("run_window")
        );
        // With a figure over the run's window, that one; without, the probe's.
        let mut new = old.clone();
        new.run_window = Some(RunWindow {
            window: Some(WINDOW_OWN.into()),
            mean_wait_share: Some(0.34),
            ..Default::default()
        });
        assert_eq!(new.wait_share(), Some(0.34));
        let back: VcpuSched = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
        assert_eq!(back, new);
        new.run_window = Some(RunWindow {
            unavailable: Some("no timeline".into()),
            ..Default::default()
        });
        assert_eq!(new.wait_share(), Some(0.27));
    }

    #[test]
    fn a_busy_thread_runs_and_a_missing_one_is_unavailable() {
        let me = gettid();
        let before = VcpuSnapshot::take(&[me, i32::MAX]);
        // Burn 50 ms of this thread's own CPU time, however loaded the machine is.
        let cpu0 = thread_cpu_s();
        let mut x = 0u64;
        while thread_cpu_s() - cpu0 < 0.05 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = VcpuSnapshot::take(&[me, i32::MAX]);
        let d = delta(&before, &after);
        let mine = &d.vcpus[0];
        assert!(mine.unavailable.is_none(), "{mine:?}");
        // schedstat counts the same CPU time (physics: not more than the wall time).
        let run = mine.run_s.unwrap();
        assert!(
            run >= 0.049 && run <= d.wall_s + 0.005,
            "run {run} wall {}",
            d.wall_s
        );
        let share = mine.wait_share.unwrap();
        assert!((0.0..=1.0).contains(&share));
        assert!(d.vcpus[1].unavailable.is_some() && d.vcpus[1].wait_share.is_none());
        assert_eq!(d.mean_wait_share, mine.wait_share);
        // Busy all along: run + wait is the wall time (less the snapshot reads themselves).
        let (run, wait) = (mine.run_s.unwrap(), mine.wait_s.unwrap());
        assert!(
            run + wait <= d.wall_s + 0.005 && run + wait > 0.8 * d.wall_s,
            "{mine:?} wall {}",
            d.wall_s
        );
        let rws = mine.runnable_wait_share.unwrap();
        assert!((rws - wait / (run + wait)).abs() < 1e-12);
        assert_eq!(d.run_s(), Some(run));
        assert_eq!(d.unavailable(), None);
        assert_eq!(process_of(me), Some(std::process::id() as i32));
        let none = delta(&VcpuSnapshot::take(&[i32::MAX]), &VcpuSnapshot::take(&[i32::MAX]));
        assert!(
            none.unavailable().unwrap().contains(&i32::MAX.to_string()),
            "{none:?}"
        );
    }
}
