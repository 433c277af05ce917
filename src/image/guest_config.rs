//! Can a kernel serve as an ocrig guest? Checked from its config before anything boots: the
//! image's /init, dropbear and the host's view of the guest need a few options built in (or,
//! for the drivers the image loads itself, built as modules the image can ship). A kernel
//! without them would only show up as a boot that never becomes ready.

use std::fs;
use std::path::Path;

use super::identity::{KernelConfig, embedded_config, is_elf};
use super::tree;

/// An option the guest needs: name (without `CONFIG_`), why, and the module the image loads
/// when the option is `m` (None: it must be built in).
struct Needed {
    option: &'static str,
    why: &'static str,
    module: Option<&'static str>,
}

const fn need(option: &'static str, why: &'static str, module: Option<&'static str>) -> Needed {
    Needed { option, why, module }
}

/// What every guest needs.
const ALWAYS: &[Needed] = &[
    need("PCI", "QEMU's virtio devices sit on PCI", None),
    need("VIRTIO", "the guest's devices are virtio", Some("virtio")),
    need(
        "VIRTIO_PCI",
        "the guest's NIC is a virtio PCI device",
        Some("virtio_pci"),
    ),
    need(
        "VIRTIO_NET",
        "ocrig reaches the guest by SSH over its virtio NIC",
        Some("virtio_net"),
    ),
    need("NET", "SSH needs networking", None),
    need("INET", "SSH needs inet (TCP/IP) sockets", None),
    need("UNIX", "busybox and dropbear use unix sockets", None),
    need("DEVTMPFS", "/init mounts devtmpfs on /dev", None),
    need("BLK_DEV_INITRD", "the guest's userland is an initramfs", None),
    need(
        "BINFMT_ELF",
        "busybox, dropbear and the payload are ELF programs",
        None,
    ),
    need("BINFMT_SCRIPT", "/init is a shell script", None),
    need("PROC_FS", "/init and the payload read /proc", None),
    need("SYSFS", "/init finds eth0 and the disk in /sys", None),
    need("TMPFS", "/tmp, /run and /dev/shm are tmpfs", None),
    need("FUTEX", "the payload's threads wait on futexes", None),
    need("TTY", "ocrig reads the guest's serial console", None),
    need(
        "SERIAL_8250",
        "ocrig reads the guest's serial console (ttyS0)",
        None,
    ),
    need("SERIAL_8250_CONSOLE", "the kernel's console is ttyS0", None),
];

/// What a guest with a scratch disk also needs.
const SCRATCH: &[Needed] = &[
    need("BLOCK", "the scratch disk is a block device", None),
    need(
        "VIRTIO_BLK",
        "the scratch disk is a virtio disk",
        Some("virtio_blk"),
    ),
    need("EXT4_FS", "the scratch disk is ext4", Some("ext4")),
];

/// Where the modules of `m` options would come from.
pub enum Modules<'a> {
    /// A build tree: `has(name)` says whether it built module `name`.
    Tree(&'a dyn Fn(&str) -> bool),
    /// A lone kernel image: no modules at all.
    None,
}

/// The options `config` lacks for a guest, each as `CONFIG_X (why)`. An `m` option counts
/// only for a driver the image loads itself, and only when the module is there to ship.
pub fn missing(config: &KernelConfig, scratch: bool, modules_from: Modules<'_>) -> Vec<String> {
    let modules = config.get("MODULES") == Some("y");
    ALWAYS
        .iter()
        .chain(if scratch { SCRATCH } else { &[] })
        .filter_map(|n| {
            let value = config.get(n.option);
            match (value, n.module) {
                (Some("y"), _) => None,
                (Some("m"), Some(m)) if modules && matches!(&modules_from, Modules::Tree(has) if has(m)) => {
                    None
                }
                (Some("m"), Some(_)) if matches!(modules_from, Modules::None) => Some(format!(
                    "CONFIG_{}=m, but a lone kernel image brings no modules: build it in, or give its tree as `kernel: {{tree: …}}` ({})",
                    n.option, n.why
                )),
                (Some("m"), Some(m)) => Some(format!(
                    "CONFIG_{}=m, but the module {m}.ko is not built (run `make modules`) ({})",
                    n.option, n.why
                )),
                (Some("m"), None) => Some(format!(
                    "CONFIG_{}=m must be =y: the image does not load it as a module ({})",
                    n.option, n.why
                )),
                _ => Some(format!("CONFIG_{} is not set ({})", n.option, n.why)),
            }
        })
        .collect()
}

/// The options of `wanted` (`(name, value, module)`: `CONFIG_<name>=<value>`, and for `m` the
/// module a tree must have built; a workload's, or what a KVM guest's spinlocks need) that the
/// kernel given as `given` (None: a Debian kernel) lacks, each in words (empty: it has them all). A Debian kernel is judged by
/// what ocrig's image of it ships: its boot modules only, so no `=m` option a workload loads.
pub fn lacks_options(given: Option<Given<'_>>, wanted: &[(&str, &str, Option<&str>)]) -> Vec<String> {
    let config = match &given {
        Some(Given::Tree(root)) => match tree::inspect(root) {
            Ok(t) => Some((t.config.clone(), Some(t))),
            // The tree itself is judged by `check`.
            Err(_) => return Vec::new(),
        },
        Some(Given::File { path, .. }) => {
            let data = fs::read(path).ok();
            let inner = data.as_deref().and_then(|d| {
                if is_elf(d) {
                    Some(d.to_vec())
                } else {
                    super::vmlinux::decompressed(d).ok()
                }
            });
            inner.as_deref().and_then(embedded_config).map(|c| (c, None))
        }
        None => None,
    };
    wanted
        .iter()
        .filter_map(|&(option, value, module)| {
            let w = format!("CONFIG_{option}={value}");
            match (&given, &config) {
                (None, _) if value == "m" => Some(format!(
                    "{w}: ocrig's image of a Debian kernel ships only the modules it boots with (and Debian's stock kernels do not build this one); give a kernel tree built with it as `kernel: {{tree: …}}`"
                )),
                (None, _) => None,
                (Some(_), None) => Some(format!("{w}: the kernel carries no config to check it by (CONFIG_IKCONFIG)")),
                (Some(_), Some((c, tree))) => {
                    let got = c.get(option);
                    match (got, tree) {
                        (Some(v), _) if v != value => Some(format!("{w}, but the kernel has CONFIG_{option}={v}")),
                        (None, _) => Some(format!("{w}, but CONFIG_{option} is not set")),
                        (Some("m"), None) => Some(format!("{w}: a lone kernel image brings no modules; give its tree as `kernel: {{tree: …}}`")),
                        (Some("m"), Some(t)) if module.is_some_and(|m| !t.has_module(m)) => Some(format!(
                            "{w}, but the tree has not built {}.ko (run `make modules`)",
                            module.unwrap_or("?")
                        )),
                        _ => None,
                    }
                }
            }
        })
        .collect()
}

/// A note when the config has no PVH entry (the kernel then boots through SeaBIOS).
pub fn pvh_note(config: &KernelConfig) -> Option<String> {
    (config.get("PVH") != Some("y")).then(|| {
        "CONFIG_PVH is not set: it boots through SeaBIOS and its bzImage, the slower way (PVH is ~3x faster under TCG)"
            .to_string()
    })
}

/// A kernel as a scenario gives it, to check before booting.
pub enum Given<'a> {
    Tree(&'a Path),
    File { path: &'a Path, own_initrd: bool },
}

/// What validation says about a kernel: problems (exit 2) and notes (printed, not fatal).
#[derive(Debug, Default)]
pub struct Verdict {
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

/// Checks a tree or a kernel file: that it is a built kernel, and from its config that it can
/// be a guest (`scratch`: a scratch disk is asked for). Reads files; boots nothing.
pub fn check(given: Given<'_>, scratch: bool) -> Verdict {
    let mut v = Verdict::default();
    match given {
        Given::Tree(root) => match tree::inspect(root) {
            Err(why) => v.problems.push(why),
            Ok(t) => {
                for m in missing(&t.config, scratch, Modules::Tree(&|m| t.has_module(m))) {
                    v.problems.push(format!("{}: {m}", t.config_path.display()));
                }
                if let Some(why) = &t.pvh_unavailable {
                    let from_config = pvh_note(&t.config);
                    v.notes.push(from_config.unwrap_or_else(|| {
                        format!("{why}: it boots arch/x86/boot/bzImage through SeaBIOS, the slower way")
                    }));
                }
            }
        },
        Given::File { path, own_initrd } => {
            let Ok(data) = fs::read(path) else {
                v.problems.push(format!(
                    "kernel {} does not exist or cannot be read",
                    path.display()
                ));
                return v;
            };
            let is_bz = data.get(0x202..0x206) == Some(b"HdrS");
            let inner = if is_elf(&data) {
                if let Err(why) = super::vmlinux::has_pvh_note(&data) {
                    v.problems.push(format!(
                        "{}: {why}; QEMU boots an ELF kernel only through its PVH entry (give its arch/x86/boot/bzImage)",
                        path.display()
                    ));
                    return v;
                }
                Some(data)
            } else if is_bz {
                super::vmlinux::decompressed(&data).ok()
            } else {
                v.problems.push(format!(
                    "{} is not a kernel image (neither a bzImage with a setup header nor an ELF vmlinux)",
                    path.display()
                ));
                return v;
            };
            if own_initrd {
                return v;
            }
            match inner.as_deref().and_then(embedded_config) {
                // A lone image carries no modules for the image to ship: all must be built in.
                Some(c) => {
                    for m in missing(&c, scratch, Modules::None) {
                        v.problems
                            .push(format!("{} (its embedded config): {m}", path.display()));
                    }
                }
                None => v.notes.push(format!(
                    "{} carries no config (CONFIG_IKCONFIG): whether it can serve as a guest is not checked; give its build tree as `kernel: {{tree: …}}` to check it",
                    path.display()
                )),
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "CONFIG_PCI=y\nCONFIG_VIRTIO=y\nCONFIG_VIRTIO_PCI=y\nCONFIG_VIRTIO_NET=y\nCONFIG_NET=y\n\
CONFIG_INET=y\nCONFIG_UNIX=y\nCONFIG_DEVTMPFS=y\nCONFIG_BLK_DEV_INITRD=y\nCONFIG_BINFMT_ELF=y\nCONFIG_BINFMT_SCRIPT=y\n\
CONFIG_PROC_FS=y\nCONFIG_SYSFS=y\nCONFIG_TMPFS=y\nCONFIG_FUTEX=y\nCONFIG_TTY=y\nCONFIG_SERIAL_8250=y\n\
CONFIG_SERIAL_8250_CONSOLE=y\nCONFIG_PVH=y\n";

    /// A workload's options (locktorture's): a Debian kernel ships no extra module; a tree is
    /// read by its config and built modules; a lone image by its embedded config.
    #[test]
    fn a_kernel_lacking_a_workloads_options_is_named_with_each() {
        let wanted = [
            ("LOCK_TORTURE_TEST", "m", Some("locktorture")),
            ("MODULE_UNLOAD", "y", None),
        ];
        let debian = lacks_options(None, &wanted);
        assert_eq!(debian.len(), 1, "{debian:?}");
        assert!(
            debian[0].starts_with("CONFIG_LOCK_TORTURE_TEST=m: ocrig's image of a Debian kernel"),
            "{debian:?}"
        );
        let d = tempfile::tempdir().unwrap();
        let tree = |config: &str, built: bool| {
            fs::write(d.path().join(".config"), config).unwrap();
            fs::create_dir_all(d.path().join("arch/x86/boot")).unwrap();
            fs::write(d.path().join("arch/x86/boot/bzImage"), "x").unwrap();
            let order = if built {
                "kernel/locking/locktorture.ko\n"
            } else {
                ""
            };
            fs::write(d.path().join("modules.order"), order).unwrap();
            if built {
                fs::create_dir_all(d.path().join("kernel/locking")).unwrap();
                fs::write(d.path().join("kernel/locking/locktorture.ko"), "ko").unwrap();
            }
            lacks_options(Some(Given::Tree(d.path())), &wanted)
        };
        let none = tree("CONFIG_MODULES=y\n", false);
        assert_eq!(
            none,
            [
                "CONFIG_LOCK_TORTURE_TEST=m, but CONFIG_LOCK_TORTURE_TEST is not set",
                "CONFIG_MODULE_UNLOAD=y, but CONFIG_MODULE_UNLOAD is not set"
            ]
        );
        let built_in = tree("CONFIG_LOCK_TORTURE_TEST=y\nCONFIG_MODULE_UNLOAD=y\n", false);
        assert_eq!(
            built_in,
            ["CONFIG_LOCK_TORTURE_TEST=m, but the kernel has CONFIG_LOCK_TORTURE_TEST=y"]
        );
        let unbuilt = tree("CONFIG_LOCK_TORTURE_TEST=m\nCONFIG_MODULE_UNLOAD=y\n", false);
        assert!(unbuilt[0].contains("has not built locktorture.ko"), "{unbuilt:?}");
        assert!(
            tree(
                "CONFIG_MODULES=y\nCONFIG_LOCK_TORTURE_TEST=m\nCONFIG_MODULE_UNLOAD=y\n",
                true
            )
            .is_empty()
        );
    }

    #[test]
    fn a_guest_config_passes_and_each_missing_option_is_named() {
        let good = KernelConfig::parse(GOOD);
        let none = |_: &str| false;
        let all = |_: &str| true;
        assert!(missing(&good, false, Modules::Tree(&none)).is_empty());
        // A scratch disk needs block, virtio-blk and ext4 too.
        let m = missing(&good, true, Modules::Tree(&none));
        assert_eq!(m.len(), 3, "{m:?}");
        assert!(m[2].starts_with("CONFIG_EXT4_FS is not set"), "{m:?}");
        let no_net = KernelConfig::parse(
            &GOOD
                .replace("CONFIG_VIRTIO_NET=y\n", "")
                .replace("CONFIG_UNIX=y", "CONFIG_UNIX=m"),
        );
        let m = missing(&no_net, false, Modules::Tree(&all));
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("CONFIG_VIRTIO_NET is not set (ocrig reaches"),
            "{m:?}"
        );
        assert!(m[1].starts_with("CONFIG_UNIX=m must be =y"), "{m:?}");
        assert!(pvh_note(&no_net).is_none());
    }

    #[test]
    fn modules_count_only_when_built_and_loadable() {
        let modular = KernelConfig::parse(&format!(
            "{}CONFIG_MODULES=y\n",
            GOOD.replace("CONFIG_VIRTIO_NET=y", "CONFIG_VIRTIO_NET=m")
        ));
        assert!(missing(&modular, false, Modules::Tree(&|m| m == "virtio_net")).is_empty());
        let m = missing(&modular, false, Modules::Tree(&|_| false));
        assert!(m[0].contains("virtio_net.ko is not built"), "{m:?}");
        let m = missing(&modular, false, Modules::None);
        assert!(m[0].contains("a lone kernel image brings no modules"), "{m:?}");
        let no_modules = KernelConfig::parse(&GOOD.replace("CONFIG_VIRTIO_NET=y", "CONFIG_VIRTIO_NET=m"));
        assert_eq!(missing(&no_modules, false, Modules::Tree(&|_| true)).len(), 1);
        let no_pvh = KernelConfig::parse(&GOOD.replace("CONFIG_PVH=y\n", ""));
        assert!(pvh_note(&no_pvh).unwrap().contains("slower way"));
    }

    #[test]
    fn files_that_are_not_kernels_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("notes.txt");
        fs::write(&p, "hello").unwrap();
        let v = check(
            Given::File {
                path: &p,
                own_initrd: false,
            },
            false,
        );
        assert!(v.problems[0].contains("is not a kernel image"), "{v:?}");
        let elf = crate::testing::elf_with_notes(&[(b"GNU", 18)]);
        fs::write(&p, elf).unwrap();
        let v = check(
            Given::File {
                path: &p,
                own_initrd: false,
            },
            false,
        );
        assert!(v.problems[0].contains("no PVH entry note"), "{v:?}");
        let v = check(
            Given::File {
                path: &d.path().join("gone"),
                own_initrd: false,
            },
            false,
        );
        assert!(v.problems[0].contains("does not exist"), "{v:?}");
        // An ELF with the PVH note but no embedded config: booted, with a note.
        let elf = crate::testing::elf_with_notes(&[(b"Xen", 18)]);
        fs::write(&p, elf).unwrap();
        let v = check(
            Given::File {
                path: &p,
                own_initrd: false,
            },
            false,
        );
        assert!(
            v.problems.is_empty() && v.notes[0].contains("carries no config"),
            "{v:?}"
        );
    }

    #[test]
    fn a_tree_missing_virtio_net_is_refused_naming_its_config() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join(".config"),
            GOOD.replace("CONFIG_VIRTIO_NET=y\n", ""),
        )
        .unwrap();
        fs::create_dir_all(d.path().join("arch/x86/boot")).unwrap();
        fs::write(d.path().join("arch/x86/boot/bzImage"), "x").unwrap();
        let v = check(Given::Tree(d.path()), false);
        assert_eq!(v.problems.len(), 1, "{v:?}");
        assert!(
            v.problems[0].contains(".config: CONFIG_VIRTIO_NET is not set"),
            "{v:?}"
        );
        // No vmlinux: booted the slower way, with a note.
        assert!(v.notes[0].contains("has no vmlinux"), "{v:?}");
    }
}
