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
/// `kernel_symbols` and `kernel_symbol_changes`).
pub const FORMAT_VERSION: u32 = 1;

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
    }

    #[test]
    fn opens_with_its_format_version() {
        let text = render(&journal(), Format::Json, &ReportOptions::default()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format_version"], super::FORMAT_VERSION);
        assert_eq!(super::FORMAT_VERSION, 1);
        // First, where a reader looking at the file sees it.
        assert!(
            text.starts_with("{\n  \"format_version\": 1,\n"),
            "{}",
            &text[..80]
        );
    }
}
