use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use serde_json::Value;

use super::build::template_name;
use super::key::{inputs, inputs_on};
use super::stored::{FORMAT, Meta, RamFileMeta};
use super::*;
use crate::backend::BoxFut;
use crate::backend::launcher::Controlled;
use crate::host::Accel;

#[test]
fn the_fixup_sets_the_clock_with_microseconds_and_feeds_the_pool() {
    let c = clone_fixup_command(1_796_110_000.123_456_7, &[0xab, 0x01]);
    assert!(
        c.contains("/usr/libexec/ocrig/date -u -s @1796110000.123457"),
        "{c}"
    );
    assert!(c.contains("date -u -s @1796110000;"), "{c}");
    assert!(c.ends_with("printf %s ab01 >/dev/urandom"), "{c}");
}

#[test]
fn a_template_built_in_this_sweep_that_qemu_cannot_load_is_not_built_again() {
    let root = tempfile::tempdir().unwrap();
    let cache = TemplateCache::new(root.path().to_path_buf());
    let template = |key: &str, built_now| {
        let dir = root.path().join(key);
        std::fs::create_dir_all(&dir).unwrap();
        let m = meta(&dir, "inputs", b"state");
        Template {
            key: key.repeat(64),
            dir,
            meta: m,
            built_now,
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let cell = |key: &str| {
        rt.block_on(async {
            cache
                .cells
                .lock()
                .await
                .get(&key.repeat(64))
                .map(|c| c.get().cloned())
        })
    };
    // From the cache: removed, so the next guest of its shape builds it anew.
    let cached = template("a", false);
    rt.block_on(cache.discard(&cached, "load failed"));
    assert!(cell("a").is_none() && !cached.dir.exists());
    // Built now: the failure is kept, the next guest of its shape boots instead.
    let fresh = template("b", true);
    rt.block_on(cache.discard(&fresh, "load failed"));
    let kept = cell("b").flatten().expect("the failure is kept").unwrap_err();
    assert!(
        kept.contains("QEMU could not load it (load failed); not built again"),
        "{kept}"
    );
    assert!(!fresh.dir.exists());
}

#[test]
fn template_names_carry_the_sweep_run_id() {
    let n = template_name("ocrig-abc123-4");
    assert!(n.starts_with("ocrig-abc123-9"), "{n}");
    assert_eq!(crate::backend::owned::run_id_of(&n), Some("abc123"));
    assert_ne!(template_name("ocrig-abc123-4"), n);
}

fn meta(dir: &Path, inputs: &str, state: &[u8]) -> Meta {
    std::fs::write(dir.join("state"), state).unwrap();
    let m = Meta {
        format: FORMAT.into(),
        key: "k".repeat(64),
        backend: "qemu".into(),
        inputs: inputs.into(),
        state_bytes: state.len() as u64,
        state_sha256: crate::image::sha256_hex(state),
        scratch_bytes: None,
        built_at: "now".into(),
        boot_s: 1.0,
        save_s: 0.5,
        ram_file: None,
    };
    std::fs::write(dir.join("template.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    m
}

#[test]
fn a_template_whose_ram_file_changed_or_went_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = "k".repeat(64);
    let mut m = meta(d, "inputs A", b"state bytes");
    std::fs::write(d.join("ram"), vec![7u8; 8192]).unwrap();
    m.ram_file = Some(RamFileMeta::of(&d.join("ram")).unwrap());
    std::fs::write(d.join("template.json"), serde_json::to_vec(&m).unwrap()).unwrap();
    let t = check(d, &key, "inputs A").unwrap();
    assert_eq!(t.ram(), Some(d.join("ram")));
    // Rewritten in place (same size, new mtime), truncated, or gone: all refused.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(d.join("ram"), vec![8u8; 8192]).unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("RAM file"));
    std::fs::write(d.join("ram"), vec![8u8; 10]).unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("10 bytes"));
    std::fs::remove_file(d.join("ram")).unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("RAM file"));
    // A template without one has no RAM path: its clones load RAM from the state.
    meta(d, "inputs A", b"state bytes");
    assert_eq!(check(d, &key, "inputs A").unwrap().ram(), None);
}

#[test]
fn a_template_is_used_only_with_identical_inputs_and_intact_state() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = "k".repeat(64);
    meta(d, "inputs A", b"state bytes");
    assert!(check(d, &key, "inputs A").is_ok());
    assert!(check(d, &key, "inputs B").unwrap_err().contains("inputs differ"));
    assert!(
        check(d, &"x".repeat(64), "inputs A")
            .unwrap_err()
            .contains("inputs differ")
    );
    // Same size, other bytes: the checksum catches it.
    std::fs::write(d.join("state"), b"STATE BYTES").unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("checksum"));
    std::fs::write(d.join("state"), b"short").unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("bytes"));
    std::fs::remove_file(d.join("state")).unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("state file"));
    std::fs::write(d.join("template.json"), b"{not json").unwrap();
    assert!(check(d, &key, "inputs A").unwrap_err().contains("template.json"));
}

/// A launcher that only describes guests.
struct Describe(&'static str);

impl Launcher for Describe {
    fn kind(&self) -> &'static str {
        "fake"
    }
    fn fingerprint(&self, spec: &GuestSpec, plan: &BootPlan) -> anyhow::Result<String> {
        Ok(format!("{} {} {} {}", self.0, spec.vcpus, plan.cmdline, spec.cpu))
    }
    fn launch<'a>(
        &'a self,
        _: &'a GuestSpec,
        _: &'a BootPlan,
        _: Option<&'a Path>,
    ) -> BoxFut<'a, anyhow::Result<Box<dyn Controlled>>> {
        Box::pin(async { bail!("describes only") })
    }
}

#[test]
fn the_key_covers_every_input_and_a_file_replaced_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let (k, i, d) = (
        dir.path().join("vmlinux"),
        dir.path().join("initrd"),
        dir.path().join("scratch"),
    );
    std::fs::write(&k, "kernel").unwrap();
    std::fs::write(&i, "initrd").unwrap();
    std::fs::write(&d, vec![0u8; 4096]).unwrap();
    let spec = GuestSpec {
        initrd: i.clone(),
        ..crate::testing::spec(Default::default())
    };
    let plan = BootPlan {
        kernel: k.clone(),
        bios: None,
        cmdline: "quiet".into(),
        vmgenid: true,
        facts: Value::Null,
    };
    let base = inputs(&Describe("qemu 10.0.2"), &spec, &plan).unwrap();
    assert_eq!(base, inputs(&Describe("qemu 10.0.2"), &spec, &plan).unwrap());
    let differs = |s: &GuestSpec, p: &BootPlan, l: &Describe| {
        assert_ne!(inputs(l, s, p).unwrap(), base, "{s:?} {p:?}");
    };
    let q = Describe("qemu 10.0.2");
    differs(&spec, &plan, &Describe("qemu 10.1.0"));
    differs(
        &GuestSpec {
            vcpus: 4,
            ..spec.clone()
        },
        &plan,
        &q,
    );
    differs(
        &GuestSpec {
            accel: Accel::Kvm,
            ..spec.clone()
        },
        &plan,
        &q,
    );
    differs(
        &GuestSpec {
            scratch_disk: Some(d.clone()),
            ..spec.clone()
        },
        &plan,
        &q,
    );
    differs(
        &spec,
        &BootPlan {
            cmdline: "quiet nopvspin".into(),
            ..plan.clone()
        },
        &q,
    );
    differs(
        &spec,
        &BootPlan {
            bios: Some(i.clone()),
            ..plan.clone()
        },
        &q,
    );
    // Under KVM: the host kernel release and every KVM module parameter are in the key.
    let root = tempfile::tempdir().unwrap();
    let host = crate::testing::RootedFs::new(root.path());
    host.write("/proc/sys/kernel/osrelease", "6.1.0-41-amd64\n");
    host.write("/sys/module/kvm/parameters/halt_poll_ns", "200000\n");
    host.write("/sys/module/kvm_intel/parameters/ple_gap", "128\n");
    let kvm = GuestSpec {
        accel: Accel::Kvm,
        ..spec.clone()
    };
    let on_kvm = inputs_on(&q, &kvm, &plan, &host).unwrap();
    assert!(
        on_kvm.contains("host-kernel 6.1.0-41-amd64\n")
            && on_kvm.contains("kvm-param kvm_intel.ple_gap=128\n"),
        "{on_kvm}"
    );
    host.write("/sys/module/kvm_intel/parameters/ple_gap", "0\n");
    assert_ne!(
        inputs_on(&q, &kvm, &plan, &host).unwrap(),
        on_kvm,
        "ple_gap=0 is another template"
    );
    host.write("/sys/module/kvm_intel/parameters/ple_gap", "128\n");
    host.write("/proc/sys/kernel/osrelease", "6.6.0-1-amd64\n");
    assert_ne!(
        inputs_on(&q, &kvm, &plan, &host).unwrap(),
        on_kvm,
        "another host kernel"
    );
    assert!(
        !base.contains("host-kernel"),
        "TCG templates do not depend on KVM's parameters"
    );
    // The same path with other contents (a kernel rebuilt in place) is another template.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&k, "kernel, rebuilt").unwrap();
    differs(&spec, &plan, &q);
}

#[test]
fn eviction_keeps_the_most_recently_used() {
    let root = tempfile::tempdir().unwrap();
    for (i, age) in [(0, 30u64), (1, 10), (2, 20)] {
        let d = root.path().join(format!("t{i}"));
        std::fs::create_dir(&d).unwrap();
        let f = std::fs::File::create(d.join("template.json")).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(age))
            .unwrap();
    }
    evict(root.path(), 2);
    let mut left: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["t1", "t2"]);
}
