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

/// A plain-ASCII table (pastes cleanly into mail), label columns left-aligned, numbers right.
pub fn ascii_table(rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_style(STYLE)
        .set_content_arrangement(ContentArrangement::Disabled)
        .force_no_tty();
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
    match words {
        "not concluded" => " class=\"fewruns\"",
        "equivalent" => " class=\"nodiff\"",
        "differs" => " class=\"differs\"",
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
    let (detectable, conclusion) = (col("ratio [95% CI]"), col("conclusion"));
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
