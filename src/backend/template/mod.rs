//! Snapshot clones: boot one guest of a shape to ready, save it, and start guests of that
//! shape by restoring the saved state instead of booting.
//!
//! A template is built by a cold boot that is stopped once /init reports ready on the console —
//! before any SSH connection, so no session or TCP state is in the snapshot — then saved with
//! QMP `migrate` to a file (`stop` first, so guest memory, devices and the scratch disk are one
//! consistent instant). A clone is a QEMU started with the same configuration plus
//! `-incoming file:<state>`; it gets its own SSH forward, QMP socket and console log, and its own
//! copy of the template's scratch disk (the guest's mounted ext4 lives partly in the restored
//! page cache, so the disk must be byte-identical to the template's at save time: a fresh,
//! independently made file system would be corrupted).
//!
//! A clone (`start: clone`) loads its own copy of the guest's RAM from the state into QEMU's
//! anonymous memory, which the host backs with transparent huge pages as it does a booted
//! guest's. For `start: clone-shared`, where the backend can (QEMU driven directly), the
//! template's RAM is a file of its own (`ram`, a `memory-backend-file` mapped shared while the
//! template runs) and the state leaves it out (`x-ignore-shared`): the state is a few hundred
//! KB, and a clone maps the RAM file private (`share=off`, started with `-incoming defer` so
//! the capability can be set before the stream is read), so the pages it only reads are the
//! page cache's, one copy for every clone, and only what it writes is its own. Measured here
//! with 8 clones of a 128 MiB guest: PSS per clone 59.7 MiB (53.5 MiB private dirty) against
//! 140.8 MiB (138.0) with its own copy, and a clone runs 0.06 s after QEMU starts (was 0.6 s);
//! but the guest's RAM is on 4 KiB host pages (AnonHugePages of a 2-vCPU clone's QEMU 38 MiB,
//! all of it TCG's code buffer, against 137 MiB with its own copy and 184 MiB for a booted
//! guest), hence not the default. libvirt names its own memory-backend files, so its clones
//! always load their copy.
//!
//! Templates live in `<cache>/templates/<key>/` where the key is the sha256 of every input
//! that shapes the saved state: the backend's complete QEMU configuration with the per-guest
//! parts (name, paths, port) masked, the QEMU (and libvirt) versions and binary, the
//! accelerator (KVM and TCG snapshots never mix), for KVM the host CPU, size and mtime of the
//! kernel, initrd and firmware files, and the scratch disk size. A template whose recorded
//! inputs differ from the current ones, whose state file has the wrong size or checksum, or
//! that QEMU cannot load, is never used: it is removed and rebuilt, once: one this sweep built
//! that QEMU then cannot load is not built again in the sweep, whose guests of that shape boot.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::boot::BootPlan;
use super::launcher::{Controlled, Launcher};
use super::paths::console_path;
use super::{GuestSpec, RamBacking};
use crate::guest::ready::{tail_file, wait_for_marker};
use crate::vocabulary::StartMethod;

mod key;
mod migration;
mod scratch;
mod stored;
#[cfg(test)]
mod tests;

pub use key::file_stamp;
pub(crate) use scratch::make_ext4;

use key::inputs;
use migration::{MIGRATION_TIMEOUT, ignore_shared_ram, wait_migration};
use scratch::copy_sparse;
use stored::{FORMAT, Meta, RamFileMeta, Template, check, ram_in_file};

/// Templates kept; the least recently used beyond this are removed when a new one is built.
const KEEP: usize = 12;

type Cell = Arc<tokio::sync::OnceCell<Result<Arc<Template>, String>>>;

/// The on-disk template cache plus, per process, one build or check per key (the guests of a
/// group ask at once; one builds, the others wait for it).
pub struct TemplateCache {
    root: PathBuf,
    cells: tokio::sync::Mutex<HashMap<String, Cell>>,
}

impl Default for TemplateCache {
    fn default() -> Self {
        Self::new(crate::image::cache_dir().join("templates"))
    }
}

impl TemplateCache {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            cells: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The template for `spec`'s shape: checked (once per process) or built, and whether this
    /// call built it (the guest that paid for it). Err says why there is none, in one sentence.
    pub async fn get(
        &self,
        l: &dyn Launcher,
        spec: &GuestSpec,
        plan: &BootPlan,
    ) -> Result<(Arc<Template>, bool), String> {
        let inputs = inputs(l, spec, plan).map_err(|e| format!("{e:#}"))?;
        let key = crate::image::sha256_hex(inputs.as_bytes());
        let cell = {
            let mut cells = self.cells.lock().await;
            Arc::clone(cells.entry(key.clone()).or_default())
        };
        let mut ran = false;
        let t = cell
            .get_or_init(|| {
                ran = true;
                async {
                    self.load_or_build(l, spec, plan, &key, &inputs)
                        .await
                        .map(Arc::new)
                        .map_err(|e| format!("{e:#}"))
                }
            })
            .await
            .clone()?;
        let built_here = ran && t.built_now;
        Ok((t, built_here))
    }

    /// Removes a template QEMU could not load. One found in the cache (a stale or damaged
    /// file) is rebuilt by the next guest of its shape; one this sweep built is not: QEMU
    /// failing to load what it just saved fails the same way after every build (each costing
    /// a boot), so the failure is kept for the sweep and its guests boot.
    pub async fn discard(&self, t: &Template, why: &str) {
        let mut cells = self.cells.lock().await;
        if t.built_now {
            let kept = format!(
                "template {} was built in this sweep and QEMU could not load it ({why}); not built again in this sweep",
                t.short()
            );
            super::boot::notice_once(&kept);
            cells.insert(
                t.key.clone(),
                Arc::new(tokio::sync::OnceCell::new_with(Some(Err(kept)))),
            );
        } else {
            super::boot::notice_once(&format!(
                "template {} is unusable ({why}); removing it so it is rebuilt",
                t.short()
            ));
            cells.remove(&t.key);
        }
        let _ = std::fs::remove_dir_all(&t.dir);
    }

    async fn load_or_build(
        &self,
        l: &dyn Launcher,
        spec: &GuestSpec,
        plan: &BootPlan,
        key: &str,
        inputs: &str,
    ) -> anyhow::Result<Template> {
        let dir = self.root.join(key);
        if dir.exists() {
            let checked = {
                let (dir, key, inputs) = (dir.clone(), key.to_string(), inputs.to_string());
                tokio::task::spawn_blocking(move || check(&dir, &key, &inputs)).await?
            };
            match checked {
                Ok(t) => return Ok(t),
                Err(why) => {
                    super::boot::notice_once(&format!(
                        "template {} is unusable ({why}); rebuilding it",
                        &key[..16]
                    ));
                    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
                }
            }
        }
        std::fs::create_dir_all(&self.root).with_context(|| format!("creating {}", self.root.display()))?;
        let t = build(l, spec, plan, &self.root, key, inputs).await?;
        evict(&self.root, KEEP);
        Ok(t)
    }
}

/// Removes the least recently used templates beyond `keep`.
fn evict(root: &Path, keep: usize) {
    crate::image::sweep_stale(root);
    let Ok(rd) = std::fs::read_dir(root) else { return };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            let used = std::fs::metadata(e.path().join("template.json"))
                .and_then(|m| m.modified())
                .unwrap_or(UNIX_EPOCH);
            (used, e.path())
        })
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.0));
    for (_, d) in dirs.into_iter().skip(keep) {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A template's cold boot to the ready marker (a loaded 2-core host can take 30 s+).
const BUILD_BOOT_TIMEOUT: Duration = Duration::from_secs(150);

/// A name for a template guest that the orphan reaper recognises as belonging to this sweep
/// (`ocrig-<run id>-<digits>`, the same run id as the guests it is built for).
pub(super) fn template_name(spec_name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = 900_000 + N.fetch_add(1, Ordering::Relaxed);
    match crate::backend::owned::run_id_of(spec_name) {
        Some(run) => format!("ocrig-{run}-{n}"),
        None => format!("{spec_name}-{n}"),
    }
}

pub(super) async fn build(
    l: &dyn Launcher,
    spec: &GuestSpec,
    plan: &BootPlan,
    root: &Path,
    key: &str,
    inputs: &str,
) -> anyhow::Result<Template> {
    let tmp = crate::image::TempDir::new_in(root, key)?;
    let dir = tmp.path().to_path_buf();
    let state = dir.join("state");
    anyhow::ensure!(
        !state.to_string_lossy().contains(','),
        "the template cache path {} contains a comma, which QEMU's migration URI cannot carry",
        dir.display()
    );
    let scratch_bytes = match &spec.scratch_disk {
        Some(d) => Some(std::fs::metadata(d)?.len()),
        None => None,
    };
    let scratch = match scratch_bytes {
        Some(bytes) => {
            let p = dir.join("scratch.img");
            make_ext4(&p, bytes)?;
            Some(p)
        }
        None => None,
    };
    // Console, QMP socket and pid file in a short directory of their own: a socket path must fit
    // in 108 bytes, which a cache under a long $HOME would not leave.
    let work = WorkDir::new()?;
    let ram = ram_in_file(l, spec).then(|| dir.join("ram"));
    let tspec = GuestSpec {
        name: template_name(&spec.name),
        workdir: work.0.clone(),
        scratch_disk: scratch.clone(),
        start: StartMethod::Boot,
        ram: ram
            .clone()
            .map_or(RamBacking::Anonymous, RamBacking::TemplateFile),
        ..spec.clone()
    };
    let t0 = Instant::now();
    let mut g = l
        .launch(&tspec, plan, None)
        .await
        .context("starting the template guest")?;
    let saved = save(&mut *g, &tspec, &state).await;
    let _ = g.shutdown(Duration::from_secs(5)).await;
    let boot_save = saved?;
    drop(g);
    std::fs::copy(console_path(&work.0, &tspec.name), dir.join("console.log"))
        .context("keeping the template's console log")?;
    let state_bytes = std::fs::metadata(&state)?.len();
    let ram_file = ram.as_deref().map(RamFileMeta::of).transpose()?;
    let state_sha256 = {
        let s = state.clone();
        tokio::task::spawn_blocking(move || crate::image::sha256_file(&s)).await??
    };
    let meta = Meta {
        format: FORMAT.into(),
        key: key.to_string(),
        backend: l.kind().to_string(),
        inputs: inputs.to_string(),
        state_bytes,
        state_sha256,
        scratch_bytes,
        built_at: jiff::Timestamp::now().to_string(),
        boot_s: boot_save.0,
        save_s: boot_save.1,
        ram_file,
    };
    std::fs::write(dir.join("template.json"), serde_json::to_vec_pretty(&meta)?)?;
    tracing::info!(
        "template {} built: boot {:.2} s, save {:.2} s, {} MB state{} ({:.2} s in all)",
        &key[..16],
        meta.boot_s,
        meta.save_s,
        state_bytes >> 20,
        meta.ram_file.as_ref().map_or(String::new(), |r| format!(
            ", RAM in a file ({} MB written of {} MB)",
            r.allocated_bytes >> 20,
            r.bytes >> 20
        )),
        t0.elapsed().as_secs_f64()
    );
    let final_dir = root.join(key);
    tmp.commit(&final_dir)?;
    // A concurrent build elsewhere may have won the rename; use whichever is in place.
    let mut t = check(&final_dir, key, inputs).map_err(anyhow::Error::msg)?;
    t.built_now = true;
    Ok(t)
}

/// A scratch directory under the system temp dir, removed on drop.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> anyhow::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "ocrig-tpl-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(Self(p))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits for the template's ready marker, then stops it and saves it to `state`.
/// Returns (boot seconds, save seconds).
async fn save(g: &mut dyn Controlled, spec: &GuestSpec, state: &Path) -> anyhow::Result<(f64, f64)> {
    let t0 = Instant::now();
    let (console, alive) = (g.console_log(), g.liveness());
    let deadline = Instant::now() + BUILD_BOOT_TIMEOUT;
    tokio::task::spawn_blocking(move || wait_for_marker(&console, deadline, alive))
        .await?
        .with_context(|| format!("the template guest {} did not become ready", spec.name))?;
    let boot_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    g.qmp("stop", Value::Null).await?;
    if matches!(spec.ram, RamBacking::TemplateFile(_)) {
        // The RAM is the file already: leave it out of the state.
        ignore_shared_ram(&*g).await?;
    }
    g.qmp("migrate", json!({ "uri": format!("file:{}", state.display()) }))
        .await?;
    wait_migration(g, MIGRATION_TIMEOUT)
        .await
        .context("saving the template")?;
    Ok((boot_s, t1.elapsed().as_secs_f64()))
}

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
fn wait_banner(addr: SocketAddr, deadline: Instant, alive: super::Liveness) -> anyhow::Result<()> {
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
