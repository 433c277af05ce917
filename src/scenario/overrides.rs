//! `--set key=value` on `ocrig run` and `ocrig validate`: a dotted path into the scenario's YAML
//! document (a numeric segment indexes a sequence: `workloads.0.args.hold-ns`) and a value read
//! as YAML (`16`, `[1.0, 2.0]`, `{min: 3, max: 9}`, `tas`). Each is applied to the parsed
//! document before it is deserialized, so every check of a scenario applies to the overridden
//! one; what an override breaks is said naming the flag (see [`super::load_with`]).

use std::fmt;

use yaml_serde::{Mapping, Value};

use super::locate::{Seg, path_string};

/// One `--set KEY=VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The flag's argument as given (`host.cpus=16`).
    pub given: String,
    pub path: Vec<Seg>,
    pub value: Value,
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--set {}", self.given)
    }
}

impl Override {
    /// The field it sets, as errors name fields (`workloads[0].args.hold-ns`).
    pub fn field(&self) -> String {
        path_string(&self.path)
    }

    /// True when an error about `field` is about what this override set: one path is a prefix
    /// of the other (an error at `host` after `--set host.cpus=…`, or at `host.cpus.1` after
    /// `--set host.cpus=[…]`).
    pub fn touches(&self, field: &[Seg]) -> bool {
        !field.is_empty() && (field.starts_with(&self.path) || self.path.starts_with(field))
    }
}

/// Parses `KEY=VALUE` (clap's value parser of `--set`).
pub fn parse(arg: &str) -> Result<Override, String> {
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("'{arg}' is not KEY=VALUE (e.g. host.cpus=16)"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("'{arg}' names no key (e.g. host.cpus=16)"));
    }
    let path = key
        .split('.')
        .map(|s| match s {
            "" => Err(format!(
                "'{key}' has an empty segment (keys are dotted: workloads.0.args.threads)"
            )),
            n if n.bytes().all(|b| b.is_ascii_digit()) => n
                .parse()
                .map(Seg::Index)
                .map_err(|_| format!("'{n}' is not an index")),
            k => Ok(Seg::Key(k.to_string())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let value: Value = match value.trim() {
        "" => Value::Null,
        v => yaml_serde::from_str(v).map_err(|e| format!("the value of '{key}' is not YAML: {e}"))?,
    };
    Ok(Override {
        given: arg.to_string(),
        path,
        value,
    })
}

/// Sets `o`'s value at its path in `doc`, creating the mappings on the way that are missing
/// (`--set schedule.seed=7` in a file without `schedule`). A sequence index must name an item
/// that exists. The error says what stood in the way.
pub fn apply(doc: &mut Value, o: &Override) -> Result<(), String> {
    let mut at = doc;
    for (i, seg) in o.path.iter().enumerate() {
        let here = || match i {
            0 => "the document".to_string(),
            _ => format!("`{}`", path_string(&o.path[..i])),
        };
        if at.is_null() && matches!(seg, Seg::Key(_)) {
            *at = Value::Mapping(Mapping::new());
        }
        let last = i + 1 == o.path.len();
        at = match (seg, at) {
            (Seg::Key(k), Value::Mapping(m)) => {
                let key = Value::String(k.clone());
                if !m.contains_key(&key) {
                    m.insert(key.clone(), Value::Null);
                }
                m.get_mut(&key).expect("just inserted")
            }
            (Seg::Index(n), Value::Sequence(s)) => {
                let len = s.len();
                s.get_mut(*n).ok_or_else(|| {
                    format!(
                        "{} has {len} item(s), so no index {n} (indices count from 0)",
                        here()
                    )
                })?
            }
            (Seg::Key(k), other) => {
                return Err(format!(
                    "{} is {}, not a mapping with a key `{k}`",
                    here(),
                    kind(other)
                ));
            }
            (Seg::Index(n), other) => {
                return Err(format!(
                    "{} is {}, not a sequence with an item {n}",
                    here(),
                    kind(other)
                ));
            }
        };
        if last {
            *at = o.value.clone();
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "empty",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a sequence",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The text of a scenario as overridden: a comment naming the file and the flags, then the
/// document (the file's comments are not kept).
pub fn render(file: &std::path::Path, doc: &Value, sets: &[Override]) -> Result<String, String> {
    let body = yaml_serde::to_string(doc).map_err(|e| format!("cannot write the scenario as YAML: {e}"))?;
    let flags = sets
        .iter()
        .map(|o| shell_word(&o.to_string()))
        .collect::<Vec<_>>();
    // The file's name, not its path: a resume that names the same file otherwise makes the same text.
    let name = file
        .file_name()
        .map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into());
    Ok(format!(
        "# {name} as run with {}\n# (the overrides applied by ocrig; the file's comments are not kept)\n{body}",
        flags.join(" ")
    ))
}

/// `--set KEY=VALUE` quoted where a shell would split it.
fn shell_word(s: &str) -> String {
    match s.strip_prefix("--set ") {
        Some(kv) if kv.contains(|c: char| c.is_whitespace() || "[]{}'\"*?$#".contains(c)) => {
            format!("--set '{}'", kv.replace('\'', r"'\''"))
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Value {
        yaml_serde::from_str(text).unwrap()
    }

    fn set(doc: &mut Value, arg: &str) -> Result<(), String> {
        apply(doc, &parse(arg)?)
    }

    const DOC: &str = "name: x\nhost: {cpus: 2}\nlevels: [1.0]\nworkloads:\n  - command: lock\n    \
                       metric: ops_per_sec\n    args: {hold-ns: 200}\n";

    #[test]
    fn parses_dotted_paths_with_indices_and_yaml_values() {
        let o = parse("workloads.0.args.hold-ns=4000").unwrap();
        assert_eq!(
            o.path,
            [
                Seg::Key("workloads".into()),
                Seg::Index(0),
                Seg::Key("args".into()),
                Seg::Key("hold-ns".into())
            ]
        );
        assert_eq!(o.value, doc("4000"));
        assert_eq!(o.field(), "workloads[0].args.hold-ns");
        assert_eq!(o.to_string(), "--set workloads.0.args.hold-ns=4000");
        assert_eq!(parse("levels=[1.0, 2.0]").unwrap().value, doc("[1.0, 2.0]"));
        assert_eq!(parse("name=a=b").unwrap().value, doc("a=b"));
        assert_eq!(parse("guest.cpu=").unwrap().value, Value::Null);
        assert_eq!(
            parse("runs={min: 3, max: 9}").unwrap().value,
            doc("{min: 3, max: 9}")
        );
        for bad in ["host.cpus", "=3", "host..cpus=1", "levels=[1,"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sets_replaces_and_creates_what_the_path_names() {
        let mut d = doc(DOC);
        set(&mut d, "host.cpus=16").unwrap();
        set(&mut d, "runs=3").unwrap();
        set(&mut d, "levels=[1.0, 2.0]").unwrap();
        set(&mut d, "workloads.0.args.hold-ns=4000").unwrap();
        set(&mut d, "schedule.seed=7").unwrap();
        let want = doc(
            "name: x\nhost: {cpus: 16}\nlevels: [1.0, 2.0]\nworkloads:\n  - command: lock\n    \
             metric: ops_per_sec\n    args: {hold-ns: 4000}\nruns: 3\nschedule: {seed: 7}\n",
        );
        assert_eq!(d, want);
        // The order of the file's keys is kept; a new key goes last.
        let text = yaml_serde::to_string(&d).unwrap();
        assert!(text.starts_with("name: x\nhost:\n  cpus: 16\nlevels:"), "{text}");
    }

    #[test]
    fn says_what_stands_in_the_way() {
        let mut d = doc(DOC);
        let e = set(&mut d, "workloads.3.metric=x").unwrap_err();
        assert_eq!(
            e,
            "`workloads` has 1 item(s), so no index 3 (indices count from 0)"
        );
        let e = set(&mut d, "name.first=x").unwrap_err();
        assert_eq!(e, "`name` is a string, not a mapping with a key `first`");
        let e = set(&mut d, "host.0=x").unwrap_err();
        assert_eq!(e, "`host` is a mapping, not a sequence with an item 0");
        let e = set(&mut d, "0=x").unwrap_err();
        assert_eq!(e, "the document is a mapping, not a sequence with an item 0");
    }

    #[test]
    fn an_override_touches_the_fields_on_its_path() {
        let o = parse("host.cpus=[0, 1]").unwrap();
        let k = |s: &str| Seg::Key(s.into());
        assert!(o.touches(&[k("host")]));
        assert!(o.touches(&[k("host"), k("cpus")]));
        assert!(o.touches(&[k("host"), k("cpus"), Seg::Index(1)]));
        assert!(!o.touches(&[k("host"), k("backend")]));
        assert!(!o.touches(&[]));
    }

    #[test]
    fn renders_the_flags_as_a_shell_would_take_them() {
        let sets = [
            parse("host.cpus=16").unwrap(),
            parse("levels=[1.0, 2.0]").unwrap(),
        ];
        let text = render(std::path::Path::new("scenarios/s.yaml"), &doc("name: x\n"), &sets).unwrap();
        assert_eq!(
            text,
            "# s.yaml as run with --set host.cpus=16 --set 'levels=[1.0, 2.0]'\n\
             # (the overrides applied by ocrig; the file's comments are not kept)\nname: x\n"
        );
    }
}
