//! CSV: one row per workload × variant × level (long format, for spreadsheets and pandas).
//! Non-baseline rows carry the comparison against the baseline at that level.

use super::Exporter;
use crate::stats::cells::{Cell, Model, Row, WorkloadModel};
use crate::sweep::journal::Better;

pub struct CsvExporter;

pub const COLUMNS: [&str; 24] = [
    "workload",
    "command",
    "metric",
    "better",
    "variant",
    "baseline",
    "level",
    "n",
    "mean",
    "stdev",
    "cv",
    "median",
    "min",
    "max",
    "ci95_low",
    "ci95_high",
    "improvement_pct",
    "t",
    "df",
    "p",
    "significant",
    "contention_rate",
    "jain",
    "failed",
];

/// Quotes a field if it contains a comma, quote or line break (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(x: Option<f64>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

fn row(model: &Model, wl: &WorkloadModel, variant: &str, c: &Cell, cmp: Option<&Row>) -> Vec<String> {
    let s = c.summary.as_ref();
    let w = cmp.and_then(|r| r.welch);
    vec![
        field(&wl.workload),
        field(&wl.command),
        field(&wl.metric),
        match wl.better {
            Better::Higher => "higher".into(),
            Better::Lower => "lower".into(),
        },
        field(variant),
        field(&model.baseline),
        c.level.to_string(),
        s.map_or(0, |s| s.n).to_string(),
        num(s.map(|s| s.mean)),
        num(s.and_then(|s| s.stdev)),
        num(s.and_then(|s| s.cv)),
        num(s.map(|s| s.median)),
        num(s.map(|s| s.min)),
        num(s.map(|s| s.max)),
        num(s.and_then(|s| s.ci95).map(|ci| ci.low)),
        num(s.and_then(|s| s.ci95).map(|ci| ci.high)),
        num(cmp.and_then(|r| r.improvement_pct)),
        num(w.map(|w| w.t)),
        num(w.map(|w| w.df)),
        num(w.map(|w| w.p)),
        cmp.and_then(|r| r.significant)
            .map(|b| b.to_string())
            .unwrap_or_default(),
        num(c.contention_rate),
        num(c.jain),
        c.failed.to_string(),
    ]
}

impl Exporter for CsvExporter {
    fn render(&self, model: &Model) -> anyhow::Result<String> {
        let mut out = COLUMNS.join(",");
        out.push('\n');
        for wl in &model.workloads {
            for s in &wl.series {
                let cmp = wl.comparisons.iter().find(|c| c.variant == s.variant);
                for (i, c) in s.cells.iter().enumerate() {
                    let r = row(model, wl, &s.variant, c, cmp.map(|cmp| &cmp.rows[i]));
                    out.push_str(&r.join(","));
                    out.push('\n');
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Format, ReportOptions, render};
    use crate::stats::cells::tests::journal;

    /// Minimal RFC 4180 reader for the test.
    fn parse(text: &str) -> Vec<Vec<String>> {
        let mut rows = vec![];
        let (mut row, mut f, mut quoted) = (vec![], String::new(), false);
        let mut chars = text.chars().peekable();
        while let Some(ch) = chars.next() {
            match (ch, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    f.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => row.push(std::mem::take(&mut f)),
                ('\n', false) => {
                    row.push(std::mem::take(&mut f));
                    rows.push(std::mem::take(&mut row));
                }
                (c, _) => f.push(c),
            }
        }
        rows
    }

    #[test]
    fn parses_back() {
        let mut j = journal();
        j.header.scenario = "x".into();
        let wl = j.header.workloads.remove("hackbench").unwrap();
        j.header.workloads.insert("hackbench, \"quoted\"".into(), wl);
        for r in &mut j.runs {
            if r.workload == "hackbench" {
                r.workload = "hackbench, \"quoted\"".into();
            }
        }
        let text = render(&j, Format::Csv, &ReportOptions::default()).unwrap();
        let rows = parse(&text);
        assert_eq!(rows[0], COLUMNS);
        // 2 workloads × 2 variants × 2 levels
        assert_eq!(rows.len(), 1 + 8);
        assert!(rows.iter().all(|r| r.len() == COLUMNS.len()));
        let col = |name: &str| COLUMNS.iter().position(|c| *c == name).unwrap();
        let patched = rows
            .iter()
            .find(|r| r[col("variant")] == "patched" && r[col("level")] == "0.5")
            .unwrap();
        assert_eq!(patched[col("workload")], "hackbench, \"quoted\"");
        assert_eq!(patched[col("mean")].parse::<f64>().unwrap(), 9.0);
        assert_eq!(
            patched[col("improvement_pct")].parse::<f64>().unwrap().round(),
            10.0
        );
        assert_eq!(patched[col("significant")], "true");
        let base = &rows[1];
        assert_eq!(
            (
                base[col("variant")].as_str(),
                base[col("improvement_pct")].as_str()
            ),
            ("base", "")
        );
        assert_eq!(base[col("failed")], "1");
        let lock = rows.iter().find(|r| r[col("workload")] == "lock-ticket").unwrap();
        assert!((lock[col("jain")].parse::<f64>().unwrap() - 0.99).abs() < 1e-12);
    }
}
