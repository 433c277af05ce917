//! Host binaries copied into the guest: busybox, dropbear, scp, GNU date and their shared libraries.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub const BUSYBOX: &str = "/bin/busybox";
const DROPBEAR: &str = "/usr/sbin/dropbear";
const SCP: &str = "/usr/bin/scp";
/// GNU date, for `date -s @<seconds.fraction>` (busybox's takes whole seconds only): a restored
/// clone sets its wall clock with it (backend/template/clone.rs). Beside busybox's, not over it.
const GNU_DATE: &str = "/bin/date";
pub const GUEST_GNU_DATE: &str = "/usr/libexec/ocrig/date";

/// A host file copied into the initramfs.
#[derive(Debug, Clone)]
pub struct HostFile {
    /// Path inside the guest.
    pub dest: String,
    /// Real file on the host (symlinks resolved).
    pub src: PathBuf,
    pub mode: u32,
}

/// busybox, dropbear and (if installed) scp, each with its shared libraries and loader.
pub fn host_files() -> Result<Vec<HostFile>> {
    let mut files: Vec<HostFile> = Vec::new();
    let mut add = |dest: &str, src: &Path, mode: u32| -> Result<()> {
        if files.iter().any(|f| f.dest == dest) {
            return Ok(());
        }
        let real = fs::canonicalize(src)
            .with_context(|| format!("{} (is its package installed?)", src.display()))?;
        files.push(HostFile {
            dest: dest.to_string(),
            src: real,
            mode,
        });
        Ok(())
    };
    let mut bins = vec![BUSYBOX, DROPBEAR];
    if Path::new(SCP).is_file() {
        bins.push(SCP);
    }
    for bin in bins {
        add(bin, Path::new(bin), 0o755)?;
        for lib in shared_libs(Path::new(bin))? {
            add(&lib.display().to_string(), &lib, 0o755)?;
        }
    }
    if Path::new(GNU_DATE).is_file() {
        add(GUEST_GNU_DATE, Path::new(GNU_DATE), 0o755)?;
        for lib in shared_libs(Path::new(GNU_DATE))? {
            add(&lib.display().to_string(), &lib, 0o755)?;
        }
    }
    files.sort_by(|a, b| a.dest.cmp(&b.dest));
    Ok(files)
}

/// Shared libraries (and the dynamic loader) of `bin` as `ldd` reports them; empty if static.
fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("could not start `ldd`")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if text.contains("not a dynamic executable") || text.contains("statically linked") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        bail!("`ldd {}` failed ({}): {text}", bin.display(), out.status);
    }
    parse_ldd(&text).with_context(|| format!("`ldd {}`", bin.display()))
}

fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = match line.split_once("=>") {
            Some((name, rest)) => {
                let p = rest.split_whitespace().next().unwrap_or("");
                if p == "not" {
                    bail!("library {} not found", name.trim());
                }
                p
            }
            None => line.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldd() {
        let t = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n\
                 \t/lib64/ld-linux-x86-64.so.2 (0x2)\n";
        let l = parse_ldd(t).unwrap();
        assert_eq!(
            l,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(parse_ldd("\tlibfoo.so => not found\n").is_err());
    }
}
