use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use super::*;
use crate::testing::header;

fn record(run: u32) -> RunRecord {
    RunRecord {
        variant: "base".into(),
        level: 1.0,
        workload: "lock".into(),
        run,
        warmup: false,
        guest: 0,
        guests: 1,
        host: None,
        ok: true,
        error: None,
        attempt: 1,
        superseded: None,
        attempt_records: 1,
        slot: Slot {
            boot: 0,
            bring_up: 1,
            seq: run,
            block: 0,
        },
        metrics: BTreeMap::from([("ops_per_sec".into(), 1.5)]),
        slices: None,
        payload: None,
        argv: vec![],
        timings: BTreeMap::new(),
        extra: Default::default(),
        finished_at: "now".into(),
    }
}

#[test]
fn append_then_read_back_ignoring_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = JournalWriter::open(dir.path()).unwrap();
    w.append(&Entry::Sweep(Box::new(header()))).unwrap();
    w.append(&Entry::Run(Box::new(record(0)))).unwrap();
    w.append(&Entry::Run(Box::new(record(1)))).unwrap();
    drop(w);
    let path = dir.path().join(JOURNAL_FILE);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"type\":\"run\",\"variant\":").unwrap();
    let j = Journal::read(dir.path()).unwrap();
    assert_eq!(j.header, header());
    assert_eq!(j.runs, vec![record(0), record(1)]);
}

fn whole_journal(dir: &Path) -> Vec<u8> {
    let mut w = JournalWriter::open(dir).unwrap();
    w.append(&Entry::Sweep(Box::new(header()))).unwrap();
    let mut r = record(0);
    // A multi-byte character near the end, as a console tail carries them.
    r.extra.insert("console_tail".into(), "naïve → ü".into());
    w.append_all(&[Entry::Run(Box::new(record(1))), Entry::Run(Box::new(r))])
        .unwrap();
    std::fs::read(dir.join(JOURNAL_FILE)).unwrap()
}

#[test]
fn each_record_is_read_again_at_its_offset_and_parsed_for_accounting_as_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    whole_journal(dir.path());
    // A resume note between records, as a resumed sweep writes.
    let mut w = JournalWriter::open(dir.path()).unwrap();
    let note = ResumeNote {
        at: "now".into(),
        ocrig_version: "0".into(),
        runs_on: header().runs_on,
        accepted_changes: Vec::new(),
        overrides: Vec::new(),
    };
    let mut r = record(3);
    r.payload = None;
    r.timings.insert("run_s".into(), 1.5);
    r.argv = vec!["lock".into()];
    r.extra
        .insert("vcpu_sched".into(), serde_json::json!({"wall_s": 1.0}));
    w.append_all(&[Entry::Resume(Box::new(note.clone())), Entry::Run(Box::new(r))])
        .unwrap();
    let full = Journal::read(dir.path()).unwrap().runs;
    for chunk in [1 << 20, 100] {
        let read = read_lines(dir.path(), false, chunk, |_, _: &mut (), offset, r: RunRecord| {
            (offset, r)
        })
        .unwrap();
        assert_eq!(read.resumes, vec![note.clone()]);
        for ((offset, r), whole) in read.runs.iter().zip(&full) {
            assert_eq!(r, whole);
            assert_eq!(
                &read_record_at(dir.path(), *offset).unwrap(),
                whole,
                "at {offset}"
            );
        }
        let trimmed = read_lines(dir.path(), false, chunk, |_, _: &mut (), _, r: ForAccounting| r.0).unwrap();
        let expected: Vec<RunRecord> = full.iter().cloned().map(RunRecord::for_accounting).collect();
        assert_eq!(trimmed.runs, expected, "chunk {chunk}");
    }
    // The header's line is no record.
    assert!(read_record_at(dir.path(), 0).is_err());
}

#[test]
fn a_tail_torn_at_any_byte_is_cut_before_appending_and_kept_aside() {
    let dir = tempfile::tempdir().unwrap();
    let whole = whole_journal(dir.path());
    let last_start = whole[..whole.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    for cut in last_start + 1..whole.len() {
        let path = dir.path().join(JOURNAL_FILE);
        std::fs::write(&path, &whole[..cut]).unwrap();
        // Reading never fails on a torn tail, even one that splits a UTF-8 character.
        let j = Journal::read(dir.path()).unwrap();
        assert_eq!(j.runs, vec![record(1)], "cut at {cut}");
        let mut w = JournalWriter::open(dir.path()).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            &whole[..last_start],
            "cut at {cut}"
        );
        w.append(&Entry::Run(Box::new(record(2)))).unwrap();
        let j = Journal::read(dir.path()).unwrap();
        assert_eq!(j.runs, vec![record(1), record(2)], "cut at {cut}");
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(".torn-"))
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(std::fs::read(&aside[0]).unwrap(), &whole[last_start..cut]);
        std::fs::remove_file(&aside[0]).unwrap();
    }
}

#[test]
fn a_failed_append_is_taken_back_and_every_later_one_fails_too() {
    let dir = tempfile::tempdir().unwrap();
    // /dev/full fails every write with ENOSPC, as a full disk does.
    std::os::unix::fs::symlink("/dev/full", dir.path().join(JOURNAL_FILE)).unwrap();
    let mut w = JournalWriter::open(dir.path()).unwrap();
    let e = w.append(&Entry::Run(Box::new(record(0)))).unwrap_err();
    let failed = e
        .downcast_ref::<JournalWriteFailed>()
        .expect("a JournalWriteFailed");
    assert!(failed.cause.contains("No space left"), "{e}");
    assert!(e.to_string().contains(JOURNAL_FILE), "{e}");
    let again = w.append(&Entry::Run(Box::new(record(1)))).unwrap_err();
    assert!(again.to_string().contains("an earlier append failed"), "{again}");
}

#[test]
fn not_a_journal_is_refused_naming_the_file_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let run = serde_json::to_string(&Entry::Run(Box::new(record(0)))).unwrap();
    for (text, expected) in [
        (format!("{run}\n"), "expected the sweep header"),
        ("hello\n".to_string(), "expected the sweep header"),
        (String::new(), "no sweep header"),
        (
            r#"{"type":"sweep","journal_format":4,"ocrig_version":"9.0.0"}"#.to_string() + "\n",
            "written by ocrig 9.0.0 in journal format 4; this ocrig (0.1.0) reads format 3: use a newer ocrig",
        ),
        (
            r#"{"type":"sweep","journal_format":2,"ocrig_version":"0.1.0"}"#.to_string() + "\n",
            "written by ocrig 0.1.0 in journal format 2, a development build's",
        ),
        (
            // Format 1 had no field.
            r#"{"type":"sweep","scenario":"smoke","ocrig_version":"0.1.0"}"#.to_string() + "\n",
            "in journal format 1, a development build's before the format settled; this ocrig (0.1.0) reads format 3 only",
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let e = Journal::read(dir.path()).unwrap_err();
        assert!(e.is::<NotAJournal>(), "{e:#}");
        let msg = e.to_string();
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains(expected),
            "{msg}"
        );
    }
}

#[test]
fn a_header_round_trips_with_what_it_runs_on_beside_its_other_fields() {
    let h = header();
    let text = serde_json::to_string(&Entry::Sweep(Box::new(h.clone()))).unwrap();
    // Flattened: the header's object holds `backend`, `boots`, ... as its own fields.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (v["backend"].as_str(), v["boots"][0]["guests"].as_u64()),
        (Some("qemu"), Some(1))
    );
    assert!(v.get("runs_on").is_none(), "{text}");
    match serde_json::from_str::<Entry>(&text).unwrap() {
        Entry::Sweep(back) => assert_eq!(*back, h),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_second_sweep_header_is_refused_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let h = serde_json::to_string(&Entry::Sweep(Box::new(header()))).unwrap();
    let r = serde_json::to_string(&Entry::Run(Box::new(record(0)))).unwrap();
    std::fs::write(&path, format!("{h}\n{r}\n{h}\n")).unwrap();
    let e = Journal::read(dir.path()).unwrap_err().to_string();
    assert!(e.contains(":3: a second sweep header"), "{e}");
}

#[test]
fn malformed_middle_line_is_an_error_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let h = serde_json::to_string(&Entry::Sweep(Box::new(header()))).unwrap();
    std::fs::write(&path, format!("{h}\nnot json\n{h}\n")).unwrap();
    let e = Journal::read(dir.path()).unwrap_err().to_string();
    assert!(e.contains(":2:"), "{e}");
}
