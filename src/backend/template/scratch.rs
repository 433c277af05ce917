//! The scratch disk: made fresh for a template, copied for each of its clones (byte for byte:
//! the guest's mounted ext4 lives partly in the restored page cache).

use std::path::Path;

use anyhow::Context;

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

/// `cp --sparse=always --reflink=auto`: a 1 GiB scratch disk holds ~35 MB of ext4 metadata;
/// a plain copy would write the whole GiB.
pub(super) fn copy_sparse(src: &Path, dst: &Path) -> anyhow::Result<()> {
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
