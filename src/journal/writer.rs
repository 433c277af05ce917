//! Appending to a journal: every record fsync'd as it is known, a torn tail cut off (and kept
//! aside) before the first append, a newer format refused.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::*;

/// Appending to the journal failed (no space, I/O error, read-only file system): the sweep stops
/// at once. The journal ends at its last whole record, so `--resume` continues it once the cause
/// is gone.
#[derive(Debug, thiserror::Error)]
#[error("cannot append to {}: {cause}", path.display())]
pub struct JournalWriteFailed {
    pub path: PathBuf,
    pub cause: String,
}

/// Appends entries to a journal, fsync'ing each one. Every append lands whole or not at all: a
/// write that fails is cut back off the file, and once one has failed every later append fails
/// too (with the first cause), so no scheduler of any host appends after a failed one.
pub struct JournalWriter {
    file: File,
    path: PathBuf,
    /// Length of the file's whole records.
    len: u64,
    failed: Option<String>,
}

impl JournalWriter {
    /// Opens (creating if needed) `dir/journal.jsonl` for appending. A journal whose tail is
    /// not a whole line (a crash or full disk mid-write) is first cut back to its last newline;
    /// the cut bytes are kept beside it as `journal.jsonl.torn-<n>` and the cut is said on
    /// stderr.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening journal {}", path.display()))?;
        let len = cut_torn_tail(&mut file, &path)?;
        Ok(Self {
            file,
            path,
            len,
            failed: None,
        })
    }

    pub fn append(&mut self, entry: &Entry) -> anyhow::Result<()> {
        self.append_all(std::slice::from_ref(entry))
    }

    /// Appends entries with one write and one fsync (an attempt's records land together; should
    /// a crash cut the write short, [`RunRecord::attempt_records`] tells the attempt is partial
    /// and the next open cuts the torn line off). Fails with [`JournalWriteFailed`].
    pub fn append_all(&mut self, entries: &[Entry]) -> anyhow::Result<()> {
        if let Some(cause) = &self.failed {
            return Err(self.write_failed(format!("an earlier append failed: {cause}")));
        }
        let mut text = String::new();
        for e in entries {
            text.push_str(&serde_json::to_string(e)?);
            text.push('\n');
        }
        match self
            .file
            .write_all(text.as_bytes())
            .and_then(|_| self.file.sync_data())
        {
            Ok(()) => {
                self.len += text.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Take back whatever part of the write landed; if even that fails, the next
                // open cuts the torn tail.
                let _ = self.file.set_len(self.len).and_then(|_| self.file.sync_data());
                let cause = e.to_string();
                self.failed = Some(cause.clone());
                Err(self.write_failed(cause))
            }
        }
    }

    fn write_failed(&self, cause: String) -> anyhow::Error {
        JournalWriteFailed {
            path: self.path.clone(),
            cause,
        }
        .into()
    }
}

/// Cuts a tail that is not a whole line off `file`, keeping it beside the journal; returns the
/// length left.
pub(super) fn cut_torn_tail(file: &mut File, path: &Path) -> anyhow::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    // Find the last newline, reading backwards in blocks (a torn record is at most one line).
    let mut end = len;
    let mut keep = 0;
    let mut buf = vec![0u8; 64 * 1024];
    'scan: while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            keep = start + i as u64 + 1;
            break 'scan;
        }
        end = start;
    }
    if keep == len {
        return Ok(len);
    }
    let mut torn = Vec::with_capacity((len - keep) as usize);
    file.seek(SeekFrom::Start(keep))?;
    file.read_to_end(&mut torn)?;
    let name = path
        .file_name()
        .map_or("journal".into(), |n| n.to_string_lossy().into_owned());
    let mut n = 1;
    let mut aside = path.with_file_name(format!("{name}.torn-{n}"));
    while aside.exists() {
        n += 1;
        aside = path.with_file_name(format!("{name}.torn-{n}"));
    }
    std::fs::write(&aside, &torn)
        .and_then(|_| File::open(&aside)?.sync_all())
        .with_context(|| {
            format!(
                "keeping the torn tail of {} in {}",
                path.display(),
                aside.display()
            )
        })?;
    file.set_len(keep)
        .and_then(|_| file.sync_data())
        .with_context(|| format!("cutting the torn tail off {}", path.display()))?;
    eprintln!(
        "ocrig: {} ended in a torn line ({} bytes, left by a crash or a full disk mid-write): cut back to its last whole record; the cut bytes are in {}",
        path.display(),
        torn.len(),
        aside.display()
    );
    Ok(keep)
}
