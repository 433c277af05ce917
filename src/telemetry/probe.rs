//! Everything measured around one run, taken in two calls: [`RunProbe::start`] just before the
//! run and [`RunProbe::finish`] just after it. What the journal gets:
//!
//! - per guest: `vcpu_sched` (host-side preemption of each vCPU thread), `guest_stat` (the
//!   guest's own /proc/stat: steal, busy), `kvm` (per-VM KVM counters, or why there are none);
//! - per run: `host_stat` (the pinned host CPUs) and `telemetry_cost` (the orchestrator CPU
//!   these reads took, and its share of the CPU the run itself used).
//!
//! The vCPU snapshots are the innermost reads on both sides, so their window is the run's
//! as closely as a caller outside the run allows.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::cpu_stat::{self, CpuSplit, StatSnapshot};
use super::kvm::{self, KvmCounters};
use super::vcpu::{self, VcpuSnapshot};
use crate::backend::Guest;
use crate::guest::ssh::GuestSsh;
use crate::host::Accel;
use crate::hostfs::HostFs;

const DEBUGFS_KVM: &str = "/sys/kernel/debug/kvm";

/// Why a TCG guest's steal time is not a measurement.
pub const TCG_NO_STEAL: &str =
    "not measured: TCG gives the guest no steal clock (its /proc/stat steal stays 0)";

/// One guest as the probe sees it.
pub struct ProbeTarget<'a> {
    pub guest: &'a dyn Guest,
    pub ssh: Arc<GuestSsh>,
    /// Host thread ids of its vCPUs, in vCPU order.
    pub vcpu_tids: &'a [i32],
    /// False after its run failed: the guest may be stopped, dead, or its SSH session held by
    /// a blocked reader, so nothing is asked of it (only host-side /proc is read).
    pub reachable: bool,
    /// The guest's /proc/stat as the command that runs the payload already printed it (right
    /// before its start, right after its end), so it needs no SSH round trip of its own;
    /// `None`: read it over SSH.
    pub proc_stat: Option<Result<String, String>>,
}

/// How long QEMU may take to answer `query-stats`.
const QMP_DEADLINE: Duration = Duration::from_secs(5);
const UNREACHABLE: &str = "not read: the guest's run failed";

/// What the probe read before the run.
pub struct RunProbe {
    fs: Arc<dyn HostFs>,
    accel: Accel,
    host_cpus: Vec<usize>,
    collect: Duration,
    host: Result<StatSnapshot, String>,
    guests: Vec<GuestBefore>,
    cpu_ns: u64,
}

struct GuestBefore {
    stat: Result<StatSnapshot, String>,
    kvm: Result<KvmCounters, String>,
    vcpus: VcpuSnapshot,
}

/// The journal entries of one run: `shared` goes into every guest's record, `per_guest[i]`
/// into guest i's.
#[derive(Debug, Clone, Default)]
pub struct RunTelemetry {
    pub shared: Map<String, Value>,
    pub per_guest: Vec<Map<String, Value>>,
}

/// What the telemetry cost the orchestrator in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryCost {
    /// Orchestrator CPU time (all threads) spent in the probe's reads, milliseconds.
    pub cpu_ms: f64,
    /// CPU time the run used: the vCPU threads' run time summed over every guest, or for the
    /// host backend the pinned CPUs' busy time; milliseconds.
    pub run_cpu_ms: Option<f64>,
    /// `cpu_ms / run_cpu_ms`.
    pub share: Option<f64>,
}

impl RunProbe {
    /// Reads everything "before": the guests' /proc/stat and KVM counters, the host's
    /// /proc/stat, then the vCPU threads' scheduler counters.
    pub async fn start(
        targets: &[ProbeTarget<'_>],
        fs: &Arc<dyn HostFs>,
        host_cpus: &[usize],
        accel: Accel,
        collect: Duration,
    ) -> Self {
        let cpu0 = process_cpu_ns();
        let stats = guest_stats(targets, collect).await;
        let kvms = kvm_snapshots(targets, fs.is_local(), accel).await;
        let (host, vcpus) = host_reads(fs, targets, true).await;
        let guests = stats
            .into_iter()
            .zip(kvms)
            .zip(vcpus)
            .map(|((stat, kvm), vcpus)| GuestBefore { stat, kvm, vcpus })
            .collect();
        Self {
            fs: Arc::clone(fs),
            accel,
            host_cpus: host_cpus.to_vec(),
            collect,
            host,
            guests,
            cpu_ns: process_cpu_ns().saturating_sub(cpu0),
        }
    }

    /// Reads everything "after", in the reverse order, and returns the journal entries.
    pub async fn finish(self, targets: &[ProbeTarget<'_>]) -> RunTelemetry {
        let cpu0 = process_cpu_ns();
        let (host_after, vcpus_after) = host_reads(&self.fs, targets, false).await;
        let kvms_after = kvm_snapshots(targets, self.fs.is_local(), self.accel).await;
        let stats_after = guest_stats(targets, self.collect).await;

        let host = match (&self.host, &host_after) {
            (Ok(b), Ok(a)) => cpu_stat::cpus_delta(b, a, &self.host_cpus),
            (Err(e), _) | (_, Err(e)) => Err(e.clone()),
        };
        let mut per_guest = Vec::with_capacity(self.guests.len());
        let mut vcpu_run_s = 0.0;
        for (((before, vcpus_after), kvm_after), stat_after) in self
            .guests
            .iter()
            .zip(&vcpus_after)
            .zip(&kvms_after)
            .zip(stats_after)
        {
            let sched = vcpu::delta(&before.vcpus, vcpus_after);
            vcpu_run_s += sched.run_s().unwrap_or(0.0);
            let mut m = Map::new();
            m.insert("vcpu_sched".into(), json!(sched));
            m.insert(
                "guest_stat".into(),
                or_reason(guest_split(&before.stat, &stat_after, self.accel)),
            );
            m.insert("kvm".into(), or_reason(kvm::delta(&before.kvm, kvm_after)));
            per_guest.push(m);
        }
        let run_cpu_ms = if per_guest.is_empty() {
            host.as_ref()
                .ok()
                .map(|h| (h.sum.user + h.sum.system) as f64 * 10.0)
        } else {
            Some(vcpu_run_s * 1e3)
        };
        let cpu_ms = (self.cpu_ns + process_cpu_ns().saturating_sub(cpu0)) as f64 / 1e6;
        let cost = TelemetryCost {
            cpu_ms,
            run_cpu_ms,
            share: run_cpu_ms.filter(|r| *r > 0.0).map(|r| cpu_ms / r),
        };
        let mut shared = Map::new();
        shared.insert("host_stat".into(), or_reason(host));
        shared.insert("telemetry_cost".into(), json!(cost));
        RunTelemetry { shared, per_guest }
    }
}

/// A guest's CPU split; under TCG its steal column is not a measurement and says so.
fn guest_split(
    before: &Result<StatSnapshot, String>,
    after: &Result<StatSnapshot, String>,
    accel: Accel,
) -> Result<Value, String> {
    let split: CpuSplit = match (before, after) {
        (Ok(b), Ok(a)) => cpu_stat::total_delta(b, a),
        (Err(e), _) | (_, Err(e)) => return Err(e.clone()),
    };
    let mut v = json!(split);
    if accel == Accel::Tcg {
        v["steal_share"] = Value::Null;
        v["steal_unavailable"] = json!(TCG_NO_STEAL);
    }
    Ok(v)
}

/// The value, or `"not available: <why>"`.
fn or_reason<T: Serialize>(r: Result<T, String>) -> Value {
    match r {
        Ok(v) => json!(v),
        Err(e) if e.starts_with("not ") => json!(e),
        Err(e) => json!(format!("not available: {e}")),
    }
}

/// Every guest's /proc/stat, read over SSH in parallel.
async fn guest_stats(targets: &[ProbeTarget<'_>], collect: Duration) -> Vec<Result<StatSnapshot, String>> {
    let reads = targets.iter().map(|t| {
        let ssh = Arc::clone(&t.ssh);
        let reachable = t.reachable;
        let printed = t.proc_stat.clone();
        tokio::task::spawn_blocking(move || {
            if !reachable {
                return Err(UNREACHABLE.to_string());
            }
            if let Some(text) = printed {
                return StatSnapshot::parse(&text?);
            }
            let out = ssh
                .exec("cat /proc/stat", None, collect)
                .map_err(|e| format!("reading the guest's /proc/stat: {e:#}"))?;
            StatSnapshot::parse(&out.stdout)
        })
    });
    join_all(reads)
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| Err(format!("the /proc/stat reader failed: {e}"))))
        .collect()
}

/// The host's /proc/stat and every guest's vCPU counters, the vCPUs innermost (read last
/// before the run, first after it). A remote host's are read off the async threads.
async fn host_reads(
    fs: &Arc<dyn HostFs>,
    targets: &[ProbeTarget<'_>],
    before: bool,
) -> (Result<StatSnapshot, String>, Vec<VcpuSnapshot>) {
    let tids: Vec<Vec<i32>> = targets.iter().map(|t| t.vcpu_tids.to_vec()).collect();
    if fs.is_local() {
        return if before {
            let h = StatSnapshot::host();
            (h, VcpuSnapshot::take_all(fs.as_ref(), &tids))
        } else {
            let v = VcpuSnapshot::take_all(fs.as_ref(), &tids);
            (StatSnapshot::host(), v)
        };
    }
    let fs = Arc::clone(fs);
    let n = tids.len();
    tokio::task::spawn_blocking(move || {
        // One round trip: /proc/stat outside the vCPU reads on both sides.
        let (v, stat) = VcpuSnapshot::take_all_with(fs.as_ref(), &tids, Some(("/proc/stat", before)));
        let stat = match stat {
            Some(Ok(text)) => StatSnapshot::parse(&text),
            Some(Err(e)) => Err(format!("reading /proc/stat of {}: {e}", fs.label())),
            None => Err(format!("no /proc/stat from {}", fs.label())),
        };
        (stat, v)
    })
    .await
    .unwrap_or_else(|e| {
        let err = format!("the host reader failed: {e}");
        (
            Err(err.clone()),
            (0..n).map(|_| VcpuSnapshot::unavailable(&err)).collect(),
        )
    })
}

/// Every guest's KVM counters: through QMP, else debugfs by the vCPU threads' process (on
/// this machine only: a remote host's debugfs is not read).
async fn kvm_snapshots(
    targets: &[ProbeTarget<'_>],
    local: bool,
    accel: Accel,
) -> Vec<Result<KvmCounters, String>> {
    join_all(targets.iter().map(|t| async move {
        if !t.reachable {
            return Err(UNREACHABLE.to_string());
        }
        // A local QEMU < 8.1 is not asked: its query-stats would kick the vCPUs it measures.
        let answer = match (local, kvm::local_query_stats_quiet()) {
            (true, Err(why)) => Err(anyhow::anyhow!(why)),
            _ => tokio::time::timeout(QMP_DEADLINE, t.guest.kvm_stats())
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {QMP_DEADLINE:?}"))),
        };
        kvm::counters_from(
            answer.map_err(|e| format!("{e:#}")),
            accel == Accel::Kvm,
            local,
            || match t.vcpu_tids.first().and_then(|&tid| vcpu::process_of(tid)) {
                Some(pid) => kvm::from_debugfs(Path::new(DEBUGFS_KVM), pid),
                None => Err("no QEMU process known for the vCPU threads".into()),
            },
        )
    }))
    .await
}

/// CPU time of this whole process (every thread), nanoseconds.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_guests_the_host_cpus_and_the_cost_are_recorded() {
        let probe = RunProbe::start(
            &[],
            &(Arc::new(crate::hostfs::LocalFs) as Arc<dyn HostFs>),
            &[0],
            Accel::Tcg,
            Duration::from_secs(1),
        )
        .await;
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let tel = probe.finish(&[]).await;
        assert!(tel.per_guest.is_empty());
        let host: cpu_stat::HostSplit = serde_json::from_value(tel.shared["host_stat"].clone()).unwrap();
        assert_eq!(host.cpus, [0]);
        let cost: TelemetryCost = serde_json::from_value(tel.shared["telemetry_cost"].clone()).unwrap();
        // Two /proc/stat reads: well under the 60 ms this thread burned in between.
        assert!(cost.cpu_ms > 0.0 && cost.cpu_ms < 20.0, "{cost:?}");
    }

    #[test]
    fn tcg_steal_is_not_a_measurement() {
        let stat = |steal: u64| {
            StatSnapshot::parse(&format!(
                "cpu  10 0 10 100 0 0 0 {steal} 0 0\ncpu0 10 0 10 100 0 0 0 {steal}\nctxt 1\nbtime 1\nprocesses 1\n"
            ))
        };
        let tcg = guest_split(&stat(0), &stat(0), Accel::Tcg).unwrap();
        assert_eq!(tcg["steal_share"], Value::Null);
        assert!(tcg["steal_unavailable"].as_str().unwrap().contains("TCG"));
        let kvm = guest_split(&stat(0), &stat(12), Accel::Kvm).unwrap();
        assert_eq!(kvm["steal"], 12);
        assert_eq!(kvm["steal_share"], 1.0);
        assert_eq!(or_reason::<u8>(Err("x".into())), json!("not available: x"));
    }
}
