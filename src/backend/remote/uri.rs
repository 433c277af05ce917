//! A remote libvirt URI (`qemu+ssh://user@host:port/system?keyfile=…&known_hosts=…`), parsed.

use std::path::PathBuf;

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

pub(super) fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

pub(super) fn percent_decode(s: &str) -> String {
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
