//! A system-wide kernel profile of the measured window: hardware CPU cycles where the machine
//! has a PMU (KVM guests with a vPMU, e.g. `-cpu host`), else the software `cpu-clock` event on
//! every CPU (TCG guests have no PMU; it samples on an hrtimer, so it works everywhere; the
//! report's `event_fallback` says why cycles were not used), sampling the
//! instruction pointer and the kernel call chain into one ring buffer per CPU. The buffers are
//! read once, after the window closed (nothing of ours runs during it); what did not fit is
//! counted as lost. Addresses are symbolised against the guest's own `/proc/kallsyms` and
//! folded into `root;...;leaf count` stacks, the busiest [`MAX_STACKS`] kept.

use std::collections::HashMap;
use std::io;

use serde::{Deserialize, Serialize};

use super::perf::Attr;

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `perf_event_attr` bit 10: `sample_period` holds a frequency (the kernel adapts the period in
/// cycles to it), needed for cycles, whose rate in Hz is unknown.
const ATTR_FREQ: u64 = 1 << 10;
const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 7;
const PERF_RECORD_MISC_KERNEL: u16 = 1;
/// Call-chain context markers (`enum perf_callchain_context`), not addresses.
const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
/// Ring buffer per CPU: 2^8 pages of 4 KiB = 1 MiB, about 50 s of samples at 99 Hz with
/// 20-frame chains.
const DATA_PAGES: usize = 256;
/// Folded stacks kept per run (the rest summed into `other_samples`).
pub const MAX_STACKS: usize = 200;
/// The kernel's default ceiling for `perf_event_max_sample_rate` (it may lower it at run time).
pub const DEFAULT_MAX_SAMPLE_RATE: u64 = 100_000;

struct Ring {
    fd: i32,
    base: *mut u8,
    len: usize,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what we mapped, then closing our descriptor.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
            libc::close(self.fd);
        }
    }
}

// SAFETY: the mapping is owned by the Ring and only touched through &mut self or after the
// counters were disabled.
unsafe impl Send for Ring {}

/// The stored profile of one run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub event: String,
    /// Why hardware cycles were not sampled (`event` is then cpu-clock): the failed
    /// perf_event_open and what it means. None when cycles were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_fallback: Option<String>,
    pub rate_hz: u64,
    pub samples: u64,
    /// Samples whose instruction pointer was in the kernel / in user space.
    pub kernel_samples: u64,
    pub user_samples: u64,
    /// Samples the ring buffers had no room for.
    pub lost: u64,
    /// `root;...;leaf` (kernel frames; user-space samples as `[user]`) with their counts, busiest
    /// first, at most [`MAX_STACKS`].
    pub folded: Vec<(String, u64)>,
    /// Samples in stacks beyond the kept ones.
    pub other_samples: u64,
    /// Time spent after the window reading and symbolising (not inside the window).
    pub processing_ns: u64,
    /// The kernel's `perf_event_max_sample_rate` when the run started.
    pub max_sample_rate: Option<u64>,
}

/// The guest's current ceiling (`/proc/sys/kernel/perf_event_max_sample_rate`).
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

pub struct Sampler {
    rate_hz: u64,
    rings: Vec<Ring>,
    max_rate: Option<u64>,
    event: &'static str,
    event_fallback: Option<String>,
}

/// The two events a profile samples: hardware cycles at `rate_hz` on average (frequency mode),
/// or cpu-clock every 1/rate_hz seconds of CPU time.
fn attr_for(hardware: bool, rate_hz: u64) -> Attr {
    let common = Attr {
        size: std::mem::size_of::<Attr>() as u32,
        sample_type: PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN,
        flags: ATTR_DISABLED | ATTR_EXCLUDE_CALLCHAIN_USER,
        ..Attr::default()
    };
    if hardware {
        Attr {
            kind: PERF_TYPE_HARDWARE,
            config: PERF_COUNT_HW_CPU_CYCLES,
            sample_period: rate_hz,
            flags: common.flags | ATTR_FREQ,
            ..common
        }
    } else {
        Attr {
            kind: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_CPU_CLOCK,
            // cpu-clock counts nanoseconds: the period for rate_hz samples a second.
            sample_period: 1_000_000_000 / rate_hz,
            ..common
        }
    }
}

/// One mapped sampler per CPU for `attr`, or the first failure in words.
fn open_rings(attr: &Attr, cpus: &[usize], what: &str) -> Result<Vec<Ring>, String> {
    let len = (1 + DATA_PAGES) * page();
    let mut rings = Vec::new();
    for &cpu in cpus {
        let fd = super::perf::open(attr, cpu)
            .map_err(|e| format!("perf_event_open of {what} sampling on CPU {cpu} failed: {e}"))?;
        // SAFETY: mapping the event's ring buffer (1 + 2^n pages) shared, read-write so we
        // can advance data_tail.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: our descriptor.
            unsafe { libc::close(fd) };
            return Err(format!("mapping the sample buffer of CPU {cpu} failed: {e}"));
        }
        rings.push(Ring {
            fd,
            base: base.cast(),
            len,
        });
    }
    Ok(rings)
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

impl Sampler {
    /// Opens one disabled sampler per CPU at `rate_hz`: hardware cycles (at that frequency on
    /// average) where every CPU has them, else cpu-clock (a fixed period of 1/rate).
    pub fn open(cpus: &[usize], rate_hz: u64) -> Result<Self, String> {
        let max_rate = max_sample_rate();
        if rate_hz == 0 || max_rate.is_some_and(|m| rate_hz > m) {
            return Err(format!(
                "profile rate {rate_hz} Hz is outside 1..={} (the kernel's perf_event_max_sample_rate)",
                max_rate.unwrap_or(DEFAULT_MAX_SAMPLE_RATE)
            ));
        }
        // Cycles where there is a PMU; a failure on any CPU drops the ones opened (Ring's drop)
        // and falls back to cpu-clock everywhere, so one profile has one event.
        let (rings, event, event_fallback) = match open_rings(
            &attr_for(true, rate_hz),
            cpus,
            "hardware cycles",
        ) {
            Ok(rings) => (rings, "cycles (hardware, system-wide)", None),
            Err(why) => {
                let rings = open_rings(&attr_for(false, rate_hz), cpus, "cpu-clock")?;
                let why = format!(
                    "{why}; so the software cpu-clock event was sampled (hardware cycles need a PMU: TCG has none, a KVM guest \
                     needs a vPMU, e.g. -cpu host)"
                );
                (rings, "cpu-clock (software, system-wide)", Some(why))
            }
        };
        Ok(Self {
            rate_hz,
            rings,
            max_rate,
            event,
            event_fallback,
        })
    }

    pub fn start(&self) {
        for r in &self.rings {
            // SAFETY: argument-less perf ioctl on our descriptor.
            unsafe { libc::ioctl(r.fd, IOC_ENABLE, 0) };
        }
    }

    pub fn stop(&self) {
        for r in &self.rings {
            // SAFETY: as above.
            unsafe { libc::ioctl(r.fd, IOC_DISABLE, 0) };
        }
    }

    /// Reads every buffer (the samplers must be stopped) and folds the stacks.
    pub fn finish(self) -> Profile {
        let t0 = std::time::Instant::now();
        let syms = Kallsyms::read();
        let mut p = Profile {
            event: self.event.into(),
            event_fallback: self.event_fallback.clone(),
            rate_hz: self.rate_hz,
            max_sample_rate: self.max_rate,
            ..Profile::default()
        };
        let mut stacks: HashMap<String, u64> = HashMap::new();
        for r in &self.rings {
            for_each_record(r, |kind, misc, body| match kind {
                PERF_RECORD_SAMPLE => {
                    p.samples += 1;
                    let stack = if misc & PERF_RECORD_MISC_CPUMODE_MASK == PERF_RECORD_MISC_KERNEL {
                        p.kernel_samples += 1;
                        fold(body, &syms)
                    } else {
                        p.user_samples += 1;
                        "[user]".to_string()
                    };
                    *stacks.entry(stack).or_default() += 1;
                }
                PERF_RECORD_LOST if body.len() >= 16 => p.lost += u64_at(body, 8),
                _ => {}
            });
        }
        let mut all: Vec<(String, u64)> = stacks.into_iter().collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        p.other_samples = all.iter().skip(MAX_STACKS).map(|s| s.1).sum();
        all.truncate(MAX_STACKS);
        p.folded = all;
        p.processing_ns = t0.elapsed().as_nanos() as u64;
        p
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
}

/// Calls `f(type, misc, body)` for every record between data_tail and data_head.
fn for_each_record(r: &Ring, mut f: impl FnMut(u32, u16, &[u8])) {
    let pg = page();
    // SAFETY: the first page is the kernel's perf_event_mmap_page; data_head at 1024, data_tail
    // at 1032. The samplers are disabled, so the kernel no longer writes; the volatile read and
    // the fence order our reads of the data after the head (perf's documented protocol).
    let head = unsafe { std::ptr::read_volatile(r.base.add(1024) as *const u64) };
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    let tail = unsafe { std::ptr::read_volatile(r.base.add(1032) as *const u64) };
    let size = (DATA_PAGES * pg) as u64;
    // SAFETY: the data area follows the first page and is `size` bytes long.
    let data = unsafe { std::slice::from_raw_parts(r.base.add(pg), size as usize) };
    let copy = |from: u64, n: usize| -> Vec<u8> {
        (0..n as u64)
            .map(|i| data[((from + i) % size) as usize])
            .collect()
    };
    let mut at = tail;
    while at + 8 <= head {
        let h = copy(at, 8);
        let kind = u32::from_ne_bytes(h[0..4].try_into().expect("4"));
        let misc = u16::from_ne_bytes(h[4..6].try_into().expect("2"));
        let len = u16::from_ne_bytes(h[6..8].try_into().expect("2")) as u64;
        if len < 8 || at + len > head {
            break;
        }
        f(kind, misc, &copy(at + 8, (len - 8) as usize));
        at += len;
    }
    // SAFETY: data_tail is ours to write; tells the kernel the space is free.
    unsafe { std::ptr::write_volatile(r.base.add(1032) as *mut u64, at) };
}

/// A sample body (IP, then nr and the chain) as `root;...;leaf`.
fn fold(body: &[u8], syms: &Kallsyms) -> String {
    let ip = u64_at(body, 0);
    let nr = u64_at(body, 8) as usize;
    let chain: Vec<u64> = (0..nr)
        .map(|i| u64_at(body, 16 + 8 * i))
        .filter(|&a| a < PERF_CONTEXT_MAX)
        .collect();
    let frames = if chain.is_empty() { vec![ip] } else { chain };
    let mut names: Vec<&str> = frames.iter().rev().map(|&a| syms.name(a)).collect();
    names.dedup();
    names.join(";")
}

/// Kernel text symbols from `/proc/kallsyms`, sorted by address.
struct Kallsyms {
    addrs: Vec<u64>,
    names: Vec<String>,
}

impl Kallsyms {
    fn read() -> Self {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
        let mut v: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let kind = it.next()?;
                let name = it.next()?;
                (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
            })
            .collect();
        v.sort_unstable();
        let (addrs, names) = v.into_iter().unzip();
        Self { addrs, names }
    }

    fn name(&self, addr: u64) -> &str {
        match self.addrs.partition_point(|&a| a <= addr) {
            0 => "[unknown]",
            i => &self.names[i - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_a_kernel_chain_root_first_without_context_markers() {
        let syms = Kallsyms {
            addrs: vec![0x1000, 0x2000, 0x3000],
            names: vec!["leaf_fn".into(), "mid_fn".into(), "root_fn".into()],
        };
        let mut body = Vec::new();
        for w in [0x1010u64, 4, (-128i64) as u64, 0x1010, 0x2020, 0x3030] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        assert_eq!(fold(&body, &syms), "root_fn;mid_fn;leaf_fn");
        assert_eq!(syms.name(0x10), "[unknown]");
        assert_eq!(std::mem::size_of::<Attr>(), 64);
    }

    #[test]
    fn cycles_sample_at_a_frequency_and_cpu_clock_at_a_period() {
        let hw = attr_for(true, 999);
        assert_eq!(
            (hw.kind, hw.config, hw.sample_period),
            (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 999)
        );
        assert!(hw.flags & ATTR_FREQ != 0 && hw.flags & ATTR_DISABLED != 0);
        let sw = attr_for(false, 1000);
        assert_eq!((sw.kind, sw.sample_period), (PERF_TYPE_SOFTWARE, 1_000_000));
        assert_eq!(sw.flags & ATTR_FREQ, 0);
    }
}
