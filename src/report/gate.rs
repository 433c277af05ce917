//! `--fail-on worse[:MARGIN]`: a report as a CI gate. A row fails it when its conclusion is
//! `differs`, on the worse side of the baseline, and the interval that conclusion was judged by
//! lies wholly beyond the margin, read as the verdict reads "9.0 % worse": a ratio under
//! 1 − margin where higher is better (5 %: fewer than 95 % of the baseline's operations), over
//! 1 + margin where lower is (more than 105 % of its time). A row left `not concluded` passes
//! the gate, and is counted, so the job says how much it could not decide.

use crate::stats::cells::{Conclusion, Model};
use crate::vocabulary::Better;

/// What fails the gate: a comparison shown worse than the baseline by more than `margin` (a
/// fraction; 0: any shown worse).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailOn {
    pub margin: f64,
}

impl std::str::FromStr for FailOn {
    type Err = String;

    /// `worse`, `worse:0.05` or `worse:5%`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "'{s}' is not worse[:MARGIN]: e.g. `worse` (any row shown worse), `worse:5%` or `worse:0.05`"
            )
        };
        let (what, margin) = s.split_once(':').map_or((s, None), |(w, m)| (w, Some(m)));
        if what != "worse" {
            return Err(bad());
        }
        let margin = match margin {
            None => 0.0,
            Some(m) => {
                let (digits, scale) = m.strip_suffix('%').map_or((m, 1.0), |d| (d, 100.0));
                let v = digits.trim().parse::<f64>().map_err(|_| bad())? / scale;
                if !(0.0..1.0).contains(&v) {
                    return Err(format!("{}: the margin is a fraction in [0, 1)", bad()));
                }
                v
            }
        };
        Ok(Self { margin })
    }
}

/// One row that failed the gate.
#[derive(Debug, Clone, PartialEq)]
pub struct Worse {
    pub workload: String,
    pub metric: String,
    pub level: f64,
    pub variant: String,
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    pub confidence: f64,
}

/// The gate's verdict on a report's model.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub fail_on: FailOn,
    pub baseline: String,
    pub worse: Vec<Worse>,
    /// Rows the gate judged (every tested comparison row) and those left not concluded.
    pub rows: usize,
    pub not_concluded: usize,
}

impl Gate {
    pub fn of(model: &Model, fail_on: FailOn) -> Self {
        let (mut rows, mut not_concluded, mut worse) = (0, 0, Vec::new());
        for wl in &model.workloads {
            for c in &wl.comparisons {
                for r in &c.rows {
                    if r.conclusion == Conclusion::Untested {
                        continue;
                    }
                    rows += 1;
                    if r.conclusion == Conclusion::NotConcluded {
                        not_concluded += 1;
                    }
                    let (Conclusion::Differs, Some(i), Some(e)) = (r.conclusion, r.interval, &r.effect)
                    else {
                        continue;
                    };
                    let beyond = match wl.better {
                        Better::Higher => i.high < 1.0 - fail_on.margin,
                        Better::Lower => i.low > 1.0 + fail_on.margin,
                    };
                    if beyond {
                        worse.push(Worse {
                            workload: wl.workload.clone(),
                            metric: wl.metric.clone(),
                            level: r.level,
                            variant: c.variant.clone(),
                            ratio: e.ratio,
                            low: i.low,
                            high: i.high,
                            confidence: i.confidence,
                        });
                    }
                }
            }
        }
        Self {
            fail_on,
            baseline: model.baseline.clone(),
            worse,
            rows,
            not_concluded,
        }
    }

    pub fn failed(&self) -> bool {
        !self.worse.is_empty()
    }

    /// What the gate found, for stderr: each failing row, then one line with the outcome.
    pub fn text(&self) -> String {
        use super::format::{fmt_confidence, fmt_level, fmt_ratio_interval};
        let by = if self.fail_on.margin > 0.0 {
            format!(
                " by more than {} %",
                super::format::fmt_margin(self.fail_on.margin)
            )
        } else {
            String::new()
        };
        let mut out = String::new();
        for w in &self.worse {
            out.push_str(&format!(
                "gate: {} {} {} {}: {} ({}), worse than {}{by}\n",
                w.workload,
                w.metric,
                fmt_level(w.level),
                w.variant,
                fmt_ratio_interval(w.ratio, w.low, w.high),
                fmt_confidence(w.confidence),
                self.baseline
            ));
        }
        let open = if self.not_concluded > 0 {
            format!(
                "; {} not concluded, passed (more runs would decide)",
                self.not_concluded
            )
        } else {
            String::new()
        };
        if self.failed() {
            out.push_str(&format!(
                "gate: FAILED — {} of {} rows shown worse than {}{by}{open}\n",
                self.worse.len(),
                self.rows,
                self.baseline
            ));
        } else {
            out.push_str(&format!(
                "gate: passed — no row of {} shown worse than {}{by}{open}\n",
                self.rows, self.baseline
            ));
        }
        out.lines().map(|l| super::layout::wrap(l, "", "  ")).collect()
    }
}

/// A report whose gate failed: exits 1 ([`crate::orchestrate::exit::ERROR`]) after printing
/// the report and the gate's lines.
#[derive(Debug, thiserror::Error)]
#[error("the gate failed: {0} row(s) shown worse than the baseline")]
pub struct GateFailed(pub usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_on_reads_worse_with_an_optional_margin() {
        assert_eq!("worse".parse::<FailOn>().unwrap().margin, 0.0);
        assert_eq!("worse:0.05".parse::<FailOn>().unwrap().margin, 0.05);
        assert!(("worse:5%".parse::<FailOn>().unwrap().margin - 0.05).abs() < 1e-12);
        for bad in [
            "better",
            "worse:",
            "worse:x",
            "worse:1.5",
            "worse:-1%",
            "worse:100%",
        ] {
            let e = bad.parse::<FailOn>().unwrap_err();
            assert!(e.contains("worse[:MARGIN]"), "{bad}: {e}");
        }
    }

    /// The demo journal with its sides swapped: `base` against `patched` is 10 % slower in
    /// hackbench at 0.5x (lower is better) and 17 % and 37 % fewer lock operations.
    #[test]
    fn rows_shown_worse_beyond_the_margin_fail_and_open_rows_pass() {
        use crate::report::ReportOptions;
        use crate::testing::{journal, model};
        let mut j = journal();
        j.header.baseline = "patched".into();
        j.header.variants = vec!["patched".into(), "base".into()];
        let m = model(&j, &ReportOptions::default());
        let gate = Gate::of(&m, "worse".parse().unwrap());
        assert!(gate.failed(), "{}", gate.text());
        assert_eq!(gate.rows, 4);
        for w in &gate.worse {
            assert_eq!(w.variant, "base");
            let row = m
                .workloads
                .iter()
                .find(|wl| wl.workload == w.workload)
                .and_then(|wl| wl.comparisons[0].rows.iter().find(|r| r.level == w.level))
                .unwrap();
            assert_eq!(row.conclusion, Conclusion::Differs);
        }
        assert!(
            gate.worse
                .iter()
                .any(|w| w.workload == "hackbench" && w.level == 0.5 && w.ratio > 1.0),
            "{}",
            gate.text()
        );
        let text = gate.text();
        assert!(text.contains("gate: FAILED"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
        // Shown worse, but not by more than 50 %: the gate passes, and says what it judged.
        let lenient = Gate::of(&m, "worse:50%".parse().unwrap());
        assert!(!lenient.failed(), "{}", lenient.text());
        assert!(
            lenient.text().starts_with("gate: passed — no row of 4"),
            "{}",
            lenient.text()
        );
        // The other way round nothing is worse.
        let m = model(&journal(), &ReportOptions::default());
        assert!(!Gate::of(&m, "worse".parse().unwrap()).failed());
    }
}
