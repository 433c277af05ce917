//! The guest image: Debian kernel + busybox/dropbear initramfs, content-addressed cache.
//!
//! `ensure` builds (or reuses) `<cache>/images/<id>/` where `id` is the sha256 of the inputs
//! (kernel .deb or bzImage, busybox/dropbear versions, host files copied in, /init, format).
//! The initrd is two concatenated uncompressed cpio archives — a deterministic base (same
//! inputs → same bytes) and a small one with the per-image keys — because under TCG the
//! guest spends longer inflating a gzip initramfs than copying a plain one. A Debian kernel
//! also gets its uncompressed `vmlinux` for direct PVH boot (see `vmlinux.rs`). See
//! images/README.md.

mod cache;
mod cmd;
pub mod debian;
pub mod guest_config;
mod host_files;
pub mod identity;
mod initramfs;
mod kernel;
mod keys;
pub mod packages;
pub mod trace_events;
pub mod tree;
mod vmlinux;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use cache::{Inputs, KernelInput, Manifest};
pub use cache::{TempDir, cache_dir, sweep_stale};
pub use cmd::{sha256_file, sha256_hex};
use debian::ExtraModule;
pub use host_files::GUEST_GNU_DATE;
use host_files::{BUSYBOX, HostFile, host_files};
use identity::KernelConfig;
pub use identity::KernelIdentity;
use initramfs::Archive;
use kernel::{bzimage_banner, bzimage_release, debian_kernel, pvh_vmlinux};

/// Bump when the image layout or /init contract changes (invalidates every cached image).
pub const FORMAT: &str = "ocrig-image-4";
/// The guest's /init (busybox sh), also at images/init.
pub const INIT_SCRIPT: &str = include_str!("../../images/init");
/// Printed on the console (ttyS0) once dropbear listens on port 22.
pub const READY_MARKER: &str = "OCRIG-READY";
/// Printed on the console early in /init, followed by ` kernel=<release> uptime=<s>`.
pub const BOOT_MARKER: &str = "OCRIG-BOOT";

/// The kernel in a form QEMU can boot directly (PVH entry of the uncompressed ELF vmlinux),
/// or why the image has none (then the bzImage in `GuestSpec::kernel` is booted).
#[derive(Debug, Clone, PartialEq)]
pub enum FastKernel {
    Pvh(PathBuf),
    Unavailable(String),
}

impl Default for FastKernel {
    fn default() -> Self {
        FastKernel::Unavailable("no uncompressed kernel was given".into())
    }
}

pub enum KernelSource {
    /// A Debian kernel release like "6.1.0-41-amd64", or "default" (what linux-image-amd64 depends on).
    Debian(String),
    /// A user-supplied bzImage, or an ELF vmlinux with a PVH note (booted PVH). With an initrd,
    /// that initrd is used as-is (no keys, no pinning).
    File {
        kernel: PathBuf,
        initrd: Option<PathBuf>,
    },
    /// A kernel build tree (see `tree.rs`): its vmlinux or bzImage, .config, System.map, modules.
    Tree(PathBuf),
}

pub struct ImageSpec {
    pub kernel: KernelSource,
    /// Debian packages put in the guest with their dependencies (`guest.packages`).
    pub packages: Vec<String>,
}

impl ImageSpec {
    /// The image of `kernel` with nothing more in it.
    pub fn kernel(kernel: KernelSource) -> Self {
        Self {
            kernel,
            packages: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Image {
    /// sha256 of the inputs (also the directory name).
    pub id: String,
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub kernel_release: String,
    /// OpenSSH-format ed25519 private key; `id_ed25519.pub` sits beside it.
    pub client_key: PathBuf,
    /// Raw SSH host key blob (compare with `ssh2::Session::host_key()`); empty = not pinned
    /// (user-supplied initrd).
    pub host_key_blob: Vec<u8>,
    /// false = reused from the cache.
    pub built: bool,
    /// Seconds this call took (build, or cache lookup when reused).
    pub build_secs: f64,
    pub initrd_bytes: u64,
    /// The uncompressed kernel with a PVH entry note (`vmlinux`), booted directly when the
    /// backend can; None when the image has none, with the reason in `pvh_unavailable`.
    pub pvh_kernel: Option<PathBuf>,
    pub pvh_unavailable: Option<String>,
    /// What the kernel is: release, `uname -v`, content hash, config digest.
    pub identity: KernelIdentity,
    /// The guest packages in the image (`name version`), dependencies included.
    pub packages: Vec<String>,
    /// What the packages hold once unpacked in the guest's memory (0: none).
    pub packages_bytes: u64,
}

impl Image {
    /// The image's fast-boot kernel (what a backend boots directly).
    pub fn fast_kernel(&self) -> FastKernel {
        match (&self.pvh_kernel, &self.pvh_unavailable) {
            (Some(k), _) => FastKernel::Pvh(k.clone()),
            (None, why) => FastKernel::Unavailable(
                why.clone()
                    .unwrap_or_else(|| "the image has no uncompressed kernel".into()),
            ),
        }
    }
}

/// The release the `linux-image-amd64` metapackage depends on (e.g. "6.1.0-57-amd64").
/// Memoised in the default cache dir while apt's package lists are unchanged.
pub fn resolve_default_kernel() -> Result<String> {
    let mut apt = debian::Apt::open(Some(&cache_dir()));
    apt.default_release(true)?.context("no default kernel")
}

/// Build the image for `spec` under `cache`, or reuse it when the inputs are unchanged.
pub fn ensure(spec: &ImageSpec, cache: &Path) -> Result<Image> {
    let t0 = Instant::now();
    fs::create_dir_all(cache).with_context(|| format!("creating the image cache {}", cache.display()))?;
    let plan = plan(spec, cache, true)?.expect("plan with update never returns None");
    let dir = images_dir(cache).join(&plan.id);
    if let Some(mut img) = load(&dir)? {
        img.build_secs = t0.elapsed().as_secs_f64();
        return Ok(img);
    }
    build(spec, &plan, cache, &dir, t0).with_context(|| format!("building guest image {}", plan.id))?;
    let mut img =
        load(&dir)?.with_context(|| format!("image {} missing right after its build", dir.display()))?;
    // The kernel's trace events, read once at build (validation refuses a variant's unknown
    // `trace_events` from this list without booting); a kernel without them only loses that.
    if let Err(why) = trace_events::of_image(&img) {
        tracing::info!("image {}: trace events not known before boot: {why}", img.id);
    }
    img.built = true;
    img.build_secs = t0.elapsed().as_secs_f64();
    Ok(img)
}

/// Why a Debian kernel release cannot be had, or None when it can: Debian's package lists know
/// its `linux-image-<release>` package (no download, no `apt-get update`). "default" can on
/// Debian (the image build updates apt's lists if need be), but not on a distribution that does
/// not package Debian's `linux-image-amd64` (Ubuntu): then the reason names what to set instead.
pub fn kernel_unavailable(release: &str) -> Result<Option<String>> {
    let cache = cache_dir();
    let mut apt = debian::Apt::open(Some(&cache));
    if release == "default" {
        let known = apt.package("linux-image-amd64", false)?.is_some();
        let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        return Ok(default_kernel_unavailable(&os, known));
    }
    Ok(apt
        .package(&debian::kernel_package(release), false)?
        .is_none()
        .then(|| format!("Debian has no package linux-image-{release} (see `apt-cache search linux-image`)")))
}

/// apt's answers for the checks before a sweep (`guest.packages`, Debian's perf against a
/// kernel), from one memo opened once. apt's lists are updated first only where the host has
/// none at all (a fresh container), as the image build would.
pub struct AptLookup {
    apt: debian::Apt,
    update_if_unknown: bool,
}

impl AptLookup {
    pub fn open(cache: &Path) -> Self {
        let no_lists = fs::read_dir("/var/lib/apt/lists").map_or(true, |d| {
            !d.flatten()
                .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
        });
        Self {
            apt: debian::Apt::open(Some(cache)),
            update_if_unknown: no_lists,
        }
    }

    /// What apt knows of package `name`, `None` when nothing.
    pub fn package(&mut self, name: &str) -> Result<Option<debian::PackageInfo>> {
        self.apt.package(name, self.update_if_unknown)
    }

    /// The version of the Debian package of kernel `release` ("default" too), `None` when apt
    /// does not know it.
    pub fn kernel_package_version(&mut self, release: &str) -> Result<Option<String>> {
        let release = if release.trim() == "default" {
            match self.apt.default_release(false)? {
                Some(r) => r,
                None => return Ok(None),
            }
        } else {
            release.to_string()
        };
        Ok(self
            .apt
            .package(&debian::kernel_package(&release), false)?
            .map(|i| i.version))
    }
}

/// [`kernel_unavailable`] of "default", from the host's /etc/os-release and whether apt knows
/// `linux-image-amd64`.
pub fn default_kernel_unavailable(os_release: &str, apt_knows_it: bool) -> Option<String> {
    let field = |key: &str| {
        os_release.lines().find_map(|l| {
            let v = l.strip_prefix(key)?.strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_string())
        })
    };
    let id = field("ID").unwrap_or_default();
    // No os-release at all: left to the image build, which names what apt lacks.
    let debian = id == "debian" || id.is_empty();
    if apt_knows_it || debian {
        return None;
    }
    let name = field("PRETTY_NAME").unwrap_or(id);
    Some(format!(
        "the default guest kernel is Debian's linux-image-amd64, which {name} does not package: set a kernel file \
         (`kernel: {{path: /boot/vmlinuz-<release>}}`, a distribution kernel with virtio-pci and virtio-net built in, \
         and virtio-blk and ext4 for a scratch disk: `=y` in /boot/config-<release>), a build tree \
         (`kernel: {{tree: /path/to/linux}}`)"
    ))
}

/// The cached image for `spec`, if one exists. Never builds, downloads or runs `apt-get update`.
pub fn cached(spec: &ImageSpec, cache: &Path) -> Result<Option<Image>> {
    let t0 = Instant::now();
    let Some(plan) = plan(spec, cache, false)? else {
        return Ok(None);
    };
    let img = load(&images_dir(cache).join(&plan.id))?;
    Ok(img.map(|mut i| {
        i.build_secs = t0.elapsed().as_secs_f64();
        i
    }))
}

fn images_dir(cache: &Path) -> PathBuf {
    cache.join("images")
}

/// A finished image directory → `Image` (built = false). `None` if absent or incomplete.
fn load(dir: &Path) -> Result<Option<Image>> {
    let Ok(m) = Manifest::read(dir) else {
        return Ok(None);
    };
    let (kernel, initrd, client_key) = (
        dir.join("vmlinuz"),
        dir.join("initrd.img"),
        dir.join("id_ed25519"),
    );
    if !(kernel.is_file() && initrd.is_file() && client_key.is_file()) {
        return Ok(None);
    }
    let host_key_blob = if m.host_key_pinned {
        let p = dir.join("host_key.pub");
        let line = fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        keys::blob_from_line(line.trim()).with_context(|| format!("parsing {}", p.display()))?
    } else {
        Vec::new()
    };
    let initrd_bytes = fs::metadata(&initrd)?.len();
    let vmlinux = dir.join("vmlinux");
    let pvh_kernel = (m.vmlinux_bytes.is_some() && vmlinux.is_file()).then_some(vmlinux);
    let pvh_unavailable = match &pvh_kernel {
        Some(_) => None,
        None => Some(
            m.pvh_unavailable
                .clone()
                .unwrap_or_else(|| "the image has no uncompressed kernel".into()),
        ),
    };
    let identity = match m.identity.clone() {
        Some(i) => i,
        None => KernelIdentity {
            release: m.kernel_release.clone(),
            version: bzimage_banner(&kernel)
                .and_then(|b| identity::parse_banner(&b))
                .and_then(|(_, v)| v),
            sha256: cmd::sha256_file(&kernel)?,
            source: "an image built before kernel identities were recorded".into(),
            boot: if pvh_kernel.is_some() { "pvh" } else { "bzimage" }.into(),
            config_sha256: None,
            config_from: "not recorded by the ocrig that built this image".into(),
        },
    };
    Ok(Some(Image {
        id: m.id,
        dir: dir.to_path_buf(),
        kernel,
        initrd,
        kernel_release: m.kernel_release,
        client_key,
        host_key_blob,
        built: false,
        build_secs: 0.0,
        initrd_bytes,
        pvh_kernel,
        pvh_unavailable,
        identity,
        packages: m
            .inputs
            .packages
            .iter()
            .map(|p| format!("{} {}", p.package, p.version))
            .collect(),
        packages_bytes: m.packages_bytes.unwrap_or(0),
    }))
}

struct Plan {
    id: String,
    inputs: Inputs,
    host_files: Vec<HostFile>,
    deb: Option<debian::PackageInfo>,
    tree: Option<tree::Tree>,
    /// The guest packages with their dependencies, pinned.
    packages: Vec<debian::PackageInfo>,
}

/// Resolve every input and hash them. `allow_update`: may run `apt-get update` (else `None`
/// when apt does not know the kernel package).
fn plan(spec: &ImageSpec, cache: &Path, allow_update: bool) -> Result<Option<Plan>> {
    let mut tree = None;
    let mut apt = debian::Apt::open(Some(cache));
    let packages = if spec.packages.is_empty() {
        Vec::new()
    } else {
        if matches!(&spec.kernel, KernelSource::File { initrd: Some(_), .. }) {
            bail!(
                "guest packages go into ocrig's own initramfs, and this kernel boots with an initrd of its own: \
                 drop the kernel's `initrd` or the packages"
            );
        }
        match packages::closure(&mut apt, &spec.packages, allow_update)? {
            Some(p) => p,
            None if allow_update => bail!("apt does not know one of the packages {:?}", spec.packages),
            None => return Ok(None),
        }
    };
    let (kernel, deb) = match &spec.kernel {
        KernelSource::Debian(release) => {
            let release = if release.trim() == "default" || release.trim().is_empty() {
                match apt.default_release(allow_update)? {
                    Some(r) => r,
                    None => return Ok(None),
                }
            } else {
                release.clone()
            };
            let pkg = debian::kernel_package(&release);
            let Some(info) = apt.package(&pkg, allow_update)? else {
                return Ok(None);
            };
            let k = KernelInput::Debian {
                package: info.package.clone(),
                version: info.version.clone(),
                deb_sha256: info.sha256.clone(),
            };
            (k, Some(info))
        }
        KernelSource::File { kernel, initrd } => {
            let k = KernelInput::File {
                kernel_sha256: cmd::sha256_file(kernel).context("hashing the user-supplied kernel")?,
                initrd_sha256: initrd
                    .as_deref()
                    .map(cmd::sha256_file)
                    .transpose()
                    .context("hashing the user-supplied initrd")?,
                kernel_path: kernel.display().to_string(),
            };
            (k, None)
        }
        KernelSource::Tree(root) => {
            let t = tree::inspect(root).map_err(anyhow::Error::msg)?;
            let mut modules = String::new();
            for m in &t.modules {
                let ko = root.join(Path::new(m).with_extension("ko"));
                modules.push_str(&format!("{m} {}\n", cmd::sha256_file(&ko)?));
            }
            let k = KernelInput::Tree {
                tree: root.display().to_string(),
                boot_sha256: cmd::sha256_file(t.boot_file())?,
                bzimage_sha256: t.bzimage.as_deref().map(cmd::sha256_file).transpose()?,
                config_sha256: t.config.digest(),
                modules_sha256: (!modules.is_empty()).then(|| cmd::sha256_hex(modules.as_bytes())),
            };
            tree = Some(t);
            (k, None)
        }
    };
    let host_files = host_files()?;
    let mut h = String::new();
    for f in &host_files {
        h.push_str(&format!(
            "{} {:o} {}\n",
            f.dest,
            f.mode,
            cmd::sha256_file(&f.src)?
        ));
    }
    let inputs = Inputs {
        format: FORMAT.to_string(),
        kernel,
        busybox_static: debian::installed_version("busybox-static")?,
        dropbear_bin: debian::installed_version("dropbear-bin")?,
        openssh_client: debian::installed_version("openssh-client").ok(),
        init_sha256: cmd::sha256_hex(INIT_SCRIPT.as_bytes()),
        host_files_sha256: cmd::sha256_hex(h.as_bytes()),
        modules_wanted: debian::WANTED_MODULES
            .iter()
            .chain(debian::OPTIONAL_MODULES)
            .map(|s| s.to_string())
            .collect(),
        packages: packages
            .iter()
            .map(|p| cache::PackageInput {
                package: p.package.clone(),
                version: p.version.clone(),
                deb_sha256: p.sha256.clone(),
            })
            .collect(),
    };
    let mut canon = serde_json::to_value(&inputs)?;
    // The bzImage's or tree's path is informative only: the same files elsewhere are the same image.
    if let Some(k) = canon.get_mut("kernel").and_then(|k| k.as_object_mut()) {
        k.remove("kernel_path");
        k.remove("tree");
    }
    let id = cmd::sha256_hex(serde_json::to_string(&canon)?.as_bytes());
    Ok(Some(Plan {
        id,
        inputs,
        host_files,
        deb,
        tree,
        packages,
    }))
}

/// The key-independent part of the initramfs.
fn base_archive(
    id: &str,
    host_files: &[HostFile],
    modules: &[PathBuf],
    extra: &[ExtraModule],
) -> Result<Archive> {
    let mut a = Archive::new();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/mnt",
        "/scratch",
        "/var/log",
        "/etc/dropbear",
        "/lib/modules/ocrig",
        "/lib/modules/ocrig/extra",
    ] {
        a.dir(d, 0o755);
    }
    a.dir("/tmp", 0o1777);
    a.dir("/root", 0o700);
    a.dir("/root/.ssh", 0o700);
    a.char_dev("/dev/console", 5, 1, 0o600);
    a.char_dev("/dev/null", 1, 3, 0o666);
    // Busybox applet links, from the binary's own list (deterministic for a given version).
    let list = cmd::stdout(BUSYBOX, ["--list-full"])?;
    for applet in list.lines().map(str::trim).filter(|l| l.contains('/')) {
        a.symlink(applet, BUSYBOX);
    }
    for f in host_files {
        a.copy(&f.dest, &f.src, f.mode)?;
    }
    a.file("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644);
    a.file("/etc/shadow", "root:*:10957:0:99999:7:::\n", 0o600);
    a.file("/etc/group", "root:x:0:\ntty:x:5:\n", 0o644);
    a.file("/etc/shells", "/bin/sh\n", 0o644);
    a.file(
        "/etc/nsswitch.conf",
        "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
        0o644,
    );
    a.file("/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n", 0o644);
    a.file("/etc/resolv.conf", "nameserver 10.0.2.3\n", 0o644);
    a.file("/etc/ocrig/image", format!("id={id}\nformat={FORMAT}\n"), 0o644);
    let mut order = String::new();
    for m in modules {
        let name = m
            .file_name()
            .context("module path")?
            .to_string_lossy()
            .into_owned();
        a.copy(&format!("/lib/modules/ocrig/{name}"), m, 0o644)?;
        order.push_str(&name);
        order.push('\n');
    }
    a.file("/etc/ocrig/modules", order, 0o644);
    // Modules a workload loads when it runs (the payload's workloads::locktorture reads this
    // list): `name file...`, dependencies first; not loaded at boot.
    let mut list = String::new();
    for m in extra {
        list.push_str(&m.name);
        for f in &m.files {
            let name = f
                .file_name()
                .context("module path")?
                .to_string_lossy()
                .into_owned();
            a.copy(&format!("/lib/modules/ocrig/extra/{name}"), f, 0o644)?;
            list.push(' ');
            list.push_str(&name);
        }
        list.push('\n');
    }
    a.file("/etc/ocrig/extra-modules", list, 0o644);
    a.file("/init", INIT_SCRIPT, 0o755);
    Ok(a)
}

/// The per-image secrets: dropbear host key and the client's authorized key.
fn keys_archive(host: &keys::HostKey, client: &keys::ClientKey) -> Archive {
    let mut a = Archive::new();
    a.dir("/root", 0o700);
    a.dir("/root/.ssh", 0o700);
    a.file(
        "/root/.ssh/authorized_keys",
        format!("{}\n", client.public_line),
        0o600,
    );
    a.file(
        "/etc/dropbear/dropbear_ed25519_host_key",
        host.private.clone(),
        0o600,
    );
    a
}

fn build(spec: &ImageSpec, plan: &Plan, cache: &Path, dest: &Path, t0: Instant) -> Result<()> {
    cache::sweep_stale(&images_dir(cache));
    let tmp = TempDir::new_in(&images_dir(cache), &plan.id)?;
    let dir = tmp.path();
    let client = keys::client_key(dir)?;
    let mut pvh_unavailable = None;
    let packages = if plan.packages.is_empty() {
        None
    } else {
        Some(packages::member(&plan.packages, cache, dir).context("putting the guest packages in")?)
    };
    let member = packages.as_ref().map(|(bytes, _)| bytes.as_slice());
    let (release, modules, initrd_base_sha256, pinned, identity) = match (&spec.kernel, &plan.deb) {
        (KernelSource::Debian(_), Some(info)) => {
            let k = debian_kernel(info, cache)?;
            cache::link_or_copy(&k.vmlinuz, &dir.join("vmlinuz"))?;
            match pvh_vmlinux(&k).context("extracting the uncompressed kernel")? {
                Ok(vmlinux) => cache::link_or_copy(&vmlinux, &dir.join("vmlinux"))?,
                Err(why) => pvh_unavailable = Some(why),
            }
            let base = write_initrd(plan, &k.modules, &[], member, &client, dir)?;
            let (config_sha256, config_from) = match &k.config {
                Some(c) => (
                    Some(identity::store_config(cache, &KernelConfig::read(c)?)?),
                    format!("{} {}: /boot/config-{}", info.package, info.version, k.release),
                ),
                None => (
                    None,
                    format!(
                        "not kept when this kernel was unpacked (remove {} to unpack it again)",
                        k.vmlinuz.parent().unwrap_or(Path::new("?")).display()
                    ),
                ),
            };
            let identity = KernelIdentity {
                release: k.release.clone(),
                version: banner_version(bzimage_banner(&k.vmlinuz)),
                sha256: cmd::sha256_file(&k.vmlinuz)?,
                source: format!("debian {} {}", info.package, info.version),
                boot: boot_kind(pvh_unavailable.is_none()),
                config_sha256,
                config_from,
            };
            (k.release, k.modules, Some(base), true, identity)
        }
        (KernelSource::Tree(root), _) => {
            let t = plan
                .tree
                .as_ref()
                .context("internal: tree kernel without its inspection")?;
            // The vmlinuz slot holds what boots without PVH: the bzImage, else the vmlinux
            // itself (QEMU starts an ELF kernel through its PVH note either way).
            let fallback = t.bzimage.as_deref().unwrap_or(t.boot_file());
            fs::copy(fallback, dir.join("vmlinuz"))
                .with_context(|| format!("copying {}", fallback.display()))?;
            match &t.pvh_vmlinux {
                Some(v) => {
                    fs::copy(v, dir.join("vmlinux")).with_context(|| format!("copying {}", v.display()))?;
                }
                None => pvh_unavailable = t.pvh_unavailable.clone(),
            }
            // Kept beside the kernel for symbolising guest profiles beyond the guest's kallsyms.
            if let Some(map) = &t.system_map {
                fs::copy(map, dir.join("System.map"))
                    .with_context(|| format!("copying {}", map.display()))?;
            }
            let banner = match &t.pvh_vmlinux {
                Some(v) => identity::vmlinux_banner(&fs::read(v)?),
                None => t.bzimage.as_deref().and_then(bzimage_banner),
            };
            let parsed = banner.as_deref().and_then(identity::parse_banner);
            let release = t
                .release
                .clone()
                .or_else(|| parsed.as_ref().map(|(r, _)| r.clone()))
                .unwrap_or_else(|| "unknown".into());
            let staged = dir.join("modules-root");
            let (mods, extra) = tree::install_modules(t, &staged, &release)?;
            let mods = mods
                .iter()
                .map(|m| debian::decompress_module(m))
                .collect::<Result<Vec<_>>>()?;
            let extra = extra
                .into_iter()
                .map(|m| {
                    let files = m
                        .files
                        .iter()
                        .map(|f| debian::decompress_module(f))
                        .collect::<Result<_>>()?;
                    Ok(ExtraModule { files, ..m })
                })
                .collect::<Result<Vec<_>>>()?;
            let base = write_initrd(plan, &mods, &extra, member, &client, dir)?;
            let _ = fs::remove_dir_all(&staged);
            let identity = KernelIdentity {
                release: release.clone(),
                version: parsed.and_then(|(_, v)| v),
                sha256: cmd::sha256_file(t.boot_file())?,
                source: format!("tree {}", root.display()),
                boot: boot_kind(pvh_unavailable.is_none()),
                config_sha256: Some(identity::store_config(cache, &t.config)?),
                config_from: t.config_path.display().to_string(),
            };
            (release, mods, Some(base), true, identity)
        }
        (KernelSource::File { kernel, initrd }, _) => {
            fs::copy(kernel, dir.join("vmlinuz")).with_context(|| format!("copying {}", kernel.display()))?;
            let data = fs::read(kernel).with_context(|| format!("reading {}", kernel.display()))?;
            let sha256 = cmd::sha256_hex(&data);
            // An ELF vmlinux with the PVH note boots PVH; a bzImage of the user's own is booted
            // as given: its PVH path is untested, and a guest that hangs in early boot would
            // only show up as a boot timeout.
            let inner = if identity::is_elf(&data) {
                vmlinux::has_pvh_note(&data).map_err(|why| anyhow::anyhow!("{}: {why}", kernel.display()))?;
                cache::link_or_copy(&dir.join("vmlinuz"), &dir.join("vmlinux"))?;
                Some(data)
            } else {
                pvh_unavailable =
                    Some("a user-supplied bzImage is booted as given (PVH only for Debian kernels and vmlinux files)".into());
                vmlinux::decompressed(&data).ok()
            };
            let banner = match &inner {
                Some(elf) if pvh_unavailable.is_none() => identity::vmlinux_banner(elf),
                _ => bzimage_banner(kernel),
            };
            let parsed = banner.as_deref().and_then(identity::parse_banner);
            let release = parsed
                .as_ref()
                .map(|(r, _)| r.clone())
                .or_else(|| bzimage_release(kernel))
                .unwrap_or_else(|| "unknown".to_string());
            let config = inner.as_deref().and_then(identity::embedded_config);
            let identity = KernelIdentity {
                release: release.clone(),
                version: parsed.and_then(|(_, v)| v),
                sha256,
                source: format!("file {}", kernel.display()),
                boot: boot_kind(pvh_unavailable.is_none()),
                config_sha256: config
                    .as_ref()
                    .map(|c| identity::store_config(cache, c))
                    .transpose()?,
                config_from: match &config {
                    Some(_) => format!("{} (embedded, CONFIG_IKCONFIG)", kernel.display()),
                    None => "none: the image embeds no config (CONFIG_IKCONFIG) and no tree was given".into(),
                },
            };
            match initrd {
                Some(i) => {
                    fs::copy(i, dir.join("initrd.img"))
                        .with_context(|| format!("copying {}", i.display()))?;
                    (release, Vec::new(), None, false, identity)
                }
                None => {
                    let base = write_initrd(plan, &[], &[], member, &client, dir)?;
                    (release, Vec::new(), Some(base), true, identity)
                }
            }
        }
        (KernelSource::Debian(_), None) => bail!("internal: Debian kernel without package info"),
    };
    let manifest = Manifest {
        id: plan.id.clone(),
        inputs: plan.inputs.clone(),
        kernel_release: release,
        modules: modules
            .iter()
            .filter_map(|m| m.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect(),
        vmlinuz_bytes: fs::metadata(dir.join("vmlinuz"))?.len(),
        vmlinux_bytes: fs::metadata(dir.join("vmlinux")).ok().map(|m| m.len()),
        pvh_unavailable,
        initrd_bytes: fs::metadata(dir.join("initrd.img"))?.len(),
        initrd_base_sha256,
        host_key_pinned: pinned,
        built_at: jiff::Timestamp::now().to_string(),
        build_secs: t0.elapsed().as_secs_f64(),
        identity: Some(identity),
        packages_bytes: packages.as_ref().map(|(_, held)| *held),
    };
    manifest.write(dir)?;
    tmp.commit(dest)
}

fn banner_version(banner: Option<String>) -> Option<String> {
    banner
        .as_deref()
        .and_then(identity::parse_banner)
        .and_then(|(_, v)| v)
}

fn boot_kind(pvh: bool) -> String {
    if pvh { "pvh" } else { "bzimage" }.to_string()
}

/// Uncompressed, the initramfs is ~9.5 MB (busybox, dropbear, libc, modules); QEMU hands it to
/// the guest by DMA, so its size costs far less than inflating it would.
const INITRD_LIMIT: u64 = 16 * 1024 * 1024;

/// Write `initrd.img` (base member, the guest packages' member if any, keys member) and
/// `host_key.pub`; returns the base's sha256. The packages come after the base so that their
/// files (a newer libc with its loader, a real tool over a busybox applet) win.
fn write_initrd(
    plan: &Plan,
    modules: &[PathBuf],
    extra: &[ExtraModule],
    packages: Option<&[u8]>,
    client: &keys::ClientKey,
    dir: &Path,
) -> Result<String> {
    let host = keys::host_key(dir)?;
    fs::write(dir.join("host_key.pub"), format!("{}\n", host.public_line))?;
    let mut bytes = base_archive(&plan.id, &plan.host_files, modules, extra)?.to_cpio();
    let base_sha = cmd::sha256_hex(&bytes);
    if bytes.len() as u64 >= INITRD_LIMIT {
        bail!(
            "initramfs is {} bytes, over the {} MiB budget",
            bytes.len(),
            INITRD_LIMIT >> 20
        );
    }
    if let Some(p) = packages {
        bytes.extend_from_slice(p);
    }
    bytes.extend(keys_archive(&host, client).to_cpio());
    fs::write(dir.join("initrd.img"), &bytes)?;
    Ok(base_sha)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_kernel_on_ubuntu_is_refused_naming_what_to_set_instead() {
        let noble = "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\nID_LIKE=debian\n";
        let why = super::default_kernel_unavailable(noble, false).unwrap();
        assert!(
            why.contains("Ubuntu 24.04.1 LTS does not package")
                && why.contains("kernel: {path: /boot/vmlinuz-<release>}")
                && why.contains("kernel: {tree: /path/to/linux}"),
            "{why}"
        );
        // Debian (apt may only need `apt-get update`, which the image build runs), an Ubuntu
        // whose apt has a linux-image-amd64 after all, and a host without os-release.
        let bookworm = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(super::default_kernel_unavailable(bookworm, false), None);
        assert_eq!(super::default_kernel_unavailable(noble, true), None);
        assert_eq!(super::default_kernel_unavailable("", false), None);
    }

    use super::*;

    #[test]
    fn init_script_has_markers() {
        assert!(INIT_SCRIPT.starts_with("#!/bin/sh\n"));
        assert!(INIT_SCRIPT.contains(READY_MARKER) && INIT_SCRIPT.contains(BOOT_MARKER));
        let out = std::process::Command::new("busybox")
            .args(["sh", "-n", "images/init"])
            .output();
        if let Ok(out) = out {
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// Builds a real image from the Debian kernel package into a temp cache (the first run
    /// downloads and unpacks the ~70 MB kernel .deb: ~20 s; later runs ~3 s), then checks
    /// contents, size, reuse and determinism of the base member.
    #[test]
    #[cfg_attr(
        not(feature = "full-tests"),
        ignore = "full tier: builds a guest image (root, Debian packages) (~7 s)"
    )]
    fn builds_and_reuses_a_real_image() {
        let tmp = tempfile::tempdir().unwrap();
        // Images go into the temp cache; the unpacked kernel (content-addressed by the .deb's
        // sha256) and apt's memo are shared with the real cache so reruns skip the download.
        let real = cache_dir();
        if fs::create_dir_all(real.join("kernels")).is_ok() {
            std::os::unix::fs::symlink(real.join("kernels"), tmp.path().join("kernels")).unwrap();
            let _ = fs::copy(real.join("apt-memo.json"), tmp.path().join("apt-memo.json"));
        }
        let spec = ImageSpec::kernel(KernelSource::Debian("default".into()));
        assert!(cached(&spec, tmp.path()).unwrap().is_none());

        let img = ensure(&spec, tmp.path()).unwrap();
        eprintln!(
            "cold build: {:.2} s, initrd {} bytes, kernel {}",
            img.build_secs, img.initrd_bytes, img.kernel_release
        );
        assert!(img.built);
        assert!(
            img.initrd_bytes < INITRD_LIMIT,
            "initrd {} bytes",
            img.initrd_bytes
        );
        // Debian's kernel boots PVH: the image carries its uncompressed ELF with the entry note.
        let vmlinux = img.pvh_kernel.as_ref().expect("a PVH kernel for a Debian image");
        assert_eq!(img.pvh_unavailable, None);
        vmlinux::has_pvh_note(&fs::read(vmlinux).unwrap()).unwrap();
        assert!(fs::metadata(vmlinux).unwrap().len() > 4 * fs::metadata(&img.kernel).unwrap().len());
        assert_eq!(img.host_key_blob.len(), 51);
        assert!(img.kernel.is_file() && img.client_key.is_file());
        assert!(bzimage_release(&img.kernel).is_some_and(|r| r == img.kernel_release));
        // Its identity: release, Debian's build stamp from the banner, the file's hash.
        let id = &img.identity;
        assert_eq!(id.release, img.kernel_release);
        assert!(
            id.version.as_deref().is_some_and(|v| v.starts_with("#1 SMP")),
            "{id:?}"
        );
        assert_eq!(id.sha256, cmd::sha256_file(&img.kernel).unwrap());
        assert_eq!(id.boot, "pvh");
        assert!(id.source.starts_with("debian linux-image-"), "{id:?}");
        // The .deb's config-<release>, kept content-addressed for `ocrig compare`.
        let digest = id.config_sha256.as_deref().expect("a Debian kernel's config");
        let cfg = identity::find_config(&[tmp.path()], digest).unwrap();
        assert_eq!(cfg.get("PARAVIRT_SPINLOCKS"), Some("y"));
        assert!(
            id.config_from.ends_with(&format!("/boot/config-{}", id.release)),
            "{id:?}"
        );

        let names = initramfs::list(&img.initrd).unwrap();
        for want in [
            "init",
            "usr/sbin/dropbear",
            "bin/busybox",
            "sbin/init",
            "lib64/ld-linux-x86-64.so.2",
            "etc/ocrig/modules",
            "lib/modules/ocrig/virtio_net.ko",
            "lib/modules/ocrig/virtio_blk.ko",
            "lib/modules/ocrig/ext4.ko",
            "root/.ssh/authorized_keys",
            "etc/dropbear/dropbear_ed25519_host_key",
            "dev/console",
        ] {
            assert!(names.iter().any(|n| n == want), "initrd lacks {want}");
        }
        let m = Manifest::read(&img.dir).unwrap();
        let order = m.modules.join(" ");
        assert!(order.starts_with("virtio_ring.ko virtio.ko"), "{order}");
        assert!(order.find("jbd2.ko") < order.find("ext4.ko"), "{order}");

        let again = ensure(&spec, tmp.path()).unwrap();
        eprintln!("cached: {:.3} s", again.build_secs);
        assert!(!again.built);
        assert!(again.build_secs < 2.0, "reuse took {} s", again.build_secs);
        assert_eq!(
            (again.id.as_str(), &again.host_key_blob),
            (img.id.as_str(), &img.host_key_blob)
        );
        assert!(cached(&spec, tmp.path()).unwrap().is_some_and(|c| c.id == img.id));

        // The key-independent member is byte-identical when rebuilt from the same inputs.
        let plan = plan(&spec, tmp.path(), false).unwrap().unwrap();
        let k = debian_kernel(plan.deb.as_ref().unwrap(), tmp.path()).unwrap();
        let cpio = base_archive(&plan.id, &plan.host_files, &k.modules, &[])
            .unwrap()
            .to_cpio();
        assert_eq!(Some(cmd::sha256_hex(&cpio)), m.initrd_base_sha256);
        // Uncompressed: the initrd starts with a newc header, not a gzip magic.
        assert_eq!(&fs::read(&img.initrd).unwrap()[..6], b"070701");

        // A user-supplied bzImage: no modules, own id, release read from the header.
        let user = ImageSpec::kernel(KernelSource::File {
            kernel: img.kernel.clone(),
            initrd: None,
        });
        let u = ensure(&user, tmp.path()).unwrap();
        assert!(u.built && u.id != img.id);
        assert_eq!(u.kernel_release, img.kernel_release);
        assert_eq!(
            (u.identity.sha256.as_str(), u.identity.boot.as_str()),
            (id.sha256.as_str(), "bzimage")
        );
        assert_eq!(u.identity.version, id.version);
        // Debian's kernel embeds no config (no CONFIG_IKCONFIG): said, not guessed.
        assert!(u.identity.config_sha256.is_none() && u.identity.config_from.starts_with("none"));
        assert!(Manifest::read(&u.dir).unwrap().modules.is_empty());
        assert_eq!(u.host_key_blob.len(), 51);
        assert!(u.pvh_kernel.is_none());
        assert!(
            u.pvh_unavailable
                .as_deref()
                .unwrap()
                .contains("user-supplied bzImage")
        );

        // With a user initrd, it is used as-is and nothing is pinned.
        let own = ImageSpec::kernel(KernelSource::File {
            kernel: img.kernel.clone(),
            initrd: Some(img.initrd.clone()),
        });
        let o = ensure(&own, tmp.path()).unwrap();
        assert!(o.built && o.host_key_blob.is_empty() && o.id != u.id);
        assert_eq!(fs::read(&o.initrd).unwrap(), fs::read(&img.initrd).unwrap());
        assert!(!ensure(&own, tmp.path()).unwrap().built);
    }
}
