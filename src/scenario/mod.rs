//! Scenarios: the YAML model, loading with file:line:column errors, matrix expansion and
//! validation. Nothing here boots anything or touches the network.

pub mod expand;
pub mod fit;
pub mod locate;
pub mod model;
pub mod overrides;
pub mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use model::*;

/// A scenario problem, located in its file. Always "bad input" (exit status 2).
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Field path such as `workloads[0].args.threads`; empty for whole-file problems.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        if !self.field.is_empty() {
            write!(f, ": field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// Several problems found at once, reported together.
#[derive(Debug, Clone)]
pub struct ScenarioErrors(pub Vec<ScenarioError>);

impl fmt::Display for ScenarioErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioErrors {}

/// A scenario as read from disk, with its text kept for error locations and provenance.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: PathBuf,
    /// The scenario as run: the file's text, or with `--set` overrides the document they made
    /// ([`overrides::render`]). What the results directory keeps and the journal hashes.
    pub text: String,
    pub sha256: String,
    pub scenario: Scenario,
    /// The `--set` overrides applied, in order.
    pub sets: Vec<overrides::Override>,
    /// The file's own text, where errors are located (`text` itself without overrides).
    pub file_text: String,
}

impl Loaded {
    /// An error at a field path, located in the file when possible; about a field an override
    /// set, it names the flag instead (`--set host.cpus=99: field `host.cpus`: …`).
    pub fn error_at(&self, path: &[locate::Seg], message: impl Into<String>) -> ScenarioError {
        if let Some(o) = self.sets.iter().rev().find(|o| o.touches(path)) {
            return ScenarioError {
                file: PathBuf::from(o.to_string()),
                line: None,
                column: None,
                field: locate::path_string(if path.len() > o.path.len() { path } else { &o.path }),
                message: message.into(),
            };
        }
        let pos = locate::locate(&self.file_text, path);
        ScenarioError {
            file: self.path.clone(),
            line: pos.map(|p| p.0),
            column: pos.map(|p| p.1),
            field: locate::path_string(path),
            message: message.into(),
        }
    }
}

/// Reads and parses a scenario file. Syntax errors and unknown fields carry yaml_serde's
/// line and column.
pub fn load(path: &Path) -> Result<Loaded, ScenarioError> {
    let whole_file = |message: String| ScenarioError {
        file: path.to_path_buf(),
        line: None,
        column: None,
        field: String::new(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| whole_file(format!("cannot read scenario: {e}")))?;
    parse(path, text)
}

/// Reads a scenario file as [`load`] does, with `sets` (`--set KEY=VALUE`) applied to its YAML
/// document before it is deserialized. A problem an override makes is said as the file's own
/// are, naming the flag instead of a line (`--set host.cpuz=16: field `host.cpuz`: unknown
/// field …`); one the file has whatever the overrides say is located in the file.
pub fn load_with(path: &Path, sets: &[overrides::Override]) -> Result<Loaded, ScenarioError> {
    let plain = load(path);
    if sets.is_empty() {
        return plain;
    }
    let file_text = match &plain {
        Ok(l) => l.text.clone(),
        Err(_) => std::fs::read_to_string(path).unwrap_or_default(),
    };
    // A file that is not YAML at all: its syntax error, located.
    let mut doc: yaml_serde::Value = yaml_serde::from_str(&file_text).map_err(|e| match &plain {
        Err(p) => p.clone(),
        Ok(_) => ScenarioError {
            file: path.to_path_buf(),
            line: e.location().map(|l| l.line()),
            column: e.location().map(|l| l.column()),
            field: String::new(),
            message: strip_location(&e.to_string()),
        },
    })?;
    // The outcome after each override: the error of the whole is the first override after
    // which it stands unchanged (or the file's own, when it stood from the start).
    let mut steps = vec![plain.as_ref().err().map(|e| e.message.clone())];
    let flag_error = |o: &overrides::Override, field: String, message: String| ScenarioError {
        file: PathBuf::from(o.to_string()),
        line: None,
        column: None,
        field,
        message,
    };
    let mut parsed = None;
    for o in sets {
        overrides::apply(&mut doc, o).map_err(|m| flag_error(o, o.field(), m))?;
        let text = overrides::render(path, &doc, sets).map_err(|m| flag_error(o, o.field(), m))?;
        let p = parse(path, text);
        steps.push(p.as_ref().err().map(|e| e.message.clone()));
        parsed = Some(p);
    }
    match parsed.expect("sets is not empty") {
        Ok(mut l) => {
            l.sets = sets.to_vec();
            l.file_text = file_text;
            Ok(l)
        }
        Err(e) => {
            let since = (0..steps.len())
                .rev()
                .take_while(|&k| steps[k].as_ref() == Some(&e.message))
                .last()
                .expect("the last step failed");
            match since {
                0 => Err(plain.err().unwrap_or(e)),
                k => {
                    let o = &sets[k - 1];
                    let mine = o.field();
                    let field = if e.field.starts_with(&mine) { e.field } else { mine };
                    Err(flag_error(o, field, e.message))
                }
            }
        }
    }
}

/// Parses a scenario's text (read from `path`), with located errors.
fn parse(path: &Path, text: String) -> Result<Loaded, ScenarioError> {
    let scenario: Scenario = yaml_serde::from_str(&text).map_err(|e| {
        let msg = e.to_string();
        let mut err = ScenarioError {
            file: path.to_path_buf(),
            line: e.location().map(|l| l.line()),
            column: e.location().map(|l| l.column()),
            field: field_from_serde_message(&msg),
            message: strip_location(&msg),
        };
        let duplicate = msg
            .split("duplicate field `")
            .nth(1)
            .and_then(|r| r.split('`').next());
        if let Some(key) = duplicate {
            let (line, col) = (err.line.unwrap_or(1), err.column.unwrap_or(1));
            // yaml_serde names the mapping that holds a duplicate; point at the duplicate.
            if let Some((l, c)) = duplicate_position(&text, key, line, col) {
                (err.line, err.column) = (Some(l), Some(c));
            }
            err.field = if err.field.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", err.field)
            };
        } else if err.line.is_none_or(|l| l <= document_start(&text))
            && let Some((field, (line, col), forms)) = relocate(&text, &msg)
        {
            // Some errors are placed at the document start; find the field they are about.
            let found = text
                .lines()
                .nth(line - 1)
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim());
            if let Some(v) = found.filter(|v| !v.is_empty()) {
                err.message = format!("{}; found `{v}`", err.message);
            }
            if !forms.is_empty() {
                err.message = format!("{}: {forms}", err.message);
            }
            (err.field, err.column, err.line) = (field, Some(col), Some(line));
        }
        err
    })?;
    let sha256 = hex(&Sha256::digest(text.as_bytes()));
    Ok(Loaded {
        path: path.to_path_buf(),
        file_text: text.clone(),
        text,
        sha256,
        scenario,
        sets: Vec::new(),
    })
}

/// The line (1-based) of a text's first content, where yaml_serde places an error of the whole
/// document (after any leading comments, as an overridden scenario's).
fn document_start(text: &str) -> usize {
    text.lines()
        .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map_or(1, |i| i + 1)
}

/// Where the second `key` of the mapping that yaml_serde located at `line`:`col` stands: in
/// a flow mapping (`{a: 1, a: 2}`) on that line, or among the block mapping's keys at that
/// column, which ends at the first line indented less (or at the next sequence item).
fn duplicate_position(text: &str, key: &str, line: usize, col: usize) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let first = *lines.get(line.checked_sub(1)?)?;
    let spellings = [format!("{key}:"), format!("\"{key}\":"), format!("'{key}':")];
    let is_key_at = |l: &str, at: usize| {
        l.get(at..)
            .is_some_and(|rest| spellings.iter().any(|p| rest.starts_with(p.as_str())))
    };
    if let Some(open) = first.get(col.saturating_sub(1)..).and_then(|r| r.find('{')) {
        let from = col.saturating_sub(1) + open;
        let hits: Vec<usize> = (from..first.len())
            .filter(|&i| {
                first.get(..i).is_some_and(|head| head.ends_with(['{', ' ', ','])) && is_key_at(first, i)
            })
            .collect();
        if let Some(&second) = hits.get(1) {
            return Some((line, second + 1));
        }
    }
    let indent = col.checked_sub(1)?;
    let mut hits = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(line - 1) {
        let body = l.trim_start();
        let ind = l.len() - body.len();
        if i > line - 1 {
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            if ind < indent {
                break;
            }
        }
        if ind <= indent && is_key_at(l, indent) {
            hits.push(i);
        }
    }
    hits.get(1).map(|&i| (i + 1, indent + 1))
}

/// Where an error that yaml_serde reports at the document start really is: a value that fits
/// none of an untagged enum's forms.
fn relocate(text: &str, msg: &str) -> Option<(String, (usize, usize), &'static str)> {
    let untagged = [
        (
            "RunCount",
            "runs",
            "runs is a count (e.g. 5) or {min, max} with target_cv, target_mde or `until: concluded`",
        ),
        ("CpuSet", "host.cpus", ""),
        ("KernelRef", "guest.kernel", ""),
    ];
    let (_, field, forms) = untagged
        .iter()
        .find(|(e, _, _)| msg.contains(&format!("untagged enum {e}")))?;
    let path: Vec<locate::Seg> = field.split('.').map(|k| locate::Seg::Key(k.into())).collect();
    Some((field.to_string(), locate::locate(text, &path)?, *forms))
}

/// yaml_serde prefixes messages with the path of the field being read ("workloads[0]: ...").
fn field_from_serde_message(msg: &str) -> String {
    match msg.split_once(": ") {
        Some((head, _)) if !head.contains(' ') && head != "." => head.to_string(),
        _ => String::new(),
    }
}

fn strip_location(msg: &str) -> String {
    let msg = match msg.split_once(": ") {
        Some((head, rest)) if !head.contains(' ') => rest,
        _ => msg,
    };
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.yaml");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let (_d, p) =
            write("name: x\nlevels: [1.0]\nworkloads:\n  - command: lock\n    metric: m\n    threadz: 3\n");
        let e = load(&p).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("threadz"), "{e}");
        assert!(e.to_string().starts_with(&format!("{}:6:", p.display())), "{e}");
    }

    #[test]
    fn duplicate_keys_are_located_at_the_duplicate_in_any_mapping() {
        let head = "name: x\nlevels: [1.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n";
        let cases = [
            (format!("{head}runs: 2\nruns: 3\n"), 7, 1, "runs"),
            (
                format!("{head}timeouts:\n  run_s: 30\n  boot_s: 20\n  run_s: 40\n"),
                9,
                3,
                "timeouts.run_s",
            ),
            (
                format!("{head}    args: {{algo: tas, threads: 2, algo: ttas}}\n"),
                6,
                35,
                "workloads[0].args.algo",
            ),
            (
                format!("{head}    metric: ops_total\n  - command: lock\n    metric: m\n"),
                6,
                5,
                "workloads[0].metric",
            ),
            (
                "name: x\nguest:\n  vcpus: 1\n  memory_mib: 256\n  vcpus: 2\nlevels: [1]\n".to_string(),
                5,
                3,
                "guest.vcpus",
            ),
        ];
        for (text, line, col, field) in cases {
            let (_d, p) = write(&text);
            let e = load(&p).unwrap_err();
            assert_eq!(
                (e.line, e.column, e.field.as_str()),
                (Some(line), Some(col), field),
                "{e}\n{text}"
            );
            assert!(e.message.contains("duplicate field"), "{e}");
        }
    }

    #[test]
    fn missing_file_is_reported() {
        let e = load(Path::new("/nonexistent/s.yaml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/s.yaml") && e.message.contains("cannot read"));
    }

    fn sets(args: &[&str]) -> Vec<overrides::Override> {
        args.iter().map(|a| overrides::parse(a).unwrap()).collect()
    }

    const GOOD: &str = "# a comment\nname: x\nhost: {cpus: 2}\nlevels: [1.0]\nworkloads:\n  - command: lock\n    \
                        metric: ops_per_sec\n    args: {hold-ns: 200}\n";

    #[test]
    fn overrides_make_the_scenario_as_run_and_keep_the_file_for_locating() {
        let (_d, p) = write(GOOD);
        let l = load_with(
            &p,
            &sets(&["host.cpus=1", "runs=3", "workloads.0.args.hold-ns=4000"]),
        )
        .unwrap();
        assert_eq!(l.scenario.host.cpus, Some(CpuSet::Count(1)));
        assert_eq!(l.scenario.runs, RunCount::Fixed(3));
        assert_eq!(l.scenario.workloads[0].args["hold-ns"], ArgValue::Int(4000));
        assert!(
            l.text.starts_with(
                "# s.yaml as run with --set host.cpus=1 --set runs=3 --set workloads.0.args.hold-ns=4000\n"
            ),
            "{}",
            l.text
        );
        assert_eq!(l.sha256, hex(&Sha256::digest(l.text.as_bytes())));
        assert_eq!(l.file_text, GOOD);
        // The text as run reads back to the same scenario without the flags.
        let (_d2, p2) = write(&l.text);
        assert_eq!(load(&p2).unwrap().scenario, l.scenario);
        // Without overrides, the file as it is.
        let plain = load_with(&p, &[]).unwrap();
        assert_eq!((plain.text.as_str(), plain.sets.len()), (GOOD, 0));
        // An error after loading: about an overridden field it names the flag; about another
        // field, the file's line.
        let k = |s: &str| locate::Seg::Key(s.into());
        let e = l.error_at(&[k("runs")], "must be at least 1");
        assert_eq!(e.to_string(), "--set runs=3: field `runs`: must be at least 1");
        let e = l.error_at(&[k("host"), k("cpus"), locate::Seg::Index(0)], "no such CPU");
        assert_eq!(
            e.to_string(),
            "--set host.cpus=1: field `host.cpus[0]`: no such CPU"
        );
        let e = l.error_at(&[k("levels")], "too high");
        assert_eq!(
            e.to_string(),
            format!("{}:4:1: field `levels`: too high", p.display())
        );
    }

    #[test]
    fn what_an_override_breaks_names_the_flag_and_what_the_file_breaks_its_line() {
        let (_d, p) = write(GOOD);
        let e = load_with(&p, &sets(&["runs=2", "host.cpuz=16"])).unwrap_err();
        assert_eq!(
            (e.file.to_str(), e.line, e.field.as_str()),
            (Some("--set host.cpuz=16"), None, "host.cpuz")
        );
        assert!(e.message.starts_with("unknown field `cpuz`"), "{e}");
        assert!(
            e.to_string()
                .starts_with("--set host.cpuz=16: field `host.cpuz`: unknown field `cpuz`"),
            "{e}"
        );
        let e = load_with(&p, &sets(&["runs=notanumber", "guest.vcpus=2"])).unwrap_err();
        assert_eq!(
            (e.file.to_str(), e.field.as_str()),
            (Some("--set runs=notanumber"), "runs")
        );
        assert!(
            e.message.contains("found `notanumber`") && e.message.contains("runs is a count"),
            "{e}"
        );
        let e = load_with(&p, &sets(&["guest.vcpus=-1"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--set guest.vcpus=-1: field `guest.vcpus`: invalid type: integer `-1`, expected u32"
        );
        let e = load_with(&p, &sets(&["workloads.1.metric=x"])).unwrap_err();
        assert_eq!(e.field, "workloads[1].metric");
        assert!(e.message.contains("has 1 item(s)"), "{e}");
        // The file's own error stays the file's, located, whatever the overrides.
        let (_d, p) = write(&format!("{GOOD}runz: 3\n"));
        let e = load_with(&p, &sets(&["runs=2"])).unwrap_err();
        assert_eq!((e.file.as_path(), e.line), (p.as_path(), Some(9)), "{e}");
        // ... unless an override mends it.
        let (_d, p) = write(&GOOD.replace("cpus: 2", "cpus: two"));
        assert!(load_with(&p, &[]).is_err());
        assert_eq!(
            load_with(&p, &sets(&["host.cpus=2"])).unwrap().scenario.host.cpus,
            Some(CpuSet::Count(2))
        );
    }

    #[test]
    fn loads_minimal_with_defaults() {
        let (_d, p) =
            write("name: x\nlevels: [1.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n");
        let l = load(&p).unwrap();
        assert_eq!(l.scenario.guest.vcpus, 1);
        assert_eq!(l.scenario.runs, RunCount::Fixed(1));
        assert_eq!(l.sha256.len(), 64);
    }
}
