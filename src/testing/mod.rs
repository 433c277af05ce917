//! What tests share, and only tests: fixtures of journals and their records, of guests and
//! their boot plans, and a browser to load a report in. Compiled for tests only; a module's own
//! fixtures stay in its tests.

mod boot;
mod browser;
mod journal;

pub(crate) use boot::*;
pub(crate) use browser::*;
pub(crate) use journal::*;
