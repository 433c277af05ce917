//! `ocrig schema`: a JSON Schema (draft 2020-12) of the scenario file, generated from the
//! scenario model's own types ([`crate::scenario::Scenario`], with `schemars`), so an editor's
//! YAML plugin can check and complete a scenario as it is written:
//! `# yaml-language-server: $schema=ocrig-scenario.schema.json` on a scenario's first line.
//! What only a check against the host or the payload can say (CPUs, kernels, workload
//! arguments, a key given twice) stays `ocrig validate`'s.

/// The schema as a JSON value.
pub fn scenario_schema() -> serde_json::Value {
    let mut schema =
        serde_json::to_value(schemars::schema_for!(crate::scenario::Scenario)).expect("a schema is JSON");
    if let Some(o) = schema.as_object_mut() {
        o.insert("title".into(), "ocrig scenario".into());
        o.insert(
            "description".into(),
            format!(
                "An ocrig {} scenario file (`ocrig validate` checks what a schema cannot: the host, the kernels, \
                 the workloads' arguments).",
                env!("CARGO_PKG_VERSION")
            )
            .into(),
        );
    }
    schema
}

pub fn schema() -> anyhow::Result<()> {
    crate::commands::out(&format!(
        "{}\n",
        serde_json::to_string_pretty(&scenario_schema())?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_names_every_top_level_field_and_refuses_others() {
        let s = scenario_schema();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        let props = s["properties"].as_object().unwrap();
        for f in [
            "name",
            "host",
            "guest",
            "levels",
            "variants",
            "workloads",
            "runs",
            "timeouts",
            "schedule",
        ] {
            assert!(props.contains_key(f), "{f}");
        }
        assert_eq!(s["additionalProperties"], false);
        let required: Vec<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(required, ["name", "levels", "workloads"]);
    }
}
