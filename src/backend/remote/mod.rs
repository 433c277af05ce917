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

mod claim;
mod console;
mod ssh;
mod tunnel;
mod uri;
mod version;
mod volumes;

pub use claim::*;
pub use console::*;
pub use ssh::*;
pub use tunnel::*;
pub use uri::*;
pub use version::*;
pub use volumes::*;

#[cfg(test)]
mod tests;
