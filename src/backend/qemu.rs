//! QEMU driven directly: one `qemu-system-x86_64` process per guest, a QMP socket for
//! vCPU thread ids and orderly power-off, user-mode networking with SSH forwarded from a free
//! port on 127.0.0.1 only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use super::qmp::Qmp;
use super::{Backend, BoxFut, Guest, GuestSpec, Liveness, free_loopback_port, pin_thread, process_alive};
use crate::host::Accel;

pub struct QemuBackend {
    pub binary: PathBuf,
}

impl Default for QemuBackend {
    fn default() -> Self {
        Self {
            binary: PathBuf::from("qemu-system-x86_64"),
        }
    }
}

/// QEMU's command line for a guest whose SSH is forwarded from `ssh_port`.
pub fn qemu_args(spec: &GuestSpec, ssh_port: u16) -> Vec<String> {
    let wd = &spec.workdir;
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["-name", &format!("{},debug-threads=on", spec.name)]);
    push(&["-machine", "q35"]);
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
    push(&[
        "-kernel",
        &spec.kernel.to_string_lossy(),
        "-initrd",
        &spec.initrd.to_string_lossy(),
    ]);
    push(&["-append", &spec.cmdline]);
    let console = console_path(wd, &spec.name);
    push(&[
        "-chardev",
        &format!("file,id=con0,path={}", console.display()),
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
    a
}

pub fn console_path(workdir: &Path, name: &str) -> PathBuf {
    workdir.join(format!("{name}.console.log"))
}
fn qmp_path(workdir: &Path, name: &str) -> PathBuf {
    workdir.join(format!("{name}.qmp"))
}
pub fn pid_path(workdir: &Path, name: &str) -> PathBuf {
    workdir.join(format!("{name}.pid"))
}

impl Backend for QemuBackend {
    fn name(&self) -> &'static str {
        "qemu"
    }

    fn boot<'a>(&'a self, spec: &'a GuestSpec) -> BoxFut<'a, anyhow::Result<Box<dyn Guest>>> {
        Box::pin(async move {
            // A port picked free can be taken before QEMU binds it; retry with another.
            let mut last_err = None;
            for _ in 0..3 {
                match self.start(spec).await {
                    Ok(g) => return Ok(Box::new(g) as Box<dyn Guest>),
                    Err(e) => last_err = Some(e),
                }
            }
            Err(last_err.unwrap())
        })
    }
}

impl QemuBackend {
    async fn start(&self, spec: &GuestSpec) -> anyhow::Result<QemuGuest> {
        std::fs::create_dir_all(&spec.workdir)
            .with_context(|| format!("creating {}", spec.workdir.display()))?;
        let port = free_loopback_port().context("finding a free loopback port")?;
        let log_path = spec.workdir.join(format!("{}.qemu.log", spec.name));
        let log = std::fs::File::create(&log_path)?;
        let _ = std::fs::remove_file(qmp_path(&spec.workdir, &spec.name));
        let mut cmd = Command::new(&self.binary);
        cmd.args(qemu_args(spec, port))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            // Own process group: a Ctrl-C at the terminal reaches ocrig, which stops guests in order.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it makes the kernel kill QEMU if ocrig dies (even by
        // SIGKILL), so no guest outlives the orchestrator.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
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
            name: spec.name.clone(),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            console: console_path(&spec.workdir, &spec.name),
            child,
            qmp: Mutex::new(Some(qmp)),
        })
    }
}

pub struct QemuGuest {
    name: String,
    addr: SocketAddr,
    console: PathBuf,
    child: Child,
    qmp: Mutex<Option<Qmp>>,
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
        Box::pin(async move {
            let mut qmp = self.qmp.lock().await;
            qmp.as_mut().context("QMP is closed")?.vcpu_thread_ids().await
        })
    }

    fn pin_vcpus<'a>(&'a self, cpus: &'a [usize]) -> BoxFut<'a, anyhow::Result<Vec<(u32, usize)>>> {
        Box::pin(async move {
            anyhow::ensure!(!cpus.is_empty(), "no host CPUs to pin to");
            let tids = self.vcpu_threads().await?;
            let mut mapping = Vec::with_capacity(tids.len());
            for (i, tid) in tids.iter().enumerate() {
                let cpu = cpus[i % cpus.len()];
                pin_thread(*tid, cpu).with_context(|| format!("pinning vCPU {i} of {}", self.name))?;
                mapping.push((i as u32, cpu));
            }
            Ok(mapping)
        })
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn kvm_stats(&self) -> BoxFut<'_, anyhow::Result<serde_json::Value>> {
        Box::pin(async move {
            let mut qmp = self.qmp.lock().await;
            let qmp = qmp.as_mut().context("QMP is closed")?;
            let mut raw = serde_json::Map::new();
            for target in ["vm", "vcpu"] {
                let args = serde_json::json!({ "target": target, "providers": [{ "provider": "kvm" }] });
                raw.insert(target.into(), qmp.execute("query-stats", args).await?);
            }
            Ok(serde_json::Value::Object(raw))
        })
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
            if let Some(mut qmp) = self.qmp.lock().await.take() {
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

    #[test]
    fn command_line_forwards_ssh_on_loopback_only_and_pins_accel() {
        let spec = GuestSpec {
            name: "ocrig-t-0".into(),
            vcpus: 2,
            memory_mib: 512,
            kernel: "/k".into(),
            initrd: "/i".into(),
            cmdline: "console=ttyS0".into(),
            accel: Accel::Tcg,
            cpu: "max".into(),
            scratch_disk: None,
            workdir: "/w".into(),
        };
        let a = qemu_args(&spec, 40022).join(" ");
        assert!(a.contains("hostfwd=tcp:127.0.0.1:40022-:22"), "{a}");
        assert!(a.contains("-accel tcg,thread=multi"));
        assert!(a.contains("-smp 2 -m 512"));
        assert!(a.contains("-append console=ttyS0"));
        assert!(!a.contains("-drive"));
        let kvm = GuestSpec {
            accel: Accel::Kvm,
            cpu: "host,kvm-pv-unhalt=off".into(),
            ..spec
        };
        let a = qemu_args(&kvm, 1).join(" ");
        assert!(a.contains("-accel kvm") && a.contains("-cpu host,kvm-pv-unhalt=off"));
    }
}
