//! Inline SVG plots (plotters): the compared metric vs overcommit level per variant with 95% CI
//! error bars, and Jain's fairness index vs level for lock workloads.

use plotters::prelude::*;

use super::fmt_level;
use crate::stats::cells::WorkloadModel;
use crate::sweep::journal::Better;

const WIDTH: u32 = 720;
const HEIGHT: u32 = 420;

/// Distinguishable colours (Okabe–Ito), cycled.
const COLORS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

/// One point: overcommit level, value, optional error bar `(low, high)`.
pub type Point = (f64, f64, Option<(f64, f64)>);

/// One line: a name and its points.
pub struct Line {
    pub name: String,
    pub points: Vec<Point>,
}

/// One line per variant, with a point for each of its cells that `point` can plot.
fn lines_of(wl: &WorkloadModel, point: impl Fn(&crate::stats::cells::Cell) -> Option<Point>) -> Vec<Line> {
    wl.series
        .iter()
        .map(|s| Line {
            name: s.variant.clone(),
            points: s.cells.iter().filter_map(&point).collect(),
        })
        .collect()
}

/// The compared metric vs level, one line per variant, with 95% CI error bars.
pub fn metric_plot(wl: &WorkloadModel) -> anyhow::Result<String> {
    let lines = lines_of(wl, |c| {
        let sum = c.summary.as_ref()?;
        Some((c.level, sum.mean, sum.ci95.map(|ci| (ci.low, ci.high))))
    });
    let title = format!("{}: {} (mean, 95% CI)", wl.workload, super::describe_metric(wl));
    // Put the legend where the lines usually are not: times grow with overcommit, rates fall.
    let legend = match wl.better {
        Better::Lower => SeriesLabelPosition::UpperLeft,
        Better::Higher => SeriesLabelPosition::UpperRight,
    };
    line_plot(&title, &wl.metric, &lines, legend)
}

/// Jain's fairness index vs level (lock workloads only).
pub fn jain_plot(wl: &WorkloadModel) -> anyhow::Result<Option<String>> {
    if !wl.lock {
        return Ok(None);
    }
    let lines = lines_of(wl, |c| Some((c.level, c.jain?, None)));
    let title = format!("{}: Jain's fairness index (1 = fair)", wl.workload);
    line_plot(&title, "jain", &lines, SeriesLabelPosition::UpperRight).map(Some)
}

/// Draws `lines` against overcommit level. Variants are nudged apart horizontally so their
/// error bars do not overlap.
pub fn line_plot(
    title: &str,
    y_desc: &str,
    lines: &[Line],
    legend: SeriesLabelPosition,
) -> anyhow::Result<String> {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let ys = lines.iter().flat_map(|l| {
        l.points
            .iter()
            .flat_map(|p| [p.1].into_iter().chain(p.2.map(|e| e.0)).chain(p.2.map(|e| e.1)))
    });
    let (x0, x1) = bounds(xs).unwrap_or((0.0, 1.0));
    let (y0, y1) = bounds(ys.filter(|y| y.is_finite())).unwrap_or((0.0, 1.0));
    let xpad = ((x1 - x0) * 0.08).max(0.1);
    let ypad = if y1 > y0 {
        (y1 - y0) * 0.08
    } else {
        y0.abs().max(1.0) * 0.1
    };
    let nudge = (x1 - x0).max(0.5) * 0.012;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0 - xpad)..(x1 + xpad), (y0 - ypad)..(y1 + ypad))?;
        let x_fmt = |x: &f64| fmt_level((x * 100.0).round() / 100.0);
        let y_fmt = |y: &f64| axis_number(*y);
        chart
            .configure_mesh()
            .x_desc("overcommit (vCPUs / host CPUs)")
            .y_desc(y_desc)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_labels(12)
            .light_line_style(WHITE)
            .draw()?;
        let k = lines.len() as f64;
        for (i, line) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let dx = (i as f64 - (k - 1.0) / 2.0) * nudge;
            let pts: Vec<(f64, f64)> = line.points.iter().map(|p| (p.0 + dx, p.1)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(line.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
            let cap = nudge * 0.6;
            for p in &line.points {
                if let Some((lo, hi)) = p.2 {
                    let x = p.0 + dx;
                    chart.draw_series([
                        PathElement::new(vec![(x, lo), (x, hi)], color.stroke_width(1)),
                        PathElement::new(vec![(x - cap, lo), (x + cap, lo)], color.stroke_width(1)),
                        PathElement::new(vec![(x - cap, hi), (x + cap, hi)], color.stroke_width(1)),
                    ])?;
                }
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(legend)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Short axis labels: `4M`, `250k`, `12.5`, `0.85`.
fn axis_number(y: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    match y.abs() {
        a if a >= 1e9 => format!("{}G", trim(format!("{:.2}", y / 1e9))),
        a if a >= 1e6 => format!("{}M", trim(format!("{:.2}", y / 1e6))),
        a if a >= 1e4 => format!("{}k", trim(format!("{:.1}", y / 1e3))),
        _ => trim(format!("{y:.3}")),
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
    use crate::report::{ReportOptions, model};
    use crate::stats::cells::tests::journal;

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
    }

    #[test]
    fn axis_labels() {
        assert_eq!(axis_number(4_000_000.0), "4M");
        assert_eq!(axis_number(2_500_000.0), "2.5M");
        assert_eq!(axis_number(250_000.0), "250k");
        assert_eq!(axis_number(12.5), "12.5");
        assert_eq!(axis_number(0.85), "0.85");
        assert_eq!(axis_number(0.0), "0");
    }

    #[test]
    fn empty_and_flat_data_still_draw() {
        let flat = [Line {
            name: "x".into(),
            points: vec![(1.0, 5.0, None)],
        }];
        assert!(
            line_plot("t", "y", &flat, SeriesLabelPosition::UpperLeft)
                .unwrap()
                .contains("<svg")
        );
        assert!(
            line_plot("t", "y", &[], SeriesLabelPosition::UpperLeft)
                .unwrap()
                .contains("<svg")
        );
    }
}
