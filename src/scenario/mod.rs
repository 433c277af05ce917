//! Scenarios: the YAML model, loading with file:line:column errors, matrix expansion and
//! validation. Nothing here boots anything or touches the network.

pub mod expand;
pub mod locate;
pub mod model;
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
    pub text: String,
    pub sha256: String,
    pub scenario: Scenario,
}

impl Loaded {
    /// An error at a field path, located in the file when possible.
    pub fn error_at(&self, path: &[locate::Seg], message: impl Into<String>) -> ScenarioError {
        let pos = locate::locate(&self.text, path);
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
    let scenario: Scenario = yaml_serde::from_str(&text).map_err(|e| {
        let msg = e.to_string();
        let mut err = ScenarioError {
            file: path.to_path_buf(),
            line: e.location().map(|l| l.line()),
            column: e.location().map(|l| l.column()),
            field: field_from_serde_message(&msg),
            message: strip_location(&msg),
        };
        // Some errors are placed at the document start; find the field they are about.
        if err.line.is_none_or(|l| l == 1)
            && let Some((field, (line, col))) = relocate(&text, &msg)
        {
            let found = text
                .lines()
                .nth(line - 1)
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim());
            if let Some(v) = found.filter(|v| !v.is_empty() && !msg.contains("duplicate field")) {
                err.message = format!("{}; found `{v}`", err.message);
            }
            (err.field, err.line, err.column) = (field, Some(line), Some(col));
        }
        err
    })?;
    let sha256 = hex(&Sha256::digest(text.as_bytes()));
    Ok(Loaded {
        path: path.to_path_buf(),
        text,
        sha256,
        scenario,
    })
}

/// Where an error that yaml_serde reports at the document start really is: a duplicated key
/// (its second occurrence), or a value that fits none of an untagged enum's forms.
fn relocate(text: &str, msg: &str) -> Option<(String, (usize, usize))> {
    if let Some(key) = msg
        .split("duplicate field `")
        .nth(1)
        .and_then(|r| r.split('`').next())
    {
        let (i, line) = text
            .lines()
            .enumerate()
            .filter(|(_, l)| {
                l.trim_start()
                    .trim_start_matches("- ")
                    .starts_with(&format!("{key}:"))
            })
            .nth(1)?;
        return Some((key.to_string(), (i + 1, line.len() - line.trim_start().len() + 1)));
    }
    let untagged = [
        ("RunCount", "runs"),
        ("CpuSet", "host.cpus"),
        ("KernelRef", "guest.kernel"),
    ];
    let (_, field) = untagged
        .iter()
        .find(|(e, _)| msg.contains(&format!("untagged enum {e}")))?;
    let path: Vec<locate::Seg> = field.split('.').map(|k| locate::Seg::Key(k.into())).collect();
    Some((field.to_string(), locate::locate(text, &path)?))
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
    fn missing_file_is_reported() {
        let e = load(Path::new("/nonexistent/s.yaml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/s.yaml") && e.message.contains("cannot read"));
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
