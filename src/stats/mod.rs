//! Statistics over journal records: pure functions, no I/O.
//!
//! - [`summary`]: n, mean, sample stdev, CV, min/max, 95% CI of the mean (Student t).
//! - [`outliers`]: modified Z-scores (median absolute deviation).
//! - [`compare`]: %improvement (signed so `+` is better), Welch's t-test, geometric means.
//! - [`cells`]: journal records grouped into cells and the comparison model reports render.

pub mod cells;
pub mod compare;
pub mod outliers;
pub mod summary;
