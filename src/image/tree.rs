//! A kernel build tree as a guest kernel (`kernel: {tree: /path/to/linux}`): its `vmlinux`
//! (booted PVH when it has the PVH note), else `arch/x86/boot/bzImage`; its `.config` (the
//! kernel's identity and the check that it can serve as a guest); `System.map` (kept with the
//! image for symbols); and the modules the guest needs when the tree builds them as modules
//! (laid out as `make modules_install INSTALL_MOD_PATH=…` would, into a scratch root at image
//! build, read from the tree's `modules.order`, then ordered by `modprobe --show-depends` like
//! a Debian kernel's).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::cmd;
use super::debian::ExtraModule;
use super::identity::{KernelConfig, is_elf};

/// A tree's parts, checked: bad input is a sentence for the user, not an error chain.
#[derive(Debug, Clone)]
pub struct Tree {
    pub root: PathBuf,
    pub config: KernelConfig,
    pub config_path: PathBuf,
    /// `vmlinux` with a PVH entry note.
    pub pvh_vmlinux: Option<PathBuf>,
    /// Why the tree does not boot PVH, when it does not.
    pub pvh_unavailable: Option<String>,
    pub bzimage: Option<PathBuf>,
    pub system_map: Option<PathBuf>,
    /// `uname -r` from `include/config/kernel.release`, when the build wrote it.
    pub release: Option<String>,
    /// Module paths (relative to the tree) from `modules.order`; empty without modules.
    pub modules: Vec<String>,
}

impl Tree {
    /// The file booted: the PVH vmlinux, else the bzImage.
    pub fn boot_file(&self) -> &Path {
        self.pvh_vmlinux
            .as_deref()
            .or(self.bzimage.as_deref())
            .expect("inspect guarantees one kernel")
    }

    /// Whether the tree built module `name` (`virtio_net`; `-` and `_` alike).
    pub fn has_module(&self, name: &str) -> bool {
        let want = name.replace('-', "_");
        self.modules.iter().any(|m| {
            Path::new(m)
                .file_name()
                .map(|f| f.to_string_lossy().replace('-', "_"))
                .is_some_and(|f| f == format!("{want}.ko") || f == format!("{want}.o"))
        })
    }
}

/// Checks that `root` is a built kernel tree; `Err` says why not (for the scenario error).
pub fn inspect(root: &Path) -> std::result::Result<Tree, String> {
    if !root.is_dir() {
        return Err(format!("{} is not a directory", root.display()));
    }
    let config_path = root.join(".config");
    if !config_path.is_file() {
        return Err(format!(
            "{} has no .config: not a configured kernel tree (run `make defconfig` or `make tinyconfig` there first)",
            root.display()
        ));
    }
    let config = KernelConfig::read(&config_path).map_err(|e| format!("{e:#}"))?;
    let (vmlinux, bzimage) = (root.join("vmlinux"), root.join("arch/x86/boot/bzImage"));
    let bzimage = bzimage.is_file().then_some(bzimage);
    let (pvh_vmlinux, pvh_unavailable) = if vmlinux.is_file() {
        match elf_pvh(&vmlinux) {
            Ok(()) => (Some(vmlinux), None),
            Err(why) => (None, Some(format!("{}: {why}", vmlinux.display()))),
        }
    } else {
        (None, Some(format!("{} has no vmlinux", root.display())))
    };
    if pvh_vmlinux.is_none() && bzimage.is_none() {
        return Err(match &pvh_unavailable {
            Some(why) if vmlinux_exists(root) => {
                format!("{why}, and there is no arch/x86/boot/bzImage to boot instead (run `make bzImage`)")
            }
            _ => format!(
                "{} has no built kernel (no vmlinux, no arch/x86/boot/bzImage): run `make -j$(nproc) vmlinux bzImage` there",
                root.display()
            ),
        });
    }
    let system_map = Some(root.join("System.map")).filter(|p| p.is_file());
    let release = fs::read_to_string(root.join("include/config/kernel.release"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let modules = if config.get("MODULES") == Some("y") {
        fs::read_to_string(root.join("modules.order"))
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            // modules.order names the objects; only built ones count.
            .filter(|l| root.join(Path::new(l).with_extension("ko")).is_file())
            .map(String::from)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Tree {
        root: root.to_path_buf(),
        config,
        config_path,
        pvh_vmlinux,
        pvh_unavailable,
        bzimage,
        system_map,
        release,
        modules,
    })
}

fn vmlinux_exists(root: &Path) -> bool {
    root.join("vmlinux").is_file()
}

/// Ok when `path` is an ELF kernel with a PVH entry note; else why not.
pub fn elf_pvh(path: &Path) -> std::result::Result<(), String> {
    let data = fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    if !is_elf(&data) {
        return Err("not an ELF file".into());
    }
    super::vmlinux::has_pvh_note(&data)
}

/// Lays the tree's built modules out under `root` as `make modules_install` would
/// (`lib/modules/<release>/kernel/<path>.ko`, with `modules.order` and `modules.builtin`),
/// runs depmod there, and lists the wanted ones with their dependencies in load order. Read
/// from the tree directly: nothing runs in the user's tree. Empty when the tree builds none
/// of them as modules.
pub fn install_modules(tree: &Tree, root: &Path, release: &str) -> Result<(Vec<PathBuf>, Vec<ExtraModule>)> {
    let wanted: Vec<&str> = super::debian::WANTED_MODULES
        .iter()
        .chain(super::debian::OPTIONAL_MODULES)
        .copied()
        .filter(|m| tree.has_module(m))
        .collect();
    let extra: Vec<&str> = super::debian::EXTRA_MODULES
        .iter()
        .copied()
        .filter(|m| tree.has_module(m))
        .collect();
    if wanted.is_empty() && extra.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let lib = root.join("lib/modules").join(release);
    let mut order = String::new();
    for m in &tree.modules {
        let rel = Path::new(m).with_extension("ko");
        let dest = lib.join("kernel").join(&rel);
        fs::create_dir_all(dest.parent().context("module path")?)?;
        fs::copy(tree.root.join(&rel), &dest).with_context(|| format!("copying {}", rel.display()))?;
        order.push_str(&format!("kernel/{}\n", rel.display()));
    }
    fs::write(lib.join("modules.order"), order)?;
    for f in ["modules.builtin", "modules.builtin.modinfo"] {
        let src = tree.root.join(f);
        if src.is_file() {
            let text = fs::read(&src)?;
            fs::write(lib.join(f), text)?;
        }
    }
    cmd::run(Command::new("depmod").arg("-b").arg(root).arg(release))
        .context("depmod for the tree's modules")?;
    let modules = if wanted.is_empty() {
        Vec::new()
    } else {
        super::debian::show_depends(root, release, &wanted)?
    };
    if modules.is_empty() && !wanted.is_empty() {
        bail!("modprobe found none of {wanted:?} among the tree's modules");
    }
    let mut seen = std::collections::HashSet::new();
    let modules = modules.into_iter().filter(|m| seen.insert(m.clone())).collect();
    let extra = extra
        .into_iter()
        .map(|name| {
            let files = super::debian::show_depends(root, release, &[name])?;
            Ok(ExtraModule {
                name: name.to_string(),
                files,
            })
        })
        .collect::<Result<_>>()?;
    Ok((modules, extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_without_config_or_kernel_are_refused_with_a_reason() {
        let d = tempfile::tempdir().unwrap();
        let e = inspect(&d.path().join("nope")).unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
        let e = inspect(d.path()).unwrap_err();
        assert!(e.contains("has no .config"), "{e}");
        fs::write(d.path().join(".config"), "CONFIG_PVH=y\n").unwrap();
        let e = inspect(d.path()).unwrap_err();
        assert!(e.contains("has no built kernel"), "{e}");
        // A vmlinux that is not an ELF kernel with the PVH note, and no bzImage.
        fs::write(d.path().join("vmlinux"), "not elf").unwrap();
        let e = inspect(d.path()).unwrap_err();
        assert!(
            e.contains("not an ELF file") && e.contains("no arch/x86/boot/bzImage"),
            "{e}"
        );
        // With a bzImage it boots that, and says why not PVH.
        fs::create_dir_all(d.path().join("arch/x86/boot")).unwrap();
        fs::write(d.path().join("arch/x86/boot/bzImage"), "x").unwrap();
        let t = inspect(d.path()).unwrap();
        assert!(t.pvh_vmlinux.is_none() && t.pvh_unavailable.as_deref().unwrap().contains("not an ELF"));
        assert!(t.boot_file().ends_with("bzImage"));
    }

    #[test]
    fn a_pvh_vmlinux_is_preferred_and_built_modules_are_found() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join(".config"),
            "CONFIG_MODULES=y\nCONFIG_VIRTIO_BLK=m\n",
        )
        .unwrap();
        let elf = crate::testing::elf_with_notes(&[(b"Xen", 18)]);
        fs::write(d.path().join("vmlinux"), elf).unwrap();
        fs::create_dir_all(d.path().join("drivers/block")).unwrap();
        fs::write(d.path().join("drivers/block/virtio_blk.ko"), "ko").unwrap();
        fs::write(
            d.path().join("modules.order"),
            "drivers/block/virtio_blk.ko\ndrivers/net/never_built.ko\n",
        )
        .unwrap();
        let t = inspect(d.path()).unwrap();
        assert!(t.boot_file().ends_with("vmlinux"));
        assert!(t.has_module("virtio_blk") && !t.has_module("never_built") && !t.has_module("ext4"));
    }
}
