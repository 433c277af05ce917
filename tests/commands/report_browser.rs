//! The HTML report as a user sees it: rendered by a real headless Chromium (Debian's, installed
//! by scripts/setup). A ten-variant journal in spinlock-variants' shape goes through
//! `ocrig report --format html`; the browser loads the page with a small checking script
//! appended, lays it out and reports what it found (`--dump-dom`), and takes a screenshot.
//! Checked: the page renders, every plot is present with non-zero size, and each has both
//! axes — the x description and distinct tick labels on both, all inside the plot.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const VARIANTS: [&str; 10] = [
    "ticket",
    "tas",
    "ttas",
    "mcs",
    "clh",
    "qspinlock",
    "pticket",
    "spin_park",
    "futex",
    "pthread",
];
const LEVELS: [f64; 2] = [1.0, 2.0];

/// A journal of spinlock-variants' shape (10 variants, 1x and 2x, 2 lock workloads, 3 runs, two
/// guests at 2x), its numbers made up but its records as the runner writes them.
fn journal(dir: &Path) {
    let header = json!({
        "type": "sweep", "scenario": "spinlock-variants", "scenario_sha256": "00", "baseline": "ticket",
        "variants": VARIANTS, "levels": LEVELS,
        "workloads": {
            "lock[hold-ns=200]": {"command": "lock", "metric": "ops_per_sec", "better": "higher"},
            "lock[hold-ns=2000]": {"command": "lock", "metric": "ops_per_sec", "better": "higher"},
        },
        "backend": "qemu", "accel": "tcg", "host_cpus": [0, 1], "guest_vcpus": 2,
        "started_at": "2026-12-01T00:00:00Z", "ocrig_version": "0.1.0",
        "journal_format": 3, "guest_start": "boot", "kernels": {},
        // Every variant its own guests at every level (boot group `level index × 10 + variant`).
        "boots": LEVELS.iter().flat_map(|&level| VARIANTS.iter().map(move |v| json!({"level": level, "guests": level as u32, "variants": [v]}))).collect::<Vec<_>>(),
        "schedule": {"guests": "per-variant", "order": "round-robin", "runs_per_bring_up": 3},
    });
    let mut lines = vec![header.to_string()];
    for (w, workload) in ["lock[hold-ns=200]", "lock[hold-ns=2000]"].iter().enumerate() {
        for (v, variant) in VARIANTS.iter().enumerate() {
            for (l, &level) in LEVELS.iter().enumerate() {
                let guests = level as u32;
                for run in 0..3u32 {
                    for guest in 0..guests {
                        // FIFO locks collapse at 2x; the spread makes a 3-run CI reach below 0.
                        let fifo = v < 1 || (3..7).contains(&v);
                        let base = 900_000.0 / (1.0 + w as f64) * (1.0 - 0.03 * v as f64);
                        let ops = if level > 1.0 && fifo {
                            base * [0.02, 0.30, 0.05][run as usize]
                        } else {
                            base * (1.0 + 0.02 * run as f64)
                        };
                        let wait = if level > 1.0 {
                            0.47 + 0.01 * run as f64
                        } else {
                            0.01
                        };
                        lines.push(
                            json!({
                                "type": "run", "variant": variant, "level": level, "workload": workload,
                                "run": run, "warmup": false, "guest": guest, "guests": guests, "ok": true,
                                "attempt": 1, "attempt_records": guests, "argv": ["lock"], "timings": {"run_s": 3.1},
                                // A bring-up per run, all in one block: compared unpaired over them.
                                "slot": {"boot": 10 * l + v, "bring_up": run + 1, "seq": 0, "block": 0},
                                "finished_at": "2026-12-01T00:00:00Z",
                                "metrics": {
                                    "ops_per_sec": ops, "contention_rate": 0.1 * level, "jain": 0.999 - 0.0004 * run as f64,
                                    "ctxsw_voluntary": 3.0, "ctxsw_involuntary": 40.0 * level,
                                },
                                "extra": {
                                    "vcpu_sched": {"wall_s": 3.4, "mean_wait_share": wait, "vcpus": []},
                                    "guest_stat": {"user": 600, "system": 10, "idle": 70, "steal": 0,
                                                   "steal_share": null, "busy_share": 0.9,
                                                   "steal_unavailable": "not measured: TCG gives the guest no steal clock"},
                                    "kvm": "not available: QEMU's query-stats has no KVM provider: the guest does not run under KVM",
                                },
                            })
                            .to_string(),
                        );
                    }
                }
            }
        }
    }
    std::fs::write(dir.join("journal.jsonl"), lines.join("\n") + "\n").unwrap();
}

/// Appended to the report: lays out every plot and writes what it finds into `#ocrig-check`.
const CHECK_SCRIPT: &str = r#"<script>
addEventListener('load', () => {
  const inside = (r, box) => r.width > 0 && r.height > 0 && r.left >= box.left - 1 && r.right <= box.right + 1
    && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
  const plots = [...document.querySelectorAll('.plot svg')].map(svg => {
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')].map(t => ({s: t.textContent.trim(), r: t.getBoundingClientRect()}));
    const all_inside = texts.every(t => t.s === '' || inside(t.r, box));
    // Tick labels: x ticks end in "x" (levels), y ticks are numbers; a y label sits left of the plot area.
    const xticks = texts.filter(t => /^[0-9.]+x$/.test(t.s)).map(t => t.s);
    const yticks = texts.filter(t => /^-?[0-9.]+[kMG%]?$/.test(t.s) && t.r.right < box.left + 0.2 * box.width).map(t => t.s);
    const has = s => texts.some(t => t.s.includes(s));
    return {width: box.width, height: box.height, xticks, yticks, all_inside,
            x_desc: has('overcommit'), title: texts.length ? texts[0].s : '', lines: svg.querySelectorAll('polyline, line, path').length};
  });
  const out = document.createElement('pre');
  out.id = 'ocrig-check';
  const h2 = [...document.querySelectorAll('h2')].map(h => ({text: h.textContent, top: h.getBoundingClientRect().top}));
  out.textContent = JSON.stringify({plots, sections: document.querySelectorAll('section').length,
    tables: document.querySelectorAll('table').length, height: document.body.scrollHeight, h2});
  document.body.appendChild(out);
});
</script>"#;

fn chromium() -> PathBuf {
    let path = PathBuf::from("/usr/bin/chromium");
    assert!(
        path.is_file(),
        "Debian's chromium is not installed: run ./scripts/setup (it installs the package)"
    );
    path
}

/// Headless Chromium as root on a closed network (see DEVELOPERS.md).
fn browser(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--window-size=1100,3000",
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: starts Chromium (~2 s)")]
fn html_report_renders_in_a_real_browser_with_every_plot_and_its_axes() {
    let tmp = tempfile::tempdir().unwrap();
    journal(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["report", "--format", "html"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = String::from_utf8(out.stdout).unwrap();
    // The overview's retention plot per workload, then two workloads, each: metric plot,
    // vCPU-wait plot, Jain plot.
    assert_eq!(html.matches("<svg").count(), 2 + 6);
    let page = tmp.path().join("report.html");
    std::fs::write(
        &page,
        html.replace("</body>", &format!("{CHECK_SCRIPT}\n</body>")),
    )
    .unwrap();
    let url = format!("file://{}", page.display());

    let dom = browser(&tmp.path().join("profile-dom"))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        dom.status.success(),
        "chromium --dump-dom: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let check = dom
        .split("<pre id=\"ocrig-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| {
            panic!(
                "the checking script did not run; DOM tail: {}",
                &dom[dom.len().saturating_sub(500)..]
            )
        });
    let check: Value = serde_json::from_str(&check.replace("&quot;", "\"").replace("&amp;", "&")).unwrap();
    assert_eq!(
        check["sections"],
        2 + 2,
        "the verdict, the overview and two workloads: {check}"
    );
    // The answer opens the page: the verdict's heading first, within the first screen (the
    // window is 1100 wide), the overview's after it.
    let h2 = check["h2"].as_array().unwrap();
    assert_eq!(h2[0]["text"], "Verdict", "{check}");
    assert!(h2[0]["top"].as_f64().unwrap() < 300.0, "{check}");
    assert!(h2[1]["text"].as_str().unwrap().starts_with("Overview"), "{check}");
    assert!(
        check["tables"].as_u64().unwrap() >= 2 * (9 + 1 + 1),
        "the verdict, 9 comparisons and the cell table per workload: {check}"
    );
    assert!(
        check["height"].as_f64().unwrap() > 2000.0,
        "the page laid out: {check}"
    );
    let plots = check["plots"].as_array().unwrap();
    assert_eq!(
        plots.len(),
        2 + 6,
        "the overview's two retention plots and six: {check}"
    );
    for p in plots {
        let title = p["title"].as_str().unwrap();
        assert!(
            p["width"].as_f64().unwrap() > 300.0 && p["height"].as_f64().unwrap() > 150.0,
            "{p}"
        );
        assert!(p["x_desc"] == true, "no x axis description: {p}");
        assert!(p["all_inside"] == true, "a label outside its plot: {p}");
        assert!(p["lines"].as_u64().unwrap() >= 4, "axes and lines drawn: {p}");
        for axis in ["xticks", "yticks"] {
            let ticks: Vec<&str> = p[axis]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            assert!(ticks.len() >= 2, "{title}: {axis} {ticks:?}");
            let mut distinct = ticks.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                ticks.len(),
                "{title}: repeated {axis} labels {ticks:?}"
            );
            assert!(
                !ticks.iter().any(|t| t.starts_with('-')),
                "{title}: a negative {axis} label {ticks:?}"
            );
        }
        assert!(p["xticks"].as_array().unwrap().iter().any(|t| t == "1x"), "{p}");
    }

    let shot = tmp.path().join("report.png");
    let status = browser(&tmp.path().join("profile-shot"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "chromium --screenshot: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // IHDR: width and height, big-endian, at bytes 16..24.
    let dim = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!((dim(16), dim(20)), (1100, 3000));
    // A blank page compresses to a few kB; tables, text and plots do not.
    assert!(
        png.len() > 60_000,
        "screenshot of {} bytes looks blank",
        png.len()
    );
    if let Some(keep) = std::env::var_os("OCRIG_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}
