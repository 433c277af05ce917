//! QEMU driven directly: one `qemu-system-x86_64` process per guest, a QMP socket for
//! vCPU thread ids, saving templates and orderly power-off, user-mode networking with SSH
//! forwarded from a free port on 127.0.0.1 only. How the kernel starts (PVH or bzImage) comes
//! from `boot.rs`; booting versus cloning from `started.rs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::boot::BootPlan;
use super::launcher::{Controlled, Launcher};
use super::paths::{console_path, pid_path, qmp_path};
use super::qmp::{Qmp, QmpSlot};
use super::started::Starter;
use super::{
    Backend, BoxFut, Guest, GuestSpec, Liveness, RamBacking, free_loopback_port, pin_thread, process_alive,
};
use crate::host::Accel;

pub struct QemuBackend {
    pub binary: PathBuf,
    starter: Starter,
    /// The host CPUs every QEMU starts on (its affinity from exec on; empty: ocrig's own), so
    /// guest RAM is first touched, and so placed, by threads on the measured CPUs' node, before
    /// the vCPUs are pinned one by one.
    start: super::StartPlacement,
}

impl Default for QemuBackend {
    fn default() -> Self {
        Self::with_starter(Starter::default())
    }
}

impl QemuBackend {
    pub fn with_starter(starter: Starter) -> Self {
        Self {
            binary: PathBuf::from("qemu-system-x86_64"),
            starter,
            start: super::StartPlacement::default(),
        }
    }

    /// Every QEMU started on `start.cpus` with its memory bound to `start.memory_nodes` (its
    /// other threads are moved once they exist: QEMU has no flag to place them at start).
    pub fn starting_on(mut self, start: super::StartPlacement) -> Self {
        self.start = start;
        self
    }
}

/// `set_mempolicy`'s strict mode: pages come only from the nodes given.
const MPOL_BIND: libc::c_long = 2;
/// Nodes a mask holds (the kernel's largest `MAX_NUMNODES` is 1024).
const NODE_MASK_BITS: usize = 1024;

/// `nodes` as `set_mempolicy`'s node mask, None when empty (no binding); Err for a node past
/// the mask. Built before the fork: the child may only make system calls.
fn node_mask(nodes: &[usize]) -> anyhow::Result<Option<Vec<libc::c_ulong>>> {
    if nodes.is_empty() {
        return Ok(None);
    }
    let word = libc::c_ulong::BITS as usize;
    let mut mask = vec![0 as libc::c_ulong; NODE_MASK_BITS / word];
    for &n in nodes {
        anyhow::ensure!(
            n < NODE_MASK_BITS,
            "NUMA node {n}: past the {NODE_MASK_BITS} a node mask holds"
        );
        mask[n / word] |= 1 << (n % word);
    }
    Ok(Some(mask))
}

/// QEMU's command line for a guest whose SSH is forwarded from `ssh_port`, booting `plan` or,
/// with `incoming`, restoring that saved state.
pub fn qemu_args(spec: &GuestSpec, plan: &BootPlan, ssh_port: u16, incoming: Option<&Path>) -> Vec<String> {
    let wd = &spec.workdir;
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["-name", &format!("{},debug-threads=on", spec.name)]);
    match ram_file(spec) {
        Some((path, share)) => {
            push(&["-machine", &format!("q35,memory-backend={RAM_ID}")]);
            push(&[
                "-object",
                &format!(
                    "memory-backend-file,id={RAM_ID},size={}M,mem-path={},share={share}",
                    spec.memory_mib,
                    path.display()
                ),
            ]);
        }
        None => push(&["-machine", "q35"]),
    }
    match spec.accel {
        // One host thread per vCPU under TCG too, so host oversubscription preempts vCPUs.
        Accel::Tcg => push(&["-accel", "tcg,thread=multi"]),
        Accel::Kvm => push(&["-accel", "kvm"]),
    }
    push(&["-cpu", &spec.cpu]);
    push(&[
        "-smp",
        &spec.vcpus.to_string(),
        "-m",
        &spec.memory_mib.to_string(),
    ]);
    push(&["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
    if let Some(bios) = &plan.bios {
        push(&["-bios", &bios.to_string_lossy()]);
    }
    push(&[
        "-kernel",
        &plan.kernel.to_string_lossy(),
        "-initrd",
        &spec.initrd.to_string_lossy(),
    ]);
    push(&["-append", &plan.cmdline]);
    let console = console_path(wd, &spec.name);
    // append: a clone's log starts with its template's boot log (see template/clone.rs).
    push(&[
        "-chardev",
        &format!("file,id=con0,path={},append=on", console.display()),
        "-serial",
        "chardev:con0",
    ]);
    push(&[
        "-netdev",
        &format!("user,id=n0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22"),
        "-device",
        "virtio-net-pci,netdev=n0",
    ]);
    push(&["-device", "virtio-rng-pci"]);
    if plan.vmgenid {
        // A new VM generation ID per QEMU: a restored clone's kernel sees it change and reseeds
        // its RNG at once (Linux's vmgenid driver, built into Debian's kernel).
        push(&["-device", "vmgenid,guid=auto"]);
    }
    if let Some(disk) = &spec.scratch_disk {
        push(&[
            "-drive",
            &format!("file={},if=virtio,format=raw,cache=none", disk.display()),
        ]);
    }
    push(&[
        "-qmp",
        &format!("unix:{},server=on,wait=off", qmp_path(wd, &spec.name).display()),
    ]);
    push(&["-pidfile", &pid_path(wd, &spec.name).to_string_lossy()]);
    match (incoming, &spec.ram) {
        // A clone of a template whose RAM is a file loads a stream without RAM: the migration
        // capability that says so (`x-ignore-shared`) must be set before the stream is read,
        // which QMP can only do while QEMU waits for `migrate-incoming` (see template/clone.rs).
        (Some(_), RamBacking::CloneOf(_)) => push(&["-incoming", "defer"]),
        (Some(state), _) => push(&["-incoming", &format!("file:{}", state.display())]),
        (None, _) => {}
    }
    a
}

/// The memory backend's id for a guest whose RAM is a file.
const RAM_ID: &str = "ocrig-ram";

/// A guest's RAM file and whether QEMU maps it shared (`on`: the template writes its RAM to
/// the file) or private (`off`: a clone's writes stay its own).
fn ram_file(spec: &GuestSpec) -> Option<(&Path, &'static str)> {
    match &spec.ram {
        RamBacking::Anonymous => None,
        RamBacking::TemplateFile(p) => Some((p, "on")),
        RamBacking::CloneOf(p) => Some((p, "off")),
    }
}

/// The guest-independent part of `qemu_args`: per-guest names, paths and the port masked.
fn masked_args(spec: &GuestSpec, plan: &BootPlan) -> String {
    let masked = GuestSpec {
        name: "NAME".into(),
        workdir: "/WORKDIR".into(),
        scratch_disk: spec.scratch_disk.as_ref().map(|_| "/SCRATCH".into()),
        // Where RAM lives is the template's own choice, recorded in its format, not an input.
        ram: RamBacking::Anonymous,
        ..spec.clone()
    };
    qemu_args(&masked, plan, 0, None).join("\n")
}

/// `path size mtime` of the QEMU binary found on PATH, and its version line.
pub fn qemu_identity(binary: &Path) -> String {
    let found = if binary.components().count() > 1 {
        Some(binary.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(binary))
                .find(|c| c.is_file())
        })
    };
    let stamp = found
        .as_deref()
        .and_then(|p| super::template::file_stamp(p).ok())
        .unwrap_or_else(|| binary.display().to_string());
    let version = crate::host::tool_version(&binary.to_string_lossy(), &["--version"]).unwrap_or_default();
    format!("qemu {stamp} {version}")
}

impl Backend for QemuBackend {
    fn name(&self) -> &'static str {
        "qemu"
    }

    fn boot<'a>(&'a self, spec: &'a GuestSpec) -> BoxFut<'a, anyhow::Result<Box<dyn Guest>>> {
        Box::pin(self.starter.start(self, spec))
    }
}

impl Launcher for QemuBackend {
    fn kind(&self) -> &'static str {
        "qemu"
    }

    fn ram_files(&self) -> bool {
        true
    }

    fn fingerprint(&self, spec: &GuestSpec, plan: &BootPlan) -> anyhow::Result<String> {
        Ok(format!(
            "{}\n{}",
            qemu_identity(&self.binary),
            masked_args(spec, plan)
        ))
    }

    fn launch<'a>(
        &'a self,
        spec: &'a GuestSpec,
        plan: &'a BootPlan,
        incoming: Option<&'a Path>,
    ) -> BoxFut<'a, anyhow::Result<Box<dyn Controlled>>> {
        Box::pin(async move {
            // A port picked free can be taken before QEMU binds it; retry with another.
            let mut last_err = None;
            for _ in 0..3 {
                match self.start(spec, plan, incoming).await {
                    Ok(g) => return Ok(Box::new(g) as Box<dyn Controlled>),
                    Err(e) => last_err = Some(e),
                }
            }
            Err(last_err.expect("three attempts"))
        })
    }
}

impl QemuBackend {
    async fn start(
        &self,
        spec: &GuestSpec,
        plan: &BootPlan,
        incoming: Option<&Path>,
    ) -> anyhow::Result<QemuGuest> {
        std::fs::create_dir_all(&spec.workdir)
            .with_context(|| format!("creating {}", spec.workdir.display()))?;
        let port = free_loopback_port().context("finding a free loopback port")?;
        let log_path = spec.workdir.join(format!("{}.qemu.log", spec.name));
        let log = std::fs::File::create(&log_path)?;
        let _ = std::fs::remove_file(qmp_path(&spec.workdir, &spec.name));
        let mut cmd = Command::new(&self.binary);
        cmd.args(qemu_args(spec, plan, port, incoming))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            // Own process group: a Ctrl-C at the terminal reaches ocrig, which stops guests in order.
            .process_group(0);
        // The start CPUs as a kernel CPU set, built here: the child may only make system calls.
        let start_set = (!self.start.cpus.is_empty()).then(|| {
            // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for &c in &self.start.cpus {
                unsafe { libc::CPU_SET(c, &mut set) };
            }
            set
        });
        let node_mask = node_mask(&self.start.memory_nodes)?;
        // SAFETY: prctl, sched_setaffinity and set_mempolicy are async-signal-safe system calls.
        // The first makes the kernel kill QEMU if ocrig dies (even by SIGKILL), so no guest
        // outlives the orchestrator; the second starts QEMU on the measured CPUs; the third binds
        // every page QEMU allocates from then on (guest RAM included, whichever thread touches
        // it first) to the measured CPUs' nodes. Both are inherited across exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(set) = &start_set
                    && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(mask) = &node_mask
                    && libc::syscall(
                        libc::SYS_set_mempolicy,
                        MPOL_BIND,
                        mask.as_ptr(),
                        NODE_MASK_BITS + 1,
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let qmp = match Qmp::connect(&qmp_path(&spec.workdir, &spec.name), Duration::from_secs(15)).await {
            Ok(q) => q,
            Err(e) => {
                let _ = child.kill().await;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(e.context(format!("QEMU for {} did not come up: {}", spec.name, log.trim())));
            }
        };
        Ok(QemuGuest {
            _live: child.id().and_then(super::live::LiveProcess::register),
            name: spec.name.clone(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            console: console_path(&spec.workdir, &spec.name),
            log: log_path,
            child,
            qmp: QmpSlot::new(qmp),
        })
    }
}

pub struct QemuGuest {
    /// On the signal kill list ([`super::live`]) while the guest is ours.
    _live: Option<super::live::LiveProcess>,
    name: String,
    addr: SocketAddr,
    console: PathBuf,
    /// QEMU's stdout and stderr.
    log: PathBuf,
    child: Child,
    qmp: QmpSlot,
}

impl Controlled for QemuGuest {
    fn qmp<'a>(
        &'a self,
        command: &'a str,
        args: serde_json::Value,
    ) -> BoxFut<'a, anyhow::Result<serde_json::Value>> {
        Box::pin(self.qmp.execute(command, args))
    }

    fn qemu_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Guest for QemuGuest {
    fn name(&self) -> &str {
        &self.name
    }

    fn ssh_addr(&self) -> SocketAddr {
        self.addr
    }

    fn console_log(&self) -> PathBuf {
        self.console.clone()
    }

    fn vcpu_threads(&self) -> BoxFut<'_, anyhow::Result<Vec<i32>>> {
        Box::pin(self.qmp.vcpu_thread_ids())
    }

    fn pin_vcpus<'a>(&'a self, cpus: &'a [Vec<usize>]) -> BoxFut<'a, anyhow::Result<super::VcpuCpus>> {
        Box::pin(async move {
            anyhow::ensure!(!cpus.is_empty(), "no host CPUs to pin to");
            let tids = self.vcpu_threads().await?;
            let mut mapping = Vec::with_capacity(tids.len());
            for (i, tid) in tids.iter().enumerate() {
                let set = &cpus[i % cpus.len()];
                pin_thread(*tid, set).with_context(|| format!("pinning vCPU {i} of {}", self.name))?;
                mapping.push((i as u32, set.clone()));
            }
            Ok(mapping)
        })
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn liveness(&self) -> Liveness {
        match self.child.id() {
            Some(pid) => Box::new(move || process_alive(pid)),
            None => Box::new(|| false),
        }
    }

    fn shutdown(&mut self, grace: Duration) -> BoxFut<'_, anyhow::Result<()>> {
        Box::pin(async move {
            if !self.is_running() {
                return Ok(());
            }
            // "quit" stops QEMU at once; the guest holds no state worth an ACPI shutdown.
            if let Some(mut qmp) = self.qmp.take().await {
                let _ = tokio::time::timeout(grace, qmp.execute("quit", serde_json::Value::Null)).await;
            }
            if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
                self.child
                    .kill()
                    .await
                    .with_context(|| format!("killing QEMU of {}", self.name))?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FastKernel;
    use crate::testing::spec;

    fn plan(kernel: &str, bios: Option<&str>, cmdline: &str) -> BootPlan {
        BootPlan {
            kernel: kernel.into(),
            bios: bios.map(PathBuf::from),
            cmdline: cmdline.into(),
            vmgenid: bios.is_none(),
            facts: serde_json::Value::Null,
        }
    }

    #[test]
    fn command_line_forwards_ssh_on_loopback_only_and_pins_accel() {
        let spec = spec(FastKernel::default());
        let p = plan("/k/vmlinux", Some("/q/qboot.rom"), "quiet console=ttyS0");
        let a = qemu_args(&spec, &p, 40022, None).join(" ");
        assert!(a.contains("hostfwd=tcp:127.0.0.1:40022-:22"), "{a}");
        assert!(a.contains("-accel tcg,thread=multi"));
        assert!(a.contains("-smp 2 -m 512"));
        assert!(
            a.contains("-bios /q/qboot.rom -kernel /k/vmlinux -initrd /k/initrd.img"),
            "{a}"
        );
        assert!(a.contains("-append quiet console=ttyS0"));
        assert!(!a.contains("vmgenid"));
        assert!(a.contains("path=/w/ocrig-t-0.console.log,append=on"));
        assert!(!a.contains("-drive") && !a.contains("-incoming"));
        let a = qemu_args(
            &spec,
            &plan("/k/vmlinuz", None, "x"),
            1,
            Some(Path::new("/t/state")),
        )
        .join(" ");
        assert!(!a.contains("-bios") && a.contains("-device vmgenid,guid=auto"));
        assert!(a.ends_with("-incoming file:/t/state"), "{a}");
        let kvm = GuestSpec {
            accel: Accel::Kvm,
            cpu: "host,kvm-pv-unhalt=off".into(),
            ..spec
        };
        let a = qemu_args(&kvm, &p, 1, None).join(" ");
        assert!(a.contains("-accel kvm") && a.contains("-cpu host,kvm-pv-unhalt=off"));
    }

    #[test]
    fn a_template_writes_its_ram_to_a_shared_file_and_a_clone_maps_it_private() {
        let base = spec(FastKernel::default());
        let p = plan("/k/vmlinux", None, "x");
        let plain = qemu_args(&base, &p, 1, None).join(" ");
        assert!(
            plain.contains("-machine q35 ") && !plain.contains("memory-backend"),
            "{plain}"
        );
        let template = GuestSpec {
            ram: RamBacking::TemplateFile("/c/t/ram".into()),
            ..base.clone()
        };
        let a = qemu_args(&template, &p, 1, None).join(" ");
        assert!(a.contains("-machine q35,memory-backend=ocrig-ram "), "{a}");
        assert!(
            a.contains("-object memory-backend-file,id=ocrig-ram,size=512M,mem-path=/c/t/ram,share=on"),
            "{a}"
        );
        let clone = GuestSpec {
            ram: RamBacking::CloneOf("/c/t/ram".into()),
            ..base.clone()
        };
        let a = qemu_args(&clone, &p, 1, Some(Path::new("/c/t/state"))).join(" ");
        assert!(a.contains("mem-path=/c/t/ram,share=off"), "{a}");
        assert!(a.ends_with("-incoming defer"), "{a}");
        // Where RAM lives is no input of the template key: the template and its clones agree.
        assert_eq!(masked_args(&template, &p), masked_args(&base, &p));
        assert_eq!(masked_args(&clone, &p), masked_args(&base, &p));
    }

    #[test]
    fn qmp_sockets_fit_in_a_unix_socket_path() {
        let short = qmp_path(Path::new("/w"), "ocrig-a-0");
        assert_eq!(short, Path::new("/w/ocrig-a-0.qmp"));
        let deep = Path::new("/tmp").join("d".repeat(120));
        let p = qmp_path(&deep, "ocrig-a-0");
        assert!(p.as_os_str().len() < 108 && p.ends_with("ocrig-a-0.qmp"), "{p:?}");
    }

    #[test]
    fn the_template_fingerprint_masks_only_per_guest_parts() {
        let b = QemuBackend::default();
        let p = plan("/k/vmlinux", Some("/q/qboot.rom"), "quiet");
        let a = spec(FastKernel::default());
        let other_guest = GuestSpec {
            name: "ocrig-zz-7".into(),
            workdir: "/elsewhere".into(),
            ..a.clone()
        };
        let fp = b.fingerprint(&a, &p).unwrap();
        assert_eq!(fp, b.fingerprint(&other_guest, &p).unwrap());
        assert!(
            fp.contains("QEMU emulator version") || fp.starts_with("qemu "),
            "{fp}"
        );
        let changed = [
            GuestSpec {
                vcpus: 3,
                ..a.clone()
            },
            GuestSpec {
                memory_mib: 256,
                ..a.clone()
            },
            GuestSpec {
                cpu: "max,pmu=off".into(),
                ..a.clone()
            },
            GuestSpec {
                accel: Accel::Kvm,
                ..a.clone()
            },
            GuestSpec {
                initrd: "/other/initrd".into(),
                ..a.clone()
            },
            GuestSpec {
                scratch_disk: Some("/d".into()),
                ..a.clone()
            },
        ];
        for c in &changed {
            assert_ne!(b.fingerprint(c, &p).unwrap(), fp, "{c:?}");
        }
        for p2 in [
            plan("/k/vmlinux", None, "quiet"),
            plan("/k/vmlinuz", Some("/q/qboot.rom"), "quiet"),
            plan("/k/vmlinux", Some("/q/qboot.rom"), "quiet nopvspin"),
        ] {
            assert_ne!(b.fingerprint(&a, &p2).unwrap(), fp, "{p2:?}");
        }
    }

    #[test]
    fn kvm_guests_of_every_variant_kind_match_their_golden_arguments() {
        for (name, s, p, incoming) in crate::testing::kvm_variant_cases() {
            let args = qemu_args(&s, &p, 40022, incoming);
            assert_eq!(args[args.iter().position(|a| a == "-accel").unwrap() + 1], "kvm");
            // One argument a line, so a golden diff shows exactly what changed.
            crate::testing::golden(&format!("kvm-{name}.qemu-args"), &(args.join("\n") + "\n"));
        }
    }
}
