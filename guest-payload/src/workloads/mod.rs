//! Workloads: each takes its clap `Args`, runs, and returns one [`crate::report::Report`].

pub mod lock;
