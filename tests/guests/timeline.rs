//! The vCPU timeline on real guests: a 2x sweep of 1-vCPU guests on the 2 host CPUs (4 guests,
//! two pinned to each CPU, every vCPU busy in a lock). Checked against the host scheduler's
//! own record, as the run's side file holds it: both guests placed on a CPU appear on it and
//! nowhere else, they take turns (many times over a run), each turn is physically plausible
//! (longer than 0.1 ms, shorter than 100 ms) and the record reports it beside the host's
//! slice setting (or why that setting could not be read); the HTML report draws the timeline,
//! with the drawn guest's lock stalls on its vCPU's lane, and a real Chromium lays it out with
//! its rows, legend and marks inside the plot; no tracefs
//! instance of a finished ocrig is left behind.
//!
//! Where the host cannot be traced (not root, no tracefs) the record must say why instead, and
//! the test checks that the report shows the reason.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common;

const SCENARIO: &str = "\
name: timeline-2x
description: two 1-vCPU guests on each of 2 host CPUs, every vCPU busy in a lock
host:
  cpus: 2
  backend: qemu
guest:
  vcpus: 1
  memory_mib: 256
levels: [2.0]
workloads:
  - name: lock-tas
    command: lock
    args: {algo: tas, threads: 2, duration-ms: 2000, hold-ns: 200, gap-ns: 200}
    metric: ops_per_sec
    better: higher
runs: 1
# A fresh guest's first run (its payload and pages cold) is the warm-up every fresh guest set gets.
warmup_runs: 1
";

/// Host CPU of each guest's vCPU 0, from the pinning the sweep journaled.
fn placement(group: &Value) -> BTreeMap<u64, u64> {
    group["pinning"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["guest"].as_u64().unwrap(),
                p["vcpu_to_cpu"][0][1].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Per CPU, the guests in the order they held it during the run, repeats collapsed.
fn turns(tl: &Value) -> BTreeMap<u64, Vec<u64>> {
    let who = tl["who"].as_array().unwrap();
    let end = tl["run_end_us"].as_i64().unwrap();
    let mut out: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for s in tl["segments"].as_array().unwrap() {
        let s: Vec<i64> = s
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_i64().unwrap())
            .collect();
        let Some(g) = who[s[3] as usize]["vcpu"]["guest"].as_u64() else {
            continue;
        };
        if s[2] > 0 && s[1] < end {
            let t = out.entry(s[0] as u64).or_default();
            if t.last() != Some(&g) {
                t.push(g);
            }
        }
    }
    out
}

/// Headless Chromium loads `page` and reports, per timeline SVG, its size, its bars and
/// whether every text lies inside it.
fn browser_check(page: &Path, profile: &Path) -> Value {
    const SCRIPT: &str = r#"<script>
addEventListener('load', () => {
  const plots = [...document.querySelectorAll('.timeline svg')].map(svg => {
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')].map(t => ({s: t.textContent.trim(), r: t.getBoundingClientRect()}));
    const inside = texts.every(t => t.s === '' || (t.r.left >= box.left - 1 && t.r.right <= box.right + 1
      && t.r.top >= box.top - 1 && t.r.bottom <= box.bottom + 1));
    return {width: box.width, height: box.height, rects: svg.querySelectorAll('rect').length, inside,
            texts: texts.map(t => t.s).filter(s => s !== '')};
  });
  const out = document.createElement('pre');
  out.id = 'ocrig-check';
  out.textContent = JSON.stringify({plots});
  document.body.appendChild(out);
});
</script>"#;
    let html = std::fs::read_to_string(page).unwrap();
    let checked = page.with_extension("check.html");
    std::fs::write(&checked, html.replace("</body>", &format!("{SCRIPT}\n</body>"))).unwrap();
    let chromium = Path::new("/usr/bin/chromium");
    assert!(
        chromium.is_file(),
        "Debian's chromium is not installed: run ./scripts/setup"
    );
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--window-size=1100,3000",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", checked.display()))
        .output()
        .unwrap();
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    let check = dom
        .split("<pre id=\"ocrig-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .expect("the checking script did not run");
    serde_json::from_str(&check.replace("&quot;", "\"").replace("&amp;", "&")).unwrap()
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots guests and traces the host (root, tracefs) (~13 s)"
)]
fn at_2x_the_two_guests_on_each_host_cpu_take_turns_in_plausible_slices() {
    let _one = common::one_sweep();
    let (tmp, results) = common::run_scenario("timeline.yaml", SCENARIO);
    let dir = common::results_dir(&results);
    // The counted attempt (a run's attempt that broke a physics check is retried).
    let every: Vec<Value> = common::journal(&dir)
        .1
        .into_iter()
        .filter(|r| r["type"] == "run")
        .collect();
    let all: Vec<Value> = every.iter().filter(|r| r["warmup"] == false).cloned().collect();
    let last = all.iter().filter_map(|r| r["attempt"].as_u64()).max().unwrap();
    let recs: Vec<Value> = all.into_iter().filter(|r| r["attempt"] == last).collect();
    assert_eq!(recs.len(), 4, "one record per guest");
    assert!(recs.iter().all(|r| r["ok"] == true), "the last attempt counted");
    let rec0 = recs.iter().find(|r| r["guest"] == 0).unwrap();
    assert_eq!(rec0["ok"], true, "{rec0}");
    let summary = &rec0["extra"]["timeline"];
    // The attempt's first record holds the timeline; the others say where it is.
    assert!(summary.is_object(), "{rec0}");
    assert!(
        recs.iter()
            .filter(|r| r["guest"] != 0)
            .all(|r| r["extra"].get("timeline").is_none() && r["extra"]["shared_facts_on_guest"] == 0)
    );

    let report = Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(["report", "--format", "html"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let html = String::from_utf8(report.stdout).unwrap();
    assert!(html.contains("vCPU timelines"), "no timeline section");

    if let Some(why) = summary["unavailable"].as_str() {
        // A host that cannot be traced: the record and the report say why, and nothing else.
        assert!(!why.is_empty() && summary.get("path").is_none(), "{summary}");
        assert!(html.contains("no timeline: "), "the report does not say why");
        eprintln!("timeline unavailable on this host: {why}");
        return;
    }

    let file = std::fs::File::open(summary["path"].as_str().unwrap()).unwrap();
    let tl: Value = serde_json::from_reader(flate2::read::GzDecoder::new(file)).unwrap();
    assert_eq!(tl["clock"], "mono");
    assert_eq!(
        summary["segments"].as_u64().unwrap() as usize,
        tl["segments"].as_array().unwrap().len()
    );
    assert!(summary["segments"].as_u64().unwrap() > 0);
    let run_end_ms = tl["run_end_us"].as_f64().unwrap() / 1e3;
    assert!(run_end_ms > 1900.0, "the run lasted its 2 s: {run_end_ms} ms");

    let every: Vec<&Value> = every.iter().collect();
    let placed = placement(common::group_facts(&every, rec0));
    let turns = turns(&tl);
    let mut lines = Vec::new();
    for cpu in [0u64, 1] {
        let mut mine: Vec<u64> = placed
            .iter()
            .filter(|(_, c)| **c == cpu)
            .map(|(g, _)| *g)
            .collect();
        mine.sort();
        assert_eq!(mine.len(), 2, "two guests pinned to CPU {cpu}: {placed:?}");
        let seq = turns.get(&cpu).cloned().unwrap_or_default();
        // Pinned: nobody else's vCPU ran here; both of this CPU's guests did.
        assert!(
            seq.iter().all(|g| mine.contains(g)),
            "CPU {cpu}: {seq:?} (placed {mine:?})"
        );
        for g in &mine {
            assert!(seq.contains(g), "guest {g} never ran on CPU {cpu}: {seq:?}");
        }
        // Alternating: with repeats collapsed, each change of holder is a hand-over between the
        // two, and a 2 s run of busy vCPUs hands over many times (slices are milliseconds).
        assert!(seq.len() >= 20, "CPU {cpu}: only {} turns: {seq:?}", seq.len());
        lines.push(format!("CPU {cpu}: guests {mine:?}, {} turns", seq.len()));
    }
    let slices = summary["vcpu_slices"].as_array().unwrap();
    assert_eq!(slices.len(), 4, "{summary}");
    for s in slices {
        let p50 = s["turn_p50_ms"].as_f64().unwrap();
        let p90 = s["turn_p90_ms"].as_f64().unwrap();
        assert!(
            p50 > 0.1 && p90 < 100.0 && p50 <= p90,
            "guest {}: turn p50 {p50} p90 {p90}",
            s["guest"]
        );
        assert!(s["segment_p50_ms"].as_f64().unwrap() > 0.0, "{s}");
        lines.push(format!(
            "guest {}: turn p50 {p50:.2} ms p90 {p90:.2} ms ({} turns), stint p50 {:.2} ms",
            s["guest"],
            s["turns"],
            s["segment_p50_ms"].as_f64().unwrap()
        ));
    }
    // Beside the host's setting: a number where the kernel shows it, else the reason.
    let host = &summary["host_slice"];
    assert!(
        host["ns"].as_u64().is_some_and(|ns| ns > 0)
            || host["unavailable"].as_str().is_some_and(|w| !w.is_empty()),
        "{host}"
    );
    lines.push(format!("host: {host}"));
    eprintln!("{}", lines.join("\n"));

    // The report draws both views of the run's timeline, and a browser lays them out.
    assert_eq!(html.matches("class=\"timeline plot-timeline\"").count(), 2);
    let page = tmp.path().join("report.html");
    std::fs::write(&page, &html).unwrap();
    let check = browser_check(&page, &tmp.path().join("profile"));
    let plots = check["plots"].as_array().unwrap();
    assert_eq!(plots.len(), 2, "{check}");
    for p in plots {
        assert!(
            p["width"].as_f64().unwrap() > 300.0 && p["height"].as_f64().unwrap() > 100.0,
            "{p}"
        );
        assert!(p["inside"] == true, "a label outside its plot: {p}");
        assert!(p["rects"].as_u64().unwrap() > 20, "bars drawn: {p}");
        let texts: Vec<&str> = p["texts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        for want in [
            "CPU 0",
            "CPU 1",
            "guest 0 vCPU 0",
            "guest 3 vCPU 0",
            "other thread",
            "ms from the run's start",
            // The drawn run's own lock stalls, on its vCPU's lane (issue 34).
            "g0 vCPU 0 lock",
            "stalled hold",
            "stalled hand-over",
        ] {
            assert!(texts.contains(&want), "{want} missing: {texts:?}");
        }
    }

    // The sweep's tracefs instance went with it (and any other ocrig's that is gone).
    if let Ok(entries) = std::fs::read_dir("/sys/kernel/tracing/instances") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("ocrig-").and_then(|r| r.split('-').next()) {
                assert!(
                    Path::new(&format!("/proc/{pid}")).exists(),
                    "instance {name} left behind"
                );
            }
        }
    }
}
