//! Guest access: waiting for a booted guest, SSH sessions (ssh2) with a pinned host key,
//! uploads, and commands with deadlines. Blocking code; callers run it on blocking threads.

pub mod ready;
pub mod ssh;
