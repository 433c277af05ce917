//! The few `perf_event_open(2)` calls the probe needs, on the raw system call: counting
//! tracepoint events on one CPU each (pid = -1: every task on that CPU), with an optional
//! tracepoint filter. No ring buffer is mapped: the kernel only bumps a counter per event.

use std::ffi::CString;
use std::io;

/// `PERF_TYPE_TRACEPOINT`: `config` is the tracepoint's id from tracefs `events/<sys>/<name>/id`.
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `perf_event_attr.read_format`: `PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING`.
const READ_TIMES: u64 = 1 | 2;
/// `perf_event_attr` bit 0: created disabled, so nothing counts before the window opens.
const ATTR_DISABLED: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
// _IO('$', 0), _IO('$', 1), _IO('$', 3), _IOW('$', 6, char *).
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_RESET: libc::c_ulong = 0x2403;
const IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER0` (64 bytes), which every kernel since
/// 2.6.31 accepts; the fields after it stay at their defaults (zero).
/// (Shared with the sampler in `profile.rs`.)
#[repr(C)]
#[derive(Default)]
pub(super) struct Attr {
    pub(super) kind: u32,
    pub(super) size: u32,
    pub(super) config: u64,
    pub(super) sample_period: u64,
    pub(super) sample_type: u64,
    pub(super) read_format: u64,
    pub(super) flags: u64,
    pub(super) wakeup_events: u32,
    pub(super) bp_type: u32,
    pub(super) config1: u64,
}

/// `perf_event_open(attr, pid = -1, cpu, group = -1, CLOEXEC)`: the event for every task on
/// one CPU (the counters' and the sampler's one way in).
pub(super) fn open(attr: &Attr, cpu: usize) -> io::Result<i32> {
    // SAFETY: attr is a valid perf_event_attr of the size it declares; the kernel only reads it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const Attr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd as i32)
    }
}

/// One counting event on one CPU; closed on drop.
#[derive(Debug)]
pub struct Counter {
    fd: i32,
}

/// A counter's value with the time it was enabled and running (equal for software events,
/// which the kernel never multiplexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub count: u64,
    pub enabled_ns: u64,
    pub running_ns: u64,
}

impl Counter {
    /// Opens a disabled counter of tracepoint `id` on `cpu`, for every task, filtered by
    /// `filter` (ftrace filter syntax, e.g. `flags & 1`) when given.
    pub fn tracepoint(id: u64, cpu: usize, filter: Option<&str>) -> io::Result<Self> {
        let attr = Attr {
            kind: PERF_TYPE_TRACEPOINT,
            size: std::mem::size_of::<Attr>() as u32,
            config: id,
            sample_period: 1,
            read_format: READ_TIMES,
            flags: ATTR_DISABLED,
            ..Attr::default()
        };
        let counter = Self {
            fd: open(&attr, cpu)?,
        };
        if let Some(f) = filter {
            let c = CString::new(f).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: a NUL-terminated string the kernel copies during the call.
            if unsafe { libc::ioctl(counter.fd, IOC_SET_FILTER, c.as_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(counter)
    }

    fn ioctl(&self, request: libc::c_ulong) -> io::Result<()> {
        // SAFETY: an argument-less perf ioctl on a descriptor we own.
        if unsafe { libc::ioctl(self.fd, request, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Zeroes the count and starts counting.
    pub fn start(&self) -> io::Result<()> {
        self.ioctl(IOC_RESET)?;
        self.ioctl(IOC_ENABLE)
    }

    pub fn stop(&self) -> io::Result<()> {
        self.ioctl(IOC_DISABLE)
    }

    pub fn read(&self) -> io::Result<Reading> {
        let mut v = [0u64; 3];
        // SAFETY: reading at most 24 bytes into a 24-byte buffer.
        let n = unsafe { libc::read(self.fd, v.as_mut_ptr().cast(), std::mem::size_of_val(&v)) };
        if n != std::mem::size_of_val(&v) as isize {
            return Err(if n < 0 {
                io::Error::last_os_error()
            } else {
                io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read of {n} bytes"))
            });
        }
        Ok(Reading {
            count: v[0],
            enabled_ns: v[1],
            running_ns: v[2],
        })
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // SAFETY: closing the descriptor we own, once.
        unsafe { libc::close(self.fd) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn attr_has_the_size_of_perf_attr_size_ver0() {
        assert_eq!(std::mem::size_of::<super::Attr>(), 64);
    }
}
