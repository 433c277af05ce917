//! The vCPU timeline of a run in the HTML report: per pinned host CPU a row, a bar for every
//! stretch one thread ran, coloured by guest vCPU ("other" threads grey, idle left blank), the
//! run's start and end as dashed lines. One run per cell (the first counted one with a
//! timeline), each drawn twice: the whole traced window (at most one bar per pixel column, the
//! thread that had most of it, so the SVG stays small however long the run), and [`ZOOM_MS`]
//! with every segment, where the slices can be read: around the run's longest lock stall where
//! it has them, else its first.
//!
//! The timelines are the side files named by each record's `extra.timeline.path`
//! ([`crate::telemetry::sched_trace`]); a run whose host could not be traced shows why.
//!
//! Below the CPUs, a lane per guest vCPU shows where the lock stood still: the stretched holds
//! and hand-overs the drawn record's payload listed (its longest), placed on the timeline by
//! the guest's clock tie (`extra.stretched_on_host`), so a reader sees the host take a vCPU
//! (its colour gone from its CPU) and the lock stall on that vCPU's lane at the same moment.

use std::collections::BTreeMap;

use plotters::prelude::*;

use super::layout::escape;
use super::plot::{COLORS, draw_legend, tick_formatter};
use crate::journal::accounting::Settled;
use crate::stats::digest::Digested;
use crate::stats::timeline_ref::{Stall, TimelineAt, TimelineRef};
use crate::telemetry::sched_trace::{Timeline, Who, read_timeline};

const WIDTH: u32 = 860;
const LEGEND_WIDTH: u32 = 150;
const ROW_PX: u32 = 46;
/// The zoomed view: this much of the run from its start.
pub const ZOOM_MS: f64 = 60.0;
const OTHER: RGBColor = RGBColor(170, 170, 170);
const STALLED_HOLD: RGBColor = RGBColor(214, 39, 40);
const STALLED_HANDOVER: RGBColor = RGBColor(255, 127, 14);

/// The section: per cell, its first counted run's timeline or the reason there is none.
pub fn section(journal: &Digested, settled: &Settled) -> String {
    let mut seen = BTreeMap::new();
    for r in settled.counted(&journal.runs) {
        let Some(t) = r.timeline.as_ref() else {
            continue;
        };
        let key = (r.workload.to_string(), r.variant.to_string(), r.level.to_bits());
        // The attempt's first record carries its timeline: take the cell's first.
        seen.entry(key).or_insert((r.run, t));
    }
    if seen.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<section>\n<h2>vCPU timelines (host scheduler's record)</h2>\n<p class=\"notes\">Per pinned host \
         CPU, which thread ran when (<code>sched:sched_switch</code> on the host): one colour per guest vCPU, \
         grey for any other thread, blank for idle; dashed lines mark the run's start and end. Below them, per \
         vCPU of the cell's first guest, its lock's stretched holds (red) and hand-overs (orange): the longest \
         its payload listed, placed by the guest's clock tie (at least a pixel wide). Per cell, its first \
         counted run.</p>\n",
    );
    for ((workload, variant, level), (run, at)) in seen {
        let level = f64::from_bits(level);
        let title = format!("{workload}, {variant} at {}, run {run}", super::fmt_level(level));
        out.push_str(&format!("<h3>{}</h3>\n", escape(&title)));
        let (summary, tl) = match drawable(at) {
            Ok(both) => both,
            Err(why) => {
                out.push_str(&format!("<p class=\"notes\">{}</p>\n", escape(&why)));
                continue;
            }
        };
        out.push_str(&format!("<p class=\"notes\">{}</p>\n", escape(&summary.words)));
        let whole = (tl.traced_from_us as f64 / 1e3, tl.traced_to_us as f64 / 1e3);
        // Zoomed on the longest stall where the run has them (the lock's window opens after
        // the payload's warm-up, so its first milliseconds have none), else its start.
        let (zoom, zoomed) = match summary.stalls.iter().max_by(|a, b| a.len_ms.total_cmp(&b.len_ms)) {
            Some(s) => {
                let from = (s.at_ms - 10.0).max(tl.traced_from_us as f64 / 1e3);
                (
                    (from, from + ZOOM_MS.max(s.len_ms + 20.0)),
                    format!(
                        "{:.0} ms around its longest lock stall",
                        ZOOM_MS.max(s.len_ms + 20.0)
                    ),
                )
            }
            None => {
                let zoom = (0.0, ZOOM_MS.min(tl.run_end_us as f64 / 1e3).max(1.0));
                (zoom, format!("first {:.0} ms of the run", zoom.1))
            }
        };
        for (window, what) in [(whole, "whole trace"), (zoom, zoomed.as_str())] {
            match draw(&tl, window, &format!("{title}: {what}"), &summary.stalls) {
                Ok(svg) => out.push_str(&format!(
                    "<div class=\"timeline plot-timeline\">\n{svg}\n</div>\n"
                )),
                Err(e) => out.push_str(&format!(
                    "<p class=\"notes\">drawing failed: {}</p>\n",
                    escape(&e.to_string())
                )),
            }
        }
    }
    out.push_str("</section>\n");
    out
}

/// A drawn run's timeline summary (read back from the journal: only the drawn runs' are) and
/// its timeline, or the words that say why there is none to draw.
fn drawable(at: &TimelineAt) -> Result<(TimelineRef, Timeline), String> {
    let summary = at
        .load()
        .map_err(|why| format!("timeline summary not readable: {why}"))?;
    if let Some(why) = &summary.unavailable {
        return Err(format!("no timeline: {why}"));
    }
    let tl = summary
        .path
        .as_deref()
        .ok_or_else(|| "the record names no timeline file".to_string())
        .and_then(|p| read_timeline(std::path::Path::new(p)))
        .map_err(|why| format!("timeline not readable: {why}"))?;
    Ok((summary, tl))
}

/// The colour of a segment's thread; None for idle (left blank).
fn color_of(who: &Who, vcpus: &[(u32, u32)]) -> Option<RGBColor> {
    match who {
        Who::Vcpu { guest, vcpu } => {
            let i = vcpus.iter().position(|x| *x == (*guest, *vcpu)).unwrap_or(0);
            Some(COLORS[i % COLORS.len()])
        }
        Who::Other { .. } => Some(OTHER),
        Who::Idle => None,
    }
}

/// The timeline between `window` (ms from the run's start) as an SVG, with `stalls` on a lane
/// per guest vCPU below the CPUs.
pub fn draw(tl: &Timeline, window: (f64, f64), title: &str, stalls: &[Stall]) -> anyhow::Result<String> {
    let (x0, x1) = (window.0, window.1.max(window.0 + 0.001));
    let mut lanes: Vec<(u32, u32)> = stalls.iter().map(|s| (s.guest, s.vcpu)).collect();
    lanes.sort();
    lanes.dedup();
    let cpu_rows = tl.cpus.len().max(1);
    let rows = cpu_rows + lanes.len();
    // Top to bottom: the CPUs, then the lanes.
    let labels: Vec<String> = tl
        .cpus
        .iter()
        .map(|c| format!("CPU {c}"))
        .chain(lanes.iter().map(|(g, v)| format!("g{g} vCPU {v} lock")))
        .collect();
    let height = 110 + ROW_PX * rows as u32;
    let mut vcpus: Vec<(u32, u32)> = tl
        .who
        .iter()
        .filter_map(|w| match w {
            Who::Vcpu { guest, vcpu } => Some((*guest, *vcpu)),
            _ => None,
        })
        .collect();
    vcpus.sort();
    let plot_px = (WIDTH - LEGEND_WIDTH - 100) as f64;
    let us_per_px = (x1 - x0) * 1e3 / plot_px;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let (area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(if lanes.is_empty() { 60 } else { 110 })
            .build_cartesian_2d(x0..x1, 0.0..rows as f64)?;
        let y_fmt = move |y: &f64| {
            let r = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-6 && r < labels.len() {
                labels[rows - 1 - r].clone()
            } else {
                String::new()
            }
        };
        let x_ticks = tick_formatter(x0, x1, 10);
        let x_fmt = |x: &f64| x_ticks(*x);
        chart
            .configure_mesh()
            .x_desc("ms from the run's start")
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .y_labels(rows * 2 + 1)
            .x_labels(10)
            .disable_y_mesh()
            .light_line_style(WHITE)
            .draw()?;
        for (r, &cpu) in tl.cpus.iter().enumerate() {
            let y = (rows - 1 - r) as f64;
            let bars = bars(tl, cpu, (x0, x1), us_per_px);
            chart.draw_series(bars.into_iter().filter_map(|(a, b, w)| {
                let c = color_of(&tl.who[w], &vcpus)?;
                Some(Rectangle::new([(a, y + 0.15), (b, y + 0.85)], c.filled()))
            }))?;
        }
        // Each stall on its lane, at least a pixel wide (a 50 µs stall in a 3 s view).
        let px_ms = us_per_px / 1e3;
        for (i, lane) in lanes.iter().enumerate() {
            let y = (lanes.len() - 1 - i) as f64;
            chart.draw_series(
                stalls
                    .iter()
                    .filter(|s| (s.guest, s.vcpu) == *lane && s.at_ms < x1 && s.at_ms + s.len_ms > x0)
                    .map(|s| {
                        let a = s.at_ms.max(x0);
                        let b = (s.at_ms + s.len_ms).min(x1).max(a + px_ms);
                        let c = if s.hold { STALLED_HOLD } else { STALLED_HANDOVER };
                        Rectangle::new([(a, y + 0.25), (b, y + 0.75)], c.filled())
                    }),
            )?;
        }
        let mark = BLACK.stroke_width(1);
        for (t, _) in [(0.0, "start"), (tl.run_end_us as f64 / 1e3, "end")] {
            if t >= x0 && t <= x1 {
                chart.draw_series(DashedLineSeries::new(
                    vec![(t, 0.0), (t, rows as f64)],
                    5,
                    3,
                    mark,
                ))?;
            }
        }
        let mut entries: Vec<(String, ShapeStyle)> = vcpus
            .iter()
            .enumerate()
            .map(|(i, (g, v))| {
                (
                    format!("guest {g} vCPU {v}"),
                    COLORS[i % COLORS.len()].stroke_width(8),
                )
            })
            .collect();
        entries.push(("other thread".into(), OTHER.stroke_width(8)));
        if !lanes.is_empty() {
            // Short enough for the legend's lines (17 characters).
            entries.push(("stalled hold".into(), STALLED_HOLD.stroke_width(8)));
            entries.push(("stalled hand-over".into(), STALLED_HANDOVER.stroke_width(8)));
        }
        entries.push(("run start / end".into(), mark));
        draw_legend(&legend_area, &entries)?;
        root.present()?;
    }
    Ok(svg)
}

/// The bars of one CPU inside `window` (ms), as (from, to, who): every segment when segments
/// are wider than a pixel, else per pixel column the thread that ran most of it, neighbours of
/// the same thread merged.
fn bars(tl: &Timeline, cpu: usize, window: (f64, f64), us_per_px: f64) -> Vec<(f64, f64, usize)> {
    let (w0, w1) = (window.0 * 1e3, window.1 * 1e3);
    let segs: Vec<(f64, f64, usize)> = tl
        .segments
        .iter()
        .filter(|s| s[0] as usize == cpu && (s[2] as f64) > w0 && (s[1] as f64) < w1)
        .map(|s| ((s[1] as f64).max(w0), (s[2] as f64).min(w1), s[3] as usize))
        .collect();
    let mut out: Vec<(f64, f64, usize)> = Vec::new();
    let mut push = |a: f64, b: f64, w: usize| match out.last_mut() {
        Some(last) if last.2 == w && (last.1 - a).abs() < 1e-9 => last.1 = b,
        _ => out.push((a, b, w)),
    };
    if us_per_px <= 0.0 || segs.len() as f64 <= (w1 - w0) / us_per_px {
        for (a, b, w) in segs {
            push(a / 1e3, b / 1e3, w);
        }
        return out;
    }
    // Pixel columns: the thread with the most time in each.
    let columns = ((w1 - w0) / us_per_px).ceil() as usize;
    let mut k = 0;
    for c in 0..columns {
        let (a, b) = (
            w0 + c as f64 * us_per_px,
            (w0 + (c + 1) as f64 * us_per_px).min(w1),
        );
        let mut time: BTreeMap<usize, f64> = BTreeMap::new();
        while k < segs.len() && segs[k].1 <= a {
            k += 1;
        }
        let mut j = k;
        while j < segs.len() && segs[j].0 < b {
            *time.entry(segs[j].2).or_default() += segs[j].1.min(b) - segs[j].0.max(a);
            j += 1;
        }
        if let Some((&w, _)) = time.iter().max_by(|x, y| x.1.total_cmp(y.1)) {
            push(a / 1e3, b / 1e3, w);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline() -> Timeline {
        // Two vCPUs alternating every 4 ms on CPU 1 for 400 ms, a 20 µs other thread at each
        // switch; CPU 0 idle.
        let mut segments = Vec::new();
        let mut t = 0;
        for i in 0..100 {
            segments.push([1, t, t + 3980, i % 2]);
            segments.push([1, t + 3980, t + 4000, 2]);
            t += 4000;
        }
        segments.push([0, 0, t, 3]);
        Timeline {
            clock: "mono".into(),
            run_start_mono_ns: 0,
            run_end_us: t - 1000,
            traced_from_us: 0,
            traced_to_us: t,
            cpus: vec![0, 1],
            who: vec![
                Who::Vcpu { guest: 0, vcpu: 0 },
                Who::Vcpu { guest: 1, vcpu: 0 },
                Who::Other { comm: "qemu".into() },
                Who::Idle,
            ],
            segments,
            dropped_events: 0,
            clipped: None,
        }
    }

    #[test]
    fn a_long_window_is_bounded_by_pixels_and_a_short_one_keeps_every_segment() {
        let tl = timeline();
        let coarse = bars(&tl, 1, (0.0, 400.0), 400.0 * 1e3 / 100.0);
        assert!(coarse.len() <= 100, "{}", coarse.len());
        let fine = bars(&tl, 1, (0.0, 40.0), 1.0);
        assert_eq!(fine.len(), 20, "10 turns, each a vCPU stint and an other blip");
        assert_eq!(fine[0], (0.0, 3.98, 0));
        assert_eq!(fine[1], (3.98, 4.0, 2));
        let svg = draw(&tl, (0.0, 40.0), "t", &[]).unwrap();
        assert!(svg.contains("guest 1 vCPU 0") && svg.contains("CPU 1") && svg.contains("run start"));
        assert!(!svg.contains("stalled hold"), "no lanes without stalls");
        // A stall of guest 0's vCPU 0 and one of guest 1's: a lane each, below the CPUs.
        let stall = |at_ms, hold, guest| Stall {
            at_ms,
            len_ms: 4.0,
            hold,
            guest,
            vcpu: 0,
        };
        let with = draw(
            &tl,
            (0.0, 40.0),
            "t",
            &[stall(8.0, true, 0), stall(12.0, false, 1), stall(90.0, true, 0)],
        )
        .unwrap();
        for want in [
            "g0 vCPU 0 lock",
            "g1 vCPU 0 lock",
            "stalled hold",
            "stalled hand-over",
        ] {
            assert!(with.contains(want), "{want}");
        }
        // One bar of each in the window (the third stall is past it), in their colours.
        let fill = |c: RGBColor| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        assert_eq!(with.matches(&fill(STALLED_HOLD)).count(), 1, "{with}");
        assert_eq!(with.matches(&fill(STALLED_HANDOVER)).count(), 1);
        // Idle is blank: CPU 0's row has no bar.
        assert!(bars(&tl, 0, (0.0, 40.0), 1.0).len() == 1 && color_of(&Who::Idle, &[]).is_none());
    }
}
