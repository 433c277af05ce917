//! Running external tools (apt, dpkg, depmod, ssh-keygen, ...) with errors that say what failed.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// The command line as a human would type it (for error messages).
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    if let Some(dir) = cmd.get_current_dir() {
        s.push_str(&format!(" (in {})", dir.display()));
    }
    s
}

/// Run to completion; a non-zero exit is an error carrying the command line and its stderr.
pub fn run(cmd: &mut Command) -> Result<Output> {
    let what = describe(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{what}` (is it installed?)"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let detail = if stderr.trim().is_empty() { stdout } else { stderr };
        bail!("`{what}` failed ({}): {}", out.status, tail(detail.trim(), 2000));
    }
    Ok(out)
}

/// Run and return stdout as text.
pub fn stdout<I, S>(program: &str, args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = run(Command::new(program).args(args))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// sha256 of a file: `sha256sum` (fast even in debug builds), else hashed in-process.
pub fn sha256_file(path: &Path) -> Result<String> {
    if let Ok(out) = Command::new("sha256sum")
        .arg("-b")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        && out.status.success()
        && let Some(h) = String::from_utf8_lossy(&out.stdout).split_whitespace().next()
        && h.len() == 64
    {
        return Ok(h.to_string());
    }
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex(&h.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_command_reports_stderr() {
        let err = run(Command::new("sh").args(["-c", "echo boom >&2; exit 3"])).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("boom") && msg.contains("sh -c"), "{msg}");
    }

    #[test]
    fn file_hash_matches_in_memory_hash() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"ocrig").unwrap();
        assert_eq!(sha256_file(&p).unwrap(), sha256_hex(b"ocrig"));
    }

    #[test]
    fn missing_program_is_named() {
        let err = run(&mut Command::new("ocrig-no-such-tool")).unwrap_err();
        assert!(format!("{err:#}").contains("ocrig-no-such-tool"));
    }
}
