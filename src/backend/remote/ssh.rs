//! SSH sessions ocrig opens itself to the host (its key pinned): commands, and the host's files
//! read and written in one command per batch ([`HostFs`], [`HostWrite`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use ssh2::{CheckResult, KnownHostFileKind, Session};

use crate::hostfs::{FileOp, HostFs, HostWrite};

use super::*;

/// Where a remote host keeps the console logs of ocrig's guests.
pub(super) const REMOTE_WORKROOT: &str = "/var/tmp/ocrig";

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

pub(super) fn check_host_key(s: &Session, r: &RemoteUri) -> anyhow::Result<()> {
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

pub(super) fn run_on(s: &Session, cmd: &str, timeout: Duration) -> anyhow::Result<Output> {
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

pub(super) const DONE_MARK: &str = "\u{1e}OCRIG-DONE\u{1e}\n";

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

pub(super) const OK_MARK: &str = "\u{1e}OCRIG-OK\u{1e}";

pub(super) const ERR_MARK: &str = "\u{1e}OCRIG-ERR\u{1e}";

/// The shell command that prints every file followed by a marker saying whether it was read.
pub(super) fn read_many_command(paths: &[String]) -> anyhow::Result<String> {
    let mut cmd = String::new();
    for p in paths {
        cmd.push_str(&format!(
            "if cat {} 2>/dev/null; then printf '\\036OCRIG-OK\\036'; else printf '\\036OCRIG-ERR\\036'; fi; ",
            shlex::try_quote(p)?
        ));
    }
    Ok(cmd)
}

pub(super) fn split_many(out: &str, paths: &[String]) -> Vec<Result<String, String>> {
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
pub(super) fn apply_script(ops: &[FileOp], keep_going: bool) -> Result<String, String> {
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
