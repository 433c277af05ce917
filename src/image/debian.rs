//! Debian packages: resolving, downloading and unpacking the kernel; versions of host packages.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::cmd;

/// Modules the guest needs, as given to `modprobe --show-depends` (dependencies are added).
pub const WANTED_MODULES: &[&str] = &["virtio_pci", "virtio_net", "virtio_blk", "ext4"];
/// Loaded when present; a kernel without them still works.
pub const OPTIONAL_MODULES: &[&str] = &["virtio_rng"];
/// Put in the image when the kernel builds them as modules, but not loaded at boot: a
/// workload loads them when it runs (the payload's `locktorture`; Debian's stock kernels do
/// not build it).
pub const EXTRA_MODULES: &[&str] = &["locktorture"];

/// A module kept in the image for a workload to load: its name and its files (its dependencies
/// first), decompressed.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraModule {
    pub name: String,
    pub files: Vec<PathBuf>,
}

/// The candidate version of a package as apt sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackageInfo {
    pub package: String,
    pub version: String,
    pub sha256: String,
    /// `pool/.../name_ver_arch.deb`
    pub filename: String,
}

/// The parts of an unpacked kernel package the image uses.
#[derive(Debug, Clone)]
pub struct KernelFiles {
    pub release: String,
    pub vmlinuz: PathBuf,
    /// Module files in load order (already decompressed).
    pub modules: Vec<PathBuf>,
}

/// The kernel package name for a release ("6.1.0-41-amd64" or "linux-image-6.1.0-41-amd64").
pub fn kernel_package(release: &str) -> String {
    let r = release.trim();
    if r.starts_with("linux-image-") {
        r.to_string()
    } else {
        format!("linux-image-{r}")
    }
}

fn default_from_apt_cache() -> Result<Option<String>> {
    let out = Command::new("apt-cache")
        .args(["depends", "linux-image-amd64"])
        .output()
        .context("could not start `apt-cache` (is apt installed?)")?;
    Ok(parse_default_depends(&String::from_utf8_lossy(&out.stdout)))
}

/// apt's answers memoised in `<cache>/apt-memo.json` while apt's state (package lists, dpkg
/// status, preferences) is unchanged: each `apt-cache` call costs seconds where apt's binary
/// cache is disabled (Docker images), which would make every cache hit slow.
pub struct Apt {
    path: Option<PathBuf>,
    memo: Memo,
}

#[derive(Default, Serialize, Deserialize)]
struct Memo {
    fingerprint: String,
    default_release: Option<String>,
    packages: BTreeMap<String, PackageInfo>,
    /// A package set (names joined by spaces) → the .deb files apt would install for it.
    #[serde(default)]
    closures: BTreeMap<String, Vec<String>>,
}

impl Apt {
    pub fn open(cache: Option<&Path>) -> Self {
        let path = cache.map(|c| c.join("apt-memo.json"));
        let fingerprint = apt_fingerprint();
        let memo = path
            .as_deref()
            .and_then(|p| fs::read_to_string(p).ok())
            .and_then(|t| serde_json::from_str::<Memo>(&t).ok())
            .filter(|m| m.fingerprint == fingerprint)
            .unwrap_or(Memo {
                fingerprint,
                ..Memo::default()
            });
        Self { path, memo }
    }

    fn refresh_after_update(&mut self) {
        self.memo = Memo {
            fingerprint: apt_fingerprint(),
            ..Memo::default()
        };
    }

    fn save(&self) {
        let Some(p) = &self.path else { return };
        let Ok(text) = serde_json::to_string_pretty(&self.memo) else {
            return;
        };
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        // Only into an existing cache (a read-only lookup must not create one).
        if p.parent().is_some_and(Path::is_dir) && fs::write(&tmp, text).is_ok() {
            let _ = fs::rename(&tmp, p);
        }
    }

    /// The default kernel release; `None` when apt does not know it and updating is not allowed.
    pub fn default_release(&mut self, allow_update: bool) -> Result<Option<String>> {
        if let Some(r) = &self.memo.default_release {
            return Ok(Some(r.clone()));
        }
        let r = match default_from_apt_cache()? {
            Some(r) => r,
            None if allow_update => {
                apt_get_update()?;
                self.refresh_after_update();
                default_from_apt_cache()?.context(
                    "`apt-cache depends linux-image-amd64` names no linux-image-* package, even after `apt-get update`",
                )?
            }
            None => return Ok(None),
        };
        self.memo.default_release = Some(r.clone());
        self.save();
        Ok(Some(r))
    }

    /// The candidate of `package`; `None` when apt does not know it and updating is not allowed.
    pub fn package(&mut self, package: &str, allow_update: bool) -> Result<Option<PackageInfo>> {
        if let Some(i) = self.memo.packages.get(package) {
            return Ok(Some(i.clone()));
        }
        let info = match package_info(package)? {
            Some(i) => i,
            None if allow_update => {
                apt_get_update()?;
                self.refresh_after_update();
                package_info(package)?.with_context(|| {
                    format!("apt does not know `{package}` even after `apt-get update` (try `apt-cache search linux-image`)")
                })?
            }
            None => return Ok(None),
        };
        self.memo.packages.insert(package.to_string(), info.clone());
        self.save();
        Ok(Some(info))
    }

    /// The .deb files apt would install for `names` (as `resolve` finds them), memoised.
    pub fn closure(
        &mut self,
        names: &[String],
        resolve: impl FnOnce() -> Result<Vec<String>>,
    ) -> Result<Vec<String>> {
        let key = names.join(" ");
        if let Some(files) = self.memo.closures.get(&key) {
            return Ok(files.clone());
        }
        let files = resolve()?;
        self.memo.closures.insert(key, files.clone());
        self.save();
        Ok(files)
    }
}

/// Sizes and mtimes of everything apt's answers depend on.
fn apt_fingerprint() -> String {
    let mut s = String::new();
    let mut add = |p: &Path| {
        if let Ok(m) = fs::metadata(p) {
            s.push_str(&format!("{} {} {:?}\n", p.display(), m.len(), m.modified().ok()));
        }
    };
    for dir in [
        "/var/lib/apt/lists",
        "/etc/apt/preferences.d",
        "/etc/apt/apt.conf.d",
        "/etc/apt/sources.list.d",
    ] {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for e in entries {
            add(&e);
        }
    }
    for f in [
        "/var/lib/dpkg/status",
        "/etc/apt/preferences",
        "/etc/apt/sources.list",
        "/etc/apt/apt.conf",
    ] {
        add(Path::new(f));
    }
    cmd::sha256_hex(s.as_bytes())
}

pub fn parse_default_depends(out: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let dep = l.trim().strip_prefix("Depends:")?.trim();
        let dep = dep.trim_start_matches('<').trim_end_matches('>');
        dep.strip_prefix("linux-image-")
            .filter(|r| !r.is_empty())
            .map(str::to_string)
    })
}

fn apt_get_update() -> Result<()> {
    cmd::run(Command::new("apt-get").args(["update", "-q"]))?;
    Ok(())
}

/// The candidate of `package` (`apt-cache show --no-all-versions`), `None` if apt does not know it.
pub fn package_info(package: &str) -> Result<Option<PackageInfo>> {
    let out = Command::new("apt-cache")
        .args(["show", "--no-all-versions", package])
        .output()
        .context("could not start `apt-cache` (is apt installed?)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.trim().is_empty() {
        return Ok(None);
    }
    parse_show(package, &text).map(Some)
}

pub fn parse_show(package: &str, text: &str) -> Result<PackageInfo> {
    let stanza = text.split("\n\n").next().unwrap_or("");
    let field = |name: &str| {
        stanza.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|v| v.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        })
    };
    let get =
        |name: &str| field(name).with_context(|| format!("`apt-cache show {package}` has no {name} field"));
    Ok(PackageInfo {
        package: field("Package").unwrap_or_else(|| package.to_string()),
        version: get("Version")?,
        sha256: get("SHA256")?.to_lowercase(),
        filename: get("Filename")?,
    })
}

/// `apt-get download` the exact candidate into `dir`, check its SHA256, return the .deb path.
pub fn download(info: &PackageInfo, dir: &Path) -> Result<PathBuf> {
    Ok(download_all(std::slice::from_ref(info), dir)?.remove(0))
}

/// `apt-get download` the exact candidates into `dir` (one call: apt fetches them in parallel
/// over one connection), check each SHA256, return the .deb paths in the order given.
pub fn download_all(infos: &[PackageInfo], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut c = Command::new("apt-get");
    // Downloading as root into a directory `_apt` cannot enter only warns; say so explicitly.
    c.args(["download", "-q", "-o", "APT::Sandbox::User=root"])
        .args(infos.iter().map(|i| format!("{}={}", i.package, i.version)))
        .current_dir(dir);
    cmd::run(&mut c)?;
    let present: Vec<PathBuf> = fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
    infos
        .iter()
        .map(|info| {
            let name = Path::new(&info.filename)
                .file_name()
                .with_context(|| format!("bad Filename `{}`", info.filename))?;
            // apt-get names the file with the epoch (`name_2%3a1.0-1_amd64.deb`) where the
            // archive's Filename has none.
            let prefix = format!("{}_", info.package);
            let deb = Some(dir.join(name)).filter(|d| d.is_file()).or_else(|| {
                present
                    .iter()
                    .find(|p| {
                        p.file_name().is_some_and(|n| {
                            let n = n.to_string_lossy();
                            n.starts_with(&prefix) && n.ends_with(".deb")
                        })
                    })
                    .cloned()
            });
            let Some(deb) = deb else {
                bail!(
                    "`{}` succeeded but {} is missing",
                    cmd::describe(&c),
                    dir.join(name).display()
                );
            };
            let got = cmd::sha256_file(&deb)?;
            if got != info.sha256 {
                bail!("{}: sha256 {got} but apt says {}", deb.display(), info.sha256);
            }
            Ok(deb)
        })
        .collect()
}

/// Unpack a kernel .deb into `root`, run depmod, and list the wanted modules in load order.
/// Compressed modules (.ko.xz/.ko.zst/.ko.gz) are decompressed in place for busybox insmod.
pub fn unpack_kernel(deb: &Path, root: &Path) -> Result<KernelFiles> {
    extract(deb, root)?;
    let moddir = root.join("lib/modules");
    let mut releases: Vec<String> = fs::read_dir(&moddir)
        .with_context(|| format!("{} has no lib/modules", deb.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("kernel").is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    releases.sort();
    let release = match releases.as_slice() {
        [r] => r.clone(),
        _ => bail!(
            "{}: expected one kernel in lib/modules, found {releases:?}",
            deb.display()
        ),
    };
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    if !vmlinuz.is_file() {
        bail!("{} has no boot/vmlinuz-{release}", deb.display());
    }
    cmd::run(Command::new("depmod").arg("-b").arg(root).arg(&release))?;
    let mut wanted = show_depends(root, &release, WANTED_MODULES)?;
    if let Ok(extra) = show_depends(root, &release, OPTIONAL_MODULES) {
        wanted.extend(extra);
    }
    let mut seen = HashSet::new();
    let mut modules = Vec::new();
    for m in wanted {
        if seen.insert(m.clone()) {
            modules.push(decompress_module(&m)?);
        }
    }
    Ok(KernelFiles {
        release,
        vmlinuz,
        modules,
    })
}

/// `dpkg-deb -x`, but with multi-threaded xz when the data member is data.tar.xz: dpkg-deb
/// decompresses on one thread (~9.5 s for the 6.1 kernel here; `xz -T0` on 2 cores: ~3 s).
pub(super) fn extract(deb: &Path, root: &Path) -> Result<()> {
    let members = Command::new("ar").arg("t").arg(deb).output();
    let xz = members.is_ok_and(|o| {
        o.status.success()
            && String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == "data.tar.xz")
    });
    if xz
        && Command::new("xz")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    {
        let script = r#"set -o pipefail; ar p "$1" data.tar.xz | xz -dc -T0 | tar -x -C "$2""#;
        let fast = cmd::run(
            Command::new("bash")
                .args(["-c", script, "extract"])
                .arg(deb)
                .arg(root),
        );
        if fast.is_ok() {
            return Ok(());
        }
        tracing::debug!("fast extraction failed, using dpkg-deb: {:#}", fast.unwrap_err());
    }
    cmd::run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root))?;
    Ok(())
}

pub(super) fn show_depends(root: &Path, release: &str, names: &[&str]) -> Result<Vec<PathBuf>> {
    let out = cmd::run(
        Command::new("modprobe")
            .arg("-d")
            .arg(root)
            .args(["-S", release, "-a", "--show-depends"])
            .args(names),
    )?;
    Ok(parse_show_depends(&String::from_utf8_lossy(&out.stdout)))
}

/// `insmod /path/x.ko [params]` lines → paths; `builtin x` lines are skipped.
pub fn parse_show_depends(out: &str) -> Vec<PathBuf> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("insmod "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(PathBuf::from)
        .collect()
}

pub(super) fn decompress_module(path: &Path) -> Result<PathBuf> {
    let s = path.to_string_lossy();
    let (tool, stem) = if let Some(stem) = s.strip_suffix(".xz") {
        ("xz", stem)
    } else if let Some(stem) = s.strip_suffix(".zst") {
        ("zstd", stem)
    } else if let Some(stem) = s.strip_suffix(".gz") {
        ("gzip", stem)
    } else {
        return Ok(path.to_path_buf());
    };
    let out = cmd::run(Command::new(tool).arg("-dc").arg(path))?;
    let dest = PathBuf::from(stem);
    fs::write(&dest, &out.stdout).with_context(|| format!("writing {}", dest.display()))?;
    Ok(dest)
}

/// Installed version of a host package (`dpkg-query -W`), e.g. busybox-static.
pub fn installed_version(package: &str) -> Result<String> {
    let out = cmd::stdout("dpkg-query", ["-W", "-f=${Version}", package])
        .with_context(|| format!("is `{package}` installed? (scripts/setup installs it)"))?;
    let v = out.trim().to_string();
    if v.is_empty() {
        bail!("`{package}` is not installed (scripts/setup installs it)");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_default_depends() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(parse_default_depends(out).as_deref(), Some("6.1.0-57-amd64"));
        assert_eq!(parse_default_depends("linux-image-amd64\n"), None);
    }

    #[test]
    fn parses_show_and_depends() {
        let show = "Package: linux-image-6.1.0-57-amd64\nVersion: 6.1.192-3\nFilename: pool/x/l/linux_6.1_amd64.deb\n\
                    SHA256: ABCD\nDescription: x\n\nPackage: other\nVersion: 1\n";
        let i = parse_show("linux-image-6.1.0-57-amd64", show).unwrap();
        assert_eq!((i.version.as_str(), i.sha256.as_str()), ("6.1.192-3", "abcd"));
        let dep = "insmod /r/lib/modules/v/kernel/drivers/virtio/virtio_ring.ko \nbuiltin crc32c\n\
                   insmod /r/lib/modules/v/kernel/fs/ext4/ext4.ko.xz opt=1\n";
        let p = parse_show_depends(dep);
        assert_eq!(p.len(), 2);
        assert!(p[1].ends_with("ext4.ko.xz"));
        assert_eq!(kernel_package("6.1.0-57-amd64"), "linux-image-6.1.0-57-amd64");
        assert_eq!(
            kernel_package("linux-image-6.1.0-57-amd64"),
            "linux-image-6.1.0-57-amd64"
        );
    }
}
