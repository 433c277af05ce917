//! The guest kernel's profiles in a report: per cell (workload × variant × level) the folded
//! stacks of every counted run summed, the top kernel symbols by self samples, and flame graphs
//! drawn by `inferno` — one per cell, and a differential one of each variant against the
//! baseline at the same level (red: more samples than the baseline, blue: fewer; the baseline
//! is normalised to the variant's total, so the colours show shares, not load).
//!
//! Read from the journal's payload reports (`kernel.profile.folded`), counting each run once
//! by [`crate::journal::accounting::settle`]; cells without profiles are left out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::journal::accounting::Settled;
use crate::stats::digest::Digested;

/// One cell's merged profile.
#[derive(Debug, Clone, PartialEq)]
pub struct CellProfile {
    pub workload: String,
    pub variant: String,
    pub level: f64,
    /// Counted runs (guest records) that carried a profile.
    pub runs: usize,
    pub samples: u64,
    /// `root;...;leaf` → samples, summed over the runs.
    pub folded: BTreeMap<String, u64>,
}

/// Every cell with at least one profile, in journal order of first appearance.
pub fn cells_digested(journal: &Digested, settled: &Settled) -> Vec<CellProfile> {
    let mut out: Vec<CellProfile> = Vec::new();
    // (workload, variant, level bits) → index into `out`: one lookup per record.
    let mut index: BTreeMap<(&str, &str, u64), usize> = BTreeMap::new();
    for r in settled.counted(&journal.runs) {
        let Some(profile) = r.profile.as_deref() else {
            continue;
        };
        let i = *index
            .entry((&*r.workload, &*r.variant, r.level.to_bits()))
            .or_insert_with(|| {
                out.push(CellProfile {
                    workload: r.workload.to_string(),
                    variant: r.variant.to_string(),
                    level: r.level,
                    runs: 0,
                    samples: 0,
                    folded: BTreeMap::new(),
                });
                out.len() - 1
            });
        let c = &mut out[i];
        c.runs += 1;
        c.samples += profile.samples;
        for (stack, n) in &profile.folded {
            *c.folded.entry(stack.clone()).or_default() += n;
        }
        if profile.other_samples > 0 {
            *c.folded.entry("[other stacks]".into()).or_default() += profile.other_samples;
        }
    }
    out
}

/// The `n` symbols with the most self samples (leaf frames) and their share of all samples.
pub fn top_symbols(c: &CellProfile, n: usize) -> Vec<(String, f64)> {
    let leaf = crate::stats::kernel_symbols::leaf_samples(c.folded.iter().map(|(s, k)| (s.as_str(), *k)));
    let mut v: Vec<(String, u64)> = leaf.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let total = c.samples.max(1) as f64;
    v.into_iter()
        .take(n)
        .map(|(s, k)| (s, k as f64 / total))
        .collect()
}

fn folded_text(folded: &BTreeMap<String, u64>) -> String {
    folded.iter().map(|(s, n)| format!("{s} {n}\n")).collect()
}

/// A flame graph (SVG) of one cell.
pub fn flame_svg(c: &CellProfile, title: &str) -> anyhow::Result<String> {
    let text = folded_text(&c.folded);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "samples".into();
    opts.deterministic = true;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut svg).context("drawing a flame graph")?;
    Ok(String::from_utf8(svg)?)
}

/// A differential flame graph of `other` against `base` (widths: `other`'s samples).
pub fn diff_svg(base: &CellProfile, other: &CellProfile, title: &str) -> anyhow::Result<String> {
    let (before, after) = (folded_text(&base.folded), folded_text(&other.folded));
    let mut diff = Vec::new();
    let dopts = inferno::differential::Options {
        normalize: true,
        ..Default::default()
    };
    inferno::differential::from_readers(dopts, before.as_bytes(), after.as_bytes(), &mut diff)
        .context("folding the differential profile")?;
    let diff = String::from_utf8(diff)?;
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "samples".into();
    opts.deterministic = true;
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, diff.lines(), &mut svg)
        .context("drawing a differential flame graph")?;
    Ok(String::from_utf8(svg)?)
}

fn file_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `flame/<workload>/<level>x-<variant>.svg`, the differential
/// `<level>x-<variant>-vs-<baseline>.svg` where the baseline has a profile at that level, and
/// `kernel-profile.md` (top-10 symbols per cell). Nothing when no run has a profile.
pub fn write(cells: &[CellProfile], baseline: &str, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if cells.is_empty() {
        return Ok(Vec::new());
    }
    let mut written = Vec::new();
    let mut md = String::from(
        "# Guest kernel profiles\n\nSelf samples (leaf frame) as a share of all samples, summed over counted runs; `[user]` = samples in user space.\n",
    );
    for c in cells {
        let sub = dir.join("flame").join(file_part(&c.workload));
        std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
        let name = format!("{}x-{}", c.level, file_part(&c.variant));
        let title = format!(
            "{} · {} · {}x ({} runs, {} samples)",
            c.workload, c.variant, c.level, c.runs, c.samples
        );
        let path = sub.join(format!("{name}.svg"));
        std::fs::write(&path, flame_svg(c, &title)?)
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
        if c.variant != baseline
            && let Some(b) = cells
                .iter()
                .find(|b| b.variant == baseline && b.workload == c.workload && b.level == c.level)
        {
            let title = format!(
                "{} · {} vs {} · {}x (red: more than {})",
                c.workload, c.variant, baseline, c.level, baseline
            );
            let path = sub.join(format!("{name}-vs-{}.svg", file_part(baseline)));
            std::fs::write(&path, diff_svg(b, c, &title)?)
                .with_context(|| format!("writing {}", path.display()))?;
            written.push(path);
        }
        md.push_str(&format!(
            "\n## {} · {} · {}x ({} runs, {} samples)\n\n| symbol | share |\n|---|---:|\n",
            c.workload, c.variant, c.level, c.runs, c.samples
        ));
        for (sym, share) in top_symbols(c, 10) {
            md.push_str(&format!("| `{sym}` | {:.1} % |\n", share * 100.0));
        }
    }
    let path = dir.join("kernel-profile.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::checked_in_chromium;

    fn cell(variant: &str, stacks: &[(&str, u64)]) -> CellProfile {
        CellProfile {
            workload: "sysfs-mutex".into(),
            variant: variant.into(),
            level: 2.0,
            runs: 1,
            samples: stacks.iter().map(|s| s.1).sum(),
            folded: stacks.iter().map(|(s, n)| (s.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn top_symbols_rank_leaf_frames_by_share() {
        let c = cell(
            "base",
            &[
                ("entry;__mutex_lock_slowpath;mutex_spin_on_owner", 30),
                ("entry;kernfs_iop_permission;__mutex_lock_slowpath", 50),
                ("entry;vfs_read;mutex_spin_on_owner", 20),
                ("[user]", 100),
            ],
        );
        let top = top_symbols(&c, 2);
        assert_eq!(top[0], ("[user]".to_string(), 0.5));
        assert_eq!(top[1].0, "__mutex_lock_slowpath");
        assert!((top[1].1 - 0.25).abs() < 1e-12);
        assert_eq!(top_symbols(&c, 10)[2], ("mutex_spin_on_owner".to_string(), 0.25));
    }

    #[test]
    fn flame_graphs_hold_the_frames_and_the_differential_colours_growth_red() {
        let base = cell(
            "base",
            &[("entry;kernfs;__mutex_lock_slowpath", 10), ("entry;idle", 90)],
        );
        let other = cell(
            "patched",
            &[("entry;kernfs;__mutex_lock_slowpath", 60), ("entry;idle", 40)],
        );
        let svg = flame_svg(&base, "t").unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..80]);
        for frame in ["entry", "kernfs", "__mutex_lock_slowpath", "idle"] {
            assert!(svg.contains(&format!("<title>{frame} (")), "{frame} missing");
        }
        let diff = diff_svg(&base, &other, "d").unwrap();
        // inferno writes a differential frame's change into its title, e.g. "(+50.00%)".
        let line = diff
            .lines()
            .skip_while(|l| !l.contains("<title>__mutex_lock_slowpath"))
            .take(3)
            .collect::<String>();
        assert!(line.contains('+'), "{line}");
        assert!(line.contains("rgb(255,"), "slow path grew, so red: {line}");
    }

    /// The flame graphs as a user sees them: Debian's headless Chromium lays out a page with
    /// both SVGs inline and a script reports every frame's name and drawn width.
    #[test]
    #[cfg_attr(not(feature = "full-tests"), ignore = "full tier: starts Chromium (~1 s)")]
    fn flame_graphs_render_in_chromium_with_every_frame_drawn() {
        let base = cell(
            "base",
            &[("entry;kernfs;__mutex_lock_slowpath", 10), ("entry;idle", 90)],
        );
        let other = cell(
            "patched",
            &[("entry;kernfs;__mutex_lock_slowpath", 60), ("entry;idle", 40)],
        );
        let inline = |svg: String| svg[svg.find("<svg").unwrap()..].to_string();
        let tmp = tempfile::tempdir().unwrap();
        let page = tmp.path().join("flame.html");
        let check = r#"<script>
window.addEventListener('load', () => {
  const graphs = [...document.querySelectorAll('body > div > svg')].map(svg => {
    const frames = [...svg.querySelectorAll('g')].filter(g => g.querySelector(':scope > title') && g.querySelector(':scope > rect'))
      .map(g => ({name: g.querySelector(':scope > title').textContent.split(' (')[0],
                  width: g.querySelector(':scope > rect').getBoundingClientRect().width,
                  fill: g.querySelector(':scope > rect').getAttribute('fill')}));
    return {width: svg.getBoundingClientRect().width, frames};
  });
  const out = document.createElement('pre');
  out.id = 'ocrig-check';
  out.textContent = JSON.stringify(graphs);
  document.body.appendChild(out);
});
</script>"#;
        let html = format!(
            "<!DOCTYPE html><html><body><div>{}</div><div>{}</div>{check}</body></html>",
            inline(flame_svg(&base, "base").unwrap()),
            inline(diff_svg(&base, &other, "diff").unwrap())
        );
        std::fs::write(&page, html).unwrap();
        let graphs = checked_in_chromium(&page, tmp.path());
        let graphs = graphs.as_array().unwrap();
        assert_eq!(graphs.len(), 2);
        for g in graphs {
            let frames = g["frames"].as_array().unwrap();
            // The root frame spans the graph (inferno draws 1200 px wide, less the margins).
            let all = frames
                .iter()
                .find(|f| f["name"] == "all")
                .expect("the root frame");
            assert!(all["width"].as_f64().unwrap() > 1000.0, "{g}");
            for name in ["entry", "kernfs", "__mutex_lock_slowpath", "idle"] {
                let f = frames
                    .iter()
                    .find(|f| f["name"] == name)
                    .unwrap_or_else(|| panic!("{name} not drawn: {g}"));
                assert!(f["width"].as_f64().unwrap() > 1.0, "{f}");
            }
        }
        // In the differential graph the grown slow path is red, the shrunk idle blue.
        let frames = graphs[1]["frames"].as_array().unwrap();
        let fill = |n: &str| {
            frames.iter().find(|f| f["name"] == n).unwrap()["fill"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert!(
            fill("__mutex_lock_slowpath").starts_with("rgb(255,"),
            "{}",
            fill("__mutex_lock_slowpath")
        );
        assert!(fill("idle").ends_with(",255)"), "{}", fill("idle"));
    }
}
