//! The static guest payload copied into every guest: the one this `ocrig` carries (built with
//! it by `build.rs`), or `$OCRIG_PAYLOAD` when it speaks this `ocrig`'s interface.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// Where the payload lives inside a guest.
pub const GUEST_PATH: &str = "/tmp/ocrig-payload";

/// The payload built with this `ocrig` (a static x86_64 glibc binary).
static CARRIED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ocrig-payload"));
/// Its SHA-256, as journaled in every results directory (`payload_sha256`).
pub const CARRIED_SHA256: &str = env!("OCRIG_PAYLOAD_SHA256");

/// The payload to deploy: `$OCRIG_PAYLOAD` if set (refused unless it speaks this `ocrig`'s
/// interface), else the carried one, written once into the cache by its hash.
pub fn locate() -> anyhow::Result<PathBuf> {
    match std::env::var_os("OCRIG_PAYLOAD") {
        Some(p) => {
            let p = PathBuf::from(p);
            check_interface(&p)?;
            Ok(p)
        }
        None => unpack(&crate::image::cache_dir().join("payload")),
    }
}

/// `<dir>/<sha256>/ocrig-payload`, written (atomically) unless a file with the right content
/// is already there.
fn unpack(dir: &Path) -> anyhow::Result<PathBuf> {
    let home = dir.join(CARRIED_SHA256);
    let path = home.join("ocrig-payload");
    if std::fs::read(&path).is_ok_and(|b| b == CARRIED) {
        return Ok(path);
    }
    std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
    let tmp = home.join(format!(".tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(CARRIED)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().with_context(|| format!("writing the guest payload to {}", path.display()))?;
    Ok(path)
}

/// A payload given by path must describe the same workloads and locks as this `ocrig` (its
/// `list --json`): the arguments the host sends and the report it parses are that interface.
fn check_interface(path: &Path) -> anyhow::Result<()> {
    let refuse = |why: String| {
        anyhow::anyhow!(
            "OCRIG_PAYLOAD={}: {why}; unset OCRIG_PAYLOAD to deploy the payload this ocrig carries \
             (sha256 {CARRIED_SHA256})",
            path.display()
        )
    };
    if !path.is_file() {
        return Err(refuse("no such file".into()));
    }
    let out = Command::new(path)
        .args(["list", "--json"])
        .output()
        .map_err(|e| refuse(format!("cannot run it here ({e})")))?;
    let theirs: serde_json::Value = match out.status.success() {
        true => serde_json::from_slice(&out.stdout)
            .map_err(|_| refuse("`list --json` did not print JSON: not an ocrig payload".into()))?,
        false => {
            return Err(refuse(format!(
                "`list --json` exited {}: not an ocrig payload",
                out.status
            )));
        }
    };
    if theirs != ocrig_payload::catalog::to_json() {
        return Err(refuse(
            "a payload of another version: its workload and lock catalogue differs from this \
             ocrig's"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carried_payload_is_a_static_binary_with_its_hash() {
        assert!(CARRIED.starts_with(b"\x7fELF"), "not an ELF binary");
        // ELF64 program headers: a static binary has no PT_INTERP (type 3).
        let phoff = u64::from_le_bytes(CARRIED[0x20..0x28].try_into().unwrap()) as usize;
        let (size, n) = (
            u16::from_le_bytes(CARRIED[0x36..0x38].try_into().unwrap()) as usize,
            u16::from_le_bytes(CARRIED[0x38..0x3a].try_into().unwrap()) as usize,
        );
        let interp = (0..n).any(|i| {
            let at = phoff + i * size;
            u32::from_le_bytes(CARRIED[at..at + 4].try_into().unwrap()) == 3
        });
        assert!(!interp, "the payload asks for a dynamic loader");
        assert_eq!(crate::image::sha256_hex(CARRIED), CARRIED_SHA256);
    }

    #[test]
    fn the_carried_payload_is_unpacked_once_and_repaired_when_changed() {
        let dir = tempfile::tempdir().unwrap();
        let p = unpack(dir.path()).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), CARRIED);
        assert!(p.ends_with(format!("{CARRIED_SHA256}/ocrig-payload")));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o755);
        std::fs::write(&p, b"damaged").unwrap();
        assert_eq!(unpack(dir.path()).unwrap(), p);
        assert_eq!(std::fs::read(&p).unwrap(), CARRIED);
    }

    #[test]
    fn a_payload_given_by_path_is_refused_unless_it_speaks_this_interface() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let e = check_interface(&missing).unwrap_err().to_string();
        assert!(
            e.contains(&missing.display().to_string()) && e.contains("no such file"),
            "{e}"
        );
        // Runs, but is not a payload.
        let e = check_interface(Path::new("/bin/true")).unwrap_err().to_string();
        assert!(
            e.contains("/bin/true") && e.contains("not an ocrig payload"),
            "{e}"
        );
        // A payload of another version: its catalogue differs.
        let other = dir.path().join("other-payload");
        std::fs::write(
            &other,
            "#!/bin/sh\necho '{\"workloads\":[],\"lock_algorithms\":[]}'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_interface(&other).unwrap_err().to_string();
        assert!(e.contains("another version") && e.contains(CARRIED_SHA256), "{e}");
        // The carried payload itself passes.
        check_interface(&unpack(dir.path()).unwrap()).unwrap();
    }
}
