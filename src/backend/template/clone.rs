//! Starting a guest as a clone of a template: its own console log and scratch disk, QEMU
//! restoring the saved state, the guest resumed and its sshd answering; then what the journal
//! records of it and the command that puts its clock and RNG right.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::migration::{MIGRATION_TIMEOUT, ignore_shared_ram, wait_migration};
use super::scratch::copy_sparse;
use super::stored::Template;
use crate::backend::boot::BootPlan;
use crate::backend::launcher::{Controlled, Launcher};
use crate::backend::paths::console_path;
use crate::backend::{GuestSpec, Liveness, RamBacking};
use crate::guest::ready::tail_file;

/// From a running restored guest to its sshd's banner.
const BANNER_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a clone did not come up, and whether the template is to blame.
#[derive(Debug)]
pub struct CloneFailure {
    pub why: String,
    /// QEMU could not load the state: the template must not be used again.
    pub template_fault: bool,
}

/// A clone that is running with its sshd answering.
pub struct Restored {
    pub guest: Box<dyn Controlled>,
    /// From starting QEMU to the guest running again, and to its sshd's banner, seconds.
    pub running_s: f64,
    pub banner_s: f64,
}

/// Starts `spec` as a clone of `t`.
pub async fn restore(
    l: &dyn Launcher,
    t: &Template,
    spec: &GuestSpec,
    plan: &BootPlan,
) -> Result<Restored, CloneFailure> {
    let fail = |why: String| CloneFailure {
        why,
        template_fault: false,
    };
    prepare(t, spec).map_err(|e| fail(format!("{e:#}")))?;
    let spec = &GuestSpec {
        ram: t.ram().map_or(RamBacking::Anonymous, RamBacking::CloneOf),
        ..spec.clone()
    };
    let t0 = Instant::now();
    let mut g = l
        .launch(spec, plan, Some(&t.state()))
        .await
        .map_err(|e| fail(format!("{e:#}")))?;
    match bring_up(&*g, t, spec, t0).await {
        Ok((running_s, banner_s)) => Ok(Restored {
            guest: g,
            running_s,
            banner_s,
        }),
        Err(f) => {
            // Gone before the caller boots in its place: a QEMU still exiting holds the write
            // lock on the scratch disk the cold boot opens next.
            if let Err(e) = g.shutdown(Duration::from_secs(2)).await {
                tracing::warn!("{}: stopping the failed clone: {e:#}", spec.name);
            }
            Err(f)
        }
    }
}

/// Loads the template's state into the just-started `g`, resumes it and waits for its sshd:
/// (seconds from `t0` to running, to the banner).
async fn bring_up(
    g: &dyn Controlled,
    t: &Template,
    spec: &GuestSpec,
    t0: Instant,
) -> Result<(f64, f64), CloneFailure> {
    let fail = |why: String| CloneFailure {
        why,
        template_fault: false,
    };
    let launched_s = t0.elapsed().as_secs_f64();
    let load = async {
        if matches!(spec.ram, RamBacking::CloneOf(_)) {
            // Started with `-incoming defer`: the stream has no RAM (the template's file is it).
            ignore_shared_ram(g).await?;
            g.qmp(
                "migrate-incoming",
                json!({ "uri": format!("file:{}", t.state().display()) }),
            )
            .await?;
        }
        wait_migration(g, MIGRATION_TIMEOUT).await
    };
    if let Err(e) = load.await {
        return Err(CloneFailure {
            why: format!("loading the template: {e:#}"),
            template_fault: true,
        });
    }
    let loaded_s = t0.elapsed().as_secs_f64();
    // The template was saved stopped, so the clone waits for `cont` (libvirt may have sent one).
    let resumed = async {
        g.qmp("cont", Value::Null).await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = g.qmp("query-status", Value::Null).await?;
            if st["running"] == true {
                return anyhow::Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the clone did not resume: {st}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    resumed.await.map_err(|e| fail(format!("{e:#}")))?;
    let running_s = t0.elapsed().as_secs_f64();
    let addr = g.ssh_addr();
    let alive = g.liveness();
    let banner =
        tokio::task::spawn_blocking(move || wait_banner(addr, Instant::now() + BANNER_TIMEOUT, alive))
            .await
            .map_err(|e| fail(e.to_string()))?;
    if let Err(e) = banner {
        return Err(fail(format!(
            "{e:#}; console ends with:\n{}",
            tail_file(&g.console_log(), 10)
        )));
    }
    let banner_s = t0.elapsed().as_secs_f64();
    tracing::debug!(
        "{}: clone of {}: QEMU up {launched_s:.2} s, state loaded {loaded_s:.2} s, running {running_s:.2} s, sshd banner {banner_s:.2} s",
        spec.name,
        t.short()
    );
    Ok((running_s, banner_s))
}

/// The clone's console log starts with the template's (the boot its memory comes from), and its
/// scratch disk is a copy of the template's.
fn prepare(t: &Template, spec: &GuestSpec) -> anyhow::Result<()> {
    std::fs::create_dir_all(&spec.workdir).with_context(|| format!("creating {}", spec.workdir.display()))?;
    let mut log = std::fs::read(t.console()).unwrap_or_default();
    log.extend(
        format!(
            "\nocrig: restored from template {} at {} (the lines above are the template's boot)\n",
            t.short(),
            jiff::Timestamp::now()
        )
        .as_bytes(),
    );
    let console = console_path(&spec.workdir, &spec.name);
    std::fs::write(&console, log).with_context(|| format!("writing {}", console.display()))?;
    match (&spec.scratch_disk, t.scratch()) {
        (Some(dst), Some(src)) => copy_sparse(&src, dst),
        (None, None) => Ok(()),
        _ => bail!("the template's scratch disk does not match the guest's"),
    }
}

/// Waits until the guest's sshd sends its banner (`SSH-2.0-...`) on `addr`. QEMU's user-mode
/// networking accepts the TCP connection itself, so only the banner proves the guest answers.
fn wait_banner(addr: SocketAddr, deadline: Instant, alive: Liveness) -> anyhow::Result<()> {
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        if !alive() {
            bail!("the clone's QEMU exited");
        }
        match read_banner(addr) {
            Ok(line) if line.starts_with("SSH-") => return Ok(()),
            Ok(line) => last = format!("unexpected greeting {line:?}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("no SSH banner from the clone at {addr} ({last})")
}

fn read_banner(addr: SocketAddr) -> std::io::Result<String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim().to_string())
}

/// The command a clone runs first: its wall clock to the host's (it still shows the moment
/// the template was saved) and fresh host randomness into its entropy pool (every clone
/// resumes with the template's RNG state; the vmgenid device makes the kernel reseed at
/// restore, and these bytes make sure the pools differ even without it).
pub fn clone_fixup_command(host_unix_time: f64, seed: &[u8]) -> String {
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{{ {} -u -s @{host_unix_time:.6} || date -u -s @{:.0}; }} >/dev/null && printf %s {hex} >/dev/urandom",
        crate::image::GUEST_GNU_DATE,
        host_unix_time.floor()
    )
}

/// Facts for the journal about a clone; `built_here`: this guest waited for the template's build.
pub fn clone_facts(t: &Template, built_here: bool, r: &Restored, plan: &BootPlan) -> Value {
    json!({
        "method": "clone",
        "template": t.short(),
        "template_built_now": built_here,
        "template_boot_s": t.meta.boot_s,
        "template_save_s": t.meta.save_s,
        "template_state_bytes": t.meta.state_bytes,
        // "file": the template's RAM file mapped private (pages shared with every clone until
        // written, 4 KiB host pages; `start: clone-shared`); "state": the clone's own copy,
        // loaded from the state (huge pages, as a booted guest's).
        "ram": if t.meta.ram_file.is_some() { "file" } else { "state" },
        "template_ram_bytes": t.meta.ram_file.as_ref().map(|r| r.bytes),
        "restore_running_s": r.running_s,
        "restore_banner_s": r.banner_s,
        "boot": plan.facts,
    })
}
