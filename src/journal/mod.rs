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

/// The journal format this ocrig writes, and the only one it reads: every field a figure needs
/// is in it, so no reader keeps a branch for a shape an earlier build wrote. 1 (no field) and
/// 2 were written by development builds of 0.1.0 before the format settled; a journal in them
/// is refused with the ocrig version that wrote it ([`readable_format`]). 3: what each run
/// declares of its attempt (`attempt_records`, `slot` with its `block`), what the sweep runs
/// on in the header's `runs_on` fields (`boots` among them), `schedule` and `guest_start`.
pub const JOURNAL_FORMAT: u32 = 3;

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
mod tests;
