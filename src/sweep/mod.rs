//! The sweep: the run plan and the scheduler that turns it into attempts and records over an
//! executor. The journal and the one rule for what counts live below it, in [`crate::journal`]
//! (the statistics read them too).

pub mod deadlines;
pub mod looks;
pub mod order;
pub mod plan;
pub mod progress;
pub mod records;
#[cfg(test)]
mod scale_bench;
pub mod scheduler;
pub mod sliced;
pub mod stopping;
