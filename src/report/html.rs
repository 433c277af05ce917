//! One self-contained HTML file: per workload an inline SVG plot of the metric vs overcommit
//! level (every run, mean, 95% CI), the cell table (what explains each number), a plot of
//! guest 0's vCPU wait and, for lock workloads, one of Jain's index, the KVM counters where
//! there are any, then the comparison tables. No external assets.

use super::layout::{escape, html_table};
use super::plot::{jain_plot, metric_plot, vcpu_wait_plot};
use super::{
    Exporter, ReportInput, cell_rows, comparison_rows, describe_metric, fmt_level, kernel_symbols, kvm_rows,
    notes, retention_rows, single_rows, variants_line,
};
use crate::stats::cells::Model;

pub struct HtmlExporter;

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0 1em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th:first-child,td:first-child,.label{text-align:left}th{background:#f3f3f3}td.better{color:#08660d}td.worse{color:#a31515}
td.fewruns{background:#fdf0c8}td.nodiff{background:#e3f1e4}td.differs{background:#dde8f7}
.plot svg,.timeline svg{max-width:100%;height:auto}.wide{overflow-x:auto}.notes{color:#555;font-size:.9em}code{background:#f3f3f3;padding:0 .2em}";

impl Exporter for HtmlExporter {
    fn render(&self, input: &ReportInput) -> anyhow::Result<String> {
        let mut out = render_model(&input.model)?;
        // After the model: the runs' vCPU timelines, the guest kernels' profiles, and for
        // `ocrig compare` the profiles set against each other.
        out.push_str(&input.timeline_section());
        out.push_str(&kernel_symbols::html_section(
            &input.symbols,
            input.profiles(),
            input.baseline(),
        )?);
        out.push_str(&kernel_symbols::compare_html(
            &input.changed(),
            input.profiles(),
            input.baseline(),
        )?);
        out.push_str("</body>\n</html>\n");
        Ok(out)
    }
}

/// The document up to its closing tags: heading, overview, per workload its plots and tables,
/// the sweep's lines.
fn render_model(model: &Model) -> anyhow::Result<String> {
    {
        let title = format!("ocrig: {}", model.scenario);
        let levels: Vec<String> = model.levels.iter().map(|l| fmt_level(*l)).collect();
        let mut out = format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n\
             <style>\n{STYLE}\n</style>\n</head>\n<body>\n<h1>{}</h1>\n<p>Baseline <code>{}</code>; variants {}; \
             overcommit levels {}. %improvement is the ratio's, signed so + is better; ratios are variant / baseline over the design's \
             units, each with the interval its conclusion was judged by (Holm-adjusted over the report's comparisons and \
             the looks of its stopping rule, α = {}).</p>\n",
            escape(&title),
            escape(&title),
            escape(&model.baseline),
            variants_line(model, |v| format!("<code>{}</code>", escape(v))),
            escape(&levels.join(", ")),
            model.alpha
        );
        out.push_str(&verdict_section(model));
        let overview: Vec<String> = model
            .workloads
            .iter()
            .filter_map(|wl| super::plot::retention_plot(wl).transpose())
            .collect::<anyhow::Result<_>>()?;
        if !overview.is_empty() {
            out.push_str(
                "<section class=\"overview\">\n<h2>Overview: what each variant keeps under overcommit</h2>\n",
            );
            for svg in overview {
                out.push_str(&format!("<div class=\"plot\">\n{svg}\n</div>\n"));
            }
            out.push_str("</section>\n");
        }
        for wl in &model.workloads {
            out.push_str(&format!(
                "<section>\n<h2>{}</h2>\n<p><code>{}</code> ({})</p>\n",
                escape(&wl.workload),
                escape(&wl.command),
                escape(&describe_metric(wl))
            ));
            // The metric, the published comparison tables and retention, then what explains
            // each cell.
            out.push_str(&format!("<div class=\"plot\">\n{}\n</div>\n", metric_plot(wl)?));
            if wl.comparisons.is_empty() {
                out.push_str(&html_table(&single_rows(wl), None));
            }
            for cmp in &wl.comparisons {
                out.push_str(&format!(
                    "<h3>{} vs {}</h3>\n",
                    escape(&cmp.variant),
                    escape(&model.baseline)
                ));
                if let Some(levels) = super::interval_levels(cmp) {
                    out.push_str(&format!(
                        "<p class=\"notes\">Intervals at the level each conclusion was tested: {}.</p>\n",
                        escape(&levels)
                    ));
                }
                out.push_str(&html_table(&comparison_rows(model, cmp), Some(5)));
            }
            if let Some(rows) = retention_rows(wl) {
                out.push_str("<h3>Retention: each level against the lowest</h3>\n");
                out.push_str(&html_table(&rows, None));
            }
            out.push_str("<h3>What explains each cell (means per run)</h3>\n<div class=\"wide\">\n");
            out.push_str(&html_table(&cell_rows(wl), None));
            out.push_str("</div>\n");
            for svg in [vcpu_wait_plot(wl)?, jain_plot(wl)?].into_iter().flatten() {
                out.push_str(&format!("<div class=\"plot\">\n{svg}\n</div>\n"));
            }
            if let Some(rows) = kvm_rows(wl) {
                out.push_str("<h3>KVM counters of guest 0's VM (mean per run)</h3>\n<div class=\"wide\">\n");
                out.push_str(&html_table(&rows, None));
                out.push_str("</div>\n");
            }
            if let Some(rows) = super::kvm_rate_rows(wl) {
                out.push_str(
                    "<h3>KVM counters of guest 0's VM (per second of run)</h3>\n<div class=\"wide\">\n",
                );
                out.push_str(&html_table(&rows, None));
                out.push_str("</div>\n");
            }
            out.push_str("<ul class=\"notes\">\n");
            for n in notes(model, wl) {
                out.push_str(&format!("<li>{}</li>\n", escape(&n)));
            }
            out.push_str("</ul>\n</section>\n");
        }
        for line in super::sweep_lines(model) {
            out.push_str(&format!("<p class=\"notes\">{}</p>\n", escape(&line)));
        }
        Ok(out)
    }
}

/// The answer first: per workload each variant against the baseline at each level (ratio,
/// interval, conclusion shaded, how much better or worse, the units behind it) and the
/// retention figures, as the terminal's verdict says them.
fn verdict_section(model: &Model) -> String {
    let mut out = String::from("<section class=\"verdict\">\n<h2>Verdict</h2>\n");
    for line in super::verdict::key_lines(model) {
        out.push_str(&format!("<p class=\"notes\">{}</p>\n", escape(&line)));
    }
    let mut any = false;
    for wl in &model.workloads {
        let rows = super::verdict::rows(model, wl);
        let retained = super::verdict::retained(wl);
        if rows.is_empty() && retained.is_empty() {
            continue;
        }
        any = true;
        out.push_str(&format!(
            "<h3>{}: each variant / <code>{}</code> ({})</h3>\n",
            escape(&wl.workload),
            escape(&model.baseline),
            escape(&describe_metric(wl))
        ));
        if !rows.is_empty() {
            let lost = rows.iter().any(|r| r.rejected.is_some());
            let mut head: Vec<String> = [
                "variant",
                "oc",
                "ratio [CI]",
                "CI level",
                "conclusion",
                "so",
                "units",
            ]
            .map(String::from)
            .to_vec();
            if lost {
                head.push("rejected · empty".into());
            }
            let mut table = vec![head];
            table.extend(rows.into_iter().map(|r| {
                // A row not concluded for its sides' rejections says why where "so" goes.
                let so = r.note.or(r.so).unwrap_or_default();
                let mut cells = vec![
                    r.variant,
                    r.level,
                    r.ratio,
                    r.confidence,
                    r.conclusion,
                    so,
                    r.units,
                ];
                if lost {
                    cells.push(r.rejected.unwrap_or_default());
                }
                cells
            }));
            out.push_str(&html_table(&table, None));
        }
        if !retained.is_empty() {
            out.push_str(&format!(
                "<p>Retention ({} at each level / at the lowest): {}</p>\n",
                escape(&wl.metric),
                escape(&retained.join(" · "))
            ));
        }
    }
    out.push_str("</section>\n");
    if any { out } else { String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Format, ReportOptions};
    use crate::testing::{journal, render};

    #[test]
    fn self_contained_with_an_svg_per_workload() {
        let html = render(&journal(), Format::Html, &ReportOptions::default()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
        // The overview: one retention plot per workload; hackbench: one metric plot (no vCPU
        // telemetry); lock-ticket: metric, vCPU wait, Jain.
        assert_eq!(html.matches("<svg").count(), 2 + 4);
        // The answer first: the verdict, then the retention overview, then per workload its
        // comparisons before what explains each cell.
        let verdict = html.split("<section").nth(1).unwrap();
        assert!(verdict.contains("<h2>Verdict</h2>"), "{verdict}");
        assert!(
            verdict.contains(
                "<td>patched</td><td class=\"label\">0.5x</td><td class=\"differs\">0.900 [0.846, 0.958]</td>\
                 <td>98.3 %</td><td class=\"differs\">differs</td><td>10.0 % better</td><td>3+3 bring-ups</td>\
                 <td>rejected 0/3 · 0/4; empty 0 · 1</td>"
            ),
            "{verdict}"
        );
        assert!(verdict.contains("Retention (seconds at each level / at the lowest): base 1x 1.999"));
        // What its intervals are, first.
        assert!(
            verdict.contains(
                "<p class=\"notes\">interval: 97.5–98.8 %, adjusted for 4 comparisons (Holm, α 0.05; each row at \
                 its step&#39;s level)"
            ),
            "{verdict}"
        );
        let overview = html.split("<section").nth(2).unwrap();
        assert!(overview.contains("Overview") && overview.matches("<svg").count() == 2);
        assert!(overview.contains("retention") && overview.contains("kept all (1)"));
        assert!(html.contains("vCPU wait for a host CPU"));
        let mut ordered = 0;
        for section in html.split("<section").skip(2) {
            assert!(section.contains("<svg"), "workload section without a plot");
            if let (Some(compared), Some(explained)) = (
                section.find(" vs base</h3>"),
                section.find("What explains each cell"),
            ) {
                assert!(compared < explained, "comparisons after the explain table");
                ordered += 1;
            }
        }
        assert_eq!(ordered, 2);
        assert!(!html.contains("<script") && !html.contains("href=") && !html.contains("src="));
        assert!(html.contains("<td class=\"better\">+9.99%</td>"));
        assert!(html.contains("<td class=\"worse\">-2.50%</td>"));
        // What each comparison can conclude, shaded.
        // hackbench at 1x: log-Welch over runs (the fixture has no slots), Holm p 0.5732, its
        // interval at 97.5 % (table.rs's test).
        assert!(
            html.contains("<td class=\"fewruns\">1.025 [0.890, 1.180]</td><td>0.5732</td><td class=\"fewruns\">not concluded</td>"),
            "{html}"
        );
        assert!(html.contains("<td class=\"differs\">differs</td>"));
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
