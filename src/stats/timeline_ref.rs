//! Where a run's vCPU timeline summary is and what a report needs of it (`extra.timeline`,
//! written by [`crate::telemetry::sched_trace`]): the side file's path or why there is none,
//! the measured slices in words, and the stretched holds and hand-overs the record's payload
//! listed, placed on the host's timeline. A digest keeps where to find it; the report reads it
//! again for the runs it draws.

/// One stretched hold or hand-over of the drawn run, on its timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// Its start, ms from the run's start (the timeline's clock).
    pub at_ms: f64,
    pub len_ms: f64,
    /// A hold (else a hand-over).
    pub hold: bool,
    pub guest: u32,
    /// The guest vCPU it ended on.
    pub vcpu: u32,
}

/// The stretched intervals a record's payload listed, where the host's record placed them.
pub(crate) fn stalls_of(r: &crate::journal::RunRecord) -> Vec<Stall> {
    let (Some(p), Some(on_host)) = (r.payload.as_ref(), r.extra.get("stretched_on_host")) else {
        return Vec::new();
    };
    let Some(pre) = p.detail.get("preemption") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (kind, hold) in [("holds", true), ("handovers", false)] {
        let (Some(listed), Some(placed)) = (pre[kind]["longest"].as_array(), on_host[kind].as_array()) else {
            continue;
        };
        for (s, h) in listed.iter().zip(placed) {
            if let (Some(at_us), Some(len_ns), Some(vcpu)) =
                (h["at_us"].as_f64(), s["len_ns"].as_f64(), s["cpu"].as_u64())
            {
                out.push(Stall {
                    at_ms: at_us / 1e3,
                    len_ms: len_ns / 1e6,
                    hold,
                    guest: r.guest,
                    vcpu: vcpu as u32,
                });
            }
        }
    }
    out
}

/// Where a digest's timeline summary is: in the record whose line starts `offset` bytes into
/// the journal `file`, read again only for the runs drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineAt {
    /// (A thin pointer: every record of a one-guest sweep has a timeline.)
    pub file: std::sync::Arc<std::path::PathBuf>,
    pub offset: u64,
}

impl TimelineAt {
    /// The summary, read again from the journal.
    pub fn load(&self) -> Result<TimelineRef, String> {
        let (file, offset) = (&self.file, self.offset);
        let r = crate::journal::read_record_at(file, offset).map_err(|e| format!("{e:#}"))?;
        let mut t = r
            .extra
            .get("timeline")
            .map(TimelineRef::of)
            .ok_or_else(|| format!("{}: the record at byte {offset} has no timeline", file.display()))?;
        t.stalls = stalls_of(&r);
        Ok(t)
    }
}

/// What the report needs of a run's timeline summary (`extra.timeline`): where the side file
/// is, or why there is none, and its figures in words. A report digest holds this, not the
/// summary (kilobytes of JSON values, on every record of a one-guest sweep).
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineRef {
    pub path: Option<String>,
    pub unavailable: Option<String>,
    pub words: String,
    /// The record's stretched intervals on the timeline (read with the record, for the drawn
    /// runs only).
    pub stalls: Vec<Stall>,
}

impl TimelineRef {
    pub fn of(summary: &serde_json::Value) -> Self {
        let text = |k: &str| summary.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let unavailable = text("unavailable");
        Self {
            path: text("path"),
            words: if unavailable.is_some() {
                String::new()
            } else {
                slice_words(summary)
            },
            unavailable,
            stalls: Vec::new(),
        }
    }
}

/// The measured slices beside the host's setting, in words.
fn slice_words(summary: &serde_json::Value) -> String {
    let ms = |v: &serde_json::Value| v.as_f64().map_or("-".into(), |x| format!("{x:.2} ms"));
    let mut parts: Vec<String> = summary["vcpu_slices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "guest {} vCPU {}: turn p50 {} p90 {} ({} turns), on-CPU stint p50 {}",
                s["guest"],
                s["vcpu"],
                ms(&s["turn_p50_ms"]),
                ms(&s["turn_p90_ms"]),
                s["turns"],
                ms(&s["segment_p50_ms"])
            )
        })
        .collect();
    let host = &summary["host_slice"];
    parts.push(match host["ns"].as_u64() {
        Some(ns) => format!(
            "host {} = {:.2} ms",
            host["name"].as_str().unwrap_or("slice"),
            ns as f64 / 1e6
        ),
        None => format!(
            "host {}: not read ({}){}",
            host["name"].as_str().unwrap_or("slice"),
            host["unavailable"].as_str().unwrap_or("unknown"),
            host["kernel_default_ns"]
                .as_u64()
                .map_or(String::new(), |ns| format!(
                    "; the kernel's default for this CPU count is {:.2} ms",
                    ns as f64 / 1e6
                ))
        ),
    });
    for (cpu, sh) in summary["cpu_shares"].as_object().into_iter().flatten() {
        let pct = |v: &serde_json::Value| format!("{:.0}%", v.as_f64().unwrap_or(0.0) * 100.0);
        let top: Vec<String> = sh["top_other"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| format!("{} {}", t[0].as_str().unwrap_or("?"), pct(&t[1])))
            .collect();
        parts.push(format!(
            "CPU {cpu} during the run: vCPUs {}, other threads {} ({}), idle {}",
            pct(&sh["vcpus"]),
            pct(&sh["other"]),
            top.join(", "),
            pct(&sh["idle"])
        ));
    }
    if let Some(hz) = host["hz"].as_u64() {
        parts.push(format!("host tick {:.1} ms (CONFIG_HZ={hz})", 1e3 / hz as f64));
    }
    if let Some(c) = summary["clipped"].as_str() {
        parts.push(format!("clipped: {c}"));
    }
    parts.join("; ")
}
