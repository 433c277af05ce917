//! Progress of a sweep: runs done of the total, the current cell, an ETA from the measured pace.
//! On a terminal, a bar on stderr. Without one (nohup, a CI log, `ssh host 'ocrig run …' > log`),
//! a plain line on stderr about once a minute ([`PLAIN_PERIOD`]), so that a log of an overnight
//! sweep shows it is alive and how far it got. `--quiet` hides both.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain progress line is printed without a terminal: often enough that a log
/// shows a stuck sweep within minutes, rarely enough that a night's log stays readable (about
/// 600 lines for ten hours).
pub const PLAIN_PERIOD: Duration = Duration::from_secs(60);

/// Where plain progress lines go (stderr, or a test's buffer).
type Sink = Box<dyn FnMut(&str) + Send>;

pub struct Progress {
    bar: ProgressBar,
    /// The plain line's ticker, when stderr is not a terminal and not quiet.
    plain: Mutex<Option<Ticker>>,
}

/// A thread printing the plain line every period until told to stop (or its sender dropped).
struct Ticker {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    pub fn new(total_runs: u64, quiet: bool) -> Self {
        let plain = (!quiet && !std::io::stderr().is_terminal()).then_some(PLAIN_PERIOD);
        Self::with_plain(
            total_runs,
            quiet,
            plain,
            Box::new(|line: &str| eprintln!("{line}")),
        )
    }

    /// As [`Progress::new`], the plain line printed to `sink` every `plain` when given.
    fn with_plain(total_runs: u64, quiet: bool, plain: Option<Duration>, sink: Sink) -> Self {
        let bar = ProgressBar::new(total_runs);
        if quiet {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs, ETA {eta} — {msg}")
                .expect("static template is valid")
                .progress_chars("=> "),
        );
        let ticker = plain.map(|period| Ticker::start(bar.clone(), period, sink));
        Self {
            bar,
            plain: Mutex::new(ticker),
        }
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
        // Within the terminal's width, continuation lines indented.
        let text = crate::terminal::wrap(line, "", "  ");
        let text = text.trim_end_matches('\n');
        if self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    /// Runs counted so far (done, failed for good, or skipped).
    #[cfg(test)]
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    pub fn finish(&self) {
        self.stop_plain();
        self.bar.finish_and_clear();
    }

    fn stop_plain(&self) {
        let ticker = self.plain.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = ticker {
            let _ = t.stop.send(());
            let _ = t.thread.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop_plain();
    }
}

impl Ticker {
    fn start(bar: ProgressBar, period: Duration, mut sink: Sink) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("ocrig-progress".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    let done = bar.position();
                    let total = bar.length().unwrap_or(0);
                    sink(&plain_line(done, total, &bar.message(), started.elapsed()));
                }
            })
            .expect("spawning the progress thread");
        Ticker { stop, thread }
    }
}

/// The plain progress line: `ocrig: progress 12/40 runs (30 %) — now 2x tas lock run 3 —
/// elapsed 1h02m, ETA 2h25m`. The ETA assumes the runs left take as long as the runs done did
/// on average (boots included); unknown before the first run.
pub fn plain_line(done: u64, total: u64, doing: &str, elapsed: Duration) -> String {
    let percent = match total {
        0 => 100,
        t => (done.min(t) * 100 / t) as u32,
    };
    let eta = match (done, total.saturating_sub(done)) {
        (_, 0) => "ETA now".to_string(),
        (0, _) => "ETA unknown (no run done yet)".to_string(),
        (d, left) => {
            let each = elapsed.as_secs_f64() / d as f64;
            format!("ETA {}", clock(Duration::from_secs_f64(each * left as f64)))
        }
    };
    let now = match doing.trim() {
        "" => String::new(),
        what => format!(" — now {what}"),
    };
    format!(
        "ocrig: progress {done}/{total} runs ({percent} %){now} — elapsed {}, {eta}",
        clock(elapsed)
    )
}

/// A duration as a person reads it in a log: `42s`, `7m05s`, `3h02m`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// The lines a [`recorder`] kept, each with when it came.
#[cfg(test)]
type Recorded = std::sync::Arc<Mutex<Vec<(Instant, String)>>>;

/// A sink that keeps its lines and when they came (for tests).
#[cfg(test)]
fn recorder() -> (Sink, Recorded) {
    let lines = std::sync::Arc::new(Mutex::new(Vec::new()));
    let keep = lines.clone();
    let sink: Sink =
        Box::new(move |line: &str| keep.lock().unwrap().push((Instant::now(), line.to_string())));
    (sink, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_line_says_runs_done_the_cell_elapsed_and_eta() {
        let l = plain_line(12, 40, "2x tas lock run 3", Duration::from_secs(3600 + 120));
        assert_eq!(
            l,
            // 28 left at 3720 / 12 = 310 s each: 8680 s.
            "ocrig: progress 12/40 runs (30 %) — now 2x tas lock run 3 — elapsed 1h02m, ETA 2h24m"
        );
        assert_eq!(
            plain_line(0, 6, "1x base+tas: booting 2 guest(s)", Duration::from_secs(42)),
            "ocrig: progress 0/6 runs (0 %) — now 1x base+tas: booting 2 guest(s) — elapsed 42s, ETA unknown (no run done yet)"
        );
        assert_eq!(
            plain_line(3, 6, "", Duration::from_secs(425)),
            "ocrig: progress 3/6 runs (50 %) — elapsed 7m05s, ETA 7m05s"
        );
        assert!(plain_line(6, 6, "x", Duration::from_secs(1)).ends_with("ETA now"));
        assert!(plain_line(0, 0, "", Duration::ZERO).contains("0/0 runs (100 %)"));
    }

    #[test]
    fn without_a_terminal_the_line_comes_every_period_until_finished() {
        let period = Duration::from_millis(40);
        let (sink, lines) = recorder();
        let p = Progress::with_plain(10, false, Some(period), sink);
        let started = Instant::now();
        p.doing("2x tas lock run 0".into());
        p.run_done();
        p.run_done();
        // Three lines, however slowly this machine schedules the thread.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lines.lock().unwrap().len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        p.finish();
        let got = lines.lock().unwrap().clone();
        assert!(got.len() >= 3, "{got:?}");
        // A period apart at least: never more often than asked.
        let mut last = started;
        for (at, line) in &got {
            assert!(*at - last >= period - Duration::from_millis(2), "{got:?}");
            last = *at;
            assert!(
                line.starts_with("ocrig: progress 2/10 runs (20 %) — now 2x tas lock run 0 — elapsed "),
                "{line}"
            );
        }
        // Nothing after finish.
        let n = got.len();
        std::thread::sleep(period * 3);
        assert_eq!(lines.lock().unwrap().len(), n);
    }

    #[test]
    fn quiet_prints_no_plain_line_and_a_dropped_progress_stops_its_ticker() {
        // `new` with quiet: no ticker whatever stderr is.
        let p = Progress::new(5, true);
        assert!(p.plain.lock().unwrap().is_none());
        // Dropped without finish: the ticker stops too.
        let (sink, lines) = recorder();
        let p = Progress::with_plain(5, true, Some(Duration::from_millis(10)), sink);
        drop(p);
        let n = lines.lock().unwrap().len();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(lines.lock().unwrap().len(), n);
    }
}
