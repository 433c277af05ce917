//! The append-only results journal: `journal.jsonl` in a results directory, and (in
//! [`accounting`]) the one rule for which of its records count. Below both the sweep that
//! writes it and the statistics that read it, so neither imports the other for it.
//!
//! The first line is a [`SweepHeader`] (what was asked); every later line is a [`RunRecord`]
//! (one guest's result of one run), appended and fsync'd as soon as it is known, so a crash
//! loses nothing that had finished. Statistics and reports are computed from this file alone.

pub mod accounting;
pub mod host;
pub mod scan;

pub const JOURNAL_FILE: &str = "journal.jsonl";

/// The journal format this ocrig writes and the newest it reads. 1: journals without the field;
/// 2: `resume` entries (what each `--resume` ran on, and which differences it accepted).
pub const JOURNAL_FORMAT: u32 = 2;

/// A file that is not a journal this ocrig can read (no header, a newer format, a malformed
/// line): bad input, exit status 2, and nothing is written.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAJournal(pub String);

mod line;
mod reader;
mod record;
mod writer;

pub use line::*;
pub use reader::*;
pub use record::*;
pub use writer::*;

#[cfg(test)]
pub(crate) mod tests;
