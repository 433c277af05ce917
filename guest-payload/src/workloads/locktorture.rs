//! `locktorture`: the kernel's own lock torture test (`kernel/locking/locktorture.c`) as a
//! workload: kernel threads taking one kernel lock (`--torture-type`: spin_lock, mutex_lock,
//! rwsem_lock, ...) as fast as they can, so the guest kernel's lock code itself is what the
//! overcommit acts on (the other workloads reach kernel locks only through system calls).
//!
//! - Started at the gate: the module is loaded (`finit_module`, its dependency `torture` first)
//!   once the host says go, with the stress parameters; it is unloaded (`delete_module`) after
//!   `--duration-ms`, which stops its threads and makes it print its final statistics.
//! - Read from the kernel's log (`/dev/kmsg`, from its end before the load): `Writes:  Total: N
//!   Max/Min: a/b  Fail: f` (and `Reads:` for reader-writer types) and the `End of test:
//!   SUCCESS|FAILURE` line. 6.1 reports only the most and fewest acquisitions of one writer,
//!   so fairness is their ratio (min / max; the kernel itself flags `???` when max > 2 × min).
//! - Where the module lives: the image puts modules it does not load at boot under
//!   [`MODULE_DIR`], listed in [`EXTRA_MODULES`] (`name file...` in load order). A guest
//!   kernel without `CONFIG_LOCK_TORTURE_TEST=m` has none (Debian's stock kernels do not build
//!   it): refused as bad input naming the option.
//! - Parameters the kernel does not know are ignored by the module loader with a warning, so
//!   each one passed is checked in `/sys/module/locktorture/parameters/` after the load and the
//!   run refused (module unloaded) in the kernel's words where it is missing (`long_hold` is
//!   newer than 6.1); an unknown torture type fails the load, and the kernel's list of types is
//!   quoted from its log.
//! - Checks: no lock failure (`Fail` 0 on both sides, and `End of test: SUCCESS`), and work done
//!   (at least one write).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use super::BadInput;
use crate::checks::Check;
use crate::env::Env;
use crate::report::Report;

/// Where the image keeps the modules it does not load at boot.
pub const MODULE_DIR: &str = "/lib/modules/ocrig/extra";
/// `name file...` lines: each such module and the files to load for it, in load order.
pub const EXTRA_MODULES: &str = "/etc/ocrig/extra-modules";
/// The module this workload loads.
pub const MODULE: &str = "locktorture";
/// The kernel option a guest kernel needs for it (the host validates scenarios against it).
pub const KERNEL_OPTION: &str = "CONFIG_LOCK_TORTURE_TEST=m";

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// The lock to torture, as the kernel names it (6.1: lock_busted, spin_lock, spin_lock_irq,
    /// rw_lock, rw_lock_irq, mutex_lock, ww_mutex_lock, rtmutex_lock, rwsem_lock,
    /// percpu_rwsem_lock).
    #[arg(long, default_value = "spin_lock", value_parser = parse_type)]
    pub torture_type: String,
    /// Writer threads (the module's nwriters_stress; default: the module's, 2 × CPUs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub writers: Option<u32>,
    /// Reader threads for reader-writer types (nreaders_stress; default: the module's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub readers: Option<u32>,
    /// How long the module runs, ms.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub duration_ms: u64,
    /// Jiffies between the module's shuffles of its threads over the CPUs (it leaves one CPU
    /// idle in turn); 0 (off) by default so every CPU works all the time.
    #[arg(long, default_value_t = 0)]
    pub shuffle_interval: u32,
    /// Jiffies the module runs, then halts, in turn; 0 (off) by default: a steady load.
    #[arg(long, default_value_t = 0)]
    pub stutter: u32,
    /// Occasional long holds, ms (the module's `long_hold`, kernels after 6.1; absent: the
    /// module's default).
    #[arg(long)]
    pub long_hold: Option<u64>,
}

fn parse_type(s: &str) -> Result<String, String> {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(s.into())
    } else {
        Err(format!(
            "'{s}' is not a lock torture type (letters, digits and _, e.g. spin_lock)"
        ))
    }
}

impl Args {
    /// What the parser cannot check alone.
    pub fn check(&self) -> Result<(), String> {
        match self.long_hold {
            Some(ms) if ms >= self.duration_ms => Err(format!(
                "long-hold {ms} ms is not shorter than the run (duration-ms {})",
                self.duration_ms
            )),
            _ => Ok(()),
        }
    }

    /// The module's parameters, as `name=value`.
    fn params(&self) -> Vec<(String, String)> {
        let mut p = vec![
            ("torture_type".to_string(), self.torture_type.clone()),
            ("shuffle_interval".into(), self.shuffle_interval.to_string()),
            ("stutter".into(), self.stutter.to_string()),
            // Statistics only at the end (no periodic printing thread).
            ("stat_interval".into(), "0".into()),
            ("verbose".into(), "0".into()),
        ];
        if let Some(w) = self.writers {
            p.push(("nwriters_stress".into(), w.to_string()));
        }
        if let Some(r) = self.readers {
            p.push(("nreaders_stress".into(), r.to_string()));
        }
        if let Some(h) = self.long_hold {
            p.push(("long_hold".into(), h.to_string()));
        }
        p
    }
}

/// One side's final statistics line.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Side {
    pub total: u64,
    /// Acquisitions of the busiest and the least busy thread.
    pub max: u64,
    pub min: u64,
    /// Threads that saw the lock misbehave (the kernel prints a flag, 0 or 1, per side).
    pub fail: u64,
    pub per_sec: f64,
    /// min / max: 1 = every thread took the lock as often; null when max is 0.
    pub min_over_max: Option<f64>,
}

/// The `locktorture` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LocktortureResult {
    pub torture_type: String,
    /// The parameters given to the module.
    pub params: BTreeMap<String, String>,
    /// From the load to the start of the unload, s.
    pub elapsed_s: f64,
    pub writes: Side,
    /// Reader-writer types only.
    pub reads: Option<Side>,
    /// The module's closing verdict (`End of test: SUCCESS`, `FAILURE`, ...).
    pub end_of_test: Option<String>,
    /// The module's log lines of the run, as the kernel printed them.
    pub log: Vec<String>,
    /// The kernel release the module ran in.
    pub kernel: String,
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    args.check().map_err(BadInput)?;
    let files = module_files(Path::new(EXTRA_MODULES), Path::new(MODULE_DIR))?;
    // A module left loaded by an earlier run that did not end would refuse this load.
    if Path::new("/sys/module").join(MODULE).exists() {
        unload(MODULE).map_err(|e| anyhow::anyhow!("unloading the {MODULE} an earlier run left: {e}"))?;
    }
    let mut log = Kmsg::open_at_end()?;
    let params = args.params();
    let (deps, main) = files.split_at(files.len() - 1);
    for dep in deps {
        load(dep, "").or_else(|e| already_loaded(e, dep))?;
    }
    crate::probe::window_open();
    let start = Instant::now();
    let text = params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    if let Err(e) = load(&main[0], &text) {
        let said = log.read_new().join(" | ");
        return Err(BadInput(format!(
            "the guest kernel refused {MODULE} {text}: {e}{}",
            if said.is_empty() {
                String::new()
            } else {
                format!("; it said: {said}")
            }
        ))
        .into());
    }
    // Parameters this kernel's module does not have were ignored: refuse the run.
    let unknown: Vec<&str> = params
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| {
            !Path::new("/sys/module")
                .join(MODULE)
                .join("parameters")
                .join(k)
                .exists()
        })
        .collect();
    if !unknown.is_empty() {
        let _ = unload(MODULE);
        let said: Vec<String> = log
            .read_new()
            .into_iter()
            .filter(|l| l.contains("unknown parameter"))
            .collect();
        let said = said.join(" | ");
        return Err(BadInput(format!(
            "this guest kernel's {MODULE} has no parameter {} (the kernel said: {said})",
            unknown.join(", ")
        ))
        .into());
    }
    std::thread::sleep(Duration::from_millis(args.duration_ms));
    let elapsed = start.elapsed();
    unload(MODULE).map_err(|e| anyhow::anyhow!("unloading {MODULE}: {e}"))?;
    crate::probe::window_close();
    let lines = log.read_new();
    let parsed = Parsed::of(&lines);
    let secs = elapsed.as_secs_f64();
    let writes = parsed
        .writes
        .map(|s| s.side(secs))
        .ok_or_else(|| anyhow::anyhow!("{MODULE} printed no Writes line; its log: {}", lines.join(" | ")))?;
    let result = LocktortureResult {
        torture_type: args.torture_type.clone(),
        params: params.into_iter().collect(),
        elapsed_s: secs,
        writes,
        reads: parsed.reads.map(|s| s.side(secs)),
        end_of_test: parsed.end_of_test.clone(),
        log: lines,
        kernel: crate::probe::tracefs::kernel_release(),
    };
    let checks = vec![no_lock_failure(&result), work_done(&result)];
    Ok(Report::new(
        "locktorture",
        elapsed.as_nanos() as u64,
        Env::read(),
        metrics_of(&result),
        &result,
    )?
    .with_checks(checks))
}

/// The files to load for [`MODULE`], its dependencies first, from the image's list.
fn module_files(list: &Path, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(list).unwrap_or_default();
    let files: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(MODULE)).then(|| words.map(|f| dir.join(f)).collect::<Vec<_>>())
        })
        .next()
        .unwrap_or_default();
    if files.is_empty() {
        return Err(BadInput(format!(
            "this guest's kernel has no {MODULE} module: it needs {KERNEL_OPTION} (Debian's stock kernels do not build it; \
             use a kernel tree built with it, as tests/kernel/guest.config does)"
        ))
        .into());
    }
    if let Some(missing) = files.iter().find(|f| !f.is_file()) {
        anyhow::bail!(
            "{} lists {}, which the image lacks",
            list.display(),
            missing.display()
        );
    }
    Ok(files)
}

fn load(path: &Path, params: &str) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    let params = c_string(params)?;
    // SAFETY: finit_module reads the open file and the NUL-terminated parameter string.
    zero_or_errno(unsafe { libc::syscall(libc::SYS_finit_module, file.as_raw_fd(), params.as_ptr(), 0) })
}

/// A dependency already loaded (by an earlier run) is fine.
fn already_loaded(e: std::io::Error, path: &Path) -> anyhow::Result<()> {
    if e.raw_os_error() == Some(libc::EEXIST) {
        Ok(())
    } else {
        Err(anyhow::anyhow!("loading {}: {e}", path.display()))
    }
}

fn unload(name: &str) -> std::io::Result<()> {
    let name = c_string(name)?;
    // SAFETY: delete_module reads the NUL-terminated name; O_NONBLOCK: fail rather than wait
    // for users of the module (it has none).
    zero_or_errno(unsafe { libc::syscall(libc::SYS_delete_module, name.as_ptr(), libc::O_NONBLOCK) })
}

fn c_string(s: &str) -> std::io::Result<CString> {
    CString::new(s).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

/// A system call's 0, or the errno it set.
fn zero_or_errno(rc: libc::c_long) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The kernel's log from a point on.
struct Kmsg {
    file: std::fs::File,
}

impl Kmsg {
    /// Opened at the log's current end: what the kernel prints from now on.
    fn open_at_end() -> anyhow::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .map_err(|e| anyhow::anyhow!("opening /dev/kmsg: {e}"))?;
        // SAFETY: lseek on an open descriptor; SEEK_END on /dev/kmsg moves past every record.
        unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
        Ok(Self { file })
    }

    /// The messages printed since the last read (one record a read; EAGAIN at the end; EPIPE
    /// when records were overwritten, then reading goes on from the oldest kept).
    fn read_new(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    if let Some((_, msg)) = rec.split_once(';') {
                        // Continuation lines (" KEY=value") follow the message; not ours.
                        let msg = msg.lines().next().unwrap_or("");
                        out.push(unescape(msg));
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(_) => break,
            }
        }
        out
    }
}

/// /dev/kmsg escapes non-printable bytes as `\xNN`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("\\x") {
        out.push_str(&rest[..i]);
        let hex = rest
            .get(i + 2..i + 4)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push_str("\\x");
                rest = &rest[i + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Stats {
    total: u64,
    max: u64,
    min: u64,
    fail: u64,
}

impl Stats {
    fn side(self, secs: f64) -> Side {
        Side {
            total: self.total,
            max: self.max,
            min: self.min,
            fail: self.fail,
            per_sec: self.total as f64 / secs.max(1e-9),
            min_over_max: (self.max > 0).then(|| self.min as f64 / self.max as f64),
        }
    }

    /// `Writes:  Total: 93  Max/Min: 50/43 ???  Fail: 0 !!!` (or `Reads :`), anywhere in `line`.
    fn parse(line: &str, side: &str) -> Option<Self> {
        let rest = &line[line.find(side)? + side.len()..];
        let rest = rest.trim_start().strip_prefix(':')?;
        let num = |key: &str| -> Option<&str> {
            let at = rest.find(key)? + key.len();
            rest[at..].split_whitespace().next()
        };
        let (max, min) = num("Max/Min:")?.split_once('/')?;
        Some(Self {
            total: num("Total:")?.parse().ok()?,
            max: max.parse().ok()?,
            min: min.parse().ok()?,
            fail: num("Fail:")?.parse().ok()?,
        })
    }
}

#[derive(Debug, Default)]
struct Parsed {
    writes: Option<Stats>,
    reads: Option<Stats>,
    end_of_test: Option<String>,
}

impl Parsed {
    /// The last statistics lines (the final ones, printed at the unload) and the verdict.
    fn of(lines: &[String]) -> Self {
        let mut p = Parsed::default();
        for l in lines {
            if let Some(s) = Stats::parse(l, "Writes") {
                p.writes = Some(s);
            }
            // `Reads :` (the kernel pads the word to line up with `Writes:`).
            if let Some(s) = Stats::parse(l, "Reads") {
                p.reads = Some(s);
            }
            if let Some(i) = l.find("End of test: ") {
                let verdict = l[i + "End of test: ".len()..].split(':').next().unwrap_or("");
                p.end_of_test = Some(verdict.trim().to_string());
            }
        }
        p
    }
}

/// The module saw no lock misbehave and ended in SUCCESS.
fn no_lock_failure(r: &LocktortureResult) -> Check {
    let fails = r.writes.fail + r.reads.map_or(0, |s| s.fail);
    let mut c = Check::equal(
        "no_lock_failure",
        fails,
        0,
        format!(
            "the kernel's Fail flags: {} (writes) + {} (reads), end of test: {}",
            r.writes.fail,
            r.reads.map_or(0, |s| s.fail),
            r.end_of_test.as_deref().unwrap_or("not printed")
        ),
    );
    c.ok &= r.end_of_test.as_deref() == Some("SUCCESS");
    c
}

/// At least one write in the run.
fn work_done(r: &LocktortureResult) -> Check {
    crate::checks::work_done(r.writes.total, "writes", (r.elapsed_s * 1e9) as u64)
}

fn metrics_of(r: &LocktortureResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("writes_per_sec".into(), r.writes.per_sec);
    m.insert("writes_total".into(), r.writes.total as f64);
    if let Some(f) = r.writes.min_over_max {
        m.insert("writes_min_over_max".into(), f);
    }
    if let Some(s) = r.reads {
        m.insert("reads_per_sec".into(), s.per_sec);
        if let Some(f) = s.min_over_max {
            m.insert("reads_min_over_max".into(), f);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines 6.1 prints at the unload of a spin_lock run and of an rwsem run.
    #[test]
    fn the_final_statistics_are_read_from_the_kernels_words() {
        let lines: Vec<String> = [
            "Writes:  Total: 100  Max/Min: 10/5 ???  Fail: 0 ",
            "Writes:  Total: 2380  Max/Min: 1310/1070   Fail: 0 ",
            "spin_lock-torture:--- End of test: SUCCESS: nwriters_stress=4 nreaders_stress=0 stat_interval=0 verbose=0",
        ]
        .map(String::from)
        .to_vec();
        let p = Parsed::of(&lines);
        assert_eq!(
            p.writes,
            Some(Stats {
                total: 2380,
                max: 1310,
                min: 1070,
                fail: 0
            })
        );
        assert_eq!((p.reads, p.end_of_test.as_deref()), (None, Some("SUCCESS")));
        let s = p.writes.unwrap().side(2.0);
        assert_eq!(s.per_sec, 1190.0);
        assert!((s.min_over_max.unwrap() - 1070.0 / 1310.0).abs() < 1e-12);

        let rw: Vec<String> = [
            "Writes:  Total: 7  Max/Min: 4/3   Fail: 1 !!!",
            "Reads :  Total: 90  Max/Min: 60/30   Fail: 0 ",
            "rwsem_lock-torture:--- End of test: FAILURE: nwriters_stress=2",
        ]
        .map(String::from)
        .to_vec();
        let p = Parsed::of(&rw);
        assert_eq!(p.writes.unwrap().fail, 1);
        assert_eq!(p.reads.unwrap().total, 90);
        assert_eq!(p.end_of_test.as_deref(), Some("FAILURE"));
        let r = LocktortureResult {
            torture_type: "rwsem_lock".into(),
            params: BTreeMap::new(),
            elapsed_s: 1.0,
            writes: p.writes.unwrap().side(1.0),
            reads: p.reads.map(|s| s.side(1.0)),
            end_of_test: p.end_of_test,
            log: rw,
            kernel: "6.1".into(),
        };
        assert!(!no_lock_failure(&r).ok && work_done(&r).ok);
        let m = metrics_of(&r);
        assert_eq!((m["writes_per_sec"], m["reads_per_sec"]), (7.0, 90.0));
        // Every metric is declared in the catalog (the catalog's own test cannot run this
        // workload outside a guest with the module), and the option named there.
        let spec = crate::catalog::workload("locktorture").unwrap();
        assert!(m.keys().all(|k| spec.may_report(k)), "{m:?}");
        assert!(
            spec.kernel_options.iter().any(
                |o| KERNEL_OPTION == format!("CONFIG_{}={}", o.name, o.value) && o.module == Some(MODULE)
            )
        );
        assert!(Stats::parse("lock-torture types: spin_lock", "Writes").is_none());
        assert_eq!(unescape("a\\x0ab\\x"), "a\nb\\x");
    }

    #[test]
    fn a_kernel_without_the_module_is_bad_input_naming_the_option() {
        let d = std::env::temp_dir().join(format!("ocrig-lt-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let list = d.join("extra-modules");
        let e = module_files(&list, &d).unwrap_err();
        assert!(e.is::<BadInput>() && e.to_string().contains(KERNEL_OPTION), "{e}");
        std::fs::write(&list, "other a.ko\nlocktorture torture.ko locktorture.ko\n").unwrap();
        let e = module_files(&list, &d).unwrap_err();
        assert!(e.to_string().contains("torture.ko"), "{e}");
        std::fs::write(d.join("torture.ko"), "").unwrap();
        std::fs::write(d.join("locktorture.ko"), "").unwrap();
        assert_eq!(
            module_files(&list, &d).unwrap(),
            [d.join("torture.ko"), d.join("locktorture.ko")]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn arguments_that_cannot_work_are_refused() {
        let a = |long_hold, duration_ms| Args {
            torture_type: "spin_lock".into(),
            writers: Some(4),
            readers: None,
            duration_ms,
            shuffle_interval: 0,
            stutter: 0,
            long_hold,
        };
        assert!(a(Some(3000), 3000).check().unwrap_err().contains("long-hold"));
        assert!(a(Some(100), 3000).check().is_ok() && a(None, 100).check().is_ok());
        let p: BTreeMap<String, String> = a(Some(100), 3000).params().into_iter().collect();
        assert_eq!(
            (
                p["torture_type"].as_str(),
                p["nwriters_stress"].as_str(),
                p["long_hold"].as_str()
            ),
            ("spin_lock", "4", "100")
        );
        assert_eq!(
            (p["stutter"].as_str(), p["shuffle_interval"].as_str()),
            ("0", "0")
        );
        assert!(parse_type("spin lock").is_err() && parse_type("").is_err());
    }
}
