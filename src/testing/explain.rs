//! The figures of records held in memory: each the production reading ([`crate::stats::explain`]'s
//! `…_of`) of the record's telemetry as serde parses it whole ([`Telemetry::of`]), so a test
//! states a figure for a record it wrote.

use std::collections::BTreeMap;

use crate::journal::RunRecord;
use crate::stats::explain::{
    HostOtherPart, KvmCell, Measured, PvWords, RecordContext, Telemetry, guest_cpu, guest_steal_of,
    host_other_of, host_other_part_of, kernel_words_of, kvm_cell_of, kvm_counters_of, measure_of, pv_words,
    vcpu_wait_of,
};

/// Collects `value` over records in memory; reasons are kept only when no record measured it.
pub(crate) fn measure<'a>(
    records: impl Iterator<Item = &'a RunRecord>,
    value: impl Fn(&RunRecord) -> Result<f64, String>,
) -> Measured {
    measure_of(records.map(value))
}

/// Mean run-queue wait share of the record's vCPU threads.
pub(crate) fn vcpu_wait(r: &RunRecord, ctx: &RecordContext) -> Result<f64, String> {
    vcpu_wait_of(&Telemetry::of(&r.extra), ctx)
}

/// Share of the pinned host CPUs' time that went to anything but this run's vCPUs — other
/// processes on a shared host, QEMU's own threads, the orchestrator — from the run's host
/// /proc/stat and every guest's vCPU run time (`run` holds all records of the run). A vCPU
/// wait share above 1 - 1/L is explained by it.
pub(crate) fn host_other(run: &[&RunRecord], ctx: &RecordContext) -> Result<f64, String> {
    let parts: Vec<HostOtherPart> = run.iter().map(|r| host_other_part(r, ctx)).collect();
    host_other_of(parts.iter())
}

/// What one record adds to its run's [`host_other`].
pub(crate) fn host_other_part(r: &RunRecord, ctx: &RecordContext) -> HostOtherPart {
    host_other_part_of(&Telemetry::of(&r.extra), ctx)
}

/// The record's guest steal share; under TCG never a measurement, whatever the record says.
pub(crate) fn guest_steal(r: &RunRecord, ctx: &RecordContext) -> Result<f64, String> {
    guest_steal_of(&Telemetry::of(&r.extra), guest_cpu(r), ctx)
}

/// The kernel's own words on its PV features per variant (`PV spinlocks …`, `kvm-guest: …`),
/// from the boot facts of every record's guest: variant → distinct lines, in first-seen order.
/// A variant's guests that said nothing of the kind get one line saying so.
pub(crate) fn kernel_words<'a>(
    records: impl Iterator<Item = &'a RunRecord>,
) -> BTreeMap<String, Vec<String>> {
    let words: Vec<(&str, PvWords)> = records
        .filter_map(|r| Some((r.variant.as_str(), pv_words(r)?)))
        .collect();
    kernel_words_of(words.iter().map(|(v, w)| (*v, w.guests, w.lines.iter())))
}

/// The record's per-VM KVM counters over the run.
pub(crate) fn kvm_counters(r: &RunRecord, ctx: &RecordContext) -> Result<BTreeMap<String, u64>, String> {
    kvm_counters_of(&Telemetry::of(&r.extra), ctx).cloned()
}

/// A cell's KVM counters over its records.
pub(crate) fn kvm_cell<'a>(records: impl Iterator<Item = &'a RunRecord>, ctx: &RecordContext) -> KvmCell {
    kvm_cell_of(records.map(|r| kvm_counters(r, ctx)))
}
