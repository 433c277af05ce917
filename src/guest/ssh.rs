//! SSH to a guest through libssh2 (`ssh2`): public-key login as root, the image's host key
//! pinned, commands with deadlines, uploads through `cat` (dropbear ships no SFTP server), and
//! gated commands through one shell kept running per guest.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use anyhow::Context;
use ssh2::{Channel, Session};

/// How to log in to a guest.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub private_key: PathBuf,
    /// The raw public host-key blob the guest must present.
    pub host_key_blob: Vec<u8>,
}

pub struct GuestSsh {
    session: Session,
    /// The guest shell that runs gated commands, kept between them: a run then costs no channel,
    /// exec request and shell start of its own (~10 of the ~28 ms a payload took to be ready
    /// under TCG here). Taken while a command runs; put back only after a clean end.
    shell: Arc<Mutex<Option<KeptShell>>>,
}

/// A shell reading commands on its stdin, and the marker that ends each command's output.
struct KeptShell {
    ch: Channel,
    /// `ocrig-end-<random>`: no payload output can hold it by chance.
    end: String,
}

/// What a finished command left.
#[derive(Debug, Clone)]
pub struct ExecOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl ExecOutput {
    pub fn ok(&self) -> bool {
        self.status == 0
    }
}

impl GuestSsh {
    /// Connects and authenticates; fails if the host key is not the pinned one.
    pub fn connect(addr: SocketAddr, creds: &Credentials, timeout: Duration) -> anyhow::Result<Self> {
        let tcp =
            TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to {addr}"))?;
        let mut session = Session::new()?;
        session.set_tcp_stream(tcp);
        session.set_timeout(timeout.as_millis() as u32);
        session
            .handshake()
            .with_context(|| format!("SSH handshake with {addr}"))?;
        let (key, _) = session.host_key().context("guest presented no host key")?;
        anyhow::ensure!(
            key == creds.host_key_blob.as_slice(),
            "host key mismatch at {addr}: the guest's key is not the image's pinned key"
        );
        session
            .userauth_pubkey_file(&creds.user, None, &creds.private_key, None)
            .with_context(|| format!("public-key login as {} at {addr}", creds.user))?;
        anyhow::ensure!(
            session.authenticated(),
            "authentication at {addr} did not complete"
        );
        // No libssh2 keepalive: in blocking mode its wait returns "Timed out waiting on socket"
        // whenever a keepalive falls due, failing long reads. Deadlines come from set_timeout.
        Ok(Self {
            session,
            shell: Arc::new(Mutex::new(None)),
        })
    }

    /// Retries `connect` until it succeeds or `deadline` passes (the guest's sshd may be
    /// starting). A host-key mismatch is not retried.
    pub fn connect_until(addr: SocketAddr, creds: &Credentials, deadline: Instant) -> anyhow::Result<Self> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match Self::connect(
                addr,
                creds,
                left.clamp(Duration::from_millis(500), Duration::from_secs(10)),
            ) {
                Ok(s) => return Ok(s),
                Err(e) if format!("{e:#}").contains("host key mismatch") => return Err(e),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context("SSH not ready before the deadline"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    fn channel(&self, timeout: Duration) -> anyhow::Result<Channel> {
        self.session
            .set_timeout(timeout.as_millis().min(u32::MAX as u128) as u32);
        Ok(self.session.channel_session()?)
    }

    /// Runs a shell command, feeding `stdin` if given, and waits for it within `timeout`.
    pub fn exec(&self, command: &str, stdin: Option<&[u8]>, timeout: Duration) -> anyhow::Result<ExecOutput> {
        let mut ch = self.channel(timeout)?;
        ch.exec(command)
            .with_context(|| format!("starting `{command}`"))?;
        if let Some(data) = stdin {
            ch.write_all(data)
                .with_context(|| format!("writing stdin of `{command}`"))?;
        }
        ch.send_eof()?;
        finish(ch, command)
    }

    /// Copies `data` to `remote` with mode `mode` (octal string like "755"), making its
    /// directory. `remote` is a plain path (letters, digits, `/._-`: no quoting needed).
    pub fn upload(&self, data: &[u8], remote: &str, mode: &str, timeout: Duration) -> anyhow::Result<()> {
        let tmp = format!("{remote}.part");
        let dir = match remote.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &remote[..i],
        };
        let cmd = format!("mkdir -p {dir} && cat > {tmp} && chmod {mode} {tmp} && mv -f {tmp} {remote}");
        let out = self.exec(&cmd, Some(data), timeout)?;
        anyhow::ensure!(
            out.ok(),
            "upload to {remote} failed ({}): {}",
            out.status,
            out.stderr.trim()
        );
        Ok(())
    }

    /// Starts a command that announces readiness on stderr with `ready_line` and then waits
    /// for one line on stdin before doing its work (the payload's `--go-stdin`). The command
    /// runs as the body of a shell function in the guest's kept shell: it ends with `return`,
    /// never `exit`, and its status is the function's.
    pub fn start_gated(
        &self,
        command: &str,
        ready_line: &str,
        timeout: Duration,
    ) -> anyhow::Result<GatedCommand> {
        self.session
            .set_timeout(timeout.as_millis().min(u32::MAX as u128) as u32);
        let kept = self.shell.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(shell) = kept {
            match self.start_in(shell, command, ready_line) {
                // A kept shell that died since (nothing came back): once more in a new one.
                Err(Start::Gone) => {}
                Err(Start::Failed(e)) => return Err(e),
                Ok(g) => return Ok(g),
            }
        }
        let shell = self.open_shell(timeout)?;
        match self.start_in(shell, command, ready_line) {
            Ok(g) => Ok(g),
            Err(Start::Failed(e)) => Err(e),
            Err(Start::Gone) => anyhow::bail!("the guest's shell ended before `{command}` started"),
        }
    }

    fn open_shell(&self, timeout: Duration) -> anyhow::Result<KeptShell> {
        let mut ch = self.channel(timeout)?;
        ch.exec("exec sh").context("starting the guest's shell")?;
        Ok(KeptShell {
            ch,
            end: format!("ocrig-end-{:016x}", fastrand::u64(..)),
        })
    }

    fn start_in(&self, shell: KeptShell, command: &str, ready_line: &str) -> Result<GatedCommand, Start> {
        let KeptShell { mut ch, end } = shell;
        // The status is echoed on both streams after a newline of their own, so each stream's
        // end is found and the command's own last line stays whole.
        let framed = format!(
            "ocrig_cmd() {{\n{command}\n}}; ocrig_cmd; ocrig_s=$?; echo; echo {end} $ocrig_s; echo >&2; echo {end} $ocrig_s >&2\n"
        );
        if ch.write_all(framed.as_bytes()).is_err() {
            return Err(Start::Gone);
        }
        let mut gated = GatedCommand {
            ch,
            end,
            command: command.to_string(),
            early: String::new(),
            stdout_head: Vec::new(),
            stderr_head: Vec::new(),
            slot: Arc::clone(&self.shell),
        };
        let context = |e: std::io::Error| {
            anyhow::Error::from(e).context(format!("waiting for `{command}` to be ready"))
        };
        loop {
            match gated.stderr_line() {
                Ok(Some(line)) if line.trim_end() == ready_line => return Ok(gated),
                Ok(Some(line)) if line.starts_with(&gated.end) => {
                    // Ended before it was ready: its status and output say why.
                    let status = end_status(&line, &gated.end);
                    let early = std::mem::take(&mut gated.early);
                    let out = gated.rest(status, early).map_err(Start::Failed)?;
                    return Err(Start::Failed(anyhow::anyhow!(
                        "`{command}` exited ({}) before it was ready: {}",
                        out.status,
                        out.stderr.trim()
                    )));
                }
                Ok(Some(line)) => gated.early.push_str(&line),
                Ok(None) if gated.early.is_empty() => return Err(Start::Gone),
                Ok(None) => {
                    return Err(Start::Failed(anyhow::anyhow!(
                        "the guest's shell ended while `{command}` started: {}",
                        gated.early.trim()
                    )));
                }
                Err(e) => return Err(Start::Failed(context(e))),
            }
        }
    }
}

/// Why a gated command did not start: its shell was gone before anything came back (a new
/// one may try), or anything else.
enum Start {
    Gone,
    Failed(anyhow::Error),
}

/// The status in an end line `<end> <status>`; -1 when it holds none.
fn end_status(line: &str, end: &str) -> i32 {
    line.trim_end()
        .strip_prefix(end)
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or(-1)
}

/// A command started with [`GuestSsh::start_gated`], waiting for its go signal.
pub struct GatedCommand {
    ch: Channel,
    end: String,
    command: String,
    early: String,
    /// Stdout read past a marker by [`GatedCommand::stdout_until`], handed back by `wait`.
    stdout_head: Vec<u8>,
    /// Stderr read past the ready line.
    stderr_head: Vec<u8>,
    /// Where the shell goes back once the command ended cleanly.
    slot: Arc<Mutex<Option<KeptShell>>>,
}

impl GatedCommand {
    /// Reads stdout up to and including the line `marker` (which the command printed before
    /// its ready line, so it is already here); returns what came before it.
    pub fn stdout_until(&mut self, marker: &str) -> anyhow::Result<String> {
        let needle = format!("{marker}\n");
        let mut buf = std::mem::take(&mut self.stdout_head);
        let at = stdout_to(&mut self.ch, &mut buf, needle.as_bytes(), || {
            (
                format!("reading the output of `{}` up to {marker}", self.command),
                format!("`{}` ended its output before {marker}", self.command),
            )
        })?;
        self.stdout_head = buf.split_off(at + needle.len());
        buf.truncate(at);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// One line of stderr (with its newline); None at the stream's end.
    fn stderr_line(&mut self) -> std::io::Result<Option<String>> {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(at) = self.stderr_head.iter().position(|&b| b == b'\n') {
                let rest = self.stderr_head.split_off(at + 1);
                let line = std::mem::replace(&mut self.stderr_head, rest);
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            let n = self.ch.stderr().read(&mut chunk)?;
            if n == 0 {
                return Ok(None);
            }
            self.stderr_head.extend_from_slice(&chunk[..n]);
        }
    }

    /// Asks the gated payload for its TSC (before the go line, or once it said it is done:
    /// [`wait_tied`](Self::wait_tied)): writes the sync line and reads
    /// stderr up to the answer. The caller times the call; the guest read its TSC within it.
    pub fn sync(&mut self) -> anyhow::Result<u64> {
        use ocrig_payload::cli::{SYNC_ANSWER, SYNC_LINE};
        // Written as is: libssh2 sends a write at once, and a channel's `flush` would throw
        // away what the command printed on stdout and was not read yet (its report).
        self.ch.write_all(format!("{SYNC_LINE}\n").as_bytes())?;
        loop {
            match self.stderr_line() {
                Ok(Some(line)) => match line.strip_prefix(SYNC_ANSWER) {
                    Some(tsc) => {
                        return tsc
                            .trim()
                            .parse()
                            .with_context(|| format!("the payload's sync answer {line:?}"));
                    }
                    None => self.early.push_str(&line),
                },
                Ok(None) => anyhow::bail!("the guest's shell ended while `{}` waited to start", self.command),
                Err(e) => return Err(anyhow::Error::from(e).context("reading the payload's sync answer")),
            }
        }
    }

    /// Sends the go line; returns the instant it was written. Nothing else is written to the
    /// shell until the command ends, so the line is the command's to read.
    pub fn go(&mut self) -> anyhow::Result<Instant> {
        // Not flushed ([`sync`](Self::sync)).
        self.ch.write_all(b"go\n")?;
        Ok(Instant::now())
    }

    /// Waits for the command to finish (the session's timeout bounds each read); the shell
    /// is kept for the next command. Where the command says it is done and waits (a payload
    /// run with `--tie-after`: [`TIE_AFTER_LINE`](ocrig_payload::cli::TIE_AFTER_LINE)), `tie`
    /// may [`sync`](Self::sync) with it, and then it is told to end. Returns what `tie` made,
    /// with the instant the command said it was done (its own end).
    pub fn wait_tied<T>(
        mut self,
        mut tie: impl FnMut(&mut Self) -> Option<T>,
    ) -> anyhow::Result<(ExecOutput, Option<(Instant, T)>)> {
        use ocrig_payload::cli::{TIE_AFTER_LINE, TIE_END_LINE};
        let mut tied = None;
        let status = loop {
            match self.stderr_line() {
                Ok(Some(line)) if line.starts_with(&self.end) => break end_status(&line, &self.end),
                Ok(Some(line)) if line.trim_end() == TIE_AFTER_LINE => {
                    let done = Instant::now();
                    tied = tie(&mut self).map(|t| (done, t));
                    // Not flushed ([`sync`](Self::sync)).
                    self.ch.write_all(format!("{TIE_END_LINE}\n").as_bytes())?;
                }
                Ok(Some(line)) => self.early.push_str(&line),
                Ok(None) => anyhow::bail!("the guest's shell ended while `{}` ran", self.command),
                Err(e) => {
                    return Err(
                        anyhow::Error::from(e).context(format!("reading errors of `{}`", self.command))
                    );
                }
            }
        };
        let early = std::mem::take(&mut self.early);
        self.rest(status, early).map(|out| (out, tied))
    }

    /// Reads stdout up to the end line; puts the shell back. `stderr` is everything the
    /// command wrote there, with the newline the frame added before the end line.
    fn rest(mut self, status: i32, mut stderr: String) -> anyhow::Result<ExecOutput> {
        let needle = format!("\n{} {status}\n", self.end);
        let mut buf = std::mem::take(&mut self.stdout_head);
        let at = stdout_to(&mut self.ch, &mut buf, needle.as_bytes(), || {
            (
                format!("reading output of `{}`", self.command),
                format!("the guest's shell ended while `{}` ran", self.command),
            )
        })?;
        let clean = at + needle.len() == buf.len() && self.stderr_head.is_empty();
        buf.truncate(at);
        // The frame's own newline before the end line, on each stream.
        if stderr.ends_with('\n') {
            stderr.pop();
        }
        let out = ExecOutput {
            status,
            stdout: String::from_utf8_lossy(&buf).into_owned(),
            stderr,
        };
        if clean {
            *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(KeptShell {
                ch: self.ch,
                end: self.end,
            });
        }
        Ok(out)
    }
}

/// Reads `ch`'s stdout onto `buf` until it holds `needle`; returns where that starts. Only
/// what each read added (and the needle's length before it) is searched, so a long output is
/// scanned once. `what()`: the words for a failed read and for an output that ended first.
fn stdout_to(
    ch: &mut Channel,
    buf: &mut Vec<u8>,
    needle: &[u8],
    what: impl Fn() -> (String, String),
) -> anyhow::Result<usize> {
    let mut from = 0;
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(at) = find(&buf[from..], needle) {
            return Ok(from + at);
        }
        from = buf.len().saturating_sub(needle.len().saturating_sub(1));
        let n = ch.read(&mut chunk).with_context(|| what().0)?;
        anyhow::ensure!(n > 0, what().1);
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn finish(mut ch: Channel, command: &str) -> anyhow::Result<ExecOutput> {
    let mut stdout = String::new();
    ch.read_to_string(&mut stdout)
        .with_context(|| format!("reading output of `{command}`"))?;
    let mut stderr = String::new();
    ch.stderr()
        .read_to_string(&mut stderr)
        .with_context(|| format!("reading errors of `{command}`"))?;
    ch.wait_close()?;
    Ok(ExecOutput {
        status: ch.exit_status()?,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    //! The kept shell against a real SSH server: a private OpenSSH sshd on 127.0.0.1 (what
    //! `scripts/setup` installs for the remote-host tests), its shell the host's `sh`.
    use super::*;
    use std::process::Command;

    struct Sshd {
        dir: tempfile::TempDir,
        port: u16,
        child: std::process::Child,
    }

    impl Drop for Sshd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn keygen(path: &std::path::Path) {
        let ok = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok, "ssh-keygen");
    }

    fn sshd() -> Sshd {
        for _ in 0..5 {
            if let Some(s) = try_sshd() {
                return s;
            }
        }
        panic!("sshd exited right after it listened, 5 times (its log is sshd.log in its directory)");
    }

    /// A server on a free port, or None where it exited at once: another test's server may have
    /// been handed the same free port and answered the connect, so this one could not listen.
    fn try_sshd() -> Option<Sshd> {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("hostkey"));
        keygen(&d.join("client"));
        std::fs::copy(d.join("client.pub"), d.join("authorized_keys")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // `SetEnv SHLVL=1` keeps root's ~/.bashrc out of the sessions (see tests/guests/remote.rs).
        let cfg = format!(
            "ListenAddress 127.0.0.1:{port}\nHostKey {}\nAuthorizedKeysFile {}\nUsePAM no\nStrictModes no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
             PidFile {}\nSetEnv SHLVL=1\n",
            d.join("hostkey").display(),
            d.join("authorized_keys").display(),
            d.join("sshd.pid").display(),
        );
        std::fs::write(d.join("sshd_config"), cfg).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let mut child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-f"])
            .arg(d.join("sshd_config"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .spawn()
            .expect("openssh-server (scripts/setup installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        Some(Sshd { dir, port, child })
    }

    fn connect(s: &Sshd) -> GuestSsh {
        let d = s.dir.path();
        let line = std::fs::read_to_string(d.join("hostkey.pub")).unwrap();
        let creds = Credentials {
            user: "root".into(),
            private_key: d.join("client"),
            host_key_blob: base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                line.split_whitespace().nth(1).unwrap(),
            )
            .unwrap(),
        };
        GuestSsh::connect(([127, 0, 0, 1], s.port).into(), &creds, Duration::from_secs(10)).unwrap()
    }

    #[test]
    #[cfg_attr(
        not(feature = "full-tests"),
        ignore = "full tier: starts an SSH server as root (~1 s)"
    )]
    fn gated_commands_share_one_kept_shell_keep_their_output_and_status_and_survive_its_death() {
        let s = sshd();
        let ssh = connect(&s);
        let run = |status: i32| {
            let cmd = format!(
                "echo pid $$; echo mark; echo ready >&2; read go; echo \"got $go\"; printf 'warn' >&2; return {status}"
            );
            let mut g = ssh.start_gated(&cmd, "ready", Duration::from_secs(10)).unwrap();
            let head = g.stdout_until("mark").unwrap();
            g.go().unwrap();
            let (out, tied) = g.wait_tied(|_| Some(())).unwrap();
            assert!(tied.is_none(), "a command that never said it was done was tied");
            (head.trim().to_string(), out)
        };
        let (pid0, first) = run(0);
        assert!(pid0.starts_with("pid "), "{pid0}");
        assert_eq!(first.status, 0);
        assert_eq!(first.stdout, "got go\n");
        assert_eq!(first.stderr, "warn");
        // The same shell runs the next command; its status (the payload's check failure, 3)
        // is the command's.
        let (pid1, second) = run(3);
        assert_eq!(pid1, pid0);
        assert_eq!((second.status, second.stdout.as_str()), (3, "got go\n"));
        // A command that ends before it is ready says so with its status and stderr, and
        // leaves the shell usable.
        let early = ssh
            .start_gated(
                "echo bad argument >&2; return 2",
                "ready",
                Duration::from_secs(10),
            )
            .err()
            .unwrap();
        let early = format!("{early:#}");
        assert!(
            early.contains("exited (2) before it was ready: bad argument"),
            "{early}"
        );
        assert_eq!(run(0).0, pid0);
        // The shell killed between two commands (a guest's OOM killer, say): the next command
        // gets a new one.
        let kill = ssh
            .exec(&format!("kill -9 {}", &pid0[4..]), None, Duration::from_secs(5))
            .unwrap();
        assert!(kill.ok(), "{}", kill.stderr);
        std::thread::sleep(Duration::from_millis(200));
        let (pid2, third) = run(0);
        assert_ne!(pid2, pid0);
        assert_eq!(third.stdout, "got go\n");
    }

    /// The payload's side of `--tie-after`, played by the shell: done, then a sync answered,
    /// then the end line read. The tie is made between the two and the shell is kept.
    #[test]
    #[cfg_attr(
        not(feature = "full-tests"),
        ignore = "full tier: starts an SSH server as root (~1 s)"
    )]
    fn a_command_that_says_it_is_done_is_tied_and_then_told_to_end() {
        use ocrig_payload::cli::{SYNC_ANSWER, TIE_AFTER_LINE};
        let s = sshd();
        let ssh = connect(&s);
        let cmd = format!(
            "echo ready >&2; read go; echo report; echo '{TIE_AFTER_LINE}' >&2; read q; \
             echo \"{SYNC_ANSWER} 42\" >&2; read e; echo \"asked $q, then $e\"; return 0"
        );
        let mut g = ssh.start_gated(&cmd, "ready", Duration::from_secs(10)).unwrap();
        g.go().unwrap();
        let (out, tied) = g.wait_tied(|g| g.sync().ok()).unwrap();
        let (done, tsc) = tied.expect("tied once the command said it was done");
        assert_eq!(tsc, 42);
        assert!(done.elapsed() < Duration::from_secs(10));
        assert_eq!(out.status, 0);
        assert_eq!(out.stdout, "report\nasked sync, then end\n", "{out:?}");
        // The next command runs in the same shell.
        let again = ssh.start_gated(
            "echo ready >&2; read go; echo $go",
            "ready",
            Duration::from_secs(10),
        );
        let mut again = again.unwrap();
        again.go().unwrap();
        assert_eq!(again.wait_tied(|_| Some(())).unwrap().0.stdout, "go\n");
    }

    /// The server's session processes for `s`'s connections: everything below its listener.
    fn session_processes(s: &Sshd) -> Vec<u32> {
        let parent_of = |pid: u32| -> Option<u32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
        };
        let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter_map(|p| Some((p, parent_of(p)?)))
            .collect();
        let mut found = vec![s.child.id()];
        let mut i = 0;
        while i < found.len() {
            let p = found[i];
            found.extend(all.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
            i += 1;
        }
        found.split_off(1)
    }

    fn signal_all(pids: &[u32], sig: rustix::process::Signal) {
        for &p in pids {
            if let Some(pid) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    }

    /// Why a signal kills the guests before it drops anything else (backend::live): libssh2
    /// frees an open channel by asking the far end to close it and waiting for the answer, up
    /// to the session's timeout. A command dropped before it ended waits that long on a
    /// server that does not answer (here stopped), and not at all on one that is gone.
    #[test]
    #[cfg_attr(
        not(feature = "full-tests"),
        ignore = "full tier: starts an SSH server as root (~2 s)"
    )]
    fn an_unfinished_command_is_dropped_at_once_when_its_server_is_gone_not_while_it_is_stopped() {
        let drop_time = |kill: bool| {
            let s = sshd();
            let ssh = connect(&s);
            let gated = ssh
                .start_gated(
                    "echo ready >&2; read go; return 0",
                    "ready",
                    Duration::from_secs(2),
                )
                .unwrap();
            let sessions = session_processes(&s);
            assert!(!sessions.is_empty(), "no sshd process serves the connection");
            let sig = if kill {
                rustix::process::Signal::KILL
            } else {
                rustix::process::Signal::STOP
            };
            signal_all(&sessions, sig);
            let t = Instant::now();
            drop(gated);
            let took = t.elapsed();
            signal_all(&sessions, rustix::process::Signal::CONT);
            took
        };
        let stopped = drop_time(false);
        assert!(
            stopped >= Duration::from_millis(1500),
            "a stopped server held the drop only {stopped:?} (the session's timeout is 2 s)"
        );
        let gone = drop_time(true);
        assert!(
            gone < Duration::from_millis(500),
            "a killed server held the drop {gone:?}"
        );
    }
}
