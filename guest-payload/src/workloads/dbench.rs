//! `dbench`: N clients replay a dbench loadfile (client.txt format) against a local file
//! system, as dbench 4.0's `fileio` backend does.
//!
//! Each client works in `<dir>/clients/clientN` (N from 0; every `client1` in the loadfile's
//! paths becomes the client's name) and loops over the loadfile until time is up. Operations
//! follow dbench's fileio.c: NTCreateX opens/creates (create disposition and directory flag as
//! dbench maps them), WriteX/ReadX are pwrite/pread of zeroed buffers at the given offsets,
//! Flush is fsync, LockX/UnlockX are fcntl byte-range locks, Qpathinfo/Find/Unlink/Rename/...
//! first "resolve" the name (stat, and on failure a case-insensitive scan of the parent
//! directory, like Samba's name resolution), Qfsinfo is statvfs of the working directory,
//! Sfileinfo is fstat + utime. Unlink, Rmdir and Rename must return the status the loadfile
//! expects, and WriteX must write everything, else the run fails (dbench exits there too).
//!
//! Throughput is counted as dbench does: bytes of WriteX + ReadX (their `size` arguments) done
//! after the warm-up, divided by the measured time, in MB/s with MB = 10^6 bytes
//! (`mb_per_sec`, higher is better). Per-operation counts and latencies are for the measured
//! phase only, as dbench resets them when warm-up ends.
//!
//! Difference from dbench, on purpose: clients are threads of one process (dbench forks one
//! process per client), so they share one fd table.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args as ClapArgs;
use serde::{Deserialize, Serialize};

use super::dbench_loadfile::{self as lf, Line, Op, OpKind, PathTemplate};
use crate::env::Env;
use crate::metrics::{Fairness, Latency, new_latency_histogram};
use crate::report::Report;

#[derive(Debug, Clone, ClapArgs, Serialize, Deserialize)]
pub struct Args {
    /// Working directory (must exist); clients work in DIR/clients/clientN. In a guest, the
    /// scratch disk is mounted at /scratch.
    #[arg(long, short = 'D', default_value = "/scratch", value_parser = parse_path)]
    pub dir: PathBuf,
    /// Loadfile in dbench's client.txt format (default: ocrig's small built-in loadfile).
    #[arg(long, short = 'c', value_parser = parse_path)]
    pub loadfile: Option<PathBuf>,
    /// Number of clients.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: u32,
    /// Measured time in seconds, after the warm-up (dbench -t).
    #[arg(long, short = 't', default_value_t = 60.0, value_parser = super::ebizzy::parse_seconds)]
    pub seconds: f64,
    /// Warm-up seconds before measuring (default: seconds / 5, as dbench 4).
    #[arg(long, value_parser = parse_warmup)]
    pub warmup: Option<f64>,
}

/// Path arguments are only checked for being non-empty here; their existence is checked when
/// the workload runs (see [`super::BadInput`]).
fn parse_path(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() {
        return Err("an empty path".into());
    }
    Ok(PathBuf::from(s))
}

fn parse_warmup(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(v.is_finite() && (0.0..=86_400.0).contains(&v)) {
        return Err(format!("{s} is not a warm-up in [0, 86400] seconds"));
    }
    Ok(v)
}

/// One operation kind's numbers in the measured phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OpStats {
    pub count: u64,
    pub latency: Latency,
}

/// The `dbench` workload's fields in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DbenchResult {
    pub dir: String,
    /// "builtin" or the loadfile path.
    pub loadfile: String,
    pub loadfile_ops: u64,
    pub clients: u32,
    pub seconds: f64,
    pub warmup_s: f64,
    /// Measured seconds (from the end of warm-up until the stop signal).
    pub measured_s: f64,
    /// WriteX + ReadX bytes in the measured phase.
    pub bytes: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub mb_per_sec: f64,
    /// Operations started and finished in the measured phase (= sum of `ops` counts).
    pub ops_total: u64,
    pub ops_per_sec: f64,
    pub ops: BTreeMap<String, OpStats>,
    pub ops_per_client: Vec<u64>,
    pub bytes_per_client: Vec<u64>,
    pub fairness: Fairness,
    /// Complete passes over the loadfile, all clients, whole run.
    pub loadfile_passes: u64,
    /// Slowest single operation in the measured phase, ms (dbench's max_latency).
    pub max_latency_ms: f64,
    /// NTCreateX that failed although the loadfile expected success (dbench prints these).
    pub open_failures: u64,
    /// ReadX that returned fewer bytes than the loadfile recorded (dbench prints these).
    pub short_reads: u64,
}

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

#[repr(align(128))]
struct ClientCounters {
    bytes: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
}

struct Shared {
    phase: AtomicU8,
    counters: Vec<ClientCounters>,
}

struct ClientOutcome {
    ops: Vec<(u64, hdrhistogram::Histogram<u64>)>,
    passes: u64,
    open_failures: u64,
    short_reads: u64,
}

pub fn run(args: &Args) -> anyhow::Result<Report> {
    super::require_dir("directory", &args.dir)?;
    if let Some(p) = &args.loadfile
        && !p.is_file()
    {
        return Err(super::BadInput(format!("loadfile '{}' is not a readable file", p.display())).into());
    }
    let (text, name) = match &args.loadfile {
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("reading loadfile {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (lf::DEFAULT_LOADFILE.to_string(), "builtin".to_string()),
    };
    let lines = Arc::new(lf::parse(&text).with_context(|| format!("parsing loadfile {name}"))?);
    let warmup = args.warmup.unwrap_or(args.seconds / 5.0);
    let shared = Arc::new(Shared {
        phase: AtomicU8::new(WARMUP),
        counters: (0..args.clients)
            .map(|_| ClientCounters {
                bytes: AtomicU64::new(0),
                written: AtomicU64::new(0),
                read: AtomicU64::new(0),
            })
            .collect(),
    });
    let barrier = Arc::new(Barrier::new(args.clients as usize + 1));
    let workers: Vec<_> = (0..args.clients as usize)
        .map(|id| {
            let (lines, shared, barrier) = (Arc::clone(&lines), Arc::clone(&shared), Arc::clone(&barrier));
            let dir = args.dir.clone();
            std::thread::Builder::new()
                .name(format!("dbench-client{id}"))
                .spawn(move || {
                    let mut c = Client::new(&dir, id);
                    barrier.wait();
                    let out = c.run(&lines, &shared);
                    c.cleanup();
                    out
                })
        })
        .collect::<Result<_, _>>()?;

    barrier.wait();
    let sleep = |s: f64| std::thread::sleep(Duration::from_secs_f64(s));
    sleep(warmup);
    let snap = |sel: fn(&ClientCounters) -> &AtomicU64| -> Vec<u64> {
        shared
            .counters
            .iter()
            .map(|c| sel(c).load(Ordering::Relaxed))
            .collect()
    };
    let (b0, w0, r0) = (snap(|c| &c.bytes), snap(|c| &c.written), snap(|c| &c.read));
    shared.phase.store(MEASURE, Ordering::Relaxed);
    let t0 = Instant::now();
    sleep(args.seconds);
    let (b1, w1, r1) = (snap(|c| &c.bytes), snap(|c| &c.written), snap(|c| &c.read));
    let measured = t0.elapsed();
    shared.phase.store(STOP, Ordering::Relaxed);
    let outcomes: Vec<ClientOutcome> = workers
        .into_iter()
        .map(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("a dbench client panicked"))?
        })
        .collect::<anyhow::Result<_>>()?;

    let diff = |a: &[u64], b: &[u64]| -> Vec<u64> { a.iter().zip(b).map(|(x, y)| y - x).collect() };
    let bytes_per_client = diff(&b0, &b1);
    let bytes: u64 = bytes_per_client.iter().sum();
    let mut ops = BTreeMap::new();
    let mut ops_total = 0;
    let mut max_ns = 0u64;
    for (k, kind) in OpKind::ALL.iter().enumerate() {
        let mut h = new_latency_histogram();
        let mut count = 0;
        for o in &outcomes {
            count += o.ops[k].0;
            h.add(&o.ops[k].1)?;
        }
        if count > 0 {
            max_ns = max_ns.max(h.max());
            ops_total += count;
            ops.insert(
                kind.name().to_string(),
                OpStats {
                    count,
                    latency: Latency::of(&h),
                },
            );
        }
    }
    let ops_per_client: Vec<u64> = outcomes.iter().map(|o| o.ops.iter().map(|x| x.0).sum()).collect();
    let secs = measured.as_secs_f64();
    let result = DbenchResult {
        dir: args.dir.display().to_string(),
        loadfile: name,
        loadfile_ops: lines.len() as u64,
        clients: args.clients,
        seconds: args.seconds,
        warmup_s: warmup,
        measured_s: secs,
        bytes,
        bytes_written: diff(&w0, &w1).iter().sum(),
        bytes_read: diff(&r0, &r1).iter().sum(),
        mb_per_sec: 1e-6 * bytes as f64 / secs,
        ops_total,
        ops_per_sec: ops_total as f64 / secs,
        ops,
        fairness: Fairness::of(&ops_per_client),
        ops_per_client,
        bytes_per_client,
        loadfile_passes: outcomes.iter().map(|o| o.passes).sum(),
        max_latency_ms: max_ns as f64 / 1e6,
        open_failures: outcomes.iter().map(|o| o.open_failures).sum(),
        short_reads: outcomes.iter().map(|o| o.short_reads).sum(),
    };
    Report::new(
        "dbench",
        measured.as_nanos() as u64,
        Env::read(),
        metrics_of(&result),
        &result,
    )
}

fn metrics_of(r: &DbenchResult) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert("mb_per_sec".into(), r.mb_per_sec);
    m.insert("ops_per_sec".into(), r.ops_per_sec);
    m.insert("max_latency_ms".into(), r.max_latency_ms);
    m.insert("jain".into(), r.fairness.jain);
    for (name, key) in [
        ("WriteX", "writex"),
        ("ReadX", "readx"),
        ("NTCreateX", "ntcreatex"),
        ("Flush", "flush"),
    ] {
        if let Some(s) = r.ops.get(name) {
            m.insert(format!("{key}_p99_ms"), s.latency.p99_ns as f64 / 1e6);
        }
    }
    m
}

const FILE_DIRECTORY_FILE: u32 = 0x0001;
const FILE_CREATE: u32 = 2;
const FILE_OVERWRITE: u32 = 4;
const FILE_OVERWRITE_IF: u32 = 5;

struct Open {
    fd: i32,
    name: CString,
}

struct Client {
    id: usize,
    base: Vec<u8>,
    cname: String,
    dir_c: CString,
    files: HashMap<i64, Open>,
    lineno: usize,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Client {
    fn new(dir: &Path, id: usize) -> Self {
        let mut base = dir.as_os_str().as_bytes().to_vec();
        if !base.ends_with(b"/") {
            base.push(b'/');
        }
        Self {
            id,
            dir_c: CString::new(dir.as_os_str().as_bytes()).unwrap_or_default(),
            base,
            cname: format!("client{id}"),
            files: HashMap::new(),
            lineno: 0,
        }
    }

    fn path(&self, t: &PathTemplate) -> CString {
        let mut v = self.base.clone();
        t.render_into(&self.cname, &mut v);
        // Loadfile text has no NULs (it is UTF-8 split on whitespace); fall back to empty.
        CString::new(v).unwrap_or_default()
    }

    fn fd(&self, handle: i64) -> anyhow::Result<i32> {
        self.files.get(&handle).map(|o| o.fd).ok_or_else(|| {
            anyhow::anyhow!(
                "client {} line {}: handle {handle} was not found",
                self.id,
                self.lineno
            )
        })
    }

    fn run(&mut self, lines: &[Line], shared: &Shared) -> anyhow::Result<ClientOutcome> {
        let mut out = ClientOutcome {
            ops: OpKind::ALL.iter().map(|_| (0, new_latency_histogram())).collect(),
            passes: 0,
            open_failures: 0,
            short_reads: 0,
        };
        let counters = &shared.counters[self.id];
        let mut measuring = false;
        'outer: loop {
            for line in lines {
                let phase = shared.phase.load(Ordering::Relaxed);
                if phase == STOP {
                    break 'outer;
                }
                if phase == MEASURE && !measuring {
                    measuring = true;
                }
                self.lineno = line.lineno;
                let t = Instant::now();
                let (written, read) = self.exec(line, &mut out)?;
                let ns = t.elapsed().as_nanos() as u64;
                if written + read > 0 {
                    // Single writer per counter: plain load + store is enough.
                    let add =
                        |a: &AtomicU64, v: u64| a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
                    add(&counters.bytes, written + read);
                    add(&counters.written, written);
                    add(&counters.read, read);
                }
                if measuring && shared.phase.load(Ordering::Relaxed) == MEASURE {
                    let slot = &mut out.ops[line.op.kind() as usize];
                    slot.0 += 1;
                    let _ = slot.1.record(ns.max(1));
                }
            }
            out.passes += 1;
        }
        Ok(out)
    }

    /// dbench's resolve_name: stat, else scan the parent directory case-insensitively.
    fn resolve(&self, name: &CString) {
        // SAFETY: valid C string and a zeroed stat buffer.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::stat(name.as_ptr(), &mut st) == 0 {
                return;
            }
        }
        let bytes = name.as_bytes();
        let Some(slash) = bytes.iter().rposition(|&b| b == b'/') else {
            return;
        };
        let (dname, fname) = (&bytes[..slash], &bytes[slash + 1..]);
        let Ok(dname) = CString::new(dname) else {
            return;
        };
        // SAFETY: opendir/readdir/closedir on a valid C string; entries are read before the
        // next readdir call.
        unsafe {
            let dir = libc::opendir(dname.as_ptr());
            if dir.is_null() {
                return;
            }
            loop {
                let d = libc::readdir(dir);
                if d.is_null() {
                    break;
                }
                let n = std::ffi::CStr::from_ptr((*d).d_name.as_ptr()).to_bytes();
                if n.eq_ignore_ascii_case(fname) {
                    break;
                }
            }
            libc::closedir(dir);
        }
    }

    fn check_status(&self, what: &str, name: &CString, rc: i32, line: &Line) -> anyhow::Result<()> {
        let expected = if line.expect_ok { 0 } else { -1 };
        if rc != expected {
            anyhow::bail!(
                "client {} line {}: {what} {} returned {rc} ({}), the loadfile expects {}",
                self.id,
                line.lineno,
                name.to_string_lossy(),
                std::io::Error::from_raw_os_error(errno()),
                line.status
            );
        }
        Ok(())
    }

    /// Executes one operation; returns (bytes written, bytes read) as dbench counts them.
    fn exec(&mut self, line: &Line, out: &mut ClientOutcome) -> anyhow::Result<(u64, u64)> {
        // SAFETY (whole function): every libc call gets valid C strings, valid fds from our
        // table, and buffers at least as long as the lengths passed.
        unsafe {
            match &line.op {
                Op::NtCreateX {
                    path,
                    create_options,
                    disposition,
                    handle,
                } => {
                    let name = self.path(path);
                    self.resolve(&name);
                    let mut flags = libc::O_RDWR;
                    if *disposition == FILE_CREATE {
                        flags |= libc::O_CREAT;
                    }
                    if *disposition == FILE_OVERWRITE || *disposition == FILE_OVERWRITE_IF {
                        flags |= libc::O_CREAT | libc::O_TRUNC;
                    }
                    if create_options & FILE_DIRECTORY_FILE != 0 {
                        libc::mkdir(name.as_ptr(), 0o700);
                        flags = libc::O_RDONLY | libc::O_DIRECTORY;
                    }
                    let mut fd = libc::open(name.as_ptr(), flags | libc::O_CLOEXEC, 0o600);
                    if fd == -1 && errno() == libc::EISDIR {
                        fd = libc::open(
                            name.as_ptr(),
                            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                            0o600,
                        );
                    }
                    if fd == -1 {
                        if line.expect_ok {
                            out.open_failures += 1;
                        }
                        return Ok((0, 0));
                    }
                    if !line.expect_ok {
                        libc::close(fd);
                        return Ok((0, 0));
                    }
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::fstat(fd, &mut st);
                    if let Some(old) = self.files.insert(*handle, Open { fd, name }) {
                        libc::close(old.fd);
                    }
                }
                Op::Close { handle } => {
                    let fd = self.fd(*handle)?;
                    libc::close(fd);
                    self.files.remove(handle);
                }
                Op::Rename { from, to } => {
                    let (a, b) = (self.path(from), self.path(to));
                    self.resolve(&a);
                    self.resolve(&b);
                    let rc = libc::rename(a.as_ptr(), b.as_ptr());
                    self.check_status("rename", &a, rc, line)?;
                }
                Op::Unlink { path } => {
                    let name = self.path(path);
                    self.resolve(&name);
                    let rc = libc::unlink(name.as_ptr());
                    self.check_status("unlink", &name, rc, line)?;
                }
                Op::Deltree { path } => {
                    let name = self.path(path);
                    deltree(&name);
                }
                Op::Rmdir { path } => {
                    let name = self.path(path);
                    self.resolve(&name);
                    let rc = libc::rmdir(name.as_ptr());
                    self.check_status("rmdir", &name, rc, line)?;
                }
                Op::Mkdir { path } => {
                    let name = self.path(path);
                    self.resolve(&name);
                    libc::mkdir(name.as_ptr(), 0o777);
                }
                Op::Qpathinfo { path } => {
                    let name = self.path(path);
                    self.resolve(&name);
                }
                Op::Qfileinfo { handle } => {
                    let fd = self.fd(*handle)?;
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::fstat(fd, &mut st);
                }
                Op::Qfsinfo => {
                    let mut st: libc::statvfs = std::mem::zeroed();
                    libc::statvfs(self.dir_c.as_ptr(), &mut st);
                }
                Op::Sfileinfo { handle } => {
                    let fd = self.fd(*handle)?;
                    let mut st: libc::stat = std::mem::zeroed();
                    libc::fstat(fd, &mut st);
                    let tm = libc::utimbuf {
                        actime: st.st_atime - 10,
                        modtime: st.st_mtime - 12,
                    };
                    let name = &self.files[handle].name;
                    libc::utime(name.as_ptr(), &tm);
                }
                Op::Find { path, max_count } => {
                    let name = self.path(path);
                    self.resolve(&name);
                    if path.has_wildcard() {
                        let bytes = name.as_bytes();
                        if let Some(slash) = bytes.iter().rposition(|&b| b == b'/')
                            && let Ok(d) = CString::new(&bytes[..slash])
                        {
                            let dir = libc::opendir(d.as_ptr());
                            if !dir.is_null() {
                                let mut left = *max_count;
                                while left > 0 && !libc::readdir(dir).is_null() {
                                    left -= 1;
                                }
                                libc::closedir(dir);
                            }
                        }
                    }
                }
                Op::WriteX {
                    handle,
                    offset,
                    size,
                    ret_size,
                } => {
                    let fd = self.fd(*handle)?;
                    let size = *size as usize;
                    // A fresh zeroed buffer per write, as dbench's calloc: the allocator and
                    // page-fault traffic is part of the client's work.
                    let zero = vec![0u8; size];
                    let r = libc::pwrite(fd, zero.as_ptr().cast(), size, *offset);
                    if r < 0 {
                        anyhow::bail!(
                            "client {} line {}: write failed on handle {handle}: {}",
                            self.id,
                            line.lineno,
                            std::io::Error::last_os_error()
                        );
                    }
                    if r as i64 != *ret_size {
                        anyhow::bail!(
                            "client {} line {}: wrote {r} bytes, expected {ret_size} on handle {handle}",
                            self.id,
                            line.lineno
                        );
                    }
                    return Ok((size as u64, 0));
                }
                Op::ReadX {
                    handle,
                    offset,
                    size,
                    ret_size,
                } => {
                    let fd = self.fd(*handle)?;
                    let size = *size as usize;
                    // A fresh (uninitialised) buffer per read, as dbench's malloc.
                    let mut buf = Vec::<u8>::with_capacity(size);
                    let r = libc::pread(fd, buf.as_mut_ptr().cast(), size, *offset);
                    if r as i64 != *ret_size {
                        out.short_reads += 1;
                    }
                    return Ok((0, size as u64));
                }
                Op::LockX { handle, offset, size } | Op::UnlockX { handle, offset, size } => {
                    let fd = self.fd(*handle)?;
                    let mut fl: libc::flock = std::mem::zeroed();
                    fl.l_type = if matches!(line.op, Op::LockX { .. }) {
                        libc::F_WRLCK
                    } else {
                        libc::F_UNLCK
                    } as _;
                    fl.l_whence = libc::SEEK_SET as _;
                    fl.l_start = *offset;
                    fl.l_len = *size;
                    libc::fcntl(fd, libc::F_SETLKW, &fl);
                }
                Op::Flush { handle } => {
                    let fd = self.fd(*handle)?;
                    libc::fsync(fd);
                }
                Op::Sleep { usec } => {
                    std::thread::sleep(Duration::from_micros((*usec).max(0) as u64));
                }
            }
        }
        Ok((0, 0))
    }

    /// dbench's nb_cleanup: remove this client's tree, then `clients` if it is empty.
    fn cleanup(&mut self) {
        for (_, o) in self.files.drain() {
            // SAFETY: closing our own fds.
            unsafe { libc::close(o.fd) };
        }
        let clients = Path::new(std::ffi::OsStr::from_bytes(&self.base)).join("clients");
        let _ = std::fs::remove_dir_all(clients.join(&self.cname));
        let _ = std::fs::remove_dir(&clients);
    }
}

/// dbench's nb_deltree: unlink every file below `dname`, recursively (directories stay).
fn deltree(dname: &CString) {
    let Ok(rd) = std::fs::read_dir(std::ffi::OsStr::from_bytes(dname.as_bytes())) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => {
                if let Ok(c) = CString::new(p.as_os_str().as_bytes()) {
                    deltree(&c);
                }
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&p);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ocrig-dbench-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn per_op_counts_sum_and_bytes_add_up() {
        let dir = tmpdir("run");
        let a = Args {
            dir: dir.clone(),
            loadfile: None,
            clients: 2,
            seconds: 0.4,
            warmup: Some(0.1),
        };
        let report = run(&a).unwrap();
        let r: DbenchResult = report.detail_as().unwrap();
        assert_eq!(r.ops.values().map(|s| s.count).sum::<u64>(), r.ops_total);
        assert_eq!(r.ops_per_client.iter().sum::<u64>(), r.ops_total);
        assert_eq!(r.bytes_per_client.iter().sum::<u64>(), r.bytes);
        assert_eq!(r.bytes_written + r.bytes_read, r.bytes);
        assert!(r.ops_total > 0 && r.bytes > 0, "{r:?}");
        assert!(r.loadfile_passes > 0);
        assert_eq!(r.open_failures, 0);
        assert!((report.metrics["mb_per_sec"] - r.bytes as f64 / 1e6 / r.measured_s).abs() < 1e-6);
        // Cleanup removed the clients' trees.
        assert!(!dir.join("clients").exists());
        let back: Report = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
        assert_eq!(back, report);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replays_the_real_client_txt_prefix() {
        let Ok(text) = std::fs::read_to_string("/usr/share/dbench/client.txt") else {
            return;
        };
        let dir = tmpdir("real");
        let head: String = text.lines().take(3000).map(|l| format!("{l}\n")).collect();
        let lf_path = dir.join("head.txt");
        std::fs::write(&lf_path, head).unwrap();
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let a = Args {
            dir: work,
            loadfile: Some(lf_path),
            clients: 1,
            seconds: 0.3,
            warmup: Some(0.0),
        };
        let r: DbenchResult = run(&a).unwrap().detail_as().unwrap();
        assert!(r.ops_total > 0);
        assert!(r.ops.contains_key("NTCreateX") && r.ops.contains_key("WriteX"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rejects_missing_directory_and_loadfile() {
        let mut a = Args {
            dir: "/nonexistent/ocrig".into(),
            loadfile: None,
            clients: 1,
            seconds: 0.1,
            warmup: Some(0.0),
        };
        let e = run(&a).unwrap_err();
        assert!(
            e.is::<super::super::BadInput>() && e.to_string().contains("not usable"),
            "{e}"
        );
        a.dir = "/etc/hostname".into();
        assert!(run(&a).unwrap_err().to_string().contains("not a directory"));
        a.dir = std::env::temp_dir();
        a.loadfile = Some("/nonexistent.txt".into());
        assert!(run(&a).unwrap_err().is::<super::super::BadInput>());
        assert!(parse_path("").is_err());
        assert!(parse_warmup("-1").is_err());
    }
}
