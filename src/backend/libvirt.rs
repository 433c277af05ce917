//! libvirt driven through the `virt` crate: one **transient** domain per guest, started with
//! `VIR_DOMAIN_START_AUTODESTROY` on a connection the guest owns, so libvirtd itself destroys the
//! domain when that connection closes — also when ocrig dies by SIGKILL. Observable behaviour matches
//! the QEMU backend: q35, direct kernel boot, serial console to the same file, user-mode networking
//! with SSH forwarded from 127.0.0.1 only, virtio-rng, optional raw scratch disk with cache=none.
//!
//! How the QEMU-level details are expressed in libvirt 11 (verified on libvirt 11.3 / QEMU 10.0):
//! - TCG threading: libvirt passes `-accel tcg` and has no knob for `thread=`; a second `-accel` in
//!   `<qemu:commandline>` would only be a fallback QEMU ignores. QEMU enables multi-threaded TCG by
//!   default for an x86 guest on an x86 host, so each vCPU is its own host thread (`CPU <n>/TCG`).
//!   `boot` checks this: a guest whose vCPUs do not show up as one thread each is destroyed and
//!   reported as an error rather than silently measured with one shared vCPU thread.
//! - `-cpu`: the model picks the `<cpu>` mode (`max` → `mode='maximum'`, `host` → `host-passthrough`,
//!   anything else → `custom` with that model), with the topology of `-smp N` (1 socket, N cores).
//!   Flags (`host,kvm-pv-unhalt=off`, …) are QEMU properties that libvirt's `<feature>` list cannot
//!   all express, so when `spec.cpu` has flags the exact string is also passed as a trailing `-cpu`
//!   in `<qemu:commandline>`; QEMU takes the last `-cpu`, so the guest sees exactly what the QEMU
//!   backend would give it.
//! - Networking: `-netdev user,…,hostfwd=…` and `-device virtio-net-pci` in `<qemu:commandline>`
//!   (libvirt's `<interface type='user'>` needs passt for port forwards). The NIC gets a fixed slot
//!   (`pcie.0` slot 0x10): QEMU realizes command-line devices before libvirt's JSON `-device`s, so
//!   an unaddressed NIC takes slot 1 and collides with libvirt's first pcie-root-port.
//! - Pinning goes through libvirt (`virDomainPinVcpu`), so libvirt records it in the live XML.
//! - The domain carries the `custom-argv` taint because of `<qemu:commandline>`; that is expected.
//! - Boot: `<kernel>` is the PVH vmlinux when there is one, and qboot is `<loader type='rom'>`
//!   (libvirt passes a ROM loader as `-bios`); the console file is opened with `append='on'`.
//! - Templates and clones (template.rs) need QMP, which libvirt keeps to itself: every domain
//!   gets a second monitor, `-qmp unix:<workdir>/<name>.qmp`, in `<qemu:commandline>`. A clone
//!   adds `-incoming file:<state>` there. libvirt starts QEMU with `-S` and sends `cont` while
//!   the state loads, which QEMU turns into "resume when loaded" (qmp_cont in INMIGRATE); a
//!   template saved stopped still stays paused, so template.rs sends `cont` itself afterwards.
//!   libvirt's own restore (`virDomainRestore`) cannot be used: it refuses a domain name or
//!   UUID other than the saved one, so two clones of one template could never run at once.
//! - `<genid/>` (templates and clones): a fresh VM generation ID per domain, so a clone's kernel
//!   reseeds its RNG.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use virt::connect::Connect;
use virt::domain::Domain;
use virt::error::ErrorNumber;

use super::boot::BootPlan;
use super::launcher::{Controlled, Launcher};
use super::paths::{console_path, qmp_path};
use super::qemu::qemu_identity;
use super::qmp::{Qmp, QmpSlot};
use super::remote::{self, ConsoleMirror, HostSsh, Tunnel};
use super::started::Starter;
use super::{Backend, BoxFut, Guest, GuestSpec, free_loopback_port};
use crate::host::Accel;
use crate::hostfs::HostFs;

/// Every domain ocrig creates has a name with this prefix; cleanup touches nothing else.
pub const OWNED_PREFIX: &str = "ocrig-";

/// PCI slot on `pcie.0` of the user-mode NIC (see the module comment).
const NIC_SLOT: &str = "0x10";

pub struct LibvirtBackend {
    uri: String,
    starter: Starter,
    /// libvirt and hypervisor versions, part of every template's key.
    versions: String,
    /// Set when `uri` names another host (`qemu+ssh://`, `qemu+libssh2://`).
    remote: Option<Arc<HostSsh>>,
    /// Where a local domain starts (`<vcpu cpuset>`, `emulatorpin`, `numatune`).
    start: super::StartPlacement,
}

impl LibvirtBackend {
    /// Checks that libvirtd answers on `uri` (e.g. `qemu:///system`) and drives a QEMU hypervisor.
    /// A remote URI is checked first over ocrig's own SSH connection (reachable, pinned host key,
    /// key login), then libvirt's version against [`remote::MIN_LIBVIRT`].
    pub fn connect(uri: &str) -> anyhow::Result<Self> {
        let remote = match remote::parse(uri).map_err(anyhow::Error::msg)? {
            Some(r) => Some(Arc::new(HostSsh::connect(&r)?)),
            None => None,
        };
        let conn = open(uri)?;
        let version = conn
            .hyp_version()
            .with_context(|| format!("asking libvirt at {uri} for the hypervisor version"))?;
        anyhow::ensure!(
            version > 0,
            "libvirt at {uri} reports no hypervisor (is it a QEMU/KVM URI?)"
        );
        let lib = conn.lib_version().unwrap_or(0);
        let starter = match &remote {
            Some(r) => {
                remote::check_libvirt_version(&r.remote.label(), lib, remote::min_libvirt())
                    .map_err(anyhow::Error::msg)?;
                Starter::without_clones(format!(
                    "{} is a remote host: snapshot clones are not implemented there (their state file and QMP \
                     socket would live on it)",
                    r.remote.label()
                ))
            }
            None => Starter::default(),
        };
        Ok(Self {
            uri: uri.to_string(),
            starter,
            versions: format!("libvirt {lib} hypervisor {version}"),
            remote,
            start: super::StartPlacement::default(),
        })
    }

    /// Every local domain started as `start` says (a remote host's domains start where its
    /// libvirt puts them; their vCPUs are pinned once up, as everywhere).
    pub fn starting_on(mut self, start: super::StartPlacement) -> Self {
        self.start = start;
        self
    }

    /// The remote host's SSH side, when `uri` names one.
    pub fn remote(&self) -> Option<&Arc<HostSsh>> {
        self.remote.as_ref()
    }

    /// CPUs and memory of the host libvirt runs on (node info and free memory).
    pub fn node_facts(&self) -> anyhow::Result<(u32, u64)> {
        let conn = open(&self.uri)?;
        let info = conn
            .node_info()
            .map_err(|e| anyhow::anyhow!("node info from {}: {}", self.uri, e.message()))?;
        let free = conn
            .free_memory()
            .map_err(|e| anyhow::anyhow!("free memory of {}: {}", self.uri, e.message()))?;
        Ok((info.cpus, free / 1048576))
    }

    #[cfg(test)]
    pub fn with_starter(mut self, starter: Starter) -> Self {
        self.starter = starter;
        self
    }
}

/// Opens a connection, turning "libvirtd is not there" into advice.
fn open(uri: &str) -> anyhow::Result<Connect> {
    // libvirt's default error handler prints every error to stderr; ours are returned as values.
    virt::error::clear_error_callback();
    Connect::open(Some(uri)).map_err(|e| {
        anyhow::anyhow!(
            "cannot connect to libvirt at {uri}: {}. Is libvirtd running? Start it with `virtlogd -d && libvirtd -d` \
             (hosts without systemd) or `systemctl start libvirtd`",
            e.message()
        )
    })
}

fn is_gone(e: &virt::error::Error) -> bool {
    e.code()
        .is_known_and(|c| matches!(c, ErrorNumber::NoDomain | ErrorNumber::OperationInvalid))
}

/// Escapes text for XML element content and single- or double-quoted attributes.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '\'' => o.push_str("&apos;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// The `<cpu>` element for `spec.cpu`, and the `-cpu` override to pass when it has flags.
fn cpu_xml(cpu: &str, vcpus: u32) -> (String, Option<String>) {
    let cpu = cpu.trim();
    let (model, flags) = match cpu.split_once(',') {
        Some((m, f)) => (m, Some(f)),
        None => (cpu, None),
    };
    let topology = format!("<topology sockets='1' dies='1' cores='{vcpus}' threads='1'/>");
    let element = match model {
        "max" => format!("<cpu mode='maximum' check='none'>{topology}</cpu>"),
        "host" => format!("<cpu mode='host-passthrough' check='none'>{topology}</cpu>"),
        m => format!(
            "<cpu mode='custom' match='exact' check='none'><model fallback='forbid'>{}</model>{topology}</cpu>",
            esc(m)
        ),
    };
    let over = flags.filter(|f| !f.trim().is_empty()).map(|_| cpu.to_string());
    (element, over)
}

/// The transient domain for a guest whose SSH is forwarded from `ssh_port` on 127.0.0.1,
/// booting `plan` or, with `incoming`, restoring that saved state.
/// Paths are used as given; `boot` makes them absolute first.
pub fn domain_xml(
    spec: &GuestSpec,
    plan: &BootPlan,
    ssh_port: u16,
    incoming: Option<&Path>,
    start: &super::StartPlacement,
) -> String {
    let dom_type = match spec.accel {
        Accel::Kvm => "kvm",
        Accel::Tcg => "qemu",
    };
    let console = esc(&console_path(&spec.workdir, &spec.name).to_string_lossy());
    let (cpu, cpu_override) = cpu_xml(&spec.cpu, spec.vcpus);
    let mut x = String::new();
    let mut line = |s: &str| {
        x.push_str(s);
        x.push('\n');
    };
    line(&format!(
        "<domain type='{dom_type}' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>"
    ));
    line(&format!("  <name>{}</name>", esc(&spec.name)));
    line("  <description>ocrig guest (transient, destroyed when its ocrig exits)</description>");
    line(&format!("  <memory unit='MiB'>{}</memory>", spec.memory_mib));
    // The domain's threads start on the measured CPUs (ocrig pins each vCPU within them once
    // its thread is known), its other threads where `others` says, and its memory is bound to
    // the measured CPUs' nodes before the guest touches it.
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    match start.cpus.is_empty() {
        true => line(&format!("  <vcpu placement='static'>{}</vcpu>", spec.vcpus)),
        false => line(&format!(
            "  <vcpu placement='static' cpuset='{}'>{}</vcpu>",
            list(&start.cpus),
            spec.vcpus
        )),
    }
    if !start.others.is_empty() {
        line(&format!(
            "  <cputune><emulatorpin cpuset='{}'/></cputune>",
            list(&start.others)
        ));
    }
    if !start.memory_nodes.is_empty() {
        line(&format!(
            "  <numatune><memory mode='strict' nodeset='{}'/></numatune>",
            list(&start.memory_nodes)
        ));
    }
    if plan.vmgenid {
        line("  <genid/>");
    }
    line("  <os>");
    line("    <type arch='x86_64' machine='q35'>hvm</type>");
    if let Some(bios) = &plan.bios {
        line(&format!(
            "    <loader type='rom' readonly='yes'>{}</loader>",
            esc(&bios.to_string_lossy())
        ));
    }
    line(&format!(
        "    <kernel>{}</kernel>",
        esc(&plan.kernel.to_string_lossy())
    ));
    line(&format!(
        "    <initrd>{}</initrd>",
        esc(&spec.initrd.to_string_lossy())
    ));
    line(&format!("    <cmdline>{}</cmdline>", esc(&plan.cmdline)));
    line("  </os>");
    // Without <acpi/> libvirt passes acpi=off, and the guest would not find its other CPUs.
    line("  <features><acpi/><apic/></features>");
    line(&format!("  {cpu}"));
    line("  <clock offset='utc'/>");
    // Like -no-reboot: a guest that reboots or panics (panic=-1) stops instead of looping.
    line("  <on_poweroff>destroy</on_poweroff>");
    line("  <on_reboot>destroy</on_reboot>");
    line("  <on_crash>destroy</on_crash>");
    line("  <devices>");
    // -nodefaults: no USB controller, no balloon (libvirt adds both unless told not to).
    line("    <controller type='usb' model='none'/>");
    line(&format!(
        "    <serial type='file'><source path='{console}' append='on'/><target port='0'/></serial>"
    ));
    line(&format!(
        "    <console type='file'><source path='{console}' append='on'/><target type='serial' port='0'/></console>"
    ));
    line("    <rng model='virtio'><backend model='builtin'/></rng>");
    if let Some(disk) = &spec.scratch_disk {
        line("    <disk type='file' device='disk'>");
        line("      <driver name='qemu' type='raw' cache='none'/>");
        line(&format!(
            "      <source file='{}'/>",
            esc(&disk.to_string_lossy())
        ));
        line("      <target dev='vda' bus='virtio'/>");
        line("    </disk>");
    }
    line("    <memballoon model='none'/>");
    line("  </devices>");
    line("  <qemu:commandline>");
    let mut args = vec![
        "-netdev".to_string(),
        format!("user,id=n0,hostfwd=tcp:127.0.0.1:{ssh_port}-:22"),
        "-device".to_string(),
        format!("virtio-net-pci,netdev=n0,bus=pcie.0,addr={NIC_SLOT}"),
    ];
    if let Some(c) = cpu_override {
        args.extend(["-cpu".to_string(), c]);
    }
    args.extend([
        "-qmp".to_string(),
        format!(
            "unix:{},server=on,wait=off",
            qmp_path(&spec.workdir, &spec.name).display()
        ),
    ]);
    if let Some(state) = incoming {
        args.extend(["-incoming".to_string(), format!("file:{}", state.display())]);
    }
    for a in args {
        line(&format!("    <qemu:arg value='{}'/>", esc(&a)));
    }
    line("  </qemu:commandline>");
    line("</domain>");
    x
}

/// `spec` with absolute paths (libvirt requires them; the sweep may pass relative ones).
fn absolute(spec: &GuestSpec) -> anyhow::Result<GuestSpec> {
    let abs = |p: &Path| std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
    Ok(GuestSpec {
        kernel: abs(&spec.kernel)?,
        initrd: abs(&spec.initrd)?,
        workdir: abs(&spec.workdir)?,
        scratch_disk: spec.scratch_disk.as_deref().map(abs).transpose()?,
        ..spec.clone()
    })
}

impl Backend for LibvirtBackend {
    fn name(&self) -> &'static str {
        "libvirt"
    }

    fn reachable(&self) -> Result<(), String> {
        if let Some(r) = &self.remote {
            remote::open_session(&r.remote, Duration::from_secs(5)).map_err(|e| format!("{e:#}"))?;
        }
        let conn = open(&self.uri).map_err(|e| format!("{e:#}"))?;
        conn.hyp_version()
            .map(|_| ())
            .map_err(|e| format!("libvirt at {}: {}", self.uri, e.message()))
    }

    fn host_fs(&self) -> Arc<dyn HostFs> {
        match &self.remote {
            Some(r) => Arc::clone(r) as Arc<dyn HostFs>,
            None => Arc::new(crate::hostfs::LocalFs),
        }
    }

    fn boot<'a>(&'a self, spec: &'a GuestSpec) -> BoxFut<'a, anyhow::Result<Box<dyn Guest>>> {
        Box::pin(async move {
            self.starter
                .start(self, spec)
                .await
                .with_context(|| format!("starting {} under libvirt", spec.name))
        })
    }
}

impl Launcher for LibvirtBackend {
    fn kind(&self) -> &'static str {
        "libvirt"
    }

    fn fingerprint(&self, spec: &GuestSpec, plan: &BootPlan) -> anyhow::Result<String> {
        let masked = GuestSpec {
            name: "NAME".into(),
            workdir: "/WORKDIR".into(),
            scratch_disk: spec.scratch_disk.as_ref().map(|_| "/SCRATCH".into()),
            ..absolute(spec)?
        };
        // libvirt runs its default emulator, which is the qemu-system-x86_64 on PATH here.
        Ok(format!(
            "{}\n{}\n{}",
            self.versions,
            qemu_identity(Path::new("qemu-system-x86_64")),
            // Where it starts is not part of what a template is.
            domain_xml(&masked, plan, 0, None, &super::StartPlacement::default())
        ))
    }

    fn launch<'a>(
        &'a self,
        spec: &'a GuestSpec,
        plan: &'a BootPlan,
        incoming: Option<&'a Path>,
    ) -> BoxFut<'a, anyhow::Result<Box<dyn Controlled>>> {
        Box::pin(async move {
            let g = self.start(spec, plan, incoming).await?;
            Ok(Box::new(g) as Box<dyn Controlled>)
        })
    }
}

impl LibvirtBackend {
    async fn start(
        &self,
        spec: &GuestSpec,
        plan: &BootPlan,
        incoming: Option<&Path>,
    ) -> anyhow::Result<LibvirtGuest> {
        std::fs::create_dir_all(&spec.workdir)
            .with_context(|| format!("creating {}", spec.workdir.display()))?;
        if let Some(r) = &self.remote {
            anyhow::ensure!(incoming.is_none(), "clones are not started on a remote host");
            return self.start_remote(r, spec, plan).await;
        }
        let abs = absolute(spec)?;
        let qmp_sock = qmp_path(&abs.workdir, &abs.name);
        let _ = std::fs::remove_file(&qmp_sock);
        let uri = self.uri.clone();
        let t0 = std::time::Instant::now();
        let (plan, incoming, start) = (plan.clone(), incoming.map(Path::to_path_buf), self.start.clone());
        let (conn, dom, port) =
            tokio::task::spawn_blocking(move || create(&uri, &abs, &plan, incoming.as_deref(), &start))
                .await??;
        let mut guest = LibvirtGuest::created(spec, &self.uri, conn, dom, port);
        // Drop destroys the domain if any of these checks fails.
        let pid = qemu_pid(&self.uri, &spec.name).context("finding the domain's QEMU process")?;
        guest.pid = Some(pid);
        guest.live = super::live::LiveProcess::register(pid as u32);
        let tids = vcpu_tids(pid, spec.vcpus)?;
        tracing::debug!("{}: QEMU pid {pid}, vCPU threads {tids:?}", spec.name);
        let qmp = Qmp::connect(&qmp_sock, Duration::from_secs(15))
            .await
            .with_context(|| format!("the second QMP monitor of {}", spec.name))?;
        guest.qmp.set(qmp);
        tracing::debug!(
            "{}: libvirt domain up with our QMP monitor {:.2} s after asking",
            spec.name,
            t0.elapsed().as_secs_f64()
        );
        Ok(guest)
    }
}

impl LibvirtBackend {
    /// A guest on the remote host: its kernel, initrd and firmware as storage volumes there, its
    /// console in a directory there mirrored to the local console path, its SSH forward (bound to
    /// the host's 127.0.0.1) reached through a tunnel, its QEMU's pid and vCPU threads read there.
    async fn start_remote(
        &self,
        r: &Arc<HostSsh>,
        spec: &GuestSpec,
        plan: &BootPlan,
    ) -> anyhow::Result<LibvirtGuest> {
        let t0 = std::time::Instant::now();
        // The scratch disk is made on the host, as large as the local one the executor made,
        // in the guest's directory there (removed with it when the guest stops).
        let scratch_bytes = spec
            .scratch_disk
            .as_deref()
            .map(|p| std::fs::metadata(p).map(|m| m.len()))
            .transpose()
            .context("reading the scratch disk's size")?;
        let rdir = remote::remote_workdir(&std::path::absolute(&spec.workdir)?);
        let rconsole = console_path(Path::new(&rdir), &spec.name);
        let (uri, spec2, plan2, r2) = (self.uri.clone(), spec.clone(), plan.clone(), Arc::clone(r));
        let (conn, dom, port, rspec) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let q = |p: &Path| shlex::try_quote(&p.to_string_lossy()).map(|c| c.into_owned());
            r2.check(
                &format!("mkdir -p {} && rm -f {}", q(Path::new(&rdir))?, q(&rconsole)?),
                Duration::from_secs(10),
            )?;
            let scratch_disk = match scratch_bytes {
                Some(bytes) => {
                    let disk = Path::new(&rdir).join(format!("{}.scratch.img", spec2.name));
                    let d = q(&disk)?;
                    r2.check(
                        &format!("truncate -s {bytes} {d} && mkfs.ext4 -F -q {d}"),
                        Duration::from_secs(60),
                    )
                    .context("making the scratch disk on the host")?;
                    Some(disk)
                }
                None => None,
            };
            let conn = open(&uri)?;
            let kernel = remote::upload_volume(&conn, &uri, &plan2.kernel)?;
            let initrd = remote::upload_volume(&conn, &uri, &spec2.initrd)?;
            let bios = plan2
                .bios
                .as_deref()
                .map(|b| remote::upload_volume(&conn, &uri, b))
                .transpose()?;
            drop(conn);
            let rspec = GuestSpec {
                initrd: initrd.into(),
                workdir: rdir.into(),
                scratch_disk,
                ..spec2
            };
            let rplan = BootPlan {
                kernel: kernel.into(),
                bios: bios.map(PathBuf::from),
                ..plan2
            };
            let (conn, dom, port) = create(&uri, &rspec, &rplan, None, &super::StartPlacement::default())?;
            Ok((conn, dom, port, rspec))
        })
        .await??;
        let label = r.remote.label();
        let mut guest = LibvirtGuest::created(spec, &self.uri, conn, dom, port);
        // From here on, dropping `guest` destroys the domain.
        let (r2, name, vcpus) = (Arc::clone(r), spec.name.clone(), spec.vcpus);
        let rconsole = console_path(&rspec.workdir, &spec.name);
        let local_console = guest.console.clone();
        let remote_uri = r.remote.clone();
        let (pid, tids, tunnel, mirror) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let pid = remote_qemu_pid(&r2, &name)?;
            let tids = vcpu_tids_on(r2.as_ref(), pid, vcpus)?;
            let mirror = ConsoleMirror::start(&remote_uri, &rconsole.to_string_lossy(), &local_console, pid)
                .context("mirroring the guest's console")?;
            let tunnel = Tunnel::open(&remote_uri, port, &name)?;
            Ok((pid, tids, tunnel, mirror))
        })
        .await?
        .with_context(|| format!("setting up {} on {label}", spec.name))?;
        guest.pid = Some(pid);
        guest.addr = tunnel.local_addr();
        tracing::debug!(
            "{}: domain up on {label} (QEMU pid {pid} there, vCPU threads {tids:?}), SSH through {} after {:.2} s",
            spec.name,
            guest.addr,
            t0.elapsed().as_secs_f64()
        );
        guest.remote = Some(RemoteParts {
            ssh: Arc::clone(r),
            workdir: rspec.workdir.to_string_lossy().into_owned(),
            _tunnel: tunnel,
            _mirror: mirror,
        });
        Ok(guest)
    }
}

/// The QEMU pid of domain `name` on a remote host, from libvirt's pid file there.
fn remote_qemu_pid(r: &HostSsh, name: &str) -> anyhow::Result<i32> {
    let path = format!("/run/libvirt/qemu/{name}.pid");
    let text = r.read(&path).map_err(anyhow::Error::msg)?;
    text.trim()
        .parse()
        .with_context(|| format!("{path} on {} holds '{}'", r.remote.label(), text.trim()))
}

/// [`vcpu_tids`] on the host behind `fs`.
fn vcpu_tids_on(fs: &dyn HostFs, pid: i32, vcpus: u32) -> anyhow::Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let tids: Vec<String> = fs.list_dir(&dir).map_err(anyhow::Error::msg)?;
    let comms = fs.read_many(&tids.iter().map(|t| format!("{dir}/{t}/comm")).collect::<Vec<_>>());
    let threads: Vec<(i32, String)> = tids
        .iter()
        .zip(comms)
        .filter_map(|(t, c)| Some((t.parse().ok()?, c.ok()?.trim().to_string())))
        .collect();
    vcpu_tids_from(pid, vcpus, threads)
}

/// Creates the transient domain on a fresh connection (retrying with another port when the picked
/// one was taken before QEMU bound it).
fn create(
    uri: &str,
    spec: &GuestSpec,
    plan: &BootPlan,
    incoming: Option<&Path>,
    start: &super::StartPlacement,
) -> anyhow::Result<(Connect, Domain, u16)> {
    let conn = open(uri)?;
    let mut last = None;
    for _ in 0..3 {
        let port = free_loopback_port().context("finding a free loopback port")?;
        let xml = domain_xml(spec, plan, port, incoming, start);
        match conn.create_domain_xml(&xml, virt::sys::VIR_DOMAIN_START_AUTODESTROY) {
            Ok(dom) => return Ok((conn, dom, port)),
            // QEMU: "Could not set up host forwarding rule 'tcp:127.0.0.1:PORT-:22'".
            Err(e) if e.message().contains("forwarding") => last = Some(e),
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "libvirt refused to start {}: {}",
                    spec.name,
                    e.message()
                ));
            }
        }
    }
    let e = last.expect("three attempts");
    Err(anyhow::anyhow!(
        "libvirt could not start {} (SSH port forward): {}",
        spec.name,
        e.message()
    ))
}

/// The QEMU process of a running domain: libvirt's pid file, else a /proc scan for `guest=<name>,`.
fn qemu_pid(uri: &str, name: &str) -> anyhow::Result<i32> {
    let mut files = vec![];
    if uri.contains("/system") {
        files.push(PathBuf::from(format!("/run/libvirt/qemu/{name}.pid")));
    }
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR") {
        files.push(PathBuf::from(rt).join(format!("libvirt/qemu/run/{name}.pid")));
    }
    for f in files {
        if let Ok(s) = std::fs::read_to_string(&f)
            && let Ok(pid) = s.trim().parse::<i32>()
            && Path::new(&format!("/proc/{pid}")).exists()
        {
            return Ok(pid);
        }
    }
    let needle = format!("guest={name},");
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmd
            .split(|&b| b == 0)
            .any(|a| a == needle.as_bytes() || a.starts_with(needle.as_bytes()))
        {
            return Ok(pid);
        }
    }
    anyhow::bail!("no QEMU process found for domain {name}")
}

/// Host tids of the vCPU threads of QEMU `pid`, in vCPU order, from thread names `CPU <n>/TCG|KVM`
/// (libvirt always starts QEMU with `debug-threads=on`). Fails unless there is one per vCPU.
fn vcpu_tids(pid: i32, vcpus: u32) -> anyhow::Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let mut threads = Vec::new();
    for e in std::fs::read_dir(&dir)
        .with_context(|| format!("reading {dir}"))?
        .flatten()
    {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
            continue;
        };
        threads.push((tid, comm.trim().to_string()));
    }
    vcpu_tids_from(pid, vcpus, threads)
}

/// The vCPU thread ids among QEMU `pid`'s (tid, thread name) pairs.
fn vcpu_tids_from(pid: i32, vcpus: u32, threads: Vec<(i32, String)>) -> anyhow::Result<Vec<i32>> {
    let mut found: Vec<(u32, i32)> = Vec::new();
    let mut names = Vec::new();
    for (tid, comm) in threads {
        if let Some(n) = parse_vcpu_comm(&comm) {
            found.push((n, tid));
        }
        names.push(comm);
    }
    found.sort();
    let ok = found.len() == vcpus as usize && found.iter().enumerate().all(|(i, (n, _))| *n == i as u32);
    anyhow::ensure!(
        ok,
        "QEMU (pid {pid}) should run {vcpus} vCPU thread(s) named `CPU <n>/TCG|KVM`, one per vCPU, but its \
         threads are {names:?} (single-threaded TCG shows up as `ALL CPUs/TCG`; overcommit results would be \
         meaningless)"
    );
    Ok(found.into_iter().map(|(_, t)| t).collect())
}

fn parse_vcpu_comm(comm: &str) -> Option<u32> {
    let rest = comm.strip_prefix("CPU ")?;
    let (n, acc) = rest.split_once('/')?;
    matches!(acc, "TCG" | "KVM").then_some(())?;
    n.parse().ok()
}

/// A cpumap for `virDomainPinVcpu` with only `cpu` set.
/// libvirt's CPU bitmap: bit c of byte c/8 for each CPU c.
fn cpumap(cpus: &[usize]) -> Vec<u8> {
    let mut m = vec![0u8; cpus.iter().max().map_or(0, |c| c / 8) + 1];
    for &cpu in cpus {
        m[cpu / 8] |= 1 << (cpu % 8);
    }
    m
}

pub struct LibvirtGuest {
    name: String,
    addr: SocketAddr,
    console: PathBuf,
    vcpus: u32,
    uri: String,
    /// None once destroyed.
    dom: Option<Domain>,
    /// The connection the domain was created on: closing it makes libvirtd destroy the domain.
    _conn: Connect,
    pid: Option<i32>,
    /// A local domain's QEMU on the signal kill list ([`super::live`]).
    live: Option<super::live::LiveProcess>,
    /// Our own monitor (`-qmp` in `<qemu:commandline>`), beside libvirt's; None on a remote host.
    qmp: QmpSlot,
    /// On a remote host: how it is reached.
    remote: Option<RemoteParts>,
}

/// What a guest on a remote host needs besides its domain.
struct RemoteParts {
    ssh: Arc<HostSsh>,
    /// Its directory on the host (console log, QMP socket), removed when it stops.
    workdir: String,
    _tunnel: Tunnel,
    _mirror: ConsoleMirror,
}

impl Controlled for LibvirtGuest {
    fn qmp<'a>(
        &'a self,
        command: &'a str,
        args: serde_json::Value,
    ) -> BoxFut<'a, anyhow::Result<serde_json::Value>> {
        Box::pin(async move {
            if self.remote.is_some() {
                return self.remote_qmp(command, args).await;
            }
            self.qmp.execute(command, args).await
        })
    }

    fn qemu_log(&self) -> String {
        // libvirt keeps QEMU's stderr here for qemu:///system.
        let path = format!("/var/log/libvirt/qemu/{}.log", self.name);
        let log = match &self.remote {
            Some(r) => r.ssh.read(&path).unwrap_or_default(),
            None => std::fs::read_to_string(&path).unwrap_or_default(),
        };
        crate::guest::ready::tail(&log, 10)
    }
}

impl LibvirtGuest {
    /// A guest just created as domain `dom` on `conn`, its SSH forward on `port` (of this
    /// machine's loopback; a remote guest's tunnel and QMP are added by the caller).
    fn created(spec: &GuestSpec, uri: &str, conn: Connect, dom: Domain, port: u16) -> Self {
        LibvirtGuest {
            name: spec.name.clone(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            console: console_path(&spec.workdir, &spec.name),
            vcpus: spec.vcpus,
            uri: uri.to_string(),
            dom: Some(dom),
            _conn: conn,
            pid: None,
            live: None,
            qmp: QmpSlot::default(),
            remote: None,
        }
    }

    /// QMP on a remote host, through libvirt's monitor passthrough
    /// (`virDomainQemuMonitorCommand`): our own QMP socket lives on that host.
    async fn remote_qmp(&self, command: &str, args: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let dom = self.dom.clone().context("the domain was destroyed")?;
        let cmd = serde_json::json!({ "execute": command, "arguments": args }).to_string();
        let command = command.to_string();
        tokio::task::spawn_blocking(move || {
            let answer = dom
                .qemu_monitor_command(&cmd, 0)
                .map_err(|e| anyhow::anyhow!("{command} through libvirt: {}", e.message()))?;
            let mut v: serde_json::Value = serde_json::from_str(&answer)?;
            if let Some(e) = v.get("error") {
                anyhow::bail!("{command}: {e}");
            }
            Ok(v["return"].take())
        })
        .await?
    }

    fn destroy_now(&mut self) -> anyhow::Result<()> {
        let Some(dom) = &self.dom else { return Ok(()) };
        destroy_dom(dom, &self.name)?;
        self.dom = None;
        self.forget_remote_dir();
        Ok(())
    }

    /// Removes the guest's directory on a remote host (its console is mirrored here).
    fn forget_remote_dir(&self) {
        if let Some(r) = &self.remote
            && let Ok(q) = shlex::try_quote(&r.workdir)
            && let Err(e) = r.ssh.run(&format!("rm -rf {q}"), Duration::from_secs(10))
        {
            tracing::debug!("removing {} on {}: {e:#}", r.workdir, r.ssh.remote.label());
        }
    }
}

/// Destroys a domain; one that is already gone (or not running) counts as destroyed.
fn destroy_dom(dom: &Domain, name: &str) -> anyhow::Result<()> {
    match dom.destroy() {
        Ok(()) => Ok(()),
        Err(e) if is_gone(&e) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("destroying domain {name}: {}", e.message())),
    }
}

impl Guest for LibvirtGuest {
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
        Box::pin(async move {
            anyhow::ensure!(self.dom.is_some(), "domain {} was destroyed", self.name);
            if let Some(r) = &self.remote {
                let (ssh, name, vcpus) = (Arc::clone(&r.ssh), self.name.clone(), self.vcpus);
                let pid = self.pid;
                return tokio::task::spawn_blocking(move || {
                    let pid = match pid {
                        Some(p) => p,
                        None => remote_qemu_pid(&ssh, &name)?,
                    };
                    vcpu_tids_on(ssh.as_ref(), pid, vcpus)
                })
                .await?
                .with_context(|| format!("vCPU threads of {}", self.name));
            }
            let pid = match self.pid {
                Some(p) if Path::new(&format!("/proc/{p}")).exists() => p,
                _ => qemu_pid(&self.uri, &self.name)?,
            };
            vcpu_tids(pid, self.vcpus).with_context(|| format!("vCPU threads of {}", self.name))
        })
    }

    fn pin_vcpus<'a>(&'a self, cpus: &'a [Vec<usize>]) -> BoxFut<'a, anyhow::Result<super::VcpuCpus>> {
        Box::pin(async move {
            anyhow::ensure!(
                !cpus.is_empty() && cpus.iter().all(|s| !s.is_empty()),
                "no host CPUs to pin to"
            );
            let dom = self
                .dom
                .clone()
                .with_context(|| format!("domain {} was destroyed", self.name))?;
            let mapping: Vec<(u32, Vec<usize>)> = (0..self.vcpus)
                .map(|i| (i, cpus[i as usize % cpus.len()].clone()))
                .collect();
            let name = self.name.clone();
            let m = mapping.clone();
            tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                for (vcpu, cpu) in m {
                    dom.pin_vcpu(vcpu, &cpumap(&cpu)).map_err(|e| {
                        anyhow::anyhow!("pinning vCPU {vcpu} of {name} to CPUs {cpu:?}: {}", e.message())
                    })?;
                }
                Ok(())
            })
            .await??;
            Ok(mapping)
        })
    }

    fn is_running(&mut self) -> bool {
        self.dom.as_ref().is_some_and(|d| d.is_active().unwrap_or(false))
    }

    fn liveness(&self) -> super::Liveness {
        if self.remote.is_some() {
            // The pid is the remote host's: ask libvirt whether the domain still runs.
            return match self.dom.clone() {
                Some(d) => Box::new(move || d.is_active().unwrap_or(false)),
                None => Box::new(|| false),
            };
        }
        match self.pid {
            Some(pid) => Box::new(move || super::process_alive(pid as u32)),
            None => Box::new(|| true),
        }
    }

    fn shutdown(&mut self, _grace: Duration) -> BoxFut<'_, anyhow::Result<()>> {
        // The guest holds no state worth an ACPI shutdown (the QEMU backend "quit"s too); destroy
        // stops QEMU at once (SIGTERM, SIGKILL after libvirt's own timeout) and a transient domain
        // vanishes with it.
        Box::pin(async move {
            let Some(dom) = self.dom.clone() else {
                return Ok(());
            };
            let name = self.name.clone();
            tokio::task::spawn_blocking(move || destroy_dom(&dom, &name)).await??;
            self.dom = None;
            self.forget_remote_dir();
            Ok(())
        })
    }
}

impl Drop for LibvirtGuest {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_now() {
            // Closing the connection next still makes libvirtd destroy it (AUTODESTROY).
            tracing::warn!("{e:#}");
        }
    }
}

/// Names of all domains on `uri` (running or defined) whose names start with `prefix`, sorted.
pub fn list_owned(uri: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let conn = open(uri)?;
    let doms = conn
        .list_all_domains(0)
        .map_err(|e| anyhow::anyhow!("listing domains on {uri}: {}", e.message()))?;
    let mut names: Vec<String> = doms
        .iter()
        .filter_map(|d| d.name().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    Ok(names)
}

/// Destroys the running domain `name` (left behind by a killed ocrig). Already gone is fine.
/// Refuses names without the `ocrig-` prefix, so it cannot stop someone else's VM.
pub fn destroy_named(uri: &str, name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        name.starts_with(OWNED_PREFIX),
        "refusing to destroy {name}: not an ocrig domain"
    );
    let conn = open(uri)?;
    let dom = match conn.lookup_domain_by_name(name) {
        Ok(d) => d,
        Err(e) if is_gone(&e) => return Ok(()),
        Err(e) => anyhow::bail!("looking up domain {name}: {}", e.message()),
    };
    destroy_dom(&dom, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> GuestSpec {
        GuestSpec {
            cmdline: "console=ttyS0 panic=-1 a<b&c".into(),
            ..crate::backend::boot::tests::spec(Default::default())
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

    #[test]
    fn domain_xml_matches_the_qemu_backend_devices() {
        let x = domain_xml(&spec(), &plan(&spec(), false), 40022, None, &Default::default());
        assert!(
            x.starts_with("<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>")
        );
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
        );
        // PVH with qboot as a ROM loader (libvirt turns it into -bios), restoring a state file.
        assert!(x.contains("<loader type='rom' readonly='yes'>/usr/share/qemu/qboot.rom</loader>"));
        assert!(x.contains("<kernel>/k/vmlinux</kernel>") && !x.contains("<genid/>"));
        assert!(
            x.contains("<qemu:arg value='-incoming'/>\n    <qemu:arg value='file:/t/state'/>"),
            "{x}"
        );
        assert!(x.starts_with("<domain type='kvm'"));
        assert!(
            x.contains("<cpu mode='host-passthrough' check='none'><topology sockets='1' dies='1' cores='4'")
        );
        // Flags reach QEMU verbatim as the last -cpu, which QEMU honours.
        assert!(
            x.contains("<qemu:arg value='-cpu'/>\n    <qemu:arg value='host,kvm-pv-unhalt=off'/>"),
            "{x}"
        );
        assert!(x.contains("<driver name='qemu' type='raw' cache='none'/>"));
        assert!(
            x.contains("<source file='/d/scratch.img'/>") && x.contains("<target dev='vda' bus='virtio'/>")
        );
    }

    #[test]
    fn cpu_models_map_to_libvirt_modes() {
        assert_eq!(cpu_xml("max", 1).1, None);
        assert_eq!(cpu_xml("max,pmu=off", 1).1.as_deref(), Some("max,pmu=off"));
        let (e, o) = cpu_xml("Skylake-Server", 2);
        assert!(e.contains(
            "<cpu mode='custom' match='exact' check='none'><model fallback='forbid'>Skylake-Server"
        ));
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
            .filter(|p| {
                p.join("vmlinuz").exists() && p.join("initrd.img").exists() && p.join("vmlinux").exists()
            })
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

    /// Boots real 1- and 2-vCPU domains on qemu:///system:
    /// `cargo test --bin ocrig libvirt -- --ignored --nocapture`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "boots real guests through libvirtd"]
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
        let x = domain_xml(&spec(), &plan(&spec(), false), 40022, None, &start);
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
        let x = domain_xml(&spec(), &plan(&spec(), false), 40022, None, &Default::default());
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
        for (name, s, p, incoming) in crate::backend::boot::tests::kvm_variant_cases() {
            let x = domain_xml(&s, &p, 40022, incoming, &Default::default());
            assert!(x.starts_with("<domain type='kvm'"), "{name}");
            crate::backend::boot::tests::golden(&format!("kvm-{name}.libvirt.xml"), &x);
        }
    }
}
