use super::*;
use crate::scenario::CpuSet;
use crate::scenario::load;

fn facts() -> HostFacts {
    HostFacts {
        allowed_cpus: vec![0, 1],
        mem_available_mib: 8192,
        node_of_cpu: Default::default(),
        node_mem_available_mib: Default::default(),
        online_cpus: None,
        remote: None,
    }
}

/// A big host of the issue: 192 CPUs, 120 GiB available, the default open-file limits.
fn big_host() -> FitHost {
    FitHost {
        cpus: 192,
        mem_available_mib: 120 * 1024,
        mem_where: String::new(),
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
            node_of_cpu: Default::default(),
            node_mem_available_mib: Default::default(),
            online_cpus: None,
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

#[test]
fn bring_ups_per_level_is_bounded_by_the_rounds_a_level_always_makes() {
    let text = |tail: &str| {
        format!(
            "name: x\nlevels: [1.0, 2.0]\n{WORK}variants:\n  - {{name: base}}\n  - {{name: tas, args: {{algo: tas}}}}\n{tail}"
        )
    };
    let error = |tail: &str| {
        let (_d, l) = loaded(&text(tail));
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        e.0.into_iter().next().unwrap()
    };
    // 0: refused, located at the field (line 11).
    let e = error("runs: 4\nschedule:\n  bring_ups_per_level: 0\n");
    assert_eq!(
        (e.field.as_str(), e.line),
        ("schedule.bring_ups_per_level", Some(11)),
        "{e}"
    );
    assert!(e.message.contains("must be at least 1"), "{e}");
    // More bring-ups than the rounds always made: a bring-up would make none.
    let e = error("runs: 2\nschedule: {bring_ups_per_level: 3}\n");
    assert_eq!(e.field, "schedule.bring_ups_per_level", "{e}");
    for words in [
        "3 bring-ups a level for the 2 round(s) a level always makes (runs: 2)",
        "lower bring_ups_per_level to at most 2 or raise runs",
    ] {
        assert!(e.message.contains(words), "{words}: {e}");
    }
    let e = error("runs: {min: 2, max: 9, target_cv: 0.05}\nschedule: {bring_ups_per_level: 3}\n");
    assert!(
        e.message
            .contains("(runs.min: 2, the rounds past it run on the last bring-up)"),
        "{e}"
    );
    assert!(e.message.ends_with("or raise runs.min"), "{e}");
    let e = error("runs: 4\nkvm_runs: 2\nschedule: {bring_ups_per_level: 3}\n");
    assert!(e.message.contains("(kvm_runs: 2)"), "{e}");
    // The host backend brings nothing up.
    let e = error("host: {backend: host}\nruns: 4\nschedule: {bring_ups_per_level: 2}\n");
    assert!(e.message.contains("the host backend brings up no guests"), "{e}");
    // One bring-up a level (retention then within one boot a level), as many as the rounds,
    // the default where runs are few, or a level of several boot groups (runs_per_bring_up
    // blocks it): valid.
    for tail in [
        "runs: 4\nschedule: {bring_ups_per_level: 1}\n",
        "runs: 4\nschedule: {bring_ups_per_level: 4}\n",
        "runs: 1\n",
        "",
        "runs: 2\nschedule: {guests: per-variant, bring_ups_per_level: 3}\n",
    ] {
        let (_d, l) = loaded(&text(tail));
        validate(&l, &facts()).unwrap_or_else(|e| panic!("{tail}: {e}"));
    }
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

#[test]
fn memory_fits_on_the_nodes_the_guests_are_bound_to_not_the_whole_host() {
    // 2 CPUs of node 1, which has 1 000 MiB free of the host's 8 GiB; 2x of 1-vCPU guests of
    // 256 MiB: 4 × (256 + 150) = 1 624 MiB, which fits the host but not the node.
    let (_d, l) = loaded(
        "name: x\nhost: {cpus: 2}\nguest: {vcpus: 1, memory_mib: 256}\nlevels: [1.0, 2.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
    );
    let host = |node1_mib: u64| HostFacts {
        allowed_cpus: vec![2, 3, 0, 1],
        mem_available_mib: 8192,
        node_of_cpu: [(0, 0), (1, 0), (2, 1), (3, 1)].into(),
        node_mem_available_mib: [(0, 7192), (1, node1_mib)].into(),
        online_cpus: None,
        remote: None,
    };
    let e = validate(&l, &host(1000)).unwrap_err().to_string();
    assert!(
        e.contains("guest.memory_mib") && e.contains("> 1000 MiB available on NUMA node(s) 1"),
        "{e}"
    );
    validate(&l, &host(2000)).unwrap();
}

#[test]
fn a_listed_cpu_that_is_offline_is_named_as_offline_at_its_line() {
    let (_d, l) = loaded(
        "name: x\nhost:\n  cpus: [8, 17]\nguest: {vcpus: 1}\nlevels: [1.0]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
    );
    let host = HostFacts {
        allowed_cpus: (0..16).collect(),
        mem_available_mib: 8192,
        node_of_cpu: Default::default(),
        node_mem_available_mib: Default::default(),
        online_cpus: Some((0..16).collect()),
        remote: None,
    };
    let e = validate(&l, &host).unwrap_err();
    assert_eq!(
        (e.0[0].field.as_str(), e.0[0].line),
        ("host.cpus", Some(3)),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("CPU(s) [17] are offline (online: [0, 1, 2,"),
        "{e}"
    );
    // Isolated CPUs (8 here) that are online are not refused as offline.
    assert!(!e.to_string().contains("[8, 17] are offline"), "{e}");
}

/// A slice shorter than a slice can measure, or a slice of a workload that runs a fixed
/// amount of work, is refused at `slice_ms` with the reason; `slice_ms: 0` (whole runs) is
/// accepted for any workload.
#[test]
fn a_slice_too_short_or_of_a_workload_that_does_not_run_for_a_time_is_refused_at_its_field() {
    for (command, ms, needle) in [
        ("lock", 50, "shorter than a slice can measure"),
        ("mutex", 300, "cannot be sliced"),
    ] {
        let metric = if command == "lock" {
            "ops_per_sec"
        } else {
            "time_s"
        };
        let (_d, l) = loaded(&format!(
            "name: x\nlevels: [1]\nworkloads:\n  - command: {command}\n    metric: {metric}\n    slice_ms: {ms}\n"
        ));
        let e = validate(&l, &facts()).unwrap_err();
        assert_eq!(e.0.len(), 1, "{e}");
        assert_eq!(e.0[0].field, "workloads[0].slice_ms", "{e}");
        assert_eq!(e.0[0].line, Some(6), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
    let (_d, l) =
        loaded("name: x\nlevels: [1]\nworkloads:\n  - command: mutex\n    metric: time_s\n    slice_ms: 0\n");
    validate(&l, &facts()).unwrap();
}

/// An `exec` workload's metrics: each refused at its own field with the reason (no rule or
/// two, a name given twice, a regex that does not compile, a headline not among them, a
/// direction that disagrees with its metric's), `metrics:` on a built-in workload refused, and
/// a good one accepted with its headline's direction.
#[test]
fn an_exec_workloads_metrics_are_checked_at_their_fields() {
    let head = "name: x\nlevels: [1]\nworkloads:\n  - command: exec\n    args: {run: 'echo 1'}\n";
    for (body, field, needle) in [
        (
            "    metric: t\n",
            "workloads[0].metrics",
            "names the metrics it reads",
        ),
        (
            "    metric: t\n    metrics:\n      - {name: t, better: lower}\n",
            "workloads[0].metrics[0]",
            "exactly one of",
        ),
        (
            "    metric: t\n    metrics:\n      - {name: t, wall: true, regex: 'x', better: lower}\n",
            "workloads[0].metrics[0]",
            "exactly one of",
        ),
        (
            "    metric: t\n    metrics:\n      - {name: t, wall: true, better: lower}\n      - {name: t, regex: '(\\d+)', better: higher}\n",
            "workloads[0].metrics[1].name",
            "named twice",
        ),
        (
            "    metric: t\n    metrics:\n      - {name: t, wall: true, better: lower}\n      - {name: n, regex: '(', better: higher}\n",
            "workloads[0].metrics[1].regex",
            "regex",
        ),
        (
            "    metric: nope\n    metrics:\n      - {name: t, wall: true, better: lower}\n",
            "workloads[0].metric",
            "not one of this workload's metrics (t)",
        ),
        (
            "    metric: t\n    better: higher\n    metrics:\n      - {name: t, wall: true, better: lower}\n",
            "workloads[0].better",
            "says higher is better, but its metric 't' says lower",
        ),
    ] {
        let (_d, l) = loaded(&format!("{head}{body}"));
        let e = validate(&l, &facts()).unwrap_err();
        assert!(
            e.0.iter()
                .any(|p| p.field == field && p.to_string().contains(needle)),
            "{body}: {e}"
        );
    }
    let (_d, l) = loaded(
        "name: x\nlevels: [1]\nworkloads:\n  - command: exec\n    args: {run: 'echo 1', metric: 't=wall'}\n    metric: t\n    metrics:\n      - {name: t, wall: true, better: lower}\n",
    );
    let e = validate(&l, &facts()).unwrap_err();
    assert!(
        e.0.iter()
            .any(|p| p.field == "workloads[0].args.metric" && p.to_string().contains("not an argument")),
        "{e}"
    );
    let (_d, l) = loaded(
        "name: x\nlevels: [1]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n    metrics:\n      - {name: t, wall: true, better: lower}\n",
    );
    let e = validate(&l, &facts()).unwrap_err();
    assert_eq!(e.0[0].field, "workloads[0].metrics", "{e}");
    assert!(e.to_string().contains("only an `exec` workload"), "{e}");
    let (_d, l) = loaded(&format!(
        "{head}    metric: t\n    metrics:\n      - {{name: t, wall: true, better: lower}}\n      - {{name: n, regex: 'x (\\d+)', better: higher}}\n"
    ));
    validate(&l, &facts()).unwrap();
    let w = &l.scenario.workloads[0];
    assert_eq!(w.better(), crate::vocabulary::Better::Lower);
    let inst = &expand::workloads(&l.scenario)[0];
    let argv = expand::payload_argv(inst, &expand::variants(&l.scenario)[0]);
    assert_eq!(
        argv,
        [
            "exec",
            "--metric=t=wall",
            "--metric=n=regex:x (\\d+)",
            "--run",
            "echo 1"
        ]
    );
}

/// `guest.files`: a file this machine lacks, a directory, a guest path that is not plain or
/// absolute, the payload's own path and a destination given twice, each refused at its field.
#[test]
fn guest_files_are_checked_at_their_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("bench.sh");
    std::fs::write(&f, "echo 1\n").unwrap();
    let f = f.display().to_string();
    let dir = tmp.path().display().to_string();
    let (_d, l) = loaded(&format!(
        "name: x\nlevels: [1]\nguest:\n  files:\n    - {{from: {f}, to: /root/b.sh}}\n    - {{from: /nonexistent/x, to: /root/x}}\n    - {{from: {dir}, to: /root/d}}\n    - {{from: {f}, to: 'root/rel; rm -rf /'}}\n    - {{from: {f}, to: {}}}\n    - {{from: {f}, to: /root/b.sh}}\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
        crate::payload_bin::GUEST_PATH
    ));
    let e = validate(&l, &facts()).unwrap_err();
    let at = |field: &str, needle: &str| assert_error_at(&e, field, needle);
    at("guest.files[1].from", "No such file");
    at("guest.files[2].from", "is not a file");
    at("guest.files[3].to", "not a plain absolute path");
    at("guest.files[4].to", "where ocrig puts its payload");
    at("guest.files[5].to", "the destination of two files");
    assert_eq!(e.0.len(), 5, "{e}");
}

/// `guest.packages`: a name Debian's rules forbid and a name listed twice, each at its index;
/// whether apt has a package is preflight's question (it asks apt).
#[test]
fn guest_package_names_are_checked_at_their_index() {
    let (_d, l) = loaded(
        "name: x\nlevels: [1]\nguest:\n  packages: [sysbench, Stress_NG, sysbench, 'a; rm -rf /']\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
    );
    let e = validate(&l, &facts()).unwrap_err();
    let at = |field: &str, needle: &str| assert_error_at(&e, field, needle);
    at("guest.packages[1]", "not a Debian package name");
    at("guest.packages[2]", "listed twice");
    at("guest.packages[3]", "not a Debian package name");
    assert_eq!(e.0.len(), 3, "{e}");

    // The host backend has no guest to put them in.
    let (_d, l) = loaded(
        "name: x\nlevels: [1]\nhost: {backend: host}\nguest:\n  packages: [sysbench]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n",
    );
    let e = validate(&l, &facts()).unwrap_err();
    assert_error_at(&e, "guest.packages", "boots no guest");
}

/// `e` holds an error at `field` whose words contain `needle`.
fn assert_error_at(e: &ScenarioErrors, field: &str, needle: &str) {
    assert!(
        e.0.iter()
            .any(|p| p.field == field && p.to_string().contains(needle)),
        "{field}: {needle}: {e}"
    )
}
