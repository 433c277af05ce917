//! `scripts/setup --plan` on the files of other machines (their /etc/os-release and apt
//! sources, as those distributions install them, laid out under `OCRIG_SETUP_ROOT`): which
//! packages it would install for a user and for the tests, the backports source it derives
//! from the machine's own sources (deb822 or one-line), and a clear refusal, with nothing
//! changed, on a distribution it does not know. Runs the real script; needs no root.

use std::path::Path;
use std::process::{Command, Output};

fn machine(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn plan(root: &Path, args: &[&str]) -> Output {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup"))
        .arg("--plan")
        .args(args)
        .env("OCRIG_SETUP_ROOT", root)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

const BOOKWORM: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\n";

#[test]
fn debian_12_with_a_one_line_sources_list_gets_backports_from_its_own_mirror() {
    // As the Debian installer writes it: one-line entries, the security archive first.
    let m = machine(&[
        ("/etc/os-release", BOOKWORM),
        (
            "/etc/apt/sources.list",
            "# deb cdrom:[Debian GNU/Linux 12.8.0]/ bookworm main\n\
             deb http://security.debian.org/debian-security bookworm-security main\n\
             deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://ftp.fr.debian.org/debian/ bookworm main non-free-firmware\n\
             deb-src http://ftp.fr.debian.org/debian/ bookworm main\n",
        ),
    ]);
    let out = text(&plan(m.path(), &[]));
    assert!(out.starts_with("distribution: debian 12 (bookworm)\n"), "{out}");
    assert!(
        out.contains(
            "backports: /etc/apt/sources.list.d/ocrig-backports.list\n  deb [arch=amd64 \
             signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://ftp.fr.debian.org/debian/ \
             bookworm-backports main\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("packages from bookworm-backports: qemu-system-x86 "),
        "{out}"
    );
    // A user gets no browser, kernel sources or compilers.
    assert!(
        !out.contains("chromium") && !out.contains("linux-source"),
        "{out}"
    );
    // The tests' packages are asked for apart.
    let out = text(&plan(m.path(), &["--tests"]));
    assert!(
        out.contains("packages for the tests: chromium fonts-dejavu-core linux-source-6.1 build-essential"),
        "{out}"
    );
}

#[test]
fn debian_12_with_deb822_sources_gets_a_deb822_backports_stanza_and_none_twice() {
    let sources = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
                   Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                   Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\
                   Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
    let m = machine(&[
        ("/etc/os-release", BOOKWORM),
        ("/etc/apt/sources.list.d/debian.sources", sources),
    ]);
    let out = text(&plan(m.path(), &[]));
    assert!(
        out.contains(
            "backports: /etc/apt/sources.list.d/ocrig-backports.sources\n  Types: deb\n  \
             URIs: http://deb.debian.org/debian\n  Suites: bookworm-backports\n  Components: main\n  \
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        ),
        "{out}"
    );
    // Once added (or where the machine has backports already), nothing more.
    let m = machine(&[
        ("/etc/os-release", BOOKWORM),
        ("/etc/apt/sources.list.d/debian.sources", sources),
        (
            "/etc/apt/sources.list.d/ocrig-backports.sources",
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\n",
        ),
    ]);
    assert!(text(&plan(m.path(), &[])).contains("backports: already configured\n"));
}

#[test]
fn debian_13_and_ubuntu_need_no_backports_and_get_their_own_kernel_sources() {
    let cases = [
        (
            "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\n",
            "linux-source-6.12",
            true,
        ),
        (
            "PRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\nVERSION_CODENAME=noble\n",
            "linux-source-6.8.0",
            false,
        ),
        (
            "PRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\nVERSION_CODENAME=jammy\n",
            "linux-source-5.15.0",
            false,
        ),
    ];
    for (os, source, browser) in cases {
        let m = machine(&[("/etc/os-release", os)]);
        let out = text(&plan(m.path(), &["--tests"]));
        assert!(out.contains("backports: not needed\n"), "{out}");
        assert!(out.contains("\npackages: qemu-system-x86 "), "{out}");
        assert!(out.contains(&format!(" {source} ")), "{out}");
        assert_eq!(
            out.contains("packages for the tests: chromium "),
            browser,
            "{out}"
        );
        assert_eq!(out.contains("no browser:"), !browser, "{out}");
        // Ubuntu (the cases without a browser) has no Debian kernel for the default guest.
        assert_eq!(
            out.contains("guest kernel: ubuntu ") && out.contains("packages no Debian linux-image-amd64"),
            !browser,
            "{out}"
        );
        assert!(
            out.contains("libvirt: /etc/libvirt/qemu.conf left as it is (ocrig's domains say how their QEMU runs in their own XML)"),
            "{out}"
        );
    }
}

#[test]
fn the_hosts_libvirt_settings_are_never_changed() {
    let m = machine(&[
        ("/etc/os-release", BOOKWORM),
        (
            "/etc/apt/sources.list",
            "deb http://deb.debian.org/debian bookworm main\n",
        ),
    ]);
    // Nor with the option older READMEs gave to decline the change.
    for args in [&[][..], &["--no-libvirt-config"][..]] {
        let out = text(&plan(m.path(), args));
        assert!(
            out.contains("libvirt: /etc/libvirt/qemu.conf left as it is") && !out.contains("security_driver"),
            "{out}"
        );
    }
}

#[test]
fn an_unknown_distribution_or_a_debian_12_without_sources_is_refused_with_what_to_do() {
    let m = machine(&[(
        "/etc/os-release",
        "PRETTY_NAME=\"Fedora Linux 41\"\nID=fedora\nVERSION_ID=41\n",
    )]);
    let o = plan(m.path(), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("fedora 41 (Fedora Linux 41) is not one this set-up knows")
            && err.contains("Install QEMU")
            && err.contains("nothing was changed"),
        "{err}"
    );
    let m = machine(&[("/etc/os-release", BOOKWORM)]);
    let o = plan(m.path(), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("no apt source for Debian bookworm found"), "{err}");
    // An unknown argument.
    let o = plan(m.path(), &["--bogus"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown argument '--bogus'"));
}

/// The set-up's package resolution for real on fresh Debian 12 (one-line sources) and 13 (deb822)
/// chroots: `scripts/check-setup` (debootstrap, cached under ~/.cache/ocrig/setup-chroots;
/// ~65 s the first time here for the two Debian releases and ~65 s more for the two Ubuntu ones,
/// 2026-12-06).
#[test]
#[cfg_attr(
    not(feature = "full-tests"),
    ignore = "full tier: debootstraps Debian 12 and 13 and Ubuntu 22.04 and 24.04 chroots as root (~130 s the first time)"
)]
fn the_set_up_resolves_every_package_group_in_fresh_debian_and_ubuntu_chroots() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED LOUDLY: debootstrap and chroot need root");
        return;
    }
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check-setup"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for (case, release, source) in [
        ("bookworm-oneline", "debian 12", "linux-source-6.1"),
        ("trixie-deb822", "debian 13", "linux-source-6.12"),
        ("jammy-ubuntu", "ubuntu 22.04", "linux-source-5.15.0"),
        ("noble-ubuntu", "ubuntu 24.04", "linux-source-6.8.0"),
    ] {
        assert!(
            err.contains(&format!("check-setup: {case}: every package group resolves")),
            "{err}"
        );
        assert!(
            err.contains(&format!("every package group resolves on {release}")),
            "{err}"
        );
        assert!(err.contains(&format!(" {source} ")), "{err}");
    }
    assert!(
        err.contains("setup: added /etc/apt/sources.list.d/ocrig-backports.list"),
        "{err}"
    );
}
