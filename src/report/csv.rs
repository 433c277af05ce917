//! CSV: one row per workload × variant × level (long format, for spreadsheets and pandas),
//! then per non-baseline variant a `geomean` row (`kind` tells them apart; a geomean row has
//! no level). Non-baseline rows carry the comparison against the baseline at that level, and
//! the smallest effect that comparison would detect (`mde_pct`, power 0.8) and what it
//! concludes (`conclusion`: differs, no difference, too few runs, untested), and
//! every cell row what explains it: vCPU wait, guest steal (empty with a note when not
//! measured), contention, Jain, context switches, other guests, KVM counters.

use super::{Exporter, KVM_COLUMNS};
use crate::journal::Better;
use crate::stats::cells::{Cell, Comparison, Model, Row, WorkloadModel};

pub struct CsvExporter;

/// The fixed columns; the KVM counters of [`KVM_COLUMNS`] follow as `kvm_<name>`.
pub const COLUMNS: [&str; 41] = [
    "kind",
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
    "base_mean",
    "improvement_pct",
    "t",
    "df",
    "p",
    "significant",
    "mde_pct",
    "mde_df",
    "conclusion",
    "contention_rate",
    "jain",
    "failed",
    "vcpu_wait_share",
    "vcpu_wait_n",
    "vcpu_wait_note",
    "guest_steal_share",
    "guest_steal_note",
    "host_other_share",
    "host_other_note",
    "ctxsw_voluntary",
    "ctxsw_involuntary",
    "other_guests_mean",
    "other_guests_n",
    "kvm_note",
];

/// Stretched lock holds and hand-overs (`stats::preemption`), after the KVM counters; empty for
/// workloads without a lock, the note saying why a lock cell has none.
pub const PREEMPTION_COLUMNS: [&str; 7] = [
    "stretched_hold_share",
    "hold_lost_share",
    "stretched_hold_vcpu_share",
    "stretched_handover_share",
    "handover_lost_share",
    "stretched_handover_vcpu_share",
    "preemption_note",
];

/// Every column name, in order.
pub fn header() -> Vec<String> {
    COLUMNS
        .iter()
        .map(|c| c.to_string())
        .chain(KVM_COLUMNS.iter().map(|(k, _)| format!("kvm_{k}")))
        .chain(PREEMPTION_COLUMNS.iter().map(|c| c.to_string()))
        .collect()
}

fn preemption_fields(c: &Cell) -> Vec<String> {
    let Some(p) = &c.preemption else {
        return vec![String::new(); PREEMPTION_COLUMNS.len()];
    };
    let note = [&p.stretched_holds, &p.stretched_handovers]
        .iter()
        .filter_map(|m| m.unavailable.as_ref())
        .next()
        .cloned();
    vec![
        num(p.stretched_holds.mean()),
        num(p.hold_lost.mean()),
        num(p.holds_vcpu.mean()),
        num(p.stretched_handovers.mean()),
        num(p.handover_lost.mean()),
        num(p.handovers_vcpu.mean()),
        text(note.as_ref()),
    ]
}

/// Quotes a field if it contains a comma, quote or line break (RFC 4180).
pub(crate) fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn num(x: Option<f64>) -> String {
    x.map(|x| x.to_string()).unwrap_or_default()
}

fn text(x: Option<&String>) -> String {
    x.map(|s| field(s)).unwrap_or_default()
}

/// The columns every row of a workload starts with: kind, workload, command, metric, better.
fn lead(kind: &str, wl: &WorkloadModel) -> Vec<String> {
    vec![
        kind.into(),
        field(&wl.workload),
        field(&wl.command),
        field(&wl.metric),
        match wl.better {
            Better::Higher => "higher".into(),
            Better::Lower => "lower".into(),
        },
    ]
}

fn row(model: &Model, wl: &WorkloadModel, variant: &str, c: &Cell, cmp: Option<&Row>) -> Vec<String> {
    let s = c.summary.as_ref();
    let w = cmp.and_then(|r| r.welch);
    let mut r = lead("cell", wl);
    r.extend([
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
        num(cmp.and_then(|r| r.base.as_ref()).map(|b| b.mean)),
        num(cmp.and_then(|r| r.improvement_pct)),
        num(w.map(|w| w.t)),
        num(w.map(|w| w.df)),
        num(w.map(|w| w.p)),
        cmp.and_then(|r| r.significant)
            .map(|b| b.to_string())
            .unwrap_or_default(),
        num(cmp.and_then(|r| r.detectable).map(|d| d.mde * 100.0)),
        num(cmp.and_then(|r| r.detectable).map(|d| d.df)),
        cmp.map(|r| r.conclusion().words().to_string())
            .unwrap_or_default(),
        num(c.contention_rate),
        num(c.jain),
        c.failed.to_string(),
        num(c.vcpu_wait.mean()),
        c.vcpu_wait.samples.len().to_string(),
        text(c.vcpu_wait.unavailable.as_ref()),
        num(c.guest_steal.mean()),
        text(c.guest_steal.unavailable.as_ref()),
        num(c.host_other.mean()),
        text(c.host_other.unavailable.as_ref()),
        num(c.ctxsw_voluntary),
        num(c.ctxsw_involuntary),
        num(c.other_guests.as_ref().map(|s| s.mean)),
        c.other_guests.as_ref().map_or(0, |s| s.n).to_string(),
        text(c.kvm.unavailable.as_ref()),
    ]);
    r.extend(
        KVM_COLUMNS
            .iter()
            .map(|(k, _)| num(c.kvm.counters.get(*k).copied())),
    );
    r.extend(preemption_fields(c));
    r
}

/// A comparison's geometric mean over the levels: `mean` is the variant's, `base_mean` the
/// baseline's, `n` the number of levels; the columns that have no meaning here are empty.
fn geomean_row(model: &Model, wl: &WorkloadModel, cmp: &Comparison) -> Option<Vec<String>> {
    let g = cmp.geomean.as_ref()?;
    let mut r = lead("geomean", wl);
    r.extend([
        field(&cmp.variant),
        field(&model.baseline),
        String::new(),
        g.levels.to_string(),
    ]);
    r.push(g.variant.to_string());
    r.extend(std::iter::repeat_n(String::new(), 7));
    r.push(g.base.to_string());
    r.push(g.improvement_pct.to_string());
    r.resize(header().len(), String::new());
    Some(r)
}

impl Exporter for CsvExporter {
    fn render(&self, model: &Model) -> anyhow::Result<String> {
        let mut out = header().join(",");
        out.push('\n');
        let mut line = |r: Vec<String>| {
            out.push_str(&r.join(","));
            out.push('\n');
        };
        for wl in &model.workloads {
            for s in &wl.series {
                let cmp = wl.comparisons.iter().find(|c| c.variant == s.variant);
                for (i, c) in s.cells.iter().enumerate() {
                    line(row(model, wl, &s.variant, c, cmp.map(|cmp| &cmp.rows[i])));
                }
            }
            for cmp in &wl.comparisons {
                if let Some(r) = geomean_row(model, wl, cmp) {
                    line(r);
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
        let head = header();
        assert_eq!(rows[0], head);
        // 2 workloads × 2 variants × 2 levels, then one geomean row per workload.
        assert_eq!(rows.len(), 1 + 8 + 2);
        assert!(rows.iter().all(|r| r.len() == head.len()), "ragged rows");
        let col = |name: &str| head.iter().position(|c| c == name).unwrap();
        let patched = rows
            .iter()
            .find(|r| r[col("kind")] == "cell" && r[col("variant")] == "patched" && r[col("level")] == "0.5")
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
        // base at 0.5x: vCPU wait (0.02 + 0.04 + 0.06) / 3 over 3 runs, steal 0.05, halts 2000.
        assert!((lock[col("vcpu_wait_share")].parse::<f64>().unwrap() - 0.04).abs() < 1e-12);
        assert_eq!(lock[col("vcpu_wait_n")], "3");
        assert!((lock[col("guest_steal_share")].parse::<f64>().unwrap() - 0.05).abs() < 1e-12);
        assert_eq!(lock[col("kvm_halt_exits")], "2000");
        assert!((lock[col("host_other_share")].parse::<f64>().unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(
            lock[col("base_mean")],
            "",
            "the baseline's own row compares with nothing"
        );
        // hackbench had no telemetry: empty numbers, and a note saying why.
        assert_eq!(base[col("vcpu_wait_share")], "");
        assert!(base[col("vcpu_wait_note")].contains("not recorded"));
        // The geomean rows: hackbench base 14.1421, patched 13.5831, +3.95 % (see cells.rs).
        let g = rows
            .iter()
            .find(|r| r[col("kind")] == "geomean" && r[col("workload")].starts_with("hackbench"))
            .unwrap();
        assert_eq!(
            (
                g[col("variant")].as_str(),
                g[col("level")].as_str(),
                g[col("n")].as_str()
            ),
            ("patched", "", "2")
        );
        assert!((g[col("mean")].parse::<f64>().unwrap() - 13.583077707206124).abs() < 1e-9);
        assert!((g[col("base_mean")].parse::<f64>().unwrap() - 14.142135623730951).abs() < 1e-9);
        assert!((g[col("improvement_pct")].parse::<f64>().unwrap() - 3.9531364385072787).abs() < 1e-9);
        assert_eq!(g[col("stdev")], "");
        // What each comparison can conclude (scipy.stats.nct, see stats::power's tests).
        let patched_1x = rows
            .iter()
            .find(|r| {
                r[col("kind")] == "cell"
                    && r[col("workload")].starts_with("hackbench")
                    && r[col("variant")] == "patched"
                    && r[col("level")] == "1"
            })
            .unwrap();
        assert!((patched_1x[col("mde_pct")].parse::<f64>().unwrap() - 15.35446133181844).abs() < 1e-3);
        assert_eq!(patched_1x[col("mde_df")], "4");
        assert_eq!(patched_1x[col("conclusion")], "too few runs");
        assert_eq!(
            base[col("mde_pct")],
            "",
            "the baseline's own row compares with nothing"
        );
    }

    #[test]
    fn lock_cells_carry_stretched_holds_and_handovers_and_other_workloads_none() {
        use crate::stats::preemption::tests::{preemption_json, with_payload};
        let mut j = journal();
        for r in j.runs.iter_mut().filter(|r| r.workload == "lock-ticket") {
            // 1x: 20 % of hand-overs stretched, losing 40 % of the run; 0.5x: 1 % / 1 %.
            let (o, lost) = if r.level < 1.0 { (5, 0.01) } else { (100, 0.4) };
            with_payload(
                r,
                serde_json::json!({"preemption": preemption_json(10, o, 0.1, lost), "preemption_unavailable": null}),
            );
        }
        let text = render(&j, Format::Csv, &ReportOptions::default()).unwrap();
        let rows = parse(&text);
        let head = header();
        assert!(rows.iter().all(|r| r.len() == head.len()), "ragged rows");
        let col = |name: &str| head.iter().position(|c| c == name).unwrap();
        let lock_1x = rows
            .iter()
            .find(|r| {
                r[col("workload")] == "lock-ticket" && r[col("level")] == "1" && r[col("kind")] == "cell"
            })
            .unwrap();
        assert!((lock_1x[col("stretched_hold_share")].parse::<f64>().unwrap() - 0.01).abs() < 1e-12);
        assert!((lock_1x[col("stretched_handover_share")].parse::<f64>().unwrap() - 0.2).abs() < 1e-12);
        assert!((lock_1x[col("handover_lost_share")].parse::<f64>().unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(
            lock_1x[col("stretched_handover_vcpu_share")]
                .parse::<f64>()
                .unwrap(),
            1.0
        );
        assert_eq!(lock_1x[col("preemption_note")], "");
        let hb = rows.iter().find(|r| r[col("workload")] == "hackbench").unwrap();
        assert_eq!(hb[col("stretched_hold_share")], "");

        // The text table: four columns right after the vCPU wait columns, for the lock only.
        let m = crate::report::model(&j, &ReportOptions::default());
        let lock = m.workloads.iter().find(|w| w.workload == "lock-ticket").unwrap();
        let t = crate::report::cell_rows(lock);
        assert_eq!(t[0][7..11], crate::report::PREEMPTION_COLUMNS.map(String::from));
        let row_1x = t.iter().find(|r| r[0] == "base" && r[1] == "1x").unwrap();
        assert_eq!(row_1x[9..11], ["20.00%", "40.00%"]);
        let hb = m.workloads.iter().find(|w| w.workload == "hackbench").unwrap();
        assert!(
            !crate::report::cell_rows(hb)[0]
                .iter()
                .any(|h| h.contains("stretched"))
        );
        // JSON carries the cell's figures; a cell without a lock has no `preemption` at all.
        let v: serde_json::Value =
            serde_json::from_str(&render(&j, Format::Json, &ReportOptions::default()).unwrap()).unwrap();
        let cells = |w: usize| v["workloads"][w]["series"][0]["cells"][1].clone();
        assert!(cells(0).get("preemption").is_none());
        let mean = cells(1)["preemption"]["stretched_handovers"]["summary"]["mean"]
            .as_f64()
            .unwrap();
        assert!((mean - 0.2).abs() < 1e-12, "{mean}");
    }
}
