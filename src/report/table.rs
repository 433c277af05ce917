//! Terminal tables (comfy-table) in the published layout:
//! `oc | base | stdev | patched | stdev | %improvement | p`, one table per workload and
//! non-baseline variant, plus a fairness/contention table for lock workloads.

use comfy_table::{CellAlignment, ContentArrangement, ContentLineStyle, LineStyle, Table, TableStyle};

use super::{Exporter, comparison_rows, describe_metric, fairness_rows, notes, single_rows};
use crate::stats::cells::Model;

pub struct TableExporter;

/// comfy-table's `ASCII_FULL_CONDENSED` with column junctions in the header rule too.
const STYLE: TableStyle = TableStyle::new()
    .top_border(LineStyle::new('+', '-', '+', '+'))
    .header_lines(ContentLineStyle::new('|', '|', '|'))
    .header_separator(LineStyle::new('+', '=', '+', '+'))
    .content_lines(ContentLineStyle::new('|', '|', '|'))
    .bottom_border(LineStyle::new('+', '-', '+', '+'));

/// A plain-ASCII table (pastes cleanly into mail), first column left-aligned, numbers right.
pub fn ascii_table(rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_style(STYLE)
        .set_content_arrangement(ContentArrangement::Disabled)
        .force_no_tty();
    let mut rows = rows.iter();
    if let Some(head) = rows.next() {
        t.set_header(head);
    }
    for r in rows {
        t.add_row(r);
    }
    for (i, col) in t.column_iter_mut().enumerate() {
        col.set_cell_alignment(if i == 0 {
            CellAlignment::Left
        } else {
            CellAlignment::Right
        });
    }
    let mut s = t.to_string();
    s.push('\n');
    s
}

impl Exporter for TableExporter {
    fn render(&self, model: &Model) -> anyhow::Result<String> {
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
                let title = format!(
                    "{}: {} vs {} ({})",
                    wl.workload,
                    cmp.variant,
                    model.baseline,
                    describe_metric(wl)
                );
                blocks.push(format!("{title}\n{}", ascii_table(&comparison_rows(model, cmp))));
            }
            if wl.lock {
                let title = format!(
                    "{}: contention rate and Jain's fairness index (mean per cell)",
                    wl.workload
                );
                blocks.push(format!("{title}\n{}", ascii_table(&fairness_rows(wl))));
            }
            let notes: String = notes(model, wl).iter().map(|n| format!("  {n}\n")).collect();
            blocks.push(notes);
            workloads.push(blocks.join("\n"));
        }
        Ok(workloads.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{Format, ReportOptions, render};
    use crate::stats::cells::tests::journal;

    #[test]
    fn renders_the_published_layout() {
        let text = render(&journal(), Format::Table, &ReportOptions::default()).unwrap();
        // p values: scipy.stats.ttest_ind(base, patched, equal_var=False).pvalue →
        //   hackbench 0.5x 0.004797999699128008, 1x 0.5733922538253555;
        //   lock 0.5x 0.07048399691021992, 1x 5.16503636448792e-05.
        // gmean: sqrt(10*20) = 14.1421, sqrt(9*20.5) = 13.5831 → +3.95% (lower is better).
        let expected = "\
hackbench: patched vs base (seconds, lower is better)
+-------+---------+--------+---------+--------+--------------+----------+
| oc    |    base |  stdev | patched |  stdev | %improvement |        p |
+=======+=========+========+=========+========+==============+==========+
| 0.5x  | 10.0000 | 0.2000 |  9.0000 | 0.1000 |      +10.00% | 0.0048 * |
| 1x    | 20.0000 | 1.0000 | 20.5000 | 1.0000 |       -2.50% |   0.5734 |
| gmean | 14.1421 |        | 13.5831 |        |       +3.95% |          |
+-------+---------+--------+---------+--------+--------------+----------+

  runs per cell: base n=3, patched n=3; p: Welch's t-test, * = p < 0.05
  base at 0.5x: 1 failed run(s) excluded

lock-ticket: patched vs base (ops_per_sec, higher is better)
+-------+---------+--------+---------+--------+--------------+-----------+
| oc    |    base |  stdev | patched |  stdev | %improvement |         p |
+=======+=========+========+=========+========+==============+===========+
| 0.5x  | 1000.00 | 100.00 | 1200.00 | 100.00 |      +20.00% |    0.0705 |
| 1x    |  500.00 |  20.00 |  800.00 |  20.00 |      +60.00% | <0.0001 * |
| gmean |  707.11 |        |  979.80 |        |      +38.56% |           |
+-------+---------+--------+---------+--------+--------------+-----------+

lock-ticket: contention rate and Jain's fairness index (mean per cell)
+------+-----------------+--------------------+-----------+--------------+
| oc   | base contention | patched contention | base jain | patched jain |
+======+=================+====================+===========+==============+
| 0.5x |          0.2500 |             0.2000 |    0.9900 |       0.9800 |
| 1x   |          0.5000 |             0.4000 |    0.7500 |       0.9000 |
+------+-----------------+--------------------+-----------+--------------+

  runs per cell: base n=3, patched n=3; p: Welch's t-test, * = p < 0.05
";
        assert_eq!(text, expected);
    }
    #[test]
    fn more_variants_each_against_the_baseline() {
        let mut j = journal();
        j.header.variants.push("pv".into());
        for r in j.runs.clone().into_iter().filter(|r| r.variant == "patched") {
            j.runs.push(crate::sweep::journal::RunRecord {
                variant: "pv".into(),
                ..r
            });
        }
        let text = render(&j, Format::Table, &ReportOptions::default()).unwrap();
        assert!(text.contains("hackbench: patched vs base"));
        assert!(text.contains("hackbench: pv vs base"));
        assert!(
            text.contains("| oc   | base contention | patched contention | pv contention |"),
            "{text}"
        );
    }
}
