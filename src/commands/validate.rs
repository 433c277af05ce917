//! `ocrig validate FILE...`: every check that needs no guest. With `--json`, one array on stdout
//! with an object per file (see [`FileReport`]); the exit status is the same either way.

use std::path::PathBuf;

use crate::orchestrate::preflight::check_kernels;
use crate::scenario::fit::HostFacts;
use crate::scenario::overrides::Override;
use crate::scenario::validate::validate as check;
use crate::scenario::{ScenarioError, ScenarioErrors, load_with};

/// One file's outcome as `validate --json` prints it: `{"file", "ok": true, "plan", "warnings"}`
/// or `{"file", "ok": false, "errors": [...]}`.
#[derive(Debug, serde::Serialize)]
struct FileReport {
    file: String,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<PlanSummary>,
    /// Whether the scenario's `kvm` sizing block applies on this host: "applied" (under KVM),
    /// "ignored" (not under KVM); absent when the scenario has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    kvm_sizing: Option<&'static str>,
    /// What the text output says as `ocrig: warning:` on stderr.
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Vec<JsonError>>,
}

/// The runs this host would make, as the text line says them.
#[derive(Debug, serde::Serialize)]
struct PlanSummary {
    levels: usize,
    variants: usize,
    workloads: usize,
    runs: u64,
    boot_groups: usize,
    /// Fresh guest sets the boot groups are brought up as on one host with no failures: one
    /// a block (a level's `schedule.bring_ups_per_level`, or its blocks of
    /// `runs_per_bring_up`), each with its warm-ups among `runs`.
    bring_ups: u64,
    max_guests: u32,
}

/// A located error: `file:line:column: field `field`: message` as fields.
#[derive(Debug, serde::Serialize)]
struct JsonError {
    file: String,
    line: Option<usize>,
    column: Option<usize>,
    /// The field path (`workloads[0].args.threads`); null for a problem of the whole file.
    field: Option<String>,
    message: String,
}

impl From<&ScenarioError> for JsonError {
    fn from(e: &ScenarioError) -> Self {
        JsonError {
            file: e.file.display().to_string(),
            line: e.line,
            column: e.column,
            field: (!e.field.is_empty()).then(|| e.field.clone()),
            message: e.message.clone(),
        }
    }
}

pub fn validate(files: &[PathBuf], json: bool, sets: &[Override]) -> anyhow::Result<()> {
    let facts = HostFacts::read();
    let mut problems = Vec::new();
    let mut reports = Vec::new();
    for f in files {
        let mut warnings = Vec::new();
        let checked = load_with(f, sets)
            .map_err(|e| ScenarioErrors(vec![e]))
            .and_then(|l| check(&l, &facts).map(|_| l))
            .and_then(|l| {
                let ev = crate::scenario::validate::virt_evidence(&l, &crate::hostfs::LocalFs);
                let virt = crate::scenario::validate::check_virt(&l, &ev)?;
                for w in &virt.warnings {
                    match json {
                        true => warnings.push(w.to_string()),
                        false => eprintln!("ocrig: warning: {w}"),
                    }
                }
                Ok((l, virt.accel.accel == crate::host::Accel::Kvm))
            })
            .and_then(|(l, kvm)| check_kernels(&l).map(|_| (l, kvm)));
        match checked {
            Ok((l, kvm)) => {
                let plan =
                    crate::sweep::plan::Plan::build(&l.scenario.sized_for(kvm), &facts.allowed_cpus, 0)?;
                let summary = PlanSummary {
                    levels: plan.levels.len(),
                    variants: plan.variants.len(),
                    workloads: plan.workloads.len(),
                    runs: plan.total_runs(),
                    boot_groups: plan.boots.len(),
                    bring_ups: plan.bring_ups(),
                    max_guests: plan.boots.iter().map(|g| g.guests).max().unwrap_or(0),
                };
                // The runs as this host's accelerator would make them (a KVM block applies
                // under KVM only).
                let (sized, kvm_sizing) = match (l.scenario.has_kvm_sizing(), kvm) {
                    (false, _) => ("", None),
                    (true, true) => (" (sized for KVM)", Some("applied")),
                    (true, false) => (" (not under KVM: its KVM sizing ignored)", Some("ignored")),
                };
                if json {
                    reports.push(FileReport {
                        file: f.display().to_string(),
                        ok: true,
                        plan: Some(summary),
                        kvm_sizing,
                        warnings: Some(std::mem::take(&mut warnings)),
                        errors: None,
                    });
                } else {
                    println!(
                        "{}: ok{sized} — {} levels × {} variants × {} workloads, {} runs in {} boot group(s) on {} bring-up(s), up to {} guests",
                        f.display(),
                        summary.levels,
                        summary.variants,
                        summary.workloads,
                        summary.runs,
                        summary.boot_groups,
                        summary.bring_ups,
                        summary.max_guests
                    );
                }
            }
            Err(e) => {
                if json {
                    reports.push(FileReport {
                        file: f.display().to_string(),
                        ok: false,
                        plan: None,
                        kvm_sizing: None,
                        warnings: (!warnings.is_empty()).then(|| std::mem::take(&mut warnings)),
                        errors: Some(e.0.iter().map(JsonError::from).collect()),
                    });
                }
                problems.extend(e.0)
            }
        }
    }
    if json {
        crate::commands::out(&format!("{}\n", serde_json::to_string_pretty(&reports)?))?;
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ScenarioErrors(problems).into())
    }
}
