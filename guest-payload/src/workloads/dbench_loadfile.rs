//! Parser for dbench's loadfile format (`client.txt`, dbench 3/4 "NBENCH" style).
//!
//! One operation per line: `[timestamp] Name args... STATUS`, tokens separated by spaces,
//! double quotes around paths. Paths use backslashes and contain `client1`, which each client
//! replaces with its own name (`clientN`); they are taken relative to the working directory.
//! Lines with fewer than two tokens, or starting with `#`, are skipped; the last token must be
//! an `NT_STATUS_*` or `0x...` status (dbench skips other lines with "Badly formed status"; we
//! reject them so a broken loadfile is noticed). A status counts as success when it is
//! `NT_STATUS_OK` or a hexadecimal zero, exactly as dbench's `expected_status`.
//! Numbers accept decimal, `0x` hex and leading-zero octal (C's `strtol(s, NULL, 0)`).

use serde::{Deserialize, Serialize};

/// A path from the loadfile, split at every `client1` so a client can substitute its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    /// Pieces between occurrences of `client1`, with `/` separators and no leading `/`.
    parts: Vec<Box<str>>,
}

impl PathTemplate {
    pub fn parse(raw: &str) -> Self {
        let p = raw.replace('\\', "/");
        let p = p.trim_start_matches('/');
        Self {
            parts: p.split("client1").map(Into::into).collect(),
        }
    }

    /// Appends this path for client `cname` (e.g. "client3") to `out`.
    pub fn render_into(&self, cname: &str, out: &mut Vec<u8>) {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(cname.as_bytes());
            }
            out.extend_from_slice(part.as_bytes());
        }
    }

    /// The path for client `cname`, as a string (for tests and messages).
    pub fn render(&self, cname: &str) -> String {
        let mut v = Vec::new();
        self.render_into(cname, &mut v);
        String::from_utf8_lossy(&v).into_owned()
    }

    /// True when the last component holds a wildcard (dbench: any of `<>*?"`).
    pub fn has_wildcard(&self) -> bool {
        self.parts.last().is_some_and(|p| {
            p.rsplit('/')
                .next()
                .unwrap_or("")
                .contains(['<', '>', '*', '?', '"'])
        })
    }
}

/// One loadfile operation, with dbench's argument meanings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    NtCreateX {
        path: PathTemplate,
        create_options: u32,
        disposition: u32,
        handle: i64,
    },
    Close {
        handle: i64,
    },
    Rename {
        from: PathTemplate,
        to: PathTemplate,
    },
    Unlink {
        path: PathTemplate,
    },
    Deltree {
        path: PathTemplate,
    },
    Rmdir {
        path: PathTemplate,
    },
    Mkdir {
        path: PathTemplate,
    },
    Qpathinfo {
        path: PathTemplate,
    },
    Qfileinfo {
        handle: i64,
    },
    Qfsinfo,
    Sfileinfo {
        handle: i64,
    },
    Find {
        path: PathTemplate,
        max_count: i64,
    },
    WriteX {
        handle: i64,
        offset: i64,
        size: i64,
        ret_size: i64,
    },
    ReadX {
        handle: i64,
        offset: i64,
        size: i64,
        ret_size: i64,
    },
    LockX {
        handle: i64,
        offset: i64,
        size: i64,
    },
    UnlockX {
        handle: i64,
        offset: i64,
        size: i64,
    },
    Flush {
        handle: i64,
    },
    Sleep {
        usec: i64,
    },
}

/// Operation kinds, named as in dbench's latency table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OpKind {
    NTCreateX,
    Close,
    Rename,
    Unlink,
    Deltree,
    Rmdir,
    Mkdir,
    Qpathinfo,
    Qfileinfo,
    Qfsinfo,
    Sfileinfo,
    Find,
    WriteX,
    ReadX,
    LockX,
    UnlockX,
    Flush,
    Sleep,
}

impl OpKind {
    pub const ALL: [OpKind; 18] = [
        OpKind::NTCreateX,
        OpKind::Close,
        OpKind::Rename,
        OpKind::Unlink,
        OpKind::Deltree,
        OpKind::Rmdir,
        OpKind::Mkdir,
        OpKind::Qpathinfo,
        OpKind::Qfileinfo,
        OpKind::Qfsinfo,
        OpKind::Sfileinfo,
        OpKind::Find,
        OpKind::WriteX,
        OpKind::ReadX,
        OpKind::LockX,
        OpKind::UnlockX,
        OpKind::Flush,
        OpKind::Sleep,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::NTCreateX => "NTCreateX",
            OpKind::Close => "Close",
            OpKind::Rename => "Rename",
            OpKind::Unlink => "Unlink",
            OpKind::Deltree => "Deltree",
            OpKind::Rmdir => "Rmdir",
            OpKind::Mkdir => "Mkdir",
            OpKind::Qpathinfo => "Qpathinfo",
            OpKind::Qfileinfo => "Qfileinfo",
            OpKind::Qfsinfo => "Qfsinfo",
            OpKind::Sfileinfo => "Sfileinfo",
            OpKind::Find => "Find",
            OpKind::WriteX => "WriteX",
            OpKind::ReadX => "ReadX",
            OpKind::LockX => "LockX",
            OpKind::UnlockX => "UnlockX",
            OpKind::Flush => "Flush",
            OpKind::Sleep => "Sleep",
        }
    }
}

impl Op {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::NtCreateX { .. } => OpKind::NTCreateX,
            Op::Close { .. } => OpKind::Close,
            Op::Rename { .. } => OpKind::Rename,
            Op::Unlink { .. } => OpKind::Unlink,
            Op::Deltree { .. } => OpKind::Deltree,
            Op::Rmdir { .. } => OpKind::Rmdir,
            Op::Mkdir { .. } => OpKind::Mkdir,
            Op::Qpathinfo { .. } => OpKind::Qpathinfo,
            Op::Qfileinfo { .. } => OpKind::Qfileinfo,
            Op::Qfsinfo => OpKind::Qfsinfo,
            Op::Sfileinfo { .. } => OpKind::Sfileinfo,
            Op::Find { .. } => OpKind::Find,
            Op::WriteX { .. } => OpKind::WriteX,
            Op::ReadX { .. } => OpKind::ReadX,
            Op::LockX { .. } => OpKind::LockX,
            Op::UnlockX { .. } => OpKind::UnlockX,
            Op::Flush { .. } => OpKind::Flush,
            Op::Sleep { .. } => OpKind::Sleep,
        }
    }
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number in the loadfile.
    pub lineno: usize,
    pub op: Op,
    /// The status token as written (e.g. `NT_STATUS_OK`).
    pub status: Box<str>,
    /// True when the operation is expected to succeed.
    pub expect_ok: bool,
}

/// A malformed loadfile line.
#[derive(Debug)]
pub struct ParseError {
    pub lineno: usize,
    pub msg: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "loadfile line {}: {}", self.lineno, self.msg)
    }
}

impl std::error::Error for ParseError {}

/// Splits a line into tokens; a double-quoted token may contain spaces (quotes removed).
fn tokens(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            let end = r.find('"').unwrap_or(r.len());
            out.push(&r[..end]);
            rest = r.get(end + 1..).unwrap_or("").trim_start();
        } else {
            let end = rest.find([' ', '\t']).unwrap_or(rest.len());
            out.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
    }
    out
}

/// C's `strtol(s, NULL, 0)` for the values loadfiles use (decimal, 0x hex, 0 octal, sign).
pub fn ival(s: &str) -> Option<i64> {
    let (neg, t) = match s.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else {
        t.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// dbench's `expected_status`: success for NT_STATUS_OK or a hex zero.
pub fn status_is_ok(status: &str) -> bool {
    status == "NT_STATUS_OK"
        || status
            .strip_prefix("0x")
            .is_some_and(|h| u64::from_str_radix(h, 16).is_ok_and(|v| v == 0))
}

/// Parses one line; Ok(None) for blank lines and comments.
pub fn parse_line(lineno: usize, text: &str) -> Result<Option<Line>, ParseError> {
    let err = |msg: String| ParseError { lineno, msg };
    let mut toks = tokens(text);
    if toks.len() < 2 || toks[0].starts_with('#') {
        return Ok(None);
    }
    if toks[0].starts_with("SMB") {
        return Err(err("this is a dbench 1 load file, which is not supported".into()));
    }
    // Optional leading timestamp (dbench 4 timed loadfiles); we replay as fast as possible.
    if toks[0].starts_with(|c: char| c.is_ascii_digit()) {
        toks.remove(0);
    }
    let status = *toks.last().ok_or_else(|| err("empty operation".into()))?;
    if !(status.starts_with("NT_STATUS_") || status.starts_with("0x")) {
        return Err(err(format!("badly formed status '{status}'")));
    }
    let name = toks[0];
    let args = &toks[1..toks.len() - 1];
    let need = |n: usize| -> Result<(), ParseError> {
        if args.len() < n {
            Err(err(format!("{name} needs {n} arguments, found {}", args.len())))
        } else {
            Ok(())
        }
    };
    let num = |i: usize| -> Result<i64, ParseError> {
        ival(args[i]).ok_or_else(|| err(format!("{name}: '{}' is not a number", args[i])))
    };
    let path = |i: usize| PathTemplate::parse(args[i]);
    let op = match name {
        "NTCreateX" => {
            need(4)?;
            Op::NtCreateX {
                path: path(0),
                create_options: num(1)? as u32,
                disposition: num(2)? as u32,
                handle: num(3)?,
            }
        }
        "Close" => {
            need(1)?;
            Op::Close { handle: num(0)? }
        }
        "Rename" => {
            need(2)?;
            Op::Rename {
                from: path(0),
                to: path(1),
            }
        }
        "Unlink" => {
            need(1)?;
            Op::Unlink { path: path(0) }
        }
        "Deltree" => {
            need(1)?;
            Op::Deltree { path: path(0) }
        }
        "Rmdir" => {
            need(1)?;
            Op::Rmdir { path: path(0) }
        }
        "Mkdir" => {
            need(1)?;
            Op::Mkdir { path: path(0) }
        }
        "QUERY_PATH_INFORMATION" | "Qpathinfo" => {
            need(1)?;
            Op::Qpathinfo { path: path(0) }
        }
        "QUERY_FILE_INFORMATION" | "Qfileinfo" => {
            need(1)?;
            Op::Qfileinfo { handle: num(0)? }
        }
        "QUERY_FS_INFORMATION" | "Qfsinfo" => Op::Qfsinfo,
        "SET_FILE_INFORMATION" | "Sfileinfo" => {
            need(1)?;
            Op::Sfileinfo { handle: num(0)? }
        }
        "FIND_FIRST" | "Find" => {
            need(3)?;
            Op::Find {
                path: path(0),
                max_count: num(2)?,
            }
        }
        "WriteX" | "ReadX" => {
            need(4)?;
            let (handle, offset, size, ret_size) = (num(0)?, num(1)?, num(2)?, num(3)?);
            if size < 0 || ret_size < 0 || offset < 0 {
                return Err(err(format!("{name}: negative offset or size")));
            }
            if name == "WriteX" {
                Op::WriteX {
                    handle,
                    offset,
                    size,
                    ret_size,
                }
            } else {
                Op::ReadX {
                    handle,
                    offset,
                    size,
                    ret_size,
                }
            }
        }
        "LockX" | "UnlockX" => {
            need(3)?;
            let (handle, offset, size) = (num(0)?, num(1)?, num(2)?);
            if name == "LockX" {
                Op::LockX { handle, offset, size }
            } else {
                Op::UnlockX { handle, offset, size }
            }
        }
        "Flush" => {
            need(1)?;
            Op::Flush { handle: num(0)? }
        }
        "Sleep" => {
            need(1)?;
            Op::Sleep { usec: num(0)? }
        }
        other => return Err(err(format!("unknown operation '{other}'"))),
    };
    Ok(Some(Line {
        lineno,
        op,
        status: status.into(),
        expect_ok: status_is_ok(status),
    }))
}

/// Parses a whole loadfile; fails on the first malformed line, or when it has no operations.
/// Checks every line of `text` without keeping the parsed operations; returns how many
/// operations it holds (clients then parse each line as they replay it, as dbench does).
pub fn validate(text: &str) -> Result<u64, ParseError> {
    let mut n = 0;
    for (i, l) in text.lines().enumerate() {
        n += parse_line(i + 1, l)?.is_some() as u64;
    }
    if n == 0 {
        return Err(ParseError {
            lineno: 0,
            msg: "the loadfile has no operations".into(),
        });
    }
    Ok(n)
}

pub fn parse(text: &str) -> Result<Vec<Line>, ParseError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if let Some(line) = parse_line(i + 1, l)? {
            out.push(line);
        }
    }
    if out.is_empty() {
        return Err(ParseError {
            lineno: 0,
            msg: "the loadfile has no operations".into(),
        });
    }
    Ok(out)
}

/// Our default loadfile: a small office-like session in client.txt format.
pub const DEFAULT_LOADFILE: &str = include_str!("dbench_default.txt");

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Line {
        parse_line(1, s).unwrap().unwrap()
    }

    #[test]
    fn parses_real_client_txt_lines() {
        let l = one(r#"NTCreateX "\clients\client1\~dmtmp\WORD\CHAP10.DOC" 0x40 0x2 9938 NT_STATUS_OK"#);
        match &l.op {
            Op::NtCreateX {
                path,
                create_options,
                disposition,
                handle,
            } => {
                assert_eq!(path.render("client7"), "clients/client7/~dmtmp/WORD/CHAP10.DOC");
                assert_eq!((*create_options, *disposition, *handle), (0x40, 2, 9938));
            }
            other => panic!("{other:?}"),
        }
        assert!(l.expect_ok);

        let l = one("WriteX 9938 65534 1 1 NT_STATUS_OK");
        assert_eq!(
            l.op,
            Op::WriteX {
                handle: 9938,
                offset: 65534,
                size: 1,
                ret_size: 1
            }
        );
        let l = one("ReadX 10003 0 4096 4096 NT_STATUS_OK");
        assert_eq!(l.op.kind(), OpKind::ReadX);
        let l = one(r#"FIND_FIRST "\clients\client1\FILLER.*" 260 1366 0 NT_STATUS_NO_SUCH_FILE"#);
        assert!(!l.expect_ok);
        match &l.op {
            Op::Find { path, max_count } => {
                assert!(path.has_wildcard());
                assert_eq!(*max_count, 1366);
            }
            other => panic!("{other:?}"),
        }
        let l =
            one(r#"QUERY_PATH_INFORMATION "\clients\client1\~dmtmp" 1004 NT_STATUS_OBJECT_NAME_NOT_FOUND"#);
        assert_eq!(l.op.kind(), OpKind::Qpathinfo);
        assert_eq!(&*l.status, "NT_STATUS_OBJECT_NAME_NOT_FOUND");
        let l = one(
            r#"Rename "\clients\client1\~dmtmp\PWRPNT\NEWPCB.PPT" "\clients\client1\~dmtmp\PWRPNT\PPTB1E4.TMP" NT_STATUS_OK"#,
        );
        match &l.op {
            Op::Rename { from, to } => {
                assert_eq!(from.render("client0"), "clients/client0/~dmtmp/PWRPNT/NEWPCB.PPT");
                assert_eq!(to.render("client0"), "clients/client0/~dmtmp/PWRPNT/PPTB1E4.TMP");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            one("LockX 10430 2147483538 1 NT_STATUS_OK").op,
            Op::LockX {
                handle: 10430,
                offset: 2147483538,
                size: 1
            }
        );
        assert_eq!(one("QUERY_FS_INFORMATION 1 NT_STATUS_OK").op, Op::Qfsinfo);
        assert_eq!(one("Flush 10012 NT_STATUS_OK").op, Op::Flush { handle: 10012 });
        assert_eq!(
            one("SET_FILE_INFORMATION 10005 1004 NT_STATUS_OK").op,
            Op::Sfileinfo { handle: 10005 }
        );
        assert_eq!(
            one(r#"Unlink "\clients\client1\x" 0x6 NT_STATUS_OK"#).op.kind(),
            OpKind::Unlink
        );
        assert_eq!(
            one(r#"Deltree "\clients\client1" NT_STATUS_OK"#).op.kind(),
            OpKind::Deltree
        );
        // A timestamped dbench 4 line.
        assert_eq!(
            one("0.125 Close 16385 NT_STATUS_OK").op,
            Op::Close { handle: 16385 }
        );
    }

    #[test]
    fn skips_comments_and_rejects_garbage() {
        assert!(parse_line(1, "# a comment line").unwrap().is_none());
        assert!(parse_line(1, "").unwrap().is_none());
        assert!(
            parse_line(3, "Close 1 bogus")
                .unwrap_err()
                .to_string()
                .contains("line 3")
        );
        assert!(parse_line(1, "Frobnicate 1 NT_STATUS_OK").is_err());
        assert!(parse_line(1, "WriteX 1 2 NT_STATUS_OK").is_err());
        assert!(parse_line(1, "SMBopenX foo NT_STATUS_OK").is_err());
        assert!(parse("# only a comment\n").is_err());
    }

    #[test]
    fn numbers_and_statuses_follow_c() {
        assert_eq!(ival("0x40"), Some(64));
        assert_eq!(ival("010"), Some(8));
        assert_eq!(ival("0"), Some(0));
        assert_eq!(ival("-5"), Some(-5));
        assert!(status_is_ok("NT_STATUS_OK") && status_is_ok("0x00000000"));
        assert!(!status_is_ok("NT_STATUS_NO_SUCH_FILE") && !status_is_ok("0x1"));
    }

    #[test]
    fn default_loadfile_parses_and_uses_every_common_op() {
        let lines = parse(DEFAULT_LOADFILE).unwrap();
        let kinds: std::collections::BTreeSet<_> = lines.iter().map(|l| l.op.kind()).collect();
        // Every kind but the two that client.txt itself rarely uses.
        for k in OpKind::ALL
            .into_iter()
            .filter(|k| !matches!(k, OpKind::Rmdir | OpKind::Sleep))
        {
            assert!(kinds.contains(&k), "default loadfile lacks {}", k.name());
        }
    }

    #[test]
    fn parses_the_installed_client_txt_when_present() {
        let Ok(text) = std::fs::read_to_string("/usr/share/dbench/client.txt") else {
            return;
        };
        // Its first 20 000 lines hold every operation kind (the whole file takes seconds to
        // parse in a debug build; release parses all 458k lines in ~0.2 s).
        let head: String = text.lines().take(20_000).map(|l| format!("{l}\n")).collect();
        let lines = parse(&head).unwrap();
        assert_eq!(lines.len(), 20_000);
        let kinds: std::collections::BTreeSet<_> = lines.iter().map(|l| l.op.kind()).collect();
        assert_eq!(kinds.len(), 16, "{kinds:?}");
    }
}
