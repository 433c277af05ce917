//! What a backend provides so that guests can be booted, saved and restored: the seam between
//! the backends (QEMU driven directly, libvirt) and what starts guests through them (a cold
//! boot, a snapshot template and its clones: [`super::started`], [`super::template`]).

use std::path::Path;

use serde_json::Value;

use super::boot::BootPlan;
use super::{BoxFut, Guest, GuestSpec};

/// A started QEMU that template code can drive through QMP.
pub trait Controlled: Guest {
    fn qmp<'a>(&'a self, command: &'a str, args: Value) -> BoxFut<'a, anyhow::Result<Value>>;
    /// QEMU's own messages (stderr), for errors.
    fn qemu_log(&self) -> String;
}

/// What a backend provides so that guests can be booted, saved and restored.
pub trait Launcher: Send + Sync {
    fn kind(&self) -> &'static str;
    /// Canonical text of the guest's machine configuration as this backend would start it,
    /// with per-guest parts masked, plus the versions of the programs that run it.
    fn fingerprint(&self, spec: &GuestSpec, plan: &BootPlan) -> anyhow::Result<String>;
    /// Starts QEMU for `spec`: booting `plan`, or restoring the state file `incoming`.
    fn launch<'a>(
        &'a self,
        spec: &'a GuestSpec,
        plan: &'a BootPlan,
        incoming: Option<&'a Path>,
    ) -> BoxFut<'a, anyhow::Result<Box<dyn Controlled>>>;
    /// Whether templates keep the guest's RAM in a file of their own that clones map private
    /// ([`super::RamBacking`]), rather than inside the saved state.
    fn ram_files(&self) -> bool {
        false
    }
}
