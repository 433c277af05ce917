//! `exec`: any command line as a workload — a benchmark the user already trusts (sysbench,
//! stress-ng, `perf bench`, their own test) run in every guest at the go signal, as the
//! built-in workloads are, with its metrics taken from its output.
//!
//! The command runs under `/bin/sh -c` with its standard output and error read whole (up to
//! [`MAX_OUTPUT`] each). Each metric is taken by one rule (`--metric NAME=RULE`):
//! - `regex:PATTERN`: the first match in the standard output, then in the standard error; its
//!   group named `value` where it has one, else its first group, else the whole match, read as
//!   a number (`1,234` and `1_234` read as 1234);
//! - `json:PATH`: the standard output as JSON (the whole of it, else its last line that is a
//!   JSON value), `PATH` a dot-separated path of keys and array indices (`jobs.0.read.iops`);
//! - `wall`: the command's wall time, seconds, from its start to its exit.
//!
//! What the run checks (a failed check fails the attempt, with the output's last lines):
//! the command's exit status is 0 (`exit_status`), and every metric was found and is a finite
//! number (`metrics_found`) — a metric is never reported as 0 or null in place of one its
//! output did not give. A command the guest's shell cannot find (status 127) is bad input: the
//! sweep stops with the shell's words rather than retry it.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Args as ClapArgs;
use serde::Serialize;

use super::BadInput;
use crate::checks::Check;
use crate::report::Report;

/// The most of each stream kept for the metrics (the rest is read and dropped).
pub const MAX_OUTPUT: usize = 16 << 20;

/// Lines of output a report keeps (the last ones of each stream).
pub const KEPT_LINES: usize = 20;

#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// The command line, run by the guest's `/bin/sh -c` (its metrics: the scenario's
    /// `metrics:` list).
    #[arg(long)]
    pub run: String,
    /// A metric and where it comes from: `NAME=regex:PATTERN` (the first match; its group
    /// `value`, else its first group, else the match), `NAME=json:PATH` (a dot-separated path
    /// into the JSON output) or `NAME=wall` (the command's wall time, s). Repeat for several.
    /// Hidden: the host makes these from a scenario's `metrics:`, not from its `args:`.
    #[arg(long = "metric", value_name = "NAME=RULE", value_parser = parse_metric, required = true, hide = true)]
    pub metrics: Vec<MetricRule>,
}

impl Args {
    /// Checks the parser cannot make: a metric named twice.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for m in &self.metrics {
            if !seen.insert(m.name.as_str()) {
                return Err(format!("--metric {}: named twice", m.name));
            }
        }
        Ok(())
    }
}

/// One `--metric NAME=RULE`.
#[derive(Debug, Clone)]
pub struct MetricRule {
    pub name: String,
    pub from: From,
}

/// Where a metric is read.
#[derive(Debug, Clone)]
pub enum From {
    Regex(regex::Regex),
    Json(Vec<String>),
    Wall,
}

impl std::fmt::Display for From {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            From::Regex(r) => write!(f, "regex:{}", r.as_str()),
            From::Json(path) => write!(f, "json:{}", path.join(".")),
            From::Wall => f.write_str("wall"),
        }
    }
}

/// Parses `NAME=regex:PATTERN`, `NAME=json:PATH` or `NAME=wall`.
pub fn parse_metric(s: &str) -> Result<MetricRule, String> {
    let (name, rule) = s.split_once('=').ok_or_else(|| {
        format!("'{s}' is not NAME=RULE (e.g. events=regex:events:\\s*(\\d+), time_s=wall)")
    })?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(format!(
            "metric name '{name}': letters, digits, `_`, `-` and `.` only"
        ));
    }
    let from = if rule == "wall" {
        From::Wall
    } else if let Some(p) = rule.strip_prefix("regex:") {
        From::Regex(regex::Regex::new(p).map_err(|e| format!("metric {name}: {e}"))?)
    } else if let Some(p) = rule.strip_prefix("json:") {
        let path: Vec<String> = p.split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(format!("metric {name}: json path '{p}' has an empty key"));
        }
        From::Json(path)
    } else {
        return Err(format!(
            "metric {name}: '{rule}' is not regex:PATTERN, json:PATH or wall"
        ));
    };
    Ok(MetricRule {
        name: name.to_string(),
        from,
    })
}

/// What the report's `detail` holds.
#[derive(Debug, Clone, Serialize)]
pub struct ExecResult {
    pub run: String,
    /// The shell's exit status; None where a signal ended it (`signal` then says which).
    pub exit_status: Option<i32>,
    pub signal: Option<i32>,
    pub wall_s: f64,
    /// Each metric's rule, as given.
    pub rules: BTreeMap<String, String>,
    /// The metrics the output did not give, each with why.
    pub missing: BTreeMap<String, String>,
    /// The last [`KEPT_LINES`] lines of each stream.
    pub stdout_tail: Vec<String>,
    pub stderr_tail: Vec<String>,
    /// Bytes read of each stream (those past [`MAX_OUTPUT`] were dropped).
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

/// Reads `r` whole, keeping the first [`MAX_OUTPUT`] bytes; the bytes read.
fn read_capped(mut r: impl Read) -> (Vec<u8>, u64) {
    let (mut kept, mut total, mut buf) = (Vec::new(), 0u64, vec![0u8; 64 << 10]);
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => return (kept, total),
            Ok(n) => {
                total += n as u64;
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn tail(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(KEPT_LINES)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// A number as benchmarks print them: `1,234.5`, `1_234`, `12.5%` (the sign kept).
fn number(s: &str) -> Option<f64> {
    let cleaned: String = s
        .trim()
        .trim_end_matches('%')
        .chars()
        .filter(|c| *c != ',' && *c != '_')
        .collect();
    cleaned.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// The value `rule` finds in the output, or why there is none.
fn extract(from: &From, stdout: &str, stderr: &str, wall_s: f64) -> Result<f64, String> {
    match from {
        From::Wall => Ok(wall_s),
        From::Regex(re) => {
            let caps = re
                .captures(stdout)
                .or_else(|| re.captures(stderr))
                .ok_or_else(|| format!("regex:{} matched nothing in the output", re.as_str()))?;
            let m = caps
                .name("value")
                .or_else(|| caps.get(1))
                .or_else(|| caps.get(0))
                .expect("a match has group 0");
            number(m.as_str())
                .ok_or_else(|| format!("regex:{} matched '{}', not a number", re.as_str(), m.as_str()))
        }
        From::Json(path) => {
            let doc: serde_json::Value = serde_json::from_str(stdout)
                .ok()
                .or_else(|| {
                    stdout
                        .lines()
                        .rev()
                        .find_map(|l| serde_json::from_str(l.trim()).ok())
                })
                .ok_or("json: the standard output is not JSON (nor is any of its lines)")?;
            let mut at = &doc;
            for (i, key) in path.iter().enumerate() {
                let next = match at {
                    serde_json::Value::Array(items) => key.parse::<usize>().ok().and_then(|k| items.get(k)),
                    v => v.get(key),
                };
                at = next.ok_or_else(|| {
                    format!("json:{}: no '{key}' at {}", path.join("."), path[..i].join("."))
                })?;
            }
            match at {
                serde_json::Value::Number(n) => n.as_f64().filter(|v| v.is_finite()),
                serde_json::Value::String(s) => number(s),
                _ => None,
            }
            .ok_or_else(|| format!("json:{} is {at}, not a number", path.join(".")))
        }
    }
}

/// Runs the command and reports its metrics; see the module.
pub fn run(args: &Args) -> anyhow::Result<Report> {
    args.check().map_err(|e| anyhow::anyhow!(BadInput(e)))?;
    // The measured window is the command's life: the kernel profile and the kernel counts
    // (a variant's `profile`, `kernel_counts`) cover it, system-wide.
    crate::probe::window_open();
    let start = Instant::now();
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(&args.run)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting /bin/sh -c {:?}: {e}", args.run))?;
    // Both streams read at once, so a command that fills one pipe never blocks on it.
    let err_pipe = child.stderr.take().expect("stderr is piped");
    let err_reader = std::thread::spawn(move || read_capped(err_pipe));
    let (out, stdout_bytes) = read_capped(child.stdout.take().expect("stdout is piped"));
    let (err, stderr_bytes) = err_reader.join().unwrap_or_default();
    let status = child.wait()?;
    let elapsed = start.elapsed();
    crate::probe::window_close();
    let wall_s = elapsed.as_secs_f64();
    let (stdout, stderr) = (String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    use std::os::unix::process::ExitStatusExt;
    let (exit_status, signal) = (status.code(), status.signal());
    if exit_status == Some(127) {
        anyhow::bail!(BadInput(format!(
            "the guest's shell could not run `{}` (exit 127): {}",
            args.run,
            tail(&stderr).join(" | ")
        )));
    }
    let mut metrics = BTreeMap::new();
    let mut missing = BTreeMap::new();
    for m in &args.metrics {
        match extract(&m.from, &stdout, &stderr, wall_s) {
            Ok(v) => {
                metrics.insert(m.name.clone(), v);
            }
            Err(why) => {
                missing.insert(m.name.clone(), why);
            }
        }
    }
    let result = ExecResult {
        run: args.run.clone(),
        exit_status,
        signal,
        wall_s,
        rules: args
            .metrics
            .iter()
            .map(|m| (m.name.clone(), m.from.to_string()))
            .collect(),
        missing: missing.clone(),
        stdout_tail: tail(&stdout),
        stderr_tail: tail(&stderr),
        stdout_bytes,
        stderr_bytes,
    };
    let last = |r: &ExecResult| {
        let lines: Vec<&String> = r.stdout_tail.iter().chain(&r.stderr_tail).collect();
        let from = lines.len().saturating_sub(5);
        lines[from..]
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let checks = vec![
        Check {
            name: "exit_status".into(),
            ok: exit_status == Some(0),
            // A signal reads as the shell reports it: 128 + its number.
            value: exit_status.or(signal.map(|s| 128 + s)).map(f64::from),
            bound: Some(0.0),
            detail: match (exit_status, signal) {
                (Some(0), _) => "the command exited 0".into(),
                (Some(code), _) => format!("the command exited {code}; its last lines: {}", last(&result)),
                (None, s) => format!(
                    "the command was ended by signal {}; its last lines: {}",
                    s.unwrap_or(0),
                    last(&result)
                ),
            },
        },
        Check {
            name: "metrics_found".into(),
            ok: missing.is_empty(),
            value: Some(missing.len() as f64),
            bound: Some(0.0),
            detail: if missing.is_empty() {
                format!("all {} metric(s) read from the output", args.metrics.len())
            } else {
                format!(
                    "{}; its last lines: {}",
                    missing
                        .iter()
                        .map(|(n, why)| format!("{n}: {why}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                    last(&result)
                )
            },
        },
    ];
    Ok(Report::new(
        "exec",
        elapsed.as_nanos() as u64,
        crate::env::Env::read(),
        metrics,
        &result,
    )?
    .with_checks(checks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(run: &str, metrics: &[&str]) -> Args {
        Args {
            run: run.into(),
            metrics: metrics.iter().map(|m| parse_metric(m).unwrap()).collect(),
        }
    }

    #[test]
    fn metrics_come_from_a_pattern_a_json_path_and_the_wall_time() {
        let r = run(&args(
            r#"echo 'total number of events: 1,234'; echo '{"jobs": [{"read": {"iops": 98.5}}]}'; sleep 0.05"#,
            &[
                r"events=regex:events:\s*(?P<value>[\d,]+)",
                "iops=json:jobs.0.read.iops",
                "time_s=wall",
            ],
        ))
        .unwrap();
        assert_eq!(r.metrics["events"], 1234.0);
        assert_eq!(r.metrics["iops"], 98.5);
        assert!(r.metrics["time_s"] >= 0.05, "{:?}", r.metrics);
        assert!(r.checks.iter().all(|c| c.ok), "{:?}", r.checks);
        assert_eq!(r.workload, "exec");
    }

    #[test]
    fn a_failing_command_or_a_missing_metric_fails_its_checks_with_the_last_lines() {
        let r = run(&args(
            "echo working; echo oops >&2; exit 3",
            &["x=regex:never (\\d+)"],
        ))
        .unwrap();
        assert!(!r.metrics.contains_key("x"), "a missing metric is never reported");
        let by = |n: &str| r.checks.iter().find(|c| c.name == n).unwrap().clone();
        let status = by("exit_status");
        assert!(
            !status.ok && status.detail.contains("exited 3") && status.detail.contains("oops"),
            "{status:?}"
        );
        let found = by("metrics_found");
        assert!(
            !found.ok && found.detail.contains("matched nothing") && found.detail.contains("working"),
            "{found:?}"
        );
        let r = run(&args(
            "echo '{\"a\": {\"b\": \"x\"}}'",
            &["v=json:a.c", "w=json:a.b"],
        ))
        .unwrap();
        let found = r.checks.iter().find(|c| c.name == "metrics_found").unwrap();
        assert!(
            found.detail.contains("no 'c' at a") && found.detail.contains("not a number"),
            "{found:?}"
        );
    }

    #[test]
    fn a_command_the_shell_cannot_find_is_bad_input() {
        let e = run(&args("no-such-command-ocrig --x", &["t=wall"])).unwrap_err();
        assert!(e.downcast_ref::<BadInput>().is_some(), "{e}");
        assert!(e.to_string().contains("exit 127"), "{e}");
    }

    #[test]
    fn rules_are_parsed_or_refused_with_the_reason() {
        for (bad, why) in [
            ("x", "is not NAME=RULE"),
            ("=wall", "letters, digits"),
            ("x=regex:(", "regex"),
            ("x=json:a..b", "empty key"),
            ("x=count", "is not regex:PATTERN, json:PATH or wall"),
        ] {
            let e = parse_metric(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let twice = args("true", &["t=wall", "t=regex:(\\d+)"]);
        assert!(twice.check().unwrap_err().contains("named twice"));
        assert_eq!(number("12.5%"), Some(12.5));
        assert_eq!(number("-1_000"), Some(-1000.0));
        assert_eq!(number("n/a"), None);
    }
}
