//! The libvirt version a remote host must have, and the check.

/// The oldest libvirt a remote host may run: Debian 12's (9.0.0). Overridable for tests of the
/// refusal (`OCRIG_MIN_LIBVIRT=major.minor.micro`).
pub const MIN_LIBVIRT: (u32, u32, u32) = (9, 0, 0);

/// `major.minor.micro` from libvirt's version number.
pub fn version_triple(v: u32) -> (u32, u32, u32) {
    (v / 1_000_000, (v / 1000) % 1000, v % 1000)
}

/// The oldest libvirt accepted on a remote host (see [`MIN_LIBVIRT`]).
pub fn min_libvirt() -> (u32, u32, u32) {
    std::env::var("OCRIG_MIN_LIBVIRT")
        .ok()
        .and_then(|s| {
            let mut it = s.split('.').map(|p| p.parse::<u32>().ok());
            Some((
                it.next()??,
                it.next().flatten().unwrap_or(0),
                it.next().flatten().unwrap_or(0),
            ))
        })
        .unwrap_or(MIN_LIBVIRT)
}

/// Refuses a libvirt older than the minimum.
pub fn check_libvirt_version(label: &str, v: u32, min: (u32, u32, u32)) -> Result<(), String> {
    let have = version_triple(v);
    if have < min {
        return Err(format!(
            "{label} runs libvirt {}.{}.{}, older than {}.{}.{}, the oldest ocrig supports on a remote host",
            have.0, have.1, have.2, min.0, min.1, min.2
        ));
    }
    Ok(())
}
