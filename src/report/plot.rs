//! Inline SVG plots (plotters), all against overcommit level, one colour per variant:
//! the compared metric (every run a hollow point, the mean a line with a 95% CI bar), guest 0's
//! vCPU wait share (the same, with the `1 − 1/L` every-vCPU-busy reference), and Jain's index.
//!
//! Every axis starts where the quantity's domain does (a throughput is never drawn below 0,
//! a CI bar is cut at the domain's edge) and its tick labels carry as many decimals as the
//! tick step needs, so no two ticks read alike.

use plotters::coord::ranged1d::Ranged;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::fmt_level;
use crate::stats::cells::{Cell, WorkloadModel};

const WIDTH: u32 = 860;
/// The strip right of the plot that holds the legend.
const LEGEND_WIDTH: u32 = 150;
const HEIGHT: u32 = 420;
const Y_LABELS: usize = 8;

/// Distinguishable colours (Okabe–Ito, then three more), cycled past ten variants.
pub(super) const COLORS: [RGBColor; 10] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(117, 112, 179),
    RGBColor(166, 86, 40),
    RGBColor(120, 120, 120),
];

/// Where a quantity can lie; axes and CI bars are cut to it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Domain {
    /// `[0, ∞)`: throughputs, times, counts.
    NonNegative,
    /// `[0, 1]`: fairness indices, rates, shares.
    Fraction,
    /// `[0, 100]`: shares drawn as percentages.
    Percent,
    /// No known bound.
    Any,
}

impl Domain {
    /// The domain of a payload metric: shares, rates and Jain's indices are fractions; every
    /// other metric the payload reports is a non-negative amount.
    pub fn of_metric(metric: &str, values: &[f64]) -> Self {
        if values.iter().any(|v| *v < 0.0) {
            Domain::Any
        } else if metric.ends_with("jain") || metric.ends_with("_rate") || metric.ends_with("_share") {
            Domain::Fraction
        } else {
            Domain::NonNegative
        }
    }

    fn bounds(self) -> (f64, f64) {
        match self {
            Domain::NonNegative => (0.0, f64::INFINITY),
            Domain::Fraction => (0.0, 1.0),
            Domain::Percent => (0.0, 100.0),
            Domain::Any => (f64::NEG_INFINITY, f64::INFINITY),
        }
    }

    fn clip(self, y: f64) -> f64 {
        let (lo, hi) = self.bounds();
        y.clamp(lo, hi)
    }
}

/// One variant's data at one level: every run's value and the mean with its CI.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelData {
    pub level: f64,
    pub runs: Vec<f64>,
    pub mean: Option<f64>,
    pub ci: Option<(f64, f64)>,
}

/// One variant.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub levels: Vec<LevelData>,
}

/// A dashed reference line (e.g. the physical expectation) and its legend label.
pub struct Reference {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Plot<'a> {
    pub title: &'a str,
    pub y_desc: &'a str,
    pub domain: Domain,
    pub reference: Option<Reference>,
}

/// The compared metric vs level: every run, the mean and its 95% CI.
pub fn metric_plot(wl: &WorkloadModel) -> anyhow::Result<String> {
    let series = series_of(wl, |c| {
        let runs = c.points.iter().map(|p| p.value).collect();
        let s = c.summary.as_ref();
        (
            runs,
            s.map(|s| s.mean),
            s.and_then(|s| s.ci95).map(|ci| (ci.low, ci.high)),
        )
    });
    let all: Vec<f64> = series
        .iter()
        .flat_map(|s| &s.levels)
        .flat_map(|l| l.runs.clone())
        .collect();
    let title = format!(
        "{}: {} (runs ○, mean ●, 95% CI)",
        wl.workload,
        super::describe_metric(wl)
    );
    let plot = Plot {
        title: &title,
        y_desc: &wl.metric,
        domain: Domain::of_metric(&wl.metric, &all),
        reference: None,
    };
    draw(&plot, &series)
}

/// Each variant's retention (its metric at each level / at its lowest level) with the
/// interval of the ratio, and the line of "kept all of it" (1); `None` when no variant has
/// two levels.
pub fn retention_plot(wl: &WorkloadModel) -> anyhow::Result<Option<String>> {
    if wl.retention.is_empty() {
        return Ok(None);
    }
    let series: Vec<Series> = wl
        .retention
        .iter()
        .map(|r| Series {
            name: r.variant.clone(),
            levels: std::iter::once(LevelData {
                level: r.from_level,
                runs: Vec::new(),
                mean: Some(1.0),
                ci: None,
            })
            .chain(r.rows.iter().map(|row| LevelData {
                level: row.level,
                runs: Vec::new(),
                mean: row.effect.as_ref().map(|e| e.ratio),
                ci: row.effect.as_ref().map(|e| (e.low, e.high)),
            }))
            .collect(),
        })
        .collect();
    let levels = || series.iter().flat_map(|s| s.levels.iter().map(|l| l.level));
    let (lo, hi) = bounds(levels()).unwrap_or((0.0, 1.0));
    let title = format!(
        "{}: retention, {} at each level / at the lowest (95% CI)",
        wl.workload, wl.metric
    );
    let plot = Plot {
        title: &title,
        y_desc: "ratio to the lowest level",
        domain: Domain::NonNegative,
        reference: Some(Reference {
            label: "kept all (1)".into(),
            points: vec![(lo, 1.0), (hi, 1.0)],
        }),
    };
    draw(&plot, &series).map(Some)
}

/// Guest 0's vCPU wait share vs level, in percent, with the every-vCPU-busy expectation
/// `1 − 1/L`; `None` when no cell measured it.
pub fn vcpu_wait_plot(wl: &WorkloadModel) -> anyhow::Result<Option<String>> {
    let cells = || wl.series.iter().flat_map(|s| &s.cells);
    if !cells().any(|c| !c.vcpu_wait.samples.is_empty()) {
        return Ok(None);
    }
    let pct = |x: f64| x * 100.0;
    let series = series_of(wl, |c| {
        let m = &c.vcpu_wait;
        let s = m.summary.as_ref();
        (
            m.samples.iter().copied().map(pct).collect(),
            s.map(|s| pct(s.mean)),
            s.and_then(|s| s.ci95).map(|ci| (pct(ci.low), pct(ci.high))),
        )
    });
    let mut levels: Vec<f64> = cells().map(|c| c.level).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    let reference = Reference {
        label: "every vCPU busy: 1 - 1/L".into(),
        points: levels.iter().map(|&l| (l, pct(busy_wait_share(l)))).collect(),
    };
    let title = format!(
        "{}: vCPU wait for a host CPU, guest 0 (runs ○, mean ●)",
        wl.workload
    );
    let plot = Plot {
        title: &title,
        y_desc: "vCPU wait % of run time",
        domain: Domain::Percent,
        reference: Some(reference),
    };
    draw(&plot, &series).map(Some)
}

/// Jain's fairness index vs level (lock workloads only).
pub fn jain_plot(wl: &WorkloadModel) -> anyhow::Result<Option<String>> {
    if !wl.lock {
        return Ok(None);
    }
    let series = series_of(wl, |c| (Vec::new(), c.jain, None));
    let title = format!("{}: Jain's fairness index (1 = fair), mean per cell", wl.workload);
    let plot = Plot {
        title: &title,
        y_desc: "jain",
        domain: Domain::Fraction,
        reference: None,
    };
    draw(&plot, &series).map(Some)
}

/// The wait share of a vCPU that is always runnable when `level` vCPUs share each host CPU
/// fairly: it runs 1/L of the time.
pub fn busy_wait_share(level: f64) -> f64 {
    if level <= 1.0 { 0.0 } else { 1.0 - 1.0 / level }
}

type CellData = (Vec<f64>, Option<f64>, Option<(f64, f64)>);

fn series_of(wl: &WorkloadModel, data: impl Fn(&Cell) -> CellData) -> Vec<Series> {
    wl.series
        .iter()
        .map(|s| Series {
            name: s.variant.clone(),
            levels: s
                .cells
                .iter()
                .map(|c| {
                    let (runs, mean, ci) = data(c);
                    LevelData {
                        level: c.level,
                        runs,
                        mean,
                        ci,
                    }
                })
                .collect(),
        })
        .collect()
}

/// The y range drawn: the data (and CI bars, cut to the domain) with some headroom, starting
/// at the domain's lower edge when it has one.
fn y_range(domain: Domain, series: &[Series], reference: Option<&Reference>) -> (f64, f64) {
    let ys = series
        .iter()
        .flat_map(|s| &s.levels)
        .flat_map(|l| {
            l.runs
                .iter()
                .copied()
                .chain(l.mean)
                .chain(l.ci.map(|c| domain.clip(c.0)))
                .chain(l.ci.map(|c| domain.clip(c.1)))
        })
        .chain(reference.into_iter().flat_map(|r| r.points.iter().map(|p| p.1)))
        .filter(|y| y.is_finite());
    let (lo, hi) = bounds(ys).unwrap_or((0.0, 1.0));
    match domain {
        Domain::NonNegative => (0.0, if hi > 0.0 { hi * 1.08 } else { 1.0 }),
        Domain::Fraction => (0.0, (hi * 1.08).clamp(0.1, 1.05)),
        Domain::Percent => (0.0, (hi * 1.08).clamp(10.0, 105.0)),
        Domain::Any => {
            let pad = if hi > lo {
                (hi - lo) * 0.08
            } else {
                lo.abs().max(1.0) * 0.1
            };
            (lo - pad, hi + pad)
        }
    }
}

/// Draws `series` against overcommit level. Variants are nudged apart horizontally, and the
/// runs of one cell spread a little around their mean, so nothing hides behind anything; the
/// legend has its own strip right of the plot, so no line runs under it.
pub fn draw(plot: &Plot, series: &[Series]) -> anyhow::Result<String> {
    let xs = series.iter().flat_map(|s| s.levels.iter().map(|l| l.level));
    let (x0, x1) = bounds(xs).unwrap_or((0.0, 1.0));
    let xpad = ((x1 - x0) * 0.08).max(0.1);
    let (y0, y1) = y_range(plot.domain, series, plot.reference.as_ref());
    let nudge = (x1 - x0).max(0.5) * 0.012;
    let y_fmt = tick_formatter(y0, y1, Y_LABELS);
    let grey = RGBColor(150, 150, 150);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&area)
            .caption(plot.title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0 - xpad)..(x1 + xpad), y0..y1)?;
        let x_fmt = |x: &f64| fmt_level((x * 100.0).round() / 100.0);
        let y_fmt = |y: &f64| y_fmt(*y);
        chart
            .configure_mesh()
            .x_desc("overcommit (vCPUs / host CPUs)")
            .y_desc(plot.y_desc)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_labels(12)
            .y_labels(Y_LABELS)
            .light_line_style(WHITE)
            .draw()?;
        if let Some(r) = &plot.reference {
            chart.draw_series(DashedLineSeries::new(
                r.points.clone(),
                6,
                4,
                grey.stroke_width(1),
            ))?;
        }
        let k = series.len() as f64;
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let dx = (i as f64 - (k - 1.0) / 2.0) * nudge;
            let means: Vec<(f64, f64)> = s
                .levels
                .iter()
                .filter_map(|l| Some((l.level + dx, l.mean?)))
                .collect();
            chart.draw_series(LineSeries::new(means.clone(), color.stroke_width(2)))?;
            chart.draw_series(means.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
            for l in &s.levels {
                let x = l.level + dx;
                let n = l.runs.len() as f64;
                chart.draw_series(l.runs.iter().enumerate().map(|(j, y)| {
                    let jitter = (j as f64 - (n - 1.0) / 2.0) * nudge * 0.3;
                    Circle::new((x + jitter, *y), 3, color.stroke_width(1))
                }))?;
                if let Some((lo, hi)) = l.ci {
                    let (lo, hi) = (plot.domain.clip(lo), plot.domain.clip(hi));
                    let cap = nudge * 0.6;
                    chart.draw_series([
                        PathElement::new(vec![(x, lo), (x, hi)], color.stroke_width(1)),
                        PathElement::new(vec![(x - cap, lo), (x + cap, lo)], color.stroke_width(1)),
                        PathElement::new(vec![(x - cap, hi), (x + cap, hi)], color.stroke_width(1)),
                    ])?;
                }
            }
        }
        let mut entries: Vec<(String, ShapeStyle)> = series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), COLORS[i % COLORS.len()].stroke_width(2)))
            .collect();
        if let Some(r) = &plot.reference {
            entries.push((r.label.clone(), grey.stroke_width(1)));
        }
        draw_legend(&legend_area, &entries)?;
        root.present()?;
    }
    Ok(svg)
}

/// One entry per line, top down, in the strip beside the plot: a stroke of its style, then
/// its name (long names wrap).
pub(super) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, ShapeStyle)],
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 13).into_font();
    let mut y = 48;
    for (name, style) in entries {
        area.draw(&PathElement::new(vec![(4, y), (24, y)], *style))?;
        for (k, part) in wrap(name, 17).into_iter().enumerate() {
            if k > 0 {
                y += 15;
            }
            area.draw(&Text::new(part, (30, y - 7), font.clone()))?;
        }
        y += 20;
    }
    Ok(())
}

/// `s` in lines of at most `width` characters, broken at spaces where it can be.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in s.split(' ') {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

/// A tick-label formatter for an axis over `[lo, hi]` with at most `labels` ticks: one unit
/// (k, M, G) for the whole axis and as many decimals as the tick step needs.
pub fn tick_formatter(lo: f64, hi: f64, labels: usize) -> impl Fn(f64) -> String {
    let ticks = RangedCoordf64::from(lo..hi).key_points(labels.max(2));
    let step = ticks
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .filter(|d| *d > 0.0)
        .fold(f64::INFINITY, f64::min);
    let top = lo.abs().max(hi.abs());
    let (unit, suffix) = match top {
        t if t >= 1e9 => (1e9, "G"),
        t if t >= 1e6 => (1e6, "M"),
        t if t >= 1e4 => (1e3, "k"),
        _ => (1.0, ""),
    };
    // Ticks are 1, 2 or 5 × 10^k apart, so this many decimals tell them apart.
    let decimals = if step.is_finite() {
        (-(step / unit).log10().floor()).clamp(0.0, 9.0) as usize
    } else {
        2
    };
    move |y: f64| {
        let v = y / unit;
        // No "-0" at the origin.
        let v = if v.abs() < 0.5 * 10f64.powi(-(decimals as i32)) {
            0.0
        } else {
            v
        };
        format!("{v:.decimals$}{suffix}")
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ReportOptions;
    use crate::testing::{journal, model};

    /// The trimmed contents of the SVG's `<text>` elements.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect()
    }

    #[test]
    fn plots_are_svg_with_one_line_per_variant() {
        let m = model(&journal(), &ReportOptions::default());
        let svg = metric_plot(&m.workloads[0]).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        let texts = texts(&svg);
        assert!(
            texts.contains(&"base") && texts.contains(&"patched"),
            "legend missing: {texts:?}"
        );
        assert!(
            texts.contains(&"0.5x") && texts.contains(&"1x"),
            "level ticks missing: {texts:?}"
        );
        assert!(jain_plot(&m.workloads[0]).unwrap().is_none());
        assert!(jain_plot(&m.workloads[1]).unwrap().unwrap().contains("<svg"));
        // Every run is drawn: 2 variants × 2 levels × 3 runs hollow circles, plus 4 means.
        let circles = svg.matches("<circle").count();
        assert_eq!(circles, 12 + 4, "{svg}");
    }

    #[test]
    fn the_ci_never_reaches_below_zero_for_a_throughput() {
        // n = 2 with a large spread: the t-interval's low end is far below 0.
        let s = crate::stats::summary::summarize(&[100_000.0, 3_000_000.0]).unwrap();
        assert!(s.ci95.unwrap().low < -1e6, "{s:?}");
        let series = [Series {
            name: "tas".into(),
            levels: vec![LevelData {
                level: 1.0,
                runs: vec![100_000.0, 3_000_000.0],
                mean: Some(s.mean),
                ci: s.ci95.map(|c| (c.low, c.high)),
            }],
        }];
        let (y0, _) = y_range(Domain::NonNegative, &series, None);
        assert_eq!(y0, 0.0);
        let plot = Plot {
            title: "t",
            y_desc: "ops_per_sec",
            domain: Domain::of_metric("ops_per_sec", &[100_000.0, 3_000_000.0]),
            reference: None,
        };
        let svg = draw(&plot, &series).unwrap();
        assert!(
            !texts(&svg).iter().any(|t| t.starts_with('-')),
            "a negative tick: {:?}",
            texts(&svg)
        );
    }

    #[test]
    fn tick_labels_are_distinct_even_on_a_narrow_axis() {
        // The old Jain axis: 0.9975..0.9995 printed 0.999, 0.999, 0.998, 0.998 ...
        for (lo, hi) in [
            (0.9975, 0.9995),
            (0.0, 1.05),
            (0.0, 4.2e6),
            (1.21e6, 1.29e6),
            (0.0, 105.0),
            (18.6, 19.4),
        ] {
            let f = tick_formatter(lo, hi, Y_LABELS);
            let ticks = RangedCoordf64::from(lo..hi).key_points(Y_LABELS);
            let labels: Vec<String> = ticks.iter().map(|t| f(*t)).collect();
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(unique, labels, "repeated tick labels on [{lo}, {hi}]");
            assert!(labels.len() >= 3, "{labels:?}");
        }
        assert_eq!(tick_formatter(0.0, 4.2e6, 8)(2e6), "2M");
        assert_eq!(tick_formatter(0.0, 2.2e6, 8)(1.5e6), "1.5M");
        assert_eq!(tick_formatter(0.0, 1.05, 8)(0.0), "0.0");
        assert_eq!(tick_formatter(0.9975, 0.9995, 8)(0.998), "0.9980");
    }

    #[test]
    fn domains() {
        assert_eq!(Domain::of_metric("jain", &[0.9]), Domain::Fraction);
        assert_eq!(Domain::of_metric("contention_rate", &[0.1]), Domain::Fraction);
        assert_eq!(Domain::of_metric("time_s", &[3.0]), Domain::NonNegative);
        assert_eq!(Domain::of_metric("delta", &[-1.0]), Domain::Any);
        assert_eq!(Domain::Percent.clip(-3.0), 0.0);
        assert_eq!(busy_wait_share(0.5), 0.0);
        assert_eq!(busy_wait_share(2.0), 0.5);
        assert!((busy_wait_share(2.5) - 0.6).abs() < 1e-12);
    }

    #[test]
    fn empty_and_flat_data_still_draw() {
        let flat = [Series {
            name: "x".into(),
            levels: vec![LevelData {
                level: 1.0,
                runs: vec![5.0],
                mean: Some(5.0),
                ci: None,
            }],
        }];
        let plot = Plot {
            title: "t",
            y_desc: "y",
            domain: Domain::Any,
            reference: None,
        };
        assert!(draw(&plot, &flat).unwrap().contains("<svg"));
        assert!(draw(&plot, &[]).unwrap().contains("<svg"));
    }
}
