//! The sweep: the run plan, the scheduler that turns it into attempts and records over an
//! executor, and the journal with the one rule for what counts.

pub mod accounting;
pub mod deadlines;
pub mod journal;
pub mod order;
pub mod plan;
pub mod progress;
pub mod records;
pub mod scheduler;
pub mod stopping;
