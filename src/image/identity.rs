//! What a guest kernel is, beyond its release: two builds of one tree without a
//! `LOCALVERSION` both say `6.1.192`, so a kernel is named by its release, its build stamp
//! (`uname -v`: build number and date), the sha256 of the file booted and a digest of its
//! config. The banner strings are read from the kernel file itself — they are the very
//! `UTS_VERSION` the guest's `uname -v` prints — and configs are kept content-addressed in
//! `<cache>/kernel-configs/<digest>.config` so `ocrig compare` can list the options that differ.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::cmd;

/// A variant's kernel as the journal header records it (`kernel_identity`). A plain record:
/// a resumed sweep compares it field by field with what it would boot now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelIdentity {
    /// `uname -r`.
    pub release: String,
    /// `uname -v` as the guest reports it (`#2 SMP PREEMPT_DYNAMIC Tue Dec  1 21:04:05 UTC 2026`),
    /// read from the kernel's own banner; None when the file carries none readable.
    pub version: Option<String>,
    /// sha256 of the kernel file booted (the tree's vmlinux when it boots PVH, else its bzImage;
    /// a Debian kernel's vmlinuz; a `path:` kernel as given).
    pub sha256: String,
    /// Where the kernel came from: `debian linux-image-… <version>`, `tree <dir>`, `file <path>`.
    pub source: String,
    /// How it boots: `pvh` (uncompressed vmlinux) or `bzimage` (SeaBIOS).
    pub boot: String,
    /// sha256 of the config in canonical form (the set `CONFIG_…=` lines, sorted).
    pub config_sha256: Option<String>,
    /// Where the config was read (`<tree>/.config`, the .deb's `config-<release>`, the image's
    /// embedded IKCONFIG), or why there is none.
    pub config_from: String,
}

/// The first 8 hex digits of a hash, for names in reports.
pub fn short(hash: &str) -> &str {
    &hash[..hash.len().min(8)]
}

impl KernelIdentity {
    /// `6.1.192` or, where `release_shared`, `6.1.192 #2 a1b2c3d4`: enough to tell builds of
    /// one release apart.
    pub fn label(&self, release_shared: bool) -> String {
        if !release_shared {
            return self.release.clone();
        }
        let build = self
            .version
            .as_deref()
            .and_then(|v| v.split_whitespace().next())
            .filter(|b| b.starts_with('#'));
        match build {
            Some(b) => format!("{} {b} {}", self.release, short(&self.sha256)),
            None => format!("{} {}", self.release, short(&self.sha256)),
        }
    }
}

/// Names for kernels side by side: each variant's release, plus build number and short hash
/// for every variant whose release another variant shares with a different hash. Variants with
/// equal names ran the same kernel file.
pub fn labels(kernels: &BTreeMap<String, KernelIdentity>) -> BTreeMap<String, String> {
    kernels
        .iter()
        .map(|(v, k)| {
            let shared = kernels
                .values()
                .any(|o| o.release == k.release && o.sha256 != k.sha256);
            (v.clone(), k.label(shared))
        })
        .collect()
}

/// A kernel config: option (with its `CONFIG_` prefix) → value (`y`, `m`, `"text"`, `64`).
/// `# CONFIG_X is not set` lines and comments are dropped: an option not set is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelConfig {
    pub options: BTreeMap<String, String>,
}

impl KernelConfig {
    pub fn parse(text: &str) -> Self {
        let options = text
            .lines()
            .filter_map(|l| l.trim().split_once('='))
            .filter(|(k, _)| k.starts_with("CONFIG_") && !k.contains(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self { options }
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Self::parse(&text))
    }

    /// `CONFIG_X=v` lines, sorted, one per set option.
    pub fn canonical(&self) -> String {
        self.options.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
    }

    pub fn digest(&self) -> String {
        cmd::sha256_hex(self.canonical().as_bytes())
    }

    /// The value of `name` (with or without its `CONFIG_` prefix).
    pub fn get(&self, name: &str) -> Option<&str> {
        let key = if name.starts_with("CONFIG_") {
            name.to_string()
        } else {
            format!("CONFIG_{name}")
        };
        self.options.get(&key).map(String::as_str)
    }
}

/// The options whose values differ, as `CONFIG_X=y → CONFIG_X=m` (`(not set)` for absent).
pub fn config_diff(a: &KernelConfig, b: &KernelConfig) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a.options.keys().chain(b.options.keys()).collect();
    let show = |c: &KernelConfig, k: &str| match c.options.get(k) {
        Some(v) => format!("{k}={v}"),
        None => format!("# {k} is not set"),
    };
    keys.into_iter()
        .filter(|k| a.options.get(*k) != b.options.get(*k))
        .map(|k| format!("{} → {}", show(a, k), show(b, k)))
        .collect()
}

fn configs_dir(cache: &Path) -> PathBuf {
    cache.join("kernel-configs")
}

/// Keeps `config` as `<cache>/kernel-configs/<digest>.config`; returns the digest.
pub fn store_config(cache: &Path, config: &KernelConfig) -> Result<String> {
    let digest = config.digest();
    let dir = configs_dir(cache);
    let path = dir.join(format!("{digest}.config"));
    if !path.is_file() {
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join(format!(".tmp-{digest}-{}", std::process::id()));
        fs::write(&tmp, config.canonical()).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))?;
    }
    Ok(digest)
}

/// The config with `digest` from the first of `dirs` (each a results directory or a cache,
/// holding `kernel-configs/`) that has it.
pub fn find_config(dirs: &[&Path], digest: &str) -> Option<KernelConfig> {
    dirs.iter()
        .map(|d| configs_dir(d).join(format!("{digest}.config")))
        .find_map(|p| KernelConfig::read(&p).ok())
}

/// Copies the configs of `kernels` from the cache into `<dir>/kernel-configs/`, so a results
/// directory carried to another machine can still be compared option by option.
pub fn keep_configs<'a>(dir: &Path, kernels: impl IntoIterator<Item = &'a KernelIdentity>) -> Result<()> {
    let cache = super::cache_dir();
    for k in kernels {
        let Some(d) = &k.config_sha256 else { continue };
        if let Some(c) = find_config(&[&cache], d) {
            store_config(dir, &c)?;
        }
    }
    Ok(())
}

/// `(release, uname -v)` from a banner such as the bzImage setup header's
/// `6.1.192 (user@host) #2 SMP PREEMPT_DYNAMIC Tue Dec  1 …` or vmlinux's
/// `Linux version 6.1.192 (user@host) (gcc …) #2 SMP …`. `UTS_VERSION` always starts with
/// `#`, which neither the user, the host nor the compiler string contains before it.
pub fn parse_banner(banner: &str) -> Option<(String, Option<String>)> {
    let s = banner.strip_prefix("Linux version ").unwrap_or(banner);
    let release = s.split_whitespace().next()?.to_string();
    let version = s
        .find(") #")
        .map(|i| s[i + 2..].lines().next().unwrap_or("").trim().to_string())
        .filter(|v| !v.is_empty());
    Some((release, version))
}

/// The `Linux version …` banner inside an uncompressed kernel (vmlinux). Since 6.1 a vmlinux
/// holds two: init/version.c's weak placeholder (`# SMP `, no build number) and the real one
/// linked from init/version-timestamp.c, which `uname -v` reports; the one whose `UTS_VERSION`
/// has a build number wins.
pub fn vmlinux_banner(data: &[u8]) -> Option<String> {
    const NEEDLE: &[u8] = b"Linux version ";
    let mut from = 0;
    let mut placeholder = None;
    while let Some(i) = find(&data[from..], NEEDLE) {
        let at = from + i;
        let rest = &data[at..(at + 512).min(data.len())];
        let end = rest
            .iter()
            .position(|&b| b == b'\n' || b == 0)
            .unwrap_or(rest.len());
        let line = String::from_utf8_lossy(&rest[..end]).into_owned();
        from = at + NEEDLE.len();
        // `linux_banner` itself, not a format string or a fragment of one.
        let Some(v) = line.find(") #").map(|i| &line[i + 3..]) else {
            continue;
        };
        if line.contains('%') {
            continue;
        }
        if v.starts_with(|c: char| c.is_ascii_digit()) {
            return Some(line);
        }
        placeholder.get_or_insert(line);
    }
    placeholder
}

/// The config a kernel carries inside itself (`CONFIG_IKCONFIG`): a gzip stream between the
/// `IKCFG_ST` and `IKCFG_ED` markers of an uncompressed kernel.
pub fn embedded_config(data: &[u8]) -> Option<KernelConfig> {
    let start = find(data, b"IKCFG_ST")? + 8;
    let len = find(&data[start..], b"IKCFG_ED")?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&data[start..start + len])
        .read_to_string(&mut text)
        .ok()?;
    Some(KernelConfig::parse(&text))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// True when `data` starts like an ELF file.
pub fn is_elf(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(release: &str, sha: &str, version: &str) -> KernelIdentity {
        KernelIdentity {
            release: release.into(),
            version: Some(version.into()),
            sha256: sha.into(),
            source: "tree /t".into(),
            boot: "pvh".into(),
            config_sha256: None,
            config_from: "none".into(),
        }
    }

    #[test]
    fn banners_give_release_and_build_stamp() {
        let bz = "6.1.192 (root@ocrig) #2 SMP PREEMPT_DYNAMIC Tue Dec  1 21:04:05 UTC 2026";
        assert_eq!(
            parse_banner(bz),
            Some((
                "6.1.192".into(),
                Some("#2 SMP PREEMPT_DYNAMIC Tue Dec  1 21:04:05 UTC 2026".into())
            ))
        );
        let elf =
            b"junk\0Linux version %s (%s)\0Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian.org) \
(x86_64-linux-gnu-gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) \
#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1 (2025-11-09)\n\0more";
        let b = vmlinux_banner(elf).unwrap();
        let (r, v) = parse_banner(&b).unwrap();
        assert_eq!(r, "6.1.0-57-amd64");
        assert_eq!(
            v.as_deref(),
            Some("#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1 (2025-11-09)")
        );
        assert_eq!(parse_banner("6.1.192").unwrap().1, None);
        // 6.1's placeholder banner comes first; the real one (with its build number) wins.
        let two = b"Linux version 6.1.192 (root@vm) (gcc 12.2.0) # SMP \n\0\0Linux version 6.1.192 (root@vm) (gcc 12.2.0) #2 SMP Tue Dec  1 21:59:29 UTC 2026\n";
        let (_, v) = parse_banner(&vmlinux_banner(two).unwrap()).unwrap();
        assert_eq!(v.as_deref(), Some("#2 SMP Tue Dec  1 21:59:29 UTC 2026"));
        assert_eq!(vmlinux_banner(b"no banner here"), None);
    }

    #[test]
    fn same_release_builds_get_hash_labels_and_equal_ones_do_not() {
        let a = ident("6.1.192", "aaaaaaaa11", "#1 SMP Tue");
        let b = ident("6.1.192", "bbbbbbbb22", "#2 SMP Tue");
        let m = BTreeMap::from([("base".to_string(), a.clone()), ("patched".to_string(), b)]);
        let l = labels(&m);
        assert_eq!(l["base"], "6.1.192 #1 aaaaaaaa");
        assert_eq!(l["patched"], "6.1.192 #2 bbbbbbbb");
        let m = BTreeMap::from([("x".to_string(), a.clone()), ("y".to_string(), a.clone())]);
        assert!(labels(&m).values().all(|l| l == "6.1.192"));
        let other = ident("6.8.0", "cccccccc", "#1");
        let m = BTreeMap::from([("x".to_string(), a), ("y".to_string(), other)]);
        assert_eq!(labels(&m)["y"], "6.8.0");
    }

    #[test]
    fn configs_parse_digest_and_diff() {
        let a = KernelConfig::parse(
            "# Automatically generated\nCONFIG_VIRTIO_NET=y\n# CONFIG_PVH is not set\nCONFIG_LOCALVERSION=\"\"\nCONFIG_NR_CPUS=64\n",
        );
        let b = KernelConfig::parse(
            "CONFIG_NR_CPUS=64\nCONFIG_VIRTIO_NET=m\nCONFIG_PVH=y\nCONFIG_LOCALVERSION=\"\"\n",
        );
        assert_eq!(a.get("VIRTIO_NET"), Some("y"));
        assert_eq!(a.get("CONFIG_PVH"), None);
        assert_eq!(
            config_diff(&a, &b),
            vec![
                "# CONFIG_PVH is not set → CONFIG_PVH=y".to_string(),
                "CONFIG_VIRTIO_NET=y → CONFIG_VIRTIO_NET=m".to_string(),
            ]
        );
        // Order and comments do not change the digest; a value does.
        let a2 = KernelConfig::parse("CONFIG_NR_CPUS=64\nCONFIG_LOCALVERSION=\"\"\nCONFIG_VIRTIO_NET=y\n");
        assert_eq!(a.digest(), a2.digest());
        assert_ne!(a.digest(), b.digest());
        let dir = tempfile::tempdir().unwrap();
        let d = store_config(dir.path(), &b).unwrap();
        assert_eq!(find_config(&[Path::new("/nonexistent"), dir.path()], &d), Some(b));
    }

    #[test]
    fn embedded_config_is_found_between_its_markers() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"CONFIG_PVH=y\nCONFIG_UNIX=y\n").unwrap();
        let mut img = b"\x7fELF....IKCFG_ST".to_vec();
        img.extend(gz.finish().unwrap());
        img.extend(b"IKCFG_ED....");
        let c = embedded_config(&img).unwrap();
        assert_eq!(c.get("UNIX"), Some("y"));
        assert!(embedded_config(b"nothing").is_none());
    }
}
