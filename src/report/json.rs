//! JSON: the full comparison model ([`Model`]), pretty-printed.

use super::Exporter;
use crate::stats::cells::Model;

pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn render(&self, model: &Model) -> anyhow::Result<String> {
        let mut s = serde_json::to_string_pretty(model)?;
        s.push('\n');
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{Format, ReportOptions, model, render};
    use crate::stats::cells::{Model, tests::journal};

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
        assert_eq!(row["effect"]["unit"], "run");
        assert!(row["effect"]["low"].as_f64().unwrap() < row["effect"]["ratio"].as_f64().unwrap());
        assert_eq!(v["family"], 4);
        assert_eq!(v["margin"], 0.05);
        assert_eq!(v["workloads"][0]["retention"][0]["variant"], "base");
    }
}
