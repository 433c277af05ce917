//! A guest's TSC on this machine's clock over one run, from the ties made before its go and
//! once its payload was done (`extra.guest_clock`, `after`) and the payload's window on its TSC
//! (`preemption.window`).
//!
//! Inside its window the payload times everything at the guest's own rate (its TSC against its
//! CLOCK_MONOTONIC, `window.hz`), which is the TSC's rate on this machine's clock where the
//! guest's TSC is the hardware's (KVM). Under TCG it is not: QEMU gives every vCPU the host's
//! TSC plus one shared offset that only grows (it keeps reads from going back between host
//! CPUs), so a guest whose vCPUs read the TSC all the time on host CPUs whose TSCs disagree by
//! a few tens of ns runs fast, and so does its clock: 500-1 100 ppm over a lock run on a cloud
//! VM (2026-12-07), while the guest idles at its own rate (4-9 ppm off). So the map takes the
//! guest's rate outside the window and, inside it, the one rate that makes the two ties agree:
//! exact where the guest's rate is the host's (the two ties then say so). Where it is not, the
//! drift need not be even (it comes and goes within a run), so the map's error counts all of
//! it ([`TscOnHost::error_ns`]).

use serde_json::Value;

/// How the ticks of one run map onto this machine's CLOCK_MONOTONIC, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TscOnHost {
    /// The tie before the go: this machine's time of the guest's reading `tie_tsc`.
    tie_host_ns: f64,
    tie_tsc: u64,
    /// The guest's own rate (the window's), ticks per second.
    guest_hz: f64,
    /// The window on the TSC and the rate inside it on this machine's clock (the guest's
    /// where there was no tie after the run).
    window: (u64, u64),
    window_hz: f64,
    /// How much longer the time between the ties was at the guest's rate than on this clock,
    /// ns: the drift the map put inside the window (0 without a tie after the run).
    drift_ns: f64,
    /// The larger of the ties' errors, ns.
    ties_error_ns: u64,
}

impl TscOnHost {
    /// The map of `clock` (`extra.guest_clock`) and the payload's `window`; None where either
    /// lacks what it needs.
    pub fn of(clock: &Value, window: &Value) -> Option<Self> {
        let usable = |h: f64| h.is_finite() && h > 0.0;
        let guest_hz = window["hz"].as_f64().filter(|h| usable(*h))?;
        let start = window["start_tick"].as_u64()?;
        // A window without its end (made before it had one) is read at the guest's rate.
        let end = window["end_tick"].as_u64().unwrap_or(start);
        let (tie_host_ns, tie_tsc) = (clock["host_mono_ns"].as_u64()? as f64, clock["tsc"].as_u64()?);
        let mut map = Self {
            tie_host_ns,
            tie_tsc,
            guest_hz,
            window: (start, end.max(start)),
            window_hz: guest_hz,
            drift_ns: 0.0,
            ties_error_ns: tie_error_ns(clock)?,
        };
        let after = &clock["after"];
        if let (Some(host), Some(tsc)) = (after["host_mono_ns"].as_u64(), after["tsc"].as_u64())
            && tsc > tie_tsc
            && host as f64 > tie_host_ns
        {
            map.drift_ns = (tsc - tie_tsc) as f64 * 1e9 / guest_hz - (host as f64 - tie_host_ns);
            // The window between the ties takes all of it: what it lasted on this clock.
            if start >= tie_tsc && tsc >= end && end > start {
                let inside_ns = (end - start) as f64 * 1e9 / guest_hz - map.drift_ns;
                let hz = (end - start) as f64 * 1e9 / inside_ns;
                // A tie whose error is as large as the window would say anything: kept to 1 %.
                if inside_ns > 0.0 && usable(hz) && (hz / guest_hz - 1.0).abs() <= MAX_RATE_OFF {
                    map.window_hz = hz;
                }
            }
        }
        Some(map)
    }

    /// `tick` on this machine's clock, ns.
    pub fn host_ns(&self, tick: u64) -> f64 {
        let (start, end) = self.window;
        let at = |from: u64, to: u64, hz: f64| (to as i128 - from as i128) as f64 * 1e9 / hz;
        let window_start = self.tie_host_ns + at(self.tie_tsc, start, self.guest_hz);
        if tick <= start {
            window_start - at(tick, start, self.guest_hz)
        } else if tick <= end {
            window_start + at(start, tick, self.window_hz)
        } else {
            window_start + at(start, end, self.window_hz) + at(end, tick, self.guest_hz)
        }
    }

    /// The payload's time `ns` after its window's start (at the guest's rate) on this clock.
    pub fn host_ns_in_window(&self, ns: i64) -> f64 {
        let ticks = ns as f64 * self.guest_hz / 1e9;
        self.host_ns(self.window.0) + ticks * 1e9 / self.window_hz
    }

    /// How far [`host_ns`](Self::host_ns) may put a tick from its time on this clock, ns: the
    /// larger of the ties' errors plus all the drift between them. The drift only adds (QEMU's
    /// offset only grows), so however it fell in time, its share before any tick lies between
    /// none and all of it, as does the map's; it can come and go within a run (a run at +500
    /// ppm over its window had its intervals up to 0.9 ms early where the drift was put evenly
    /// over the window, another at +700 ppm 1.2 ms late, 2026-12-07). Where the guest's rate
    /// is this clock's (KVM), the drift is the ties' noise, tens of µs.
    pub fn error_ns(&self) -> u64 {
        self.ties_error_ns + self.drift_ns.abs().round() as u64
    }

    /// How far the TSC ran off the guest's own rate inside the window on this clock, ppm
    /// (positive: the guest's clock ran fast).
    pub fn window_ppm(&self) -> f64 {
        (self.window_hz / self.guest_hz - 1.0) * 1e6
    }
}

/// The most the window's rate may be off the guest's before the ties are judged too coarse for
/// it: ten times the most seen under TCG.
const MAX_RATE_OFF: f64 = 0.01;

/// How far [`TscOnHost`] may put a tick from its time on this machine's clock, ns: the error
/// of the tie before the run, or the larger of the two where there is a tie after it too.
fn tie_error_ns(clock: &Value) -> Option<u64> {
    let before = clock["error_ns"].as_u64()?;
    Some(
        clock["after"]["error_ns"]
            .as_u64()
            .map_or(before, |after| before.max(after)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn window() -> Value {
        // Ticks 1e9..4e9 at the guest's 1 GHz: a 3 s window starting 1 s after the tie.
        json!({"start_tick": 1_000_000_000u64, "end_tick": 4_000_000_000u64, "hz": 1e9})
    }

    #[test]
    fn without_a_tie_after_the_run_the_guests_own_rate_places_every_tick() {
        let clock = json!({"host_mono_ns": 10_000_000_000u64, "tsc": 0u64, "error_ns": 100_000});
        let m = TscOnHost::of(&clock, &window()).unwrap();
        assert_eq!(m.host_ns(0), 1e10);
        assert_eq!(m.host_ns(4_000_000_000), 1.4e10);
        assert_eq!(m.host_ns_in_window(1_500_000_000), 1.25e10);
        assert_eq!(m.window_ppm(), 0.0);
        assert_eq!((tie_error_ns(&clock), m.error_ns()), (Some(100_000), 100_000));
    }

    #[test]
    fn a_tie_after_the_run_puts_the_drift_inside_the_window() {
        // The guest's clock ran 1 000 ppm fast inside its window only: 3 s of its time took
        // 2.997 s of this machine's, and the tie after, 1 s of ticks past the window's end,
        // came 4.997 s after the first.
        let clock = json!({
            "host_mono_ns": 10_000_000_000u64, "tsc": 0u64, "error_ns": 100_000,
            "after": {"host_mono_ns": 14_997_002_997u64, "tsc": 5_000_000_000u64, "error_ns": 300_000},
        });
        let m = TscOnHost::of(&clock, &window()).unwrap();
        assert!((m.window_ppm() - 1_000.0).abs() < 0.5, "{}", m.window_ppm());
        let close = |a: f64, b: f64| assert!((a - b).abs() < 2.0, "{a} vs {b}");
        close(m.host_ns(1_000_000_000), 1.1e10);
        close(m.host_ns(4_000_000_000), 1.1e10 + 2_997_002_997.0);
        close(m.host_ns(5_000_000_000), 14_997_002_997.0);
        close(m.host_ns_in_window(3_000_000_000), 1.1e10 + 2_997_002_997.0);
        assert_eq!(tie_error_ns(&clock), Some(300_000));
        // All 3 ms of the drift may have fallen anywhere between the ties: the error says so.
        let drift = m.error_ns() - 300_000;
        assert!((2_996_000..=2_998_000).contains(&drift), "{drift}");
    }

    #[test]
    fn a_tie_after_that_failed_or_says_nonsense_leaves_the_guests_rate() {
        let failed =
            json!({"host_mono_ns": 0u64, "tsc": 0u64, "error_ns": 5u64, "after": {"unavailable": "x"}});
        let m = TscOnHost::of(&failed, &window()).unwrap();
        assert_eq!(m.window_ppm(), 0.0);
        assert_eq!(tie_error_ns(&failed), Some(5));
        // Back in time, or 50 % off: not a rate.
        for host in [1_000u64, 3_000_000_000] {
            let c = json!({"host_mono_ns": 0u64, "tsc": 0u64, "error_ns": 5u64,
                "after": {"host_mono_ns": host, "tsc": 5_000_000_000u64, "error_ns": 5u64}});
            assert_eq!(TscOnHost::of(&c, &window()).unwrap().window_ppm(), 0.0, "{c}");
        }
        assert_eq!(TscOnHost::of(&json!({}), &window()), None);
        assert_eq!(TscOnHost::of(&failed, &json!({"hz": 0.0})), None);
    }
}
