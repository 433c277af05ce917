//! SSH to a guest through libssh2 (`ssh2`): public-key login as root, the image's host key
//! pinned, commands with deadlines, uploads through `cat` (dropbear ships no SFTP server).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
        Ok(Self { session })
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

    /// Copies `data` to `remote` with mode `mode` (octal string like "755").
    pub fn upload(&self, data: &[u8], remote: &str, mode: &str, timeout: Duration) -> anyhow::Result<()> {
        let tmp = format!("{remote}.part");
        let cmd = format!("cat > {tmp} && chmod {mode} {tmp} && mv -f {tmp} {remote}");
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
    /// for one line on stdin before doing its work (the payload's `--go-stdin`).
    pub fn start_gated(
        &self,
        command: &str,
        ready_line: &str,
        timeout: Duration,
    ) -> anyhow::Result<GatedCommand> {
        let mut ch = self.channel(timeout)?;
        ch.exec(command)
            .with_context(|| format!("starting `{command}`"))?;
        let mut early = String::new();
        {
            let mut err = BufReader::new(ch.stderr());
            loop {
                let mut line = String::new();
                let n = err
                    .read_line(&mut line)
                    .with_context(|| format!("waiting for `{command}` to be ready"))?;
                if n == 0 {
                    break;
                }
                if line.trim_end() == ready_line {
                    return Ok(GatedCommand {
                        ch,
                        command: command.to_string(),
                        early,
                        stdout_head: Vec::new(),
                    });
                }
                early.push_str(&line);
            }
        }
        let out = finish(ch, command)?;
        anyhow::bail!(
            "`{command}` exited ({}) before it was ready: {}{}",
            out.status,
            early.trim(),
            out.stderr.trim()
        )
    }
}

/// A command started with [`GuestSsh::start_gated`], waiting for its go signal.
pub struct GatedCommand {
    ch: Channel,
    command: String,
    early: String,
    /// Stdout read past a marker by [`GatedCommand::stdout_until`], handed back by `wait`.
    stdout_head: Vec<u8>,
}

impl GatedCommand {
    /// Reads stdout up to and including the line `marker` (which the command printed before
    /// its ready line, so it is already here); returns what came before it.
    pub fn stdout_until(&mut self, marker: &str) -> anyhow::Result<String> {
        let needle = format!("{marker}\n");
        let mut buf = std::mem::take(&mut self.stdout_head);
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(at) = find(&buf, needle.as_bytes()) {
                self.stdout_head = buf.split_off(at + needle.len());
                buf.truncate(at);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
            let n = self
                .ch
                .read(&mut chunk)
                .with_context(|| format!("reading the output of `{}` up to {marker}", self.command))?;
            anyhow::ensure!(n > 0, "`{}` ended its output before {marker}", self.command);
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends the go line; returns the instant it was written. Stdin stays open: the caller
    /// closes it with [`GatedCommand::end_stdin`] once every guest has its go, so releasing N
    /// guests costs N packets, not 2N.
    pub fn go(&mut self) -> anyhow::Result<Instant> {
        self.ch.write_all(b"go\n")?;
        self.ch.flush()?;
        Ok(Instant::now())
    }

    /// Closes the command's stdin (after its go line).
    pub fn end_stdin(&mut self) -> anyhow::Result<()> {
        Ok(self.ch.send_eof()?)
    }

    /// Waits for the command to finish (the session's timeout bounds each read).
    pub fn wait(self) -> anyhow::Result<ExecOutput> {
        let mut out = finish(self.ch, &self.command)?;
        out.stderr.insert_str(0, &self.early);
        out.stdout
            .insert_str(0, &String::from_utf8_lossy(&self.stdout_head));
        Ok(out)
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
