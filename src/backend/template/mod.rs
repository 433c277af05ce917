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
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::boot::BootPlan;
use super::launcher::{Controlled, Launcher};
use super::paths::console_path;
use super::{GuestSpec, RamBacking};
use crate::guest::ready::{tail_file, wait_for_marker};
use crate::host::Accel;
use crate::vocabulary::StartMethod;

/// Bump when the template layout or the way templates are made changes.
pub const FORMAT: &str = "ocrig-template-2";
/// Templates kept; the least recently used beyond this are removed when a new one is built.
const KEEP: usize = 12;
/// A template's cold boot to the ready marker (a loaded 2-core host can take 30 s+).
const BUILD_BOOT_TIMEOUT: Duration = Duration::from_secs(150);
/// Saving ~90 MB to a file, or loading it back.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(60);
/// From a running restored guest to its sshd's banner.
const BANNER_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether a template for `spec` keeps the guest's RAM in a file of its own: for
/// [`StartMethod::CloneShared`] where the backend can; otherwise every clone loads its own copy
/// from the state.
pub fn ram_in_file(l: &dyn Launcher, spec: &GuestSpec) -> bool {
    l.ram_files() && spec.start == StartMethod::CloneShared
}

/// The template's RAM file as saved: a clone maps it private, so nothing writes it after the
/// build; its size and modification time catch a file replaced or truncated since.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RamFileMeta {
    pub bytes: u64,
    pub mtime_ns: u128,
    /// Bytes of it on disk (the rest are holes: RAM the template never touched).
    pub allocated_bytes: u64,
}

impl RamFileMeta {
    fn of(path: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Self {
            bytes: m.len(),
            mtime_ns: mtime_ns(&m),
            allocated_bytes: m.blocks() * 512,
        })
    }
}

/// What `template.json` records.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    pub format: String,
    pub key: String,
    pub backend: String,
    /// The full input text the key hashes (compared on every use, not only its hash).
    pub inputs: String,
    pub state_bytes: u64,
    pub state_sha256: String,
    pub scratch_bytes: Option<u64>,
    pub built_at: String,
    /// Cold boot of the template to its ready marker, and the save, seconds.
    pub boot_s: f64,
    pub save_s: f64,
    /// The guest's RAM, when it is a file beside the state rather than inside it.
    #[serde(default)]
    pub ram_file: Option<RamFileMeta>,
}

/// A usable template.
#[derive(Debug, Clone)]
pub struct Template {
    pub key: String,
    pub dir: PathBuf,
    pub meta: Meta,
    /// True when this process built it (the group that pays for the build).
    pub built_now: bool,
}

impl Template {
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
    pub fn scratch(&self) -> Option<PathBuf> {
        self.meta.scratch_bytes.map(|_| self.dir.join("scratch.img"))
    }
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    /// The guest's RAM as saved, when the template keeps it in a file.
    pub fn ram(&self) -> Option<PathBuf> {
        self.meta.ram_file.as_ref().map(|_| self.dir.join("ram"))
    }
    pub fn short(&self) -> &str {
        &self.key[..16]
    }
}

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

/// Everything the template key covers, as text.
fn inputs(l: &dyn Launcher, spec: &GuestSpec, plan: &BootPlan) -> anyhow::Result<String> {
    inputs_on(l, spec, plan, &crate::hostfs::LocalFs)
}

/// `inputs` with the host's kernel facts read through `host` (a stand-in in tests).
fn inputs_on(
    l: &dyn Launcher,
    spec: &GuestSpec,
    plan: &BootPlan,
    host: &dyn crate::hostfs::HostFs,
) -> anyhow::Result<String> {
    let mut s = format!(
        "format {FORMAT}\nbackend {}\naccel {}\n",
        l.kind(),
        spec.accel.as_str()
    );
    s.push_str(&l.fingerprint(spec, plan)?);
    s.push('\n');
    let files = [Some(&plan.kernel), Some(&spec.initrd), plan.bios.as_ref()];
    for f in files.into_iter().flatten() {
        s.push_str(&format!("file {}\n", file_stamp(f)?));
    }
    let scratch = match &spec.scratch_disk {
        Some(d) => std::fs::metadata(d)
            .with_context(|| format!("the scratch disk {}", d.display()))?
            .len()
            .to_string(),
        None => "none".into(),
    };
    s.push_str(&format!("scratch {scratch}\n"));
    s.push_str(if ram_in_file(l, spec) {
        "ram file\n"
    } else {
        "ram state\n"
    });
    if spec.accel == Accel::Kvm {
        // `-cpu host` is whatever this CPU offers; a template saved on other silicon (or after a
        // microcode update that changed the flags) must not be restored here.
        s.push_str(&format!("host-cpu {}\n", host_cpu_identity()));
        // CPUID is not in the migration stream: the leaves KVM hands a `-cpu host` guest also
        // depend on the host kernel and KVM's module parameters, so either changing means
        // another template.
        s.push_str(&crate::host::kvm_identity(host));
    }
    Ok(s)
}

/// `path size mtime-ns`: the files are content-addressed by the image cache already; this
/// catches a file replaced in place.
pub fn file_stamp(path: &Path) -> anyhow::Result<String> {
    let m = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mtime = mtime_ns(&m);
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(format!("{} {} {mtime}", canon.display(), m.len()))
}

/// A file's modification time in nanoseconds since the epoch (0 where the file system has none).
fn mtime_ns(m: &std::fs::Metadata) -> u128 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

fn host_cpu_identity() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |k: &str| {
        info.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} | {} | {}",
        field("model name"),
        field("microcode"),
        crate::image::sha256_hex(field("flags").as_bytes())
    )
}

/// A usable template in `dir`, or why it is not.
fn check(dir: &Path, key: &str, inputs: &str) -> Result<Template, String> {
    let meta: Meta = std::fs::read(dir.join("template.json"))
        .map_err(|e| format!("template.json: {e}"))
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("template.json: {e}")))?;
    if meta.format != FORMAT || meta.key != key || meta.inputs != inputs {
        return Err("its recorded inputs differ from this guest's".into());
    }
    let t = Template {
        key: key.to_string(),
        dir: dir.to_path_buf(),
        meta,
        built_now: false,
    };
    let size = std::fs::metadata(t.state())
        .map_err(|e| format!("state file: {e}"))?
        .len();
    if size != t.meta.state_bytes {
        return Err(format!(
            "the state file has {size} bytes, {} were saved",
            t.meta.state_bytes
        ));
    }
    if let (Some(want), Some(p)) = (t.meta.scratch_bytes, t.scratch()) {
        let got = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        if got != want {
            return Err(format!("its scratch disk has {got} bytes, {want} were saved"));
        }
    }
    if let (Some(want), Some(p)) = (&t.meta.ram_file, t.ram()) {
        let got = RamFileMeta::of(&p).map_err(|e| format!("RAM file: {e:#}"))?;
        if (got.bytes, got.mtime_ns) != (want.bytes, want.mtime_ns) {
            return Err(format!(
                "its RAM file has {} bytes modified at {} ns, {} bytes at {} ns were saved",
                got.bytes, got.mtime_ns, want.bytes, want.mtime_ns
            ));
        }
    }
    let sum = crate::image::sha256_file(&t.state()).map_err(|e| format!("state file: {e:#}"))?;
    if sum != t.meta.state_sha256 {
        return Err("the state file's checksum differs from the saved one".into());
    }
    // Recently used templates are kept when the cache is trimmed.
    if let Ok(f) = std::fs::File::options()
        .append(true)
        .open(dir.join("template.json"))
    {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
    Ok(t)
}

/// A name for a template guest that the orphan reaper recognises as belonging to this sweep
/// (`ocrig-<run id>-<digits>`, the same run id as the guests it is built for).
fn template_name(spec_name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = 900_000 + N.fetch_add(1, Ordering::Relaxed);
    match crate::backend::owned::run_id_of(spec_name) {
        Some(run) => format!("ocrig-{run}-{n}"),
        None => format!("{spec_name}-{n}"),
    }
}

async fn build(
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

/// Sets the migration capability that leaves shared (file) RAM out of the stream, on the
/// saving side, and tells the loading side the stream has none.
async fn ignore_shared_ram(g: &dyn Controlled) -> anyhow::Result<()> {
    g.qmp(
        "migrate-set-capabilities",
        json!({ "capabilities": [{ "capability": "x-ignore-shared", "state": true }] }),
    )
    .await
    .map(|_| ())
}

/// Polls `query-migrate` until it completes; fails on `failed`/`cancelled`, a dead QEMU or
/// the timeout.
async fn wait_migration(g: &dyn Controlled, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let alive = g.liveness();
    loop {
        if !alive() {
            bail!("QEMU exited: {}", g.qemu_log().trim());
        }
        let r = g.qmp("query-migrate", Value::Null).await;
        match r.as_ref().ok().and_then(|v| v["status"].as_str()) {
            Some("completed") => return Ok(()),
            Some(s @ ("failed" | "cancelled")) => {
                let why = r
                    .as_ref()
                    .ok()
                    .and_then(|v| v["error-desc"].as_str())
                    .unwrap_or("");
                bail!("migration {s}: {why} {}", g.qemu_log().trim());
            }
            _ => {}
        }
        if let Err(e) = &r
            && !alive()
        {
            bail!("QEMU exited ({e:#}): {}", g.qemu_log().trim());
        }
        if Instant::now() >= deadline {
            bail!("no completed migration after {:.0} s", within.as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

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

/// `cp --sparse=always --reflink=auto`: a 1 GiB scratch disk holds ~35 MB of ext4 metadata;
/// a plain copy would write the whole GiB.
fn copy_sparse(src: &Path, dst: &Path) -> anyhow::Result<()> {
    let out = std::process::Command::new("cp")
        .args(["--sparse=always", "--reflink=auto", "-f"])
        .arg(src)
        .arg(dst)
        .output()
        .context("running cp")?;
    anyhow::ensure!(
        out.status.success(),
        "copying the template's scratch disk to {}: {}",
        dst.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// A raw ext4 image of `bytes` (the same as the sweep makes for booted guests).
pub(crate) fn make_ext4(path: &Path, bytes: u64) -> anyhow::Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.set_len(bytes)?;
    let out = std::process::Command::new("mkfs.ext4")
        .args(["-F", "-q"])
        .arg(path)
        .output()
        .context("running mkfs.ext4")?;
    anyhow::ensure!(
        out.status.success(),
        "mkfs.ext4 {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
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

#[cfg(test)]
mod tests;
