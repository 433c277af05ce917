//! Validation without booting: every problem in a scenario, each located in its file.

use std::collections::BTreeSet;

use crate::scenario::locate::Seg;
use crate::scenario::{
    BackendKind, KernelRef, Loaded, MIN_SLICE_MS, Scenario, ScenarioError, ScenarioErrors, Variant, Workload,
    expand,
};

mod trace;
mod virt;

pub use trace::*;
pub use virt::*;

use crate::scenario::fit::*;

fn key(k: &str) -> Seg {
    Seg::Key(k.into())
}

/// Longest boot, deploy and telemetry timeouts accepted, seconds (an hour).
pub const MAX_STEP_TIMEOUT_S: u64 = 3600;

/// Longest run timeout accepted, seconds (a day).
pub const MAX_RUN_TIMEOUT_S: u64 = 86_400;

/// Most retries of a failed run accepted.
pub const MAX_RETRIES: u32 = 10;

/// Names that become directory names (the scenario's, each variant's): letters, digits,
/// `-`, `_`, `.`, not starting with `.` (so never `.`, `..` or hidden).
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

const NAME_RULE: &str =
    "must be non-empty letters, digits, '-', '_' or '.', not starting with '.' (it names a directory)";

/// Checks everything that can be checked without booting. All problems are returned together.
pub fn validate(l: &Loaded, host: &HostFacts) -> Result<(), ScenarioErrors> {
    let mut errs: Vec<ScenarioError> = Vec::new();
    let mut err = |path: &[Seg], msg: String| errs.push(l.error_at(path, msg));
    let s = &l.scenario;
    check_shape(s, &mut err);
    check_runs_and_timeouts(l, &mut err);
    let (cpus, on) = check_host(s, host, &mut err);
    check_levels_fit(s, host, &cpus, &on, &mut err);
    check_variants(s, &mut err);
    check_kernel_builds(l, &mut err);
    check_workload_kernel_options(l, &mut err);
    check_workloads(s, &mut err);
    // Report each distinct problem once (a bad workload argument repeats across variants).
    let mut seen = BTreeSet::new();
    errs.retain(|e| seen.insert(e.to_string()));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ScenarioErrors(errs))
    }
}

/// The sweep's name, the guest's size, and the bounds a user sets as shares and fractions.
fn check_shape(s: &Scenario, err: &mut impl FnMut(&[Seg], String)) {
    if !is_safe_name(&s.name) {
        err(&[key("name")], format!("'{}' {NAME_RULE}", s.name));
    }
    check_guest_files(&s.guest.files, err);
    check_package_names(&s.guest.packages, err);
    if s.host.backend == BackendKind::Host && !s.guest.packages.is_empty() {
        err(
            &[key("guest"), key("packages")],
            "the host backend boots no guest to put packages in (its workloads run with this host's own)"
                .into(),
        );
    }
    if s.guest.vcpus == 0 {
        err(&[key("guest"), key("vcpus")], "must be at least 1".into());
    }
    if s.guest.memory_mib < 64 {
        err(
            &[key("guest"), key("memory_mib")],
            format!("{} MiB is too small (at least 64)", s.guest.memory_mib),
        );
    }
    if let Some(m) = s.host.max_other_load
        && !(m > 0.0 && m <= 1.0)
    {
        err(
            &[key("host"), key("max_other_load")],
            format!(
                "{m} is not a share in (0, 1]: the other load on the sweep's CPUs above which a run is disturbed, e.g. 0.05"
            ),
        );
    }
    if s.timeouts.disturbed_wait_s > MAX_STEP_TIMEOUT_S {
        err(
            &[key("timeouts"), key("disturbed_wait_s")],
            format!(
                "{} s is more than the {MAX_STEP_TIMEOUT_S} s this wait may be",
                s.timeouts.disturbed_wait_s
            ),
        );
    }
    if let Some(m) = s.margin
        && !(m > 0.0 && m < 1.0)
    {
        err(
            &[key("margin")],
            format!("{m} is not a fraction in (0, 1): the equivalence margin, e.g. 0.05 for ±5 %"),
        );
    }
}

/// Run counts (their bring-ups), timeouts and retries.
fn check_runs_and_timeouts(l: &Loaded, err: &mut impl FnMut(&[Seg], String)) {
    let s = &l.scenario;
    let n_variants = expand::variants(s).len();
    check_runs(&s.runs, "runs", n_variants, err);
    if let Some(r) = &s.kvm_runs {
        check_runs(r, "kvm_runs", n_variants, err);
    }
    let t = &s.timeouts;
    for (name, v, most) in [
        ("boot_s", Some(t.boot_s), MAX_STEP_TIMEOUT_S),
        ("deploy_s", Some(t.deploy_s), MAX_STEP_TIMEOUT_S),
        ("collect_s", Some(t.collect_s), MAX_STEP_TIMEOUT_S),
        ("run_s", t.run_s, MAX_RUN_TIMEOUT_S),
    ] {
        match v {
            Some(0) => err(
                &[key("timeouts"), key(name)],
                "must be at least 1 second (0 would fail or never time out)".into(),
            ),
            Some(v) if v > most => err(
                &[key("timeouts"), key(name)],
                format!("{v} s is more than the {most} s this timeout may be"),
            ),
            _ => {}
        }
    }
    for (name, retries) in [
        ("retries", t.retries),
        ("self_check_retries", t.self_check_retries),
        ("disturbed_retries", t.disturbed_retries),
    ] {
        if retries > MAX_RETRIES {
            err(
                &[key("timeouts"), key(name)],
                format!("{retries} is more than the {MAX_RETRIES} retries a run may get"),
            );
        }
    }
    if s.schedule.runs_per_bring_up == 0 {
        err(
            &[key("schedule"), key("runs_per_bring_up")],
            "must be at least 1 (the measured runs a variant with guests of its own makes on one bring-up)"
                .into(),
        );
    } else {
        for (field, runs) in [("runs", Some(s.runs)), ("kvm_runs", s.kvm_runs)] {
            if let Some((path, msg)) = runs.and_then(|r| too_few_bring_ups(l, field, r)) {
                err(&path, msg);
            }
        }
    }
    check_bring_ups_per_level(s, err);
}

/// `schedule.bring_ups_per_level`, where given: at least 1; more than 1 only where guests are
/// brought up; and, at levels of one boot group (where it applies), at most the runs always
/// made, so every bring-up makes one of them at least.
fn check_bring_ups_per_level(s: &Scenario, err: &mut impl FnMut(&[Seg], String)) {
    let Some(given) = s.schedule.bring_ups_per_level else {
        return;
    };
    let at = [key("schedule"), key("bring_ups_per_level")];
    if given == 0 {
        err(
            &at,
            "must be at least 1 (the bring-ups each level's shared guests make its rounds on; 1: one bring-up \
             a level, and retention is then within one boot a level)"
                .into(),
        );
        return;
    }
    if given > 1 && s.host.backend == BackendKind::Host {
        err(
            &at,
            format!(
                "{given} bring-ups a level, but the host backend brings up no guests (its runs are the host's own \
                 threads): leave it out or give 1"
            ),
        );
        return;
    }
    if !expand::one_boot_group_per_level(s) {
        return; // such levels are blocked by schedule.runs_per_bring_up
    }
    for (field, runs) in [("runs", Some(s.runs)), ("kvm_runs", s.kvm_runs)] {
        let Some(runs) = runs else { continue };
        let (min, max, _) = runs.bounds();
        let always = match runs {
            crate::scenario::RunCount::Fixed(_) => field.to_string(),
            crate::scenario::RunCount::Dynamic(_) => format!("{field}.min"),
        };
        if min > 0 && given > min {
            err(
                &at,
                format!(
                    "{given} bring-ups a level for the {min} round(s) a level always makes ({always}: {min}{}): each \
                     bring-up makes one round at least; lower bring_ups_per_level to at most {min} or raise {always}",
                    if max > min {
                        ", the rounds past it run on the last bring-up"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
}

/// The host's CPUs (given, or counted in the topology's order), its libvirt URI and the hosts
/// of a sweep over several. Returns the CPUs the levels are sized on (all allowed ones where
/// the given set is wrong, so the levels are still checked) and, for a remote host, the words
/// that name it.
fn check_host(s: &Scenario, host: &HostFacts, err: &mut impl FnMut(&[Seg], String)) -> (Vec<usize>, String) {
    let on = host
        .remote
        .as_ref()
        .map_or(String::new(), |h| format!(" on remote host {h}"));
    // A listed CPU that is offline is said to be, rather than "not available to this process".
    let offline: Vec<usize> = match (&s.host.cpus, &host.online_cpus) {
        (Some(crate::scenario::CpuSet::List(list)), Some(online)) => {
            list.iter().copied().filter(|c| !online.contains(c)).collect()
        }
        _ => Vec::new(),
    };
    let cpus = if !offline.is_empty() {
        let online = host.online_cpus.as_deref().unwrap_or_default();
        err(
            &[key("host"), key("cpus")],
            format!(
                "CPU(s) {offline:?} are offline{on} (online: {})",
                crate::topology::cpu_words(online)
            ),
        );
        host.allowed_cpus.clone()
    } else {
        match host_cpus(&s.host.cpus, &host.allowed_cpus).map_err(|m| format!("{m}{on}")) {
            Ok(c) => c,
            Err(m) => {
                err(&[key("host"), key("cpus")], m);
                host.allowed_cpus.clone()
            }
        }
    };
    if s.host.backend == BackendKind::Libvirt && s.host.libvirt_uri.trim().is_empty() {
        err(
            &[key("host"), key("libvirt_uri")],
            "must not be empty with backend: libvirt".into(),
        );
    } else if s.host.backend == BackendKind::Libvirt
        && let Err(m) = crate::backend::remote::parse(s.host.libvirt_uri.trim())
    {
        err(&[key("host"), key("libvirt_uri")], m);
    }

    for (i, h) in s.host.hosts.iter().enumerate() {
        let at = [key("host"), key("hosts"), Seg::Index(i)];
        if s.host.backend != BackendKind::Libvirt {
            err(&at, "hosts need backend: libvirt".into());
        } else if let Err(m) = crate::backend::remote::parse(h.uri()) {
            err(&at, m);
        }
    }
    if s.host.hosts.len() > 1 && s.guest.scratch_disk_mib > 0 {
        err(
            &[key("guest"), key("scratch_disk_mib")],
            "scratch disks are not supported with several hosts yet".into(),
        );
    }

    (cpus, on)
}

/// Every level's guest count on `cpus`, and whether the largest fits the host.
fn check_levels_fit(
    s: &Scenario,
    host: &HostFacts,
    cpus: &[usize],
    on: &str,
    err: &mut impl FnMut(&[Seg], String),
) {
    if s.levels.is_empty() {
        err(&[key("levels")], "name at least one overcommit level".into());
    }
    let mut max_guests = 0u32;
    let mut max_level = 0.0;
    for (i, &level) in s.levels.iter().enumerate() {
        if s.guest.vcpus == 0 {
            break;
        }
        if s.host.backend == BackendKind::Host {
            if !(level.is_finite() && level > 0.0) {
                err(
                    &[key("levels"), Seg::Index(i)],
                    format!("level {level} must be a positive number"),
                );
            }
            continue;
        }
        match guests_at(level, cpus.len(), s.guest.vcpus) {
            Ok(g) if g > max_guests => (max_guests, max_level) = (g, level),
            Ok(_) => {}
            Err(m) => err(&[key("levels"), Seg::Index(i)], m),
        }
    }
    if s.host.backend != BackendKind::Host && max_guests > 0 {
        let (mem_available_mib, mem_where) = host.memory_for(cpus);
        let fit = FitHost {
            cpus: cpus.len(),
            mem_available_mib,
            mem_where,
            fds: fd_limits(),
            ephemeral_ports: ephemeral_ports(),
        };
        for (field, m) in fit_problems(max_level, s.guest.vcpus, s.guest.memory_mib, &fit) {
            err(&[key("guest"), key(field)], format!("{m}{on}"));
        }
    }
}

/// The variants: names, one baseline, their own kernel files, profiles and trace events; and
/// the guest's kernel file.
fn check_variants(s: &Scenario, err: &mut impl FnMut(&[Seg], String)) {
    let mut names = BTreeSet::new();
    let marked = s.variants.iter().filter(|v| v.baseline).count();
    if marked > 1 {
        err(
            &[key("variants")],
            format!("{marked} variants are marked baseline; mark one"),
        );
    }
    for (i, v) in s.variants.iter().enumerate() {
        if !is_safe_name(&v.name) {
            err(
                &[key("variants"), Seg::Index(i), key("name")],
                format!("'{}' {NAME_RULE}", v.name),
            );
        } else if !names.insert(v.name.clone()) {
            err(
                &[key("variants"), Seg::Index(i), key("name")],
                format!("'{}' is used twice", v.name),
            );
        }
        if let Some(KernelRef::File(f)) = &v.kernel {
            check_kernel_file(err, &[key("variants"), Seg::Index(i), key("kernel")], f);
        }
        if let Some(p) = v.profile
            && let Err(msg) = check_profile_rate(p.rate_hz)
        {
            err(
                &[key("variants"), Seg::Index(i), key("profile"), key("rate_hz")],
                msg,
            );
        }
        for (at, msg) in trace_event_problems(&v.trace_events) {
            err(
                &[
                    key("variants"),
                    Seg::Index(i),
                    key("trace_events"),
                    Seg::Index(at),
                ],
                msg,
            );
        }
    }
    if let KernelRef::File(f) = &s.guest.kernel {
        check_kernel_file(err, &[key("guest"), key("kernel")], f);
    }
}

/// The workloads: each names a metric it reports, and its arguments as the payload parses
/// them (under KVM too, where `kvm_args` change them).
fn check_workloads(s: &Scenario, err: &mut impl FnMut(&[Seg], String)) {
    if s.workloads.is_empty() {
        err(&[key("workloads")], "name at least one workload".into());
    }
    for (i, w) in s.workloads.iter().enumerate() {
        let at = [key("workloads"), Seg::Index(i), key("metric")];
        if w.metric.trim().is_empty() {
            err(&at, "must name the metric to report".into());
        } else if let Some(spec) = ocrig_payload::catalog::workload(&w.command)
            && !spec.may_report(&w.metric)
        {
            err(
                &at,
                format!(
                    "workload {} never reports '{}' (it reports: {}; see `ocrig-payload list --json`)",
                    w.command,
                    w.metric,
                    spec.metric_names().join(", ")
                ),
            );
        }
        check_exec_metrics(i, w, err);
        if let Some(ms) = w.slice_ms.filter(|&ms| ms > 0) {
            let at = [key("workloads"), Seg::Index(i), key("slice_ms")];
            if ocrig_payload::slices::duration_flag(&w.command).is_none() {
                err(
                    &at,
                    format!(
                        "workload {} runs a fixed amount of work, not for a time: it cannot be sliced \
                         (set `slice_ms: 0` or leave it out)",
                        w.command
                    ),
                );
            } else if ms < MIN_SLICE_MS {
                err(
                    &at,
                    format!(
                        "{ms} ms is shorter than a slice can measure: each slice sets up and tears down its own \
                         run (and its self-checks need their samples); at least {MIN_SLICE_MS} ms, or 0 for whole runs"
                    ),
                );
            }
        }
    }
    check_workload_args(s, None, err);
    if s.workloads.iter().any(|w| !w.kvm_args.is_empty()) {
        // As the sweep runs them under KVM: each problem of a key `kvm_args` gave is located
        // there.
        check_workload_args(&s.sized_for(true), Some(s), err);
    }
}

/// An `exec` workload's `metrics:` (each by one rule, named once, its rule as the payload
/// parses it), its headline among them and its direction theirs; `metrics:` on another workload
/// is refused (a built-in workload reports what the catalogue says).
fn check_exec_metrics(i: usize, w: &Workload, err: &mut impl FnMut(&[Seg], String)) {
    let at = |tail: &[Seg]| [&[key("workloads"), Seg::Index(i)], tail].concat();
    if w.command != EXEC {
        if !w.metrics.is_empty() {
            err(
                &at(&[key("metrics")]),
                format!(
                    "only an `exec` workload reads its metrics from its output; {} reports its own (`ocrig workloads {}`)",
                    w.command, w.command
                ),
            );
        }
        return;
    }
    if w.args.contains_key("metric") {
        err(
            &at(&[key("args"), key("metric")]),
            "an exec workload's metrics are its `metrics:` list (name, rule, better), not an argument".into(),
        );
    }
    if w.metrics.is_empty() {
        err(
            &at(&[key("metrics")]),
            "an exec workload names the metrics it reads from its command's output, e.g. \
             `metrics: [{name: time_s, wall: true, better: lower}]`"
                .into(),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (k, m) in w.metrics.iter().enumerate() {
        let here = at(&[key("metrics"), Seg::Index(k)]);
        if !seen.insert(m.name.as_str()) {
            err(
                &[here.as_slice(), &[key("name")]].concat(),
                format!("metric '{}' is named twice", m.name),
            );
        }
        match m.rule() {
            Err(why) => err(&here, format!("metric '{}': {why}", m.name)),
            Ok(rule) => {
                if let Err(why) = ocrig_payload::workloads::exec::parse_metric(&rule) {
                    let field = match (&m.regex, &m.json) {
                        (Some(_), _) => "regex",
                        (_, Some(_)) => "json",
                        _ => "name",
                    };
                    err(&[here.as_slice(), &[key(field)]].concat(), why);
                }
            }
        }
    }
    match w.metrics.iter().find(|m| m.name == w.metric) {
        None => err(
            &at(&[key("metric")]),
            format!(
                "'{}' is not one of this workload's metrics ({})",
                w.metric,
                w.metrics
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(m) => {
            if let Some(b) = w.better.filter(|b| *b != m.better) {
                let word = |b: crate::vocabulary::Better| format!("{b:?}").to_lowercase();
                err(
                    &at(&[key("better")]),
                    format!(
                        "says {} is better, but its metric '{}' says {}: leave one out",
                        word(b),
                        m.name,
                        word(m.better)
                    ),
                );
            }
        }
    }
}

/// `guest.files`: each a file this machine has, going to a plain absolute guest path (no
/// quoting: the upload's shell takes it as is) that nothing else takes.
/// Debian's rule for a package name (policy 5.6.1): lower-case letters, digits and `+-.`,
/// at least two, starting with a letter or digit. Whether apt has it is asked at preflight.
fn check_package_names(names: &[String], err: &mut impl FnMut(&[Seg], String)) {
    let mut seen = BTreeSet::new();
    for (i, n) in names.iter().enumerate() {
        let at = [key("guest"), key("packages"), Seg::Index(i)];
        let valid = n.len() >= 2
            && n.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        if !valid {
            err(
                &at,
                format!("'{n}' is not a Debian package name (lower-case letters, digits and `+-.`)"),
            );
        } else if !seen.insert(n.as_str()) {
            err(&at, format!("{n} is listed twice"));
        }
    }
}

fn check_guest_files(files: &[crate::scenario::GuestFile], err: &mut impl FnMut(&[Seg], String)) {
    let mut seen = BTreeSet::new();
    for (i, f) in files.iter().enumerate() {
        let at = |field: &'static str| [key("guest"), key("files"), Seg::Index(i), key(field)];
        match std::fs::metadata(&f.from) {
            Err(e) => err(&at("from"), format!("{}: {e}", f.from.display())),
            Ok(m) if !m.is_file() => err(&at("from"), format!("{} is not a file", f.from.display())),
            Ok(_) => {}
        }
        let plain = f.to.len() > 1
            && f.to.starts_with('/')
            && !f.to.ends_with('/')
            && !f.to.split('/').any(|p| p == "..")
            && f.to
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
        if !plain {
            err(
                &at("to"),
                format!(
                    "'{}' is not a plain absolute path (letters, digits and `/._-`, no `..`)",
                    f.to
                ),
            );
        } else if f.to == crate::payload_bin::GUEST_PATH {
            err(&at("to"), format!("{} is where ocrig puts its payload", f.to));
        } else if !seen.insert(f.to.as_str()) {
            err(&at("to"), format!("{} is the destination of two files", f.to));
        }
    }
}

/// The payload subcommand that runs any command line.
const EXEC: &str = "exec";

/// Each workload's payload arguments under every variant, as the payload itself parses them,
/// and against the run deadline. `kvm_from`: `s` is that scenario sized for KVM, and a problem
/// with a key its `kvm_args` gave is located there.
fn check_workload_args(s: &Scenario, kvm_from: Option<&Scenario>, err: &mut impl FnMut(&[Seg], String)) {
    let t = &s.timeouts;
    let variants = expand::variants(s);
    let mut ids = BTreeSet::new();
    for w in expand::workloads(s) {
        if !ids.insert(w.id.clone()) {
            err(
                &[key("workloads"), Seg::Index(w.source), key("name")],
                format!(
                    "workload id '{}' appears twice; give the workloads distinct names",
                    w.id
                ),
            );
        }
        for (vi, v) in variants.iter().enumerate() {
            // The probe options (trace_events, profile) are checked, and located, on their own.
            let unprobed = Variant {
                trace_events: Vec::new(),
                kernel_counts: false,
                profile: None,
                ..v.clone()
            };
            let argv = expand::payload_argv(&w, &unprobed);
            if let Err(e) = ocrig_payload::cli::validate(&argv) {
                let (mut path, msg) =
                    payload_error_location(&e, w.source, &argv, vi, s.variants.is_empty(), &v.args);
                if let Some(given) = kvm_from {
                    in_kvm_args(&mut path, &given.workloads[w.source].kvm_args);
                }
                err(&path, msg);
                continue;
            }
            if let (Some(limit), Some(own)) = (t.run_s, expand::workload_seconds(&argv))
                && (limit as f64) <= own
            {
                err(
                    &[key("timeouts"), key("run_s")],
                    format!(
                        "{limit} s is not longer than workload {}'s own duration of {own} s \
                     (`{}`): every run would time out",
                        w.id,
                        argv.join(" ")
                    ),
                );
            }
        }
    }
}

/// `path` (`workloads[i].args.<key>`) moved to `workloads[i].kvm_args.<key as written>` when
/// `kvm_args` gave that key.
fn in_kvm_args(
    path: &mut [Seg],
    kvm_args: &std::collections::BTreeMap<String, crate::scenario::model::ArgValue>,
) {
    let [Seg::Key(w), Seg::Index(_), Seg::Key(a), Seg::Key(name)] = &path[..] else {
        return;
    };
    if w != "workloads" || a != "args" {
        return;
    }
    if let Some(k) = kvm_args
        .keys()
        .find(|k| k.replace('_', "-") == name.replace('_', "-"))
    {
        let k = k.clone();
        path[2] = key("kvm_args");
        path[3] = Seg::Key(k);
    }
}

/// `runs` (or `kvm_runs`, named by `field`): at least one run, and a stopping rule that can
/// stop; `variants` is the scenario's variant count.
fn check_runs(
    runs: &crate::scenario::RunCount,
    field: &str,
    variants: usize,
    err: &mut impl FnMut(&[Seg], String),
) {
    match *runs {
        crate::scenario::RunCount::Fixed(0) => err(&[key(field)], "must be at least 1".into()),
        crate::scenario::RunCount::Dynamic(d) => {
            if d.min < 2 {
                err(
                    &[key(field), key("min")],
                    "must be at least 2: one run has no spread to judge a stopping rule by".into(),
                );
            }
            if d.max < d.min {
                err(
                    &[key(field), key("max")],
                    format!("{} is below min {}", d.max, d.min),
                );
            }
            for (name, target) in [("target_cv", d.target_cv), ("target_mde", d.target_mde)] {
                if let Some(t) = target
                    && !(t > 0.0 && t < 1.0)
                {
                    err(
                        &[key(field), key(name)],
                        format!("{t} must be a fraction in (0, 1)"),
                    );
                }
            }
            match d.until {
            Some(crate::scenario::Until::Concluded) => {
                if d.target_cv.is_some() || d.target_mde.is_some() {
                    err(
                        &[key(field), key("until")],
                        "`until: concluded` stops each comparison on its conclusion; target_cv and target_mde are other stopping rules: give one".into(),
                    );
                }
                if variants < 2 {
                    err(
                        &[key(field), key("until")],
                        "`until: concluded` runs each comparison with the baseline until it is concluded, and this scenario has one variant: nothing to compare".into(),
                    );
                }
            }
            None if d.target_cv.is_none() && d.target_mde.is_none() => err(
                &[key(field)],
                "give target_cv (a CV to reach), target_mde (an effect to make detectable) or `until: concluded`, or a run count".into(),
            ),
            None => {}
        }
        }
        _ => {}
    }
}

/// A variant with guests of its own (another kernel, command line or CPU model than the
/// baseline's, or `schedule.guests: per-variant`) is compared with the baseline bring-up by
/// bring-up (block k with block k, see `sweep::plan`): with fewer than 2 whole bring-ups per
/// side the comparison has one replicate of what differs between boots, and no estimate of
/// it. Where and why, located at the field to change: `schedule.runs_per_bring_up` when it is
/// above 1, else `runs` (`runs.min`), else (no `runs` written: 1 by default) the variant.
fn too_few_bring_ups(l: &Loaded, field: &str, runs: crate::scenario::RunCount) -> Option<(Vec<Seg>, String)> {
    let s = &l.scenario;
    if s.host.backend == BackendKind::Host {
        return None; // no guests: every variant shares the level's one "boot"
    }
    let variants = expand::variants(s);
    let baseline = expand::baseline(s);
    let base_guest = expand::guest_for(s, variants.iter().find(|v| v.name == baseline)?);
    let per_variant = s.schedule.guests == crate::vocabulary::GuestSharing::PerVariant;
    let (i, own) = variants
        .iter()
        .enumerate()
        .find(|(_, v)| v.name != baseline && (per_variant || expand::guest_for(s, v) != base_guest))?;
    let per = s.schedule.runs_per_bring_up;
    let min = runs.bounds().0;
    if min == 0 || u64::from(min) >= 2 * u64::from(per) {
        return None; // (runs: 0 is refused on its own)
    }
    let why = if expand::guest_for(s, own) != base_guest {
        "its kernel, cmdline or cpu differs from the baseline's"
    } else {
        "schedule.guests is per-variant"
    };
    let runs_field = match runs {
        crate::scenario::RunCount::Fixed(_) => vec![key(field)],
        crate::scenario::RunCount::Dynamic(_) => vec![key(field), key("min")],
    };
    let runs_written = crate::scenario::locate::locate(&l.text, &[key(field)]).is_some();
    let (path, fix) = if per > 1 {
        (
            vec![key("schedule"), key("runs_per_bring_up")],
            match min / 2 {
                0 => format!("raise runs to at least {}", 2 * u64::from(per)),
                most => format!(
                    "lower runs_per_bring_up to at most {most} or raise runs to at least {}",
                    2 * u64::from(per)
                ),
            },
        )
    } else if runs_written {
        (runs_field, format!("raise it to at least {}", 2 * per))
    } else {
        (
            vec![key("variants"), Seg::Index(i)],
            format!("give `runs: {}` or more (the default is 1)", 2 * per),
        )
    };
    Some((
        path,
        format!(
            "variant {} boots guests of its own ({why}), so it is compared with baseline {baseline}              bring-up by bring-up: {min} run(s) / schedule.runs_per_bring_up {per} = {} whole bring-up(s) per side,              and the comparison needs at least 2 bring-ups per side (between boots is where such variants differ); {fix}",
            own.name,
            min / per,
        ),
    ))
}

fn check_kernel_file(err: &mut impl FnMut(&[Seg], String), path: &[Seg], f: &crate::scenario::KernelFile) {
    if !f.path.is_file() {
        err(path, format!("kernel {} does not exist", f.path.display()));
    }
    if let Some(i) = &f.initrd
        && !i.is_file()
    {
        err(path, format!("initrd {} does not exist", i.display()));
    }
}

/// Every kernel file or build tree the scenario names must be a built kernel whose config can
/// serve as a guest (see `image::guest_config`); notes (no PVH, no config to check) are
/// printed with their location.
fn check_kernel_builds(l: &Loaded, err: &mut impl FnMut(&[Seg], String)) {
    use crate::image::guest_config::{Given, check};
    let s = &l.scenario;
    let scratch = s.guest.scratch_disk_mib > 0;
    let mut refs = vec![(vec![key("guest"), key("kernel")], &s.guest.kernel)];
    for (i, v) in s.variants.iter().enumerate() {
        if let Some(k) = &v.kernel {
            refs.push((vec![key("variants"), Seg::Index(i), key("kernel")], k));
        }
    }
    for (mut path, k) in refs {
        let given = match k {
            KernelRef::Debian(_) => continue,
            // A missing file is reported by check_kernel_file.
            KernelRef::File(f) if !f.path.is_file() => continue,
            KernelRef::File(f) => {
                path.push(key("path"));
                Given::File {
                    path: &f.path,
                    own_initrd: f.initrd.is_some(),
                }
            }
            KernelRef::Tree(t) => {
                path.push(key("tree"));
                Given::Tree(&t.tree)
            }
        };
        let verdict = check(given, scratch);
        for p in verdict.problems {
            err(&path, format!("cannot serve as a guest kernel: {p}"));
        }
        for n in verdict.notes {
            crate::terminal::say(&format!("ocrig: note: {}", l.error_at(&path, n)));
        }
    }
}

/// Every kernel a workload runs on has the options the payload's catalog says that workload
/// needs (`locktorture`: CONFIG_LOCK_TORTURE_TEST=m), refused at the workload's `command`.
fn check_workload_kernel_options(l: &Loaded, err: &mut impl FnMut(&[Seg], String)) {
    use crate::image::guest_config::lacks_options;
    let s = &l.scenario;
    for (w, workload) in s.workloads.iter().enumerate() {
        let Some(spec) = ocrig_payload::catalog::workload(&workload.command) else {
            continue;
        };
        let wanted: Vec<(&str, &str, Option<&str>)> = spec
            .kernel_options
            .iter()
            .map(|o| (o.name, o.value, o.module))
            .collect();
        if wanted.is_empty() {
            continue;
        }
        for (whose, k) in kernels_run(s) {
            for lack in lacks_options(given_kernel(k), &wanted) {
                err(
                    &[key("workloads"), Seg::Index(w), key("command")],
                    format!("workload '{}' needs {lack} ({whose})", workload.command),
                );
            }
        }
    }
}

/// Turns the payload parser's complaint into a scenario field and a one-line message.
fn payload_error_location(
    e: &clap::Error,
    workload: usize,
    argv: &[String],
    variant: usize,
    implicit: bool,
    variant_args: &std::collections::BTreeMap<String, crate::scenario::model::ArgValue>,
) -> (Vec<Seg>, String) {
    use clap::error::{ContextKind, ContextValue};
    let mut path = vec![key("workloads"), Seg::Index(workload)];
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    if let Some(flag) = arg.as_deref().and_then(|a| a.strip_prefix("--")) {
        let name = flag.split([' ', '=', '<']).next().unwrap_or(flag).to_string();
        // A variant's arguments override the workload's (expand::payload_argv): a value the
        // variant gave is located in the variant, under the key as written there.
        let in_variant = variant_args
            .keys()
            .find(|k| !implicit && k.replace('_', "-") == name);
        match in_variant {
            Some(k) => {
                path = vec![
                    key("variants"),
                    Seg::Index(variant),
                    key("args"),
                    Seg::Key(k.clone()),
                ]
            }
            None => {
                path.push(key("args"));
                path.push(Seg::Key(name));
            }
        }
    } else if matches!(e.kind(), clap::error::ErrorKind::InvalidSubcommand) {
        path.push(key("command"));
    } else {
        path.push(key("args"));
    }
    let first = e
        .to_string()
        .lines()
        .next()
        .unwrap_or("invalid")
        .trim_start_matches("error: ")
        .to_string();
    (path, format!("the payload rejects `{}`: {first}", argv.join(" ")))
}

#[cfg(test)]
mod tests;
