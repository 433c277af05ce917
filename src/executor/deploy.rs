//! What goes into every guest once per boot, before any run: the payload, and every host file
//! the sweep's workloads read in the guest (the payload's catalog declares them), gzip-
//! compressed on the way when the workload reads a `.gz`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use ocrig_payload::catalog;

use crate::payload_bin;

/// One file to copy into each guest.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub host_path: PathBuf,
    pub guest_path: String,
    pub gzip: bool,
    /// Octal mode, e.g. "755".
    pub mode: &'static str,
}

/// The uploads of a sweep and what the host lacks.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployPlan {
    pub uploads: Vec<Upload>,
    /// Optional inputs the host does not have: skipped, each with a sentence saying so.
    pub warnings: Vec<String>,
}

/// The payload first, then each input of `commands` once. An input the host lacks is skipped
/// with a warning, unless the workload needs it with its default arguments: then this is an
/// error naming the file and the workload (a preflight failure: nothing is booted).
pub fn deploy_plan(
    payload: &Path,
    commands: &[&str],
    host_has: impl Fn(&Path) -> bool,
) -> Result<DeployPlan, String> {
    let mut uploads = vec![Upload {
        host_path: payload.to_path_buf(),
        guest_path: payload_bin::GUEST_PATH.to_string(),
        gzip: false,
        mode: "755",
    }];
    let mut warnings = Vec::new();
    let mut missing = Vec::new();
    for cmd in commands {
        let Some(spec) = catalog::workload(cmd) else {
            continue;
        };
        for input in spec.inputs {
            if uploads.iter().any(|u| u.guest_path == input.guest_path) {
                continue;
            }
            let host_path = PathBuf::from(input.host_path);
            if !host_has(&host_path) {
                let line = format!(
                    "workload {cmd} reads {} in the guest, but this host has no {}",
                    input.guest_path, input.host_path
                );
                if input.required_by_default {
                    missing.push(line);
                } else {
                    warnings.push(format!("{line}: skipped (the workload runs without it)"));
                }
                continue;
            }
            uploads.push(Upload {
                host_path,
                guest_path: input.guest_path.to_string(),
                gzip: input.gzip,
                mode: "644",
            });
        }
    }
    if missing.is_empty() {
        Ok(DeployPlan { uploads, warnings })
    } else {
        Err(format!(
            "preflight: {} (install the package that ships it, or point the workload elsewhere)",
            missing.join("; ")
        ))
    }
}

impl DeployPlan {
    /// The scenario's `guest.files` after the payload and the inputs: each executable in the
    /// guest where it is executable here. Err names a file this machine lacks (or cannot read
    /// as a file) or a guest path another upload takes.
    pub fn add_guest_files(&mut self, files: &[crate::scenario::GuestFile]) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        for f in files {
            let meta =
                std::fs::metadata(&f.from).map_err(|e| format!("guest.files: {}: {e}", f.from.display()))?;
            if !meta.is_file() {
                return Err(format!("guest.files: {} is not a file", f.from.display()));
            }
            if self.uploads.iter().any(|u| u.guest_path == f.to) {
                return Err(format!(
                    "guest.files: {} is already where ocrig puts its own file",
                    f.to
                ));
            }
            self.uploads.push(Upload {
                host_path: f.from.clone(),
                guest_path: f.to.clone(),
                gzip: false,
                mode: if meta.permissions().mode() & 0o111 != 0 {
                    "755"
                } else {
                    "644"
                },
            });
        }
        Ok(())
    }
}

/// An upload with its bytes read (and compressed) once, shared by every boot.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub guest_path: String,
    pub mode: &'static str,
    pub bytes: Arc<Vec<u8>>,
}

/// Reads every upload's bytes, gzip-compressing those marked so.
pub fn prepare(plan: &DeployPlan) -> anyhow::Result<Vec<Prepared>> {
    plan.uploads
        .iter()
        .map(|u| {
            let raw =
                std::fs::read(&u.host_path).with_context(|| format!("reading {}", u.host_path.display()))?;
            let bytes = if u.gzip { gzip(&raw)? } else { raw };
            Ok(Prepared {
                guest_path: u.guest_path.clone(),
                mode: u.mode,
                bytes: Arc::new(bytes),
            })
        })
        .collect()
}

fn gzip(raw: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(raw)?;
    Ok(enc.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_files_follow_with_their_mode_or_are_refused_with_the_reason() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let (script, data) = (tmp.path().join("bench.sh"), tmp.path().join("data.txt"));
        std::fs::write(&script, "#!/bin/sh\necho 1\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&data, "x").unwrap();
        let file = |from: &Path, to: &str| crate::scenario::GuestFile {
            from: from.to_path_buf(),
            to: to.into(),
        };
        let mut p = deploy_plan(Path::new("/p"), &["lock"], |_| true).unwrap();
        p.add_guest_files(&[file(&script, "/root/bench.sh"), file(&data, "/root/in/data.txt")])
            .unwrap();
        let modes: Vec<(&str, &str)> = p.uploads[1..]
            .iter()
            .map(|u| (u.guest_path.as_str(), u.mode))
            .collect();
        assert_eq!(modes, [("/root/bench.sh", "755"), ("/root/in/data.txt", "644")]);
        let e = p
            .add_guest_files(&[file(&tmp.path().join("nope"), "/x")])
            .unwrap_err();
        assert!(e.contains("nope") && e.contains("No such file"), "{e}");
        let e = p.add_guest_files(&[file(tmp.path(), "/x")]).unwrap_err();
        assert!(e.contains("is not a file"), "{e}");
        let e = p
            .add_guest_files(&[file(&data, payload_bin::GUEST_PATH)])
            .unwrap_err();
        assert!(e.contains("already where ocrig puts its own file"), "{e}");
    }

    #[test]
    fn the_payload_always_goes_first() {
        let p = deploy_plan(Path::new("/p"), &["lock", "hog"], |_| true).unwrap();
        assert_eq!(p.uploads[0].guest_path, payload_bin::GUEST_PATH);
        assert_eq!(p.uploads[0].mode, "755");
    }

    #[test]
    fn every_declared_input_is_planned_once_or_refused_when_required() {
        let all: Vec<&str> = catalog::WORKLOADS.iter().map(|w| w.name).collect();
        let twice: Vec<&str> = all.iter().chain(all.iter()).copied().collect();
        let p = deploy_plan(Path::new("/p"), &twice, |_| true).unwrap();
        let declared: std::collections::BTreeSet<&str> = catalog::WORKLOADS
            .iter()
            .flat_map(|w| w.inputs.iter().map(|i| i.guest_path))
            .collect();
        assert_eq!(p.uploads.len(), 1 + declared.len(), "each input once");
        for w in catalog::WORKLOADS {
            for i in w.inputs {
                let u = p.uploads.iter().find(|u| u.guest_path == i.guest_path).unwrap();
                assert_eq!((u.host_path.to_str(), u.gzip), (Some(i.host_path), i.gzip));
            }
        }
        // Without the files: optional ones warn, required ones refuse.
        let none = deploy_plan(Path::new("/p"), &all, |p| p == Path::new("/p"));
        let required = catalog::WORKLOADS
            .iter()
            .flat_map(|w| w.inputs)
            .any(|i| i.required_by_default);
        match none {
            Ok(p) => {
                assert!(!required);
                assert_eq!(p.uploads.len(), 1);
                assert_eq!(p.warnings.len(), declared.len());
            }
            Err(e) => assert!(required && e.contains("preflight"), "{e}"),
        }
    }

    #[test]
    fn gzip_inputs_are_compressed_and_decompress_to_the_original() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("client.txt");
        let text = "0 0 Deltree \"/clients/client0\" NT_STATUS_OK\n".repeat(1000);
        std::fs::write(&src, &text).unwrap();
        let plan = DeployPlan {
            uploads: vec![
                Upload {
                    host_path: src.clone(),
                    guest_path: "/tmp/client.txt.gz".into(),
                    gzip: true,
                    mode: "644",
                },
                Upload {
                    host_path: src,
                    guest_path: "/tmp/client.txt".into(),
                    gzip: false,
                    mode: "644",
                },
            ],
            warnings: vec![],
        };
        let prepared = prepare(&plan).unwrap();
        assert!(prepared[0].bytes.len() < text.len() / 10);
        let mut back = String::new();
        flate2::read::GzDecoder::new(prepared[0].bytes.as_slice())
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, text);
        assert_eq!(prepared[1].bytes.as_slice(), text.as_bytes());
    }
}
