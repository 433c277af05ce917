//! The first command as a person sees it: `ocrig run` of the README's first scenario (shortened:
//! 3 runs of 1 s instead of 8 of 3 s, the same variants, levels and lock workload with its
//! preemption columns) in a real terminal, tmux at 120 × 50. Every line it prints fits 120
//! columns, and the screen it leaves shows the verdict and where the HTML report is.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;

/// tmux's own answer, or the test's failure naming the tmux command.
fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux (scripts/setup --tests installs it)");
    assert!(
        out.status.success(),
        "tmux {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests, in tmux at 120 x 50 (~60 s)"
)]
fn the_first_command_fits_120_columns_and_ends_on_its_verdict() {
    let _one = common::one_sweep();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let scenario = std::fs::read_to_string(root.join("scenarios/examples/ticket-vs-tas.yaml"))
        .unwrap()
        .replace("runs: 8", "runs: 3")
        .replace("duration-ms: 3000", "duration-ms: 1000");
    assert!(scenario.contains("runs: 3") && scenario.contains("duration-ms: 1000"));
    let file = tmp.path().join("ticket-vs-tas.yaml");
    std::fs::write(&file, scenario).unwrap();
    let results = tmp.path().join("results");
    let session = format!("ocrig-terminal-{}", std::process::id());
    let command = format!(
        "cd {} && {} run {} --results {} --wait-for-cpus; echo OCRIG-EXIT $?; sleep 600",
        root.display(),
        env!("CARGO_BIN_EXE_ocrig"),
        file.display(),
        results.display()
    );
    // A terminal of 120 columns and 50 rows, colour as a terminal has it (no NO_COLOR).
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .output();
    tmux(&[
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "50",
        "-s",
        &session,
        "-e",
        "NO_COLOR=",
        &command,
    ]);
    tmux(&["set-option", "-t", &session, "history-limit", "100000"]);
    let deadline = Instant::now() + Duration::from_secs(600);
    let history = loop {
        // -J joins the lines the terminal wrapped, so a line wider than 120 shows as one.
        let all = tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", &session]);
        if all.contains("OCRIG-EXIT") {
            break all;
        }
        assert!(Instant::now() < deadline, "no end in 10 minutes:\n{all}");
        std::thread::sleep(Duration::from_secs(2));
    };
    let screen = tmux(&["capture-pane", "-p", "-t", &session]);
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .output();
    assert!(history.contains("OCRIG-EXIT 0"), "{history}");
    let lines: Vec<&str> = history.lines().filter(|l| !l.contains("OCRIG-EXIT")).collect();
    // Colour escapes take no columns (capture-pane without -e strips them anyway).
    let wide: Vec<String> = lines
        .iter()
        .filter(|l| l.chars().count() > 120)
        .map(|l| format!("{} columns: {l}", l.chars().count()))
        .collect();
    assert!(wide.is_empty(), "lines over 120 columns:\n{}", wide.join("\n"));
    // The verdict is on the last screen: both variants at both levels, the retention and the
    // report's path, after the tables and notes.
    assert!(screen.contains("── verdict"), "{screen}");
    for level in ["1x", "2x"] {
        assert!(
            screen
                .lines()
                .any(|l| l.trim_start().starts_with(level) && l.contains(" tas ")),
            "{level}: {screen}"
        );
    }
    assert!(screen.contains("retention (ops_per_sec"), "{screen}");
    assert!(
        screen.contains("report: ") && screen.contains("report.html"),
        "{screen}"
    );
    let verdict_row = lines.iter().position(|l| l.contains("── verdict")).unwrap();
    eprintln!(
        "first command in tmux 120x50: {} lines, the verdict at row {}, widest {} columns",
        lines.len(),
        verdict_row + 1,
        lines.iter().map(|l| l.chars().count()).max().unwrap_or(0)
    );
}
