//! Progress of a sweep on the terminal: runs done of the total, the current cell, an ETA from
//! the measured pace. Hidden with `--quiet` or when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn new(total_runs: u64, quiet: bool) -> Self {
        let bar = ProgressBar::new(total_runs);
        if quiet {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs, ETA {eta} — {msg}")
                .expect("static template is valid")
                .progress_chars("=> "),
        );
        Self { bar }
    }

    /// Names what is being done now (a cell, or a phase such as booting).
    pub fn doing(&self, what: String) {
        self.bar.set_message(what);
    }

    pub fn run_done(&self) {
        self.bar.inc(1);
    }

    /// Counts runs a cell did not need (its CV target was reached early).
    pub fn skip(&self, runs: u64) {
        self.bar.inc(runs);
    }

    /// Prints a line above the bar (or plainly when hidden and not quiet).
    pub fn println(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Runs counted so far (done, failed for good, or skipped).
    #[cfg(test)]
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
