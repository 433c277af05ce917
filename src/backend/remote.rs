//! A libvirt host reached over SSH (`qemu+ssh://` or `qemu+libssh2://`): everything ocrig needs
//! from it besides libvirt's own API goes through SSH connections that ocrig opens itself with
//! `ssh2`, using the URI's `keyfile` and pinning the host key from the URI's `known_hosts`
//! (default `~/.ssh/known_hosts`; a host that is missing or presents another key is refused).
//!
//! - [`HostSsh`]: commands on the host; it is also the host's [`HostFs`] (its /proc and /sys,
//!   read in one command per batch of files), so telemetry, vCPU thread names and the
//!   accelerator evidence describe the host the guests run on.
//! - [`Tunnel`]: a listener on this machine's 127.0.0.1 per guest; each connection to it gets
//!   its own SSH session to the host and a `direct-tcpip` channel to the guest's SSH forward,
//!   which stays bound to the host's 127.0.0.1.
//! - [`ConsoleMirror`]: the guest's serial console file on the host, copied as it grows
//!   (`tail -F` over SSH) to the local path the sweep reads.
//! - [`RemoteCpuClaim`]: the host's CPU locks (the same `flock` files a local sweep takes on
//!   that host), held by a process on it for as long as our SSH channel stays open.
//! - [`upload_volume`]: kernel, initrd and firmware reach the host as libvirt storage volumes
//!   (`virStorageVolUpload`) named by content hash, so nothing already there is sent again.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use ssh2::{CheckResult, KnownHostFileKind, Session};

use crate::hostfs::{FileOp, HostFs, HostWrite};

/// The oldest libvirt a remote host may run: Debian 12's (9.0.0). Overridable for tests of the
/// refusal (`OCRIG_MIN_LIBVIRT=major.minor.micro`).
pub const MIN_LIBVIRT: (u32, u32, u32) = (9, 0, 0);

/// Where a remote host keeps the console logs of ocrig's guests.
const REMOTE_WORKROOT: &str = "/var/tmp/ocrig";
/// The storage pool that holds uploaded kernels, initrds and firmware.
pub const POOL: &str = "ocrig";
const POOL_PATH: &str = "/var/lib/libvirt/images/ocrig";

/// A remote libvirt URI, taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteUri {
    pub uri: String,
    /// `ssh`, `libssh2` or `libssh`.
    pub transport: String,
    pub user: String,
    pub host: String,
    pub port: u16,
    pub keyfile: PathBuf,
    pub known_hosts: PathBuf,
}

impl RemoteUri {
    /// `root@hostA:22`, for messages and the journal.
    pub fn label(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..(i + 3).min(s.len())], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `Ok(None)` for a local URI (`qemu:///system`, `qemu+unix:///system`); the parts of a remote
/// one; an error for a remote URI ocrig cannot reach over SSH.
pub fn parse(uri: &str) -> Result<Option<RemoteUri>, String> {
    let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
        format!("'{uri}' is not a libvirt URI (driver[+transport]://[user@][host][:port]/path)")
    })?;
    let (authority, path_query) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (driver, transport) = match scheme.split_once('+') {
        Some((d, t)) => (d, Some(t)),
        None => (scheme, None),
    };
    if driver != "qemu" {
        return Err(format!(
            "'{uri}': ocrig drives QEMU guests; the driver must be qemu, not {driver}"
        ));
    }
    if authority.is_empty() || transport == Some("unix") {
        return Ok(None);
    }
    let transport = match transport {
        Some(t @ ("ssh" | "libssh2" | "libssh")) => t.to_string(),
        Some(t) => {
            return Err(format!(
                "'{uri}': transport {t} is not supported for a remote host; ocrig reaches remote hosts over SSH \
                 (qemu+ssh:// or qemu+libssh2://)"
            ));
        }
        None => {
            return Err(format!(
                "'{uri}' names host '{authority}' without a transport (libvirt would use TLS); use qemu+ssh:// or \
                 qemu+libssh2://"
            ));
        }
    };
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (u.to_string(), h),
        None => (std::env::var("USER").unwrap_or_else(|_| "root".into()), authority),
    };
    let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| format!("'{uri}': unclosed [ in the host"))?;
        (h.to_string(), p.strip_prefix(':').unwrap_or(""))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p),
            None => (hostport.to_string(), ""),
        }
    };
    let port: u16 = if port.is_empty() {
        22
    } else {
        port.parse()
            .map_err(|_| format!("'{uri}': port '{port}' is not a number"))?
    };
    if host.is_empty() {
        return Err(format!("'{uri}': no host name"));
    }
    let mut keyfile = None;
    let mut known_hosts = None;
    if let Some((_, q)) = path_query.split_once('?') {
        for kv in q.split('&') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match k {
                "keyfile" => keyfile = Some(PathBuf::from(percent_decode(v))),
                "known_hosts" => known_hosts = Some(PathBuf::from(percent_decode(v))),
                "no_verify" if v == "1" => {
                    return Err(format!(
                        "'{uri}': no_verify=1 turns off host-key checking; ocrig pins the remote host's key \
                         (known_hosts=FILE)"
                    ));
                }
                _ => {}
            }
        }
    }
    let ssh_dir = home().join(".ssh");
    let keyfile = keyfile.unwrap_or_else(|| {
        ["id_ed25519", "id_ecdsa", "id_rsa"]
            .iter()
            .map(|k| ssh_dir.join(k))
            .find(|p| p.exists())
            .unwrap_or_else(|| ssh_dir.join("id_ed25519"))
    });
    Ok(Some(RemoteUri {
        uri: uri.to_string(),
        transport,
        user,
        host,
        port,
        keyfile,
        known_hosts: known_hosts.unwrap_or_else(|| ssh_dir.join("known_hosts")),
    }))
}

/// An authenticated SSH session to the host whose key matched the pinned one.
pub fn open_session(r: &RemoteUri, timeout: Duration) -> anyhow::Result<Session> {
    let label = r.label();
    let addrs: Vec<SocketAddr> = (r.host.as_str(), r.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {}", r.host))?
        .collect();
    let mut last = None;
    let mut tcp = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(t) => {
                tcp = Some(t);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = match tcp {
        Some(t) => t,
        None => anyhow::bail!(
            "cannot reach {label} over SSH: {}",
            last.map_or("no address".into(), |e| e.to_string())
        ),
    };
    let _ = tcp.set_nodelay(true);
    let mut s = Session::new()?;
    s.set_tcp_stream(tcp);
    s.set_timeout(timeout.as_millis() as u32);
    s.handshake()
        .with_context(|| format!("SSH handshake with {label}"))?;
    check_host_key(&s, r)?;
    s.userauth_pubkey_file(&r.user, None, &r.keyfile, None)
        .with_context(|| {
            format!(
                "public-key login as {} at {label} with {}",
                r.user,
                r.keyfile.display()
            )
        })?;
    anyhow::ensure!(s.authenticated(), "authentication at {label} did not complete");
    s.set_timeout(0);
    Ok(s)
}

fn check_host_key(s: &Session, r: &RemoteUri) -> anyhow::Result<()> {
    let label = r.label();
    let (key, kind) = s
        .host_key()
        .with_context(|| format!("{label} presented no host key"))?;
    let fp = s
        .host_key_hash(ssh2::HashType::Sha256)
        .map(|h| {
            use base64::Engine;
            format!(
                "SHA256:{}",
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(h)
            )
        })
        .unwrap_or_default();
    let mut kh = s.known_hosts()?;
    kh.read_file(&r.known_hosts, KnownHostFileKind::OpenSSH)
        .with_context(|| {
            format!(
                "reading the pinned host keys for {label} from {} (known_hosts in the URI)",
                r.known_hosts.display()
            )
        })?;
    match kh.check_port(&r.host, r.port, key) {
        CheckResult::Match => Ok(()),
        CheckResult::Mismatch => anyhow::bail!(
            "host key mismatch for {label}: it presents {kind:?} {fp}, but {} pins another key for it \
             (a different machine, or its key changed); refusing to connect",
            r.known_hosts.display()
        ),
        CheckResult::NotFound => anyhow::bail!(
            "{label} is not in {}: pin its host key first (it presents {kind:?} {fp}; compare that on the host, then \
             add the line ssh-keyscan -p {} {} prints)",
            r.known_hosts.display(),
            r.port,
            r.host
        ),
        CheckResult::Failure => anyhow::bail!("checking the host key of {label} failed"),
    }
}

/// What a command on the host left.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

fn run_on(s: &Session, cmd: &str, timeout: Duration) -> anyhow::Result<Output> {
    s.set_timeout(timeout.as_millis().min(u32::MAX as u128) as u32);
    let mut ch = s.channel_session()?;
    ch.exec(cmd)?;
    ch.send_eof()?;
    let mut stdout = Vec::new();
    ch.read_to_end(&mut stdout)?;
    let mut stderr = String::new();
    ch.stderr().read_to_string(&mut stderr)?;
    ch.wait_close()?;
    Ok(Output {
        status: ch.exit_status()?,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr,
    })
}

/// Commands on the remote host over one SSH session (re-opened once if it broke).
pub struct HostSsh {
    pub remote: RemoteUri,
    session: Mutex<Option<Session>>,
    /// A shell kept running on its own session for file reads: one round trip per batch,
    /// instead of a new channel and a new shell on the host every time (telemetry reads it
    /// right before and after every run, while the guests keep the host's CPUs busy).
    reader: Mutex<Option<(Session, ssh2::Channel)>>,
}

const DONE_MARK: &str = "\u{1e}OCRIG-DONE\u{1e}\n";

impl HostSsh {
    pub fn connect(remote: &RemoteUri) -> anyhow::Result<Self> {
        let s = open_session(remote, Duration::from_secs(10))?;
        Ok(Self {
            remote: remote.clone(),
            session: Mutex::new(Some(s)),
            reader: Mutex::new(None),
        })
    }

    /// Runs `cmd` (its stdout is the answer; stderr is dropped) in the persistent shell.
    fn ask_reader(&self, cmd: &str) -> anyhow::Result<String> {
        let mut guard = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let s = open_session(&self.remote, Duration::from_secs(10))?;
            s.set_timeout(10_000);
            let mut ch = s.channel_session()?;
            ch.exec("exec sh")?;
            *guard = Some((s, ch));
        }
        let (_, ch) = guard.as_mut().expect("just set");
        let cmd = cmd.trim_end().trim_end_matches(';');
        let line = format!("{{ {cmd} ; }} 2>/dev/null; printf '\\036OCRIG-DONE\\036\\n'\n");
        let answer = (|| -> anyhow::Result<String> {
            ch.write_all(line.as_bytes())?;
            ch.flush()?;
            let mut out = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = ch.read(&mut buf)?;
                anyhow::ensure!(n > 0, "the reader shell on {} ended", self.remote.label());
                out.extend_from_slice(&buf[..n]);
                if out.ends_with(DONE_MARK.as_bytes()) {
                    out.truncate(out.len() - DONE_MARK.len());
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
            }
        })();
        if answer.is_err() {
            *guard = None;
        }
        answer
    }

    /// Runs `cmd` in the host's shell within `timeout`.
    pub fn run(&self, cmd: &str, timeout: Duration) -> anyhow::Result<Output> {
        let mut guard = self.session.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(open_session(&self.remote, Duration::from_secs(10))?);
            }
            match run_on(guard.as_ref().expect("just set"), cmd, timeout) {
                Ok(o) => return Ok(o),
                Err(e) if attempt == 0 => {
                    tracing::debug!("SSH to {} broke ({e:#}); reconnecting", self.remote.label());
                    *guard = None;
                }
                Err(e) => {
                    return Err(e.context(format!("running `{cmd}` on {}", self.remote.label())));
                }
            }
        }
        unreachable!()
    }

    /// Runs `cmd` and fails unless it exits 0.
    pub fn check(&self, cmd: &str, timeout: Duration) -> anyhow::Result<String> {
        let o = self.run(cmd, timeout)?;
        anyhow::ensure!(
            o.status == 0,
            "`{cmd}` on {} exited {}: {}",
            self.remote.label(),
            o.status,
            o.stderr.trim()
        );
        Ok(o.stdout)
    }
}

const OK_MARK: &str = "\u{1e}OCRIG-OK\u{1e}";
const ERR_MARK: &str = "\u{1e}OCRIG-ERR\u{1e}";

/// The shell command that prints every file followed by a marker saying whether it was read.
fn read_many_command(paths: &[String]) -> anyhow::Result<String> {
    let mut cmd = String::new();
    for p in paths {
        cmd.push_str(&format!(
            "if cat {} 2>/dev/null; then printf '\\036OCRIG-OK\\036'; else printf '\\036OCRIG-ERR\\036'; fi; ",
            shlex::try_quote(p)?
        ));
    }
    Ok(cmd)
}

fn split_many(out: &str, paths: &[String]) -> Vec<Result<String, String>> {
    let mut rest = out;
    let mut results = Vec::new();
    for p in paths {
        let ok = rest.find(OK_MARK);
        let err = rest.find(ERR_MARK);
        let (at, is_ok, len) = match (ok, err) {
            (Some(o), Some(e)) if e < o => (e, false, ERR_MARK.len()),
            (Some(o), _) => (o, true, OK_MARK.len()),
            (None, Some(e)) => (e, false, ERR_MARK.len()),
            (None, None) => {
                results.push(Err(format!("{p}: no answer")));
                continue;
            }
        };
        let text = &rest[..at];
        results.push(if is_ok {
            Ok(text.to_string())
        } else {
            Err(format!("{p}: cannot be read"))
        });
        rest = &rest[at + len..];
    }
    results
}

impl HostFs for HostSsh {
    fn label(&self) -> String {
        self.remote.label()
    }
    fn read_many(&self, paths: &[String]) -> Vec<Result<String, String>> {
        if paths.is_empty() {
            return Vec::new();
        }
        let out = read_many_command(paths).and_then(|c| {
            self.ask_reader(&c).or_else(|e| {
                tracing::debug!(
                    "the reader shell on {}: {e:#}; one command instead",
                    self.remote.label()
                );
                self.run(&c, Duration::from_secs(10)).map(|o| o.stdout)
            })
        });
        match out {
            Ok(o) => split_many(&o, paths)
                .into_iter()
                .map(|r| r.map_err(|e| format!("{e} on {}", self.remote.label())))
                .collect(),
            Err(e) => paths.iter().map(|p| Err(format!("{p}: {e:#}"))).collect(),
        }
    }
    fn list_dir(&self, path: &str) -> Result<Vec<String>, String> {
        let q = shlex::try_quote(path).map_err(|e| e.to_string())?;
        let o = self
            .run(&format!("ls -1a {q}"), Duration::from_secs(10))
            .map_err(|e| format!("{e:#}"))?;
        if o.status != 0 {
            return Err(format!("{path} on {}: {}", self.remote.label(), o.stderr.trim()));
        }
        Ok(o.stdout
            .lines()
            .filter(|l| *l != "." && *l != "..")
            .map(str::to_string)
            .collect())
    }
    fn exists(&self, path: &str) -> bool {
        shlex::try_quote(path)
            .ok()
            .and_then(|q| self.run(&format!("test -e {q}"), Duration::from_secs(10)).ok())
            .is_some_and(|o| o.status == 0)
    }
    fn writer(&self) -> Option<&dyn HostWrite> {
        Some(self)
    }
}

/// The shell script that applies `ops` on the host: each failure says why on stderr and, unless
/// `keep_going`, ends the script with status 1.
fn apply_script(ops: &[FileOp], keep_going: bool) -> Result<String, String> {
    let q = |s: &str| {
        shlex::try_quote(s)
            .map(|c| c.into_owned())
            .map_err(|e| e.to_string())
    };
    let mut script = String::from("rc=0; ");
    for op in ops {
        let (test, why) = match op {
            FileOp::RequireRoot(why) => ("[ \"$(id -u)\" = 0 ]".to_string(), why.clone()),
            FileOp::RequireDir(p, why) => (format!("[ -d {} ]", q(p)?), why.clone()),
            FileOp::Mkdir(p) => (
                format!("mkdir {} 2>/dev/null", q(p)?),
                format!("creating {p} failed"),
            ),
            FileOp::Write(p, text) => (
                format!("printf %s {} 2>/dev/null > {}", q(text)?, q(p)?),
                format!("writing '{text}' to {p} failed"),
            ),
            FileOp::Rmdir(p) => (
                format!("rmdir {} 2>/dev/null", q(p)?),
                format!("removing {p} failed"),
            ),
        };
        let on_fail = if keep_going { "rc=1" } else { "exit 1" };
        script.push_str(&format!(
            "{test} || {{ printf '%s\\n' {} >&2; {on_fail}; }}; ",
            q(&why)?
        ));
    }
    script.push_str("exit $rc");
    Ok(script)
}

impl HostWrite for HostSsh {
    fn apply(&self, ops: &[FileOp], keep_going: bool) -> Result<(), String> {
        if ops.is_empty() {
            return Ok(());
        }
        let script = apply_script(ops, keep_going)?;
        let o = self
            .run(&script, Duration::from_secs(10))
            .map_err(|e| format!("{e:#}"))?;
        if o.status == 0 {
            return Ok(());
        }
        let first = o.stderr.lines().next().unwrap_or("failed").to_string();
        Err(format!("{first} (on {})", self.remote.label()))
    }
    /// Through the session's running reader shell: no new channel, no new process between
    /// the call and the write.
    fn write_now(&self, path: &str, text: &str) -> Result<(), String> {
        let (p, t) = (
            shlex::try_quote(path).map_err(|e| e.to_string())?,
            shlex::try_quote(text).map_err(|e| e.to_string())?,
        );
        let out = self
            .ask_reader(&format!("printf %s {t} > {p} && printf ok"))
            .map_err(|e| format!("{e:#}"))?;
        (out == "ok")
            .then_some(())
            .ok_or_else(|| format!("writing '{text}' to {path} on {} failed", self.remote.label()))
    }
    /// The reader shell's: it ends with ocrig's SSH session.
    fn owner_pid(&self) -> Result<i32, String> {
        let out = self.ask_reader("echo $$").map_err(|e| format!("{e:#}"))?;
        out.trim()
            .parse()
            .map_err(|_| format!("the shell on {} gave no pid: {out:?}", self.remote.label()))
    }
}

/// The directory on the host for the guest whose local workdir is `local`.
pub fn remote_workdir(local: &Path) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(local.to_string_lossy().as_bytes());
    let hex: String = h.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{REMOTE_WORKROOT}/{hex}")
}

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
fn forward(
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
pub struct SetupStats(Mutex<(u64, f64)>);

impl SetupStats {
    fn record(&self, d: Duration) {
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

/// Copies a console file on the host to a local file as it grows, until QEMU exits or the
/// mirror is dropped.
pub struct ConsoleMirror {
    stop: Arc<AtomicBool>,
}

impl ConsoleMirror {
    pub fn start(r: &RemoteUri, remote_path: &str, local: &Path, qemu_pid: i32) -> anyhow::Result<Self> {
        let s = open_session(r, Duration::from_secs(10))?;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(local)
            .with_context(|| format!("creating {}", local.display()))?;
        let cmd = format!(
            "exec tail -c +1 --pid={qemu_pid} -F {} 2>/dev/null",
            shlex::try_quote(remote_path)?
        );
        let mut ch = s.channel_session()?;
        ch.exec(&cmd)?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("console-mirror".into())
            .spawn(move || {
                s.set_timeout(250);
                let mut buf = vec![0u8; 16 * 1024];
                while !st.load(Ordering::Relaxed) {
                    match ch.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if out.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                            ) => {}
                        Err(_) => break,
                    }
                }
                let _ = ch.close();
            })?;
        Ok(Self { stop })
    }
}

impl Drop for ConsoleMirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The host's CPU locks, held by `flock` processes on it while our channel is open. When ocrig
/// dies the connection closes, `cat` sees end of input, and the locks go with it.
pub struct RemoteCpuClaim {
    _session: Session,
    _channel: ssh2::Channel,
}

fn claim_command(cpus: &[usize], wait: bool) -> String {
    let flag = if wait { "" } else { "-n -E 75 " };
    let mut cmd = String::from(
        "d=/run/lock/ocrig; [ -d /run/lock ] || d=/tmp/ocrig-lock; mkdir -p \"$d/cpus\" && chmod 1777 \"$d\" \"$d/cpus\" 2>/dev/null; ",
    );
    for c in cpus {
        cmd.push_str(&format!("flock {flag}\"$d/cpus/cpu{c}.lock\" "));
    }
    cmd.push_str("sh -c 'echo CLAIMED; exec cat >/dev/null'");
    cmd
}

impl RemoteCpuClaim {
    /// Takes every CPU's lock on the host or none. Busy without `wait`: an error naming the host
    /// and CPUs; with `wait`, queues behind the holder, telling `on_wait` first.
    pub fn claim(
        r: &RemoteUri,
        cpus: &[usize],
        wait: bool,
        on_wait: impl FnOnce(&str),
    ) -> anyhow::Result<Self> {
        let mut sorted = cpus.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let busy_msg = format!(
            "host CPU(s) {sorted:?} on {} are in use by a live sweep; two sweeps on the same CPUs spoil each other's \
             measurements. Wait for it, choose other CPUs (host.cpus), or pass --wait-for-cpus to queue behind it",
            r.label()
        );
        match Self::try_claim(r, &sorted, false)? {
            Some(c) => Ok(c),
            None if !wait => Err(crate::backend::isolation::RemoteCpusBusy(busy_msg).into()),
            None => {
                on_wait(&busy_msg);
                Self::try_claim(r, &sorted, true)?.context("the remote CPU claim ended without the locks")
            }
        }
    }

    fn try_claim(r: &RemoteUri, cpus: &[usize], wait: bool) -> anyhow::Result<Option<Self>> {
        let s = open_session(r, Duration::from_secs(10))?;
        let mut ch = s.channel_session()?;
        ch.exec(&claim_command(cpus, wait))?;
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        loop {
            match ch.read(&mut b) {
                Ok(0) => break,
                Ok(_) if b[0] == b'\n' => break,
                Ok(_) => line.push(b[0]),
                Err(e) => return Err(e).context("reading the remote CPU claim"),
            }
        }
        if line == b"CLAIMED" {
            return Ok(Some(Self {
                _session: s,
                _channel: ch,
            }));
        }
        let mut err = String::new();
        let _ = ch.stderr().read_to_string(&mut err);
        let _ = ch.wait_close();
        match ch.exit_status() {
            Ok(75) | Ok(1) if err.trim().is_empty() => Ok(None),
            st => anyhow::bail!(
                "claiming CPUs {cpus:?} on {}: exit {st:?}: {}",
                r.label(),
                err.trim()
            ),
        }
    }
}

/// Uploaded files per (URI, local path, size, mtime) in this process.
static UPLOADED: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Cost of making files present on remote hosts, for the note.
pub static UPLOADS: SetupStats = SetupStats(Mutex::new((0, 0.0)));

fn content_name(local: &Path) -> anyhow::Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(local).with_context(|| format!("opening {}", local.display()))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let hex: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    let base = local
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "_")
        })
        .unwrap_or_default();
    Ok(format!("{hex}-{base}"))
}

fn pool(conn: &virt::connect::Connect) -> anyhow::Result<virt::storage_pool::StoragePool> {
    use std::ffi::CString;
    use virt::storage_pool::StoragePool;
    let name = CString::new(POOL)?;
    // SAFETY: a valid connection pointer and a NUL-terminated name; a non-null result is a new
    // reference that StoragePool takes over.
    let p = unsafe { virt::sys::virStoragePoolLookupByName(conn.as_ptr(), name.as_ptr()) };
    if !p.is_null() {
        // SAFETY: see above.
        let p = unsafe { StoragePool::from_ptr(p) };
        if !p.is_active().unwrap_or(false) {
            p.create(0)
                .map_err(|e| anyhow::anyhow!("starting storage pool {POOL}: {}", e.message()))?;
        }
        return Ok(p);
    }
    let xml = format!("<pool type='dir'><name>{POOL}</name><target><path>{POOL_PATH}</path></target></pool>");
    let xml = CString::new(xml)?;
    // SAFETY: as above; flags 1 = VIR_STORAGE_POOL_CREATE_WITH_BUILD (make the directory).
    let p = unsafe { virt::sys::virStoragePoolCreateXML(conn.as_ptr(), xml.as_ptr(), 1) };
    anyhow::ensure!(
        !p.is_null(),
        "creating storage pool {POOL} at {POOL_PATH}: {}",
        virt::error::Error::last_error().message()
    );
    // SAFETY: a new reference.
    Ok(unsafe { StoragePool::from_ptr(p) })
}

/// Makes `local` present on the host behind `conn` as a storage volume named by its content
/// hash (uploading it only if no complete copy is there) and returns the volume's path there.
pub fn upload_volume(conn: &virt::connect::Connect, uri: &str, local: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(local).with_context(|| format!("reading {}", local.display()))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    let key = format!("{uri}\n{}\n{}\n{mtime:?}", local.display(), meta.len());
    if let Some(p) = UPLOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .get(&key)
    {
        return Ok(p.clone());
    }
    let t0 = Instant::now();
    let name = content_name(local)?;
    let marker = format!("{name}.ok");
    let pool = pool(conn)?;
    let _ = pool.refresh(0);
    let vol = match (
        pool.lookup_storage_vol_by_name(&name),
        pool.lookup_storage_vol_by_name(&marker),
    ) {
        (Ok(v), Ok(_)) => v,
        (existing, _) => {
            // A volume without its marker is an upload that did not finish: replace it.
            if let Ok(v) = existing {
                let _ = v.delete(0);
            }
            let size = meta.len();
            let xml = format!(
                "<volume><name>{name}</name><capacity unit='bytes'>{size}</capacity><target><format type='raw'/></target></volume>"
            );
            let v = virt::storage_vol::StorageVol::create_xml(&pool, &xml, 0)
                .map_err(|e| anyhow::anyhow!("creating volume {name} in pool {POOL}: {}", e.message()))?;
            let stream = virt::stream::Stream::new(conn, 0)
                .map_err(|e| anyhow::anyhow!("opening a stream to {uri}: {}", e.message()))?;
            v.upload(&stream, 0, size, 0).map_err(|e| {
                anyhow::anyhow!("starting the upload of {}: {}", local.display(), e.message())
            })?;
            let mut f = std::fs::File::open(local)?;
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                let mut off = 0;
                while off < n {
                    let sent = stream
                        .send(&buf[off..n])
                        .map_err(|e| anyhow::anyhow!("uploading {}: {}", local.display(), e.message()))?;
                    off += sent.max(0) as usize;
                }
            }
            stream.finish().map_err(|e| {
                anyhow::anyhow!("finishing the upload of {}: {}", local.display(), e.message())
            })?;
            let mxml = format!(
                "<volume><name>{marker}</name><capacity unit='bytes'>0</capacity><target><format type='raw'/></target></volume>"
            );
            virt::storage_vol::StorageVol::create_xml(&pool, &mxml, 0)
                .map_err(|e| anyhow::anyhow!("marking volume {name} complete: {}", e.message()))?;
            UPLOADS.record(t0.elapsed());
            tracing::info!(
                "uploaded {} ({} bytes) to {uri} as volume {name} in {:.2} s",
                local.display(),
                size,
                t0.elapsed().as_secs_f64()
            );
            v
        }
    };
    let path = vol
        .path()
        .map_err(|e| anyhow::anyhow!("path of volume {name}: {}", e.message()))?;
    UPLOADED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_default()
        .insert(key, path.clone());
    Ok(path)
}

/// `major.minor.micro` from libvirt's version number.
pub fn version_triple(v: u32) -> (u32, u32, u32) {
    (v / 1_000_000, (v / 1000) % 1000, v % 1000)
}

/// The oldest libvirt accepted on a remote host (see [`MIN_LIBVIRT`]).
pub fn min_libvirt() -> (u32, u32, u32) {
    std::env::var("OCRIG_MIN_LIBVIRT")
        .ok()
        .and_then(|s| {
            let mut it = s.split('.').map(|p| p.parse::<u32>().ok());
            Some((
                it.next()??,
                it.next().flatten().unwrap_or(0),
                it.next().flatten().unwrap_or(0),
            ))
        })
        .unwrap_or(MIN_LIBVIRT)
}

/// Refuses a libvirt older than the minimum.
pub fn check_libvirt_version(label: &str, v: u32, min: (u32, u32, u32)) -> Result<(), String> {
    let have = version_triple(v);
    if have < min {
        return Err(format!(
            "{label} runs libvirt {}.{}.{}, older than {}.{}.{}, the oldest ocrig supports on a remote host",
            have.0, have.1, have.2, min.0, min.1, min.2
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_taken_apart() {
        assert_eq!(parse("qemu:///system"), Ok(None));
        assert_eq!(parse("qemu+unix:///system?socket=/x"), Ok(None));
        let r = parse("qemu+ssh://root@hostA/system").unwrap().unwrap();
        assert_eq!(
            (r.transport.as_str(), r.user.as_str(), r.host.as_str(), r.port),
            ("ssh", "root", "hostA", 22)
        );
        assert!(r.known_hosts.ends_with(".ssh/known_hosts"));
        let r =
            parse("qemu+libssh2://u@127.0.0.1:2222/system?keyfile=/k/id&known_hosts=/k/kh&sshauth=privkey")
                .unwrap()
                .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 2222));
        assert_eq!(r.keyfile, PathBuf::from("/k/id"));
        assert_eq!(r.known_hosts, PathBuf::from("/k/kh"));
        assert_eq!(r.label(), "u@127.0.0.1:2222");
        let r = parse("qemu+ssh://root@[::1]:23/system?known_hosts=/a%20b")
            .unwrap()
            .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("::1", 23));
        assert_eq!(r.known_hosts, PathBuf::from("/a b"));
        assert!(parse("qemu+tcp://hostA/system").unwrap_err().contains("over SSH"));
        assert!(
            parse("qemu://hostA/system")
                .unwrap_err()
                .contains("without a transport")
        );
        assert!(
            parse("xen+ssh://hostA/")
                .unwrap_err()
                .contains("driver must be qemu")
        );
        assert!(
            parse("qemu+ssh://hostA:x/system")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(
            parse("qemu+ssh://h/system?no_verify=1")
                .unwrap_err()
                .contains("pins")
        );
        assert!(parse("nonsense").is_err());
    }

    #[test]
    fn many_files_come_back_in_order_with_failures_marked() {
        let paths: Vec<String> = vec!["/a".into(), "/b".into(), "/c".into()];
        let out = format!("one\n{OK_MARK}{ERR_MARK}three{OK_MARK}");
        let r = split_many(&out, &paths);
        assert_eq!(r[0].as_deref(), Ok("one\n"));
        assert!(r[1].as_ref().unwrap_err().contains("/b"));
        assert_eq!(r[2].as_deref(), Ok("three"));
        // The command really prints that through a shell.
        let cmd = read_many_command(&["/proc/self/stat".into(), "/nonexistent".into()]).unwrap();
        let o = std::process::Command::new("sh")
            .args(["-c", &cmd])
            .output()
            .unwrap();
        let r = split_many(
            &String::from_utf8_lossy(&o.stdout),
            &["/proc/self/stat".into(), "/nonexistent".into()],
        );
        assert!(r[0].as_ref().unwrap().contains('('), "{r:?}");
        assert!(r[1].is_err());
    }

    #[test]
    fn libvirt_versions_are_compared() {
        assert_eq!(version_triple(11_003_000), (11, 3, 0));
        assert!(check_libvirt_version("h", 11_003_000, MIN_LIBVIRT).is_ok());
        let e = check_libvirt_version("root@h:22", 8_000_000, MIN_LIBVIRT).unwrap_err();
        assert!(
            e.contains("root@h:22 runs libvirt 8.0.0, older than 9.0.0"),
            "{e}"
        );
    }

    #[test]
    fn claim_command_nests_one_flock_per_cpu() {
        let c = claim_command(&[0, 3], false);
        assert!(
            c.contains("flock -n -E 75 \"$d/cpus/cpu0.lock\" flock -n -E 75 \"$d/cpus/cpu3.lock\" sh -c")
        );
        assert!(!claim_command(&[1], true).contains("-n"));
    }

    /// Against the real libvirtd on this machine (the storage calls are the same over SSH).
    #[test]
    #[cfg_attr(not(feature = "full-tests"), ignore = "full tier: needs libvirtd")]
    fn volumes_are_uploaded_once_by_content_and_an_unfinished_one_is_replaced() {
        let uri = "qemu:///system";
        virt::error::clear_error_callback();
        let conn = virt::connect::Connect::open(Some(uri)).expect("libvirtd on qemu:///system");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("blob.bin");
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut data = data;
        data.extend_from_slice(format!("{:?}", std::time::SystemTime::now()).as_bytes());
        std::fs::write(&f, &data).unwrap();
        let forget = || UPLOADED.lock().unwrap().get_or_insert_default().clear();
        let uploads = || UPLOADS.get().0;

        let n0 = uploads();
        let path = upload_volume(&conn, uri, &f).unwrap();
        assert_eq!(uploads(), n0 + 1);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            data,
            "the volume holds the file's bytes"
        );
        assert!(
            path.starts_with(POOL_PATH) && path.ends_with("-blob.bin"),
            "{path}"
        );
        // Present with its marker: not sent again, also by a fresh process (no local cache).
        forget();
        assert_eq!(upload_volume(&conn, uri, &f).unwrap(), path);
        assert_eq!(uploads(), n0 + 1);

        // An upload that died half way (volume without marker) is replaced.
        let p = pool(&conn).unwrap();
        let name = path.rsplit('/').next().unwrap().to_string();
        p.lookup_storage_vol_by_name(&format!("{name}.ok"))
            .unwrap()
            .delete(0)
            .unwrap();
        std::fs::write(&path, b"truncated").unwrap();
        forget();
        assert_eq!(upload_volume(&conn, uri, &f).unwrap(), path);
        assert_eq!(uploads(), n0 + 2);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        for v in [name.clone(), format!("{name}.ok")] {
            p.lookup_storage_vol_by_name(&v).unwrap().delete(0).unwrap();
        }
    }

    #[test]
    fn remote_workdirs_differ_per_local_workdir() {
        let a = remote_workdir(Path::new("/r/guests/x/boot1"));
        assert!(a.starts_with("/var/tmp/ocrig/") && a.len() == "/var/tmp/ocrig/".len() + 16);
        assert_ne!(a, remote_workdir(Path::new("/r/guests/x/boot2")));
    }
}
