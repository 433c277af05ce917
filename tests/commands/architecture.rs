//! The layering of `docs/src/internals.md` (and DESIGN), checked over the source: data flows one
//! way, and a folder of `src/` reads only the layers below it. For every file under `src/` this
//! collects the top-level modules it names (`use crate::X`, `crate::X::…` paths, `crate::{X, …}`
//! groups, and `super::…` paths that climb out of its folder), leaving out comments, string
//! literals and test-only code (`#[cfg(test)]` items, the files they declare, `tests.rs`,
//! `testing/`), and fails naming file and line when a module reaches a layer above its own.
//!
//! Fast tier: reads files only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Which top-level module of `src/` may import which: the layering as a table, one rule a module.
/// Imports point down the data flow (scenario → plan → executor → journal → stats → reports),
/// so the table has no loop (checked below). `*` = every module of the table but `main`. A new
/// module fails the test until it has a row here.
const ALLOWED: &[(&str, &[&str])] = &[
    // The entry point: parses the command line and dispatches.
    ("main", &["*"]),
    // `commands/` only parses and dispatches; it may reach anything below to do so.
    ("commands", &["*"]),
    // The command line names the options' types: report formats, backends, colour.
    ("cli", &["report", "scenario", "color", BASE]),
    // `orchestrate/` ties one sweep together for 1..N hosts (preflight, claims, results
    // directory, resume, finish) and writes the reports at its end.
    (
        "orchestrate",
        &[
            "sweep",
            "executor",
            "backend",
            "guest",
            "scenario",
            "journal",
            "stats",
            "report",
            "telemetry",
            BASE,
        ],
    ),
    // `sweep/`: the plan and the one scheduler. It talks to the `Executor` trait only (never a
    // backend), appends to the journal and reads `stats` for its stopping rules; never reports.
    (
        "sweep",
        &["executor", "scenario", "journal", "stats", "telemetry", BASE],
    ),
    // `executor/`: brings guests up through `backend` and `guest`, starts gated runs, records
    // `telemetry` around them. It takes the scenario's types (`GuestVariant`), not the plan's.
    ("executor", &["backend", "guest", "scenario", "telemetry", BASE]),
    // `telemetry/` records what the host and guests say around a run (through `backend`'s
    // guests and `guest`'s SSH) in the journal's host-record types. It records; it does not judge.
    ("telemetry", &["backend", "guest", "journal", BASE]),
    // `scenario/`: the YAML model, validation, expansion, host-fit arithmetic; validation checks a
    // remote libvirt URI with `backend`'s parser. Knows nothing of running guests.
    ("scenario", &["backend", "telemetry", BASE]),
    // `backend/` starts guests (QEMU, libvirt, templates) and reaches them over `guest`'s SSH.
    ("backend", &["guest", BASE]),
    // `guest/`: SSH to a guest; its readiness markers come from `image`.
    ("guest", &[BASE]),
    // `report/` reads `stats` (the model), `journal`, and of `telemetry` and `image` only the
    // readers of what they wrote. No exporter reads another's output.
    ("report", &["stats", "journal", "telemetry", "color", BASE]),
    // `stats/`: pure functions over journal data. It never imports `report`.
    ("stats", &["journal", "telemetry", BASE]),
    // `journal/`: the append-only record and its one accounting rule; its header names kernels
    // (`image::KernelIdentity`) and CPU places (`topology`).
    ("journal", &[BASE]),
    // Below everything, and importing none of the layers above: host facts, the payload binary,
    // the guest image, the CPU topology, the host's files, the shared words, and the terminal's
    // colour and width.
    ("color", &[]),
    ("terminal", &[]),
    ("payload_bin", &["image", "hostfs", "vocabulary"]),
    ("host", &["topology", "hostfs", "vocabulary"]),
    ("image", &["hostfs", "vocabulary"]),
    ("topology", &["hostfs", "vocabulary"]),
    ("hostfs", &[]),
    ("vocabulary", &[]),
];

/// Stands for the modules below everything in a row of `ALLOWED`.
const BASE: &str = "<base>";
const BASE_MODULES: &[&str] = &[
    "color",
    "terminal",
    "host",
    "payload_bin",
    "image",
    "topology",
    "hostfs",
    "vocabulary",
];

/// Compiled for tests only: exempt, and imports of it are test code anyway.
const EXEMPT: &[&str] = &["testing"];

fn allowed(from: &str, to: &str) -> Option<bool> {
    let (_, may) = ALLOWED.iter().find(|(m, _)| *m == from)?;
    ALLOWED.iter().find(|(m, _)| *m == to)?;
    Some(may.iter().any(|&m| {
        m == to || (m == "*" && to != "main") || (m == BASE && BASE_MODULES.contains(&to) && from != to)
    }))
}

/// Whether `to` may reach `from` through the table (then `from -> to` runs back up).
fn reaches(to: &str, from: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![to.to_string()];
    while let Some(m) = todo.pop() {
        if m == from {
            return true;
        }
        if !seen.insert(m.clone()) {
            continue;
        }
        for (n, _) in ALLOWED {
            if *n != m && allowed(&m, n) == Some(true) {
                todo.push(n.to_string());
            }
        }
    }
    false
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Import {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The imports that break the layering, one message each (file:line: what and why).
fn violations(imports: &[Import]) -> Vec<String> {
    let mut out = Vec::new();
    for i in imports {
        if EXEMPT.contains(&i.from.as_str()) || EXEMPT.contains(&i.to.as_str()) || i.from == i.to {
            continue;
        }
        match allowed(&i.from, &i.to) {
            None => out.push(format!(
                "{}:{}: `{}` -> `{}`: a module without a row in ALLOWED of tests/commands/architecture.rs; give it one",
                i.file, i.line, i.from, i.to
            )),
            Some(true) => {}
            Some(false) => {
                let why = if reaches(&i.to, &i.from) {
                    format!("a layer above it (`{}` may itself reach `{}`)", i.to, i.from)
                } else {
                    "not a layer its row in ALLOWED lets it read".to_string()
                };
                out.push(format!(
                    "{}:{}: `{}` imports `{}`, {}: imports point down the data flow",
                    i.file, i.line, i.from, i.to, why
                ));
            }
        }
    }
    out
}

/// Blanks comments, string and char literals (newlines kept, so lines still count).
fn code_only(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !(i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
        {
            // A raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            for _ in i..=j {
                out.push(' ');
            }
            i = j + 1;
            while i < b.len() {
                if b[i] == '"' && (1..=hashes).all(|k| b.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                out.push(blank(b[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() {
                if b[i] == '\\' {
                    out.push(' ');
                    if let Some(&n) = b.get(i + 1) {
                        out.push(blank(n));
                    }
                    i += 2;
                } else if b[i] == '"' {
                    out.push(' ');
                    i += 1;
                    break;
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}'); otherwise a lifetime, kept.
            let end = if next == Some('\\') {
                (i + 2..b.len().min(i + 12)).find(|&k| b[k] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks every `#[cfg(test)]` item (a module, function, `use`, …), returning the names of the
/// modules so declared out of line (`#[cfg(test)] mod tests;`): their files are test code.
fn without_test_items(code: &str) -> (String, Vec<String>) {
    let b: Vec<char> = code.chars().collect();
    let mut out: Vec<char> = b.clone();
    let mut test_mods = Vec::new();
    let mut from = 0;
    while let Some(pos) = find_chars(&b, "#[cfg(", from) {
        // The attribute's whole text, to its closing bracket.
        let mut depth = 0;
        let mut end = pos + 1;
        while end < b.len() {
            match b[end] {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        let attr: String = b[pos..=end.min(b.len() - 1)].iter().collect();
        let attr: String = attr.chars().filter(|c| !c.is_whitespace()).collect();
        let is_test = attr == "#[cfg(test)]" || attr.starts_with("#[cfg(all(test,");
        if !is_test {
            from = end;
            continue;
        }
        // The item: further attributes, then up to its `;` or its braces' end.
        let mut k = end + 1;
        loop {
            while k < b.len() && b[k].is_whitespace() {
                k += 1;
            }
            if b.get(k) == Some(&'#') {
                let mut d = 0;
                while k < b.len() {
                    match b[k] {
                        '[' => d += 1,
                        ']' => {
                            d -= 1;
                            if d == 0 {
                                k += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    k += 1;
                }
            } else {
                break;
            }
        }
        let item_start = k;
        let mut d = 0;
        while k < b.len() {
            match b[k] {
                '{' => d += 1,
                '}' => {
                    d -= 1;
                    if d == 0 {
                        break;
                    }
                }
                ';' if d == 0 => break,
                _ => {}
            }
            k += 1;
        }
        let item: String = b[item_start..k.min(b.len())].iter().collect();
        let words: Vec<&str> = item.split_whitespace().collect();
        if b.get(k) == Some(&';')
            && let Some(m) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(m + 1)
        {
            test_mods.push(name.trim_end_matches(';').to_string());
        }
        for c in out.iter_mut().take((k + 1).min(b.len())).skip(pos) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        from = k + 1;
    }
    (out.into_iter().collect(), test_mods)
}

fn find_chars(hay: &[char], needle: &str, from: usize) -> Option<usize> {
    let n: Vec<char> = needle.chars().collect();
    (from..hay.len().saturating_sub(n.len() - 1)).find(|&i| hay[i..i + n.len()] == n[..])
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The top-level modules `code` (comments, strings and test items blanked) names, with lines.
/// `module_path` is the file's module path under the crate (`["stats", "effect"]`), for
/// `super::`.
fn referenced(code: &str, module_path: &[String]) -> Vec<(usize, String)> {
    let b: Vec<char> = code.chars().collect();
    let mut line_of = Vec::with_capacity(b.len());
    let mut line = 1;
    for &c in &b {
        line_of.push(line);
        if c == '\n' {
            line += 1;
        }
    }
    let ident_at = |mut k: usize| -> (String, usize) {
        while k < b.len() && b[k].is_whitespace() {
            k += 1;
        }
        let s = k;
        while k < b.len() && is_ident(b[k]) {
            k += 1;
        }
        (b[s..k].iter().collect(), k)
    };
    // After `crate::` (or a `super::` chain that reached the crate root) at `k`: the module named,
    // or every module of a `{a, b::c}` group.
    let names_at = |k: usize| -> Vec<String> {
        let mut k = k;
        while k < b.len() && b[k].is_whitespace() {
            k += 1;
        }
        if b.get(k) == Some(&'{') {
            let mut names = Vec::new();
            let mut depth = 0;
            let mut expect = true;
            while k < b.len() {
                match b[k] {
                    '{' => {
                        depth += 1;
                        if depth == 1 {
                            expect = true;
                        }
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expect = true,
                    c if depth == 1 && expect && is_ident(c) => {
                        let (name, e) = ident_at(k);
                        names.push(name);
                        expect = false;
                        k = e;
                        continue;
                    }
                    c if !c.is_whitespace() && depth == 1 => expect = false,
                    _ => {}
                }
                k += 1;
            }
            names
        } else {
            let (name, _) = ident_at(k);
            if name.is_empty() { vec![] } else { vec![name] }
        }
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let before_ok = i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == '$');
        if before_ok && b[i..].starts_with(&['c', 'r', 'a', 't', 'e', ':', ':']) {
            for n in names_at(i + 7) {
                found.push((line_of[i], n));
            }
            i += 7;
            continue;
        }
        if before_ok && b[i..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
            let start = i;
            let mut ups = 0;
            while b[i..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
                ups += 1;
                i += 7;
                while i < b.len() && b[i].is_whitespace() {
                    i += 1;
                }
            }
            // From `a/b.rs` (path [a, b]) one `super` is `a`, two the crate root.
            if ups >= module_path.len() {
                for n in names_at(i) {
                    found.push((line_of[start], n));
                }
            }
            continue;
        }
        i += 1;
    }
    found
}

/// The file's module path: `src/stats/effect.rs` → [stats, effect]; `src/stats/mod.rs` →
/// [stats]; `src/host.rs` → [host].
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every import between top-level modules of the crate under `src`, test code left out.
fn imports(src: &Path) -> Vec<Import> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    // Pass 1: the files that `#[cfg(test)] mod x;` declares.
    let mut test_files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut cleaned = Vec::new();
    for f in &files {
        let (code, test_mods) = without_test_items(&code_only(&std::fs::read_to_string(f).unwrap()));
        let dir = if matches!(
            f.file_name().unwrap().to_str(),
            Some("mod.rs" | "main.rs" | "lib.rs")
        ) {
            f.parent().unwrap().to_path_buf()
        } else {
            f.with_extension("")
        };
        for m in test_mods {
            test_files.insert(dir.join(format!("{m}.rs")));
            test_files.insert(dir.join(&m).join("mod.rs"));
        }
        cleaned.push((f.clone(), code));
    }
    let mut out = Vec::new();
    for (f, code) in cleaned {
        let rel = f.strip_prefix(src).unwrap();
        let name = f.file_name().unwrap().to_string_lossy();
        let under_test_dir = test_files
            .iter()
            .any(|t| t.file_name().is_some_and(|n| n == "mod.rs") && f.starts_with(t.parent().unwrap()));
        if test_files.contains(&f) || under_test_dir || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let path = module_path(rel);
        let from = if path.is_empty() {
            "main".to_string()
        } else {
            path[0].clone()
        };
        let shown = Path::new("src").join(rel).display().to_string();
        for (line, to) in referenced(&code, &path) {
            if modules.contains(&to) && to != from {
                out.push(Import {
                    file: shown.clone(),
                    line,
                    from: from.clone(),
                    to,
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn no_module_imports_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let imports = imports(&src);
    assert!(
        imports.iter().any(|i| i.from == "report" && i.to == "stats"),
        "the scan found no import of stats by report: it reads nothing"
    );
    // Every top-level module has a row.
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            let m = p.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(
                EXEMPT.contains(&m.as_str()) || ALLOWED.iter().any(|(n, _)| *n == m),
                "src/{m}: a module without a row in ALLOWED of tests/commands/architecture.rs; give it one"
            );
        }
    }
    let bad = violations(&imports);
    assert!(
        bad.is_empty(),
        "imports against the layering:\n{}",
        bad.join("\n")
    );
}

/// A file under src/stats/ that names `crate::report` (in a `use`, a path, a group, or through
/// `super::super::`) is reported with its file and line; the same words in a comment, a string
/// or a `#[cfg(test)]` module are not.
#[test]
fn an_upward_import_is_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("stats")).unwrap();
    std::fs::create_dir_all(src.join("report")).unwrap();
    std::fs::write(src.join("main.rs"), "mod report;\nmod stats;\n").unwrap();
    std::fs::write(src.join("report/mod.rs"), "use crate::stats::x;\npub fn y() {}\n").unwrap();
    std::fs::write(
        src.join("stats/mod.rs"),
        "pub mod effect;\npub mod plain;\npub fn x() {}\n#[cfg(test)]\nmod tests;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("stats/effect.rs"),
        "// crate::report in a comment is no import\n\
         const S: &str = \"crate::report::y\";\n\
         use crate::{journal, report::y};\n\
         fn f() { super::super::report::y() }\n\
         #[cfg(test)]\nmod tests {\n    use crate::report::y;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("stats/plain.rs"), "fn g() { crate::report::y(); }\n").unwrap();
    std::fs::write(src.join("stats/tests.rs"), "use crate::report::y;\n").unwrap();
    let imports = imports(&src);
    let bad = violations(&imports);
    let at: Vec<(&str, usize)> = imports
        .iter()
        .filter(|i| i.to == "report")
        .map(|i| (i.file.as_str(), i.line))
        .collect();
    assert_eq!(
        at,
        [
            ("src/stats/effect.rs", 3),
            ("src/stats/effect.rs", 4),
            ("src/stats/plain.rs", 1)
        ]
    );
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(
        bad[0].starts_with("src/stats/effect.rs:3: `stats` imports `report`, a layer above it"),
        "{}",
        bad[0]
    );
    // `journal` is no module of this little crate: not an import.
    assert!(!imports.iter().any(|i| i.to == "journal"));
}
/// The table itself points one way: no module may reach itself through it, and every name in a
/// row is a module with a row of its own.
#[test]
fn the_table_has_no_loop() {
    for (m, may) in ALLOWED {
        for t in may.iter().filter(|t| **t != "*" && **t != BASE) {
            assert!(
                ALLOWED.iter().any(|(n, _)| n == t),
                "`{m}` may import `{t}`, which has no row"
            );
        }
        for (n, _) in ALLOWED {
            if n != m && allowed(m, n) == Some(true) {
                assert!(!reaches(n, m), "a loop in ALLOWED: `{m}` -> `{n}` -> … -> `{m}`");
            }
        }
    }
    for b in BASE_MODULES {
        assert!(
            ALLOWED.iter().any(|(n, _)| n == b),
            "base module `{b}` has no row"
        );
    }
}
