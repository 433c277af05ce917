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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use anyhow::Context;

use super::GuestSpec;
use super::boot::BootPlan;
use super::launcher::Launcher;

mod build;
mod clone;
mod key;
mod migration;
mod scratch;
mod stored;
#[cfg(test)]
mod tests;

pub use clone::{clone_facts, clone_fixup_command, restore};
pub use key::file_stamp;
// The real-guest tests make their guests' scratch disks with it.
#[cfg(test)]
pub(crate) use scratch::make_ext4;

use build::build;
use key::inputs;
use stored::{Template, check};

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
