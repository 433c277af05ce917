use super::*;
use std::path::{Path, PathBuf};

#[test]
fn uris_are_taken_apart() {
    assert_eq!(parse("qemu:///system"), Ok(None));
    assert_eq!(parse("qemu+unix:///system?socket=/x"), Ok(None));
    let r = parse("qemu+ssh://root@hostA/system").unwrap().unwrap();
    assert_eq!(
        (r.transport.as_str(), r.user.as_str(), r.host.as_str(), r.port),
        ("ssh", "root", "hostA", 22)
    );
    assert!(r.known_hosts.ends_with(".ssh/known_hosts"));
    let r = parse("qemu+libssh2://u@127.0.0.1:2222/system?keyfile=/k/id&known_hosts=/k/kh&sshauth=privkey")
        .unwrap()
        .unwrap();
    assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 2222));
    assert_eq!(r.keyfile, PathBuf::from("/k/id"));
    assert_eq!(r.known_hosts, PathBuf::from("/k/kh"));
    assert_eq!(r.label(), "u@127.0.0.1:2222");
    let r = parse("qemu+ssh://root@[::1]:23/system?known_hosts=/a%20b")
        .unwrap()
        .unwrap();
    assert_eq!((r.host.as_str(), r.port), ("::1", 23));
    assert_eq!(r.known_hosts, PathBuf::from("/a b"));
    assert!(parse("qemu+tcp://hostA/system").unwrap_err().contains("over SSH"));
    assert!(
        parse("qemu://hostA/system")
            .unwrap_err()
            .contains("without a transport")
    );
    assert!(
        parse("xen+ssh://hostA/")
            .unwrap_err()
            .contains("driver must be qemu")
    );
    assert!(
        parse("qemu+ssh://hostA:x/system")
            .unwrap_err()
            .contains("not a number")
    );
    assert!(
        parse("qemu+ssh://h/system?no_verify=1")
            .unwrap_err()
            .contains("pins")
    );
    assert!(parse("nonsense").is_err());
}

#[test]
fn many_files_come_back_in_order_with_failures_marked() {
    let paths: Vec<String> = vec!["/a".into(), "/b".into(), "/c".into()];
    let out = format!("one\n{OK_MARK}{ERR_MARK}three{OK_MARK}");
    let r = split_many(&out, &paths);
    assert_eq!(r[0].as_deref(), Ok("one\n"));
    assert!(r[1].as_ref().unwrap_err().contains("/b"));
    assert_eq!(r[2].as_deref(), Ok("three"));
    // The command really prints that through a shell.
    let cmd = read_many_command(&["/proc/self/stat".into(), "/nonexistent".into()]).unwrap();
    let o = std::process::Command::new("sh")
        .args(["-c", &cmd])
        .output()
        .unwrap();
    let r = split_many(
        &String::from_utf8_lossy(&o.stdout),
        &["/proc/self/stat".into(), "/nonexistent".into()],
    );
    assert!(r[0].as_ref().unwrap().contains('('), "{r:?}");
    assert!(r[1].is_err());
}

#[test]
fn libvirt_versions_are_compared() {
    assert_eq!(version_triple(11_003_000), (11, 3, 0));
    assert!(check_libvirt_version("h", 11_003_000, MIN_LIBVIRT).is_ok());
    let e = check_libvirt_version("root@h:22", 8_000_000, MIN_LIBVIRT).unwrap_err();
    assert!(
        e.contains("root@h:22 runs libvirt 8.0.0, older than 9.0.0"),
        "{e}"
    );
}

#[test]
fn claim_command_nests_one_flock_per_cpu() {
    let c = claim_command(&[0, 3], false);
    assert!(c.contains("flock -n -E 75 \"$d/cpus/cpu0.lock\" flock -n -E 75 \"$d/cpus/cpu3.lock\" sh -c"));
    assert!(!claim_command(&[1], true).contains("-n"));
}

/// Against the real libvirtd on this machine (the storage calls are the same over SSH).
#[test]
#[cfg_attr(not(feature = "full-tests"), ignore = "full tier: needs libvirtd (~1 s)")]
fn volumes_are_uploaded_once_by_content_and_an_unfinished_one_is_replaced() {
    let uri = "qemu:///system";
    virt::error::clear_error_callback();
    let conn = virt::connect::Connect::open(Some(uri)).expect("libvirtd on qemu:///system");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("blob.bin");
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut data = data;
    data.extend_from_slice(format!("{:?}", std::time::SystemTime::now()).as_bytes());
    std::fs::write(&f, &data).unwrap();
    let forget = || UPLOADED.lock().unwrap().get_or_insert_default().clear();
    let uploads = || UPLOADS.get().0;

    let n0 = uploads();
    let path = upload_volume(&conn, uri, &f).unwrap();
    assert_eq!(uploads(), n0 + 1);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        data,
        "the volume holds the file's bytes"
    );
    assert!(
        path.starts_with(POOL_PATH) && path.ends_with("-blob.bin"),
        "{path}"
    );
    // Present with its marker: not sent again, also by a fresh process (no local cache).
    forget();
    assert_eq!(upload_volume(&conn, uri, &f).unwrap(), path);
    assert_eq!(uploads(), n0 + 1);

    // An upload that died half way (volume without marker) is replaced.
    let p = pool(&conn).unwrap();
    let name = path.rsplit('/').next().unwrap().to_string();
    p.lookup_storage_vol_by_name(&format!("{name}.ok"))
        .unwrap()
        .delete(0)
        .unwrap();
    std::fs::write(&path, b"truncated").unwrap();
    forget();
    assert_eq!(upload_volume(&conn, uri, &f).unwrap(), path);
    assert_eq!(uploads(), n0 + 2);
    assert_eq!(std::fs::read(&path).unwrap(), data);
    for v in [name.clone(), format!("{name}.ok")] {
        p.lookup_storage_vol_by_name(&v).unwrap().delete(0).unwrap();
    }
}

#[test]
fn remote_workdirs_differ_per_local_workdir() {
    let a = remote_workdir(Path::new("/r/guests/x/boot1"));
    assert!(a.starts_with("/var/tmp/ocrig/") && a.len() == "/var/tmp/ocrig/".len() + 16);
    assert_ne!(a, remote_workdir(Path::new("/r/guests/x/boot2")));
}
