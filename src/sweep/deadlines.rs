//! How long a run may take before it counts as failed.

use std::time::Duration;

#[cfg(test)]
use crate::scenario::expand::workload_seconds;

/// Longest deadline ever derived, so that no arithmetic on instants can overflow.
pub const MAX_RUN_DEADLINE: Duration = Duration::from_secs(2 * 86_400);

/// Used when a workload does not say how long it runs.
const UNKNOWN_DURATION_S: f64 = 540.0;

/// A run's deadline: the scenario's `timeouts.run_s`, else twice the workload's own duration
/// (`--duration-ms` or `--seconds`) plus a minute, else ten minutes less a minute of slack.
#[cfg(test)]
pub fn run_timeout(argv: &[String], configured_s: Option<u64>) -> Duration {
    timeout_for(workload_seconds(argv), configured_s)
}

/// [`run_timeout`] of a run that lasts `seconds` (None: unknown).
pub fn timeout_for(seconds: Option<f64>, configured_s: Option<u64>) -> Duration {
    let wanted = match configured_s {
        Some(s) => Duration::from_secs(s),
        None => {
            let secs = seconds.unwrap_or(UNKNOWN_DURATION_S);
            Duration::try_from_secs_f64(secs * 2.0 + 60.0).unwrap_or(MAX_RUN_DEADLINE)
        }
    };
    wanted.min(MAX_RUN_DEADLINE)
}

/// How long a background CPU hog burns: as long as the measured workload is expected to run,
/// and [`HOG_SET_UP_S`] more, because the hogs start at the go signal while the measured run's
/// window opens at its gate, after its set-up (0.1–0.4 s under TCG at 2x–2.5x): a hog of the
/// run's length alone stopped before the window ended, and the level the run's tail held fell
/// (2.32 of 2.5). Not longer: every attempt waits for its last worker, so a longer hog
/// lengthens every run.
pub fn hog_seconds_for(seconds: Option<f64>) -> f64 {
    seconds.map_or(30.0, |s| s + HOG_SET_UP_S)
}

/// What a hog burns beyond the measured run's own length: room for its set-up.
pub const HOG_SET_UP_S: f64 = 0.5;

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn run_timeout_follows_the_workload_duration() {
        assert_eq!(
            run_timeout(&argv(&["lock", "--duration-ms", "2000"]), None),
            Duration::from_secs(64)
        );
        assert_eq!(
            run_timeout(&argv(&["ebizzy", "--seconds", "7"]), None),
            Duration::from_secs(74)
        );
        assert_eq!(
            run_timeout(&argv(&["hackbench"]), None),
            Duration::from_secs(1140)
        );
        assert_eq!(run_timeout(&argv(&["lock"]), Some(5)), Duration::from_secs(5));
    }

    #[test]
    fn absurd_durations_are_capped_instead_of_overflowing() {
        assert_eq!(
            run_timeout(&argv(&["lock", "--duration-ms", "1e300"]), None),
            MAX_RUN_DEADLINE
        );
        assert_eq!(run_timeout(&argv(&["lock"]), Some(u64::MAX)), MAX_RUN_DEADLINE);
    }
}
