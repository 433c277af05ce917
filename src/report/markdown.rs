//! Markdown: the same tables as the terminal format, as pipe tables with right-aligned numbers.

use super::layout::pipe_table;
use super::{
    Exporter, ReportInput, cell_rows, comparison_rows, describe_metric, fmt_level, kernel_symbols, kvm_rows,
    notes, retention_rows, single_rows, variants_line,
};
use crate::stats::cells::Model;

pub struct MarkdownExporter;

impl Exporter for MarkdownExporter {
    fn render(&self, input: &ReportInput) -> anyhow::Result<String> {
        let mut text = render_model(&input.model);
        text.push_str(&input.hosts_text());
        text.push_str(&input.kernel_words());
        text.push_str(&kernel_symbols::md_section(&input.symbols));
        text.push_str(&kernel_symbols::compare_md(&input.changed()));
        Ok(text)
    }
}

/// The model's tables as pipe tables, then the sweep's lines.
fn render_model(model: &Model) -> String {
    {
        let levels: Vec<String> = model.levels.iter().map(|l| fmt_level(*l)).collect();
        let mut out = format!(
            "# ocrig: {}\n\nBaseline `{}`; variants {}; overcommit levels {}. \
             %improvement is the ratio's, signed so + is better.\n",
            model.scenario,
            model.baseline,
            variants_line(model, |v| format!("`{v}`")),
            levels.join(", ")
        );
        for wl in &model.workloads {
            out.push_str(&format!(
                "\n## {}\n\n`{}` ({})\n",
                wl.workload,
                wl.command,
                describe_metric(wl)
            ));
            if wl.comparisons.is_empty() {
                out.push('\n');
                out.push_str(&pipe_table(&single_rows(wl)));
            }
            for cmp in &wl.comparisons {
                out.push_str(&format!("\n### {} vs {}\n\n", cmp.variant, model.baseline));
                if let Some(levels) = super::interval_levels(cmp) {
                    out.push_str(&format!(
                        "Intervals at the level each conclusion was tested: {levels}.\n\n"
                    ));
                }
                out.push_str(&pipe_table(&comparison_rows(model, cmp)));
            }
            if let Some(rows) = retention_rows(wl) {
                out.push_str(&format!(
                    "\n### Retention: {} at each level / at the lowest\n\n",
                    wl.metric
                ));
                out.push_str(&pipe_table(&rows));
            }
            out.push_str("\n### What explains each cell (means per run)\n\n");
            out.push_str(&pipe_table(&cell_rows(wl)));
            if let Some(rows) = kvm_rows(wl) {
                out.push_str("\n### KVM counters of guest 0's VM (mean per run)\n\n");
                out.push_str(&pipe_table(&rows));
            }
            if let Some(rows) = super::kvm_rate_rows(wl) {
                out.push_str("\n### KVM counters of guest 0's VM (per second of run)\n\n");
                out.push_str(&pipe_table(&rows));
            }
            out.push('\n');
            for n in notes(model, wl) {
                out.push_str(&format!("- {n}\n"));
            }
        }
        for line in super::sweep_lines(model) {
            out.push_str(&format!("\n{line}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{Format, ReportOptions};
    use crate::testing::{journal, render};

    #[test]
    fn markdown_tables() {
        let md = render(&journal(), Format::Md, &ReportOptions::default()).unwrap();
        // Each interval at its row's Holm level (table.rs's test derives them).
        let expected = "\
### patched vs base

Intervals at the level each conclusion was tested: 98.3 % at 0.5x; 97.5 % at 1x.

| oc | base | stdev | patched | stdev | %improvement | ratio [CI] | p (Holm) | conclusion |
|:---|---:|---:|---:|---:|---:|---:|---:|---:|
| 0.5x | 10.0000 | 0.2000 | 9.0000 | 0.1000 | +9.99% | 0.900 [0.846, 0.958] | 0.0106 * | differs |
| 1x | 20.0000 | 1.0000 | 20.5000 | 1.0000 | -2.50% | 1.025 [0.890, 1.180] | 0.5732 | not concluded |
| gmean | 14.1421 |  | 13.5831 |  | +3.95% |  |  |  |

### Retention: seconds at each level / at the lowest

| variant | oc | vs | ratio [95% CI] | units |
|:---|:---|---:|---:|---:|
| base | 1x | 0.5x | 1.999 [1.795, 2.226] | 3+3 bring-ups |
| patched | 1x | 0.5x | 2.276 [2.031, 2.551] | 3+3 bring-ups |
";
        assert!(md.contains(expected), "got:\n{md}");
        assert!(md.contains("### What explains each cell (means per run)"));
        assert!(md.contains("### KVM counters of guest 0's VM (mean per run)"));
        assert!(
            md.contains("variants `base`, `patched`; overcommit levels 0.5x, 1x."),
            "got:\n{md}"
        );
        // guest 1 reported 11.0 for base at 0.5x; hackbench was journaled without telemetry.
        assert!(
            md.contains("| base | 0.5x | 3 | 10.0000 | - | - | - | 11.0000 |"),
            "got:\n{md}"
        );
        assert!(
            md.contains("| patched | 1x | 3 | 800.00 | 44.0% | 5.0% | 10.0% | 0.4000 | 0.9000 | 101 | 202 |"),
            "got:\n{md}"
        );
    }
}
