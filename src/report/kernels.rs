//! What `ocrig compare A B` says about the kernels of its two sides: the same kernel, or how
//! they differ — release, `uname -v` build stamp, sha256 of the file booted, and the config
//! options that changed (from the configs each results directory keeps in `kernel-configs/`,
//! else from this machine's cache).

use std::collections::BTreeMap;
use std::path::Path;

use crate::image::KernelIdentity;
use crate::image::identity::{KernelConfig, config_diff, find_config, short};
use crate::journal::Journal;

/// Most changed `CONFIG_` lines listed before "… and N more".
const MAX_CONFIG_LINES: usize = 12;

/// `kernels` with each variant renamed through `map` (variants not in it are dropped).
pub fn renamed<'a>(
    kernels: &'a BTreeMap<String, KernelIdentity>,
    map: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = (String, KernelIdentity)> + 'a {
    kernels
        .iter()
        .filter_map(|(v, k)| Some((map.get(v)?.clone(), k.clone())))
}

/// The variant pairs whose kernels are compared: the single variant of each side, else the
/// variants both sides have, else the two baselines.
fn pairs(a: &Journal, b: &Journal) -> Vec<(String, String)> {
    let (va, vb) = (&a.header.variants, &b.header.variants);
    if let ([x], [y]) = (va.as_slice(), vb.as_slice()) {
        return vec![(x.clone(), y.clone())];
    }
    let common: Vec<(String, String)> = va
        .iter()
        .filter(|v| vb.contains(v))
        .map(|v| (v.clone(), v.clone()))
        .collect();
    if common.is_empty() {
        vec![(a.header.baseline.clone(), b.header.baseline.clone())]
    } else {
        common
    }
}

/// The kernel paragraph of `ocrig compare` for results directories `a_dir` and `b_dir`.
pub fn compare_note(a_dir: &Path, a: &Journal, b_dir: &Path, b: &Journal) -> String {
    let cache = crate::image::cache_dir();
    let name = |d: &Path| {
        d.file_name()
            .map_or("?".into(), |n| n.to_string_lossy().into_owned())
    };
    let (an, bn) = (name(a_dir), name(b_dir));
    let mut out = String::new();
    // The hosts first: a change there moves every figure.
    match (&a.header.runs_on.host, &b.header.runs_on.host) {
        (Some(ha), Some(hb)) => {
            let d = ha.differences(hb);
            if d.is_empty() {
                out.push_str(&format!("host: {an} and {bn} ran on a host that read the same: {}\n", ha.summary()));
            } else {
                out.push_str(&format!("hosts differ between {an} and {bn}:\n"));
                for line in d {
                    out.push_str(&format!("  {}\n", line.trim_start_matches("host ")));
                }
            }
        }
        _ => out.push_str(&format!(
            "host: {an} or {bn} recorded no host (a sweep over several hosts): whether the hosts differ is not known\n"
        )),
    }
    for (va, vb) in pairs(a, b) {
        let side = |n: &str, v: &str| format!("{n}/{v}");
        let (sa, sb) = (side(&an, &va), side(&bn, &vb));
        let (ka, kb) = (
            a.header.kernel_identity.get(&va),
            b.header.kernel_identity.get(&vb),
        );
        let (Some(ka), Some(kb)) = (ka, kb) else {
            let ra = a.header.runs_on.kernels.get(&va).map_or("?", String::as_str);
            let rb = b.header.runs_on.kernels.get(&vb).map_or("?", String::as_str);
            out.push_str(&format!(
                "kernels: {sa} ran {ra}, {sb} ran {rb}; no kernel identity recorded (the host backend runs no guest kernel): whether the builds differ is not known\n"
            ));
            continue;
        };
        let ca = ka
            .config_sha256
            .as_deref()
            .and_then(|d| find_config(&[a_dir, &cache], d));
        let cb = kb
            .config_sha256
            .as_deref()
            .and_then(|d| find_config(&[b_dir, &cache], d));
        out.push_str(&describe(&sa, ka, ca.as_ref(), &sb, kb, cb.as_ref()));
    }
    out
}

/// One pair of kernels in words.
fn describe(
    sa: &str,
    ka: &KernelIdentity,
    ca: Option<&KernelConfig>,
    sb: &str,
    kb: &KernelIdentity,
    cb: Option<&KernelConfig>,
) -> String {
    if ka.sha256 == kb.sha256 {
        return format!(
            "kernels: {sa} and {sb} ran the same kernel: {} ({}), sha256 {}\n",
            ka.release,
            ka.version.as_deref().unwrap_or("no build stamp"),
            short(&ka.sha256)
        );
    }
    let mut s = format!("kernels differ between {sa} and {sb}:\n");
    if ka.release == kb.release {
        s.push_str(&format!("  release: both {}\n", ka.release));
    } else {
        s.push_str(&format!("  release: {} → {}\n", ka.release, kb.release));
    }
    let none = "unknown".to_string();
    let (va, vb) = (
        ka.version.as_ref().unwrap_or(&none),
        kb.version.as_ref().unwrap_or(&none),
    );
    if va != vb {
        s.push_str(&format!("  build: {va} → {vb}\n"));
    }
    s.push_str(&format!(
        "  sha256: {} → {} ({} → {})\n",
        short(&ka.sha256),
        short(&kb.sha256),
        ka.source,
        kb.source
    ));
    match (&ka.config_sha256, &kb.config_sha256) {
        (Some(x), Some(y)) if x == y => {
            s.push_str(&format!("  config: the same ({})\n", short(x)));
        }
        (Some(x), Some(y)) => match (ca, cb) {
            (Some(ca), Some(cb)) => {
                let diff = config_diff(ca, cb);
                s.push_str(&format!(
                    "  config: {} → {}, {} option(s) differ:\n",
                    short(x),
                    short(y),
                    diff.len()
                ));
                for line in diff.iter().take(MAX_CONFIG_LINES) {
                    s.push_str(&format!("    {line}\n"));
                }
                if diff.len() > MAX_CONFIG_LINES {
                    s.push_str(&format!("    … and {} more\n", diff.len() - MAX_CONFIG_LINES));
                }
            }
            _ => s.push_str(&format!(
                "  config: {} → {} (the configs themselves are not in the results directories nor in this machine's cache, so the options are not listed)\n",
                short(x),
                short(y)
            )),
        },
        _ => s.push_str(&format!(
            "  config: not known for both ({}; {})\n",
            ka.config_from, kb.config_from
        )),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::identity::store_config;
    use crate::testing::journal;

    fn ident(sha: &str, n: u32, config: &KernelConfig) -> KernelIdentity {
        KernelIdentity {
            release: "6.1.192".into(),
            version: Some(format!("#{n} SMP PREEMPT_DYNAMIC")),
            sha256: sha.into(),
            source: format!("tree /src/linux-{n}"),
            boot: "pvh".into(),
            config_sha256: Some(config.digest()),
            config_from: "/src/.config".into(),
        }
    }

    #[test]
    fn compare_names_release_build_hash_and_changed_options() {
        let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let base = KernelConfig::parse("CONFIG_PVH=y\nCONFIG_PARAVIRT_SPINLOCKS=y\nCONFIG_NR_CPUS=64\n");
        let patched = KernelConfig::parse("CONFIG_PVH=y\nCONFIG_NR_CPUS=128\nCONFIG_LOCK_EVENT_COUNTS=y\n");
        store_config(da.path(), &base).unwrap();
        store_config(db.path(), &patched).unwrap();
        let (mut a, mut b) = (journal(), journal());
        for j in [&mut a, &mut b] {
            j.header.variants = vec!["base".into()];
            j.header.baseline = "base".into();
        }
        a.header.kernel_identity = BTreeMap::from([("base".into(), ident("aaaa1111ffff", 1, &base))]);
        b.header.kernel_identity = BTreeMap::from([("base".into(), ident("bbbb2222ffff", 2, &patched))]);
        let note = compare_note(da.path(), &a, db.path(), &b);
        assert!(note.contains("kernels differ between"), "{note}");
        assert!(note.contains("release: both 6.1.192"), "{note}");
        assert!(
            note.contains("build: #1 SMP PREEMPT_DYNAMIC → #2 SMP PREEMPT_DYNAMIC"),
            "{note}"
        );
        assert!(note.contains("sha256: aaaa1111 → bbbb2222"), "{note}");
        assert!(note.contains("3 option(s) differ"), "{note}");
        assert!(note.contains("CONFIG_NR_CPUS=64 → CONFIG_NR_CPUS=128"), "{note}");
        assert!(
            note.contains("CONFIG_PARAVIRT_SPINLOCKS=y → # CONFIG_PARAVIRT_SPINLOCKS is not set"),
            "{note}"
        );
        // Same file on both sides.
        b.header.kernel_identity = a.header.kernel_identity.clone();
        let note = compare_note(da.path(), &a, db.path(), &b);
        assert!(
            note.contains("ran the same kernel: 6.1.192 (#1 SMP PREEMPT_DYNAMIC), sha256 aaaa1111"),
            "{note}"
        );
        // A journal without identities says what is not known.
        b.header.kernel_identity.clear();
        let note = compare_note(da.path(), &a, db.path(), &b);
        assert!(note.contains("no kernel identity recorded"), "{note}");
    }
}
