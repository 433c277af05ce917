//! The guest kernel's top symbols per cell in every main report format (text, Markdown, CSV,
//! JSON, HTML), from the runs' stored profiles ([`crate::stats::kernel_symbols`]); in HTML also
//! the cell's flame graph and its differential one against the baseline ([`super::flame`]).
//!
//! Each exporter takes its part from here, built from the report's input: nothing at all when
//! no counted run carries a profile. No part reads what an exporter rendered.

use crate::stats::digest::Digested;
use crate::stats::kernel_symbols::{self as ks, CellSymbols, TOP};

use super::flame::CellProfile;

/// `native_safe_halt 36.8%, memset_erms 13.1%, …`: a cell's top symbols in words.
fn top_words(c: &CellSymbols, sep: &str) -> String {
    c.top(TOP)
        .iter()
        .map(|s| format!("{} {:.1}%", s.symbol, s.share * 100.0))
        .collect::<Vec<_>>()
        .join(sep)
}

/// `3.9% (565 of 14476): native_queued_spin_lock_slowpath 1.1%, …`: a cell's samples in kernel
/// locking functions, with their denominator and the busiest three.
fn locking_words(c: &CellSymbols, sep: &str) -> String {
    let l = c.locking();
    let mut words = format!(
        "{:.1}% ({} of {}; waiting {:.1}%)",
        l.share * 100.0,
        l.samples,
        l.of_samples,
        l.waiting_share * 100.0
    );
    let top: Vec<String> = l
        .top
        .iter()
        .take(3)
        .map(|s| format!("{} {:.1}%", s.symbol, s.share * 100.0))
        .collect();
    if !top.is_empty() {
        words.push_str(": ");
        words.push_str(&top.join(sep));
    }
    words
}

/// One table per workload, as rows: `variant | oc | runs | samples | top kernel symbols |
/// locking functions`.
fn rows_by_workload(cells: &[CellSymbols], sep: &str) -> Vec<(String, Vec<Vec<String>>)> {
    let mut out: Vec<(String, Vec<Vec<String>>)> = Vec::new();
    for c in cells {
        let i = match out.iter().position(|(w, _)| *w == c.workload) {
            Some(i) => i,
            None => {
                let head = [
                    "variant",
                    "oc",
                    "runs",
                    "samples",
                    "top kernel symbols (self samples, share of all)",
                    "kernel locking functions (share of all)",
                ];
                out.push((c.workload.clone(), vec![head.map(String::from).to_vec()]));
                out.len() - 1
            }
        };
        out[i].1.push(vec![
            c.variant.clone(),
            super::fmt_level(c.level),
            c.runs.to_string(),
            c.samples.to_string(),
            top_words(c, sep),
            locking_words(c, sep),
        ]);
    }
    out
}

const INTRO: &str = "Guest kernel profiles: the busiest symbols per cell by self samples (leaf frame), as a share of \
                     all samples of the cell's counted runs; [user] = samples in user space; kernel locking functions = \
                     mutex, rwsem, OSQ, spinlock and rwlock functions with their slow paths (waiting: the slow paths, \
                     spinning on the owner, the OSQ, PV waits)";

/// The text report's section: per workload the table of each profiled cell's top symbols.
pub fn table_section(cells: &[CellSymbols]) -> String {
    if cells.is_empty() {
        return String::new();
    }
    let mut text = format!("\n{INTRO}.\n");
    for (wl, rows) in rows_by_workload(cells, ", ") {
        text.push_str(&format!(
            "{wl}: top kernel symbols\n{}",
            super::layout::ascii_table(&rows)
        ));
    }
    text
}

/// [`table_section`] in Markdown.
pub fn md_section(cells: &[CellSymbols]) -> String {
    if cells.is_empty() {
        return String::new();
    }
    let mut text = format!("\n## Guest kernel profiles\n\n{INTRO}.\n");
    for (wl, rows) in rows_by_workload(cells, ", ") {
        text.push_str(&format!("\n### {wl}: top kernel symbols\n\n"));
        text.push_str(&super::layout::pipe_table(&rows));
    }
    text
}

/// Columns of every CSV row when any cell has a profile: the cell's profiled runs, samples,
/// and top symbols as `symbol=share` pairs separated by `;` (empty on rows without a profile
/// and on geomean rows).
pub const CSV_COLUMNS: [&str; 6] = [
    "kernel_profile_runs",
    "kernel_profile_samples",
    "kernel_top_symbols",
    "kernel_locking_samples",
    "kernel_locking_share",
    "kernel_lock_wait_share",
];

/// The [`CSV_COLUMNS`] of the cell row of `workload`, `variant`, `level` (empty fields where
/// that cell has no profile).
pub fn csv_fields(cells: &[CellSymbols], workload: &str, variant: &str, level: f64) -> [String; 6] {
    let cell = cells
        .iter()
        .find(|c| c.workload == workload && c.variant == variant && c.level == level);
    match cell.map(|c| (c, c.locking())) {
        Some((c, locking)) => [
            c.runs.to_string(),
            c.samples.to_string(),
            super::layout::field(
                &c.top(TOP)
                    .iter()
                    .map(|s| format!("{}={:.4}", s.symbol, s.share))
                    .collect::<Vec<_>>()
                    .join(";"),
            ),
            locking.samples.to_string(),
            format!("{:.4}", locking.share),
            format!("{:.4}", locking.waiting_share),
        ],
        None => Default::default(),
    }
}

/// One cell in the JSON report: where, how many runs and samples, the events sampled, the
/// top symbols with their samples and share, and the share in kernel locking functions.
#[derive(serde::Serialize)]
pub struct JsonCell<'a> {
    workload: &'a str,
    variant: &'a str,
    level: f64,
    runs: usize,
    samples: u64,
    events: &'a [String],
    top: Vec<ks::SymbolShare>,
    /// Samples in kernel locking functions, of `samples`.
    locking: ks::LockingShare,
}

/// The JSON report's `kernel_symbols`: one item per profiled cell.
pub fn json_items(cells: &[CellSymbols]) -> Vec<JsonCell<'_>> {
    cells
        .iter()
        .map(|c| JsonCell {
            workload: &c.workload,
            variant: &c.variant,
            level: c.level,
            runs: c.runs,
            samples: c.samples,
            events: &c.events,
            top: c.top(TOP),
            locking: c.locking(),
        })
        .collect()
}

/// The HTML report's section: per workload the table of top symbols, then per cell its flame
/// graph and, for a non-baseline variant, the differential one against the baseline at that
/// level (both collapsed, drawn by inferno from `profiles`).
pub fn html_section(
    cells: &[CellSymbols],
    profiles: &[CellProfile],
    baseline: &str,
) -> anyhow::Result<String> {
    use super::layout::{escape, html_table};
    if cells.is_empty() {
        return Ok(String::new());
    }
    let mut s = format!(
        "<section>\n<h2>Guest kernel profiles</h2>\n<p class=\"notes\">{}.</p>\n",
        escape(INTRO)
    );
    for (wl, rows) in rows_by_workload(cells, ", ") {
        s.push_str(&format!(
            "<h3>{}: top kernel symbols</h3>\n<div class=\"wide\">\n",
            escape(&wl)
        ));
        s.push_str(&html_table(&rows, None));
        s.push_str("</div>\n");
    }
    for c in profiles {
        let title = format!(
            "{} · {} · {}x ({} runs, {} samples)",
            c.workload, c.variant, c.level, c.runs, c.samples
        );
        s.push_str(&format!(
            "<details class=\"flame\"><summary>flame graph: {}</summary>\n{}\n</details>\n",
            escape(&title),
            inline_svg(super::flame::flame_svg(c, &title)?)
        ));
        if c.variant != baseline
            && let Some(b) = profiles
                .iter()
                .find(|b| b.variant == baseline && b.workload == c.workload && b.level == c.level)
        {
            let title = format!(
                "{} · {} vs {} · {}x (red: more than {baseline}, blue: less)",
                c.workload, c.variant, baseline, c.level
            );
            s.push_str(&format!(
                "<details class=\"flame\"><summary>differential flame graph: {}</summary>\n{}\n</details>\n",
                escape(&title),
                inline_svg(super::flame::diff_svg(b, c, &title)?)
            ));
        }
    }
    s.push_str("</section>\n");
    Ok(s)
}

/// An SVG document without its XML prologue, to inline in HTML.
fn inline_svg(svg: String) -> String {
    svg.find("<svg").map_or(String::new(), |i| svg[i..].to_string())
}

/// The variant pairs `ocrig compare` sets against each other in the merged journal: each B-side
/// variant with the A-side variant of the same name (the sides' single variants when each has
/// one). `a_side`/`b_side` are the names the merge gave the sides.
pub fn compare_pairs(merged: &Digested, a_side: &str, b_side: &str) -> Vec<(String, String)> {
    let (a_side, b_side) = if a_side == b_side {
        (format!("{a_side} (A)"), format!("{b_side} (B)"))
    } else {
        (a_side.to_string(), b_side.to_string())
    };
    let suffix = |v: &str, side: &str| -> Option<String> {
        if v == side {
            Some(String::new())
        } else {
            v.strip_prefix(side)?.strip_prefix('/').map(str::to_string)
        }
    };
    let vs = &merged.header.variants;
    vs.iter()
        .filter_map(|b| {
            let tail = suffix(b, &b_side)?;
            let a = vs
                .iter()
                .find(|a| suffix(a, &a_side).as_deref() == Some(tail.as_str()))?;
            Some((a.clone(), b.clone()))
        })
        .collect()
}

/// One symbol's share on both sides of a comparison.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShareChange {
    pub symbol: String,
    pub a_share: f64,
    pub b_share: f64,
}

impl ShareChange {
    /// Percentage points, B − A.
    pub fn change_pp(&self) -> f64 {
        (self.b_share - self.a_share) * 100.0
    }
}

/// The `n` symbols whose self-sample share changed most from `a` to `b` (by size of the change,
/// ties by name): where the time of one kernel went relative to the other's.
pub fn changes(a: &CellSymbols, b: &CellSymbols, n: usize) -> Vec<ShareChange> {
    let share = |c: &CellSymbols, s: &str| {
        c.self_samples.get(s).copied().unwrap_or(0) as f64 / c.samples.max(1) as f64
    };
    let symbols: std::collections::BTreeSet<&String> =
        a.self_samples.keys().chain(b.self_samples.keys()).collect();
    let mut v: Vec<ShareChange> = symbols
        .into_iter()
        .map(|s| ShareChange {
            symbol: s.clone(),
            a_share: share(a, s),
            b_share: share(b, s),
        })
        .collect();
    v.sort_by(|x, y| {
        y.change_pp()
            .abs()
            .total_cmp(&x.change_pp().abs())
            .then(x.symbol.cmp(&y.symbol))
    });
    v.truncate(n);
    v
}

/// `ocrig compare`'s own part: for each pair of [`compare_pairs`] at each level both sides
/// profiled, the symbols whose share changed most (text, Markdown, JSON `kernel_symbol_changes`,
/// HTML), and in HTML the differential flame graph of B against A (red: more samples in B)
/// where the profile section has not drawn it already (it draws each variant against the
/// merged baseline, A's). The CSV keeps its per-cell columns only.
pub struct Changed<'a> {
    pub a: &'a CellSymbols,
    pub b: &'a CellSymbols,
    pub changes: Vec<ShareChange>,
}

/// The [`Changed`] cells of `pairs` among `cells`.
pub fn changed<'a>(cells: &'a [CellSymbols], pairs: &[(String, String)]) -> Vec<Changed<'a>> {
    let mut found = Vec::new();
    for (a, b) in pairs {
        for cb in cells.iter().filter(|c| &c.variant == b) {
            if let Some(ca) = cells
                .iter()
                .find(|c| &c.variant == a && c.workload == cb.workload && c.level == cb.level)
            {
                found.push(Changed {
                    a: ca,
                    b: cb,
                    changes: changes(ca, cb, TOP),
                });
            }
        }
    }
    found
}

const COMPARED: &str = "Guest kernel profiles compared: the symbols whose share of self samples changed most (pp = percentage points)";

/// Per changed cell its title and table, symbols written by `words`.
fn changed_rows(found: &[Changed], words: &dyn Fn(&str) -> String) -> Vec<(String, Vec<Vec<String>>)> {
    found
        .iter()
        .map(|f| {
            let (ca, cb) = (f.a, f.b);
            let title = format!(
                "{}: {} against {} at {}",
                ca.workload,
                cb.variant,
                ca.variant,
                super::fmt_level(ca.level)
            );
            let mut r = vec![vec![
                "symbol".to_string(),
                ca.variant.clone(),
                cb.variant.clone(),
                "change".into(),
            ]];
            for c in &f.changes {
                r.push(vec![
                    words(&c.symbol),
                    format!("{:.1}%", c.a_share * 100.0),
                    format!("{:.1}%", c.b_share * 100.0),
                    format!("{:+.1} pp", c.change_pp()),
                ]);
            }
            (title, r)
        })
        .collect()
}

/// The compared profiles in the text report.
pub fn compare_table(found: &[Changed]) -> String {
    if found.is_empty() {
        return String::new();
    }
    let mut text = format!("\n{COMPARED}.\n");
    for (title, r) in changed_rows(found, &|s| s.to_string()) {
        text.push_str(&format!("{title}\n{}", super::layout::ascii_table(&r)));
    }
    text
}

/// [`compare_table`] in Markdown.
pub fn compare_md(found: &[Changed]) -> String {
    if found.is_empty() {
        return String::new();
    }
    let mut text = format!("\n## Guest kernel profiles compared\n\n{COMPARED}.\n");
    for (title, r) in changed_rows(found, &|s| format!("`{s}`")) {
        text.push_str(&format!("\n### {title}\n\n{}", super::layout::pipe_table(&r)));
    }
    text
}

/// One changed cell in the JSON report's `kernel_symbol_changes`.
#[derive(serde::Serialize)]
pub struct JsonChange<'a> {
    workload: &'a str,
    level: f64,
    a: &'a str,
    b: &'a str,
    symbols: &'a [ShareChange],
}

/// The JSON report's `kernel_symbol_changes`.
pub fn compare_json<'a>(found: &'a [Changed]) -> Vec<JsonChange<'a>> {
    found
        .iter()
        .map(|f| JsonChange {
            workload: &f.a.workload,
            level: f.a.level,
            a: &f.a.variant,
            b: &f.b.variant,
            symbols: &f.changes,
        })
        .collect()
}

/// The compared profiles in the HTML report, with B's differential flame graph against A
/// where A is not the merged baseline (whose graphs the profile section drew).
pub fn compare_html(found: &[Changed], profiles: &[CellProfile], baseline: &str) -> anyhow::Result<String> {
    use super::layout::{escape, html_table};
    if found.is_empty() {
        return Ok(String::new());
    }
    let profile = |c: &CellSymbols| {
        profiles
            .iter()
            .find(|p| p.variant == c.variant && p.workload == c.workload && p.level == c.level)
    };
    let mut s = format!(
        "<section>\n<h2>Guest kernel profiles compared</h2>\n<p class=\"notes\">{}.</p>\n",
        escape(COMPARED)
    );
    for ((title, r), f) in changed_rows(found, &|s| s.to_string()).into_iter().zip(found) {
        s.push_str(&format!("<h3>{}</h3>\n", escape(&title)));
        s.push_str(&html_table(&r, None));
        if f.a.variant != baseline
            && let (Some(pa), Some(pb)) = (profile(f.a), profile(f.b))
        {
            let t = format!("{title} (red: more than {}, blue: less)", f.a.variant);
            let svg = inline_svg(super::flame::diff_svg(pa, pb, &t)?);
            s.push_str(&format!(
                "<details class=\"flame\"><summary>differential flame graph: {}</summary>\n{svg}\n</details>\n",
                escape(&t)
            ));
        }
    }
    s.push_str("</section>\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;
    use crate::report::{Format, ReportInput, ReportOptions};
    use crate::testing::{profiled, render};

    /// The fields of one CSV record (RFC 4180: quoted fields may hold commas, quotes, newlines),
    /// and the rest of the text after it: the tests read the rendered CSV back with it.
    fn csv_record(text: &str) -> (Vec<String>, &str) {
        let mut fields = vec![String::new()];
        let mut quoted = false;
        let mut chars = text.char_indices().peekable();
        while let Some((i, ch)) = chars.next() {
            let field = fields.last_mut().expect("one field at least");
            match (quoted, ch) {
                (true, '"') if chars.peek().is_some_and(|(_, c)| *c == '"') => {
                    chars.next();
                    field.push('"');
                }
                (true, '"') => quoted = false,
                (true, c) => field.push(c),
                (false, '"') => quoted = true,
                (false, ',') => fields.push(String::new()),
                (false, '\n') => return (fields, &text[i + 1..]),
                (false, '\r') => {}
                (false, c) => field.push(c),
            }
        }
        (fields, "")
    }

    /// The demo journal plus profiled sysfs-mutex runs of both variants at 2x.
    fn journal() -> Journal {
        let mut j = crate::testing::journal();
        j.header.workloads.insert(
            "sysfs-mutex".into(),
            serde_json::from_value(
                serde_json::json!({"command": "sysfs-mutex", "metric": "ops_per_sec", "better": "higher"}),
            )
            .unwrap(),
        );
        j.header.levels.push(2.0);
        for (run, (v, slow)) in [("base", 30), ("patched", 70), ("base", 20), ("patched", 80)]
            .into_iter()
            .enumerate()
        {
            let mut r = profiled(
                v,
                2.0,
                &[
                    ("entry;kernfs;__mutex_lock_slowpath", slow),
                    ("entry;do_idle;native_safe_halt", 100 - slow),
                ],
                0,
            );
            r.run = run as u32 / 2;
            r.metrics.insert("ops_per_sec".into(), 1000.0 + run as f64);
            j.runs.push(r);
        }
        j
    }

    fn rendered(format: Format) -> String {
        render(&journal(), format, &ReportOptions::default()).unwrap()
    }

    #[test]
    fn every_main_format_names_the_top_symbols_of_each_profiled_cell() {
        let digested = Digested::of(&journal());
        let cells = ReportInput::build(&digested, &ReportOptions::default()).symbols;
        assert_eq!(cells.len(), 2);
        let base = cells.iter().find(|c| c.variant == "base").unwrap();
        assert_eq!((base.runs, base.samples), (2, 200));
        assert_eq!(base.top(1)[0].symbol, "native_safe_halt");
        for format in [Format::Table, Format::Md, Format::Html] {
            let text = rendered(format);
            assert!(text.contains("top kernel symbols"), "{format:?}");
            assert!(
                text.contains("native_safe_halt 75.0%"),
                "{format:?}: base's halt share"
            );
            assert!(
                text.contains("__mutex_lock_slowpath 75.0%"),
                "{format:?}: patched's slow path share"
            );
        }
        // JSON: the model's own fields still parse, and the cells are there with their numbers.
        let json = rendered(Format::Json);
        let back: crate::stats::cells::Model = serde_json::from_str(&json).unwrap();
        assert_eq!(back, crate::testing::model(&journal(), &ReportOptions::default()));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let ks = v["kernel_symbols"].as_array().unwrap();
        assert_eq!(ks.len(), 2);
        let patched = ks.iter().find(|c| c["variant"] == "patched").unwrap();
        assert_eq!(patched["top"][0]["symbol"], "__mutex_lock_slowpath");
        assert_eq!(patched["top"][0]["samples"], 150);
        assert_eq!(patched["top"][0]["share"], 0.75);
        assert_eq!(patched["events"][0], "cpu-clock");
        // Its locking share: the mutex slow path, of every sample of the cell.
        assert_eq!(patched["locking"]["samples"], 150);
        assert_eq!(patched["locking"]["of_samples"], patched["samples"]);
        assert_eq!(patched["locking"]["top"][0]["symbol"], "__mutex_lock_slowpath");
        // CSV: five more columns; filled on the profiled cells' rows only.
        let csv = rendered(Format::Csv);
        let mut rest = csv.as_str();
        let (head, after) = csv_record(rest);
        rest = after;
        assert_eq!(&head[head.len() - CSV_COLUMNS.len()..], CSV_COLUMNS);
        let at = |n: &str| head.iter().position(|h| h == n).unwrap();
        let mut profiled_rows = 0;
        while !rest.is_empty() {
            let (row, after) = csv_record(rest);
            rest = after;
            assert_eq!(row.len(), head.len(), "{row:?}");
            let top = &row[at("kernel_top_symbols")];
            if row[at("workload")] == "sysfs-mutex" && row[at("kind")] == "cell" && row[at("level")] == "2" {
                profiled_rows += 1;
                assert_eq!(row[at("kernel_profile_samples")], "200");
                let locking = &row[at("kernel_locking_share")];
                assert!(
                    locking == "0.7500" || top.starts_with("native_safe_halt"),
                    "{locking}"
                );
                assert!(
                    top.starts_with("native_safe_halt=0.7500;")
                        || top.starts_with("__mutex_lock_slowpath=0.7500;"),
                    "{top}"
                );
            } else {
                assert!(top.is_empty(), "{row:?}");
            }
        }
        assert_eq!(profiled_rows, 2);
        // HTML: a flame graph per cell and the patched cell's differential one.
        let html = rendered(Format::Html);
        assert_eq!(html.matches("<details class=\"flame\">").count(), 3);
        assert!(html.contains("differential flame graph: sysfs-mutex · patched vs base · 2x"));
        assert!(html.trim_end().ends_with("</html>"));
    }

    /// `ocrig compare A B` of two results of the same matrix whose kernels spend their time
    /// differently: B's slow path takes 40 points more of each cell.
    #[test]
    fn compare_sets_each_variant_against_its_namesake_with_changes_and_a_differential_graph() {
        let a = journal();
        let mut b = journal();
        for r in b.runs.iter_mut().filter(|r| r.workload == "sysfs-mutex") {
            let p = r.payload.as_mut().unwrap();
            let folded = &mut p.detail.get_mut("kernel").unwrap()["profile"]["folded"];
            let slow = folded[0][1].as_u64().unwrap();
            *folded = serde_json::json!([
                ["entry;kernfs;__mutex_lock_slowpath", (slow + 40).min(100)],
                ["entry;do_idle;native_safe_halt", 100 - (slow + 40).min(100)]
            ]);
        }
        let opts = ReportOptions {
            compare_names: Some(vec!["old".into(), "new".into()]),
            ..Default::default()
        };
        let merged = crate::report::merge(Digested::of(&a), Digested::of(&b), "old", "new").unwrap();
        let pairs = compare_pairs(&merged, "old", "new");
        assert_eq!(
            pairs,
            [
                ("old/base".to_string(), "new/base".to_string()),
                ("old/patched".into(), "new/patched".into())
            ]
        );
        let text = crate::report::compare(Digested::of(&a), Digested::of(&b), Format::Table, &opts).unwrap();
        assert!(
            text.contains("sysfs-mutex: new/base against old/base at 2x"),
            "{text}"
        );
        // old/base: slow path 25 % (30 and 20 of 100); new/base: 65 % (70 and 60).
        assert!(
            text.contains("25.0%") && text.contains("65.0%") && text.contains("+40.0 pp"),
            "{text}"
        );
        let html = crate::report::compare(Digested::of(&a), Digested::of(&b), Format::Html, &opts).unwrap();
        // The namesake pair that is not against the merged baseline gets its own differential.
        assert!(
            html.contains("differential flame graph: sysfs-mutex: new/patched against old/patched at 2x"),
            "compare's own differential"
        );
        assert!(
            !html.contains("differential flame graph: sysfs-mutex: new/base against old/base"),
            "drawn once"
        );
        assert!(html.contains("differential flame graph: sysfs-mutex · new/base vs old/base · 2x"));
        let json = crate::report::compare(Digested::of(&a), Digested::of(&b), Format::Json, &opts).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let ch = v["kernel_symbol_changes"].as_array().unwrap();
        assert_eq!(ch.len(), 2);
        assert_eq!(ch[0]["symbols"][0]["symbol"], "__mutex_lock_slowpath");
        assert!((ch[0]["symbols"][0]["b_share"].as_f64().unwrap() - 0.65).abs() < 1e-12);
        // Single-variant sides pair with each other.
        let one = |j: &Journal| {
            let mut j = j.clone();
            j.runs.retain(|r| r.variant == "base");
            j.header.variants = vec!["base".into()];
            j
        };
        let merged =
            crate::report::merge(Digested::of(&one(&a)), Digested::of(&one(&b)), "old", "new").unwrap();
        assert_eq!(
            compare_pairs(&merged, "old", "new"),
            [("old".to_string(), "new".to_string())]
        );
    }

    /// The HTML report's flame graphs as a user sees them: Debian's headless Chromium loads the
    /// report, a script opens every collapsed graph and reports each drawn frame's name, width
    /// and colour.
    #[test]
    #[cfg_attr(not(feature = "full-tests"), ignore = "full tier: starts Chromium (~1 s)")]
    fn the_html_reports_flame_graphs_draw_their_frames_in_chromium() {
        let tmp = tempfile::tempdir().unwrap();
        let page = tmp.path().join("report.html");
        let check = r#"<script>
window.addEventListener('load', () => {
  document.querySelectorAll('details.flame').forEach(d => d.open = true);
  const graphs = [...document.querySelectorAll('details.flame')].map(d => {
    const svg = d.querySelector('svg');
    const frames = [...svg.querySelectorAll('g')].filter(g => g.querySelector(':scope > title') && g.querySelector(':scope > rect'))
      .map(g => ({name: g.querySelector(':scope > title').textContent.split(' (')[0],
                  width: g.querySelector(':scope > rect').getBoundingClientRect().width,
                  fill: g.querySelector(':scope > rect').getAttribute('fill')}));
    return {summary: d.querySelector('summary').textContent, frames};
  });
  const out = document.createElement('pre');
  out.id = 'ocrig-check';
  out.textContent = JSON.stringify(graphs);
  document.body.appendChild(out);
});
</script>"#;
        let html = rendered(Format::Html).replace("</body>", &format!("{check}</body>"));
        std::fs::write(&page, html).unwrap();
        let graphs = crate::testing::checked_in_chromium(&page, tmp.path());
        let graphs = graphs.as_array().unwrap();
        assert_eq!(graphs.len(), 3, "two cells and one differential");
        for g in graphs {
            let frames = g["frames"].as_array().unwrap();
            let all = frames
                .iter()
                .find(|f| f["name"] == "all")
                .expect("the root frame");
            assert!(all["width"].as_f64().unwrap() > 1000.0, "{g}");
            for name in [
                "entry",
                "kernfs",
                "__mutex_lock_slowpath",
                "do_idle",
                "native_safe_halt",
            ] {
                let f = frames
                    .iter()
                    .find(|f| f["name"] == name)
                    .unwrap_or_else(|| panic!("{name} not drawn: {g}"));
                assert!(f["width"].as_f64().unwrap() > 1.0, "{f}");
            }
        }
        // patched spends 75 % in the slow path against base's 25 %: red in the differential.
        let diff = graphs
            .iter()
            .find(|g| g["summary"].as_str().unwrap().starts_with("differential"))
            .unwrap();
        let fill = |n: &str| {
            diff["frames"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["name"] == n)
                .unwrap()["fill"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert!(
            fill("__mutex_lock_slowpath").starts_with("rgb(255,"),
            "{}",
            fill("__mutex_lock_slowpath")
        );
        assert!(
            fill("native_safe_halt").ends_with(",255)"),
            "{}",
            fill("native_safe_halt")
        );
    }

    #[test]
    fn reports_without_profiles_are_unchanged() {
        let plain = crate::testing::journal();
        for format in [Format::Table, Format::Md, Format::Csv, Format::Json, Format::Html] {
            let text = render(&plain, format, &ReportOptions::default()).unwrap();
            assert!(
                !text.contains("kernel symbols") && !text.contains("kernel_top_symbols"),
                "{format:?}"
            );
        }
    }

    #[test]
    fn csv_records_keep_quoted_commas_quotes_and_newlines() {
        let (r, rest) = csv_record("a,\"b,c\",\"say \"\"hi\"\"\",\"x\ny\"\nnext");
        assert_eq!(r, ["a", "b,c", "say \"hi\"", "x\ny"]);
        assert_eq!(rest, "next");
    }
}
