//! The terminal ocrig writes for: 120 columns. Reports' tables split and notes wrap within
//! them; what a sweep says as it goes is one line of them where it can be, wrapped where not.

/// The terminal width ocrig lays its output out for.
pub const WIDTH: usize = 120;

/// `text` wrapped on spaces within [`WIDTH`] columns: its first line after `first`, the others
/// after `rest`; its own line breaks kept. A word longer than a line stays whole.
pub fn wrap(text: &str, first: &str, rest: &str) -> String {
    let mut out = String::new();
    for (k, para) in text.split('\n').enumerate() {
        let mut line = String::from(if k == 0 { first } else { rest });
        let mut empty = true;
        for word in para.split(' ').filter(|w| !w.is_empty()) {
            let len = line.chars().count();
            if !empty && len + 1 + word.chars().count() > WIDTH {
                out.push_str(&line);
                out.push('\n');
                line = String::from(rest);
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Says `text` on stderr within [`WIDTH`] columns (continuation lines indented).
pub fn say(text: &str) {
    eprint!("{}", wrap(text, "", "  "));
}

/// `text` cut to one line of [`WIDTH`] columns (an ellipsis marks the cut).
pub fn one_line(text: &str) -> String {
    if text.chars().count() <= WIDTH {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(WIDTH - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn width(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    #[test]
    fn notes_wrap_within_the_width_with_a_hanging_indent() {
        let text = "word ".repeat(60);
        let w = wrap(text.trim(), "  ", "    ");
        assert!(width(&w) <= WIDTH, "{w}");
        assert!(
            w.starts_with("  word") && w.lines().nth(1).unwrap().starts_with("    word"),
            "{w}"
        );
        assert_eq!(w.matches("word").count(), 60);
        // A word longer than a line is kept whole.
        let url = "x".repeat(130);
        assert_eq!(wrap(&url, "", ""), format!("{url}\n"));
    }

    #[test]
    fn one_line_cuts_with_an_ellipsis() {
        assert_eq!(one_line("short"), "short");
        let cut = one_line(&"y".repeat(200));
        assert_eq!(cut.chars().count(), WIDTH);
        assert!(cut.ends_with('…'));
    }
}
