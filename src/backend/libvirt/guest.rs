//! A running libvirt guest: SSH through its forward (or a tunnel to a remote host's), QMP,
//! console, pinning, and its domain destroyed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use virt::connect::Connect;
use virt::domain::Domain;

use crate::backend::launcher::Controlled;
use crate::backend::paths::console_path;
use crate::backend::qmp::QmpSlot;
use crate::backend::remote::{ConsoleMirror, HostSsh, Tunnel};
use crate::backend::{BoxFut, Guest, GuestSpec};
use crate::hostfs::HostFs;

use super::*;

pub struct LibvirtGuest {
    pub(super) name: String,
    pub(super) addr: SocketAddr,
    pub(super) console: PathBuf,
    pub(super) vcpus: u32,
    pub(super) uri: String,
    /// None once destroyed.
    pub(super) dom: Option<Domain>,
    /// The connection the domain was created on: closing it makes libvirtd destroy the domain.
    pub(super) _conn: Connect,
    pub(super) pid: Option<i32>,
    /// A local domain's QEMU on the signal kill list ([`crate::backend::live`]).
    pub(super) live: Option<crate::backend::live::LiveProcess>,
    /// Our own monitor (`-qmp` in `<qemu:commandline>`), beside libvirt's; None on a remote host.
    pub(super) qmp: QmpSlot,
    /// On a remote host: how it is reached.
    pub(super) remote: Option<RemoteParts>,
}

/// What a guest on a remote host needs besides its domain.
pub(super) struct RemoteParts {
    pub(super) ssh: Arc<HostSsh>,
    /// Its directory on the host (console log, QMP socket), removed when it stops.
    pub(super) workdir: String,
    pub(super) _tunnel: Tunnel,
    pub(super) _mirror: ConsoleMirror,
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
    pub(super) fn created(spec: &GuestSpec, uri: &str, conn: Connect, dom: Domain, port: u16) -> Self {
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
    pub(super) async fn remote_qmp(
        &self,
        command: &str,
        args: serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
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

    pub(super) fn destroy_now(&mut self) -> anyhow::Result<()> {
        let Some(dom) = &self.dom else { return Ok(()) };
        destroy_dom(dom, &self.name)?;
        self.dom = None;
        self.forget_remote_dir();
        Ok(())
    }

    /// Removes the guest's directory on a remote host (its console is mirrored here).
    pub(super) fn forget_remote_dir(&self) {
        if let Some(r) = &self.remote
            && let Ok(q) = shlex::try_quote(&r.workdir)
            && let Err(e) = r.ssh.run(&format!("rm -rf {q}"), Duration::from_secs(10))
        {
            tracing::debug!("removing {} on {}: {e:#}", r.workdir, r.ssh.remote.label());
        }
    }
}

/// Destroys a domain; one that is already gone (or not running) counts as destroyed.
pub(super) fn destroy_dom(dom: &Domain, name: &str) -> anyhow::Result<()> {
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

    fn pin_vcpus<'a>(
        &'a self,
        cpus: &'a [Vec<usize>],
    ) -> BoxFut<'a, anyhow::Result<crate::backend::VcpuCpus>> {
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

    fn liveness(&self) -> crate::backend::Liveness {
        if self.remote.is_some() {
            // The pid is the remote host's: ask libvirt whether the domain still runs.
            return match self.dom.clone() {
                Some(d) => Box::new(move || d.is_active().unwrap_or(false)),
                None => Box::new(|| false),
            };
        }
        match self.pid {
            Some(pid) => Box::new(move || crate::backend::process_alive(pid as u32)),
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
