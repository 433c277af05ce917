//! Validation without booting: every problem in a scenario, each located in its file.

use std::collections::BTreeSet;

use super::locate::Seg;
use super::{
    BackendKind, CpuSet, KernelRef, Loaded, Scenario, ScenarioError, ScenarioErrors, Variant, expand,
};

/// What validation needs to know about the host.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// The CPUs this process may use, in the order a CPU count takes them
    /// ([`crate::topology::Topology::preference`]: one thread a core, one node, CPU 0 last).
    pub allowed_cpus: Vec<usize>,
    pub mem_available_mib: u64,
    /// The host these facts are about when it is not this machine (a remote libvirt host).
    pub remote: Option<String>,
}

impl HostFacts {
    pub fn read() -> Self {
        Self {
            allowed_cpus: crate::topology::preferred_order(
                &crate::hostfs::LocalFs,
                &crate::host::allowed_cpus(),
            ),
            mem_available_mib: crate::host::memory_mib().1,
            remote: None,
        }
    }
}

/// Guest memory overhead of QEMU beyond the guest's RAM (measured RSS ~260 MiB at -m 512
/// under TCG, of which the guest touches little; this allowance covers QEMU itself).
pub const QEMU_OVERHEAD_MIB: u64 = 150;

fn key(k: &str) -> Seg {
    Seg::Key(k.into())
}

/// The host CPUs a scenario uses, ascending: every allowed one, the first N of `allowed` (in
/// its order of preference, [`HostFacts::allowed_cpus`]), or the list as written.
pub fn host_cpus(set: &Option<CpuSet>, allowed: &[usize]) -> Result<Vec<usize>, String> {
    let sorted = |cpus: &[usize]| {
        let mut v = cpus.to_vec();
        v.sort_unstable();
        v
    };
    match set {
        None => Ok(sorted(allowed)),
        Some(CpuSet::Count(0)) => Err("must name at least one CPU".into()),
        Some(CpuSet::Count(n)) if *n > allowed.len() => Err(format!(
            "asks for {n} CPUs but this process may use {} ({:?})",
            allowed.len(),
            sorted(allowed)
        )),
        Some(CpuSet::Count(n)) => Ok(sorted(&allowed[..*n])),
        Some(CpuSet::List(list)) => {
            if list.is_empty() {
                return Err("must name at least one CPU".into());
            }
            let unique: BTreeSet<usize> = list.iter().copied().collect();
            if unique.len() != list.len() {
                return Err(format!("lists a CPU twice: {list:?}"));
            }
            if let Some(bad) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(format!(
                    "CPU {bad} is not available to this process (allowed: {:?})",
                    sorted(allowed)
                ));
            }
            Ok(list.clone())
        }
    }
}

/// Guests needed at an overcommit level: level × host CPUs / vCPUs per guest, which must be a
/// whole number of at least one.
pub fn guests_at(level: f64, host_cpus: usize, vcpus: u32) -> Result<u32, String> {
    if !(level.is_finite() && level > 0.0) {
        return Err(format!("level {level} must be a positive number"));
    }
    let exact = level * host_cpus as f64 / vcpus as f64;
    let rounded = exact.round();
    if (exact - rounded).abs() > 1e-9 || rounded < 1.0 {
        return Err(format!(
            "level {level} needs {level} × {host_cpus} host CPUs / {vcpus} vCPUs per guest = {exact:.3} guests, \
             not a whole number ≥ 1; pick a level that is a multiple of {:.3}",
            vcpus as f64 / host_cpus as f64
        ));
    }
    Ok(rounded as u32)
}

/// What the fit of a level's guests is checked against.
#[derive(Debug, Clone, PartialEq)]
pub struct FitHost {
    /// Host CPUs the sweep uses.
    pub cpus: usize,
    pub mem_available_mib: u64,
    /// This process's open-file limit (soft, hard) and the files it has open; `None` when
    /// unknown (not checked).
    pub fds: Option<FdLimits>,
    /// Loopback ports the kernel hands out for `bind(127.0.0.1:0)` (each guest's SSH forward
    /// takes one); `None` when unknown.
    pub ephemeral_ports: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FdLimits {
    pub soft: u64,
    pub hard: u64,
    pub open: u64,
}

/// Files the orchestrator holds per live guest: measured 3 at 1–24 clones (issue 24: 21 open
/// with 1 guest, 90 with 24 — the SSH socket, the QMP socket, QEMU's stderr pipe), planned
/// with room for a libvirt or remote backend's extra connections and for growth.
pub const FDS_PER_GUEST: u64 = 8;
/// Files the orchestrator holds besides its guests (journal, log, locks, runtime), with room.
pub const FDS_BASE: u64 = 64;

/// The files a level of `guests` guests needs open at once.
pub fn fds_needed(guests: u64) -> u64 {
    FDS_BASE + guests * FDS_PER_GUEST
}

/// `8300 MiB`, or `184320 MiB = 180 GiB` when GiB read better.
fn mib_text(mib: u64) -> String {
    if mib >= 10 * 1024 {
        format!("{mib} MiB = {:.0} GiB", mib as f64 / 1024.0)
    } else {
        format!("{mib} MiB")
    }
}

/// Whether the guests of the largest level fit the host, each refusal with its arithmetic
/// (`2.5x × 192 CPUs / 1 vCPU = 480 guests × 662 MiB = 310 GiB > 120 GiB available`) and the
/// scenario field it is about.
pub fn fit_problems(level: f64, vcpus: u32, memory_mib: u32, host: &FitHost) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let exact = level * host.cpus as f64 / vcpus.max(1) as f64;
    let guests = exact.round().max(0.0) as u64;
    let vcpu_word = if vcpus == 1 { "vCPU" } else { "vCPUs" };
    let head = format!(
        "{level}x × {} CPUs / {vcpus} {vcpu_word} = {guests} guests",
        host.cpus
    );
    let per_guest = memory_mib as u64 + QEMU_OVERHEAD_MIB;
    let need = guests * per_guest;
    if need > host.mem_available_mib {
        out.push((
            "memory_mib",
            format!(
                "the largest level does not fit in memory: {head} × ({memory_mib} MiB + {QEMU_OVERHEAD_MIB} MiB QEMU) \
                 = {} > {} available",
                mib_text(need),
                mib_text(host.mem_available_mib)
            ),
        ));
    }
    if let Some(fd) = host.fds {
        let need = fds_needed(guests) + fd.open;
        if need > fd.hard {
            out.push((
                "vcpus",
                format!(
                    "the largest level needs more open files than this process may have: {head} × {FDS_PER_GUEST} files \
                     + {FDS_BASE} + {} open now = {need} > hard limit {} (RLIMIT_NOFILE; raise it with `ulimit -Hn` \
                     or /etc/security/limits.conf as root)",
                    fd.open, fd.hard
                ),
            ));
        }
    }
    if let Some(ports) = host.ephemeral_ports {
        // Half the range: other programs on the host take ports from it too.
        if guests > ports / 2 {
            out.push((
                "vcpus",
                format!(
                    "the largest level needs more loopback ports than the host hands out: {head} × 1 SSH forward \
                     = {guests} > {} (half of the {ports} ports of net.ipv4.ip_local_port_range)",
                    ports / 2
                ),
            ));
        }
    }
    out
}

/// How many guests are started at once, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct StartBound {
    pub at_once: usize,
    pub why: String,
}

/// Guests started per host CPU at once: a clone's restore, its SSH key exchange and clock
/// setting take host CPU, and more at once than this only makes each slower (and at 12x on 2
/// CPUs risks the boot deadline) without making the group ready sooner.
pub const STARTS_PER_CPU: usize = 2;

/// Start concurrency for `guests` guests on `cpus` host CPUs with room for `fd_headroom`
/// more open files (`None`: unknown). Memory is not a bound here: every guest of a level is
/// up at once during its runs anyway, and validation checked that they fit.
pub fn start_concurrency(cpus: usize, guests: usize, fd_headroom: Option<u64>) -> StartBound {
    let by_cpu = (cpus * STARTS_PER_CPU).max(2);
    let mut at_once = by_cpu.min(guests.max(1));
    let mut why = format!("{STARTS_PER_CPU} per host CPU × {cpus} CPUs = {by_cpu}");
    if let Some(room) = fd_headroom {
        let by_fd = (room / FDS_PER_GUEST).max(1) as usize;
        if by_fd < at_once {
            at_once = by_fd;
            why =
                format!("{why}, but only {room} more files may be opened ({FDS_PER_GUEST} a guest): {by_fd}");
        }
    }
    if guests <= at_once {
        why = format!("{why}; all {guests} at once");
    }
    StartBound { at_once, why }
}

/// This process's open-file limits and open files, from the kernel.
pub fn fd_limits() -> Option<FdLimits> {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(FdLimits {
        soft: lim.current?,
        hard: lim.maximum?,
        open,
    })
}

/// Ports in net.ipv4.ip_local_port_range.
pub fn ephemeral_ports() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    Some(hi.saturating_sub(lo) + 1)
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
    let s = &l.scenario;
    let mut errs: Vec<ScenarioError> = Vec::new();
    let mut err = |path: &[Seg], msg: String| errs.push(l.error_at(path, msg));

    if !is_safe_name(&s.name) {
        err(&[key("name")], format!("'{}' {NAME_RULE}", s.name));
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
    let n_variants = expand::variants(s).len();
    check_runs(&s.runs, "runs", n_variants, &mut err);
    if let Some(r) = &s.kvm_runs {
        check_runs(r, "kvm_runs", n_variants, &mut err);
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
    let on = host
        .remote
        .as_ref()
        .map_or(String::new(), |h| format!(" on remote host {h}"));
    let cpus = match host_cpus(&s.host.cpus, &host.allowed_cpus).map_err(|m| format!("{m}{on}")) {
        Ok(c) => c,
        Err(m) => {
            err(&[key("host"), key("cpus")], m);
            host.allowed_cpus.clone()
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
        let fit = FitHost {
            cpus: cpus.len(),
            mem_available_mib: host.mem_available_mib,
            fds: fd_limits(),
            ephemeral_ports: ephemeral_ports(),
        };
        for (field, m) in fit_problems(max_level, s.guest.vcpus, s.guest.memory_mib, &fit) {
            err(&[key("guest"), key(field)], format!("{m}{on}"));
        }
    }

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
            check_kernel_file(&mut err, &[key("variants"), Seg::Index(i), key("kernel")], f);
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
        check_kernel_file(&mut err, &[key("guest"), key("kernel")], f);
    }
    check_kernel_builds(l, &mut err);
    check_workload_kernel_options(l, &mut err);

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
    }
    check_workload_args(s, None, &mut err);
    if s.workloads.iter().any(|w| !w.kvm_args.is_empty()) {
        // As the sweep runs them under KVM: each problem of a key `kvm_args` gave is located
        // there.
        check_workload_args(&s.sized_for(true), Some(s), &mut err);
    }
    // Report each distinct problem once (a bad workload argument repeats across variants).
    let mut seen = BTreeSet::new();
    errs.retain(|e| seen.insert(e.to_string()));
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ScenarioErrors(errs))
    }
}

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
fn check_runs(runs: &super::RunCount, field: &str, variants: usize, err: &mut impl FnMut(&[Seg], String)) {
    match *runs {
        super::RunCount::Fixed(0) => err(&[key(field)], "must be at least 1".into()),
        super::RunCount::Dynamic(d) => {
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
            Some(super::Until::Concluded) => {
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
fn too_few_bring_ups(l: &Loaded, field: &str, runs: super::RunCount) -> Option<(Vec<Seg>, String)> {
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
        super::RunCount::Fixed(_) => vec![key(field)],
        super::RunCount::Dynamic(_) => vec![key(field), key("min")],
    };
    let runs_written = super::locate::locate(&l.text, &[key(field)]).is_some();
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

/// The accelerator a scenario's guests will run under and what validation warns about.
#[derive(Debug, Clone)]
pub struct VirtCheck {
    pub accel: crate::host::AccelChoice,
    pub warnings: Vec<String>,
}

/// The accelerator evidence for the user that will run QEMU for this scenario: this process
/// (qemu backend), libvirt's QEMU user from qemu.conf (libvirt backend), on the host behind `fs`.
pub fn virt_evidence(l: &Loaded, fs: &dyn crate::hostfs::HostFs) -> crate::host::VirtEvidence {
    match l.scenario.host.backend {
        BackendKind::Libvirt => crate::host::VirtEvidence::read_for_libvirt(fs),
        _ => crate::host::VirtEvidence::read_from(fs),
    }
}

/// Whether kernel command-line words switch the PV spinlock (`nopvspin`).
fn switches_pv_spinlock_cmdline(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|w| w == "nopvspin")
}

/// Under KVM, a kernel of one's own (a tree or a file with its config) without SMP, KVM_GUEST or
/// PARAVIRT_SPINLOCKS runs other spinlocks than a KVM guest's, whatever its variant says: one
/// warning each (Debian's kernels have all three).
fn own_kernels_for_kvm(l: &Loaded) -> Vec<String> {
    use crate::image::guest_config::lacks_options;
    const KVM_GUEST: [(&str, &str, Option<&str>); 3] = [
        ("SMP", "y", None),
        ("KVM_GUEST", "y", None),
        ("PARAVIRT_SPINLOCKS", "y", None),
    ];
    kernels_run(&l.scenario)
        .into_iter()
        // A Debian kernel has all three.
        .filter_map(|(whose, k)| Some((whose, given_kernel(k)?)))
        .flat_map(|(whose, given)| {
            lacks_options(Some(given), &KVM_GUEST).into_iter().map(move |lack| {
                format!(
                    "{}: {whose} under KVM: {lack}: its guests run other spinlocks than a KVM guest's (no PV qspinlock, or no SMP at all), whatever the variant says",
                    l.path.display()
                )
            })
        })
        .collect()
}

/// Every kernel the scenario's guests run, each with whose it is: the guest's (when some
/// variant, or the implicit one, runs it) and each variant's own.
fn kernels_run(s: &super::Scenario) -> Vec<(String, &KernelRef)> {
    std::iter::once(("the guest's kernel".to_string(), &s.guest.kernel))
        .filter(|_| s.variants.is_empty() || s.variants.iter().any(|v| v.kernel.is_none()))
        .chain(s.variants.iter().filter_map(|v| {
            v.kernel
                .as_ref()
                .map(|k| (format!("variant {}'s kernel", v.name), k))
        }))
        .collect()
}

/// A kernel of one's own as the config checks take it (None: a Debian kernel).
fn given_kernel(k: &KernelRef) -> Option<crate::image::guest_config::Given<'_>> {
    use crate::image::guest_config::Given;
    match k {
        KernelRef::Debian(_) => None,
        KernelRef::File(f) => Some(Given::File {
            path: &f.path,
            own_initrd: f.initrd.is_some(),
        }),
        KernelRef::Tree(t) => Some(Given::Tree(&t.tree)),
    }
}

/// Whether a `-cpu` value switches a KVM PV spinlock feature (`kvm-pv-unhalt`).
fn switches_pv_spinlock_cpu(cpu: &str) -> bool {
    crate::host::cpu_feature(cpu, "kvm-pv-unhalt").is_some()
}

/// Checks that need the accelerator: `accel: kvm` where the user running QEMU cannot open
/// /dev/kvm (or there is no usable KVM), `cpu:` models the accelerator cannot run (`host` is
/// KVM's: QEMU refuses it under TCG at start, "CPU model 'host' requires KVM or HVF"), and a
/// A variant's `trace_events`: each `system:name` (what tracefs calls it), none twice. Whether
/// the guest kernel has them is only known in the guest: the payload refuses a missing one
/// naming the event and the kernel (exit 2).
fn trace_event_problems(events: &[String]) -> Vec<(usize, String)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if let Err(msg) = ocrig_payload::probe::tracefs::Event::parse(e) {
            out.push((i, msg));
        } else if !seen.insert(e.as_str()) {
            out.push((i, format!("'{e}' is listed twice")));
        }
    }
    out
}

/// Each variant's `trace_events` against its guest kernel's event list, read from the
/// kernel's image where that image is already built (nothing is built or downloaded here; see
/// [`crate::image::trace_events`]): an event the kernel lacks is an error at its line, naming
/// the kernel. Where the list is not known (no image built yet, a kernel without tracing, a
/// module event with the user's own initrd) the returned notes say so, and the payload refuses
/// a missing event in the guest. The host backend has no guest kernel: nothing to check.
pub fn check_trace_events(l: &Loaded) -> Result<Vec<String>, ScenarioErrors> {
    use crate::image::trace_events::Verdict;
    let s = &l.scenario;
    if s.host.backend == BackendKind::Host {
        return Ok(Vec::new());
    }
    let cache = crate::image::cache_dir();
    let (mut errs, mut notes) = (Vec::new(), Vec::new());
    for (i, v) in s
        .variants
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.trace_events.is_empty())
    {
        let kernel = v.kernel.as_ref().unwrap_or(&s.guest.kernel);
        let spec = crate::image::ImageSpec {
            kernel: kernel.source(),
        };
        let img = match crate::image::cached(&spec, &cache) {
            Ok(Some(img)) => img,
            Ok(None) => {
                notes.push(format!(
                    "variant {}: its guest image is not built yet, so its kernel's trace events are checked in the guest (`ocrig image build` first checks them here)",
                    v.name
                ));
                continue;
            }
            Err(e) => {
                notes.push(format!(
                    "variant {}: trace events checked in the guest: {e:#}",
                    v.name
                ));
                continue;
            }
        };
        let list = match crate::image::trace_events::of_image(&img) {
            Ok(list) => list,
            Err(why) => {
                notes.push(format!(
                    "variant {}: kernel {}'s trace events are not known before boot ({why}); the guest checks them",
                    v.name, img.identity.release
                ));
                continue;
            }
        };
        for (j, e) in v.trace_events.iter().enumerate() {
            match list.check(e) {
                Verdict::Present => {}
                Verdict::Missing(why) => errs.push(l.error_at(
                    &[
                        Seg::Key("variants".into()),
                        Seg::Index(i),
                        Seg::Key("trace_events".into()),
                        Seg::Index(j),
                    ],
                    format!(
                        "the guest kernel {} ({}) has no trace event '{e}': {why}",
                        img.identity.release, img.identity.source
                    ),
                )),
                Verdict::Unknown(why) => notes.push(format!(
                    "variant {}: '{e}' is checked in the guest: {why}",
                    v.name
                )),
            }
        }
    }
    if errs.is_empty() {
        Ok(notes)
    } else {
        Err(ScenarioErrors(errs))
    }
}

/// A profile's rate: 1 up to the kernel's default `perf_event_max_sample_rate` (the guest may
/// have lowered its own since; the payload refuses a rate above that, exit 2).
fn check_profile_rate(hz: u64) -> Result<(), String> {
    let max = ocrig_payload::probe::profile::DEFAULT_MAX_SAMPLE_RATE;
    if (1..=max).contains(&hz) {
        Ok(())
    } else {
        Err(format!(
            "{hz} Hz is outside the allowed range 1..={max} (perf_event_max_sample_rate)"
        ))
    }
}

/// 1-vCPU guest in a scenario whose variants switch PV spinlocks, which cannot differ (a
/// kernel with one possible CPU disables PV spinlocks itself) — a warning instead where
/// `guest.single_vcpu_intended` says so. Every problem is returned together, located.
pub fn check_virt(l: &Loaded, ev: &crate::host::VirtEvidence) -> Result<VirtCheck, ScenarioErrors> {
    use crate::host::{Accel, AccelChoice};
    let s = &l.scenario;
    let mut errs = Vec::new();
    let mut warnings = Vec::new();
    let auto = ev.choose();
    let accel = match s.host.accel {
        super::AccelSetting::Auto => auto,
        super::AccelSetting::Tcg => AccelChoice {
            accel: Accel::Tcg,
            reason: "requested by the scenario".into(),
        },
        super::AccelSetting::Kvm if auto.accel == Accel::Kvm => AccelChoice {
            accel: Accel::Kvm,
            reason: "requested by the scenario".into(),
        },
        super::AccelSetting::Kvm => {
            errs.push(l.error_at(
                &[key("host"), key("accel")],
                format!("accel: kvm cannot be had here: {}", auto.reason),
            ));
            auto
        }
    };
    if s.host.backend == BackendKind::Host {
        // No guests: no accelerator, CPU model or guest kernel is involved.
        return if errs.is_empty() {
            Ok(VirtCheck { accel, warnings })
        } else {
            Err(ScenarioErrors(errs))
        };
    }
    if accel.accel == Accel::Kvm {
        warnings.extend(own_kernels_for_kvm(l));
    }
    let mut cpus: Vec<(Vec<Seg>, &str)> = Vec::new();
    if let Some(c) = &s.guest.cpu {
        cpus.push((vec![key("guest"), key("cpu")], c));
    }
    for (i, v) in s.variants.iter().enumerate() {
        if let Some(c) = &v.cpu {
            cpus.push((vec![key("variants"), Seg::Index(i), key("cpu")], c));
        }
    }
    for (path, cpu) in &cpus {
        let model = cpu.split(',').next().unwrap_or("").trim();
        if model.is_empty() {
            errs.push(l.error_at(path, format!("'{cpu}' names no CPU model (e.g. `max`, `host`)")));
        } else if model == "host" && accel.accel == Accel::Tcg {
            errs.push(l.error_at(
                path,
                format!(
                    "`-cpu {cpu}` needs KVM (QEMU refuses it under TCG: \"CPU model 'host' requires KVM or HVF\"), \
                     and these guests run under TCG ({}); use `max` (under KVM it offers what `host` does)",
                    accel.reason
                ),
            ));
        }
    }
    let pv_variants: Vec<&str> = s
        .variants
        .iter()
        .filter(|v| {
            switches_pv_spinlock_cmdline(&v.cmdline) || v.cpu.as_deref().is_some_and(switches_pv_spinlock_cpu)
        })
        .map(|v| v.name.as_str())
        .collect();
    // Variants that run another kernel than the others (another release, file or tree: the
    // README's base-vs-patched recipe).
    let kernel_of =
        |v: &crate::scenario::model::Variant| v.kernel.clone().unwrap_or_else(|| s.guest.kernel.clone());
    let kernel_variants: Vec<&str> = match s.variants.first() {
        Some(first) if s.variants.iter().any(|v| kernel_of(v) != kernel_of(first)) => {
            s.variants.iter().map(|v| v.name.as_str()).collect()
        }
        _ => Vec::new(),
    };
    let single = if !pv_variants.is_empty() {
        Some(format!(
            "variant(s) {} switch PV spinlocks: a kernel with one possible CPU disables PV spinlocks by \
             itself (\"PV spinlocks disabled, single CPU\", and PV sched-yield and PV TLB flush with them), \
             and one CPU cannot contend a spinlock, so the variants cannot differ",
            pv_variants.join(", ")
        ))
    } else if !kernel_variants.is_empty() {
        Some(format!(
            "variants {} run different kernels: a kernel with one possible CPU never contends a spinlock \
             and turns PV spinlocks off (\"PV spinlocks disabled, single CPU\"), so a spinlock change between \
             them cannot show",
            kernel_variants.join(", ")
        ))
    } else {
        None
    };
    if let Some(what) = single.filter(|_| s.guest.vcpus == 1) {
        let why = format!("1-vCPU guests, but {what}; use vcpus >= 2");
        if s.guest.single_vcpu_intended {
            warnings.push(format!(
                "{}: guest.vcpus: {why} (kept: guest.single_vcpu_intended)",
                l.path.display()
            ));
        } else {
            errs.push(l.error_at(
                &[key("guest"), key("vcpus")],
                format!("{why}, or set guest.single_vcpu_intended: true if that null result is the point"),
            ));
        }
    }
    if errs.is_empty() {
        Ok(VirtCheck { accel, warnings })
    } else {
        Err(ScenarioErrors(errs))
    }
}

fn check_kernel_file(err: &mut impl FnMut(&[Seg], String), path: &[Seg], f: &super::KernelFile) {
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
            eprintln!("ocrig: note: {}", l.error_at(&path, n));
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
mod tests {
    use super::*;
    use crate::scenario::load;

    fn facts() -> HostFacts {
        HostFacts {
            allowed_cpus: vec![0, 1],
            mem_available_mib: 8192,
            remote: None,
        }
    }

    /// A big host of the issue: 192 CPUs, 120 GiB available, the default open-file limits.
    fn big_host() -> FitHost {
        FitHost {
            cpus: 192,
            mem_available_mib: 120 * 1024,
            fds: Some(FdLimits {
                soft: 1024,
                hard: 1 << 20,
                open: 10,
            }),
            ephemeral_ports: Some(28_232),
        }
    }

    #[test]
    fn a_level_that_does_not_fit_in_memory_is_refused_with_its_arithmetic() {
        // 2.5x × 192 / 1 = 480 guests of 234 + 150 = 384 MiB: 180 GiB > 120 GiB.
        let p = fit_problems(2.5, 1, 234, &big_host());
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "memory_mib");
        assert!(
            p[0].1.contains(
                "2.5x × 192 CPUs / 1 vCPU = 480 guests × (234 MiB + 150 MiB QEMU) = 184320 MiB = 180 GiB > 122880 MiB = 120 GiB available"
            ),
            "{}",
            p[0].1
        );
        // 320 guests of the same size fit (120 GiB exactly), and 2-vCPU guests halve the count.
        assert!(fit_problems(2.5 * 320.0 / 480.0, 1, 234, &big_host()).is_empty());
        let two = fit_problems(2.5, 2, 234, &big_host());
        assert!(two.is_empty(), "{two:?}");
    }

    #[test]
    fn open_files_and_ports_are_refused_only_past_what_can_be_raised() {
        let mut h = big_host();
        h.mem_available_mib = u64::MAX / 2;
        // 480 guests need 64 + 480 × 8 + 10 = 3914 files: above the soft limit (raised at
        // preflight), below the hard one: no refusal.
        assert!(fit_problems(2.5, 1, 234, &h).is_empty());
        assert_eq!(fds_needed(480), 3904);
        h.fds = Some(FdLimits {
            soft: 1024,
            hard: 2048,
            open: 10,
        });
        let p = fit_problems(2.5, 1, 234, &h);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].1
                .contains("480 guests × 8 files + 64 + 10 open now = 3914 > hard limit 2048"),
            "{}",
            p[0].1
        );
        h.fds = None;
        h.ephemeral_ports = Some(600);
        let p = fit_problems(2.5, 1, 234, &h);
        assert!(
            p[0].1.contains("= 480 > 300 (half of the 600 ports"),
            "{}",
            p[0].1
        );
    }

    #[test]
    fn start_concurrency_is_bounded_by_cpus_and_open_files() {
        let b = start_concurrency(2, 24, Some(10_000));
        assert_eq!(b.at_once, 4, "{b:?}");
        assert!(b.why.contains("2 per host CPU × 2 CPUs = 4"), "{}", b.why);
        assert_eq!(start_concurrency(2, 1, None).at_once, 1);
        assert!(start_concurrency(2, 3, None).why.contains("all 3 at once"));
        let b = start_concurrency(192, 480, Some(100));
        assert_eq!(b.at_once, 12, "{b:?}");
        assert!(b.why.contains("only 100 more files"), "{}", b.why);
    }

    fn loaded(text: &str) -> (tempfile::TempDir, Loaded) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.yaml");
        std::fs::write(&p, text).unwrap();
        let l = load(&p).unwrap();
        (dir, l)
    }

    #[test]
    fn guest_counts_follow_the_documented_arithmetic() {
        assert_eq!(guests_at(0.5, 2, 1), Ok(1));
        assert_eq!(guests_at(2.5, 2, 1), Ok(5));
        assert_eq!(guests_at(1.0, 2, 2), Ok(1));
        assert_eq!(guests_at(2.0, 2, 2), Ok(2));
        let e = guests_at(1.5, 2, 2).unwrap_err();
        assert!(e.contains("1.500 guests"), "{e}");
        assert!(guests_at(0.5, 2, 2).is_err());
        assert!(guests_at(0.0, 2, 1).is_err());
    }

    #[test]
    fn cpu_sets_are_checked_against_the_host() {
        assert_eq!(host_cpus(&None, &[0, 1]), Ok(vec![0, 1]));
        assert_eq!(host_cpus(&Some(CpuSet::Count(1)), &[0, 1]), Ok(vec![0]));
        // A count takes the first N in the order of preference, and says them ascending.
        assert_eq!(host_cpus(&Some(CpuSet::Count(1)), &[1, 0]), Ok(vec![1]));
        assert_eq!(host_cpus(&Some(CpuSet::Count(2)), &[5, 3, 0]), Ok(vec![3, 5]));
        assert_eq!(host_cpus(&None, &[5, 3, 0]), Ok(vec![0, 3, 5]));
        assert!(host_cpus(&Some(CpuSet::Count(3)), &[0, 1]).is_err());
        assert!(host_cpus(&Some(CpuSet::List(vec![5])), &[0, 1]).is_err());
        assert!(host_cpus(&Some(CpuSet::List(vec![1, 1])), &[0, 1]).is_err());
    }

    #[test]
    fn bad_payload_arguments_are_located_at_their_field() {
        let (_d, l) = loaded(
            "name: x\nlevels: [0.5, 1.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args:\n      threads: 0\n",
        );
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].field, "workloads[0].args.threads");
        assert_eq!(e.0[0].line, Some(7), "{e}");
        let (_d, l) = loaded("name: x\nlevels: [1]\nworkloads:\n  - command: frobnicate\n    metric: m\n");
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0[0].field, "workloads[0].command", "{e}");
        assert_eq!(e.0[0].line, Some(4));
    }

    #[test]
    fn a_sampling_rate_outside_0_1_or_a_threshold_not_above_0_is_refused_at_its_field() {
        for (arg, value, field) in [
            ("hold-sample-rate", "0", "hold-sample-rate"),
            ("hold-sample-rate", "1.5", "hold-sample-rate"),
            ("stretch-threshold-ns", "0", "stretch-threshold-ns"),
            ("stretch-threshold-ns", "-1", "stretch-threshold-ns"),
            // Above a host time slice: it would miss the preemptions it counts.
            ("stretch-threshold-ns", "1000000", "stretch-threshold-ns"),
        ] {
            let (_d, l) = loaded(&format!(
                "name: x\nlevels: [1]\nvariants:\n  - {{name: a, args: {{algo: tas}}}}\n  - {{name: b, args: {{{arg}: {value}}}}}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n"
            ));
            let e = validate(&l, &facts()).unwrap_err();
            assert_eq!(e.0.len(), 1, "{e}");
            assert_eq!(e.0[0].field, format!("variants[1].args.{field}"), "{e}");
            assert_eq!(e.0[0].line, Some(5), "{e}");
            assert!(e.to_string().contains(&format!("--{arg}")), "{e}");
        }
        let (_d, l) = loaded(
            "name: x\nlevels: [1]\nworkloads:\n  - command: lock\n    metric: stretched_handover_share\n    args: {hold-sample-rate: 1, stretch-threshold-ns: 20000}\n",
        );
        validate(&l, &facts()).unwrap();
    }

    #[test]
    fn fractional_levels_memory_and_duplicate_variants_are_all_reported() {
        let (_d, l) = loaded(
            "name: x\nguest: {vcpus: 2, memory_mib: 4000}\nlevels: [1.0, 1.5, 2.0]\nvariants:\n  - name: a\n  - name: a\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
        );
        let e = validate(
            &l,
            &HostFacts {
                allowed_cpus: vec![0, 1],
                mem_available_mib: 6000,
                remote: None,
            },
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("levels[1]") && text.contains("1.500 guests"),
            "{text}"
        );
        assert!(
            text.contains("guest.memory_mib") && text.contains("8300 MiB"),
            "{text}"
        );
        assert!(text.contains("variants[1].name"), "{text}");
        assert_eq!(e.0.len(), 3, "{text}");
    }

    #[test]
    fn a_good_scenario_passes() {
        let (_d, l) = loaded(
            "name: ok\nlevels: [0.5, 1.0, 2.5]\nvariants:\n  - {name: base, baseline: true}\n  - {name: tas, args: {algo: tas}}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {threads: [1, 2], duration-ms: 100}\n",
        );
        validate(&l, &facts()).unwrap();
    }

    #[test]
    fn variants_with_guests_of_their_own_need_two_bring_ups_a_side() {
        let text = |variants: &str, tail: &str| {
            format!(
                "name: x\nlevels: [0.5, 1.0]\n{WORK}variants:\n  - {{name: base, baseline: true}}\n{variants}{tail}"
            )
        };
        let own = "  - {name: nopv, cmdline: nopvspin}\n";
        let only_args = "  - {name: tas, args: {algo: tas}}\n";
        let error = |variants: &str, tail: &str| {
            let (_d, l) = loaded(&text(variants, tail));
            let e = validate(&l, &facts()).unwrap_err();
            assert_eq!(e.0.len(), 1, "{e}");
            e.0.into_iter().next().unwrap()
        };
        // `runs: 1` written: located there (line 9), saying why and what to do.
        let e = error(own, "runs: 1\n");
        assert_eq!((e.field.as_str(), e.line), ("runs", Some(9)), "{e}");
        for words in [
            "variant nopv boots guests of its own",
            "1 whole bring-up(s) per side",
            "needs at least 2 bring-ups per side",
            "raise it to at least 2",
        ] {
            assert!(e.message.contains(words), "{words}: {e}");
        }
        // No `runs` (1 by default): located at the variant.
        let e = error(own, "");
        assert_eq!((e.field.as_str(), e.line), ("variants[1]", Some(8)), "{e}");
        assert!(e.message.contains("give `runs: 2` or more"), "{e}");
        // Blocks of 2 runs: 3 runs make one whole block; located at runs_per_bring_up.
        let e = error(own, "runs: 3\nschedule:\n  runs_per_bring_up: 2\n");
        assert_eq!(
            (e.field.as_str(), e.line),
            ("schedule.runs_per_bring_up", Some(11)),
            "{e}"
        );
        assert!(
            e.message
                .contains("lower runs_per_bring_up to at most 1 or raise runs to at least 4"),
            "{e}"
        );
        let e = error(
            own,
            "runs: {min: 3, max: 9, target_cv: 0.05}\nschedule: {runs_per_bring_up: 2}\n",
        );
        assert_eq!(e.field, "schedule.runs_per_bring_up", "{e}");
        // Per-variant guests are guests of their own even where they are identical.
        let e = error(only_args, "runs: 1\nschedule: {guests: per-variant}\n");
        assert!(e.message.contains("schedule.guests is per-variant"), "{e}");
        // Enough bring-ups, or guests shared with the baseline: valid.
        for (variants, tail) in [
            (own, "runs: 2\n"),
            (own, "runs: 4\nschedule: {runs_per_bring_up: 2}\n"),
            (own, "runs: {min: 2, max: 9, target_cv: 0.05}\n"),
            (only_args, ""),
            ("", ""),
        ] {
            let (_d, l) = loaded(&text(variants, tail));
            validate(&l, &facts()).unwrap_or_else(|e| panic!("{variants}{tail}: {e}"));
        }
    }

    #[test]
    fn runs_per_bring_up_and_self_check_retries_are_bounded() {
        let (_d, l) = loaded(&format!(
            "name: x\nlevels: [1.0]\n{WORK}schedule: {{runs_per_bring_up: 0}}\ntimeouts: {{self_check_retries: 11}}\n"
        ));
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
        assert_eq!(e.0[0].field, "timeouts.self_check_retries", "{e}");
        assert!(e.0[0].message.contains("11 is more than the 10 retries"), "{e}");
        assert_eq!(
            (e.0[1].field.as_str(), e.0[1].line),
            ("schedule.runs_per_bring_up", Some(6)),
            "{e}"
        );
        assert!(e.0[1].message.contains("must be at least 1"), "{e}");
        let (_d, l) = loaded(&format!(
            "name: x\nlevels: [1.0]\n{WORK}host: {{max_other_load: 0}}\ntimeouts: {{disturbed_retries: 11}}\n"
        ));
        let e = validate(&l, &facts()).unwrap_err();
        let mut fields: Vec<&str> = e.0.iter().map(|e| e.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            ["host.max_other_load", "timeouts.disturbed_retries"],
            "{e}"
        );
    }

    fn kvm_host() -> crate::host::VirtEvidence {
        crate::host::VirtEvidence {
            cpu_has_vmx_or_svm: true,
            dev_kvm: true,
            kvm_intel_or_amd_loaded: true,
            kvm_pvm_loaded: false,
            kvm_denied: None,
        }
    }

    const WORK: &str = "workloads:\n  - command: lock\n    metric: ops_per_sec\n";

    #[test]
    fn accel_kvm_where_the_qemu_user_cannot_open_dev_kvm_is_refused_with_the_reason() {
        let (_d, l) = loaded(&format!("name: x\nhost: {{accel: kvm}}\nlevels: [1]\n{WORK}"));
        assert_eq!(
            check_virt(&l, &kvm_host()).unwrap().accel.accel,
            crate::host::Accel::Kvm
        );
        let denied = crate::host::VirtEvidence {
            kvm_denied: Some("user nobody cannot open /dev/kvm read-write: mode 660".into()),
            ..kvm_host()
        };
        let e = check_virt(&l, &denied).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].field, "host.accel");
        assert_eq!(e.0[0].line, Some(2));
        assert!(e.0[0].message.contains("mode 660"), "{e}");
        // auto falls back to TCG and says why.
        let (_d, auto) = loaded(&format!("name: x\nlevels: [1]\n{WORK}"));
        let c = check_virt(&auto, &denied).unwrap();
        assert_eq!(c.accel.accel, crate::host::Accel::Tcg);
        assert!(
            c.accel.reason.contains("cannot open /dev/kvm"),
            "{}",
            c.accel.reason
        );
    }

    #[test]
    fn trace_events_must_be_system_name_and_listed_once() {
        let text = format!(
            "name: x\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - name: traced\n    trace_events: [lock:contention_begin, contention_end, lock:contention_begin]\n{WORK}"
        );
        let (_d, l) = loaded(&text);
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0.len(), 2, "{e}");
        assert_eq!(e.0[0].field, "variants[1].trace_events[1]");
        assert!(e.0[0].message.contains("system:name"), "{e}");
        assert_eq!(e.0[1].field, "variants[1].trace_events[2]");
        assert!(e.0[1].message.contains("twice"), "{e}");
        let good = format!(
            "name: x\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - {{name: traced, trace_events: [lock:contention_begin, lock:contention_end]}}\n{WORK}"
        );
        let (_d, l) = loaded(&good);
        validate(&l, &facts()).unwrap();
    }

    #[test]
    fn a_kvm_sizing_is_checked_as_the_sweep_would_run_it_and_located_in_its_block() {
        let base = "name: x\nlevels: [1]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    args: {threads: 2}\n";
        // Good: accepted as it stands.
        let (_d, l) = loaded(&format!("{base}    kvm_args: {{threads: 4}}\nkvm_runs: 5\n"));
        validate(&l, &facts()).unwrap();
        // A value the payload refuses under KVM only, at its line in kvm_args.
        let (_d, l) = loaded(&format!("{base}    kvm_args: {{threads: 0}}\n"));
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].field, "workloads[0].kvm_args.threads", "{e}");
        assert_eq!(e.0[0].line, Some(7), "{e}");
        assert!(e.0[0].message.contains("--threads 0"), "{e}");
        // kvm_runs as runs.
        let (_d, l) = loaded(&format!("{base}kvm_runs: 0\n"));
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!((e.0[0].field.as_str(), e.0[0].line), ("kvm_runs", Some(7)), "{e}");
        // A variant with guests of its own needs 2 bring-ups a side under KVM too.
        let text = "name: x\nlevels: [1]\nvariants:\n  - {name: base, baseline: true}\n  - {name: n, cmdline: nopvspin}\n\
                    workloads:\n  - {command: lock, metric: ops_per_sec}\nruns: 2\nkvm_runs: 1\n";
        let (_d, l) = loaded(text);
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0[0].field, "kvm_runs", "{e}");
        assert!(e.0[0].message.contains("at least 2 bring-ups"), "{e}");
    }

    #[test]
    fn profile_rates_outside_one_to_the_max_sample_rate_are_refused_with_the_range() {
        for (rate, ok) in [
            (0, false),
            (1, true),
            (99, true),
            (100_000, true),
            (100_001, false),
        ] {
            let text = format!(
                "name: x\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - {{name: p, profile: {{rate_hz: {rate}}}}}\n{WORK}"
            );
            let (_d, l) = loaded(&text);
            match validate(&l, &facts()) {
                Ok(()) => assert!(ok, "{rate} accepted"),
                Err(e) => {
                    assert!(!ok, "{rate}: {e}");
                    assert_eq!(e.0[0].field, "variants[1].profile.rate_hz");
                    assert!(e.0[0].message.contains("1..=100000"), "{e}");
                }
            }
        }
    }

    #[test]
    fn cpu_models_are_checked_against_the_resolved_accelerator() {
        let text = format!(
            "name: x\nguest: {{vcpus: 2}}\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - {{name: unhalt-off, cpu: \"host,kvm-pv-unhalt=off\"}}\n  - {{name: max-off, cpu: \"max,kvm-pv-unhalt=off\"}}\n{WORK}"
        );
        let (_d, l) = loaded(&text);
        check_virt(&l, &kvm_host()).unwrap();
        let tcg = crate::host::VirtEvidence::default();
        let e = check_virt(&l, &tcg).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].field, "variants[1].cpu");
        assert_eq!(e.0[0].line, Some(6));
        assert!(e.0[0].message.contains("requires KVM or HVF"), "{e}");
    }

    #[test]
    fn pv_spinlock_variants_need_guests_of_two_vcpus_unless_marked() {
        let text = |extra: &str| {
            format!(
                "name: x\nguest: {{vcpus: 1{extra}}}\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - {{name: nopvspin, cmdline: nopvspin}}\n{WORK}"
            )
        };
        let (_d, l) = loaded(&text(""));
        let e = check_virt(&l, &kvm_host()).unwrap_err();
        assert_eq!(e.0[0].field, "guest.vcpus");
        assert!(
            e.0[0].message.contains("PV spinlocks disabled, single CPU"),
            "{e}"
        );
        assert!(e.0[0].message.contains("nopvspin"), "{e}");
        let (_d, l) = loaded(&text(", single_vcpu_intended: true"));
        let c = check_virt(&l, &kvm_host()).unwrap();
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("single_vcpu_intended"));
        assert!(switches_pv_spinlock_cpu("host,kvm-pv-unhalt=off"));
        assert!(switches_pv_spinlock_cpu("max,-kvm-pv-unhalt"));
        assert!(switches_pv_spinlock_cpu("max,kvm_pv_unhalt=off"));
        assert!(!switches_pv_spinlock_cpu("max,kvm-steal-time=off"));
    }

    /// Under KVM a tree without PARAVIRT_SPINLOCKS (or SMP, KVM_GUEST) is said, per kernel;
    /// under TCG, where no guest has PV spinlocks, nothing is.
    #[test]
    fn own_kernels_without_pv_spinlocks_are_said_under_kvm() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(".config"), "CONFIG_SMP=y\nCONFIG_KVM_GUEST=y\n").unwrap();
        std::fs::create_dir_all(d.path().join("arch/x86/boot")).unwrap();
        std::fs::write(d.path().join("arch/x86/boot/bzImage"), "x").unwrap();
        let text = format!(
            "name: x\nguest: {{vcpus: 2}}\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - {{name: mine, kernel: {{tree: {}}}}}\n{WORK}",
            d.path().display()
        );
        let (_d, l) = loaded(&text);
        let w = check_virt(&l, &kvm_host()).unwrap().warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("variant mine's kernel under KVM: CONFIG_PARAVIRT_SPINLOCKS=y, but CONFIG_PARAVIRT_SPINLOCKS is not set"),
            "{w:?}"
        );
        let tcg = crate::host::VirtEvidence::default();
        assert!(check_virt(&l, &tcg).unwrap().warnings.is_empty());
    }

    /// The README's base-vs-patched recipe in 1-vCPU guests compares nothing a spinlock patch
    /// changes: refused like the PV switches (own-kernels.yaml shipped so, issue 36).
    #[test]
    fn variants_of_different_kernels_need_guests_of_two_vcpus_unless_marked() {
        let text = |vcpus: u32, extra: &str, second: &str| {
            format!(
                "name: x\nguest: {{vcpus: {vcpus}{extra}}}\nlevels: [1]\nvariants:\n  - {{name: base, baseline: true}}\n  - {{name: patched{second}}}\n{WORK}"
            )
        };
        let (_d, l) = loaded(&text(1, "", ", kernel: 6.1.0-41-amd64"));
        let e = check_virt(&l, &kvm_host()).unwrap_err();
        assert_eq!(e.0[0].field, "guest.vcpus");
        assert!(
            e.0[0].message.contains("base, patched run different kernels"),
            "{e}"
        );
        let (_d, l) = loaded(&text(
            1,
            ", single_vcpu_intended: true",
            ", kernel: 6.1.0-41-amd64",
        ));
        assert_eq!(check_virt(&l, &kvm_host()).unwrap().warnings.len(), 1);
        // Two vCPUs, or one kernel for both: nothing to say.
        let (_d, l) = loaded(&text(2, "", ", kernel: 6.1.0-41-amd64"));
        assert!(check_virt(&l, &kvm_host()).unwrap().warnings.is_empty());
        let (_d, l) = loaded(&text(1, "", ", cmdline: quiet"));
        assert!(check_virt(&l, &kvm_host()).unwrap().warnings.is_empty());
    }
}
