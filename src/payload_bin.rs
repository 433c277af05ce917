//! Finding (or building) the static guest payload binary that gets copied into every guest.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

pub const TARGET: &str = "x86_64-unknown-linux-gnu";
/// Where the payload lives inside a guest.
pub const GUEST_PATH: &str = "/tmp/ocrig-payload";

/// The payload to deploy: `$OCRIG_PAYLOAD` if set, else built from this source tree as a
/// static glibc binary (`+crt-static`) in `target/payload/` — incremental, so quick when fresh.
pub fn locate() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("OCRIG_PAYLOAD") {
        let p = PathBuf::from(p);
        anyhow::ensure!(p.is_file(), "OCRIG_PAYLOAD={} is not a file", p.display());
        return Ok(p);
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    anyhow::ensure!(
        src.join("guest-payload/Cargo.toml").is_file(),
        "no payload: set OCRIG_PAYLOAD to a static ocrig-payload binary (the source tree {} is gone)",
        src.display()
    );
    build_static(src)
}

fn build_static(src: &Path) -> anyhow::Result<PathBuf> {
    let target_dir = src.join("target/payload");
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(src)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "ocrig-payload",
            "--bin",
            "ocrig-payload",
        ])
        .args(["--target", TARGET, "--target-dir"])
        .arg(&target_dir)
        // With --target, RUSTFLAGS reach only the payload, not build scripts or proc macros.
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        // Stripped: the binary crosses an emulated NIC into every guest (19 MB → ~2 MB).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .context("running cargo to build the static payload")?;
    anyhow::ensure!(
        out.status.success(),
        "building the static payload failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = target_dir.join(TARGET).join("release/ocrig-payload");
    anyhow::ensure!(bin.is_file(), "cargo succeeded but {} is missing", bin.display());
    Ok(bin)
}
