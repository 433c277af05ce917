//! README.md, scenarios/README.md and the book under docs/ point only at what exists: every
//! relative markdown link `[text](path)` or `[text](path#anchor)` names a file (relative to the
//! linking file), every `ocrig <subcommand>` quoted in code (inline or fenced) is one that
//! `ocrig --help` lists, and every `scripts/<name>` and `scenarios/<folder>/<file>` quoted in
//! code is in the repository. Every chapter under docs/src is in docs/src/SUMMARY.md. Each
//! failure names file and line.
//!
//! Fast tier: reads files and runs `ocrig --help`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, scenarios/README.md and every docs/**/*.md.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "book") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut docs = vec![root().join("README.md"), root().join("scenarios/README.md")];
    walk(&root().join("docs"), &mut docs);
    docs
}

/// The subcommands `ocrig --help` lists.
fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .arg("--help")
        .output()
        .expect("running ocrig --help");
    assert!(
        out.status.success(),
        "ocrig --help: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let names: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(
        names.iter().any(|n| n == "run"),
        "no subcommands read from ocrig --help:\n{text}"
    );
    names
}

/// One piece of a document: prose (links are read there) or code (commands and paths are read
/// there), with the line it starts on.
#[derive(Debug, PartialEq)]
enum Piece {
    Prose(usize, String),
    Code(usize, String),
}

/// The document split into prose lines, inline code spans and fenced code lines. In fenced
/// code a `#` comment is left out (it is prose: "ocrig only reads it").
fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str()) {
                fence = None;
            } else {
                let code = match line.find(" #") {
                    Some(i) => &line[..i],
                    None if trimmed.starts_with('#') => "",
                    None => line,
                };
                out.push(Piece::Code(n, code.to_string()));
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(trimmed[..3].to_string());
            continue;
        }
        // Inline code spans (one or more backticks, closed by as many).
        let mut prose = String::new();
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'`' {
                let ticks = b[i..].iter().take_while(|&&c| c == b'`').count();
                let delim = &line[i..i + ticks];
                if let Some(end) = line[i + ticks..].find(delim) {
                    out.push(Piece::Code(n, line[i + ticks..i + ticks + end].to_string()));
                    prose.push(' ');
                    i += ticks + end + ticks;
                    continue;
                }
            }
            let c = line[i..].chars().next().unwrap();
            prose.push(c);
            i += c.len_utf8();
        }
        out.push(Piece::Prose(n, prose));
    }
    out
}

/// The targets of markdown links `[text](target)` in a prose line.
fn links(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end]
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_matches(['<', '>']);
        out.push(target.to_string());
        rest = &after[end..];
    }
    out
}

fn boundary_before(s: &str, i: usize) -> bool {
    s[..i]
        .chars()
        .next_back()
        .is_none_or(|c| !(c.is_alphanumeric() || "_-/.~$".contains(c)))
}

/// `ocrig WORD` in code: the words (a flag or an argument placeholder is no subcommand).
fn ocrig_words(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("ocrig ") {
        let at = from + i;
        from = at + 6;
        if !boundary_before(code, at) {
            continue;
        }
        let word: String = code[at + 6..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if word.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push(word);
        }
    }
    out
}

/// `scripts/NAME` or `scenarios/FOLDER/FILE` in code, as a path from the repository's root (a
/// `scripts/kconfig/…` of a kernel tree, deeper than one level or under another folder, is not
/// ours; scenarios sit in a folder by audience, and a glob such as `scenarios/*/*.yaml` is
/// not checked).
fn repo_paths(code: &str, folder: &str) -> Vec<String> {
    let mut out = Vec::new();
    let needle = format!("{folder}/");
    let deep = folder == "scenarios";
    let mut from = 0;
    while let Some(i) = code[from..].find(&needle) {
        let at = from + i;
        from = at + needle.len();
        let ok_before = at == 0
            || (code[..at].ends_with("./") && boundary_before(code, at - 2))
            || boundary_before(code, at);
        if !ok_before {
            continue;
        }
        let name: String = code[at + needle.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_.-".contains(*c) || (deep && *c == '/'))
            .collect();
        let name = name.trim_end_matches('.');
        let next = code[at + needle.len() + name.len()..].chars().next();
        if name.is_empty() || (next == Some('/') && !deep) || next == Some('<') || next == Some('*') {
            continue;
        }
        out.push(format!("{needle}{name}"));
    }
    out
}

/// What is wrong in one document, as `file:line: …` lines.
fn problems(file: &Path, text: &str, subcommands: &[String], repo: &Path) -> Vec<String> {
    let shown = file.strip_prefix(repo).unwrap_or(file).display().to_string();
    let mut out = Vec::new();
    for piece in pieces(text) {
        match piece {
            Piece::Prose(n, prose) => {
                for target in links(&prose) {
                    if target.is_empty()
                        || target.starts_with('#')
                        || ["http://", "https://", "mailto:"]
                            .iter()
                            .any(|p| target.starts_with(p))
                    {
                        continue;
                    }
                    let path = target.split('#').next().unwrap();
                    if !file.parent().unwrap().join(path).exists() {
                        out.push(format!(
                            "{shown}:{n}: the link `{target}` names no file (from {})",
                            file.parent().unwrap().display()
                        ));
                    }
                }
            }
            Piece::Code(n, code) => {
                for w in ocrig_words(&code) {
                    if !subcommands.contains(&w) {
                        out.push(format!(
                            "{shown}:{n}: `ocrig {w}` is no subcommand of ocrig (it has: {})",
                            subcommands.join(", ")
                        ));
                    }
                }
                for folder in ["scripts", "scenarios"] {
                    for p in repo_paths(&code, folder) {
                        if !repo.join(&p).exists() {
                            out.push(format!("{shown}:{n}: `{p}` is not in the repository"));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn readme_and_docs_name_only_what_exists() {
    let subcommands = subcommands();
    let repo = root();
    let docs = documents();
    assert!(docs.len() > 5, "the book under docs/ is missing: {docs:?}");
    let mut bad = Vec::new();
    for d in &docs {
        bad.extend(problems(
            d,
            &std::fs::read_to_string(d).unwrap(),
            &subcommands,
            &repo,
        ));
    }
    assert!(
        bad.is_empty(),
        "{} dangling reference(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn every_chapter_is_in_the_summary() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: Vec<String> = summary.lines().flat_map(links).collect();
    for e in std::fs::read_dir(&src).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "SUMMARY.md" {
            assert!(
                listed.contains(&name),
                "docs/src/{name} is not in docs/src/SUMMARY.md"
            );
        }
    }
}

/// The checker itself: what it reads, what it leaves, and how it says where.
#[test]
fn the_checker_finds_each_kind_with_its_line() {
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("scripts")).unwrap();
    std::fs::create_dir_all(repo.path().join("scenarios/examples")).unwrap();
    std::fs::create_dir_all(repo.path().join("docs/src")).unwrap();
    std::fs::write(repo.path().join("scripts/setup"), "").unwrap();
    std::fs::write(repo.path().join("scenarios/a.yaml"), "").unwrap();
    std::fs::write(repo.path().join("scenarios/examples/c.yaml"), "").unwrap();
    std::fs::write(repo.path().join("docs/src/guide.md"), "").unwrap();
    let text = "\
[ok](docs/src/guide.md#running) and [web](https://example.org) and [here](#top)
[gone](docs/src/nothing.md)
Run `ocrig run scenarios/a.yaml` or `ocrig frobnicate`.
```sh
./scripts/setup && ocrig validate scenarios/b.yaml   # ocrig only reads it
scripts/kconfig/merge_config.sh -m .config ~/ocrig-payload scripts/nosuch
ocrig validate scenarios/examples/c.yaml scenarios/*/*.yaml scenarios/examples/c*.yaml
ocrig run scenarios/examples/ scenarios/examples/b.yaml
```
`~/.cache/ocrig/payload` and `ocrig-payload list` are neither.
";
    let file = repo.path().join("README.md");
    let subs = vec!["run".to_string(), "validate".to_string()];
    let got = problems(&file, text, &subs, repo.path());
    let lines: Vec<&str> = got.iter().map(|p| p.split(": ").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "README.md:2",
            "README.md:3",
            "README.md:5",
            "README.md:6",
            "README.md:8"
        ],
        "{got:#?}"
    );
    assert!(got[0].contains("docs/src/nothing.md"), "{}", got[0]);
    assert!(got[1].contains("`ocrig frobnicate`"), "{}", got[1]);
    assert!(got[2].contains("`scenarios/b.yaml`"), "{}", got[2]);
    assert!(got[3].contains("`scripts/nosuch`"), "{}", got[3]);
    assert!(got[4].contains("`scenarios/examples/b.yaml`"), "{}", got[4]);
}

/// The manual under docs/ builds with mdBook (which `scripts/setup --tests` installs), without a
/// warning, and every chapter SUMMARY.md lists becomes a page.
#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: builds the manual with mdBook (scripts/setup --tests installs it; ~1 s)"
)]
fn the_manual_builds_with_mdbook() {
    let out_dir = tempfile::tempdir().unwrap();
    let mdbook = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cargo/bin/mdbook"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("mdbook"));
    let out = std::process::Command::new(&mdbook)
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/setup --tests installs mdBook)",
                mdbook.display()
            )
        });
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");
    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    let chapters: Vec<&str> = summary
        .split("](")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .filter(|s| s.ends_with(".md"))
        .collect();
    assert!(chapters.len() >= 10, "{chapters:?}");
    for c in chapters {
        let page = out_dir
            .path()
            .join(c.trim_start_matches("./").replace(".md", ".html"));
        assert!(page.is_file(), "{} has no page", c);
    }
}
