//! Building a template: a cold boot of the guest's shape to its ready marker, stopped and saved
//! to a state file, and recorded beside it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use super::migration::{MIGRATION_TIMEOUT, ignore_shared_ram, wait_migration};
use super::scratch::make_ext4;
use super::stored::{FORMAT, Meta, RamFileMeta, Template, check, ram_in_file};
use crate::backend::boot::BootPlan;
use crate::backend::launcher::{Controlled, Launcher};
use crate::backend::paths::console_path;
use crate::backend::{GuestSpec, RamBacking};
use crate::guest::ready::wait_for_marker;
use crate::vocabulary::StartMethod;

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
