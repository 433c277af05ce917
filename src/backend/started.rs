//! One start policy for every backend: boot cold, or clone a template of the guest's shape,
//! and when a clone cannot be had or does not come up, boot cold instead (saying why once).
//! The guest that comes back reports how it was started (`start_facts`) and, for a clone, the
//! command that puts its wall clock and RNG right (`post_ready_command`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use super::boot::{self, BootPlan, notice_once};
use super::launcher::{Controlled, Launcher};
use super::template::{self, TemplateCache};
use super::{BoxFut, Guest, GuestSpec, Liveness};
use crate::vocabulary::StartMethod;

/// Starts guests for a backend; holds its template cache.
pub struct Starter {
    templates: TemplateCache,
    /// Whether this host's QEMU can clone at all (checked once).
    support: OnceLock<Result<(), String>>,
}

impl Default for Starter {
    fn default() -> Self {
        Self::new(TemplateCache::default())
    }
}

impl Starter {
    pub fn new(templates: TemplateCache) -> Self {
        Self {
            templates,
            support: OnceLock::new(),
        }
    }

    /// A starter that always boots, saying why (e.g. a remote host, where the state file and
    /// the QMP socket a clone needs would live on that host).
    pub fn without_clones(why: String) -> Self {
        let s = Self::default();
        let _ = s.support.set(Err(why));
        s
    }

    pub async fn start(&self, l: &dyn Launcher, spec: &GuestSpec) -> anyhow::Result<Box<dyn Guest>> {
        let mut fallback = None;
        if spec.start.is_clone() {
            let plan = boot::plan(spec, spec.start);
            match self.try_clone(l, spec, &plan).await {
                Ok(g) => return Ok(g),
                Err(why) => {
                    notice_once(&format!("guests are booted, not cloned: {why}"));
                    fallback = Some(why);
                }
            }
        }
        let plan = boot::plan(spec, StartMethod::Boot);
        let g = l.launch(spec, &plan, None).await?;
        let facts = json!({
            "method": "boot",
            "requested": spec.start.as_str(),
            "fallback_reason": fallback,
            "boot": plan.facts,
        });
        Ok(Box::new(StartedGuest {
            inner: g,
            facts,
            clone: false,
        }))
    }

    async fn try_clone(
        &self,
        l: &dyn Launcher,
        spec: &GuestSpec,
        plan: &BootPlan,
    ) -> Result<Box<dyn Guest>, String> {
        self.support.get_or_init(clone_support).clone()?;
        let (t, built_here) = self.templates.get(l, spec, plan).await?;
        match template::restore(l, &t, spec, plan).await {
            Ok(r) => {
                let mut facts = template::clone_facts(&t, built_here, &r, plan);
                facts["requested"] = json!(spec.start.as_str());
                Ok(Box::new(StartedGuest {
                    inner: r.guest,
                    facts,
                    clone: true,
                }))
            }
            Err(f) => {
                if f.template_fault {
                    self.templates.discard(&t, &f.why).await;
                }
                Err(format!(
                    "the clone of template {} did not come up: {}",
                    t.short(),
                    f.why
                ))
            }
        }
    }
}

/// Whether this host can restore saved guests: QEMU ≥ 8.2 has the `file:` migration URI.
pub fn clone_support() -> Result<(), String> {
    support_for(crate::host::qemu_version(std::path::Path::new(
        "qemu-system-x86_64",
    )))
}

fn support_for(version: Option<(u32, u32, u32)>) -> Result<(), String> {
    match version {
        Some(v) if v >= (8, 2, 0) => Ok(()),
        Some((a, b, c)) => Err(format!(
            "QEMU {a}.{b}.{c} predates file: migration (8.2), which restoring a template needs"
        )),
        None => Err("qemu-system-x86_64 is not installed".into()),
    }
}

/// A started guest plus how it was started.
pub struct StartedGuest {
    inner: Box<dyn Controlled>,
    facts: Value,
    clone: bool,
}

impl Guest for StartedGuest {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn ssh_addr(&self) -> SocketAddr {
        self.inner.ssh_addr()
    }
    fn console_log(&self) -> PathBuf {
        self.inner.console_log()
    }
    fn vcpu_threads(&self) -> BoxFut<'_, anyhow::Result<Vec<i32>>> {
        self.inner.vcpu_threads()
    }
    fn pin_vcpus<'a>(&'a self, cpus: &'a [Vec<usize>]) -> BoxFut<'a, anyhow::Result<super::VcpuCpus>> {
        self.inner.pin_vcpus(cpus)
    }
    fn is_running(&mut self) -> bool {
        self.inner.is_running()
    }
    fn liveness(&self) -> Liveness {
        self.inner.liveness()
    }
    fn start_facts(&self) -> Value {
        self.facts.clone()
    }
    fn post_ready_command(&self, host_unix_time: f64) -> Option<String> {
        self.clone
            .then(|| template::clone_fixup_command(host_unix_time, &host_random(32)))
    }
    /// Through the guest's QMP socket, which both backends give QEMU, so that both report
    /// the same counters.
    fn kvm_stats(&self) -> BoxFut<'_, anyhow::Result<Value>> {
        Box::pin(async move {
            let mut raw = serde_json::Map::new();
            for target in ["vm", "vcpu"] {
                let args = json!({ "target": target, "providers": [{ "provider": "kvm" }] });
                raw.insert(target.into(), self.inner.qmp("query-stats", args).await?);
            }
            Ok(Value::Object(raw))
        })
    }
    fn shutdown(&mut self, grace: Duration) -> BoxFut<'_, anyhow::Result<()>> {
        self.inner.shutdown(grace)
    }
}

/// `n` bytes from the host's RNG (zeros if it cannot be read, which only weakens the reseed).
fn host_random(n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut buf);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_start_defaults_to_clone_and_bad_values_are_located() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            let p = dir.path().join("s.yaml");
            std::fs::write(&p, text).unwrap();
            p
        };
        let base = "name: x\nlevels: [1]\nworkloads:\n  - command: lock\n    metric: ops_per_sec\n";
        let s = crate::scenario::load(&write(base)).unwrap().scenario;
        assert_eq!(s.guest.start, StartMethod::Clone);
        let s = crate::scenario::load(&write(&format!("guest:\n  start: boot\n{base}")))
            .unwrap()
            .scenario;
        assert_eq!(s.guest.start, StartMethod::Boot);
        let e = crate::scenario::load(&write(&format!("guest:\n  start: warp\n{base}"))).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("s.yaml:2:") && msg.contains("guest.start") && msg.contains("boot"),
            "{msg}"
        );
    }

    #[test]
    fn clone_support_follows_the_qemu_version() {
        assert_eq!(support_for(Some((10, 0, 2))), Ok(()));
        assert_eq!(support_for(Some((8, 2, 0))), Ok(()));
        assert!(support_for(Some((8, 1, 5))).unwrap_err().contains("8.2"));
        assert!(support_for(None).unwrap_err().contains("not installed"));
    }
}
