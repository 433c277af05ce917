//! Reading a journal: whole, or streamed in chunks parsed on every CPU and mapped as they come
//! (a long sweep's journal need not fit in memory), and one record again by its offset.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

use super::*;

/// A journal read back: the header and every complete run record, in order.
#[derive(Debug, Clone)]
pub struct Journal {
    pub header: SweepHeader,
    /// Read only by tests: every reader streams the journal ([`read_lines`]).
    #[cfg_attr(not(test), allow(dead_code))]
    pub runs: Vec<RunRecord>,
}

impl Journal {
    #[cfg(test)]
    /// Reads `dir/journal.jsonl` (or the file itself if `path` is a file). A torn tail (bytes
    /// after the last newline: a crash mid-write, whatever they hold) is ignored; any other
    /// malformed line is a [`NotAJournal`] error naming its number.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let read = read_mapped(path, false, |_: &SweepHeader, _: &mut (), r: RunRecord| r)?;
        Ok(Self {
            header: read.header,
            runs: read.runs,
        })
    }
}

/// The run record whose line starts `offset` bytes into the journal at `path` (a results
/// directory or the file), read again: a report keeps where a record is, not what only a few
/// of its records are drawn from.
pub fn read_record_at(path: &Path, offset: u64) -> anyhow::Result<RunRecord> {
    use std::io::BufRead;
    let file_path = journal_file(path);
    let mut f = File::open(&file_path).with_context(|| format!("opening {}", file_path.display()))?;
    f.seek(SeekFrom::Start(offset))?;
    let mut line = Vec::new();
    std::io::BufReader::new(f).read_until(b'\n', &mut line)?;
    match parse_entry::<RunRecord>(&line) {
        Ok(Line::Run(r)) => Ok(r),
        Ok(_) => anyhow::bail!("{}: no run record at byte {offset}", file_path.display()),
        Err(e) => anyhow::bail!(
            "{}: byte {offset}: malformed journal line: {e}",
            file_path.display()
        ),
    }
}

/// The journal file of `path`: a results directory's `journal.jsonl`, or `path` itself.
pub fn journal_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(JOURNAL_FILE)
    } else {
        path.to_path_buf()
    }
}

/// A journal read by [`read_mapped`]: its header, each record as `map` made it, the resume
/// notes.
#[derive(Debug)]
pub struct Mapped<T> {
    pub header: SweepHeader,
    pub runs: Vec<T>,
    pub resumes: Vec<ResumeNote>,
}

/// Bytes handed to one parser at a time: whole lines, about this much.
pub const CHUNK: usize = 4 << 20;

/// Reads a journal (a results directory or the file itself) line by line, turning each run
/// record into `map(header, state, record)` as soon as it is parsed, so a caller that keeps a
/// small digest of each record holds only those, never the journal. Lines are parsed on every
/// CPU (`state` is one per parser thread; results keep journal order). With `progress`, a bar
/// on stderr tells how far it is once reading has taken longer than a second (indicatif draws
/// nothing when stderr is not a terminal).
///
/// A torn tail (bytes after the last newline: a crash mid-write, whatever they hold) is
/// ignored; a malformed whole line is a [`NotAJournal`] error naming its number.
#[cfg(test)] // readers pick what to parse of a record (read_lines)
pub fn read_mapped<T, S, F>(path: &Path, progress: bool, map: F) -> anyhow::Result<Mapped<T>>
where
    T: Send,
    S: Default,
    F: Fn(&SweepHeader, &mut S, RunRecord) -> T + Sync,
{
    read_lines(path, progress, CHUNK, |h, s, _, r| map(h, s, r))
}

/// [`read_mapped`] with each run record parsed as `R` and `map` told where its line starts in
/// the file (`map(header, state, offset, record)`; [`read_record_at`] reads it again);
/// parsers take `chunk` bytes at a time ([`CHUNK`]; tests make it small).
pub fn read_lines<R, T, S, F>(path: &Path, progress: bool, chunk: usize, map: F) -> anyhow::Result<Mapped<T>>
where
    R: RunLine,
    T: Send,
    S: Default,
    F: Fn(&SweepHeader, &mut S, u64, R) -> T + Sync,
{
    let file_path = journal_file(path);
    let cannot = |e: std::io::Error| {
        NotAJournal(format!(
            "{}: cannot read the journal: {e} (expected a results directory of `ocrig run`)",
            file_path.display()
        ))
    };
    let bad = |line: usize, what: String| -> anyhow::Error {
        NotAJournal(format!("{}:{line}: {what}", file_path.display())).into()
    };
    let file = File::open(&file_path).map_err(cannot)?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    let (header, line_no, mut consumed) = read_header(&mut input, &file_path)?;
    let bar = progress_bar(&file_path, total, progress);
    bar.set_position(consumed);
    let started = std::time::Instant::now();

    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).max(1);
    let (chunk_tx, chunk_rx) = std::sync::mpsc::sync_channel::<Chunk>(2 * workers);
    // Parsed chunks' buffers, for the reader to fill again: a new 4 MiB buffer per chunk is
    // fresh pages from the kernel, zeroed and faulted in (13 % of a report's time).
    let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(3 * workers);
    let chunk_rx = std::sync::Mutex::new(chunk_rx);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Parsed<T>>();
    // Set when the collector stops early (a malformed line): the reader stops reading and the
    // parsers drain what is queued without parsing it, so every thread ends.
    let stop = AtomicBool::new(false);
    let mut runs = Vec::new();
    let mut resumes = Vec::new();
    let outcome: anyhow::Result<()> = std::thread::scope(|scope| {
        for _ in 0..workers {
            let (rx, tx, stop, free) = (&chunk_rx, done_tx.clone(), &stop, free_tx.clone());
            let (header, map) = (&header, &map);
            scope.spawn(move || {
                let mut state = S::default();
                loop {
                    let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok(chunk) = next else { break };
                    if !stop.load(Ordering::Relaxed) {
                        let _ = tx.send(parse_chunk::<R, T, S, F>(header, map, &mut state, chunk, &free));
                    }
                }
            });
        }
        drop(done_tx);
        drop(free_tx);
        let (stop_reading, header_bytes) = (&stop, consumed);
        let reader = scope
            .spawn(move || read_chunks(&mut input, chunk, header_bytes, &free_rx, &chunk_tx, stop_reading));
        // The collector: the parsed chunks in file order, their lines numbered from the line
        // counts of the chunks before (the reader only finds the last newline).
        let mut waiting: BTreeMap<usize, Parsed<T>> = BTreeMap::new();
        let mut next = 0usize;
        let mut first_line = line_no + 1;
        let fail = |e: anyhow::Error| -> anyhow::Result<()> {
            stop.store(true, Ordering::Relaxed);
            Err(e)
        };
        for parsed in done_rx.iter() {
            waiting.insert(parsed.index, parsed);
            while let Some(p) = waiting.remove(&next) {
                next += 1;
                consumed += p.bytes as u64;
                for item in p.items {
                    match item {
                        Item::Run(t) => runs.push(t),
                        Item::Resume(n) => resumes.push(*n),
                    }
                }
                if let Some((i, what)) = p.malformed {
                    return fail(bad(first_line + i, what));
                }
                first_line += p.lines;
                if progress {
                    if started.elapsed() > std::time::Duration::from_secs(1) && bar.is_hidden() {
                        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                    }
                    bar.set_position(consumed);
                }
            }
        }
        // Every parser is done, so the reader is too (or failed).
        let chunks = reader.join().unwrap_or(Ok(0)).map_err(cannot)?;
        anyhow::ensure!(
            next == chunks,
            "journal reader stopped early at chunk {next} of {chunks}"
        );
        Ok(())
    });
    bar.finish_and_clear();
    outcome?;
    Ok(Mapped {
        header,
        runs,
        resumes,
    })
}

/// Refuses a header line of any journal format but [`JOURNAL_FORMAT`], told before its fields
/// are parsed (another format's header may lack or rename some).
pub(super) fn readable_format(line: &[u8]) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Format {
        #[serde(rename = "type")]
        kind: String,
        /// Absent: format 1.
        #[serde(default)]
        journal_format: Option<u32>,
        #[serde(default)]
        ocrig_version: Option<String>,
    }
    let Ok(f) = serde_json::from_slice::<Format>(line) else {
        return Ok(()); // not a header: the reader says what is wrong with it
    };
    let format = f.journal_format.unwrap_or(1);
    if f.kind != "sweep" || format == JOURNAL_FORMAT {
        return Ok(());
    }
    let by = f.ocrig_version.as_deref().unwrap_or("?");
    let this = env!("CARGO_PKG_VERSION");
    Err(if format > JOURNAL_FORMAT {
        format!(
            "written by ocrig {by} in journal format {format}; this ocrig ({this}) reads format {JOURNAL_FORMAT}: use a newer ocrig"
        )
    } else {
        format!(
            "written by ocrig {by} in journal format {format}, a development build's before the format settled; this ocrig ({this}) reads format {JOURNAL_FORMAT} only: report it with the ocrig that wrote it, or run the sweep again"
        )
    })
}

/// The journal's header, its first non-blank whole line, and where reading stopped: the
/// line's number and the bytes read.
fn read_header(
    input: &mut impl std::io::BufRead,
    file_path: &Path,
) -> anyhow::Result<(SweepHeader, usize, u64)> {
    let bad = |line: usize, what: String| -> anyhow::Error {
        NotAJournal(format!("{}:{line}: {what}", file_path.display())).into()
    };
    let mut line_no = 0usize;
    let mut consumed = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input.read_until(b'\n', &mut line).map_err(|e| {
            NotAJournal(format!(
                "{}: cannot read the journal: {e} (expected a results directory of `ocrig run`)",
                file_path.display()
            ))
        })?;
        if n == 0 || line.last() != Some(&b'\n') {
            return Err(NotAJournal(format!(
                "{}: no sweep header line (expected a journal written by `ocrig run`)",
                file_path.display()
            ))
            .into());
        }
        line_no += 1;
        consumed += n as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        readable_format(&line).map_err(|what| bad(line_no, what))?;
        return match serde_json::from_slice::<Entry>(&line) {
            Ok(Entry::Sweep(h)) => Ok((*h, line_no, consumed)),
            Ok(_) => Err(bad(
                line_no,
                "expected the sweep header as the journal's first line, found a record".into(),
            )),
            Err(e) => Err(bad(
                line_no,
                format!("expected the sweep header of an ocrig journal, found a line that is not one ({e})"),
            )),
        };
    }
}

/// The reading's progress bar: drawn (once reading has taken a second) when asked for.
fn progress_bar(file_path: &Path, total: u64, progress: bool) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::hidden());
    if progress {
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "reading {msg} [{bar:30}] {bytes}/{total_bytes} ({eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(file_path.display().to_string());
    }
    bar
}

/// Whole lines of the journal (numbered by the collector, from the line counts of the chunks
/// before: the reader only finds the last newline).
struct Chunk {
    index: usize,
    /// Where its first line starts in the file.
    offset: u64,
    bytes: Vec<u8>,
}

enum Item<T> {
    Run(T),
    Resume(Box<ResumeNote>),
}

/// A chunk parsed: its items, its lines, and the first malformed line (its index in the
/// chunk, and what).
struct Parsed<T> {
    index: usize,
    items: Vec<Item<T>>,
    bytes: usize,
    lines: usize,
    malformed: Option<(usize, String)>,
}

/// Parses a chunk, each run record as `R` mapped by `map`; its buffer goes back to the reader
/// (`free`) for a later chunk.
fn parse_chunk<R, T, S, F>(
    header: &SweepHeader,
    map: &F,
    state: &mut S,
    c: Chunk,
    free: &std::sync::mpsc::SyncSender<Vec<u8>>,
) -> Parsed<T>
where
    R: RunLine,
    F: Fn(&SweepHeader, &mut S, u64, R) -> T,
{
    let mut items = Vec::new();
    let mut malformed = None;
    let body = c.bytes.strip_suffix(b"\n").unwrap_or(&c.bytes);
    // memchr finds the newlines a word at a time (a byte loop cost 5 % of a report).
    let mut lines = 0;
    let mut at = c.offset;
    let mut start = 0;
    for (i, end) in memchr::memchr_iter(b'\n', body).chain([body.len()]).enumerate() {
        let l = &body[start..end];
        start = end + 1;
        lines = i + 1;
        let offset = at;
        at += l.len() as u64 + 1;
        if l.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_entry::<R>(l) {
            Ok(Line::Run(r)) => items.push(Item::Run(map(header, state, offset, r))),
            Ok(Line::Resume(n)) => items.push(Item::Resume(n)),
            Ok(Line::Sweep) => {
                malformed = Some((
                    i,
                    "a second sweep header: a journal holds one sweep (`ocrig report A B` compares two)"
                        .into(),
                ));
                break;
            }
            Err(e) => {
                malformed = Some((i, format!("malformed journal line: {e}")));
                break;
            }
        }
    }
    let bytes = c.bytes.len();
    // Full (the reader has spares) or gone (it is done): the buffer is dropped.
    let _ = free.try_send(c.bytes);
    Parsed {
        index: c.index,
        items,
        bytes,
        lines,
        malformed,
    }
}

/// The reader: whole lines only, `chunk` bytes at a time into buffers the parsers gave back,
/// from `offset` on; what follows the last newline is a torn write and never parsed. Returns
/// how many chunks it sent.
fn read_chunks(
    input: &mut impl Read,
    chunk: usize,
    mut offset: u64,
    free: &std::sync::mpsc::Receiver<Vec<u8>>,
    chunks: &std::sync::mpsc::SyncSender<Chunk>,
    stop: &AtomicBool,
) -> std::io::Result<usize> {
    let mut index = 0;
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut buf = free.try_recv().unwrap_or_default();
        buf.clear();
        buf.append(&mut carry);
        buf.reserve(chunk + (1 << 16));
        // Into the buffer's spare room, never zeroed first.
        let got = input.take(chunk as u64).read_to_end(&mut buf)?;
        let eof = got < chunk;
        let Some(last_nl) = buf.iter().rposition(|&b| b == b'\n') else {
            if eof {
                return Ok(index);
            }
            carry = buf;
            continue;
        };
        carry = buf[last_nl + 1..].to_vec();
        buf.truncate(last_nl + 1);
        let len = buf.len() as u64;
        let next = Chunk {
            index,
            offset,
            bytes: buf,
        };
        index += 1;
        offset += len;
        if stop.load(Ordering::Relaxed) || chunks.send(next).is_err() || eof {
            return Ok(index);
        }
    }
}
