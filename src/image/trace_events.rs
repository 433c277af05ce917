//! The trace events a guest kernel has, read from its image without booting it, so that a
//! variant's `trace_events:` naming one the kernel lacks is refused before a sweep boots
//! anything (the payload would refuse it in the guest, after the boot).
//!
//! Built-in events: tracefs lists an event as `<class->system>:<name>`, from the kernel's array
//! of `struct trace_event_call` pointers (`_ftrace_events`, in `.init.data`). Debian ships no
//! symbols (its System.map is a placeholder, the vmlinux inside the bzImage is stripped), so the
//! array is found by its shape: the longest run of words in `.init.data` that each point to a
//! `.data` object whose `class` (offset 16, after a `list_head`) points to a `.data` object
//! whose first field (`system`) is an identifier string in `.rodata`, and whose union at offset
//! 24 is the event's name (a `.rodata` string) or its `struct tracepoint` (whose first field is
//! the name). These offsets have held since Linux 3.x (include/linux/trace_events.h). Measured
//! on Debian's 6.1.0-57: 1506 events, lock:contention_begin/_end and sched:* among them.
//!
//! Module events: a module's `__event_<name>` symbols in its `_ftrace_events` section (modules
//! keep their symbol tables); only the names are taken, so a module event is matched by name
//! whatever its system. Only the modules the image loads count (read from its initramfs).
//!
//! The list is kept in the image directory ([`FILE`]) beside the kernel it was read from.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use object::{Object, ObjectSection, ObjectSymbol};
use serde::{Deserialize, Serialize};

/// Where an image keeps its event list.
pub const FILE: &str = "trace-events.json";

/// Fewest events a found array must hold to be believed (Debian's 6.1 has 1506; a kernel
/// built with tracing has hundreds).
const MIN_EVENTS: usize = 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventList {
    /// `system:name` of every event built into the kernel.
    pub builtin: BTreeSet<String>,
    /// Names of the events of the modules the image loads; None when those modules are not
    /// known (a user-supplied initrd).
    pub modules: Option<BTreeSet<String>>,
    /// The kernel the list was read from (its sha256 in the image's identity).
    pub kernel_sha256: String,
}

/// What a lookup says about one `system:name`.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Present,
    /// Not in the kernel: the words say what was looked at.
    Missing(String),
    /// Cannot be told before the run (why).
    Unknown(String),
}

impl EventList {
    pub fn check(&self, event: &str) -> Verdict {
        if self.builtin.contains(event) {
            return Verdict::Present;
        }
        let (system, name) = event.split_once(':').unwrap_or(("", event));
        match &self.modules {
            Some(m) if m.contains(name) => Verdict::Present,
            Some(m) => {
                let same_system: Vec<&str> = self
                    .builtin
                    .iter()
                    .filter_map(|e| e.strip_prefix(system)?.strip_prefix(':'))
                    .take(8)
                    .collect();
                let hint = if same_system.is_empty() {
                    format!("no built-in event of system `{system}`")
                } else {
                    format!("its `{system}` events include {}", same_system.join(", "))
                };
                Verdict::Missing(format!(
                    "not among the kernel's {} built-in trace events ({hint}) nor the {} events of the modules the image loads",
                    self.builtin.len(),
                    m.len()
                ))
            }
            None => Verdict::Unknown(
                "not built into the kernel; the image's initrd is the user's own, so the events its modules add are not known before the run"
                    .into(),
            ),
        }
    }
}

/// The `system:name` of every trace event built into `elf` (a vmlinux), or why none were found.
pub fn builtin_events(elf: &[u8]) -> std::result::Result<BTreeSet<String>, String> {
    let file = object::File::parse(elf).map_err(|e| format!("not an ELF kernel: {e}"))?;
    let sections: Vec<(String, u64, &[u8])> = file
        .sections()
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address(), s.data().ok()?)))
        .filter(|(_, a, d)| *a != 0 && !d.is_empty())
        .collect();
    let find = |name: &str| sections.iter().find(|s| s.0 == name);
    let (Some(init), Some(data), Some(rodata)) = (find(".init.data"), find(".data"), find(".rodata")) else {
        return Err("the kernel has no .init.data, .data and .rodata sections".into());
    };
    let within = |sec: &(String, u64, &[u8]), addr: u64, len: u64| {
        addr >= sec.1
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= sec.1 + sec.2.len() as u64)
    };
    let word = |sec: &(String, u64, &[u8]), addr: u64| -> Option<u64> {
        within(sec, addr, 8).then(|| {
            let o = (addr - sec.1) as usize;
            u64::from_le_bytes(sec.2[o..o + 8].try_into().expect("8 bytes"))
        })
    };
    let ident = |addr: u64| -> Option<String> {
        if !within(rodata, addr, 1) {
            return None;
        }
        let bytes = &rodata.2[(addr - rodata.1) as usize..];
        let end = bytes.iter().take(128).position(|&b| b == 0)?;
        let s = std::str::from_utf8(&bytes[..end]).ok()?;
        let mut chars = s.chars();
        (chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| s.to_string())
    };
    let event = |call: u64| -> Option<String> {
        let class = word(data, call.checked_add(16)?)?;
        let system = ident(word(data, class)?)?;
        let union = word(data, call.checked_add(24)?)?;
        let name = ident(union).or_else(|| ident(word(data, union)?))?;
        Some(format!("{system}:{name}"))
    };
    let (mut best, mut run) = (Vec::new(), Vec::new());
    for chunk in init.2.chunks_exact(8) {
        let p = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        match event(p) {
            Some(e) => run.push(e),
            None => {
                if run.len() > best.len() {
                    best = std::mem::take(&mut run);
                }
                run.clear();
            }
        }
    }
    if run.len() > best.len() {
        best = run;
    }
    if best.len() < MIN_EVENTS {
        return Err(format!(
            "no array of trace events found in the kernel ({} at most in a row; a kernel without CONFIG_TRACING has none)",
            best.len()
        ));
    }
    Ok(best.into_iter().collect())
}

/// The names of the trace events a module (`.ko`) defines.
pub fn module_events(ko: &[u8]) -> std::result::Result<BTreeSet<String>, String> {
    // The ELF reader wants its data 8-byte aligned; a cpio member is only 4-byte aligned.
    let mut words = vec![0u64; ko.len().div_ceil(8)];
    for (w, chunk) in words.iter_mut().zip(ko.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_ne_bytes(b);
    }
    // SAFETY: `words` holds at least `ko.len()` initialised bytes and outlives `aligned`.
    let aligned = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), ko.len()) };
    let file = object::File::parse(aligned).map_err(|e| format!("not an ELF module: {e}"))?;
    Ok(file
        .symbols()
        .filter_map(|s| s.name().ok()?.strip_prefix("__event_").map(str::to_string))
        .collect())
}

/// The `.ko` files under `/lib/modules/` in a newc cpio archive (several archives may follow
/// each other, as in an image's initrd), with their contents.
fn cpio_modules(archive: &[u8]) -> Vec<(String, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let hex = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
    };
    while at + 110 <= archive.len() {
        let h = &archive[at..at + 110];
        if &h[..6] != b"070701" {
            // Padding between concatenated archives.
            at += 4;
            continue;
        }
        let (Some(size), Some(namesize)) = (hex(&h[54..62]), hex(&h[94..102])) else {
            break;
        };
        let name_at = at + 110;
        let data_at = (name_at + namesize + 3) & !3;
        if data_at + size > archive.len() {
            break;
        }
        let name =
            String::from_utf8_lossy(&archive[name_at..name_at + namesize.saturating_sub(1)]).into_owned();
        if name == "TRAILER!!!" {
            at = (data_at + size + 3) & !3;
            continue;
        }
        if name.trim_start_matches('/').starts_with("lib/modules/") && name.ends_with(".ko") {
            out.push((name, &archive[data_at..data_at + size]));
        }
        at = (data_at + size + 3) & !3;
    }
    out
}

/// Reads the event list of the image in `dir` (kernel `vmlinux` or `vmlinuz`, initrd
/// `initrd.img`) from its files.
pub fn read_from_image(
    dir: &Path,
    kernel_sha256: &str,
    own_initrd: bool,
) -> Result<std::result::Result<EventList, String>> {
    let vmlinux = dir.join("vmlinux");
    let elf = if vmlinux.is_file() {
        std::fs::read(&vmlinux).with_context(|| format!("reading {}", vmlinux.display()))?
    } else {
        let bz = dir.join("vmlinuz");
        let data = std::fs::read(&bz).with_context(|| format!("reading {}", bz.display()))?;
        if crate::image::identity::is_elf(&data) {
            data
        } else {
            match super::vmlinux::decompressed(&data) {
                Ok(elf) => elf,
                Err(why) => {
                    return Ok(Err(format!(
                        "the kernel could not be unpacked to read its events: {why}"
                    )));
                }
            }
        }
    };
    let builtin = match builtin_events(&elf) {
        Ok(b) => b,
        Err(why) => return Ok(Err(why)),
    };
    let modules = if own_initrd {
        None
    } else {
        let initrd = dir.join("initrd.img");
        let bytes = std::fs::read(&initrd).with_context(|| format!("reading {}", initrd.display()))?;
        let mut names = BTreeSet::new();
        for (path, ko) in cpio_modules(&bytes) {
            match module_events(ko) {
                Ok(n) => names.extend(n),
                Err(why) => return Ok(Err(format!("{path} in the initrd: {why}"))),
            }
        }
        Some(names)
    };
    Ok(Ok(EventList {
        builtin,
        modules,
        kernel_sha256: kernel_sha256.to_string(),
    }))
}

/// The event list of `img`: from its [`FILE`] when it was read before for this kernel, else
/// read from the image now and kept there. Err(why) when it cannot be known.
pub fn of_image(img: &super::Image) -> std::result::Result<EventList, String> {
    let path = img.dir.join(FILE);
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(list) = serde_json::from_str::<EventList>(&text)
        && list.kernel_sha256 == img.identity.sha256
    {
        return Ok(list);
    }
    let own_initrd = img.host_key_blob.is_empty();
    let list =
        read_from_image(&img.dir, &img.identity.sha256, own_initrd).map_err(|e| format!("{e:#}"))??;
    // Kept for the next look; a read-only cache only costs reading it again.
    if let Ok(text) = serde_json::to_string(&list) {
        let tmp = img.dir.join(format!("{FILE}.tmp-{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(modules: Option<&[&str]>) -> EventList {
        EventList {
            builtin: [
                "lock:contention_begin",
                "lock:contention_end",
                "sched:sched_switch",
            ]
            .map(String::from)
            .into(),
            modules: modules.map(|m| m.iter().map(|s| s.to_string()).collect()),
            kernel_sha256: "k".into(),
        }
    }

    #[test]
    fn an_event_is_present_missing_or_unknown_with_the_reason() {
        let l = list(Some(&["ext4_sync_fs"]));
        assert_eq!(l.check("lock:contention_begin"), Verdict::Present);
        assert_eq!(l.check("ext4:ext4_sync_fs"), Verdict::Present);
        let Verdict::Missing(why) = l.check("lock:contention_bogus") else {
            panic!()
        };
        assert!(
            why.contains("3 built-in") && why.contains("contention_begin, contention_end"),
            "{why}"
        );
        let Verdict::Missing(why) = l.check("nosuch:thing") else {
            panic!()
        };
        assert!(why.contains("no built-in event of system `nosuch`"), "{why}");
        assert!(matches!(
            list(None).check("ext4:ext4_sync_fs"),
            Verdict::Unknown(_)
        ));
    }

    #[test]
    fn cpio_members_under_lib_modules_are_found_across_concatenated_archives() {
        let member = |name: &str, data: &[u8]| {
            let mut h = format!(
                "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
                1,
                0o100644,
                0,
                0,
                1,
                0,
                data.len(),
                0,
                0,
                0,
                0,
                name.len() + 1,
                0
            )
            .into_bytes();
            h.extend_from_slice(name.as_bytes());
            h.push(0);
            while h.len() % 4 != 0 {
                h.push(0);
            }
            h.extend_from_slice(data);
            while h.len() % 4 != 0 {
                h.push(0);
            }
            h
        };
        let mut a = member("lib/modules/ocrig/ext4.ko", b"EXT4");
        a.extend(member("etc/passwd", b"root"));
        a.extend(member("TRAILER!!!", b""));
        a.extend([0u8; 8]);
        a.extend(member("/lib/modules/ocrig/jbd2.ko", b"J"));
        let found = cpio_modules(&a);
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["lib/modules/ocrig/ext4.ko", "/lib/modules/ocrig/jbd2.ko"]);
        assert_eq!(found[0].1, b"EXT4");
    }

    /// On the real Debian kernel of this machine's cached image (built first where none is):
    /// the events the probe and seed000 use are found, a made-up one is not, and the module
    /// events of ext4 (a module in Debian's kernel) come from the initrd.
    #[test]
    #[cfg_attr(
        not(feature = "full-tests"),
        ignore = "full tier: reads the guest image (~1 s)"
    )]
    fn the_cached_debian_image_lists_its_lock_and_sched_events() {
        let cache = crate::image::cache_dir();
        let spec = crate::image::ImageSpec::kernel(crate::image::KernelSource::Debian("default".into()));
        // The full tier runs as root after scripts/setup: the image is built if none is cached.
        let img = crate::image::ensure(&spec, &cache).expect("the default Debian image (ocrig image build)");
        let l = read_from_image(&img.dir, &img.identity.sha256, false)
            .unwrap()
            .unwrap();
        eprintln!(
            "{} built-in events, {} module events",
            l.builtin.len(),
            l.modules.as_ref().map_or(0, |m| m.len())
        );
        assert!(l.builtin.len() > 500, "{}", l.builtin.len());
        for e in [
            "lock:contention_begin",
            "lock:contention_end",
            "sched:sched_switch",
            "sched:sched_wakeup",
            "syscalls:sys_enter_read",
        ] {
            assert_eq!(l.check(e), Verdict::Present, "{e}");
        }
        assert!(matches!(l.check("lock:contention_bogus"), Verdict::Missing(_)));
        assert_eq!(l.check("ext4:ext4_sync_fs"), Verdict::Present);
    }
}
