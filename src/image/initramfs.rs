//! A deterministic newc cpio writer (sorted paths, fixed mtimes, root-owned).
//!
//! The archive is assembled in memory as a tree of entries; parents are created implicitly.
//! Device nodes can be added without privileges because the archive is written directly.

use std::collections::BTreeMap;
use std::path::Path;

#[cfg(test)]
use anyhow::bail;
use anyhow::{Context, Result};

#[cfg(test)]
use super::cmd;

/// Fixed mtime for every entry (like SOURCE_DATE_EPOCH): 2000-01-01T00:00:00Z.
pub const MTIME: u32 = 946_684_800;

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(String),
    CharDev(u32, u32),
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    kind: Kind,
    mode: u32,
}

/// An archive under construction. Paths are absolute-looking ("/bin/sh") and stored relative.
#[derive(Debug, Default, Clone)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

fn norm(path: &str) -> String {
    path.trim_matches('/').to_string()
}

impl Archive {
    pub fn new() -> Self {
        Self::default()
    }

    fn parents(&mut self, path: &str) {
        let mut cur = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for p in &parts[..parts.len().saturating_sub(1)] {
            if !cur.is_empty() {
                cur.push('/');
            }
            cur.push_str(p);
            self.entries.entry(cur.clone()).or_insert(Entry {
                kind: Kind::Dir,
                mode: 0o755,
            });
        }
    }

    fn put(&mut self, path: &str, kind: Kind, mode: u32) {
        let p = norm(path);
        self.parents(&p);
        self.entries.insert(p, Entry { kind, mode });
    }

    /// A directory with `mode` (replaces an implicit 0755 parent).
    pub fn dir(&mut self, path: &str, mode: u32) {
        self.put(path, Kind::Dir, mode);
    }

    pub fn file(&mut self, path: &str, data: impl Into<Vec<u8>>, mode: u32) {
        self.put(path, Kind::File(data.into()), mode);
    }

    /// A regular file with the contents of `src` (symlinks followed).
    pub fn copy(&mut self, path: &str, src: &Path, mode: u32) -> Result<()> {
        let data = std::fs::read(src).with_context(|| format!("reading {}", src.display()))?;
        self.file(path, data, mode);
        Ok(())
    }

    pub fn symlink(&mut self, path: &str, target: &str) {
        self.put(path, Kind::Symlink(target.to_string()), 0o777);
    }

    pub fn char_dev(&mut self, path: &str, major: u32, minor: u32, mode: u32) {
        self.put(path, Kind::CharDev(major, minor), mode);
    }

    /// Bytes of file contents and link targets (what the unpacked archive holds).
    pub fn data_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| match &e.kind {
                Kind::File(d) => d.len() as u64,
                Kind::Symlink(t) => t.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// The newc cpio bytes (with trailer).
    pub fn to_cpio(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (ino, (name, e)) in self.entries.iter().enumerate() {
            let (fmt, data, nlink, rmaj, rmin): (u32, &[u8], u32, u32, u32) = match &e.kind {
                Kind::Dir => (0o040000, &[], 2, 0, 0),
                Kind::File(d) => (0o100000, d, 1, 0, 0),
                Kind::Symlink(t) => (0o120000, t.as_bytes(), 1, 0, 0),
                Kind::CharDev(ma, mi) => (0o020000, &[], 1, *ma, *mi),
            };
            header(
                &mut out,
                ino as u32 + 1,
                fmt | (e.mode & 0o7777),
                nlink,
                MTIME,
                data.len() as u32,
                rmaj,
                rmin,
                name,
            );
            out.extend_from_slice(data);
            pad4(&mut out);
        }
        header(&mut out, 0, 0, 1, 0, 0, 0, 0, "TRAILER!!!");
        out
    }
}

#[allow(clippy::too_many_arguments)]
fn header(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    mtime: u32,
    size: u32,
    rmaj: u32,
    rmin: u32,
    name: &str,
) {
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        mtime,
        size,
        0,
        0,
        rmaj,
        rmin,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// Names in an initramfs (plain or gzip-compressed), following every concatenated cpio
/// archive the way the kernel does (`cpio -t` stops at the first trailer).
#[cfg(test)]
pub fn list(initrd: &Path) -> Result<Vec<String>> {
    let raw = std::fs::read(initrd).with_context(|| format!("reading {}", initrd.display()))?;
    let data = if raw.starts_with(&[0x1f, 0x8b]) {
        cmd::run(std::process::Command::new("gzip").arg("-dc").arg(initrd))?.stdout
    } else {
        raw
    };
    parse_names(&data).with_context(|| format!("reading the cpio archives in {}", initrd.display()))
}

#[cfg(test)]
fn parse_names(mut buf: &[u8]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    loop {
        while let [0, rest @ ..] = buf {
            buf = rest;
        }
        if buf.is_empty() {
            return Ok(names);
        }
        if buf.len() < 110 || &buf[..6] != b"070701" {
            bail!("bad newc header magic");
        }
        let field = |i: usize| -> Result<usize> {
            let s = std::str::from_utf8(&buf[6 + 8 * i..14 + 8 * i])?;
            Ok(usize::from_str_radix(s, 16)?)
        };
        let (size, namesize) = (field(6)?, field(11)?);
        let name_end = 110 + namesize;
        let data_start = name_end.next_multiple_of(4);
        let next = (data_start + size).next_multiple_of(4);
        if namesize == 0 || buf.len() < data_start + size {
            bail!("truncated cpio entry");
        }
        let name = String::from_utf8_lossy(&buf[110..name_end - 1]).into_owned();
        if name != "TRAILER!!!" {
            names.push(name);
        }
        buf = &buf[next.min(buf.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_is_sorted_deterministic_and_readable() {
        let mut a = Archive::new();
        a.file("/etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0o644);
        a.symlink("/bin/sh", "busybox");
        a.char_dev("/dev/console", 5, 1, 0o600);
        a.dir("/root", 0o700);
        let c1 = a.to_cpio();
        assert_eq!(c1, a.clone().to_cpio());
        assert!(c1.len().is_multiple_of(4));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.cpio");
        std::fs::write(&file, &c1).unwrap();
        let names = list(&file).unwrap();
        assert_eq!(
            names,
            ["bin", "bin/sh", "dev", "dev/console", "etc", "etc/passwd", "root"]
        );
        let verbose = cmd::stdout("sh", ["-c", &format!("cpio -tv --quiet < {}", file.display())]).unwrap();
        assert!(verbose.contains("crw-------"), "{verbose}");
        assert!(verbose.contains("drwx------"), "{verbose}");
    }
}
