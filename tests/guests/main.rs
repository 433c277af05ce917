//! End to end on real guests: each module runs `ocrig run` on a scenario of its own and checks
//! what the sweep journaled and reported (and a few tests beside them that boot nothing). One
//! test binary: every test that boots guests or runs a sweep on this host's CPUs holds
//! [`common::one_sweep`] throughout, so no two sweeps share the host CPUs and distort each
//! other's timings (the tests of ocrig's commands that boot nothing are `tests/commands`).

#[path = "../common/mod.rs"]
mod common;

mod comparisons;
mod exec;
mod faults;
mod forced_preemption;
mod install;
mod journal;
mod locktorture;
mod own_kernel;
mod packages;
mod placement;
mod preemption;
mod remote;
mod reproductions;
mod run_position;
mod run_window;
mod scale;
mod smoke;
mod telemetry;
mod terminal;
mod timeline;
