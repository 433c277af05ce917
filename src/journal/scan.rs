//! Where a JSON value ends, found without parsing it: a run record's line is ~9 KB, of which a
//! report reads a few kilobytes, and serde_json's skipping of the rest (`IgnoredAny`, byte by
//! byte) was a third of a report's CPU time. [`members`] splits an object into its members' keys
//! and value texts (a [`Members`] cursor lets the caller descend into a value in the same pass);
//! the caller parses with serde only the values it reads.
//!
//! A skipped value is checked for its shape only: terminated strings and as many closing as
//! opening brackets (a torn or cut line fails), not for valid numbers, literals, UTF-8 or
//! bracket kinds; a value that is read is parsed, and so checked, by serde. Journal lines are
//! written whole by ocrig (a torn write is the only damage they see), so that is enough to tell
//! a line that can be read from one that cannot.
//!
//! Containers are scanned 64 bytes at a time (AVX2 and POPCNT where the CPU has them, checked
//! at run time; else SSE2, part of every x86-64 CPU; a byte loop on other CPUs gives the same
//! masks): masks of quotes, backslashes and brackets; the bytes inside
//! strings from a prefix XOR of the quotes; a block whose closing brackets cannot bring the depth
//! to zero is passed over whole. A block with a backslash (rare in records: no prose in them has
//! escapes) is walked byte by byte.

use std::borrow::Cow;

/// A line that is not a whole JSON value where one was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// Byte offset in the scanned text.
    pub at: usize,
    pub what: &'static str,
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for ScanError {}

fn err<T>(at: usize, what: &'static str) -> Result<T, ScanError> {
    Err(ScanError { at, what })
}

/// The first byte at or after `i` that is not JSON whitespace.
pub fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end (exclusive) of the value that starts at `i` (after any whitespace).
pub fn skip_value(b: &[u8], i: usize) -> Result<usize, ScanError> {
    let i = skip_ws(b, i);
    match b.get(i) {
        None => err(i, "expected a value, found the end"),
        Some(b'"') => skip_string(b, i + 1),
        Some(b'{' | b'[') => skip_container(b, i),
        Some(b'}' | b']' | b',' | b':') => err(i, "expected a value"),
        Some(_) => {
            // A number or literal: up to the next delimiter (its spelling is serde's to check).
            let end = b[i..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .map_or(b.len(), |n| i + n);
            Ok(end)
        }
    }
}

/// The end (exclusive, after the closing quote) of the string whose contents start at `i`.
fn skip_string(b: &[u8], i: usize) -> Result<usize, ScanError> {
    skip_string_escaped(b, i).map(|(end, _)| end)
}

/// [`skip_string`], and whether the string has an escape.
fn skip_string_escaped(b: &[u8], mut i: usize) -> Result<(usize, bool), ScanError> {
    // Most strings scanned are keys of a few bytes: one 16-byte look finds their end before a
    // vector search is set up.
    if let Some(end) = short_string_end(b, i) {
        return Ok((end, false));
    }
    let mut escaped = false;
    loop {
        match memchr::memchr2(b'"', b'\\', &b[i.min(b.len())..]) {
            None => return err(b.len(), "unterminated string"),
            Some(n) if b[i + n] == b'"' => return Ok((i + n + 1, escaped)),
            Some(n) => {
                escaped = true;
                i += n + 2 // a backslash and the byte it escapes
            }
        }
    }
}

/// The end of the string whose contents start at `i` if its closing quote is in the next 16
/// bytes with no backslash before it.
#[inline]
fn short_string_end(b: &[u8], i: usize) -> Option<usize> {
    let window: &[u8; 16] = b.get(i..i + 16)?.try_into().ok()?;
    let (quote, backslash) = quote_and_backslash(window);
    let q = quote.trailing_zeros();
    (q < 16 && backslash & ((1 << q) - 1) == 0).then_some(i + q as usize + 1)
}

/// Masks of the quotes and the backslashes in 16 bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn quote_and_backslash(window: &[u8; 16]) -> (u32, u32) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86-64 baseline; the load reads the 16 bytes of `window`.
    unsafe {
        let v = _mm_loadu_si128(window.as_ptr() as *const __m128i);
        let bits = |c: u8| _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8))) as u32;
        (bits(b'"'), bits(b'\\'))
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn quote_and_backslash(window: &[u8; 16]) -> (u32, u32) {
    window.iter().enumerate().fold((0, 0), |(q, e), (n, &c)| {
        ((q | ((c == b'"') as u32) << n), (e | ((c == b'\\') as u32) << n))
    })
}

/// Per 64-byte block: which bytes are quotes, backslashes, opening and closing brackets.
#[derive(Debug, Default, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

/// How a 64-byte block's [`Masks`] are found.
trait Classify {
    fn classify(block: &[u8; 64]) -> Masks;
}

/// SSE2, part of every x86-64 CPU.
#[cfg(target_arch = "x86_64")]
struct Sse2;

#[cfg(target_arch = "x86_64")]
impl Classify for Sse2 {
    #[inline(always)]
    fn classify(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of the x86-64 baseline; the four unaligned loads read the 64
        // bytes of `block`.
        unsafe {
            let (quote, backslash) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8));
            // '[' | 0x20 == '{' and ']' | 0x20 == '}'; no other byte maps onto either.
            let (open, close, case) = (
                _mm_set1_epi8(b'{' as i8),
                _mm_set1_epi8(b'}' as i8),
                _mm_set1_epi8(0x20),
            );
            let mut m = Masks::default();
            for k in 0..4 {
                let v = _mm_loadu_si128(block.as_ptr().add(16 * k) as *const __m128i);
                let folded = _mm_or_si128(v, case);
                let bits = |x: __m128i| (_mm_movemask_epi8(x) as u32 as u64) << (16 * k);
                m.quote |= bits(_mm_cmpeq_epi8(v, quote));
                m.backslash |= bits(_mm_cmpeq_epi8(v, backslash));
                m.open |= bits(_mm_cmpeq_epi8(folded, open));
                m.close |= bits(_mm_cmpeq_epi8(folded, close));
            }
            m
        }
    }
}

/// AVX2, where the CPU has it (checked at run time): half the instructions of [`Sse2`].
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    fn classify(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::*;
        // SAFETY: only inlined into `skip_container_avx2`, which runs on CPUs with AVX2; the two
        // unaligned loads read the 64 bytes of `block`.
        unsafe {
            let (quote, backslash) = (_mm256_set1_epi8(b'"' as i8), _mm256_set1_epi8(b'\\' as i8));
            let (open, close, case) = (
                _mm256_set1_epi8(b'{' as i8),
                _mm256_set1_epi8(b'}' as i8),
                _mm256_set1_epi8(0x20),
            );
            let mut m = Masks::default();
            for k in 0..2 {
                let v = _mm256_loadu_si256(block.as_ptr().add(32 * k) as *const __m256i);
                let folded = _mm256_or_si256(v, case);
                let bits = |x: __m256i| (_mm256_movemask_epi8(x) as u32 as u64) << (32 * k);
                m.quote |= bits(_mm256_cmpeq_epi8(v, quote));
                m.backslash |= bits(_mm256_cmpeq_epi8(v, backslash));
                m.open |= bits(_mm256_cmpeq_epi8(folded, open));
                m.close |= bits(_mm256_cmpeq_epi8(folded, close));
            }
            m
        }
    }
}

/// A byte at a time (other CPUs; the vector forms are tested against it).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
struct Bytes;

impl Classify for Bytes {
    fn classify(block: &[u8; 64]) -> Masks {
        let mut m = Masks::default();
        for (i, &c) in block.iter().enumerate() {
            let bit = 1u64 << i;
            match c {
                b'"' => m.quote |= bit,
                b'\\' => m.backslash |= bit,
                b'{' | b'[' => m.open |= bit,
                b'}' | b']' => m.close |= bit,
                _ => {}
            }
        }
        m
    }
}

/// Bit i set when an odd number of bits 0..=i of `x` are: the bytes from an opening quote up
/// to (not including) its closing one.
fn prefix_xor(mut x: u64) -> u64 {
    for shift in [1, 2, 4, 8, 16, 32] {
        x ^= x << shift;
    }
    x
}

/// Where the scan of a container is between bytes.
#[derive(Default)]
struct State {
    depth: usize,
    in_string: bool,
    /// The next byte is escaped (the last one was a backslash inside a string).
    escaped: bool,
}

impl State {
    /// Steps over `bytes` (starting at offset `base`); `Some(end)` when the container closes.
    fn walk(&mut self, bytes: &[u8], base: usize) -> Result<Option<usize>, ScanError> {
        for (i, &c) in bytes.iter().enumerate() {
            if self.escaped {
                self.escaped = false;
            } else if self.in_string {
                match c {
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
            } else {
                match c {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth = self.depth.checked_sub(1).ok_or(ScanError {
                            at: base + i,
                            what: "a closing bracket that closes nothing",
                        })?;
                        if self.depth == 0 {
                            return Ok(Some(base + i + 1));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(None)
    }
}

/// The end (exclusive) of the object or array that opens at `start`.
fn skip_container(b: &[u8], start: usize) -> Result<usize, ScanError> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has both.
            return unsafe { skip_container_avx2(b, start) };
        }
        skip_container_with::<Sse2>(b, start)
    }
    #[cfg(not(target_arch = "x86_64"))]
    skip_container_with::<Bytes>(b, start)
}

/// [`skip_container_with`] compiled for AVX2 and POPCNT (the x86-64 baseline counts a mask's
/// bits in a dozen instructions: most of a block's time).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn skip_container_avx2(b: &[u8], start: usize) -> Result<usize, ScanError> {
    skip_container_with::<Avx2>(b, start)
}

#[inline(always)]
fn skip_container_with<C: Classify>(b: &[u8], start: usize) -> Result<usize, ScanError> {
    let mut s = State::default();
    let mut at = start;
    while let Some(block) = b.get(at..at + 64) {
        let block: &[u8; 64] = block.try_into().expect("64 bytes");
        let m = C::classify(block);
        if m.backslash != 0 || s.escaped {
            if let Some(end) = s.walk(block, at)? {
                return Ok(end);
            }
        } else {
            let inside = prefix_xor(m.quote) ^ if s.in_string { !0 } else { 0 };
            s.in_string = inside >> 63 == 1;
            let (open, close) = (m.open & !inside, m.close & !inside);
            let closes = close.count_ones() as usize;
            if closes < s.depth {
                // Even were every close first, the depth stays above zero.
                s.depth = s.depth + open.count_ones() as usize - closes;
            } else {
                let mut brackets = open | close;
                while brackets != 0 {
                    let bit = brackets.trailing_zeros();
                    brackets &= brackets - 1;
                    if open >> bit & 1 == 1 {
                        s.depth += 1;
                    } else if s.depth == 0 {
                        return err(at + bit as usize, "a closing bracket that closes nothing");
                    } else {
                        s.depth -= 1;
                        if s.depth == 0 {
                            return Ok(at + bit as usize + 1);
                        }
                    }
                }
            }
        }
        at += 64;
    }
    match s.walk(&b[at..], at)? {
        Some(end) => Ok(end),
        None if s.in_string => err(b.len(), "unterminated string"),
        None => err(b.len(), "unclosed object or array"),
    }
}

/// A parse error's text without its place in the text parsed: a field parsed from its JSON
/// text says what one parsed from a tree of it says.
pub fn without_place(e: serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => text[..i].to_string(),
        _ => text,
    }
}

/// A serde_json error saying `e` (a line the scanner or a copy of it cannot read).
pub fn json_error(e: impl std::fmt::Display) -> serde_json::Error {
    serde::de::Error::custom(e)
}

/// The members of the JSON object `obj` (whitespace around it allowed), in order: each key
/// (unescaped) and its value's text. Nothing may follow the object.
pub fn members(obj: &[u8]) -> Members<'_> {
    Members::new(obj, 0, true)
}

/// A cursor over an object's members, and the iterator of [`members`] (it ends after the first
/// error). A caller that reads a member's value itself (descending into it: its text is then
/// scanned once, not skipped first and scanned again) steps with [`Members::next_key`] and
/// [`Members::value_ends_at`].
pub struct Members<'a>(Cursor<'a>);

/// Where a cursor over an object or array is, and how it steps between values.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    state: Step,
    /// Nothing may follow the container.
    whole: bool,
    /// Its opening and closing brackets.
    brackets: [u8; 2],
}

#[derive(PartialEq)]
enum Step {
    Open,
    Member,
    Done,
}

impl<'a> Cursor<'a> {
    fn new(b: &'a [u8], at: usize, whole: bool, brackets: [u8; 2]) -> Self {
        Cursor {
            b,
            at,
            state: Step::Open,
            whole,
            brackets,
        }
    }

    /// Where the next value (an object's: its key) starts; `None` once the container closed.
    fn next(&mut self) -> Result<Option<usize>, ScanError> {
        match self.state {
            Step::Done => Ok(None),
            Step::Member => Ok(Some(skip_ws(self.b, self.at))),
            Step::Open => {
                let i = skip_ws(self.b, self.at);
                if self.b.get(i) != Some(&self.brackets[0]) {
                    return err(
                        i,
                        if self.brackets[0] == b'{' {
                            "expected an object"
                        } else {
                            "expected an array"
                        },
                    );
                }
                self.state = Step::Member;
                let first = skip_ws(self.b, i + 1);
                if self.b.get(first) == Some(&self.brackets[1]) {
                    self.close(first)?;
                    return Ok(None);
                }
                Ok(Some(first))
            }
        }
    }

    /// The value just read ends at `end`: steps over the comma, or the closing bracket.
    fn value_ends_at(&mut self, end: usize) -> Result<(), ScanError> {
        let i = skip_ws(self.b, end);
        match self.b.get(i) {
            Some(b',') => {
                self.at = i + 1;
                Ok(())
            }
            Some(&c) if c == self.brackets[1] => self.close(i),
            _ if self.brackets[1] == b'}' => err(i, "expected ',' or '}' after a value"),
            _ => err(i, "expected ',' or ']' after a value"),
        }
    }

    /// The container closes at `i`.
    fn close(&mut self, i: usize) -> Result<(), ScanError> {
        self.state = Step::Done;
        self.at = i + 1;
        if self.whole {
            tail(self.b, i)?;
        }
        Ok(())
    }
}

/// One member of an object: its key and its value's text (`raw`: the key's quoted text, as in
/// the line).
pub struct Member<'a> {
    pub key: Cow<'a, str>,
    /// The member as it stands in the object, `"key":value`.
    pub raw: &'a [u8],
    pub value: &'a [u8],
}

/// A member's key and where it and its value start.
pub struct KeyAt<'a> {
    pub key: Cow<'a, str>,
    /// Where its quoted key starts.
    pub start: usize,
    /// Where its value starts.
    pub value: usize,
}

impl<'a> Members<'a> {
    /// The object that opens at `at` in `b` (after any whitespace); `whole`: nothing may follow
    /// it.
    pub fn new(b: &'a [u8], at: usize, whole: bool) -> Self {
        Members(Cursor::new(b, at, whole, *b"{}"))
    }

    /// The next member's key; its value is the caller's to skip or read, then to end with
    /// [`Members::value_ends_at`].
    pub fn next_key(&mut self) -> Result<Option<KeyAt<'a>>, ScanError> {
        let Some(key_start) = self.0.next()? else {
            return Ok(None);
        };
        let b = self.0.b;
        if b.get(key_start) != Some(&b'"') {
            return err(key_start, "expected a key");
        }
        let (key_end, escaped) = skip_string_escaped(b, key_start + 1)?;
        let quoted = &b[key_start..key_end];
        let key = if escaped {
            Cow::Owned(serde_json::from_slice::<String>(quoted).map_err(|_| ScanError {
                at: key_start,
                what: "a key that is not a JSON string",
            })?)
        } else {
            let bytes = &quoted[1..quoted.len() - 1];
            Cow::Borrowed(if bytes.is_ascii() {
                // SAFETY: ASCII is UTF-8 (a short key checked inline, not by a call).
                unsafe { std::str::from_utf8_unchecked(bytes) }
            } else {
                std::str::from_utf8(bytes).map_err(|_| ScanError {
                    at: key_start,
                    what: "a key that is not UTF-8",
                })?
            })
        };
        let colon = skip_ws(b, key_end);
        if b.get(colon) != Some(&b':') {
            return err(colon, "expected ':' after a key");
        }
        Ok(Some(KeyAt {
            key,
            start: key_start,
            value: skip_ws(b, colon + 1),
        }))
    }

    /// The value of the member [`Members::next_key`] gave ends at `end`: steps over the comma,
    /// or the closing brace.
    pub fn value_ends_at(&mut self, end: usize) -> Result<(), ScanError> {
        self.0.value_ends_at(end)
    }

    /// Where the object ends (after its closing brace), once its members are all read.
    pub fn end(&self) -> usize {
        self.0.at
    }

    fn next_member(&mut self) -> Result<Option<Member<'a>>, ScanError> {
        let Some(k) = self.next_key()? else {
            return Ok(None);
        };
        let end = skip_value(self.0.b, k.value)?;
        self.value_ends_at(end)?;
        Ok(Some(Member {
            key: k.key,
            raw: &self.0.b[k.start..end],
            value: &self.0.b[k.value..end],
        }))
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = Result<Member<'a>, ScanError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.0.state == Step::Done {
            return None;
        }
        let r = self.next_member();
        if r.is_err() {
            self.0.state = Step::Done;
        }
        r.transpose()
    }
}

/// The elements of the JSON array `arr` (whitespace around it allowed), each as its text, in
/// order; an error ends them. Nothing may follow the array.
#[cfg(test)] // readers step an [`Elements`] cursor, reading in place
pub fn elements(arr: &[u8]) -> impl Iterator<Item = Result<&[u8], ScanError>> {
    let mut cursor = Elements::new(arr, 0, true);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let r = (|| {
            let Some(at) = cursor.next_value()? else {
                return Ok(None);
            };
            let end = skip_value(arr, at)?;
            cursor.value_ends_at(end)?;
            Ok(Some(&arr[at..end]))
        })();
        failed = r.is_err();
        r.transpose()
    })
}

/// A cursor over an array's elements (as [`Members`] is over an object's).
pub struct Elements<'a>(Cursor<'a>);

impl<'a> Elements<'a> {
    /// The array that opens at `at` in `b` (after any whitespace); `whole`: nothing may follow
    /// it.
    pub fn new(b: &'a [u8], at: usize, whole: bool) -> Self {
        Elements(Cursor::new(b, at, whole, *b"[]"))
    }

    /// Where the next element starts; it is the caller's to skip or read, then to end with
    /// [`Elements::value_ends_at`].
    pub fn next_value(&mut self) -> Result<Option<usize>, ScanError> {
        self.0.next()
    }

    /// The element [`Elements::next_value`] gave ends at `end`: steps over the comma, or the
    /// closing bracket.
    pub fn value_ends_at(&mut self, end: usize) -> Result<(), ScanError> {
        self.0.value_ends_at(end)
    }

    /// Where the array ends (after its closing bracket), once its elements are all read.
    pub fn end(&self) -> usize {
        self.0.at
    }
}

/// Only whitespace follows the closing bracket at `i`.
fn tail(b: &[u8], i: usize) -> Result<(), ScanError> {
    let end = skip_ws(b, i + 1);
    if end != b.len() {
        return err(end, "text after the value");
    }
    Ok(())
}

/// The object `obj` with only the members `keep` takes, as JSON text: serde then parses what a
/// reader reads, never scanning the rest.
pub fn filtered<'a>(obj: &'a [u8], mut keep: impl FnMut(&Member<'a>) -> bool) -> Result<Vec<u8>, ScanError> {
    let mut out = Vec::with_capacity(256);
    out.push(b'{');
    for m in members(obj) {
        let m = m?;
        if keep(&m) {
            if out.len() > 1 {
                out.push(b',');
            }
            out.extend_from_slice(m.raw);
        }
    }
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of the value at the start of `text` by serde_json (the reference).
    fn serde_end(text: &[u8]) -> Option<usize> {
        let mut s = serde_json::Deserializer::from_slice(text).into_iter::<serde::de::IgnoredAny>();
        match s.next() {
            Some(Ok(_)) => Some(s.byte_offset()),
            _ => None,
        }
    }

    /// A random JSON value: deep, with long strings of quotes, backslashes and brackets, so
    /// that every kind of 64-byte block boundary is crossed.
    fn value(rng: &mut fastrand::Rng, depth: u32) -> serde_json::Value {
        use serde_json::Value;
        let pick = if depth > 5 { rng.u32(0..4) } else { rng.u32(0..7) };
        match pick {
            0 => Value::Null,
            1 => Value::from(rng.f64() * 1e6 - 5e5),
            2 => Value::Bool(rng.bool()),
            3 => {
                let alphabet = ['a', '"', '\\', '{', '}', '[', ']', ',', ':', 'é', '\n', ' '];
                let len = if rng.u32(0..8) == 0 {
                    rng.usize(0..200)
                } else {
                    rng.usize(0..12)
                };
                Value::String((0..len).map(|_| alphabet[rng.usize(0..alphabet.len())]).collect())
            }
            4 | 5 => Value::Object(
                (0..rng.usize(0..6))
                    .map(|i| (format!("k{i}\"{{"), value(rng, depth + 1)))
                    .collect(),
            ),
            _ => Value::Array((0..rng.usize(0..6)).map(|_| value(rng, depth + 1)).collect()),
        }
    }

    #[test]
    fn the_simd_masks_are_the_byte_loops() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..2000 {
            let alphabet = b"\"\\{}[]a{|]\x7b\x5b\xfb\xdb";
            let block: [u8; 64] = std::array::from_fn(|_| alphabet[rng.usize(0..alphabet.len())]);
            #[cfg(target_arch = "x86_64")]
            {
                assert_eq!(Sse2::classify(&block), Bytes::classify(&block));
                if std::arch::is_x86_feature_detected!("avx2") {
                    assert_eq!(Avx2::classify(&block), Bytes::classify(&block));
                }
            }
            assert_eq!(Bytes::classify(&block), Bytes::classify(&block));
        }
    }

    /// Every form of the container scan ends where the others do (the tests above use the
    /// one this CPU picks).
    #[test]
    fn every_cpus_scan_ends_where_the_byte_loops_does() {
        let mut rng = fastrand::Rng::with_seed(9);
        for _ in 0..5_000 {
            let text = serde_json::to_string(&value(&mut rng, 0)).unwrap();
            if !text.starts_with(['{', '[']) {
                continue;
            }
            let cut = rng.usize(1..=text.len());
            let b = &text.as_bytes()[..cut];
            let want = skip_container_with::<Bytes>(b, 0);
            #[cfg(target_arch = "x86_64")]
            assert_eq!(skip_container_with::<Sse2>(b, 0), want);
            assert_eq!(skip_container(b, 0), want);
        }
    }

    #[test]
    fn a_value_ends_where_serde_json_says_it_does() {
        let mut rng = fastrand::Rng::with_seed(1);
        for n in 0..20_000 {
            let v = value(&mut rng, 0);
            let text = if n % 2 == 0 {
                serde_json::to_string(&v).unwrap()
            } else {
                serde_json::to_string_pretty(&v).unwrap()
            };
            // A prefix shifts where the 64-byte blocks fall; a suffix must not be taken in.
            let pad = " ".repeat(rng.usize(0..64));
            let line = format!("{pad}{text},1]");
            let b = line.as_bytes();
            let at = pad.len();
            assert_eq!(skip_value(b, at), Ok(at + text.len()), "{line}");
            assert_eq!(serde_end(&b[at..]).map(|e| e + at), Some(at + text.len()));
        }
    }

    #[test]
    fn a_cut_value_is_an_error_never_a_shorter_value() {
        let mut rng = fastrand::Rng::with_seed(2);
        let mut cut = 0;
        while cut < 5_000 {
            let text = serde_json::to_string(&value(&mut rng, 0)).unwrap();
            if !text.starts_with(['{', '[', '"']) {
                continue;
            }
            let at = rng.usize(1..text.len());
            assert!(skip_value(&text.as_bytes()[..at], 0).is_err(), "{}", &text[..at]);
            cut += 1;
        }
    }

    #[test]
    fn members_are_the_objects_keys_and_value_texts() {
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..5_000 {
            let serde_json::Value::Object(obj) = value(&mut rng, 4) else {
                continue;
            };
            let text = serde_json::to_string_pretty(&obj).unwrap();
            let got: Vec<(String, serde_json::Value)> = members(text.as_bytes())
                .map(|m| {
                    let m = m.unwrap();
                    let raw: serde_json::Map<String, serde_json::Value> =
                        serde_json::from_slice(&[b"{", m.raw, b"}"].concat()).unwrap();
                    assert_eq!(raw.get(&*m.key), Some(&serde_json::from_slice(m.value).unwrap()));
                    (m.key.into_owned(), serde_json::from_slice(m.value).unwrap())
                })
                .collect();
            let want: Vec<(String, serde_json::Value)> = obj.into_iter().collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn elements_are_the_arrays_value_texts() {
        let mut rng = fastrand::Rng::with_seed(4);
        for _ in 0..5_000 {
            let serde_json::Value::Array(arr) = value(&mut rng, 4) else {
                continue;
            };
            let text = serde_json::to_string_pretty(&arr).unwrap();
            let got: Vec<serde_json::Value> = elements(text.as_bytes())
                .map(|e| serde_json::from_slice(e.unwrap()).unwrap())
                .collect();
            assert_eq!(got, arr);
        }
        for (text, what) in [
            (&b"{}"[..], "expected an array"),
            (b"[1 2]", "expected ',' or ']' after a value"),
            (b"[1,", "expected a value, found the end"),
            (b"[1] x", "text after the value"),
        ] {
            let e = elements(text).find_map(Result::err).expect("an error");
            assert_eq!(e.what, what, "{}", String::from_utf8_lossy(text));
        }
        assert_eq!(elements(b" [ ] ").count(), 0);
    }

    #[test]
    fn what_is_not_an_object_says_where() {
        for (text, what) in [
            (&b"[1]"[..], "expected an object"),
            (b"{\"a\" 1}", "expected ':' after a key"),
            (b"{\"a\":1 \"b\":2}", "expected ',' or '}' after a value"),
            (b"{\"a\":1} x", "text after the value"),
            (b"{\"a\":{\"b\":[1,2}", "unclosed object or array"),
            (b"{\"a\":\"b", "unterminated string"),
            (b"{\"a\":}", "expected a value"),
            (b"not json", "expected an object"),
        ] {
            let e = members(text).find_map(Result::err).expect("an error");
            assert_eq!(e.what, what, "{}", String::from_utf8_lossy(text));
        }
        assert_eq!(members(b" {} ").count(), 0);
    }
}
