//! How every format lays a table out, and escapes its text: the terminal's ASCII table, the
//! Markdown pipe table, the HTML table (shaded by conclusion) and escaping, the CSV field. The
//! exporters and the sections shown beside the model (kernel symbols, timelines) draw with
//! these, so none of them imports another.

use comfy_table::{CellAlignment, ContentArrangement, ContentLineStyle, LineStyle, Table, TableStyle};

/// comfy-table's `ASCII_FULL_CONDENSED` with column junctions in the header rule too.
const STYLE: TableStyle = TableStyle::new()
    .top_border(LineStyle::new('+', '-', '+', '+'))
    .header_lines(ContentLineStyle::new('|', '|', '|'))
    .header_separator(LineStyle::new('+', '=', '+', '+'))
    .content_lines(ContentLineStyle::new('|', '|', '|'))
    .bottom_border(LineStyle::new('+', '-', '+', '+'));

pub use crate::terminal::{WIDTH, wrap};

/// A plain-ASCII table (pastes cleanly into mail), label columns left-aligned, numbers right;
/// wider than [`WIDTH`], split into tables that fit, each repeating the label columns (a
/// column too wide alone has its cells wrapped; numbers are never cut).
pub fn ascii_table(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|j| {
            rows.iter()
                .filter_map(|r| r.get(j))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    // `| a | b |`: each column takes its text and three more, the table one more.
    let span = |cols: &[usize]| 1 + cols.iter().map(|&j| widths[j] + 3).sum::<usize>();
    let all: Vec<usize> = (0..n).collect();
    let labels = label_columns(rows).min(n);
    if span(&all) <= WIDTH || n <= labels + 1 {
        return one_table(rows, span(&all) > WIDTH);
    }
    let keys: Vec<usize> = (0..labels).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for j in labels..n {
        match groups.last_mut() {
            Some(g) if span(&[&keys[..], &g[..], &[j]].concat()) <= WIDTH => g.push(j),
            _ => groups.push(vec![j]),
        }
    }
    groups
        .iter()
        .map(|g| {
            let cols = [&keys[..], &g[..]].concat();
            let sub: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    cols.iter()
                        .map(|&j| r.get(j).cloned().unwrap_or_default())
                        .collect()
                })
                .collect();
            one_table(&sub, span(&cols) > WIDTH)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One comfy-table; `wrap`: lay it out within [`WIDTH`], wrapping cells.
fn one_table(rows: &[Vec<String>], wrap: bool) -> String {
    let mut t = Table::new();
    t.load_style(STYLE)
        .set_content_arrangement(if wrap {
            ContentArrangement::Dynamic
        } else {
            ContentArrangement::Disabled
        })
        .force_no_tty();
    if wrap {
        t.set_width(WIDTH as u16);
    }
    let labels = label_columns(rows);
    let mut rows = rows.iter();
    if let Some(head) = rows.next() {
        t.set_header(head);
    }
    for r in rows {
        t.add_row(r);
    }
    for (i, col) in t.column_iter_mut().enumerate() {
        col.set_cell_alignment(if i < labels {
            CellAlignment::Left
        } else {
            CellAlignment::Right
        });
    }
    let mut s = t.to_string();
    s.push('\n');
    s
}

/// Escapes the characters that would break a pipe-table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A pipe table; the first row is the header, label columns left-aligned, the rest right-aligned.
pub fn pipe_table(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let labels = label_columns(rows);
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
        if i == 0 {
            let rule: Vec<&str> = (0..row.len())
                .map(|j| if j < labels { ":---" } else { "---:" })
                .collect();
            out.push_str(&format!("|{}|\n", rule.join("|")));
        }
    }
    out
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The shading of a comparison's ratio and `conclusion` cells, by its conclusion:
/// amber "not concluded", green "equivalent", blue "differs".
fn conclusion_class(words: &str) -> &'static str {
    // (The verdict's "equivalent within ±5 %" shades as "equivalent", "differs, within ±5 %" and
    // "not concluded (post hoc)" as what they start with.)
    match words {
        w if w.starts_with("not concluded") => " class=\"fewruns\"",
        w if w.starts_with("equivalent") => " class=\"nodiff\"",
        w if w.starts_with("differs") => " class=\"differs\"",
        _ => "",
    }
}

/// An HTML table from text rows (first row is the header). `pct_col` marks the column holding
/// a signed %improvement, coloured green/red; the ratio and `conclusion` columns of a
/// comparison are shaded by the row's conclusion.
pub fn html_table(rows: &[Vec<String>], pct_col: Option<usize>) -> String {
    let mut out = String::from("<table>\n");
    let labels = label_columns(rows);
    let col = |name: &str| rows.first().and_then(|h| h.iter().position(|c| c == name));
    let ratio = rows
        .first()
        .and_then(|h| h.iter().position(|c| c.starts_with("ratio [")));
    let (detectable, conclusion) = (ratio, col("conclusion"));
    for (i, row) in rows.iter().enumerate() {
        out.push_str("<tr>");
        let verdict = conclusion
            .and_then(|k| row.get(k))
            .map_or("", |c| conclusion_class(c));
        for (j, c) in row.iter().enumerate() {
            if i == 0 {
                out.push_str(&format!("<th>{}</th>", escape(c)));
            } else {
                let class = match pct_col {
                    _ if Some(j) == detectable || Some(j) == conclusion => verdict,
                    Some(p) if p == j && c.starts_with('+') => " class=\"better\"",
                    Some(p) if p == j && c.starts_with('-') && c.len() > 1 => " class=\"worse\"",
                    _ if j > 0 && j < labels => " class=\"label\"",
                    _ => "",
                };
                out.push_str(&format!("<td{class}>{}</td>", escape(c)));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// Quotes a field if it contains a comma, quote or line break (RFC 4180).
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// How many leading columns of a table are labels (left-aligned): `oc`, or `variant | oc`
/// in the cell tables.
pub fn label_columns(rows: &[Vec<String>]) -> usize {
    match rows.first() {
        Some(head) if head.first().is_some_and(|h| h == "variant") => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn width(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn a_wide_table_splits_into_tables_that_fit_repeating_its_labels() {
        let head: Vec<String> = ["variant", "oc"]
            .iter()
            .map(|s| s.to_string())
            .chain((0..12).map(|i| format!("column {i}")))
            .collect();
        let row: Vec<String> = ["qspinlock", "2x"]
            .iter()
            .map(|s| s.to_string())
            .chain((0..12).map(|i| format!("{}", 1_000_000 + i)))
            .collect();
        let text = ascii_table(&[head, row]);
        assert!(width(&text) <= WIDTH, "{text}");
        // Every column's number is there whole, and each table starts with the labels.
        for i in 0..12 {
            assert!(text.contains(&format!("{}", 1_000_000 + i)), "{text}");
        }
        let tables = text.split("\n\n").count();
        assert!(tables >= 2, "{text}");
        assert_eq!(text.matches("| qspinlock | 2x |").count(), tables, "{text}");
        // A column too wide alone wraps its cells within the width.
        let long = "vcpu 1.8 · both 0 · guest 0.4 · other vCPU 0.7 · unexpl. 0.5 of 3.4/run ≥ 1.6 ms (tie ±0.40 ms) and more words";
        let text = ascii_table(&[
            vec!["variant".into(), "oc".into(), "on the host's record".into()],
            vec!["qspinlock".into(), "2x".into(), long.into()],
        ]);
        assert!(width(&text) <= WIDTH, "{text}");
        assert!(text.contains("1.6 ms"), "{text}");
    }
}
