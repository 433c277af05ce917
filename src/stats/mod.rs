//! Statistics over journal records: pure functions, no I/O.
//!
//! - [`summary`]: n, mean, sample stdev, CV, min/max, 95% CI of the mean (Student t).
//! - [`outliers`]: modified Z-scores (median absolute deviation).
//! - [`effect`]: a comparison's ratio over the design's units, its intervals and tests, Holm.
//! - [`fisher`]: Fisher's exact test of two sides' self-check rejection rates.
//! - [`compare`]: %improvement (signed so `+` is better), Welch's t-test, geometric means.
//! - [`power`]: the minimum detectable effect of a comparison (noncentral t, power 0.8).
//! - [`cells`]: journal records grouped into cells and the comparison model reports render.
//! - [`explain`]: per-cell telemetry (vCPU wait, guest steal, KVM counters) or why it is missing.
//! - [`kernel_symbols`]: the guest kernel's busiest symbols per cell, from the runs' profiles.
//! - [`preemption`]: per-run and per-cell stretched lock holds and hand-overs (lock workloads).
//! - [`timeline_ref`]: where a run's vCPU timeline summary is, and its figures in words.

pub mod cells;
pub mod compare;
pub mod digest;
pub mod effect;
pub mod explain;
pub mod fisher;
pub mod kernel_symbols;
pub mod outliers;
pub mod power;
pub mod preemption;
pub mod summary;
pub mod timeline_ref;
