//! What tests share, and only tests: fixtures of journals and their records (and a journal
//! held in memory read as a report reads one: its model, its reports), of guests and their
//! boot plans, of kernel images, a stand-in host's files, and a browser to load a report in.
//! Compiled for tests only; a module's own fixtures stay in its tests.

mod boot;
mod browser;
mod cpu;
mod explain;
mod host;
pub(crate) mod host_trees;
mod image;
mod journal;
mod random;
mod report;

pub(crate) use boot::*;
pub(crate) use browser::*;
pub(crate) use cpu::*;
pub(crate) use explain::*;
pub(crate) use host::*;
pub(crate) use image::*;
pub(crate) use journal::*;
pub(crate) use random::*;
pub(crate) use report::*;
