//! JSON: the full comparison model ([`Model`]), pretty-printed, with the guest kernels'
//! busiest symbols per profiled cell (`kernel_symbols`) and, for `ocrig compare`, how they
//! changed between the pairs (`kernel_symbol_changes`), each only where there are any.

use super::kernel_symbols::{self, JsonCell, JsonChange};
use super::{Exporter, ReportInput};
use crate::stats::cells::Model;

pub struct JsonExporter;

/// The report: the model's fields, then the profiles'.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
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
}
