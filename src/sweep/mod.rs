//! The sweep: run plan, runner, journal.

pub mod journal;
