//! ocrig's guest payload: workloads and spinlock variants that run inside a guest (or on the
//! host for the bare-metal baseline) and print one versioned JSON [`report::Report`].
//!
//! The host orchestrator links this crate as a library to read reports through the same
//! types and to validate workload arguments without booting anything.

pub mod busywork;
pub mod catalog;
pub mod checks;
pub mod cli;
pub mod clock;
pub mod env;
pub mod locks;
pub mod metrics;
pub mod preempt_sample;
pub mod probe;
pub mod report;
pub mod slices;
pub mod work_as_run;
pub mod workloads;
