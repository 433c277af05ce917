//! One dbench client: replays loadfile operations against a local file system, as dbench 4.0's
//! `fileio` backend (child.c and fileio.c).
//!
//! Operations follow fileio.c: NTCreateX opens/creates (create disposition and directory flag
//! as dbench maps them), WriteX/ReadX are pwrite/pread of fresh zeroed / uninitialised buffers
//! at the given offsets, Flush is fsync, LockX/UnlockX are fcntl byte-range locks,
//! Qpathinfo/Find/Unlink/Rename/... first "resolve" the name (stat, and on failure a
//! case-insensitive scan of the parent directory, like Samba's name resolution), Qfsinfo is
//! statvfs of the working directory, Sfileinfo is fstat + utime. Unlink, Rmdir and Rename must
//! return the status the loadfile expects, and WriteX must write everything, else the client
//! fails (dbench exits there too).
//!
//! The client talks to the coordinator only through [`Control`] (the phase) and its own
//! [`ClientCounters`], both of which may live in memory shared across `fork`, and returns a
//! [`ClientOutcome`] that crosses a pipe as JSON when the client is a process.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::dbench_loadfile::{Line, Op, OpKind, PathTemplate, parse_line};
use crate::metrics::new_latency_histogram;

pub(crate) const WARMUP: u8 = 0;
// A zero-initialised (shared) Control starts in warm-up.
const _: () = assert!(WARMUP == 0);
pub(crate) const MEASURE: u8 = 1;
pub(crate) const STOP: u8 = 2;

/// The run's phase, written by the coordinator, read by every client before each operation.
#[derive(Debug, Default)]
pub(crate) struct Control {
    pub phase: AtomicU8,
}

/// One client's byte counters (dbench's `child->bytes`), read by the coordinator at phase
/// changes. Each has a single writer (its client), so plain load + store updates them.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct ClientCounters {
    pub bytes: AtomicU64,
    pub written: AtomicU64,
    pub read: AtomicU64,
}

/// One operation kind's count and latencies in the measured phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct OpRecord {
    pub count: u64,
    /// The latency histogram as (value ns, count) pairs, to cross a pipe.
    pub latency_ns: Vec<(u64, u64)>,
}

impl OpRecord {
    pub fn histogram(&self) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
        let mut h = new_latency_histogram();
        for &(v, n) in &self.latency_ns {
            h.record_n(v, n)?;
        }
        Ok(h)
    }
}

/// What a client did, indexed by [`OpKind::ALL`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ClientOutcome {
    pub ops: Vec<OpRecord>,
    pub passes: u64,
    pub open_failures: u64,
    pub short_reads: u64,
    /// The client's own measured window: CLOCK_MONOTONIC when it first saw the measured phase
    /// and when it saw the stop (both 0 when it never saw the measured phase), and its CPU
    /// time in between, ns.
    pub window_start_ns: u64,
    pub window_end_ns: u64,
    pub window_cpu_ns: u64,
}

const FILE_DIRECTORY_FILE: u32 = 0x0001;
const FILE_CREATE: u32 = 2;
const FILE_OVERWRITE: u32 = 4;
const FILE_OVERWRITE_IF: u32 = 5;

struct Open {
    fd: i32,
    name: CString,
}

pub(crate) struct Client {
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
    pub fn new(dir: &Path, id: usize) -> Self {
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

    /// Loops over the loadfile until the coordinator says stop; counts operations and their
    /// latencies only while the phase is MEASURE.
    ///
    /// As dbench's `child_run`, every line is tokenized as it is replayed, on every pass (the
    /// loadfile was validated once before the start), and, when `parent` is given (the client
    /// is a process), each line first checks with `kill(parent, 0)` that the coordinator is
    /// still alive, leaving if it is not: both are client work dbench does per operation.
    pub fn run(
        &mut self,
        text: &str,
        ctl: &Control,
        counters: &ClientCounters,
        parent: Option<libc::pid_t>,
    ) -> anyhow::Result<ClientOutcome> {
        let mut hist: Vec<_> = OpKind::ALL
            .iter()
            .map(|_| (0u64, new_latency_histogram()))
            .collect();
        let mut out = ClientOutcome::default();
        let mut measuring = false;
        let mut cpu0 = 0;
        'outer: loop {
            for (i, raw) in text.lines().enumerate() {
                if let Some(pid) = parent {
                    // SAFETY: signal 0 only checks that the process exists.
                    anyhow::ensure!(unsafe { libc::kill(pid, 0) } == 0, "the coordinator is gone");
                }
                let phase = ctl.phase.load(Ordering::Relaxed);
                if phase == STOP {
                    if measuring {
                        out.window_cpu_ns = crate::clock::thread_cpu_ns().saturating_sub(cpu0);
                        out.window_end_ns = crate::clock::monotonic_ns();
                    }
                    break 'outer;
                }
                let Some(line) = parse_line(i + 1, raw)? else {
                    continue;
                };
                if phase == MEASURE && !measuring {
                    measuring = true;
                    out.window_start_ns = crate::clock::monotonic_ns();
                    cpu0 = crate::clock::thread_cpu_ns();
                }
                self.lineno = line.lineno;
                let t = Instant::now();
                let (written, read) = self.exec(&line, &mut out)?;
                let ns = t.elapsed().as_nanos() as u64;
                if written + read > 0 {
                    let add =
                        |a: &AtomicU64, v: u64| a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
                    add(&counters.bytes, written + read);
                    add(&counters.written, written);
                    add(&counters.read, read);
                }
                if measuring && ctl.phase.load(Ordering::Relaxed) == MEASURE {
                    let slot = &mut hist[line.op.kind() as usize];
                    slot.0 += 1;
                    let _ = slot.1.record(ns.max(1));
                }
            }
            out.passes += 1;
        }
        out.ops = hist
            .into_iter()
            .map(|(count, h)| OpRecord {
                count,
                latency_ns: h
                    .iter_recorded()
                    .map(|v| (v.value_iterated_to(), v.count_at_value()))
                    .collect(),
            })
            .collect();
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
    pub fn cleanup(&mut self) {
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
