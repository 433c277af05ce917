//! JSON: the full comparison model ([`Model`]), pretty-printed, with the guest kernels'
//! busiest symbols per profiled cell (`kernel_symbols`) and, for `ocrig compare`, how they
//! changed between the pairs (`kernel_symbol_changes`), each only where there are any.
//!
//! The document opens with `"format_version"` ([`FORMAT_VERSION`]), so that a program reading
//! report.json can tell which layout it holds.

use super::kernel_symbols::{self, JsonCell, JsonChange};
use super::{Exporter, ReportInput};
use crate::stats::cells::Model;

pub struct JsonExporter;

/// The layout of report.json, its top-level `"format_version"`. Raised when a field is removed,
/// renamed or changes its meaning or type; adding a field leaves it as it is (readers ignore
/// fields they do not know). 1: the first versioned layout (the [`Model`]'s fields, then
/// `kernel_symbols` and `kernel_symbol_changes`). 2: a comparison row's `improvement_pct` is its
/// ratio's (it was of the arithmetic means), and `margin` bounds a ratio within
/// [1/(1 + margin), 1 + margin] (it was 1 ± margin); rows gain `interval` (at the level their
/// conclusion was judged), `interval_unadjusted`, `equivalence`, `within_margin`, `rejections`,
/// `withheld`, `margin_post_hoc`, cells `attempts` and `rejected_attempts`, the model
/// `margin_post_hoc`. 3: a cell's `summary`, `points`, contention and fairness and a row's
/// figures are of each run's headline value, its guests' mean where the workload's new
/// `headline_from` is `every-guest` (they were guest 0's).
pub const FORMAT_VERSION: u32 = 3;

/// The report: the model's fields, then the profiles'.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    /// [`FORMAT_VERSION`], first.
    format_version: u32,
    #[serde(flatten)]
    model: &'a Model,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kernel_symbols: Vec<JsonCell<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kernel_symbol_changes: Vec<JsonChange<'a>>,
}

impl Exporter for JsonExporter {
    fn render(&self, input: &ReportInput) -> anyhow::Result<String> {
        let changed = input.changed();
        let report = JsonReport {
            format_version: FORMAT_VERSION,
            model: &input.model,
            kernel_symbols: kernel_symbols::json_items(&input.symbols),
            kernel_symbol_changes: kernel_symbols::compare_json(&changed),
        };
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{Format, ReportOptions};
    use crate::stats::cells::Model;
    use crate::testing::{journal, model, render};

    #[test]
    fn parses_back_into_the_model() {
        let opts = ReportOptions::default();
        let text = render(&journal(), Format::Json, &opts).unwrap();
        let back: Model = serde_json::from_str(&text).unwrap();
        assert_eq!(back, model(&journal(), &opts));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["workloads"][0]["workload"], "hackbench");
        assert_eq!(v["workloads"][0]["better"], "lower");
        let row = &v["workloads"][0]["comparisons"][0]["rows"][0];
        assert_eq!(row["conclusion"], "differs");
        assert_eq!(row["effect"]["unit"], "bring-up");
        assert!(row["effect"]["low"].as_f64().unwrap() < row["effect"]["ratio"].as_f64().unwrap());
        assert_eq!(v["family"], 4);
        assert_eq!(v["margin"], 0.05);
        assert_eq!(v["workloads"][0]["retention"][0]["variant"], "base");
        // The interval the conclusion was judged by, at its Holm step (the second: 1 - 0.05/3),
        // the unadjusted 95 % one labelled beside it, and how equivalence was judged: TOST as
        // the (1 - 2α) interval against the margin's bounds, symmetric in log space.
        let i = &row["interval"];
        assert!(
            (i["confidence"].as_f64().unwrap() - (1.0 - 0.05 / 3.0)).abs() < 1e-15,
            "{row}"
        );
        assert_eq!(row["interval_unadjusted"]["confidence"], 0.95);
        assert_eq!(row["interval_unadjusted"]["low"], row["effect"]["low"]);
        assert!(i["low"].as_f64().unwrap() < row["effect"]["low"].as_f64().unwrap());
        let eq = &row["equivalence"];
        assert!(
            (eq["margin_low"].as_f64().unwrap() - 1.0 / 1.05).abs() < 1e-15,
            "{eq}"
        );
        assert!(
            (eq["confidence"].as_f64().unwrap() - (1.0 - 2.0 * eq["alpha"].as_f64().unwrap())).abs() < 1e-15
        );
        assert_eq!(
            (&eq["within"], &row["within_margin"]),
            (&false.into(), &false.into())
        );
        // Each side's attempts, rejections and empty slots; Fisher's test of the rates.
        assert_eq!(
            row["rejections"]["base"],
            serde_json::json!({"attempts": 4, "rejected": 0, "empty_slots": 1})
        );
        assert_eq!(row["rejections"]["fisher_p"], 1.0);
        assert_eq!(v["margin_post_hoc"], serde_json::Value::Null);
    }

    #[test]
    fn opens_with_its_format_version() {
        let text = render(&journal(), Format::Json, &ReportOptions::default()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format_version"], super::FORMAT_VERSION);
        assert_eq!(super::FORMAT_VERSION, 3);
        // First, where a reader looking at the file sees it.
        assert!(
            text.starts_with("{\n  \"format_version\": 3,\n"),
            "{}",
            &text[..80]
        );
    }
}
