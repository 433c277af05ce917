//! `ocrig workloads [NAME]`: what the guest payload offers a scenario, from the payload crate's
//! own catalogue ([`ocrig_payload::catalog`]): each workload's arguments (derived from the
//! payload's own parser, so their defaults are the ones it takes) and its metrics with which
//! way is better. Within 120 columns; `--json` the same as one array.

use ocrig_payload::catalog::{self, ArgSpec, Better, MetricSpec, WorkloadSpec};

use crate::orchestrate::BadInput;
use crate::terminal::wrap;

/// One workload as `--json` prints it.
#[derive(serde::Serialize)]
struct Json {
    name: &'static str,
    about: String,
    args: Vec<ArgSpec>,
    metrics: &'static [MetricSpec],
    inputs: &'static [catalog::GuestInput],
    kernel_options: &'static [catalog::KernelOption],
}

pub fn workloads(name: Option<&str>, json: bool) -> anyhow::Result<()> {
    let chosen: Vec<&WorkloadSpec> = match name {
        None => catalog::WORKLOADS.iter().collect(),
        Some(n) => match catalog::workload(n).or_else(|| catalog::workload(&n.replace('_', "-"))) {
            Some(w) => vec![w],
            None => return Err(BadInput(unknown(n)).into()),
        },
    };
    let text = match json {
        true => {
            let all: Vec<Json> = chosen
                .iter()
                .map(|w| Json {
                    name: w.name,
                    about: w.about(),
                    args: w.args(),
                    metrics: w.metrics,
                    inputs: w.inputs,
                    kernel_options: w.kernel_options,
                })
                .collect();
            format!("{}\n", serde_json::to_string_pretty(&all)?)
        }
        false => chosen.iter().map(|w| describe(w)).collect::<Vec<_>>().join("\n"),
    };
    crate::commands::out(&text)
}

/// The refusal of an unknown name: the names there are.
fn unknown(name: &str) -> String {
    let names: Vec<&str> = catalog::WORKLOADS.iter().map(|w| w.name).collect();
    format!("no workload `{name}`; the payload offers: {}", names.join(", "))
}

/// One workload as the text output says it.
fn describe(w: &WorkloadSpec) -> String {
    let mut out = wrap(&format!("{} — {}", w.name, w.about()), "", "    ");
    let args = w.args();
    let name_w = args
        .iter()
        .map(|a| a.name.len())
        .max()
        .unwrap_or(0)
        .max("argument".len());
    let default_w = args
        .iter()
        .map(|a| default_of(a).chars().count())
        .filter(|&n| n <= 16)
        .max()
        .unwrap_or(0)
        .max("default".len());
    let unit_w = args
        .iter()
        .map(|a| a.unit.unwrap_or("").chars().count())
        .max()
        .unwrap_or(0)
        .max("unit".len());
    out.push_str(&format!(
        "  {:<name_w$}  {:<default_w$}  {:<unit_w$}  (a scenario's `args:`)\n",
        "argument", "default", "unit"
    ));
    for a in &args {
        let head = format!(
            "  {:<name_w$}  {:<default_w$}  {:<unit_w$}  ",
            a.name,
            default_of(a),
            a.unit.unwrap_or("")
        );
        let mut about = a.about.clone();
        if !a.values.is_empty() {
            let stop = if about.ends_with(['.', ')']) { "" } else { "." };
            about = format!("{about}{stop} One of: {}.", a.values.join(", "));
        }
        let indent = " ".repeat(head.chars().count().min(60));
        out.push_str(&wrap(&about, &head, &indent));
    }
    let metric_w = w
        .metrics
        .iter()
        .map(|m| m.name.len())
        .max()
        .unwrap_or(0)
        .max("metric".len());
    out.push_str(&format!(
        "  {:<metric_w$}  {:<7}  (a scenario's `metric:` and `better:`)\n",
        "metric", "better"
    ));
    for m in w.metrics {
        let head = format!("  {:<metric_w$}  {:<7}  ", m.name, better_word(m.better));
        let about = match m.conditional {
            true => format!("{} (not in every report)", m.about),
            false => m.about.to_string(),
        };
        let indent = " ".repeat(head.chars().count().min(60));
        out.push_str(&wrap(&about, &head, &indent));
    }
    for o in w.kernel_options {
        out.push_str(&format!(
            "  needs a guest kernel with CONFIG_{}={}{}\n",
            o.name,
            o.value,
            o.module.map(|m| format!(" (module {m})")).unwrap_or_default()
        ));
    }
    for i in w.inputs {
        out.push_str(&wrap(
            &format!(
                "reads the host's {} in the guest as {}{}",
                i.host_path,
                i.guest_path,
                if i.required_by_default {
                    " (needed with the default arguments)"
                } else {
                    ""
                }
            ),
            "  ",
            "    ",
        ));
    }
    out
}

fn default_of(a: &ArgSpec) -> String {
    match (&a.default, a.flag) {
        (_, true) => "off".into(),
        (Some(d), false) => d.clone(),
        (None, false) => "-".into(),
    }
}

fn better_word(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
        Better::Neither => "-",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_is_described_within_120_columns() {
        for w in catalog::WORKLOADS {
            let text = describe(w);
            for line in text.lines() {
                assert!(
                    line.chars().count() <= crate::terminal::WIDTH,
                    "{}: {line}",
                    w.name
                );
            }
            for a in w.args() {
                assert!(
                    text.contains(&format!("  {} ", a.name)),
                    "{}: --{} missing:\n{text}",
                    w.name,
                    a.name
                );
            }
            for m in w.metrics {
                assert!(
                    text.contains(&format!("  {} ", m.name)),
                    "{}: {} missing",
                    w.name,
                    m.name
                );
            }
        }
        let lock = describe(catalog::workload("lock").unwrap());
        assert!(lock.starts_with("lock — "), "{lock}");
        let hold = lock
            .lines()
            .find(|l| l.trim_start().starts_with("hold-ns "))
            .unwrap();
        assert!(hold.contains(" 200 ") && hold.contains(" ns "), "{hold}");
        let ops = lock
            .lines()
            .find(|l| l.trim_start().starts_with("ops_per_sec "))
            .unwrap();
        assert!(ops.contains(" higher "), "{ops}");
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_names() {
        let e = workloads(Some("nosuch"), false).unwrap_err();
        assert!(e.is::<BadInput>());
        let msg = e.to_string();
        assert!(
            msg.contains("no workload `nosuch`") && msg.contains("lock, hackbench"),
            "{msg}"
        );
    }
}
