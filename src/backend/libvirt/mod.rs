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
//! - Templates and clones (template/) need QMP, which libvirt keeps to itself: every domain
//!   gets a second monitor, `-qmp unix:<workdir>/<name>.qmp`, in `<qemu:commandline>`. A clone
//!   adds `-incoming file:<state>` there. libvirt starts QEMU with `-S` and sends `cont` while
//!   the state loads, which QEMU turns into "resume when loaded" (qmp_cont in INMIGRATE); a
//!   template saved stopped still stays paused, so template/clone.rs sends `cont` itself afterwards.
//!   libvirt's own restore (`virDomainRestore`) cannot be used: it refuses a domain name or
//!   UUID other than the saved one, so two clones of one template could never run at once.
//! - `<genid/>` (templates and clones): a fresh VM generation ID per domain, so a clone's kernel
//!   reseeds its RNG.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use virt::connect::Connect;
use virt::domain::Domain;
use virt::error::ErrorNumber;

use crate::backend::boot::BootPlan;
use crate::backend::launcher::{Controlled, Launcher};
use crate::backend::paths::{console_path, qmp_path};
use crate::backend::qemu::qemu_identity;
use crate::backend::qmp::Qmp;
use crate::backend::remote::{self, ConsoleMirror, HostSsh, Tunnel};
use crate::backend::started::Starter;
use crate::backend::{Backend, BoxFut, Guest, GuestSpec, free_loopback_port};
use crate::hostfs::HostFs;

mod domain;
mod guest;
mod orphans;
mod threads;

pub use domain::*;
pub use guest::*;
pub use orphans::*;
use threads::*;

pub struct LibvirtBackend {
    uri: String,
    starter: Starter,
    /// libvirt and hypervisor versions, part of every template's key.
    versions: String,
    /// Set when `uri` names another host (`qemu+ssh://`, `qemu+libssh2://`).
    remote: Option<Arc<HostSsh>>,
    /// Where a local domain starts (`<vcpu cpuset>`, `emulatorpin`, `numatune`).
    start: crate::backend::StartPlacement,
    /// The security models every domain labels itself for ([`confinement_models`]), read once.
    models: Vec<String>,
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
        let models = confinement_models(uri, &conn)?;
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
            start: crate::backend::StartPlacement::default(),
            models,
        })
    }

    /// Every local domain started as `start` says (a remote host's domains start where its
    /// libvirt puts them; their vCPUs are pinned once up, as everywhere).
    pub fn starting_on(mut self, start: crate::backend::StartPlacement) -> Self {
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
            // Nor how it is confined (the host's security models).
            domain_xml(
                &masked,
                plan,
                0,
                None,
                &crate::backend::StartPlacement::default(),
                &[]
            )
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
        let models = self.models.clone();
        let (conn, dom, port) = tokio::task::spawn_blocking(move || {
            create(&uri, &abs, &plan, incoming.as_deref(), &start, &models)
        })
        .await??;
        let mut guest = LibvirtGuest::created(spec, &self.uri, conn, dom, port);
        // Drop destroys the domain if any of these checks fails.
        let pid = qemu_pid(&self.uri, &spec.name).context("finding the domain's QEMU process")?;
        guest.pid = Some(pid);
        guest.live = crate::backend::live::LiveProcess::register(pid as u32);
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
        let models = self.models.clone();
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
            let (conn, dom, port) = create(
                &uri,
                &rspec,
                &rplan,
                None,
                &crate::backend::StartPlacement::default(),
                &models,
            )?;
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

/// The security models whose labels a domain of `uri` sets for itself ([`seclabel_xml`]): all
/// the host's, but DAC on a per-user (`/session`) daemon, whose QEMU cannot become root.
fn confinement_models(uri: &str, conn: &Connect) -> anyhow::Result<Vec<String>> {
    let caps = conn
        .capabilities()
        .map_err(|e| anyhow::anyhow!("capabilities of {uri}: {}", e.message()))?;
    let session = uri.split('?').next().is_some_and(|u| u.ends_with("/session"));
    Ok(security_models(&caps)
        .into_iter()
        .filter(|m| !(session && m == "dac"))
        .collect())
}

/// Creates the transient domain on a fresh connection, labelled for `models` (retrying with another port when the picked
/// one was taken before QEMU bound it).
fn create(
    uri: &str,
    spec: &GuestSpec,
    plan: &BootPlan,
    incoming: Option<&Path>,
    start: &crate::backend::StartPlacement,
    models: &[String],
) -> anyhow::Result<(Connect, Domain, u16)> {
    let conn = open(uri)?;
    let mut last = None;
    for _ in 0..3 {
        let port = free_loopback_port().context("finding a free loopback port")?;
        let xml = domain_xml(spec, plan, port, incoming, start, models);
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

#[cfg(test)]
mod tests;
