//! The clock tie between a guest's CLOCK_MONOTONIC and the host's trace clock: markers the
//! guest writes into the trace, each read back with the host time it was written at.

use std::collections::BTreeMap;

use super::*;

/// How the traced host's trace clock was tied to this machine's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockTie {
    /// The traced host's CLOCK_MONOTONIC minus this machine's, ns.
    pub offset_ns: i64,
    /// How far off `offset_ns` can be (half the marker write's round trip), ns.
    pub error_ns: u64,
}

pub(super) const MARKER: &str = "ocrig-clock-";

/// Markers written to tie a remote host's trace clock to this one's; the one with the shortest
/// round trip is kept.
pub(super) const MARKERS: u32 = 3;

/// The traced host's clock against this one's from the markers `(index, before, after)` and
/// where they landed in the trace: the marker with the shortest round trip, its trace time
/// against the middle of its write.
pub fn clock_tie(trace: &str, markers: &[(u32, u64, u64)]) -> Option<ClockTie> {
    let landed: BTreeMap<u32, u64> = trace.lines().filter_map(parse_marker).collect();
    markers
        .iter()
        .filter_map(|&(i, t0, t1)| {
            let at = *landed.get(&i)?;
            let mid = t0 / 2 + t1 / 2 + (t0 % 2 + t1 % 2) / 2;
            Some(ClockTie {
                offset_ns: at as i64 - mid as i64,
                error_ns: t1.saturating_sub(t0).div_ceil(2),
            })
        })
        .min_by_key(|t| t.error_ns)
}

/// A marker line of ours: (its index, its time on the trace clock).
pub(super) fn parse_marker(line: &str) -> Option<(u32, u64)> {
    let (head, body) = line.split_once(": tracing_mark_write: ")?;
    let i = body.trim().strip_prefix(MARKER)?.parse().ok()?;
    Some((i, head_cpu_ns(head)?.1))
}
