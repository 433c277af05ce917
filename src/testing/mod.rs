//! What tests share, and only tests: fixtures of journals and their records, of guests and
//! their boot plans, of kernel images, and a browser to load a report in. Compiled for tests only; a module's own
//! fixtures stay in its tests.

mod boot;
mod browser;
mod image;
mod journal;

pub(crate) use boot::*;
pub(crate) use browser::*;
pub(crate) use image::*;
pub(crate) use journal::*;
