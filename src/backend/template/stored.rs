//! A template as it lies in the cache: the record `template.json` keeps (the inputs it was
//! built from, its state's size and checksum, its RAM file), the files beside it, and the check
//! that it is still usable.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::backend::GuestSpec;
use crate::backend::launcher::Launcher;
use crate::vocabulary::StartMethod;

/// Bump when the template layout or the way templates are made changes.
pub const FORMAT: &str = "ocrig-template-2";

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
    pub(super) fn of(path: &Path) -> anyhow::Result<Self> {
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

/// A file's modification time in nanoseconds since the epoch (0 where the file system has none).
pub(super) fn mtime_ns(m: &std::fs::Metadata) -> u128 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

/// A usable template in `dir`, or why it is not.
pub(super) fn check(dir: &Path, key: &str, inputs: &str) -> Result<Template, String> {
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
