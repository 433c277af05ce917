//! The results directory: created for a new sweep (with its scenario copy and header), or the
//! resumed one; its log and its journal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::preflight::preflight_disk;
use super::results_lock::ResultsLock;
use super::resume;
use crate::journal::{
    Entry, JOURNAL_FILE, JOURNAL_FORMAT, JournalWriter, ResumeNote, RunsOn, ScheduleInfo, SweepHeader,
    WorkloadInfo,
};
use crate::sweep::plan::Plan;

/// The results directory — the resumed one, or a new one — with its log and its journal; for a
/// new sweep the scenario as run and the sweep header (`head`) are written first, and its lock
/// taken (a resumed one's was taken before its journal was read). A resume journals `note`
/// first (what it runs on and which changes it accepted); with an accepted scenario change the
/// new scenario becomes `scenario.yaml` and the one run before is kept beside it. `claimed` is
/// told the directory's absolute path, so a CPU claim names who holds it. The log is appended
/// to, never truncated.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_results(
    root: &Path,
    previous: Option<&resume::Previous>,
    note: Option<ResumeNote>,
    plan: &Plan,
    scenario_text: &str,
    mut claimed: impl FnMut(&Path),
    head: impl FnOnce() -> SweepHeader,
) -> anyhow::Result<(PathBuf, JournalWriter, Option<ResultsLock>)> {
    let (results_dir, lock) = match previous {
        Some(p) => (p.dir.clone(), None),
        None => {
            let dir = create_results_dir(root, &plan.name)?;
            let journal = dir.join(JOURNAL_FILE);
            std::fs::write(&journal, "").with_context(|| format!("creating {}", journal.display()))?;
            let lock = ResultsLock::take(&dir, false)?;
            lock.say_holder()?;
            (dir, Some(lock))
        }
    };
    claimed(&std::fs::canonicalize(&results_dir).unwrap_or_else(|_| results_dir.clone()));
    preflight_disk(&results_dir, plan)?;
    super::log_to_file(&results_dir.join(if previous.is_some() {
        "ocrig-resume.log"
    } else {
        "ocrig.log"
    }))?;
    let mut journal = JournalWriter::open(&results_dir)?;
    let copy = results_dir.join("scenario.yaml");
    match (previous, note) {
        (None, _) => {
            std::fs::write(&copy, scenario_text)?;
            journal.append(&Entry::Sweep(Box::new(head())))?;
        }
        (Some(p), Some(note)) => {
            if note.runs_on.scenario_sha256 != p.runs_on.scenario_sha256 {
                let kept = numbered(&results_dir, "scenario.before-resume", "yaml");
                std::fs::rename(&copy, &kept)?;
                std::fs::write(&copy, scenario_text)?;
                crate::terminal::say(&format!(
                    "ocrig: the scenario as changed now runs ({}); the one run before is kept in {}",
                    copy.display(),
                    kept.display()
                ));
            }
            journal.append(&Entry::Resume(Box::new(note)))?;
        }
        (Some(_), None) => {}
    }
    Ok((results_dir, journal, lock))
}

/// `DIR/STEM.EXT`, or `DIR/STEM-2.EXT`, `-3`... whichever does not exist yet.
pub(crate) fn numbered(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    let mut path = dir.join(format!("{stem}.{ext}"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{stem}-{n}.{ext}"));
    }
    path
}

/// Each variant's guest kernel release, for the sweep header.
pub(crate) fn kernels_of(images: &BTreeMap<String, crate::image::Image>) -> BTreeMap<String, String> {
    images
        .iter()
        .map(|(v, i)| (v.clone(), i.kernel_release.clone()))
        .collect()
}

/// Each variant's guest image id (the hash of its inputs), for the sweep header.
pub(crate) fn images_of(images: &BTreeMap<String, crate::image::Image>) -> BTreeMap<String, String> {
    images.iter().map(|(v, i)| (v.clone(), i.id.clone())).collect()
}

pub(crate) fn create_results_dir(root: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string();
    let mut dir = root.join(format!("{name}-{stamp}"));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = root.join(format!("{name}-{stamp}-{n}"));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating results directory {}", dir.display()))?;
    Ok(dir)
}

pub(crate) fn run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{:x}{:04x}", t.as_secs() & 0xffffff, std::process::id() & 0xffff)
}

/// The header of a sweep of `plan` on what `runs_on` says.
pub(crate) fn header(plan: &Plan, runs_on: RunsOn) -> SweepHeader {
    SweepHeader {
        journal_format: JOURNAL_FORMAT,
        scenario: plan.name.clone(),
        runs_on,
        baseline: plan.baseline.clone(),
        variants: plan.variants.clone(),
        levels: plan.levels.clone(),
        workloads: plan
            .workloads
            .iter()
            .map(|w| {
                (
                    w.id.clone(),
                    WorkloadInfo {
                        command: w.command.clone(),
                        metric: w.metric.clone(),
                        better: w.better,
                        loosened_bounds: crate::sweep::records::loosened_bounds(
                            plan.boots
                                .iter()
                                .flat_map(|b| &b.cells)
                                .filter(|c| c.workload.id == w.id)
                                .map(|c| c.argv.as_slice()),
                        ),
                    },
                )
            })
            .collect(),
        guest_vcpus: plan.vcpus,
        scenario_path: None,
        overrides: Vec::new(),
        kernel_identity: BTreeMap::new(),
        schedule: ScheduleInfo {
            guests: plan.schedule.guests,
            order: plan.schedule.order,
            seed: plan.schedule.seed,
            runs_per_bring_up: plan.schedule.runs_per_bring_up,
            bring_ups_per_level: plan.schedule.bring_ups_per_level,
        },
        started_at: jiff::Timestamp::now().to_string(),
        ocrig_version: env!("CARGO_PKG_VERSION").to_string(),
        guest_start: plan.guest_start.as_str().to_string(),
        margin: plan.margin,
        looks: plan.looks,
        headline_from: plan.headline_from(),
        host_speed: None,
        host_handover: None,
        noise_floor: None,
    }
}
