//! The host as the only worker: no guest; the payload runs here, restricted to the scenario's
//! CPUs, with its thread count already scaled by the level in the plan.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::{BroughtUp, Executor, Finished, GroupSpec, RunOutcome, RunRequest, WorkerRun};
use crate::host::Accel;
use crate::telemetry::cpu_stat::{self, StatSnapshot};
use crate::telemetry::probe::RunProbe;

fn local_fs() -> std::sync::Arc<dyn crate::hostfs::HostFs> {
    std::sync::Arc::new(crate::hostfs::LocalFs)
}

pub struct HostExecutor {
    pub payload: PathBuf,
    pub host_cpus: Vec<usize>,
}

impl Executor for HostExecutor {
    async fn bring_up(&mut self, _group: &GroupSpec) -> anyhow::Result<BroughtUp> {
        Ok(BroughtUp {
            facts: json!({ "host_cpus": self.host_cpus }),
            boot_s: 0.0,
            deploy_s: 0.0,
        })
    }

    async fn run(&mut self, request: &RunRequest) -> RunOutcome {
        let argv = request.argv.first().cloned().flatten().unwrap_or_default();
        // No guests: the probe reads the pinned host CPUs (and its own cost) only; the host's
        // whole-machine split stands in for the worker's own /proc/stat (the accelerator given
        // to the probe only matters for guests, of which there are none).
        let whole_before = StatSnapshot::host();
        let probe = RunProbe::start(&[], &local_fs(), &self.host_cpus, Accel::Kvm, Duration::ZERO).await;
        let t = Instant::now();
        let result = run_payload(&self.payload, &argv, &self.host_cpus, request.timeout).await;
        let run_s = t.elapsed().as_secs_f64();
        let telemetry = probe.finish(&[]).await;
        let mut worker_telemetry = serde_json::Map::new();
        if result.is_ok()
            && let (Ok(b), Ok(a)) = (&whole_before, &StatSnapshot::host())
        {
            worker_telemetry.insert("guest_stat".into(), json!(cpu_stat::total_delta(b, a)));
        }
        let worker = WorkerRun {
            argv,
            run_s: result.is_ok().then_some(run_s),
            result: result.map_err(|e| format!("{e:#}")),
            telemetry: worker_telemetry,
            console_tail: None,
        };
        RunOutcome {
            workers: vec![Some(worker)],
            start_skew_us: 0.0,
            host: telemetry.shared,
        }
    }

    async fn shut_down(&mut self) {}
}

async fn run_payload(
    payload: &std::path::Path,
    argv: &[String],
    cpus: &[usize],
    timeout: Duration,
) -> anyhow::Result<Finished> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    let mut cmd = tokio::process::Command::new(payload);
    cmd.args(argv).kill_on_drop(true);
    // SAFETY: the closure only calls sched_setaffinity (a raw syscall through rustix, no
    // allocation) on a set copied onto its stack, and prctl, both async-signal-safe.
    // PR_SET_PDEATHSIG: a payload outlives a killed ocrig otherwise, and a busy one then
    // disturbs whatever runs next on these CPUs (a 20 s hog left by a SIGKILLed sweep took a
    // whole CPU from the next sweep's runs in the fault tests, 2026-12-04).
    unsafe {
        cmd.pre_exec(move || {
            rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)?;
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = tokio::time::timeout(timeout, cmd.output())
        .await
        .map_err(|_| anyhow::anyhow!("the payload did not finish within {timeout:?}"))?
        .with_context(|| format!("running {}", payload.display()))?;
    Ok(Finished {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real host executor on a real process: `sh` stands in for the payload, and prints
    /// its own affinity, which must be the CPUs asked for.
    #[tokio::test]
    async fn runs_on_the_given_cpus_and_times_out() {
        let mut exec = HostExecutor {
            payload: "/bin/sh".into(),
            host_cpus: vec![0],
        };
        let req = RunRequest {
            argv: vec![Some(vec![
                "-c".into(),
                "grep Cpus_allowed_list /proc/self/status".into(),
            ])],
            timeout: Duration::from_secs(10),
        };
        let out = exec.run(&req).await;
        let w = out.workers[0].as_ref().unwrap();
        let f = w.result.as_ref().unwrap();
        assert_eq!(f.stdout.split_whitespace().last(), Some("0"), "{f:?}");
        assert!(w.run_s.is_some() && w.telemetry.contains_key("guest_stat"));
        assert!(out.host.contains_key("host_stat") && out.host.contains_key("telemetry_cost"));
        let req = RunRequest {
            argv: vec![Some(vec!["-c".into(), "sleep 5".into()])],
            timeout: Duration::from_millis(200),
        };
        let t = Instant::now();
        let out = exec.run(&req).await;
        assert!(t.elapsed() < Duration::from_secs(3));
        let e = out.workers[0].as_ref().unwrap().result.clone().unwrap_err();
        assert!(e.contains("did not finish"), "{e}");
    }
}
