//! Finds where a field path (e.g. `workloads[1].args.threads`) stands in a YAML text, so errors
//! found after parsing can still name file:line:column. Handles block mappings and sequences
//! and inline `{...}` / `[...]` values; falls back to the nearest enclosing field it can find.

/// One step of a field path.
#[derive(Debug, Clone, PartialEq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Renders a path as `a.b[2].c`.
pub fn path_string(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k)
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

struct Line<'a> {
    no: usize,
    indent: usize,
    body: &'a str,
}

fn content_lines(text: &str) -> Vec<Line<'_>> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let body = raw.trim_start();
            if body.is_empty() || body.starts_with('#') || body.starts_with("---") {
                return None;
            }
            Some(Line {
                no: i + 1,
                indent: raw.len() - body.len(),
                body,
            })
        })
        .collect()
}

/// (line, column), both 1-based, of the deepest part of `path` found in `text`.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let lines = content_lines(text);
    // The block being searched: line indices [lo, hi) whose entries sit deeper than `parent`.
    let (mut lo, mut hi) = (0usize, lines.len());
    let mut parent: isize = -1;
    let mut found: Option<(usize, usize)> = None;
    for seg in path {
        match seg {
            Seg::Key(key) => {
                let hit = (lo..hi).find_map(|i| {
                    let l = &lines[i];
                    // A key may follow a sequence dash on the same line: "- name: x".
                    let (col, body) = strip_dashes(l.indent, l.body);
                    (col as isize > parent && is_key(body, key)).then_some((i, col))
                });
                let Some((i, col)) = hit else {
                    // Maybe an inline mapping on the parent's line: "args: {threads: 0}".
                    if let Some((line, c)) = found.and_then(|(ln, _)| inline_key(text, ln, key)) {
                        return Some((line, c));
                    }
                    return found;
                };
                found = Some((lines[i].no, col + 1));
                parent = col as isize;
                lo = i + 1;
                hi = block_end(&lines, lo, hi, col);
                // The value may sit on the key's own line ("- name: x" mapping continues below).
            }
            Seg::Index(n) => {
                let items: Vec<(usize, usize)> = (lo..hi)
                    .filter(|&i| lines[i].indent as isize > parent || lines[i].body.starts_with("- "))
                    .filter(|&i| lines[i].body.starts_with('-'))
                    .map(|i| (i, lines[i].indent))
                    .collect();
                let min_indent = items.iter().map(|&(_, ind)| ind).min();
                let items: Vec<usize> = items
                    .into_iter()
                    .filter(|&(_, ind)| Some(ind) == min_indent)
                    .map(|(i, _)| i)
                    .collect();
                let Some(&i) = items.get(*n) else { return found };
                let dash = lines[i].indent;
                found = Some((lines[i].no, dash + 1));
                // Keys of the item sit right after "- ".
                parent = dash as isize;
                let next = items.get(n + 1).copied().unwrap_or(hi);
                lo = i;
                hi = next.min(block_end(&lines, i + 1, hi, dash));
                // Let the key search see the item line itself, with its dash stripped.
            }
        }
    }
    found
}

fn strip_dashes(indent: usize, body: &str) -> (usize, &str) {
    let mut col = indent;
    let mut b = body;
    while let Some(rest) = b.strip_prefix("- ") {
        let trimmed = rest.trim_start();
        col += b.len() - trimmed.len();
        b = trimmed;
    }
    (col, b)
}

fn is_key(body: &str, key: &str) -> bool {
    let unquoted = body
        .strip_prefix('"')
        .and_then(|b| b.strip_prefix(key))
        .and_then(|b| b.strip_prefix('"'));
    let rest = unquoted.or_else(|| body.strip_prefix(key));
    matches!(rest, Some(r) if r.starts_with(':'))
}

/// First line index at or after `from` (before `hi`) indented no deeper than `indent`.
fn block_end(lines: &[Line<'_>], from: usize, hi: usize, indent: usize) -> usize {
    (from..hi)
        .find(|&i| lines[i].indent <= indent && !lines[i].body.starts_with("- ") || lines[i].indent < indent)
        .unwrap_or(hi)
}

fn inline_key(text: &str, line_no: usize, key: &str) -> Option<(usize, usize)> {
    let line = text.lines().nth(line_no - 1)?;
    let open = line.find(['{', '['])?;
    let rel = line[open..].find(&format!("{key}:"))?;
    Some((line_no, open + rel + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Seg {
        Seg::Key(s.into())
    }

    const DOC: &str = "\
name: smoke
# comment
guest:
  vcpus: 1
  memory_mib: 512
levels: [0.5, 1.0]
variants:
  - name: base
    baseline: true
  - name: patched
    cmdline: nopvspin
workloads:
  - name: lock
    command: lock
    args:
      threads: 2
      algo: ticket
  - command: lock
    args: {threads: 0, algo: tas}
    metric: ops_per_sec
";

    #[test]
    fn finds_nested_keys_and_sequence_items() {
        assert_eq!(locate(DOC, &[k("name")]), Some((1, 1)));
        assert_eq!(locate(DOC, &[k("guest"), k("memory_mib")]), Some((5, 3)));
        assert_eq!(locate(DOC, &[k("levels")]), Some((6, 1)));
        assert_eq!(
            locate(DOC, &[k("variants"), Seg::Index(1), k("cmdline")]),
            Some((11, 5))
        );
        assert_eq!(
            locate(DOC, &[k("variants"), Seg::Index(1), k("name")]),
            Some((10, 5))
        );
        assert_eq!(
            locate(DOC, &[k("workloads"), Seg::Index(0), k("args"), k("algo")]),
            Some((17, 7))
        );
        assert_eq!(
            locate(DOC, &[k("workloads"), Seg::Index(1), k("metric")]),
            Some((20, 5))
        );
    }

    #[test]
    fn finds_keys_in_inline_mappings_and_falls_back_to_parent() {
        assert_eq!(
            locate(DOC, &[k("workloads"), Seg::Index(1), k("args"), k("threads")]),
            Some((19, 12))
        );
        assert_eq!(locate(DOC, &[k("guest"), k("nothere")]), Some((3, 1)));
        assert_eq!(locate(DOC, &[k("missing")]), None);
    }

    #[test]
    fn renders_paths() {
        assert_eq!(
            path_string(&[k("workloads"), Seg::Index(1), k("args")]),
            "workloads[1].args"
        );
    }
}
