//! The busy loop's undisturbed speed, remembered between runs in one guest.
//!
//! A calibration reads the loop's speed over [`crate::busywork::SPAN`]. Where the host itself
//! changes speed for seconds at a time (this project's VM: two states x1.7-2.0 apart, 40 ms to
//! 2 s long, slow for 24-63 % of 500 µs samples on 2026-12-04), a calibration can sit wholly
//! in a slow spell: every hold it sizes is then x0.5-0.7 of the asked length whenever the host
//! is fast, and the run's own work check refuses it. At 2x, 1-vCPU guests, that refused 105
//! and then 133 attempts of one small sweep and left 15-16 slots empty after their retries.
//!
//! The undisturbed speed is the machine's, not the moment's, so every run leaves behind the
//! fastest of its calibrations and what was remembered (in the guest's temporary directory,
//! keyed by this binary's size and time, so another build never reads it), and the next run
//! in the same guest sizes its work from it where its own calibration reads more than
//! [`SLOWER`] slower: that calibration sat in a slow spell. Nothing here is trusted blindly:
//! - the run is still judged by its own timed intervals against the asked lengths
//!   ([`crate::work_as_run`]), so a remembered speed the machine no longer has fails the run
//!   (its holds run too long);
//! - [`FORGET_AFTER`] such runs in a row forget it, so the next run calibrates afresh;
//! - the report says which speed sized the work, this run's or the remembered one, and both.
//!
//! (A first version remembered only passing runs and forgot on any failure: at 2x, four
//! 1-vCPU guests, a guest whose warm-up calibrated in a slow spell never got a memory, and one
//! run sitting wholly in a slow spell erased it; 111 attempts were still refused.)

use std::path::PathBuf;

use crate::checks::Check;

/// A calibration slower than the remembered speed by more than this sat in a slow spell.
pub const SLOWER: f64 = 0.05;

/// Where one binary's remembered speed lives.
#[derive(Debug, Clone)]
pub struct LoopMemory {
    path: PathBuf,
}

impl LoopMemory {
    /// The memory of this binary in `$OCRIG_LOOP_MEMORY_DIR`, else the temporary directory;
    /// None when the binary cannot be identified.
    pub fn of_this_binary() -> Option<Self> {
        let exe = std::env::current_exe().ok()?;
        let meta = std::fs::metadata(&exe).ok()?;
        let mtime = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        let dir = std::env::var_os("OCRIG_LOOP_MEMORY_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        Some(Self::at(
            dir.join(format!("ocrig-payload-loop-speed-{}-{mtime}", meta.len())),
        ))
    }

    /// [`Self::of_this_binary`], unless the run was asked not to remember (`--no-loop-memory`).
    pub fn unless_off(off: bool) -> Option<Self> {
        (!off).then(Self::of_this_binary).flatten()
    }

    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    /// The remembered ns per iteration, if a run left one.
    pub fn recall(&self) -> Option<f64> {
        self.read().map(|(v, _)| v)
    }

    /// (speed, runs in a row that used it and found their holds too long).
    fn read(&self) -> Option<(f64, u32)> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let mut fields = text.split_whitespace();
        let v = fields
            .next()?
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)?;
        let misses = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        Some((v, misses))
    }

    fn write(&self, v: f64, misses: u32) {
        let tmp = self.path.with_extension("tmp");
        if std::fs::write(&tmp, format!("{v} {misses}\n")).is_ok() {
            let _ = std::fs::rename(&tmp, &self.path);
        }
    }

    /// What a run leaves behind: its calibrations' speed `ns_per_iter` (the fastest of
    /// before and after; kept when faster than the remembered one, whether the run passed or
    /// not: a 10th percentile of timed trials cannot read faster than the loop runs), and
    /// whether the remembered speed sized its work and its holds then ran too long. Three
    /// such runs in a row, and the machine no longer has that speed: forgotten, so the next
    /// run calibrates afresh. Best effort: a memory that cannot be written is no memory.
    pub fn after_run(&self, ns_per_iter: f64, used_and_too_long: bool) {
        let (old, misses) = match self.read() {
            Some((v, m)) => (Some(v), m),
            None => (None, 0),
        };
        let misses = if used_and_too_long { misses + 1 } else { 0 };
        if misses >= FORGET_AFTER {
            self.forget();
            return;
        }
        let fresh = (ns_per_iter.is_finite() && ns_per_iter > 0.0).then_some(ns_per_iter);
        let best = match (old, fresh) {
            (Some(o), Some(f)) => o.min(f),
            (Some(o), None) => o,
            (None, Some(f)) => f,
            (None, None) => return,
        };
        self.write(best, misses);
    }

    /// [`Self::after_run`] of a run whose work was sized at `sized` ns per iteration, from
    /// memory where `measured_before` (this run's own calibration) is given, calibrated again
    /// at `after`; `work` is the check of the sized work (`hold_as_asked`, `work_inside_as_asked`)
    /// with the ratio of the work as it ran to as asked.
    pub fn after_sized_run(
        &self,
        sized: f64,
        measured_before: Option<f64>,
        after: f64,
        work: (Option<&Check>, Option<f64>),
    ) {
        // Sized from memory and held too long: the work's check failed with a ratio above 1.
        let too_long =
            measured_before.is_some() && work.0.is_some_and(|c| !c.ok) && work.1.is_some_and(|r| r > 1.0);
        self.after_run(measured_before.unwrap_or(sized).min(after), too_long);
    }

    pub fn forget(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs in a row whose holds, sized from the remembered speed, ran too long before it is
/// forgotten: one or two are the host's slow spells (a run of a second can sit wholly inside
/// one), three in a row a machine that has slowed down for good.
pub const FORGET_AFTER: u32 = 3;

/// The speed a run sizes its work from: its own calibration `measured`, or `remembered` where
/// the calibration reads more than [`SLOWER`] slower than it. Returns the speed and whether it
/// is the remembered one.
pub fn sizing_speed(measured: f64, remembered: Option<f64>) -> (f64, bool) {
    match remembered {
        Some(r) if measured.is_finite() && measured > r * (1.0 + SLOWER) => (r, true),
        _ => (measured, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_calibration_gives_way_to_the_remembered_speed_until_it_stops_holding() {
        let path = std::env::temp_dir().join(format!("ocrig-loop-memory-test-{}", std::process::id()));
        let m = LoopMemory::at(path.clone());
        m.forget();
        assert_eq!(m.recall(), None);
        // Nothing remembered: the run's own calibration.
        assert_eq!(sizing_speed(3.3, None), (3.3, false));
        // Every run leaves its fastest speed, failed ones too; the fastest is kept.
        m.after_run(1.70, false);
        m.after_run(1.80, false);
        assert_eq!(m.recall(), Some(1.70));
        // Within 5 %: the run's own; beyond: a slow spell, the remembered speed.
        assert_eq!(sizing_speed(1.78, m.recall()), (1.78, false));
        assert_eq!(sizing_speed(3.3, m.recall()), (1.70, true));
        // Faster than remembered: the run's own, and remembered.
        assert_eq!(sizing_speed(1.60, m.recall()), (1.60, false));
        m.after_run(1.60, false);
        assert_eq!(m.recall(), Some(1.60));
        // Two runs sized from memory ran too long (slow spells): kept; a good run resets the
        // count; three in a row: forgotten.
        m.after_run(2.9, true);
        m.after_run(2.9, true);
        assert_eq!(m.recall(), Some(1.60));
        m.after_run(1.7, false);
        for _ in 0..FORGET_AFTER - 1 {
            m.after_run(2.9, true);
            assert_eq!(m.recall(), Some(1.60));
        }
        m.after_run(2.9, true);
        assert_eq!(m.recall(), None);
        // Nonsense is neither remembered nor recalled.
        m.after_run(f64::NAN, false);
        assert_eq!(m.recall(), None);
        std::fs::write(&path, "-1 0\n").unwrap();
        assert_eq!(m.recall(), None);
        m.forget();
    }
}
