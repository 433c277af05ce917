//! A stand-in host: the files a host probe reads, under a directory of the test's.

use crate::hostfs::{HostFs, LocalFs};

/// A stand-in host for tests: absolute paths are read under `root` (e.g. a fake /proc/cpuinfo
/// and /sys/class/dmi/id).
pub struct RootedFs {
    root: std::path::PathBuf,
}

impl RootedFs {
    pub fn new(root: &std::path::Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }
    fn at(&self, path: &str) -> std::path::PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
    /// Writes a stand-in file, making its directories.
    pub fn write(&self, path: &str, text: &str) {
        let p = self.at(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

impl HostFs for RootedFs {
    fn label(&self) -> String {
        format!("stand-in host at {}", self.root.display())
    }
    fn read_many(&self, paths: &[String]) -> Vec<Result<String, String>> {
        paths
            .iter()
            .map(|p| std::fs::read_to_string(self.at(p)).map_err(|e| format!("{p}: {e}")))
            .collect()
    }
    fn list_dir(&self, path: &str) -> Result<Vec<String>, String> {
        LocalFs.list_dir(&self.at(path).to_string_lossy())
    }
    fn exists(&self, path: &str) -> bool {
        self.at(path).exists()
    }
}
