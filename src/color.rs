//! Colour on the terminal: on for a terminal, off for `NO_COLOR` (https://no-color.org), a pipe
//! or a file, and as `--color auto|always|never` says. One choice per process, made by `main`
//! before any output; everything that paints asks [`paint`].

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU8, Ordering};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    Auto,
    /// Colour even into a pipe or a file, and whatever `NO_COLOR` says.
    Always,
    /// No colour.
    Never,
}

/// 0: not chosen yet (auto), 1: on, 2: off.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// Makes the process's choice: `choice`, with `NO_COLOR` (set and not empty) and a stdout that is
/// not a terminal turning `auto` off.
pub fn choose(choice: ColorChoice) {
    let on = decide(choice, no_color(), std::io::stdout().is_terminal());
    CHOSEN.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    STDERR.store(
        if decide(choice, no_color(), std::io::stderr().is_terminal()) {
            1
        } else {
            2
        },
        Ordering::Relaxed,
    );
}

/// The same choice for what goes to stderr (the log lines), by whether stderr is a terminal:
/// `ocrig run … 2> log` writes no escapes into the log.
static STDERR: AtomicU8 = AtomicU8::new(0);

fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// Whether stderr's log lines are coloured (after [`choose`]; before it, by `auto`).
pub fn on_stderr() -> bool {
    match STDERR.load(Ordering::Relaxed) {
        0 => decide(ColorChoice::Auto, no_color(), std::io::stderr().is_terminal()),
        v => v == 1,
    }
}

/// The rule, apart from the process's environment.
pub fn decide(choice: ColorChoice, no_color: bool, terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && !no_color,
    }
}

fn enabled() -> bool {
    match CHOSEN.load(Ordering::Relaxed) {
        0 => {
            choose(ColorChoice::Auto);
            CHOSEN.load(Ordering::Relaxed) == 1
        }
        v => v == 1,
    }
}

/// Colours the words of a conclusion mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// A difference found: the reader's attention.
    Strong,
    /// Shown equivalent.
    Good,
    /// Not concluded, a warning.
    Caution,
    /// Secondary text (paths, units).
    Dim,
}

/// `text` in `tone` where colour is on, as it is otherwise. Width is unchanged on screen (the
/// escapes take no columns), so tables pad the plain text and paint after.
pub fn paint(text: &str, tone: Tone) -> String {
    if !enabled() {
        return text.to_string();
    }
    let code = match tone {
        Tone::Strong => "1;31",
        Tone::Good => "32",
        Tone::Caution => "33",
        Tone::Dim => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_follows_the_flag_then_no_color_then_the_terminal() {
        assert!(decide(ColorChoice::Always, true, false));
        assert!(!decide(ColorChoice::Never, false, true));
        assert!(decide(ColorChoice::Auto, false, true));
        assert!(!decide(ColorChoice::Auto, true, true));
        assert!(!decide(ColorChoice::Auto, false, false));
    }
}
