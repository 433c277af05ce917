//! Guest packages (`guest.packages`): Debian packages and their dependencies, unpacked into a
//! member of the guest's initramfs of its own.
//!
//! The closure is apt's own answer: `apt-get install --print-uris` against an empty dpkg status
//! (so nothing counts as installed), without recommends, which picks alternatives and virtual
//! packages as an install would. Each package is then pinned to the version and SHA256 apt
//! names, downloaded once into `<cache>/debs/`, and unpacked without running maintainer scripts
//! (an initramfs has no dpkg). Documentation, manual pages and translations are left out.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::cache::TempDir;
use super::cmd;
use super::debian::{self, Apt, PackageInfo};
use super::initramfs::Archive;

/// The package that holds `perf` for Debian's kernels.
pub const DEBIAN_PERF: &str = "linux-perf";

/// Paths under these are not put in the guest: nothing a benchmark runs reads them.
const PRUNED: &[&str] = &[
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bug",
];

/// The package set with its dependencies, as apt would install it on an empty system: each
/// with the version and SHA256 apt names. `None` when apt does not know a package and updating
/// its lists is not allowed.
pub fn closure(apt: &mut Apt, names: &[String], allow_update: bool) -> Result<Option<Vec<PackageInfo>>> {
    if names.is_empty() {
        return Ok(Some(Vec::new()));
    }
    for n in names {
        if apt.package(n, allow_update)?.is_none() {
            return Ok(None);
        }
    }
    let files = apt.closure(names, || print_uris(names))?;
    let mut out = Vec::new();
    for f in files {
        let (package, version) = split_deb_name(&f)
            .with_context(|| format!("apt named `{f}`, which is not package_version_arch.deb"))?;
        let info = apt.package(&package, allow_update)?.with_context(|| {
            format!("apt would install {package}, but `apt-cache show {package}` knows nothing")
        })?;
        if info.version != version {
            bail!(
                "apt would install {package} {version}, but its candidate is {} (apt's lists changed meanwhile? try again)",
                info.version
            );
        }
        out.push(info);
    }
    out.sort_by(|a, b| a.package.cmp(&b.package));
    out.dedup_by(|a, b| a.package == b.package);
    Ok(Some(out))
}

/// The .deb file names apt would download to install `names` on a system with nothing installed.
fn print_uris(names: &[String]) -> Result<Vec<String>> {
    let out = cmd::run(
        Command::new("apt-get")
            .args([
                "install",
                "--print-uris",
                "-qq",
                "--no-install-recommends",
                "-o",
                "Dir::State::status=/dev/null",
                "-o",
                "Debug::NoLocking=1",
                "--",
            ])
            .args(names),
    )?;
    Ok(parse_print_uris(&String::from_utf8_lossy(&out.stdout)))
}

/// `'URI' FILE SIZE HASH` lines → FILE.
pub fn parse_print_uris(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('\''))
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|f| f.ends_with(".deb"))
        .map(str::to_string)
        .collect()
}

/// `name_1%3a2.0-1_amd64.deb` → (`name`, `1:2.0-1`).
pub fn split_deb_name(file: &str) -> Option<(String, String)> {
    let stem = file.strip_suffix(".deb")?;
    let mut parts = stem.split('_');
    let (name, version, _arch) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || name.is_empty() || version.is_empty() {
        return None;
    }
    Some((name.to_string(), version.replace("%3a", ":").replace("%3A", ":")))
}

/// Every package's .deb, downloaded once into `<cache>/debs/` (kept by file name, checked by
/// SHA256 when downloaded); the missing ones in one `apt-get download`.
pub fn fetch(infos: &[PackageInfo], cache: &Path) -> Result<Vec<PathBuf>> {
    let dir = cache.join("debs");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let kept = |info: &PackageInfo| -> Result<PathBuf> {
        let name = Path::new(&info.filename)
            .file_name()
            .with_context(|| format!("bad Filename `{}`", info.filename))?;
        Ok(dir.join(name))
    };
    let missing: Vec<PackageInfo> = infos
        .iter()
        .filter(|i| kept(i).is_ok_and(|k| !k.is_file()))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let tmp = TempDir::new_in(&dir, "download")?;
        for (info, deb) in missing.iter().zip(debian::download_all(&missing, tmp.path())?) {
            let dest = kept(info)?;
            fs::rename(&deb, &dest).with_context(|| format!("keeping {}", dest.display()))?;
        }
    }
    infos.iter().map(kept).collect()
}

/// Unpack every .deb into `root` (no maintainer scripts) and remove what is pruned.
pub fn unpack(debs: &[PathBuf], root: &Path) -> Result<()> {
    for deb in debs {
        debian::extract(deb, root).with_context(|| format!("unpacking {}", deb.display()))?;
    }
    for p in PRUNED {
        let _ = fs::remove_dir_all(root.join(p));
    }
    Ok(())
}

/// Everything under `root` as an archive member: directories, files (with their modes) and
/// symbolic links, in a deterministic order; also the list of packages at /etc/ocrig/packages.
pub fn archive(root: &Path, infos: &[PackageInfo]) -> Result<Archive> {
    let mut a = Archive::new();
    add_tree(&mut a, root, root)?;
    let list: String = infos
        .iter()
        .map(|i| format!("{} {}\n", i.package, i.version))
        .collect();
    a.file("/etc/ocrig/packages", list, 0o644);
    Ok(a)
}

fn add_tree(a: &mut Archive, root: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .expect("under root")
            .to_string_lossy()
            .into_owned();
        let guest = format!("/{rel}");
        let meta = fs::symlink_metadata(&path)?;
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path)?;
            a.symlink(&guest, &target.to_string_lossy());
        } else if meta.is_dir() {
            a.dir(&guest, mode);
            add_tree(a, root, &path)?;
        } else if meta.is_file() {
            a.copy(&guest, &path, mode)?;
        }
        // Device nodes and fifos: no Debian package ships them in its data.
    }
    Ok(())
}

/// The packages' initramfs member, built in a scratch directory under `work`; with the bytes
/// the guest's root file system holds once it is unpacked.
pub fn member(infos: &[PackageInfo], cache: &Path, work: &Path) -> Result<(Vec<u8>, u64)> {
    let debs = fetch(infos, cache)?;
    let root = work.join("packages-root");
    fs::create_dir_all(&root)?;
    unpack(&debs, &root)?;
    let a = archive(&root, infos)?;
    let _ = fs::remove_dir_all(&root);
    let bytes = a.to_cpio();
    let held = a.data_bytes();
    Ok((bytes, held))
}

/// Why `perf` from Debian's `linux-perf` does not belong with this kernel, or `None` when it
/// does: the guest's kernel and `linux-perf` come from the same `linux` series (e.g. 6.1).
/// `kernel_version` is the kernel package's version (e.g. `6.1.158-1`); `None` for a kernel of
/// the user's own (a file or a tree), for which Debian's perf is not the matching one.
pub fn perf_mismatch(perf: &PackageInfo, kernel_version: Option<&str>) -> Option<String> {
    let series = |v: &str| {
        let v = v.split_once(':').map_or(v, |(_, r)| r);
        let mut it = v.split(['.', '-', '+', '~']);
        Some(format!("{}.{}", it.next()?, it.next()?))
    };
    match kernel_version {
        None => Some(format!(
            "`{DEBIAN_PERF}` is perf for Debian's kernels ({}); for a kernel of your own, build its perf \
             (`make -C tools/perf` in its tree) and copy it in with `guest.files` (e.g. \
             `{{from: /path/to/linux/tools/perf/perf, to: /usr/local/bin/perf}}`)",
            perf.version
        )),
        Some(k) if series(k) != series(&perf.version) => Some(format!(
            "`{DEBIAN_PERF}` {} is from Linux {}, the guest kernel's package {k} from Linux {}: perf reads \
             the kernel's own interfaces, so use a kernel of the same series or copy a matching perf in with \
             `guest.files`",
            perf.version,
            series(&perf.version).unwrap_or_default(),
            series(k).unwrap_or_default()
        )),
        Some(_) => None,
    }
}

/// Up to `n` of `known` closest to `name` (Jaro-Winkler, then names containing it).
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>, n: usize) -> Vec<String> {
    let mut scored: Vec<(f64, &str)> = known
        .into_iter()
        .map(|k| {
            let s = strsim::jaro_winkler(name, k);
            // `perf` → `linux-perf`: a name the user wrote inside a longer one counts as close.
            let s = if k.contains(name) { s.max(0.8) } else { s };
            (s, k)
        })
        .filter(|(s, _)| *s > 0.75)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    let mut seen = BTreeSet::new();
    scored
        .into_iter()
        .filter(|(_, k)| seen.insert(*k))
        .take(n)
        .map(|(_, k)| k.to_string())
        .collect()
}

/// Every package name apt knows (`apt-cache pkgnames`).
pub fn known_names() -> Result<Vec<String>> {
    let out = cmd::stdout("apt-cache", ["pkgnames"])?;
    Ok(out.lines().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_apts_download_list() {
        let out = "'http://deb.debian.org/debian/pool/main/g/glibc/libc6_2.36-9%2bdeb12u14_amd64.deb' \
                   libc6_2.36-9+deb12u14_amd64.deb 2759320 MD5Sum:8d98\n\
                   'http://x/pool/main/m/mariadb/mariadb-common_10.11.19-0%2bdeb12u1_all.deb' \
                   mariadb-common_1%3a10.11.19-0+deb12u1_all.deb 27624 \n\
                   W: a warning\n";
        let files = parse_print_uris(out);
        assert_eq!(files.len(), 2);
        assert_eq!(
            split_deb_name(&files[0]),
            Some(("libc6".into(), "2.36-9+deb12u14".into()))
        );
        assert_eq!(
            split_deb_name(&files[1]),
            Some(("mariadb-common".into(), "1:10.11.19-0+deb12u1".into()))
        );
        assert_eq!(split_deb_name("nonsense.deb"), None);
        assert_eq!(split_deb_name("a_b_c_d.deb"), None);
    }

    #[test]
    fn perf_goes_with_debians_kernel_of_its_series() {
        let perf = PackageInfo {
            package: DEBIAN_PERF.into(),
            version: "6.1.192-3".into(),
            sha256: String::new(),
            filename: String::new(),
        };
        assert_eq!(perf_mismatch(&perf, Some("6.1.158-1")), None);
        let other = perf_mismatch(&perf, Some("6.12.48-1~bpo12+1")).unwrap();
        assert!(
            other.contains("from Linux 6.1") && other.contains("from Linux 6.12"),
            "{other}"
        );
        let own = perf_mismatch(&perf, None).unwrap();
        assert!(
            own.contains("make -C tools/perf") && own.contains("guest.files"),
            "{own}"
        );
    }

    #[test]
    fn suggests_the_closest_names() {
        let known = ["sysbench", "stress-ng", "stress", "linux-perf", "fio", "sysstat"];
        assert_eq!(closest("sysbnech", known, 3)[0], "sysbench");
        assert_eq!(closest("stressng", known, 2)[0], "stress-ng");
        assert_eq!(closest("perf", known, 3), ["linux-perf"]);
        assert!(closest("qqqqqqqq", known, 3).is_empty());
    }

    #[test]
    fn a_tree_becomes_a_member_with_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        fs::create_dir_all(root.join("usr/share/doc/x")).unwrap();
        fs::write(root.join("usr/bin/tool"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(root.join("usr/bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(root.join("usr/share/doc/x/README"), "doc").unwrap();
        std::os::unix::fs::symlink("tool", root.join("usr/bin/alias")).unwrap();
        for p in PRUNED {
            let _ = fs::remove_dir_all(root.join(p));
        }
        let info = PackageInfo {
            package: "x".into(),
            version: "1".into(),
            sha256: String::new(),
            filename: String::new(),
        };
        let a = archive(root, &[info]).unwrap();
        let cpio = a.to_cpio();
        let f = tempfile::NamedTempFile::new().unwrap();
        fs::write(f.path(), &cpio).unwrap();
        let names = super::super::initramfs::list(f.path()).unwrap();
        for want in ["usr/bin/tool", "usr/bin/alias", "etc/ocrig/packages"] {
            assert!(names.iter().any(|n| n == want), "{names:?} lacks {want}");
        }
        assert!(!names.iter().any(|n| n.contains("doc")), "{names:?}");
        assert_eq!(a.to_cpio(), cpio, "the same tree makes the same bytes");
    }
}
