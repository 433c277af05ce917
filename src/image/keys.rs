//! Per-image keys: an OpenSSH ed25519 client key pair and a dropbear ed25519 host key.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use base64::Engine as _;

use super::cmd;

pub struct ClientKey {
    /// "ssh-ed25519 AAAA... ocrig-client" (the private key is `<dir>/id_ed25519`).
    pub public_line: String,
}

pub struct HostKey {
    /// The dropbear-format private key (goes into the initramfs).
    pub private: Vec<u8>,
    /// "ssh-ed25519 AAAA... comment"
    pub public_line: String,
}

/// `ssh-keygen -t ed25519 -N ''` into `dir/id_ed25519{,.pub}` (OpenSSH format, loadable by libssh2).
pub fn client_key(dir: &Path) -> Result<ClientKey> {
    let private = dir.join("id_ed25519");
    cmd::run(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "ocrig-client", "-f"])
            .arg(&private),
    )?;
    let pub_path = dir.join("id_ed25519.pub");
    let public_line = fs::read_to_string(&pub_path)
        .with_context(|| format!("reading {}", pub_path.display()))?
        .trim()
        .to_string();
    blob_from_line(&public_line)?;
    Ok(ClientKey { public_line })
}

/// `dropbearkey -t ed25519` in `scratch`, public line via `dropbearkey -y`.
pub fn host_key(scratch: &Path) -> Result<HostKey> {
    let path = scratch.join("dropbear_ed25519_host_key");
    cmd::run(
        Command::new("dropbearkey")
            .args(["-t", "ed25519", "-f"])
            .arg(&path),
    )?;
    let out = cmd::run(Command::new("dropbearkey").args(["-y", "-f"]).arg(&path))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let public_line = text
        .lines()
        .find(|l| l.starts_with("ssh-ed25519 "))
        .with_context(|| {
            format!(
                "`dropbearkey -y -f {}` printed no ssh-ed25519 line: {text}",
                path.display()
            )
        })?
        .trim()
        .to_string();
    let private = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    fs::remove_file(&path).ok();
    Ok(HostKey { private, public_line })
}

/// The raw public key blob of an OpenSSH public key line — what `ssh2::Session::host_key()` returns.
pub fn blob_from_line(line: &str) -> Result<Vec<u8>> {
    let mut it = line.split_whitespace();
    let (Some(kind), Some(b64)) = (it.next(), it.next()) else {
        bail!("not an OpenSSH public key line: `{line}`");
    };
    let blob = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .with_context(|| format!("bad base64 in public key line `{line}`"))?;
    // The blob starts with the key type as an SSH string: u32 length + name.
    let ok = blob.len() > 4 + kind.len()
        && blob[..4] == (kind.len() as u32).to_be_bytes()
        && &blob[4..4 + kind.len()] == kind.as_bytes();
    if !ok {
        bail!("public key blob does not start with its type `{kind}`");
    }
    Ok(blob)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_generate_and_parse() {
        let dir = tempfile::tempdir().unwrap();
        let c = client_key(dir.path()).unwrap();
        assert!(c.public_line.starts_with("ssh-ed25519 "));
        let pem = fs::read_to_string(dir.path().join("id_ed25519")).unwrap();
        assert!(pem.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
        let h = host_key(dir.path()).unwrap();
        let blob = blob_from_line(&h.public_line).unwrap();
        assert_eq!(blob.len(), 4 + 11 + 4 + 32);
        assert!(!h.private.is_empty());
        assert!(blob_from_line("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIA==").is_err());
    }
}
