//! `ocrig run --resume DIR`: what an interrupted sweep already finished, what it ran on, and
//! whether what would run now is still exactly that sweep.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::BadInput;
use super::results_lock::ResultsLock;
use crate::journal::accounting::counted_runs;
use crate::journal::{
    BootInfo, ForAccounting, NotAJournal, ResumeNote, RunRecord, RunsOn, SweepHeader, read_lines,
};
use crate::scenario::overrides::Override;
use crate::scenario::{Loaded, ScenarioErrors, hex, load_with};
use crate::sweep::plan::Plan;

/// A resume's results directory, locked, read, and what differs so far.
pub(crate) struct Resuming {
    pub previous: Previous,
    /// Held until the process ends.
    pub lock: ResultsLock,
    /// Differences from the sweep as run, found so far (the scenario's; the environment's are
    /// added once preflight knows it).
    pub changes: Vec<String>,
}

impl Resuming {
    /// The results directory `--resume DIR` names, locked before its journal is read, so no
    /// second process redoes what this one finishes (or this one what another finished).
    pub fn open(dir: Option<&Path>, wait: bool) -> anyhow::Result<Option<Self>> {
        let Some(dir) = dir else {
            return Ok(None);
        };
        let lock = ResultsLock::take(dir, wait)?;
        Ok(Some(Self {
            previous: Previous::read(dir)?,
            lock,
            changes: Vec::new(),
        }))
    }
}

/// The scenario a run runs, loaded with its `--set` overrides: on a resume what the journal
/// hashed (`DIR/scenario.yaml`, the scenario as overridden when it ran), unless another file is
/// named or overrides are given (its difference then noted, to be accepted or refused).
pub(crate) fn scenario(
    resuming: Option<&mut Resuming>,
    given: Option<&PathBuf>,
    sets: &[Override],
) -> anyhow::Result<Loaded> {
    let load = |p: &Path| load_with(p, sets).map_err(|e| ScenarioErrors(vec![e]));
    Ok(match (resuming, given) {
        (Some(r), given) => {
            let loaded = load(given.unwrap_or(&r.previous.scenario_copy))?;
            if let Some(diff) = r.previous.scenario_change(&loaded) {
                r.changes.push(diff);
            }
            loaded
        }
        (None, Some(s)) => load(s)?,
        (None, None) => return Err(BadInput("name a scenario file (or --resume DIR)".into()).into()),
    })
}

/// True (having said so) when the resumed sweep has no run left to make: nothing is booted,
/// claimed or written. Judged on the plan of the CPUs the sweep ran on.
pub(crate) fn finished_already(
    p: &Previous,
    loaded: &crate::scenario::Loaded,
    seed: u64,
) -> anyhow::Result<bool> {
    let mut s = loaded
        .scenario
        .sized_for(p.runs_on.accel == crate::host::Accel::Kvm.as_str());
    if let Some(first) = s.host.hosts.first()
        && let Some(c) = first.cpus()
    {
        s.host.cpus = Some(c.clone());
    }
    let Ok(plan) = Plan::build(&s, &p.runs_on.host_cpus, seed) else {
        return Ok(false); // the full preflight says what is wrong
    };
    if crate::sweep::scheduler::work_left(&plan, p.records()) > 0 {
        return Ok(false);
    }
    let kept = counted_runs(p.records());
    crate::terminal::say(&format!(
        "ocrig: {}: the sweep is finished ({kept} runs with a valid result); nothing to do, nothing changed",
        p.dir.display()
    ));
    Ok(true)
}

pub(crate) fn say_kept(p: &Previous) {
    crate::terminal::say(&format!(
        "ocrig: resuming {}: {} finished runs kept",
        p.dir.display(),
        counted_runs(p.records())
    ));
}

/// The note a resume journals, once what it runs on (`now`) is compared with what the sweep
/// ran on: any difference is refused (bad input, nothing written) unless `accept`ed.
pub(crate) fn resume_note(
    resuming: Option<&mut Resuming>,
    now: RunsOn,
    accept: bool,
) -> anyhow::Result<Option<ResumeNote>> {
    let Some(r) = resuming else {
        return Ok(None);
    };
    let mut was = r.previous.runs_on.clone();
    // The scenario's difference is already told as a diff of its lines.
    if !r.changes.is_empty() {
        was.scenario_sha256 = now.scenario_sha256.clone();
    }
    r.changes.extend(differences(&was, &now));
    if !r.changes.is_empty() && !accept {
        return Err(BadInput(format!(
            "cannot resume {}: it would not continue the sweep it started; refusing to mix results. Differences:\n  {}\n\
             Resume as it ran (e.g. the same --backend and CPUs), or pass --accept-changed to continue anyway (the journal records what was accepted)",
            r.previous.dir.display(),
            r.changes.join("\n  ")
        ))
        .into());
    }
    if !r.changes.is_empty() {
        crate::terminal::say(&format!(
            "ocrig: --accept-changed: continuing although {}",
            r.changes.join("; ")
        ));
    }
    r.lock.say_holder()?;
    Ok(Some(ResumeNote {
        at: jiff::Timestamp::now().to_string(),
        ocrig_version: env!("CARGO_PKG_VERSION").to_string(),
        runs_on: now,
        accepted_changes: r.changes.clone(),
        overrides: Vec::new(),
    }))
}

pub struct Previous {
    pub dir: PathBuf,
    /// The scenario as run, kept in the results directory: what a resume runs.
    pub scenario_copy: PathBuf,
    /// What the sweep ran on: its header's, or what the latest resume accepted.
    pub runs_on: RunsOn,
    header: SweepHeader,
    /// Every record, as the scheduler keeps them ([`RunRecord::for_accounting`]): the journal
    /// is streamed, never held whole.
    records: Vec<RunRecord>,
}

impl Previous {
    /// Reads a results directory (its lock already held) and checks that its scenario copy is
    /// the one the journal hashed. A directory that is not a results directory is bad input.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let read = read_lines(
            dir,
            false,
            crate::journal::CHUNK,
            |_: &SweepHeader, _: &mut (), _, r: ForAccounting| r.0,
        )
        .map_err(|e| {
            if e.is::<NotAJournal>() {
                BadInput(format!("cannot resume: {e:#}")).into()
            } else {
                e.context(format!("cannot resume {}", dir.display()))
            }
        })?;
        let runs_on = read
            .resumes
            .last()
            .map(|n| n.runs_on.clone())
            .unwrap_or_else(|| read.header.runs_on.clone());
        let scenario_copy = dir.join("scenario.yaml");
        let as_run = std::fs::read(&scenario_copy).map_err(|e| {
            BadInput(format!(
                "cannot resume: {}: {e} (expected the scenario the sweep ran)",
                scenario_copy.display()
            ))
        })?;
        if hex(&Sha256::digest(&as_run)) != runs_on.scenario_sha256 {
            return Err(BadInput(format!(
                "cannot resume: {} is not the scenario the journal's sweep ran (its SHA-256 differs from the journal's); \
                 put the original back",
                scenario_copy.display()
            ))
            .into());
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            scenario_copy,
            runs_on,
            header: read.header,
            records: read.runs,
        })
    }

    /// Every record the interrupted sweep journaled, without what only a reader of the journal
    /// needs ([`RunRecord::for_accounting`]); the scheduler settles them (what counts, which
    /// attempt comes next) by the same rule as the reports.
    pub fn records(&self) -> &[RunRecord] {
        &self.records
    }

    /// The shuffle seed the sweep started with, if it shuffled.
    pub fn seed(&self) -> Option<u64> {
        self.header.schedule.seed
    }

    /// How the scenario a resume would run (another file, or the copy with `--set` overrides)
    /// differs from the copy, if it does.
    pub fn scenario_change(&self, now: &Loaded) -> Option<String> {
        let as_run = std::fs::read_to_string(&self.scenario_copy).unwrap_or_default();
        let what = match now.sets.is_empty() {
            true => now.path.display().to_string(),
            false => format!(
                "{} with {}",
                now.path.display(),
                now.sets
                    .iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        };
        (now.text != as_run).then(|| {
            format!(
                "scenario: {what} differs from the one the sweep ran ({}):\n{}",
                self.scenario_copy.display(),
                indent(&line_diff(&as_run, &now.text))
            )
        })
    }
}

/// Every difference between what a sweep ran on (`was`) and what it would run on now, one
/// line each.
pub fn differences(was: &RunsOn, now: &RunsOn) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name}: {a} (as run) → {b} (now)"));
        }
    };
    field(
        "scenario_sha256",
        was.scenario_sha256.clone(),
        now.scenario_sha256.clone(),
    );
    field("backend", was.backend.clone(), now.backend.clone());
    field("accel", was.accel.clone(), now.accel.clone());
    field(
        "host_cpus",
        format!("{:?}", was.host_cpus),
        format!("{:?}", now.host_cpus),
    );
    field("guests per level", guests(&was.boots), guests(&now.boots));
    field(
        "kernels",
        format!("{:?}", was.kernels),
        format!("{:?}", now.kernels),
    );
    let payload = |r: &RunsOn| r.payload_sha256.clone().unwrap_or_else(|| "none".into());
    field("payload_sha256", payload(was), payload(now));
    field("images", format!("{:?}", was.images), format!("{:?}", now.images));
    field("hosts", format!("{:?}", was.hosts), format!("{:?}", now.hosts));
    if let (Some(was), Some(now)) = (&was.host, &now.host) {
        out.extend(was.differences(now));
    }
    out
}

fn guests(boots: &[BootInfo]) -> String {
    boots
        .iter()
        .map(|b| format!("{}x {}: {}", b.level, b.variants.join("+"), b.guests))
        .collect::<Vec<_>>()
        .join(", ")
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lines only in `a` (prefixed -) and only in `b` (+), at most 20 of each.
fn line_diff(a: &str, b: &str) -> String {
    let a_lines: Vec<&str> = a.lines().collect();
    let b_lines: Vec<&str> = b.lines().collect();
    let mut out: Vec<String> = Vec::new();
    out.extend(
        a_lines
            .iter()
            .filter(|l| !b_lines.contains(l))
            .take(20)
            .map(|l| format!("- {l}")),
    );
    out.extend(
        b_lines
            .iter()
            .filter(|l| !a_lines.contains(l))
            .take(20)
            .map(|l| format!("+ {l}")),
    );
    if out.is_empty() {
        out.push("  (same lines in another order or with other whitespace)".into());
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A results directory as `ocrig run --set runs=2 --set host.cpus=1` leaves it: the
    /// scenario as overridden, hashed in the header beside the flags.
    fn results_dir_run_with_overrides() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.yaml");
        std::fs::write(
            &file,
            "name: t\nlevels: [1.0]\nworkloads:\n  - {command: lock, metric: ops_per_sec}\n",
        )
        .unwrap();
        let sets: Vec<Override> = ["runs=2", "host.cpus=1"]
            .iter()
            .map(|a| crate::scenario::overrides::parse(a).unwrap())
            .collect();
        let loaded = load_with(&file, &sets).unwrap();
        let results = dir.path().join("r");
        std::fs::create_dir(&results).unwrap();
        std::fs::write(results.join("scenario.yaml"), &loaded.text).unwrap();
        let mut head = crate::testing::header();
        head.runs_on.scenario_sha256 = loaded.sha256.clone();
        head.overrides = vec!["runs=2".into(), "host.cpus=1".into()];
        let mut w = crate::journal::JournalWriter::open(&results).unwrap();
        w.append(&crate::journal::Entry::Sweep(Box::new(head))).unwrap();
        (dir, loaded.text)
    }

    #[test]
    fn a_resume_runs_the_scenario_as_overridden_and_notes_new_overrides_as_a_change() {
        let (dir, as_run) = results_dir_run_with_overrides();
        let results = dir.path().join("r");
        let journal = crate::journal::Journal::read(&results).unwrap();
        assert_eq!(journal.header.overrides, ["runs=2", "host.cpus=1"]);
        let mut r = Resuming::open(Some(&results), false).unwrap();
        let loaded = scenario(r.as_mut(), None, &[]).unwrap();
        assert_eq!(loaded.text, as_run);
        assert_eq!(loaded.scenario.runs, crate::scenario::RunCount::Fixed(2));
        assert_eq!(loaded.scenario.host.cpus, Some(crate::scenario::CpuSet::Count(1)));
        assert!(r.as_ref().unwrap().changes.is_empty());
        // The file named again with the same flags is the same scenario.
        let sets: Vec<Override> = ["runs=2", "host.cpus=1"]
            .iter()
            .map(|a| crate::scenario::overrides::parse(a).unwrap())
            .collect();
        let file = dir.path().join("s.yaml");
        drop(r);
        let mut r = Resuming::open(Some(&results), false).unwrap();
        let again = scenario(r.as_mut(), Some(&file), &sets).unwrap();
        assert_eq!(again.text, as_run);
        assert!(r.as_ref().unwrap().changes.is_empty());
        // Another override on a resume changes what would run: a change to accept or refuse.
        let more = [crate::scenario::overrides::parse("runs=5").unwrap()];
        let changed = scenario(r.as_mut(), None, &more).unwrap();
        assert_eq!(changed.scenario.runs, crate::scenario::RunCount::Fixed(5));
        let changes = &r.as_ref().unwrap().changes;
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].contains("with --set runs=5") && changes[0].contains("+ runs: 5"),
            "{changes:?}"
        );
    }

    #[test]
    fn diff_names_changed_lines() {
        let d = line_diff("name: a\nruns: 2\n", "name: a\nruns: 3\n");
        assert_eq!(d, "- runs: 2\n+ runs: 3");
    }

    #[test]
    fn differences_name_each_changed_field_and_skip_a_host_of_several() {
        let was = RunsOn {
            scenario_sha256: "aa".into(),
            backend: "host".into(),
            accel: "tcg".into(),
            host_cpus: vec![0, 1],
            ..Default::default()
        };
        let mut now = was.clone();
        assert!(differences(&was, &now).is_empty());
        now.backend = "qemu".into();
        now.host_cpus = vec![0];
        now.payload_sha256 = Some("bb".into());
        assert_eq!(
            differences(&was, &now),
            [
                "backend: host (as run) → qemu (now)",
                "host_cpus: [0, 1] (as run) → [0] (now)",
                "payload_sha256: none (as run) → bb (now)"
            ]
        );
        // A host whose microcode or KVM parameters changed is another host for the figures;
        // a sweep over several hosts records none and compares none.
        let host = |microcode: &str| crate::journal::host::HostRecord {
            microcode: Some(microcode.into()),
            kvm_params: [("kvm.halt_poll_ns".to_string(), "200000".to_string())].into(),
            ..Default::default()
        };
        let was = RunsOn {
            host: Some(host("0x1")),
            ..Default::default()
        };
        let now = RunsOn {
            host: Some(host("0x2")),
            ..Default::default()
        };
        assert_eq!(differences(&was, &now), ["host microcode: 0x1 → 0x2"]);
        assert!(differences(&RunsOn::default(), &now).is_empty());
    }
}
