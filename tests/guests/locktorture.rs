//! The kernel's lock torture as a workload on real guests (issue 35): the test kernel trees
//! (tests/kernel/build-test-kernel: `base`, and `spinfirst` with up to 64 trylocks before the
//! qspinlock slowpath queues) boot in 2-vCPU guests at 1x and 2x; the payload loads
//! locktorture at the gate with spin_lock and 4 writers, unloads it after the run, and reads the
//! kernel's own final statistics. Checked: every run's figures are the kernel's words (writes
//! per second = the Writes total over the run, the fewest / the most of one writer, `End of
//! test: SUCCESS`), the module is gone after each run (the next load succeeded), the two
//! kernels are told apart, and the report compares them at each level with an interval.

use std::time::Instant;

use serde_json::Value;

use crate::common;

#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: boots guests (~41 s)")]
fn locktorture_runs_in_guests_of_a_kernel_built_with_it_and_compares_two_kernels() {
    let _one = common::one_sweep();
    let trees = common::test_kernel_trees();
    let (base, spinfirst) = (&trees["base"], &trees["spinfirst"]);
    // The shipped scenario, pointed at these trees, is valid as it stands otherwise.
    common::validate_shipped_with_trees(
        "examples/locktorture.yaml",
        &[("/srv/kernels/base", base), ("/srv/kernels/spinfirst", spinfirst)],
    );
    let scenario = format!(
        "name: locktorture-e2e\nhost: {{cpus: 2, backend: qemu}}\n\
         guest: {{vcpus: 2, memory_mib: 256}}\nlevels: [1.0, 2.0]\n\
         variants:\n  - name: base\n    baseline: true\n    kernel: {{tree: {}}}\n\
         \x20 - name: spinfirst\n    kernel: {{tree: {}}}\n\
         workloads:\n  - name: spin_lock\n    command: locktorture\n\
         \x20   args: {{torture-type: spin_lock, writers: 4, duration-ms: 1500}}\n\
         \x20   metric: writes_per_sec\n    better: higher\nruns: 2\n",
        base.display(),
        spinfirst.display()
    );
    let t0 = Instant::now();
    let (_tmp, results) = common::run_scenario("locktorture.yaml", &scenario);
    eprintln!("sweep took {:.1} s", t0.elapsed().as_secs_f64());
    let dir = common::results_dir(&results);
    let (header, records) = common::journal(&dir);
    let runs: Vec<Value> = records
        .into_iter()
        .filter(|r| r["type"] == "run" && r["ok"] == true && r["warmup"] != true)
        .collect();

    // Two kernels of one release, told apart.
    let id = &header["kernel_identity"];
    assert_ne!(id["base"]["sha256"], id["spinfirst"]["sha256"], "{header}");

    // Each level and variant has its runs (2 bring-ups a side), each guest's report the
    // kernel's own statistics.
    for level in [1.0, 2.0] {
        for v in ["base", "spinfirst"] {
            let cell: Vec<&Value> = runs
                .iter()
                .filter(|r| r["variant"] == v && r["level"] == level)
                .collect();
            assert!(cell.len() >= 2, "{v} at {level}x: {} runs", cell.len());
            let mut line = Vec::new();
            for r in &cell {
                let p = &r["payload"];
                assert_eq!(p["workload"], "locktorture", "{p}");
                assert_eq!(p["torture_type"], "spin_lock");
                assert_eq!(p["end_of_test"], "SUCCESS", "{p}");
                let w = &p["writes"];
                let (total, secs) = (w["total"].as_f64().unwrap(), p["elapsed_s"].as_f64().unwrap());
                assert!(total > 0.0 && w["fail"] == 0, "{w}");
                // The headline is the kernel's total over the run, as timed by the payload.
                assert!((secs - 1.5).abs() < 0.5, "{secs} s");
                let per_sec = p["metrics"]["writes_per_sec"].as_f64().unwrap();
                assert!(
                    (per_sec - total / secs).abs() <= 1e-6 * per_sec,
                    "{per_sec} vs {total}/{secs}"
                );
                // 4 writers: the fewest and the most of one writer bound a quarter of the total.
                let (max, min) = (w["max"].as_f64().unwrap(), w["min"].as_f64().unwrap());
                assert!(min <= total / 4.0 && total / 4.0 <= max && max <= total, "{w}");
                let fair = w["min_over_max"].as_f64().unwrap();
                assert!(
                    (fair - min / max).abs() < 1e-9 && fair > 0.0 && fair <= 1.0,
                    "{w}"
                );
                assert!(
                    p["log"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|l| l.as_str().unwrap().contains("End of test: SUCCESS")),
                    "{p}"
                );
                assert!(
                    p["checks"].as_array().unwrap().iter().all(|c| c["ok"] == true),
                    "{p}"
                );
                line.push(format!("{:.0}/s min/max {fair:.2}", per_sec));
            }
            eprintln!("{v} at {level}x: {}", line.join("; "));
        }
    }

    // The report compares the two kernels at each level, with an interval (2 bring-up pairs:
    // wide, but an interval and a conclusion, not a bare mean).
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let w = &json["workloads"][0];
    assert_eq!(w["metric"], "writes_per_sec", "{w}");
    let rows = w["comparisons"][0]["rows"].as_array().unwrap();
    assert_eq!(w["comparisons"][0]["variant"], "spinfirst");
    assert_eq!(rows.len(), 2, "{w}");
    for r in rows {
        let e = &r["effect"];
        let (ratio, low, high) = common::checked_effect(r);
        assert!(r["conclusion"].is_string(), "{r}");
        eprintln!(
            "spinfirst / base at {}x: {ratio:.3} [{low:.3}, {high:.3}] ({} over {}), {}",
            r["level"], e["unit"], e["n_variant"], r["conclusion"]
        );
    }
}
