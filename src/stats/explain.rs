//! What explains a cell's number, read from the telemetry in its records: guest 0's vCPU wait
//! share, its steal share, its VM's KVM counters. A quantity that was not measured is `None`
//! with the reason, never 0 — under TCG the guest has no steal clock, so its 0 steal is no
//! measurement.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::summary::{Summary, summarize};
use crate::journal::RunRecord;
use crate::telemetry::kvm::KvmRun;
use crate::telemetry::probe::TCG_NO_STEAL;
use crate::telemetry::vcpu::VcpuSched;

/// What the header says about how the records were made.
pub struct RecordContext<'a> {
    pub accel: &'a str,
    pub backend: &'a str,
}

impl RecordContext<'_> {
    fn no_guests(&self) -> Option<String> {
        (self.backend == "host").then(|| "not measured: the host backend runs no guests".to_string())
    }
}

/// One telemetry field of a record as the figures read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Part<T> {
    /// Not in the record.
    Absent,
    /// A string in its place: why it was not measured.
    Why(String),
    /// Its value, or why it does not read as one (a hand-edited or damaged record).
    Read(Result<T, String>),
}

impl<T> Part<T> {
    /// Its value, or why there is none (`absent`: the words for a record without it).
    pub fn read(&self, absent: &str) -> Result<&T, String> {
        match self {
            Part::Absent => Err(absent.to_string()),
            Part::Why(why) => Err(why.clone()),
            Part::Read(Ok(v)) => Ok(v),
            Part::Read(Err(e)) => Err(format!("unreadable: {e}")),
        }
    }
}

impl<T: DeserializeOwned> Part<T> {
    /// The field `v` of a record in memory.
    #[cfg(test)] // records in memory are digested in tests only
    fn of_value(v: Option<&Value>) -> Self {
        match v {
            None => Part::Absent,
            Some(Value::String(why)) => Part::Why(why.clone()),
            Some(v) => Part::Read(T::deserialize(v).map_err(|e| e.to_string())),
        }
    }

    /// The field whose JSON text is `raw` (a journal line's, as it is parsed): the same as
    /// [`Part::of_value`] of it, without building a tree of it first.
    fn of_raw(raw: &str) -> Self {
        if raw.starts_with('"') {
            return match serde_json::from_str(raw) {
                Ok(why) => Part::Why(why),
                Err(e) => Part::Read(Err(without_place(e))),
            };
        }
        Part::Read(serde_json::from_str(raw).map_err(without_place))
    }
}

pub use crate::journal::scan::without_place;

/// A host's /proc/stat ticks over a run (`host_stat`), as far as [`host_other_part_of`] reads them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HostTicks {
    #[serde(default)]
    user: Option<f64>,
    #[serde(default)]
    system: Option<f64>,
    #[serde(default)]
    idle: Option<f64>,
    #[serde(default)]
    steal: Option<f64>,
}

/// A guest's /proc/stat over a run (`guest_stat`), as far as [`guest_steal_of`] reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct GuestSteal {
    #[serde(default)]
    steal_share: Option<f64>,
    #[serde(default)]
    steal_unavailable: Option<String>,
}

/// The telemetry of a record its per-run figures are computed from, typed: a report of a
/// million records parses these straight from each line ([`Telemetry::set_raw`]), a record in
/// memory from its `extra` ([`Telemetry::of`]); both give the same figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    pub vcpu_sched: Part<VcpuSched>,
    pub guest_stat: Part<GuestSteal>,
    pub host_stat: Part<HostTicks>,
    pub kvm: Part<KvmRun>,
    /// The host's record of the payload's listed stretched intervals.
    pub stretched_on_host: Part<OnHost>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            vcpu_sched: Part::Absent,
            guest_stat: Part::Absent,
            host_stat: Part::Absent,
            kvm: Part::Absent,
            stretched_on_host: Part::Absent,
        }
    }
}

impl Telemetry {
    /// The `extra` fields it is read from.
    pub const KEYS: [&str; 5] = [
        "vcpu_sched",
        "guest_stat",
        "host_stat",
        "kvm",
        "stretched_on_host",
    ];

    /// Of a record in memory.
    #[cfg(test)] // records in memory are digested in tests only
    pub fn of(extra: &serde_json::Map<String, Value>) -> Self {
        Self {
            vcpu_sched: Part::of_value(extra.get("vcpu_sched")),
            guest_stat: Part::of_value(extra.get("guest_stat")),
            host_stat: Part::of_value(extra.get("host_stat")),
            kvm: Part::of_value(extra.get("kvm")),
            stretched_on_host: Part::of_value(extra.get("stretched_on_host")),
        }
    }

    /// Sets the field `key` from its JSON text; false if `key` is none of [`Telemetry::KEYS`].
    pub fn set_raw(&mut self, key: &str, raw: &str) -> bool {
        match key {
            "vcpu_sched" => self.vcpu_sched = Part::of_raw(raw),
            "guest_stat" => self.guest_stat = Part::of_raw(raw),
            "host_stat" => self.host_stat = Part::of_raw(raw),
            "kvm" => self.kvm = Part::of_raw(raw),
            "stretched_on_host" => self.stretched_on_host = Part::of_raw(raw),
            _ => return false,
        }
        true
    }
}

/// The host's record of one run's stretched intervals (`extra.stretched_on_host`, aligned with
/// the payload's `longest` lists), as [`super::preemption::of_reported`] reads it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct OnHost {
    pub error_ns: Option<u64>,
    #[serde(default, deserialize_with = "null_is_none_listed")]
    pub holds: Vec<OffCpu>,
    /// Null where the payload timed none (one thread: no hand-over): nothing listed.
    #[serde(default, deserialize_with = "null_is_none_listed")]
    pub handovers: Vec<OffCpu>,
    pub unavailable: Option<String>,
}

/// A side the payload listed nothing of is `null` in the record: an empty list, so the other
/// side is still judged (a one-thread lock run has holds and no hand-overs).
fn null_is_none_listed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<OffCpu>, D::Error> {
    Ok(Option::<Vec<OffCpu>>::deserialize(d)?.unwrap_or_default())
}

/// How long one listed interval's vCPU was off its host CPU during it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct OffCpu {
    pub off_ns: Option<i64>,
    /// How long at least one of the guest's other vCPUs was off its CPU meanwhile.
    #[serde(default)]
    pub others_off_ns: Option<i64>,
}

/// A per-run quantity over a cell's valid runs, or why it was not measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// One value per valid run that measured it, in run order.
    pub samples: Vec<f64>,
    pub summary: Option<Summary>,
    /// Why there are no samples (the first run's reason); `None` when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl Measured {
    pub fn mean(&self) -> Option<f64> {
        self.summary.as_ref().map(|s| s.mean)
    }
}

/// Collects figures already taken (a report's digests of its records); reasons are kept only
/// when no record measured it.
pub fn measure_of<E: AsRef<str>>(figures: impl Iterator<Item = Result<f64, E>>) -> Measured {
    let mut samples = Vec::new();
    let mut reason: Option<String> = None;
    for f in figures {
        match f {
            Ok(v) => samples.push(v),
            Err(e) => {
                reason.get_or_insert_with(|| e.as_ref().to_string());
            }
        }
    }
    Measured {
        summary: summarize(&samples),
        unavailable: if samples.is_empty() {
            Some(reason.unwrap_or_else(|| "no valid runs".into()))
        } else {
            None
        },
        samples,
    }
}

/// Mean run-queue wait share of the record's vCPU threads, from its telemetry.
pub fn vcpu_wait_of(t: &Telemetry, ctx: &RecordContext) -> Result<f64, String> {
    if let Some(why) = ctx.no_guests() {
        return Err(why);
    }
    let sched = match &t.vcpu_sched {
        Part::Absent => {
            return Err("not recorded (the record has no vcpu_sched)".into());
        }
        Part::Why(why) => return Err(why.clone()),
        Part::Read(s) => s.as_ref().map_err(|e| format!("unreadable vcpu_sched: {e}"))?,
    };
    match sched.mean_wait_share {
        Some(s) => Ok(s),
        None => Err(format!(
            "not measured: {}",
            sched.unavailable().unwrap_or_default()
        )),
    }
}

/// What one record adds to its run's [`host_other_of`]: its host /proc/stat (busy and total
/// seconds; only the run's first record's is read) and its guest's vCPU run time.
#[derive(Debug, Clone, PartialEq)]
pub struct HostOtherPart<E = String> {
    pub host: Result<(f64, f64), E>,
    pub vcpus_s: Result<f64, E>,
}

impl HostOtherPart {
    /// The same with its reasons mapped (a digest interns them).
    pub fn map_err<E>(self, f: impl FnMut(String) -> E) -> HostOtherPart<E> {
        let mut f = f;
        HostOtherPart {
            host: self.host.map_err(&mut f),
            vcpus_s: self.vcpus_s.map_err(f),
        }
    }
}

/// What a record adds to its run's [`host_other_of`], from its telemetry.
pub fn host_other_part_of(t: &Telemetry, ctx: &RecordContext) -> HostOtherPart {
    let host = (|| {
        let host = match &t.host_stat {
            Part::Absent => return Err("not recorded".to_string()),
            Part::Why(why) => return Err(why.clone()),
            Part::Read(h) => h.as_ref().map_err(|e| format!("unreadable host_stat: {e}"))?,
        };
        let ticks = |v: Option<f64>, k: &str| v.ok_or_else(|| format!("host_stat has no {k}"));
        let (user, system) = (ticks(host.user, "user")?, ticks(host.system, "system")?);
        let total = user + system + ticks(host.idle, "idle")? + ticks(host.steal, "steal")?;
        if total <= 0.0 {
            return Err("not measured: no time elapsed".into());
        }
        Ok(((user + system) / USER_HZ, total / USER_HZ))
    })();
    let vcpus_s = if ctx.no_guests().is_some() {
        Ok(0.0)
    } else {
        match &t.vcpu_sched {
            Part::Absent => Err("not measured: a guest without vCPU telemetry".to_string()),
            Part::Why(why) => Err(why.clone()),
            Part::Read(s) => s
                .as_ref()
                .map(|sched| sched.run_s().unwrap_or(0.0))
                .map_err(|e| format!("unreadable vcpu_sched: {e}")),
        }
    };
    HostOtherPart { host, vcpus_s }
}

/// Share of the pinned host CPUs' time that went to anything but this run's vCPUs — other
/// processes on a shared host, QEMU's own threads, the orchestrator — from the parts of a run's
/// records in journal order: the first one's host /proc/stat and every guest's vCPU run time.
/// A vCPU wait share above 1 - 1/L is explained by it.
pub fn host_other_of<'a, E: AsRef<str> + 'a>(
    mut parts: impl Iterator<Item = &'a HostOtherPart<E>>,
) -> Result<f64, String> {
    let first = parts.next().ok_or("no records")?;
    let (busy_s, total_s) = first.host.as_ref().map_err(|e| e.as_ref().to_string())?;
    let mut vcpus_s = 0.0;
    for p in std::iter::once(first).chain(parts) {
        vcpus_s += p.vcpus_s.as_ref().map_err(|e| e.as_ref().to_string())?;
    }
    Ok(((busy_s - vcpus_s) / total_s).clamp(0.0, 1.0))
}

/// /proc/stat's tick rate.
const USER_HZ: f64 = 100.0;

/// The record's guest steal share, from its telemetry and its guest's `-cpu` ([`guest_cpu`]);
/// under TCG never a measurement, whatever the record says.
pub fn guest_steal_of(t: &Telemetry, cpu: Option<&str>, ctx: &RecordContext) -> Result<f64, String> {
    if let Some(why) = ctx.no_guests() {
        return Err(why);
    }
    if ctx.accel == "tcg" {
        return Err(TCG_NO_STEAL.to_string());
    }
    if let Some(cpu) = cpu
        && crate::telemetry::kvm::steal_time_off(cpu)
    {
        return Err(format!(
            "not measured: the guest's `-cpu {cpu}` turns kvm-steal-time off (its 0 would mean off, not none)"
        ));
    }
    match &t.guest_stat {
        Part::Absent => Err("not recorded".into()),
        Part::Why(why) => Err(why.clone()),
        Part::Read(Err(e)) => Err(format!("unreadable guest_stat: {e}")),
        Part::Read(Ok(g)) => g.steal_share.ok_or_else(|| {
            g.steal_unavailable
                .clone()
                .unwrap_or_else(|| "not measured: no time elapsed".into())
        }),
    }
}

/// The `-cpu` value the record's guest ran with, from its boot group's start facts.
pub fn guest_cpu(r: &RunRecord) -> Option<&str> {
    let starts = r.extra.get("group")?.get("start")?.as_array()?;
    starts
        .iter()
        .find(|s| s["guest"].as_u64() == Some(r.guest as u64))?
        .get("start")?
        .get("boot")?
        .get("cpu")?
        .as_str()
}

/// KVM counters shown per cell (mean per run of guest 0's VM), with column names that say
/// what KVM counts: the two `directed_yield_*` statistics count only the PV sched-yield
/// hypercall (`KVM_HC_SCHED_YIELD`), not pause-loop exits; `hypercalls` is every number.
pub const KVM_COLUMNS: [(&str, &str); 7] = [
    ("halt_exits", "halt exits"),
    ("halt_successful_poll", "halt polled"),
    ("directed_yield_attempted", "pv-yield hc"),
    ("directed_yield_successful", "pv-yield ok"),
    ("preemption_reported", "preempt rep"),
    ("preemption_other", "preempt other"),
    ("hypercalls", "all hcalls"),
];

/// What the KVM table's columns count and what it cannot show, for the report's notes.
pub fn kvm_notes() -> Vec<String> {
    [
        "pv-yield hc / ok = KVM's directed_yield_attempted / _successful: PV sched-yield hypercalls \
         (KVM_HC_SCHED_YIELD) made / that yielded to the target vCPU; pause-loop exits are not in them",
        "PLE (pause-loop exits): not measured: KVM has no statistic of them (kvm_vcpu_on_spin); only the \
         host's kvm:kvm_exit (PAUSE_INSTRUCTION / pause) and kvm_ple_window_update tracepoints show them",
        "all hcalls = every hypercall number together (spinlock kicks, PV IPIs, sched-yield, ...); by number: \
         not measured (KVM's stats do not split them; the host's kvm:kvm_hypercall tracepoint would)",
        "preempt rep / other = vCPU preemptions KVM could / could not flag in kvm-steal-time's `preempted` \
         (what the guest's vcpu_is_preempted reads)",
    ]
    .map(String::from)
    .to_vec()
}

/// One record's guests' PV lines (dmesg time stripped), from its boot facts; `None` when the
/// record carries no guest kernel facts.
#[derive(Debug, Clone, PartialEq)]
pub struct PvWords {
    /// Whether the facts name any guest.
    pub guests: bool,
    pub lines: Vec<String>,
    /// What the variant's guest was set up to have (from its command line and `-cpu`).
    pub intent: Option<PvIntent>,
}

/// What a guest's spinlocks were meant to be, from its command line and `-cpu` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PvIntent {
    /// The default under KVM with two or more vCPUs: PV qspinlock.
    Pv,
    /// `nopvspin` on the command line: native qspinlock.
    NoPvSpin,
    /// `-cpu …,kvm-pv-unhalt=off`: no PV qspinlock (the test-and-set virt_spin_lock).
    UnhaltOff,
    /// A named CPU model (not `host`/`max`), whose kvm-pv-unhalt is off unless asked for.
    NamedModel,
}

impl PvIntent {
    pub fn of(cmdline: Option<&str>, cpu: Option<&str>) -> Self {
        let cpu = cpu.unwrap_or("max");
        let model = cpu.split(',').next().unwrap_or("max").trim();
        let unhalt = crate::host::cpu_feature(cpu, "kvm-pv-unhalt");
        if cmdline.is_some_and(|c| c.split_whitespace().any(|w| w == "nopvspin")) {
            Self::NoPvSpin
        } else if unhalt == Some(false) {
            Self::UnhaltOff
        } else if !matches!(model, "host" | "max") && unhalt != Some(true) {
            Self::NamedModel
        } else {
            Self::Pv
        }
    }

    /// Where a guest of this intent said otherwise (KVM only: under TCG no guest sees PV
    /// features; 1-vCPU guests turn them off by themselves), in words; None when it agrees.
    pub fn disagreement(self, accel: &str, vcpus: u32, lines: &[impl AsRef<str>]) -> Option<String> {
        if accel != "kvm" || vcpus < 2 {
            return None;
        }
        let said = |w: &str| lines.iter().any(|l| l.as_ref().contains(w));
        let enabled = said("PV spinlocks enabled");
        let words = if lines.is_empty() {
            "nothing about PV spinlocks".to_string()
        } else {
            lines
                .iter()
                .map(|l| format!("`{}`", l.as_ref()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::Pv if !enabled => Some(format!(
                "meant PV spinlocks (the default), but its guests said {words}"
            )),
            Self::NoPvSpin if !said("nopvspin") => {
                Some(format!("meant `nopvspin`, but its guests said {words}"))
            }
            Self::UnhaltOff if enabled => {
                Some(format!("meant `kvm-pv-unhalt=off`, but its guests said {words}"))
            }
            Self::NamedModel if !enabled => Some(format!(
                "runs a named CPU model, whose kvm-pv-unhalt is off unless asked for (`…,kvm-pv-unhalt=on`): its guests said {words}, so its spinlocks are the test-and-set virt_spin_lock, not PV qspinlock"
            )),
            _ => None,
        }
    }
}

/// What a guest kernel's line on its PV features contains.
pub const PV_WORDS: [&str; 2] = ["PV spinlocks", "kvm-guest:"];

pub fn pv_words(r: &RunRecord) -> Option<PvWords> {
    let guests = r
        .extra
        .get("group")
        .and_then(|g| g.get("guest_kernel"))
        .and_then(Value::as_array)?;
    let mut lines: Vec<String> = Vec::new();
    let cmdline = guests
        .first()
        .and_then(|g| g.get("cmdline"))
        .and_then(Value::as_str);
    let intent = (!guests.is_empty()).then(|| PvIntent::of(cmdline, guest_cpu(r)));
    for g in guests {
        for l in g.get("pv_words").and_then(Value::as_array).into_iter().flatten() {
            let Some(l) = l.as_str() else { continue };
            let text = strip_dmesg_time(l);
            let pv = PV_WORDS.iter().any(|w| text.contains(w));
            if pv && !lines.iter().any(|x| x == text) {
                lines.push(text.to_string());
            }
        }
    }
    Some(PvWords {
        guests: !guests.is_empty(),
        lines,
        intent,
    })
}

/// The kernel's own words on its PV features per variant (`PV spinlocks …`, `kvm-guest: …`),
/// from each record's (variant, [`PvWords::guests`], lines) in journal order: variant →
/// distinct lines, in first-seen order. A variant's guests that said nothing of the kind get
/// one line saying so.
pub fn kernel_words_of<'a, L, S>(
    records: impl Iterator<Item = (&'a str, bool, L)>,
) -> BTreeMap<String, Vec<String>>
where
    L: Iterator<Item = S>,
    S: AsRef<str>,
{
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen_guest: BTreeMap<String, bool> = BTreeMap::new();
    for (variant, guests, words) in records {
        if !seen_guest.contains_key(variant) {
            seen_guest.insert(variant.to_string(), false);
            out.insert(variant.to_string(), Vec::new());
        }
        *seen_guest.get_mut(variant).expect("inserted") |= guests;
        let lines = out.get_mut(variant).expect("inserted");
        for text in words {
            let text = text.as_ref();
            if !lines.iter().any(|x| x == text) {
                lines.push(text.to_string());
            }
        }
    }
    for (variant, lines) in out.iter_mut() {
        if lines.is_empty() && seen_guest.get(variant).copied().unwrap_or(false) {
            lines.push(
                "(no `PV spinlocks` or `kvm-guest:` line: the guest saw no KVM PV interface — TCG, or KVM's \
                 PV features hidden from it)"
                    .into(),
            );
        }
    }
    out.retain(|_, l| !l.is_empty());
    out
}

/// `[    0.123456] text` → `text`.
fn strip_dmesg_time(line: &str) -> &str {
    match line.trim().strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((_, rest)) => rest.trim(),
        None => line.trim(),
    }
}

/// The record's per-VM KVM counters over the run, from its telemetry.
pub fn kvm_counters_of<'t>(
    t: &'t Telemetry,
    ctx: &RecordContext,
) -> Result<&'t BTreeMap<String, u64>, String> {
    if let Some(why) = ctx.no_guests() {
        return Err(why);
    }
    t.kvm.read("not recorded").map(|k| &k.counters)
}

/// The key under which a run's KVM counters carry the window they span, in milliseconds (the
/// vCPU scheduler figures' wall time, read around the same run), so a cell can give rates.
pub const KVM_WINDOW_MS: &str = "_window_ms";

/// The milliseconds a run's telemetry spans ([`KVM_WINDOW_MS`]), where its vCPU figures say.
pub fn kvm_window_ms(t: &Telemetry) -> Option<u64> {
    match &t.vcpu_sched {
        Part::Read(Ok(s)) if s.wall_s.is_finite() && s.wall_s > 0.0 => Some((s.wall_s * 1e3).round() as u64),
        _ => None,
    }
}

/// Guest 0's VM's KVM counters over a cell: the mean of each counter per run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KvmCell {
    /// Counter → mean per run, over the runs that recorded it.
    pub counters: BTreeMap<String, f64>,
    /// Counter → per second of run, over the runs whose window is known ([`KVM_WINDOW_MS`]):
    /// their summed counts over their summed seconds (runs at overcommit last longer, so a
    /// total per run alone mixes the rate with the run's length).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_sec: BTreeMap<String, f64>,
    /// Runs that recorded counters.
    pub runs: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Figures a reader would look for here that KVM's counters cannot give, each with why:
    /// `pause_loop_exits`, `hypercalls_by_number` (only where counters were recorded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_measured: BTreeMap<String, String>,
}

/// A cell's KVM counters from its runs' counters already read (a report's digests of its
/// records).
pub fn kvm_cell_of<C, K, E>(per_run: impl Iterator<Item = Result<C, E>>) -> KvmCell
where
    C: IntoIterator<Item = (K, u64)>,
    K: AsRef<str>,
    E: AsRef<str>,
{
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    // Counts of the runs whose window is known, and their seconds.
    let (mut timed, mut seconds): (BTreeMap<String, f64>, f64) = (BTreeMap::new(), 0.0);
    let (mut runs, mut reason) = (0, None);
    for c in per_run {
        match c {
            Ok(c) => {
                runs += 1;
                let c: Vec<(K, u64)> = c.into_iter().collect();
                let window = c
                    .iter()
                    .find(|(k, _)| k.as_ref() == KVM_WINDOW_MS)
                    .map(|(_, ms)| *ms as f64 / 1e3);
                seconds += window.unwrap_or(0.0);
                for (k, v) in c.iter().filter(|(k, _)| k.as_ref() != KVM_WINDOW_MS) {
                    match sums.get_mut(k.as_ref()) {
                        Some(s) => *s += *v as f64,
                        None => {
                            sums.insert(k.as_ref().to_string(), *v as f64);
                        }
                    }
                    if window.is_some() {
                        *timed.entry(k.as_ref().to_string()).or_default() += *v as f64;
                    }
                }
            }
            Err(e) => {
                reason.get_or_insert_with(|| e.as_ref().to_string());
            }
        }
    }
    KvmCell {
        counters: sums
            .into_iter()
            .map(|(k, v)| (k, v / runs.max(1) as f64))
            .collect(),
        per_sec: if seconds > 0.0 {
            timed.into_iter().map(|(k, v)| (k, v / seconds)).collect()
        } else {
            BTreeMap::new()
        },
        runs,
        unavailable: (runs == 0).then(|| reason.unwrap_or_else(|| "no valid runs".into())),
        not_measured: if runs > 0 {
            use crate::telemetry::kvm::{HYPERCALLS_NOT_SPLIT, PLE_NOT_MEASURED};
            BTreeMap::from([
                ("pause_loop_exits".to_string(), PLE_NOT_MEASURED.to_string()),
                (
                    "hypercalls_by_number".to_string(),
                    HYPERCALLS_NOT_SPLIT.to_string(),
                ),
            ])
        } else {
            BTreeMap::new()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{
        guest_steal, host_other, kernel_words, kvm_cell, kvm_counters, measure, record, vcpu_wait,
    };
    use serde_json::json;

    const KVM: RecordContext = RecordContext {
        accel: "kvm",
        backend: "qemu",
    };
    const TCG: RecordContext = RecordContext {
        accel: "tcg",
        backend: "qemu",
    };

    fn with(extra: Value) -> RunRecord {
        let mut r = record("v", 1.0, "w", 0, &[("m", 1.0)]);
        r.extra = extra.as_object().unwrap().clone();
        r
    }

    #[test]
    fn telemetry_parsed_from_its_text_reads_as_from_a_tree() {
        // Each shape a journal has: measured, a string saying why, a damaged value
        // (unreadable: its error text must not carry the place in the line), null, absent.
        let extras = [
            json!({"vcpu_sched": {"wall_s": 1.0, "mean_wait_share": 0.25, "vcpus": []},
                   "guest_stat": {"steal_share": 0.5, "user": 3}, "host_stat": {"user": 1, "system": 2, "idle": 3, "steal": 0, "per_cpu": []},
                   "kvm": {"source": "qmp", "counters": {"halt_exits": 4}}}),
            json!({"vcpu_sched": "not available: gone", "guest_stat": "timeout", "host_stat": "offline", "kvm": "no provider"}),
            json!({"vcpu_sched": {"wall_s": "x"}, "guest_stat": {"steal_share": "y"}, "host_stat": [1], "kvm": {"exits": 5}}),
            json!({"vcpu_sched": null, "guest_stat": null, "host_stat": null, "kvm": null}),
            json!({}),
        ];
        for extra in extras {
            let map = extra.as_object().unwrap();
            let mut raw = Telemetry::default();
            for (k, v) in map {
                assert!(raw.set_raw(k, &serde_json::to_string_pretty(v).unwrap()));
            }
            let tree = Telemetry::of(map);
            assert_eq!(raw, tree, "{extra}");
            for ctx in [&KVM, &TCG] {
                assert_eq!(vcpu_wait_of(&raw, ctx), vcpu_wait_of(&tree, ctx));
                assert_eq!(guest_steal_of(&raw, None, ctx), guest_steal_of(&tree, None, ctx));
                assert_eq!(host_other_part_of(&raw, ctx), host_other_part_of(&tree, ctx));
                assert_eq!(kvm_counters_of(&raw, ctx), kvm_counters_of(&tree, ctx));
            }
        }
        let t = |v: Value| Telemetry::of(v.as_object().unwrap());
        let unreadable = vcpu_wait_of(&t(json!({"vcpu_sched": {"wall_s": "x"}})), &KVM).unwrap_err();
        assert!(
            unreadable.starts_with("unreadable vcpu_sched: invalid type") && !unreadable.contains("line"),
            "{unreadable}"
        );
        assert_eq!(
            vcpu_wait_of(&t(json!({"vcpu_sched": "not available: gone"})), &KVM),
            Err("not available: gone".into())
        );
        assert!(
            !Telemetry::default().set_raw("timeline", "{}"),
            "not a telemetry field"
        );
    }

    #[test]
    fn steal_is_never_zero_under_tcg() {
        let r =
            with(json!({"guest_stat": {"user": 1, "system": 0, "idle": 0, "steal": 0, "steal_share": 0.0}}));
        assert_eq!(guest_steal(&r, &KVM), Ok(0.0), "on KVM a 0 is a measurement");
        assert!(guest_steal(&r, &TCG).unwrap_err().contains("TCG"));
        let host = RecordContext {
            accel: "tcg",
            backend: "host",
        };
        assert!(guest_steal(&r, &host).unwrap_err().contains("no guests"));
        let r = with(json!({"guest_stat": "not available: reading the guest's /proc/stat: timeout"}));
        assert!(guest_steal(&r, &KVM).unwrap_err().contains("timeout"));
    }

    /// What a variant meant, from its command line and `-cpu`, and where its guests disagree
    /// (the kernel's own words since Linux 5.5).
    #[test]
    fn a_variant_is_held_to_what_it_meant() {
        assert_eq!(PvIntent::of(Some("quiet"), Some("host")), PvIntent::Pv);
        assert_eq!(PvIntent::of(None, None), PvIntent::Pv);
        assert_eq!(
            PvIntent::of(Some("quiet nopvspin"), Some("host")),
            PvIntent::NoPvSpin
        );
        assert_eq!(
            PvIntent::of(None, Some("host,kvm-pv-unhalt=off")),
            PvIntent::UnhaltOff
        );
        assert_eq!(
            PvIntent::of(None, Some("max,-kvm_pv_unhalt")),
            PvIntent::UnhaltOff
        );
        assert_eq!(PvIntent::of(None, Some("Skylake-Server")), PvIntent::NamedModel);
        assert_eq!(
            PvIntent::of(None, Some("Skylake-Server,kvm-pv-unhalt=on")),
            PvIntent::Pv
        );
        let enabled = ["kvm-guest: PV spinlocks enabled"];
        let forced = ["kvm-guest: PV spinlocks disabled, forced by \"nopvspin\" parameter"];
        let no_host = ["kvm-guest: PV spinlocks disabled, no host support"];
        let none: [&str; 0] = [];
        assert_eq!(PvIntent::Pv.disagreement("kvm", 2, &enabled), None);
        assert!(
            PvIntent::Pv
                .disagreement("kvm", 2, &no_host)
                .unwrap()
                .contains("no host support")
        );
        assert_eq!(PvIntent::NoPvSpin.disagreement("kvm", 2, &forced), None);
        assert!(PvIntent::NoPvSpin.disagreement("kvm", 2, &enabled).is_some());
        assert_eq!(PvIntent::UnhaltOff.disagreement("kvm", 2, &no_host), None);
        assert_eq!(PvIntent::UnhaltOff.disagreement("kvm", 2, &none), None);
        assert!(PvIntent::UnhaltOff.disagreement("kvm", 2, &enabled).is_some());
        let named = PvIntent::NamedModel.disagreement("kvm", 2, &no_host).unwrap();
        assert!(named.contains("virt_spin_lock"), "{named}");
        // TCG guests see no PV features, and one CPU turns them off: nothing to hold them to.
        assert_eq!(PvIntent::Pv.disagreement("tcg", 2, &none), None);
        assert_eq!(PvIntent::Pv.disagreement("kvm", 1, &none), None);
    }

    #[test]
    fn vcpu_wait_and_its_reasons() {
        let sched = |share: Value| {
            json!({"vcpu_sched": {"wall_s": 2.0, "mean_wait_share": share, "vcpus": [{
                "vcpu": 0, "tid": 9, "run_s": null, "wait_s": null, "wait_share": null, "timeslices": null,
                "voluntary_switches": null, "involuntary_switches": null, "unavailable": "/proc/9: gone"}]}})
        };
        assert_eq!(vcpu_wait(&with(sched(json!(0.5))), &TCG), Ok(0.5));
        let e = vcpu_wait(&with(sched(Value::Null)), &TCG).unwrap_err();
        assert_eq!(e, "not measured: /proc/9: gone");
        assert!(
            vcpu_wait(&with(json!({})), &TCG)
                .unwrap_err()
                .contains("not recorded")
        );
        let m = measure(
            [
                with(sched(json!(0.25))),
                with(json!({})),
                with(sched(json!(0.75))),
            ]
            .iter(),
            |r| vcpu_wait(r, &TCG),
        );
        assert_eq!(
            (m.samples.clone(), m.mean(), m.unavailable),
            (vec![0.25, 0.75], Some(0.5), None)
        );
        let none = measure([with(json!({}))].iter(), |r| vcpu_wait(r, &TCG));
        assert!(none.summary.is_none() && none.unavailable.unwrap().contains("not recorded"));
    }

    #[test]
    fn host_other_is_busy_time_beyond_the_vcpus() {
        // 2 CPUs × 3 s = 600 ticks, 540 busy = 5.4 s; the two guests' vCPUs ran 2.0 + 2.5 s:
        // 0.9 s of 6 s went elsewhere → 0.15.
        let sched = |run_s: f64| {
            json!({"wall_s": 3.0, "mean_wait_share": 0.1, "vcpus": [{
            "vcpu": 0, "tid": 1, "run_s": run_s, "wait_s": 0.3, "wait_share": 0.1, "timeslices": 1,
            "voluntary_switches": 0, "involuntary_switches": 0}]})
        };
        let host = json!({"cpus": [0, 1], "user": 500, "system": 40, "idle": 60, "steal": 0, "per_cpu": []});
        let g0 = with(json!({"host_stat": host, "vcpu_sched": sched(2.0)}));
        let g1 = with(json!({"host_stat": host, "vcpu_sched": sched(2.5)}));
        assert!((host_other(&[&g0, &g1], &TCG).unwrap() - 0.15).abs() < 1e-12);
        let lost = with(json!({"host_stat": "not available: CPU 7 has no line in /proc/stat (offline?)"}));
        assert!(host_other(&[&lost], &TCG).unwrap_err().contains("CPU 7"));
        assert!(host_other(&[&g0, &with(json!({"host_stat": host}))], &TCG).is_err());
    }

    #[test]
    fn kvm_counters_are_averaged_per_run() {
        let k = |h: u64| with(json!({"kvm": {"source": "qmp query-stats", "counters": {"halt_exits": h}}}));
        let c = kvm_cell([k(10), k(30)].iter(), &KVM);
        assert_eq!(
            (c.runs, c.counters["halt_exits"], c.unavailable.clone()),
            (2, 20.0, None)
        );
        assert!(c.not_measured["pause_loop_exits"].contains("kvm_vcpu_on_spin"));
        assert!(c.not_measured["hypercalls_by_number"].contains("kvm_hypercall"));
        let tcg = with(json!({"kvm": "not available: QEMU's query-stats has no KVM provider"}));
        let c = kvm_cell([tcg].iter(), &TCG);
        assert!(c.counters.is_empty() && c.unavailable.unwrap().contains("no KVM provider"));
        let damaged = with(json!({"kvm": {"exits": 5}}));
        assert!(
            kvm_counters(&damaged, &KVM)
                .unwrap_err()
                .starts_with("unreadable")
        );
    }

    #[test]
    fn kvm_rates_are_the_cells_counts_over_the_seconds_their_runs_lasted() {
        // Two runs: 100 halts in 1 s and 500 in 4 s (a run at overcommit lasts longer): 120
        // per second over the cell, 300 per run; a run without a known window adds to the
        // mean per run only.
        let cell = kvm_cell_of(
            [
                vec![("halt_exits", 100u64), (KVM_WINDOW_MS, 1000)],
                vec![("halt_exits", 500), (KVM_WINDOW_MS, 4000)],
                vec![("halt_exits", 300)],
            ]
            .into_iter()
            .map(Ok::<_, String>),
        );
        assert_eq!(cell.counters["halt_exits"], 300.0);
        assert!(!cell.counters.contains_key(KVM_WINDOW_MS));
        assert_eq!(cell.per_sec["halt_exits"], 120.0);
        // The window is read from the vCPU figures of the same run.
        let t = Telemetry::of(
            &serde_json::from_value(
                json!({"vcpu_sched": {"wall_s": 2.5, "mean_wait_share": 0.1, "vcpus": []}}),
            )
            .unwrap(),
        );
        assert_eq!(kvm_window_ms(&t), Some(2500));
        assert_eq!(kvm_window_ms(&Telemetry::default()), None);
    }

    #[test]
    fn steal_is_not_measured_where_the_guests_cpu_turns_steal_time_off() {
        let r = with(json!({
            "guest_stat": {"user": 1, "system": 0, "idle": 0, "steal": 0, "steal_share": 0.0},
            "group": {"start": [{"guest": 0, "start": {"method": "boot", "boot": {"cpu": "host,kvm-steal-time=off"}}}]}
        }));
        let e = guest_steal(&r, &KVM).unwrap_err();
        assert!(e.contains("turns kvm-steal-time off"), "{e}");
        let on = with(json!({
            "guest_stat": {"user": 1, "system": 0, "idle": 0, "steal": 0, "steal_share": 0.0},
            "group": {"start": [{"guest": 0, "start": {"method": "boot", "boot": {"cpu": "host,kvm-pv-unhalt=off"}}}]}
        }));
        assert_eq!(guest_steal(&on, &KVM), Ok(0.0));
    }

    #[test]
    fn the_kernels_words_are_gathered_per_variant() {
        let g = |variant: &str, words: Value| {
            let mut r = with(json!({"group": {"guest_kernel": [{"cmdline": "x", "pv_words": words}]}}));
            r.variant = variant.into();
            r
        };
        let rs = [
            g(
                "pv",
                json!([
                    "[    0.031] kvm-guest: PV spinlocks enabled",
                    "[    0.032] kvm-guest: setup PV sched yield"
                ]),
            ),
            g("pv", json!(["[    0.030] kvm-guest: PV spinlocks enabled"])),
            g(
                "nopvspin",
                json!(["[    0.03] kvm-guest: PV spinlocks disabled, forced by \"nopvspin\" parameter"]),
            ),
            g("tcg", json!([])),
        ];
        let w = kernel_words(rs.iter());
        assert_eq!(
            w["pv"],
            vec![
                "kvm-guest: PV spinlocks enabled",
                "kvm-guest: setup PV sched yield"
            ]
        );
        assert!(w["nopvspin"][0].contains("forced by"));
        assert!(w["tcg"][0].contains("saw no KVM PV interface"), "{w:?}");
    }

    #[test]
    fn linux_6_6_query_stats_reach_the_report_under_their_labels() {
        // Every record's VM counters are the delta of the Linux 6.6 fixture (2 vCPUs).
        let sample: Value =
            serde_json::from_str(include_str!("../telemetry/testdata/kvm_6.6_query_stats.json")).unwrap();
        let kvm = crate::telemetry::kvm::delta(
            &crate::telemetry::kvm::from_query_stats(&sample["before"]),
            &crate::telemetry::kvm::from_query_stats(&sample["after"]),
        )
        .unwrap();
        let mut j = crate::testing::journal();
        for r in &mut j.runs {
            r.extra.insert("kvm".into(), serde_json::to_value(&kvm).unwrap());
        }
        let text = crate::testing::render(
            &j,
            crate::report::Format::Table,
            &crate::report::ReportOptions::default(),
        )
        .unwrap();
        let head = text
            .lines()
            .find(|l| l.contains("halt exits"))
            .expect("a KVM table");
        for (_, label) in KVM_COLUMNS {
            assert!(head.contains(label), "{label} missing from {head}");
        }
        // halt exits 36000, pv-yield hc 1240, ok 480, preempt rep 10000, all hcalls 16400
        // (the report writes counts of 10^4 and more in thousands).
        let row = text
            .lines()
            .find(|l| l.starts_with("| base    | 0.5x |") && l.contains("36.0k"))
            .expect("a KVM row of the fixture's figures");
        for v in ["36.0k", "1240", "480", "10.0k", "16.4k"] {
            assert!(row.contains(v), "{v} missing from {row}");
        }
        assert!(text.contains("PLE (pause-loop exits): not measured"), "{text}");
        let json = crate::testing::render(
            &j,
            crate::report::Format::Json,
            &crate::report::ReportOptions::default(),
        )
        .unwrap();
        assert!(
            json.contains("pause_loop_exits"),
            "the JSON report names PLE as not measured"
        );
    }
}
