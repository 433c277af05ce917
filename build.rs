//! Builds the static guest payload that `ocrig` carries inside itself (`src/payload_bin.rs`), so
//! an installed `ocrig` needs neither its source tree nor cargo at run time.
//!
//! The payload is a second cargo build of the `ocrig-payload` workspace member, for the x86_64
//! glibc target with `+crt-static` (a binary that runs in any guest), in its own target
//! directory (`<target>/payload`, shared by debug and release builds of `ocrig`, so it is built
//! once and then only when `guest-payload/` changes). `OCRIG_PAYLOAD_PREBUILT=PATH` embeds a
//! payload built elsewhere instead (a distribution package, a cross build).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

const TARGET: &str = "x86_64-unknown-linux-gnu";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=guest-payload");
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-env-changed=OCRIG_PAYLOAD_PREBUILT");

    let built = match env::var_os("OCRIG_PAYLOAD_PREBUILT") {
        Some(p) => PathBuf::from(p),
        None => build(&manifest_dir, &payload_target_dir(&out_dir)),
    };
    let bytes =
        fs::read(&built).unwrap_or_else(|e| panic!("reading the guest payload {}: {e}", built.display()));
    assert!(
        bytes.starts_with(b"\x7fELF"),
        "{} is not an ELF binary",
        built.display()
    );
    fs::write(out_dir.join("ocrig-payload"), &bytes).expect("writing OUT_DIR/ocrig-payload");
    let sha = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    println!("cargo:rustc-env=OCRIG_PAYLOAD_SHA256={sha}");
}

/// `<target>/payload`: the cargo target directory is the first ancestor of `OUT_DIR` that
/// cargo tagged with `CACHEDIR.TAG`; else a directory inside `OUT_DIR`.
fn payload_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(|t| t.join("payload"))
        .unwrap_or_else(|| out_dir.join("payload-target"))
}

fn build(manifest_dir: &Path, target_dir: &Path) -> PathBuf {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(manifest_dir)
        .args(["build", "--quiet", "--release", "-p", "ocrig-payload"])
        .args(["--bin", "ocrig-payload", "--target", TARGET, "--target-dir"])
        .arg(target_dir)
        // With --target, RUSTFLAGS reach only the payload, not build scripts or proc macros.
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        // Stripped: the binary crosses an emulated NIC into every guest (19 MB → ~2 MB).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    // What the outer build set for itself must not steer this one: its flags, its target
    // directory, and a linting wrapper (`cargo clippy` runs build scripts with clippy-driver as
    // the workspace wrapper).
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running cargo to build the guest payload: {e}"));
    if !out.status.success() {
        panic!(
            "building the static guest payload failed (is the target installed? `rustup target \
             add {TARGET}`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let bin = target_dir.join(TARGET).join("release/ocrig-payload");
    assert!(bin.is_file(), "cargo succeeded but {} is missing", bin.display());
    bin
}
