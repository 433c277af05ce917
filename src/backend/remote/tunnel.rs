//! A local listener per guest whose connections each get an SSH session and a `direct-tcpip`
//! channel to the guest's SSH forward on the host's 127.0.0.1; and how long setting them up took.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::*;

/// Forwards connections to a local port through SSH to `127.0.0.1:<port>` on the host.
pub struct Tunnel {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Tunnel {
    pub fn open(remote: &RemoteUri, target_port: u16, name: &str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the tunnel's local port")?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (r, st, name) = (remote.clone(), Arc::clone(&stop), name.to_string());
        std::thread::Builder::new()
            .name(format!("tunnel-{target_port}"))
            .spawn(move || {
                for conn in listener.incoming() {
                    if st.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (r, st, name) = (r.clone(), Arc::clone(&st), name.clone());
                    let _ = std::thread::Builder::new()
                        .name(format!("tunnel-{target_port}-c"))
                        .spawn(move || {
                            if let Err(e) = forward(conn, &r, target_port, &st, &name) {
                                tracing::debug!("{name}: tunnel connection ended: {e:#}");
                            }
                        });
                }
            })?;
        Ok(Self { local, stop })
    }

    /// The local end: connect here to reach the guest.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.local, Duration::from_millis(200));
    }
}

/// One forwarded connection: a fresh session, a direct-tcpip channel, then bytes both ways.
pub(super) fn forward(
    mut local: TcpStream,
    r: &RemoteUri,
    port: u16,
    stop: &AtomicBool,
    name: &str,
) -> anyhow::Result<()> {
    if stop.load(Ordering::Relaxed) {
        return Ok(());
    }
    let t0 = Instant::now();
    let s = open_session(r, Duration::from_secs(10))?;
    s.set_timeout(10_000);
    let mut ch = s
        .channel_direct_tcpip("127.0.0.1", port, None)
        .with_context(|| format!("opening a channel to 127.0.0.1:{port} on {}", r.label()))?;
    tracing::debug!(
        "{name}: tunnel to {}'s 127.0.0.1:{port} set up in {:.1} ms",
        r.label(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    crate::backend::remote::TUNNEL_SETUPS.record(t0.elapsed());
    s.set_blocking(false);
    local.set_nonblocking(true)?;
    let _ = local.set_nodelay(true);
    let sock_fd = s.as_raw_fd();
    let local_fd = local.as_raw_fd();
    let mut up: Vec<u8> = Vec::new(); // local → channel
    let mut down: Vec<u8> = Vec::new(); // channel → local
    let mut buf = vec![0u8; 64 * 1024];
    let (mut local_eof, mut remote_eof, mut sent_eof) = (false, false, false);
    while !stop.load(Ordering::Relaxed) {
        let mut progress = false;
        if up.is_empty() && !local_eof {
            match local.read(&mut buf) {
                Ok(0) => local_eof = true,
                Ok(n) => {
                    up.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => local_eof = true,
            }
        }
        if !up.is_empty() {
            match ch.write(&up) {
                Ok(n) => {
                    up.drain(..n);
                    progress |= n > 0;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        if local_eof && up.is_empty() && !sent_eof {
            match ch.send_eof() {
                Ok(()) => sent_eof = true,
                Err(e) if e.code() == ssh2::ErrorCode::Session(-37) => {}
                Err(_) => sent_eof = true,
            }
        }
        if down.is_empty() && !remote_eof {
            match ch.read(&mut buf) {
                Ok(0) if ch.eof() => remote_eof = true,
                Ok(0) => {}
                Ok(n) => {
                    down.extend_from_slice(&buf[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => remote_eof = true,
            }
        }
        if !down.is_empty() {
            match local.write(&down) {
                Ok(n) => {
                    down.drain(..n);
                    progress |= n > 0;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
        if remote_eof && down.is_empty() {
            break;
        }
        if local_eof && sent_eof && remote_eof {
            break;
        }
        if !progress {
            let mut fds = [
                libc::pollfd {
                    fd: local_fd,
                    events: if up.is_empty() && !local_eof {
                        libc::POLLIN
                    } else {
                        0
                    } | if down.is_empty() { 0 } else { libc::POLLOUT },
                    revents: 0,
                },
                libc::pollfd {
                    fd: sock_fd,
                    events: libc::POLLIN | if up.is_empty() { 0 } else { libc::POLLOUT },
                    revents: 0,
                },
            ];
            // SAFETY: poll reads and writes the two pollfd structs it is given.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 10) };
        }
    }
    let _ = local.shutdown(std::net::Shutdown::Both);
    s.set_blocking(true);
    let _ = ch.close();
    Ok(())
}

/// Counts tunnel set-ups and their time, for the note on the remote path's cost.
pub struct SetupStats(pub(super) Mutex<(u64, f64)>);

impl SetupStats {
    pub(super) fn record(&self, d: Duration) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        g.1 += d.as_secs_f64();
    }
    /// (count, total seconds).
    pub fn get(&self) -> (u64, f64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub static TUNNEL_SETUPS: SetupStats = SetupStats(Mutex::new((0, 0.0)));
