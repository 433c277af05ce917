use super::*;
use crate::host::Accel;

fn spec() -> GuestSpec {
    GuestSpec {
        cmdline: "console=ttyS0 panic=-1 a<b&c".into(),
        ..crate::testing::spec(Default::default())
    }
}

fn plan(s: &GuestSpec, pvh: bool) -> BootPlan {
    BootPlan {
        kernel: if pvh {
            "/k/vmlinux".into()
        } else {
            s.kernel.clone()
        },
        bios: pvh.then(|| "/usr/share/qemu/qboot.rom".into()),
        cmdline: format!("quiet {}", s.cmdline),
        vmgenid: !pvh,
        facts: serde_json::Value::Null,
    }
}

/// The test spec's domain booted normally, placed and labelled by libvirt's defaults.
fn plain_xml() -> String {
    domain_xml(
        &spec(),
        &plan(&spec(), false),
        40022,
        None,
        &Default::default(),
        &[],
    )
}

#[test]
fn domain_xml_matches_the_qemu_backend_devices() {
    let x = plain_xml();
    assert!(x.starts_with("<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>"));
    assert!(x.contains("<name>ocrig-t-0</name>"));
    assert!(x.contains("<memory unit='MiB'>512</memory>") && x.contains(">2</vcpu>"));
    assert!(x.contains("machine='q35'>hvm</type>"));
    assert!(x.contains("<kernel>/k/vmlinuz</kernel>") && x.contains("<initrd>/k/initrd.img</initrd>"));
    assert!(
        x.contains("<cmdline>quiet console=ttyS0 panic=-1 a&lt;b&amp;c</cmdline>"),
        "{x}"
    );
    assert!(!x.contains("<loader") && !x.contains("-incoming"));
    assert!(x.contains("<genid/>"), "no qboot here: a template's plan");
    assert!(x.contains("<cpu mode='maximum' check='none'><topology sockets='1' dies='1' cores='2'"));
    // The console is where the QEMU backend puts it, so the sweep's readiness poll is the same.
    let con = console_path(Path::new("/w"), "ocrig-t-0");
    assert!(x.contains(&format!(
        "<serial type='file'><source path='{}' append='on'/>",
        con.display()
    )));
    assert!(x.contains("<qemu:arg value='unix:/w/ocrig-t-0.qmp,server=on,wait=off'/>"));
    assert!(x.contains("<qemu:arg value='user,id=n0,hostfwd=tcp:127.0.0.1:40022-:22'/>"));
    assert!(x.contains("<qemu:arg value='virtio-net-pci,netdev=n0,bus=pcie.0,addr=0x10'/>"));
    assert!(x.contains("<rng model='virtio'>") && x.contains("<memballoon model='none'/>"));
    assert!(!x.contains("<disk") && !x.contains("value='-cpu'"));
    assert!(x.contains("<on_reboot>destroy</on_reboot>") && x.contains("<acpi/>"));
    assert!(x.trim_end().ends_with("</domain>"));
}

#[test]
fn domain_xml_for_kvm_with_cpu_flags_and_a_scratch_disk() {
    let s = GuestSpec {
        accel: Accel::Kvm,
        cpu: "host,kvm-pv-unhalt=off".into(),
        scratch_disk: Some("/d/scratch.img".into()),
        vcpus: 4,
        ..spec()
    };
    let x = domain_xml(
        &s,
        &plan(&s, true),
        1,
        Some(Path::new("/t/state")),
        &Default::default(),
        &[],
    );
    // PVH with qboot as a ROM loader (libvirt turns it into -bios), restoring a state file.
    assert!(x.contains("<loader type='rom' readonly='yes'>/usr/share/qemu/qboot.rom</loader>"));
    assert!(x.contains("<kernel>/k/vmlinux</kernel>") && !x.contains("<genid/>"));
    assert!(
        x.contains("<qemu:arg value='-incoming'/>\n    <qemu:arg value='file:/t/state'/>"),
        "{x}"
    );
    assert!(x.starts_with("<domain type='kvm'"));
    assert!(x.contains("<cpu mode='host-passthrough' check='none'><topology sockets='1' dies='1' cores='4'"));
    // Flags reach QEMU verbatim as the last -cpu, which QEMU honours.
    assert!(
        x.contains("<qemu:arg value='-cpu'/>\n    <qemu:arg value='host,kvm-pv-unhalt=off'/>"),
        "{x}"
    );
    assert!(x.contains("<driver name='qemu' type='raw' cache='none'/>"));
    assert!(x.contains("<source file='/d/scratch.img'/>") && x.contains("<target dev='vda' bus='virtio'/>"));
}

#[test]
fn cpu_models_map_to_libvirt_modes() {
    assert_eq!(cpu_xml("max", 1).1, None);
    assert_eq!(cpu_xml("max,pmu=off", 1).1.as_deref(), Some("max,pmu=off"));
    let (e, o) = cpu_xml("Skylake-Server", 2);
    assert!(
        e.contains("<cpu mode='custom' match='exact' check='none'><model fallback='forbid'>Skylake-Server")
    );
    assert_eq!(o, None);
}

#[test]
fn vcpu_thread_names_parse() {
    assert_eq!(parse_vcpu_comm("CPU 0/TCG"), Some(0));
    assert_eq!(parse_vcpu_comm("CPU 12/KVM"), Some(12));
    assert_eq!(parse_vcpu_comm("ALL CPUs/TCG"), None);
    assert_eq!(parse_vcpu_comm("IO mon_iothread"), None);
    assert_eq!(cpumap(&[0]), vec![1]);
    assert_eq!(cpumap(&[9]), vec![0, 2]);
    assert_eq!(cpumap(&[0, 1, 9]), vec![3, 2]);
}

#[test]
fn destroy_named_refuses_foreign_domains() {
    let e = destroy_named("qemu:///system", "webserver").unwrap_err();
    assert!(e.to_string().contains("not an ocrig domain"));
}

/// The newest cached guest image (`~/.cache/ocrig/images/<hash>/`), or `$OCRIG_TEST_IMAGE`.
fn test_image() -> PathBuf {
    if let Some(d) = std::env::var_os("OCRIG_TEST_IMAGE") {
        return d.into();
    }
    let root = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ocrig/images");
    std::fs::read_dir(&root)
        .expect("no image cache; build one with `ocrig image build`")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("vmlinuz").exists() && p.join("initrd.img").exists() && p.join("vmlinux").exists())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .expect("no complete image in the cache")
}

fn ssh(img: &Path, port: u16, cmd: &str) -> String {
    let out = std::process::Command::new("ssh")
        .args([
            "-i",
            &img.join("id_ed25519").to_string_lossy(),
            "-p",
            &port.to_string(),
        ])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ])
        .args([
            "-o",
            "ConnectTimeout=20",
            "-o",
            "LogLevel=ERROR",
            "root@127.0.0.1",
            cmd,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ssh {cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Boots real 1- and 2-vCPU domains on qemu:///system, whatever its qemu.conf says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: boots real guests through libvirtd (~15 s)"
)]
async fn boots_pins_and_destroys_real_domains() {
    let uri = "qemu:///system";
    let backend = LibvirtBackend::connect(uri).unwrap();
    let img = test_image();
    let work = tempfile::tempdir().unwrap();
    let accel = crate::host::VirtEvidence::read().choose().accel;
    let run = format!("lvtest{}", std::process::id());
    for vcpus in [1u32, 2] {
        let spec = GuestSpec {
            name: format!("ocrig-{run}-{vcpus}"),
            vcpus,
            memory_mib: 512,
            kernel: img.join("vmlinuz"),
            initrd: img.join("initrd.img"),
            cmdline: "console=ttyS0 panic=-1".into(),
            accel,
            cpu: if accel == Accel::Kvm {
                "host".into()
            } else {
                "max".into()
            },
            scratch_disk: None,
            workdir: work.path().into(),
            fast_kernel: crate::backend::FastKernel::Pvh(img.join("vmlinux")),
            start: crate::vocabulary::StartMethod::Boot,
            ram: crate::backend::RamBacking::Anonymous,
        };
        let t0 = std::time::Instant::now();
        let mut g = backend.boot(&spec).await.unwrap();
        let created = t0.elapsed();
        assert!(g.is_running());
        assert_eq!(g.console_log(), console_path(work.path(), &spec.name));
        let deadline = t0 + Duration::from_secs(120);
        loop {
            let con = std::fs::read_to_string(g.console_log()).unwrap_or_default();
            if con.contains("OCRIG-READY") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no OCRIG-READY:\n{con}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ready = t0.elapsed();
        assert_eq!(ssh(&img, g.ssh_addr().port(), "nproc"), vcpus.to_string());
        let tids = g.vcpu_threads().await.unwrap();
        assert_eq!(tids.len(), vcpus as usize);
        // Root, as the domain's own <seclabel> asks (scripts/setup leaves qemu.conf, whose
        // default user is libvirt-qemu, as it is).
        let status = std::fs::read_to_string(format!("/proc/{}/status", tids[0])).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert_eq!(uid.split_whitespace().nth(1), Some("0"), "{uid}");
        let map = g.pin_vcpus(&[vec![1], vec![0]]).await.unwrap();
        for (i, tid) in tids.iter().enumerate() {
            let out = std::process::Command::new("taskset")
                .args(["-p", &tid.to_string()])
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let want = format!("{:x}", 1u32 << map[i].1[0]);
            assert!(out.ends_with(&format!(": {want}")), "vCPU {i} tid {tid}: {out}");
            eprintln!("vCPU {i} → CPU {:?}: {out}", map[i].1);
        }
        let live = list_owned(uri, &format!("ocrig-{run}-")).unwrap();
        assert_eq!(live, vec![spec.name.clone()]);
        eprintln!(
            "{vcpus} vCPU(s): create_xml {:.2} s, OCRIG-READY {:.2} s, vCPU tids {tids:?}",
            created.as_secs_f64(),
            ready.as_secs_f64()
        );
        g.shutdown(Duration::from_secs(5)).await.unwrap();
        assert!(!g.is_running());
        g.shutdown(Duration::from_secs(5)).await.unwrap(); // idempotent
        assert!(list_owned(uri, &format!("ocrig-{run}-")).unwrap().is_empty());
    }
    // Dropping a running guest destroys it too.
    let spec = GuestSpec {
        name: format!("ocrig-{run}-drop"),
        vcpus: 1,
        memory_mib: 256,
        kernel: img.join("vmlinuz"),
        initrd: img.join("initrd.img"),
        cmdline: "console=ttyS0".into(),
        accel,
        cpu: "max".into(),
        scratch_disk: None,
        workdir: work.path().into(),
        fast_kernel: crate::backend::FastKernel::Pvh(img.join("vmlinux")),
        start: crate::vocabulary::StartMethod::Boot,
        ram: crate::backend::RamBacking::Anonymous,
    };
    let g = backend.boot(&spec).await.unwrap();
    assert_eq!(list_owned(uri, &spec.name).unwrap().len(), 1);
    drop(g);
    assert!(
        list_owned(uri, "ocrig-")
            .unwrap()
            .iter()
            .all(|n| !n.contains(&run))
    );
    destroy_named(uri, &spec.name).unwrap(); // already gone is fine
}

#[test]
fn a_domain_starts_on_its_cpus_with_its_memory_bound_and_its_other_threads_aside() {
    let start = crate::backend::StartPlacement {
        cpus: vec![2, 4],
        memory_nodes: vec![0],
        others: vec![0, 1],
    };
    let x = domain_xml(&spec(), &plan(&spec(), false), 40022, None, &start, &[]);
    assert!(
        x.contains("  <vcpu placement='static' cpuset='2,4'>2</vcpu>\n"),
        "{x}"
    );
    assert!(
        x.contains("  <cputune><emulatorpin cpuset='0,1'/></cputune>\n"),
        "{x}"
    );
    assert!(
        x.contains("  <numatune><memory mode='strict' nodeset='0'/></numatune>\n"),
        "{x}"
    );
    // Nothing said, nothing placed: libvirt's defaults.
    let x = plain_xml();
    assert!(
        !x.contains("cpuset") && !x.contains("numatune") && !x.contains("cputune"),
        "{x}"
    );
    assert_eq!(
        start.describe(),
        "QEMU starts on CPUs 2,4; guest memory bound to NUMA node(s) 0; under libvirt its other threads start on CPUs 0,1"
    );
}

#[test]
fn kvm_guests_of_every_variant_kind_match_their_golden_domain_xml() {
    for (name, s, p, incoming) in crate::testing::kvm_variant_cases() {
        let x = domain_xml(&s, &p, 40022, incoming, &Default::default(), &[]);
        assert!(x.starts_with("<domain type='kvm'"), "{name}");
        crate::testing::golden(&format!("kvm-{name}.libvirt.xml"), &x);
    }
}

#[test]
fn each_domain_runs_its_qemu_as_root_unconfined_by_its_own_seclabel() {
    // This machine's capabilities (qemu.conf security_driver "none"), and a Debian host with
    // AppArmor as shipped (QEMU as libvirt-qemu): the models are read from <host> only.
    let none_dac = "<capabilities><host><cpu/><secmodel><model>none</model><doi>0</doi></secmodel>\
        <secmodel><model>dac</model><doi>0</doi><baselabel type='kvm'>+0:+0</baselabel></secmodel></host>\
        <guest><secmodel><model>ignored</model></secmodel></guest></capabilities>";
    let apparmor = "<capabilities><host><secmodel>\n<model>apparmor</model>\n<doi>0</doi>\n</secmodel>\
        <secmodel><model>dac</model><doi>0</doi><baselabel type='kvm'>+64055:+994</baselabel></secmodel></host></capabilities>";
    assert_eq!(security_models(none_dac), ["none", "dac"]);
    assert_eq!(security_models(apparmor), ["apparmor", "dac"]);
    assert!(security_models("<capabilities/>").is_empty());
    let dac = "  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>";
    assert_eq!(seclabel_xml(&security_models(none_dac)), [dac]);
    assert_eq!(
        seclabel_xml(&security_models(apparmor)),
        ["  <seclabel type='none' model='apparmor'/>", dac]
    );
    // In the domain, after its devices.
    let models = security_models(apparmor);
    let x = domain_xml(
        &spec(),
        &plan(&spec(), false),
        40022,
        None,
        &Default::default(),
        &models,
    );
    let devices_end = x.find("</devices>").unwrap();
    let label = x.find("<seclabel type='none' model='apparmor'/>").unwrap();
    assert!(label > devices_end && x.contains(dac), "{x}");
}
