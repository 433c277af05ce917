//! The content-addressed cache: `$OCRIG_CACHE` or `~/.cache/ocrig`.
//!
//! ```text
//! <cache>/images/<id>/        one finished image (vmlinuz, vmlinux, initrd.img, keys, manifest.json)
//! <cache>/kernels/<deb sha>/  an unpacked Debian kernel: vmlinuz, release, modules/*.ko, modules.order,
//!                             vmlinux (extracted on first use) or vmlinux.unavailable (why not)
//! <cache>/templates/<key>/    a saved guest to clone (see backend/template/)
//! <cache>/*/.tmp-*            builds in progress; renamed into place when complete
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// `$OCRIG_CACHE`, else `$XDG_CACHE_HOME/ocrig`, else `~/.cache/ocrig`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OCRIG_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("ocrig");
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/ocrig")
}

/// A directory under construction that is removed on drop unless `commit`ted.
pub struct TempDir {
    path: Option<PathBuf>,
}

impl TempDir {
    /// A fresh `<parent>/.tmp-<tag>-<pid>-<nanos>` (same file system as the final place).
    pub fn new_in(parent: &Path, tag: &str) -> Result<Self> {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let short: String = tag.chars().take(16).collect();
        let path = parent.join(format!(".tmp-{short}-{}-{nanos}", std::process::id()));
        fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path: Some(path) })
    }

    pub fn path(&self) -> &Path {
        self.path.as_deref().expect("TempDir used after commit")
    }

    /// Rename into `dest` atomically. If another process finished `dest` first, keep theirs.
    pub fn commit(mut self, dest: &Path) -> Result<()> {
        let path = self.path.take().expect("TempDir committed twice");
        match fs::rename(&path, dest) {
            Ok(()) => Ok(()),
            Err(e) if dest.is_dir() => {
                // ENOTEMPTY/EEXIST: a concurrent build won the race; both are equivalent.
                let _ = fs::remove_dir_all(&path);
                tracing::debug!("{} already present ({e}); keeping it", dest.display());
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&path);
                Err(e).with_context(|| format!("renaming {} to {}", path.display(), dest.display()))
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Remove `.tmp-*` leftovers older than an hour (a build killed half-way).
pub fn sweep_stale(parent: &Path) {
    let Ok(rd) = fs::read_dir(parent) else { return };
    for e in rd.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old && e.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// Hard-link `src` to `dest`, copying when linking is impossible (other file system).
pub fn link_or_copy(src: &Path, dest: &Path) -> Result<()> {
    if fs::hard_link(src, dest).is_ok() {
        return Ok(());
    }
    fs::copy(src, dest).with_context(|| format!("copying {} to {}", src.display(), dest.display()))?;
    Ok(())
}

/// What an image was built from; its canonical JSON hashes to the image id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Inputs {
    pub format: String,
    pub kernel: KernelInput,
    pub busybox_static: String,
    pub dropbear_bin: String,
    pub openssh_client: Option<String>,
    pub init_sha256: String,
    /// sha256 over the guest-side paths and contents of every host file copied in
    /// (busybox, dropbear, scp and their shared libraries).
    pub host_files_sha256: String,
    pub modules_wanted: Vec<String>,
    /// The guest packages with their dependencies (absent when none, which keeps the ids of
    /// images without packages as they were).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<PackageInput>,
}

/// One Debian package put in the guest, pinned.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PackageInput {
    pub package: String,
    pub version: String,
    pub deb_sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum KernelInput {
    Debian {
        package: String,
        version: String,
        deb_sha256: String,
    },
    File {
        kernel_sha256: String,
        initrd_sha256: Option<String>,
        kernel_path: String,
    },
    /// A kernel build tree: what it boots, its config and the modules it built.
    Tree {
        /// Informative only (dropped from the id, like `kernel_path`).
        tree: String,
        boot_sha256: String,
        bzimage_sha256: Option<String>,
        config_sha256: String,
        /// sha256 over the built modules' paths and contents (None: no modules).
        modules_sha256: Option<String>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub id: String,
    pub inputs: Inputs,
    pub kernel_release: String,
    /// Module files in load order (empty: drivers built in, or a user initrd).
    pub modules: Vec<String>,
    pub vmlinuz_bytes: u64,
    /// Size of the uncompressed PVH kernel `vmlinux`, when the image has one.
    #[serde(default)]
    pub vmlinux_bytes: Option<u64>,
    /// Why the image has no PVH kernel (one sentence), when it has none.
    #[serde(default)]
    pub pvh_unavailable: Option<String>,
    pub initrd_bytes: u64,
    /// sha256 of the key-independent first cpio archive of initrd.img (absent for a user initrd).
    pub initrd_base_sha256: Option<String>,
    /// Whether host_key.pub exists (false for a user-supplied initrd).
    pub host_key_pinned: bool,
    pub built_at: String,
    pub build_secs: f64,
    /// What the kernel is (absent in images built before identities were recorded).
    #[serde(default)]
    pub identity: Option<super::identity::KernelIdentity>,
    /// What the guest packages hold unpacked (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages_bytes: Option<u64>,
}

impl Manifest {
    pub fn read(dir: &Path) -> Result<Self> {
        let p = dir.join("manifest.json");
        let text = fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        let p = dir.join("manifest.json");
        let text = serde_json::to_string_pretty(self)? + "\n";
        fs::write(&p, text).with_context(|| format!("writing {}", p.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tempdir_commit_and_drop() {
        let root = tempfile::tempdir().unwrap();
        let t = TempDir::new_in(root.path(), "abc").unwrap();
        let gone = t.path().to_path_buf();
        drop(t);
        assert!(!gone.exists());
        let t = TempDir::new_in(root.path(), "abc").unwrap();
        fs::write(t.path().join("f"), "1").unwrap();
        let dest = root.path().join("final");
        t.commit(&dest).unwrap();
        assert!(dest.join("f").is_file());
        // A second commit onto an existing image keeps the first.
        let t = TempDir::new_in(root.path(), "abc").unwrap();
        fs::write(t.path().join("f"), "2").unwrap();
        t.commit(&dest).unwrap();
        assert_eq!(fs::read_to_string(dest.join("f")).unwrap(), "1");
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 1);
    }
}
