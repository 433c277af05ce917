//! A variant's `trace_events` naming an event the guest kernel does not have is refused by
//! `ocrig validate` and `ocrig run` before anything boots: exit 2, naming the file, the line,
//! the field and the kernel. The kernel's event list is read from its image (built here first
//! if this machine has none: `ocrig image build`, which the e2e tests also use).

use std::process::{Command, Output};

fn ocrig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ocrig"))
        .args(args)
        .output()
        .expect("running ocrig")
}

fn scenario(events: &str) -> String {
    format!(
        "name: traced\nhost:\n  cpus: 2\nguest:\n  vcpus: 1\nlevels: [0.5]\nvariants:\n  - {{name: base, baseline: true}}\n  - name: traced\n    trace_events: [{events}]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\nruns: 1\n"
    )
}

#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: builds and reads the guest image (root) (~1 s)"
)]
fn an_event_the_guest_kernel_lacks_is_refused_before_boot_naming_line_field_and_kernel() {
    let built = ocrig(&["image", "build"]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("traced.yaml");

    std::fs::write(&file, scenario("lock:contention_begin, lock:contention_bogus")).unwrap();
    let out = ocrig(&["validate", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Line 10 holds the list; the second event is the bad one.
    assert!(err.contains(&format!("{}:10", file.display())), "{err}");
    assert!(err.contains("variants[1].trace_events[1]"), "{err}");
    assert!(
        err.contains("has no trace event 'lock:contention_bogus'"),
        "{err}"
    );
    assert!(err.contains("amd64"), "the kernel is named: {err}");
    assert!(
        err.contains("contention_begin, contention_end"),
        "the system's real events: {err}"
    );
    assert!(
        !err.contains("trace_events[0]"),
        "the good event is not refused: {err}"
    );

    // `ocrig run` refuses it the same way, before a results directory or a guest exists.
    let results = dir.path().join("results");
    let out = ocrig(&[
        "run",
        file.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has no trace event 'lock:contention_bogus'"),
        "{err}"
    );
    assert!(!results.exists());

    // Events the kernel has, built in and from a module the image loads (ext4), pass.
    std::fs::write(
        &file,
        scenario("lock:contention_begin, sched:sched_switch, ext4:ext4_sync_fs"),
    )
    .unwrap();
    let out = ocrig(&["validate", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
