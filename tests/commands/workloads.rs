//! `ocrig workloads [NAME]`: the payload's catalogue as a user reads it, and as a tool does.

use std::process::{Command, Output};

fn ocrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(args)
        .output()
        .expect("running ocrig")
}

#[test]
fn an_unknown_name_is_refused_with_the_list_of_names() {
    let out = ocrig(&["workloads", "NOSUCH"]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no workload `NOSUCH`"), "{e}");
    for name in ["lock", "hackbench", "mutex", "sysfs-mutex", "locktorture"] {
        assert!(e.contains(name), "{name} not listed: {e}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn every_workload_is_listed_within_120_columns_and_one_by_name() {
    let out = ocrig(&["workloads"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        assert!(line.chars().count() <= 120, "{line}");
    }
    for name in ["lock — ", "hackbench — ", "dbench — ", "locktorture — "] {
        assert!(text.contains(name), "{name} missing");
    }
    let out = ocrig(&["workloads", "hackbench"]);
    assert_eq!(out.status.code(), Some(0));
    let one = String::from_utf8(out.stdout).unwrap();
    assert!(
        one.starts_with("hackbench — ") && !one.contains("lock — "),
        "{one}"
    );
    let time = one
        .lines()
        .find(|l| l.trim_start().starts_with("time_s "))
        .unwrap();
    assert!(time.contains(" lower "), "{time}");
}

#[test]
fn json_gives_each_argument_its_default_and_unit_and_each_metric_its_direction() {
    let out = ocrig(&["workloads", "--json", "lock"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lock = &v[0];
    assert_eq!(lock["name"], "lock");
    let arg = |n: &str| {
        lock["args"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            arg("hold-ns")["default"].as_str(),
            arg("hold-ns")["unit"].as_str()
        ),
        (Some("200"), Some("ns"))
    );
    assert_eq!(arg("threads")["default"], "2");
    let metric = |n: &str| {
        lock["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == n)
            .unwrap()
            .clone()
    };
    assert_eq!(metric("ops_per_sec")["better"], "higher");
    assert_eq!(metric("contention_rate")["better"], "lower");
    let all = ocrig(&["workloads", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
    assert!(all.as_array().unwrap().len() >= 9);
}

/// Every shipped scenario compares by its headline metric the way the catalogue says is better.
#[test]
fn the_shipped_scenarios_agree_with_the_catalogue_on_which_way_is_better() {
    let out = ocrig(&["workloads", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let better = |command: &str, metric: &str| -> Option<String> {
        let w = all.as_array()?.iter().find(|w| w["name"] == command)?;
        let m = w["metrics"].as_array()?.iter().find(|m| m["name"] == metric)?;
        m["better"].as_str().map(str::to_string)
    };
    let mut wrong = Vec::new();
    for file in crate::schema::shipped_scenarios() {
        let doc: serde_json::Value = yaml_serde::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for w in doc["workloads"].as_array().into_iter().flatten() {
            let (Some(c), Some(m)) = (w["command"].as_str(), w["metric"].as_str()) else {
                continue;
            };
            let said = w["better"].as_str().unwrap_or("higher");
            match better(c, m).as_deref() {
                Some("neither") | None => {}
                Some(b) if b == said => {}
                Some(b) => wrong.push(format!(
                    "{}: {c} {m}: better: {said}, the catalogue says {b}",
                    file.display()
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
