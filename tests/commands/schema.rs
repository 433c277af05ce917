//! The scenario files that ship with ocrig, and what a JSON Schema of the scenario says of them.

use std::path::{Path, PathBuf};

/// Every `*.yaml` under `scenarios/`, in any folder.
pub fn shipped_scenarios() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if e.is_dir() {
                walk(&e, out);
            } else if e.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(e);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"), &mut out);
    out.sort();
    assert!(out.len() >= 10, "{out:?}");
    out
}

/// `ocrig schema`, compiled as a validator.
fn validator() -> jsonschema::Validator {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .arg("schema")
        .output()
        .expect("running ocrig schema");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::validator_for(&schema).expect("ocrig schema is a valid JSON Schema")
}

/// A YAML text as the JSON an editor's plugin checks against the schema.
fn as_json(yaml: &str) -> serde_json::Value {
    yaml_serde::from_str(yaml).unwrap()
}

fn errors(v: &jsonschema::Validator, doc: &serde_json::Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn every_shipped_scenario_validates_against_the_schema() {
    let v = validator();
    let mut bad = Vec::new();
    for file in shipped_scenarios() {
        let doc = as_json(&std::fs::read_to_string(&file).unwrap());
        for e in errors(&v, &doc) {
            bad.push(format!("{}: {e}", file.display()));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn an_unknown_field_or_a_wrong_type_does_not() {
    let v = validator();
    let good = "name: x\nlevels: [1.0, 2]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    \
                args: {threads: [2, 4], algo: tas}\n";
    assert!(
        errors(&v, &as_json(good)).is_empty(),
        "{:?}",
        errors(&v, &as_json(good))
    );
    let bad = [
        (format!("{good}runz: 3\n"), "runz"),
        (good.replace("name: x\n", "name: x\nhost: {cpuz: 2}\n"), "cpuz"),
        (format!("{good}runs: notanumber\n"), "/runs"),
        (format!("{good}runs: {{min: 2}}\n"), "/runs"),
        (good.replace("levels: [1.0, 2]", "levels: one"), "/levels"),
        (
            good.replace("name: x\n", "name: x\nguest: {vcpus: -1}\n"),
            "/guest/vcpus",
        ),
        (format!("{good}background: loud\n"), "/background"),
        (
            good.replace("metric: ops_per_sec", "metric: ops_per_sec\n    better: up"),
            "/workloads/0/better",
        ),
        (good.replace("name: x\n", ""), "name"),
    ];
    for (text, what) in bad {
        let errs = errors(&v, &as_json(&text));
        assert!(!errs.is_empty(), "accepted:\n{text}");
        assert!(
            errs.iter().any(|e| e.contains(what)),
            "{what} not named: {errs:?}\n{text}"
        );
    }
}
