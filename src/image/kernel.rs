//! Kernels: a Debian kernel unpacked once into `<cache>/kernels/<deb sha256>/`, and the
//! release string of any bzImage.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::cache::{self, TempDir};
use super::debian;

pub fn kernels_dir(cache: &Path) -> PathBuf {
    cache.join("kernels")
}

/// An unpacked Debian kernel in `<cache>/kernels/<deb sha256>/`, unpacking it if needed.
pub struct KernelDir {
    pub vmlinuz: PathBuf,
    pub release: String,
    pub modules: Vec<PathBuf>,
    /// The package's `boot/config-<release>` (absent in kernels unpacked by older ocrig).
    pub config: Option<PathBuf>,
}

pub fn debian_kernel(info: &debian::PackageInfo, cache: &Path) -> Result<KernelDir> {
    let dir = kernels_dir(cache).join(&info.sha256);
    if !dir.join("modules.order").is_file() {
        cache::sweep_stale(&kernels_dir(cache));
        let tmp = TempDir::new_in(&kernels_dir(cache), &info.sha256)?;
        let (dl, root, out) = (
            tmp.path().join("deb"),
            tmp.path().join("root"),
            tmp.path().join("out"),
        );
        for d in [&dl, &root, &out.join("modules")] {
            fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let deb = debian::download(info, &dl)?;
        let k = debian::unpack_kernel(&deb, &root)?;
        fs::copy(&k.vmlinuz, out.join("vmlinuz")).context("copying vmlinuz")?;
        let config = root.join("boot").join(format!("config-{}", k.release));
        if config.is_file() {
            fs::copy(&config, out.join("config")).context("copying the kernel config")?;
        }
        let mut order = String::new();
        for m in &k.modules {
            let name = m
                .file_name()
                .context("module path")?
                .to_string_lossy()
                .into_owned();
            let dest = out.join("modules").join(&name);
            if dest.exists() {
                bail!("two modules named {name}");
            }
            fs::copy(m, &dest).with_context(|| format!("copying {}", m.display()))?;
            order.push_str(&name);
            order.push('\n');
        }
        fs::write(out.join("release"), format!("{}\n", k.release))?;
        fs::write(out.join("modules.order"), order)?;
        let staged = TempDir::new_in(&kernels_dir(cache), "out")?;
        fs::remove_dir(staged.path())?;
        fs::rename(&out, staged.path())?;
        drop(tmp);
        staged.commit(&dir)?;
    }
    if !dir.join("config").is_file()
        && let Err(e) = add_config(info, cache, &dir)
    {
        tracing::warn!("the config of {} stays unknown: {e:#}", info.package);
    }
    let release = fs::read_to_string(dir.join("release"))?.trim().to_string();
    let modules = fs::read_to_string(dir.join("modules.order"))?
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| dir.join("modules").join(l))
        .collect();
    let config = Some(dir.join("config")).filter(|c| c.is_file());
    Ok(KernelDir {
        vmlinuz: dir.join("vmlinuz"),
        release,
        modules,
        config,
    })
}

/// Adds the package's `boot/config-<release>` to a kernel directory unpacked by an ocrig that
/// did not keep it (downloads the .deb again, once).
fn add_config(info: &debian::PackageInfo, cache: &Path, dir: &Path) -> Result<()> {
    let release = fs::read_to_string(dir.join("release"))?.trim().to_string();
    let tmp = TempDir::new_in(&kernels_dir(cache), &format!("{}-config", info.sha256))?;
    let root = tmp.path().join("root");
    fs::create_dir_all(&root)?;
    let deb = debian::download(info, tmp.path())?;
    debian::extract(&deb, &root)?;
    let staged = tmp.path().join("config");
    fs::copy(root.join("boot").join(format!("config-{release}")), &staged)
        .with_context(|| format!("{} has no boot/config-{release}", deb.display()))?;
    fs::rename(&staged, dir.join("config")).context("placing the kernel config")?;
    Ok(())
}

/// The kernel release from a bzImage's setup header ("6.1.0-57-amd64 (debian-kernel@...) #1 ...").
pub fn bzimage_release(path: &Path) -> Option<String> {
    let release = bzimage_banner(path)?.split_whitespace().next()?.to_string();
    (!release.is_empty()).then_some(release)
}

/// The whole version string of a bzImage's setup header (release, builder, `uname -v`).
pub fn bzimage_banner(path: &Path) -> Option<String> {
    let mut f = fs::File::open(path).ok()?;
    let mut head = vec![0u8; 64 * 1024];
    let n = std::io::Read::read(&mut f, &mut head).ok()?;
    head.truncate(n);
    if head.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let off = u16::from_le_bytes([*head.get(0x20e)?, *head.get(0x20f)?]) as usize + 0x200;
    let s = head.get(off..(off + 256).min(head.len()))?;
    let s = &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())];
    let banner = std::str::from_utf8(s).ok()?.trim().to_string();
    (!banner.is_empty()).then_some(banner)
}

/// The PVH-bootable vmlinux of an unpacked Debian kernel (`<kernel dir>/vmlinux`), extracted
/// from its bzImage once; or why there is none (remembered in `vmlinux.unavailable`, so a
/// kernel that cannot boot PVH is not decompressed again on every image build).
pub fn pvh_vmlinux(k: &KernelDir) -> Result<std::result::Result<PathBuf, String>> {
    let dir = k.vmlinuz.parent().context("kernel directory")?;
    let (vmlinux, unavailable) = (dir.join("vmlinux"), dir.join("vmlinux.unavailable"));
    if vmlinux.is_file() {
        return Ok(Ok(vmlinux));
    }
    if let Ok(why) = fs::read_to_string(&unavailable) {
        return Ok(Err(why.trim().to_string()));
    }
    match super::vmlinux::extract(&k.vmlinuz, &vmlinux)? {
        Ok(()) => Ok(Ok(vmlinux)),
        Err(why) => {
            fs::write(&unavailable, format!("{why}\n"))
                .with_context(|| format!("writing {}", unavailable.display()))?;
            Ok(Err(why))
        }
    }
}
