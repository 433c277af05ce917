//! The sweep: run plan, runner, journal.

pub mod journal;
pub mod owned;
pub mod plan;
pub mod progress;
pub mod runner;
