//! Terminal tables (comfy-table) in the published layout:
//! `oc | base | stdev | patched | stdev | %improvement | ratio [CI] | p (Holm) | conclusion`,
//! one table per workload and
//! non-baseline variant, then the cell table (one row per variant × level: the metric next to
//! vCPU wait, steal, contention, fairness) and, on KVM hosts, the KVM counters.

use super::layout::ascii_table;
use super::{
    Exporter, ReportInput, cell_rows, comparison_rows, describe_metric, kernel_symbols, kvm_rows, notes,
    retention_rows, single_rows,
};
use crate::stats::cells::Model;

pub struct TableExporter;

impl Exporter for TableExporter {
    fn render(&self, input: &ReportInput) -> anyhow::Result<String> {
        let mut text = render_model(&input.model);
        text.push_str(&wrap_lines(&input.hosts_text()));
        text.push_str(&wrap_lines(&input.kernel_words()));
        text.push_str(&kernel_symbols::table_section(&input.symbols));
        text.push_str(&kernel_symbols::compare_table(&input.changed()));
        // Last, where the eye lands when the command ends.
        let verdict = super::verdict::text(&input.model);
        if !verdict.is_empty() {
            text.push('\n');
            text.push_str(&verdict);
        }
        Ok(text)
    }
}

/// Each line of `text` wrapped within the width, its continuations indented two more than it.
fn wrap_lines(text: &str) -> String {
    text.lines()
        .map(|l| {
            let indent: String = l.chars().take_while(|c| *c == ' ').collect();
            super::layout::wrap(l.trim_start(), &indent, &format!("{indent}  "))
        })
        .collect()
}

/// The model's tables in the published layout: per workload its comparisons, retention, what
/// explains each cell, KVM counters and notes, then the sweep's lines.
fn render_model(model: &Model) -> String {
    {
        let mut workloads = Vec::new();
        for wl in &model.workloads {
            let mut blocks = Vec::new();
            if wl.comparisons.is_empty() {
                blocks.push(format!(
                    "{} ({})\n{}",
                    wl.workload,
                    describe_metric(wl),
                    ascii_table(&single_rows(wl))
                ));
            }
            for cmp in &wl.comparisons {
                // The title says the level of the intervals (each row at its conclusion's).
                let levels =
                    super::interval_levels(cmp).map_or_else(String::new, |l| format!("; interval {l}"));
                let title = format!(
                    "{}: {} vs {} ({}{levels})",
                    wl.workload,
                    cmp.variant,
                    model.baseline,
                    describe_metric(wl)
                );
                let title = super::layout::wrap(&title, "", "  ");
                blocks.push(format!("{title}{}", ascii_table(&comparison_rows(model, cmp))));
            }
            if let Some(rows) = retention_rows(wl) {
                let title = format!(
                    "{}: retention, {} at each level / at the lowest",
                    wl.workload, wl.metric
                );
                blocks.push(format!("{title}\n{}", ascii_table(&rows)));
            }
            let title = format!("{}: what explains each cell (means per run)", wl.workload);
            blocks.push(format!("{title}\n{}", ascii_table(&cell_rows(wl))));
            if let Some(rows) = kvm_rows(wl) {
                let title = format!("{}: KVM counters of guest 0's VM (mean per run)", wl.workload);
                blocks.push(format!("{title}\n{}", ascii_table(&rows)));
            }
            if let Some(rows) = super::kvm_rate_rows(wl) {
                let title = format!(
                    "{}: KVM counters of guest 0's VM (per second of run)",
                    wl.workload
                );
                blocks.push(format!("{title}\n{}", ascii_table(&rows)));
            }
            let notes: String = notes(model, wl)
                .iter()
                .map(|n| super::layout::wrap(n, "  ", "    "))
                .collect();
            blocks.push(notes);
            workloads.push(blocks.join("\n"));
        }
        let mut text = workloads.join("\n");
        for line in super::sweep_lines(model) {
            text.push('\n');
            text.push_str(&super::layout::wrap(&line, "", "  "));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{Format, ReportOptions};
    use crate::testing::{journal, render};

    #[test]
    fn renders_the_published_layout() {
        let text = render(&journal(), Format::Table, &ReportOptions::default()).unwrap();
        // Ratios and p: the fixture's records have no slots, so each row is Welch's test on the
        //   runs' logarithms (scipy.stats.ttest_ind(log(patched), log(base), equal_var=False)):
        //   p hackbench 0.5x 0.003543624615619606, 1x 0.5732150885277965; lock 0.5x
        //   0.07395008761239544, 1x 0.0002148051050902624; Holm over the 4: 0.0106, 0.5732,
        //   0.1479, 0.0009 (statsmodels multipletests(method='holm')). Each interval at its Holm
        //   step's level: lock 1x (smallest p) 1 - 0.05/4, hackbench 0.5x 1 - 0.05/3, and from
        //   lock 0.5x on (2 × 0.074 ≥ 0.05: Holm stops) 1 - 0.05/2 (scipy's ttest_ind(…)
        //   .confidence_interval(level), exponentiated: stats::cells' test). %improvement is the
        //   ratio's: hackbench 0.5x (1 - 0.90008) × 100 = +9.99% (lower is better).
        // gmean: sqrt(10*20) = 14.1421, sqrt(9*20.5) = 13.5831 → +3.95% (lower is better).
        // Cell table: vCPU wait (0.02+0.04+0.06)/3 = 4.0 %, (0.42+0.44+0.46)/3 = 44.0 %;
        // cs vol (50+51+52)/3 = 51, (100+101+102)/3 = 101; halt exits (1000+2000+3000)/3;
        // other load (busy ticks - vCPU run) / total = 40 / 400 = 10 % in every run.
        // Retention (1x / 0.5x, log-Welch over runs): base hackbench gmean(20, 21, 19) /
        //   gmean(10, 10.2, 9.8) = 1.999.
        let expected = "\
hackbench: patched vs base (seconds, lower is better; interval 98.3 % at 0.5x; 97.5 % at 1x)
+-------+---------+--------+---------+--------+--------------+----------------------+----------+---------------+
| oc    |    base |  stdev | patched |  stdev | %improvement |           ratio [CI] | p (Holm) |    conclusion |
+=======+=========+========+=========+========+==============+======================+==========+===============+
| 0.5x  | 10.0000 | 0.2000 |  9.0000 | 0.1000 |       +9.99% | 0.900 [0.846, 0.958] | 0.0106 * |       differs |
| 1x    | 20.0000 | 1.0000 | 20.5000 | 1.0000 |       -2.50% | 1.025 [0.890, 1.180] |   0.5732 | not concluded |
| gmean | 14.1421 |        | 13.5831 |        |       +3.95% |                      |          |               |
+-------+---------+--------+---------+--------+--------------+----------------------+----------+---------------+

hackbench: retention, seconds at each level / at the lowest
+---------+----+------+----------------------+---------------+
| variant | oc |   vs |       ratio [95% CI] |         units |
+=========+====+======+======================+===============+
| base    | 1x | 0.5x | 1.999 [1.795, 2.226] | 3+3 bring-ups |
| patched | 1x | 0.5x | 2.276 [2.031, 2.551] | 3+3 bring-ups |
+---------+----+------+----------------------+---------------+

hackbench: what explains each cell (means per run)
+---------+------+---+---------+-----------+-------+------------+--------------+
| variant | oc   | n | seconds | vCPU wait | steal | other load | other guests |
+=========+======+===+=========+===========+=======+============+==============+
| base    | 0.5x | 3 | 10.0000 |         - |     - |          - |      11.0000 |
| base    | 1x   | 3 | 20.0000 |         - |     - |          - |            - |
| patched | 0.5x | 3 |  9.0000 |         - |     - |          - |            - |
| patched | 1x   | 3 | 20.5000 |         - |     - |          - |            - |
+---------+------+---+---------+-----------+-------+------------+--------------+

  runs per cell: n=3 (every variant)
  ratio = variant / base over the design's units (rounds of variants sharing guests, bring-up pairs of variants with
    their own): geometric mean, %improvement its, signed so + is better; its interval is the one its conclusion was
    judged by, at the level of the row's Holm step over the report's 4 tested comparisons (the title says it): it
    excludes 1 exactly where the row differs (unadjusted 95% intervals: report.json, CSV); differs: p (Holm) < 0.05 (*);
    equivalent: both one-sided tests against ±5% (0.952..1.050, symmetric in log space) below 0.05 after Holm, i.e. the
    row's (1 - 2α) interval within it; differs, within ±5%: both; otherwise not concluded
  patched: ratios over 3+3 bring-ups at every level
  patched at 0.5x: unpaired: fewer than 2 blocks with both sides' results (or two sweeps compared)
  patched at 1x: unpaired: fewer than 2 blocks with both sides' results (or two sweeps compared)
  patched: attempts rejected by self-checks (patched · base): 0/3 · 0/4 at 0.5x; empty slots: 0 · 1 at 0.5x
  vCPU wait = host run-queue wait of guest 0's vCPU threads / run wall time; every vCPU busy: 1 - 1/L at L >= 1x
  vCPU wait: not recorded (the record has no vcpu_sched)
  steal: not recorded
  other load = pinned host CPUs' time spent on anything but this run's vCPUs (a shared host's other work)
  other load: not recorded
  KVM counters: not recorded
  base at 0.5x: 1 failed run(s) excluded

lock-ticket: patched vs base (ops_per_sec, higher is better; interval 97.5 % at 0.5x; 98.8 % at 1x)
+-------+---------+--------+---------+--------+--------------+----------------------+----------+---------------+
| oc    |    base |  stdev | patched |  stdev | %improvement |           ratio [CI] | p (Holm) |    conclusion |
+=======+=========+========+=========+========+==============+======================+==========+===============+
| 0.5x  | 1000.00 | 100.00 | 1200.00 | 100.00 |      +20.12% | 1.201 [0.919, 1.571] |   0.1479 | not concluded |
| 1x    |  500.00 |  20.00 |  800.00 |  20.00 |      +60.05% | 1.601 [1.401, 1.829] | 0.0009 * |       differs |
| gmean |  707.11 |        |  979.80 |        |      +38.56% |                      |          |               |
+-------+---------+--------+---------+--------+--------------+----------------------+----------+---------------+

lock-ticket: retention, ops_per_sec at each level / at the lowest
+---------+----+------+----------------------+---------------+
| variant | oc |   vs |       ratio [95% CI] |         units |
+=========+====+======+======================+===============+
| base    | 1x | 0.5x | 0.501 [0.404, 0.622] | 3+3 bring-ups |
| patched | 1x | 0.5x | 0.668 [0.553, 0.806] | 3+3 bring-ups |
+---------+----+------+----------------------+---------------+

lock-ticket: what explains each cell (means per run)
+---------+------+---+-------------+-----------+-------+------------+------------+--------+--------+----------+
| variant | oc   | n | ops_per_sec | vCPU wait | steal | other load | contention |   jain | cs vol | cs invol |
+=========+======+===+=============+===========+=======+============+============+========+========+==========+
| base    | 0.5x | 3 |     1000.00 |      4.0% |  5.0% |      10.0% |     0.2500 | 0.9900 |     51 |      102 |
| base    | 1x   | 3 |      500.00 |     44.0% |  5.0% |      10.0% |     0.5000 | 0.7500 |    101 |      202 |
| patched | 0.5x | 3 |     1200.00 |      4.0% |  5.0% |      10.0% |     0.2000 | 0.9800 |     51 |      102 |
| patched | 1x   | 3 |      800.00 |     44.0% |  5.0% |      10.0% |     0.4000 | 0.9000 |    101 |      202 |
+---------+------+---+-------------+-----------+-------+------------+------------+--------+--------+----------+

lock-ticket: KVM counters of guest 0's VM (mean per run)
+---------+------+------------+-------------+-------------+-------------+-------------+---------------+------------+
| variant | oc   | halt exits | halt polled | pv-yield hc | pv-yield ok | preempt rep | preempt other | all hcalls |
+=========+======+============+=============+=============+=============+=============+===============+============+
| base    | 0.5x |       2000 |           - |           7 |           - |           - |             - |          - |
| base    | 1x   |       2000 |           - |           7 |           - |           - |             - |          - |
| patched | 0.5x |       2000 |           - |           7 |           - |           - |             - |          - |
| patched | 1x   |       2000 |           - |           7 |           - |           - |             - |          - |
+---------+------+------------+-------------+-------------+-------------+-------------+---------------+------------+

lock-ticket: KVM counters of guest 0's VM (per second of run)
+---------+------+------------+-------------+-------------+-------------+-------------+---------------+------------+
| variant | oc   | halt exits | halt polled | pv-yield hc | pv-yield ok | preempt rep | preempt other | all hcalls |
+=========+======+============+=============+=============+=============+=============+===============+============+
| base    | 0.5x |       1000 |           - |         3.5 |           - |           - |             - |          - |
| base    | 1x   |       1000 |           - |         3.5 |           - |           - |             - |          - |
| patched | 0.5x |       1000 |           - |         3.5 |           - |           - |             - |          - |
| patched | 1x   |       1000 |           - |         3.5 |           - |           - |             - |          - |
+---------+------+------------+-------------+-------------+-------------+-------------+---------------+------------+

  runs per cell: n=3 (every variant)
  ratio = variant / base over the design's units (rounds of variants sharing guests, bring-up pairs of variants with
    their own): geometric mean, %improvement its, signed so + is better; its interval is the one its conclusion was
    judged by, at the level of the row's Holm step over the report's 4 tested comparisons (the title says it): it
    excludes 1 exactly where the row differs (unadjusted 95% intervals: report.json, CSV); differs: p (Holm) < 0.05 (*);
    equivalent: both one-sided tests against ±5% (0.952..1.050, symmetric in log space) below 0.05 after Holm, i.e. the
    row's (1 - 2α) interval within it; differs, within ±5%: both; otherwise not concluded
  patched: ratios over 3+3 bring-ups at every level
  patched at 0.5x: unpaired: fewer than 2 blocks with both sides' results (or two sweeps compared)
  patched at 1x: unpaired: fewer than 2 blocks with both sides' results (or two sweeps compared)
  vCPU wait = host run-queue wait of guest 0's vCPU threads / run wall time; every vCPU busy: 1 - 1/L at L >= 1x
  other load = pinned host CPUs' time spent on anything but this run's vCPUs (a shared host's other work)
  cs vol / cs invol: context switches of the workload's threads inside the guest, mean per run
  pv-yield hc / ok = KVM's directed_yield_attempted / _successful: PV sched-yield hypercalls (KVM_HC_SCHED_YIELD) made /
    that yielded to the target vCPU; pause-loop exits are not in them
  PLE (pause-loop exits): not measured: KVM has no statistic of them (kvm_vcpu_on_spin); only the host's kvm:kvm_exit
    (PAUSE_INSTRUCTION / pause) and kvm_ple_window_update tracepoints show them
  all hcalls = every hypercall number together (spinlock kicks, PV IPIs, sched-yield, ...); by number: not measured
    (KVM's stats do not split them; the host's kvm:kvm_hypercall tracepoint would)
  preempt rep / other = vCPU preemptions KVM could / could not flag in kvm-steal-time's `preempted` (what the guest's
    vcpu_is_preempted reads)

── verdict ─────────────────────────────────────────────────────────────────────────────────────────────────────────────
interval: 97.5–98.8 %, adjusted for 4 comparisons (Holm, α 0.05; each row at its step's level)
equivalent: the row's 97.5 % interval within ±5 % (0.952–1.050), both one-sided tests at its step's level
rejected: attempts the self-checks refused, of all attempts, variant · baseline; empty: slots given up
hackbench (seconds, lower is better): each variant / base
  0.5x  patched  0.900 [0.846, 0.958]  98.3 %  differs: 10.0 % better  3+3 bring-ups; rejected 0/3 · 0/4; empty 0 · 1
  1x    patched  1.025 [0.890, 1.180]  97.5 %  not concluded           3+3 bring-ups; rejected 0/3 · 0/3
  retention (seconds at each level / at 0.5x): base 1x 1.999 [1.795, 2.226] · patched 1x 2.276 [2.031, 2.551]
  retention against base's (from the comparisons at both levels, 95 %): patched 1x 1.139 [1.020, 1.272] more
lock-ticket (ops_per_sec, higher is better): each variant / base
  0.5x  patched  1.201 [0.919, 1.571]  97.5 %  not concluded           3+3 bring-ups
  1x    patched  1.601 [1.401, 1.829]  98.8 %  differs: 60.1 % better  3+3 bring-ups
  retention (ops_per_sec at each level / at 0.5x): base 1x 0.501 [0.404, 0.622] · patched 1x 0.668 [0.553, 0.806]
  retention against base's (from the comparisons at both levels, 95 %): patched 1x 1.332 [1.082, 1.640] more
";
        assert_eq!(text, expected);
    }
    #[test]
    fn ten_variants_stay_within_120_columns() {
        // spinlock-variants' ten variants: the old per-variant column pairs made the
        // contention/fairness table 21 columns wide and the other-guests table 31.
        let names = [
            "ticket",
            "tas",
            "ttas",
            "mcs",
            "clh",
            "qspinlock",
            "pticket",
            "spin_park",
            "futex",
            "pthread",
        ];
        let mut j = journal();
        j.header.baseline = "ticket".into();
        j.header.variants = names.iter().map(|n| n.to_string()).collect();
        let base: Vec<_> = j.runs.iter().filter(|r| r.variant == "base").cloned().collect();
        j.runs.clear();
        for n in names {
            j.runs.extend(base.iter().map(|r| crate::journal::RunRecord {
                variant: n.into(),
                ..r.clone()
            }));
        }
        let text = render(&j, Format::Table, &ReportOptions::default()).unwrap();
        for line in text.lines() {
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert!(text.contains("hackbench: pthread vs ticket"));
        let rows = |title: &str| {
            let block = text.split(title).nth(1).unwrap();
            block
                .split("\n\n")
                .next()
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("| "))
                .count()
        };
        // Header plus one row per variant × level.
        assert_eq!(rows("lock-ticket: what explains each cell"), 1 + 10 * 2);
        assert_eq!(rows("lock-ticket: KVM counters"), 1 + 10 * 2);
        assert!(text.contains("| spin_park | 1x   | 3 |"), "{text}");
    }
}
