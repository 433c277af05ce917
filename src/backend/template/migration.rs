//! Waiting on QEMU's migration to or from a state file, the one step a template's save and a
//! clone's load share.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use crate::backend::launcher::Controlled;

/// Saving ~90 MB to a file, or loading it back.
pub(super) const MIGRATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Sets the migration capability that leaves shared (file) RAM out of the stream, on the
/// saving side, and tells the loading side the stream has none.
pub(super) async fn ignore_shared_ram(g: &dyn Controlled) -> anyhow::Result<()> {
    g.qmp(
        "migrate-set-capabilities",
        json!({ "capabilities": [{ "capability": "x-ignore-shared", "state": true }] }),
    )
    .await
    .map(|_| ())
}

/// Polls `query-migrate` until it completes; fails on `failed`/`cancelled`, a dead QEMU or
/// the timeout.
pub(super) async fn wait_migration(g: &dyn Controlled, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let alive = g.liveness();
    loop {
        if !alive() {
            bail!("QEMU exited: {}", g.qemu_log().trim());
        }
        let r = g.qmp("query-migrate", Value::Null).await;
        match r.as_ref().ok().and_then(|v| v["status"].as_str()) {
            Some("completed") => return Ok(()),
            Some(s @ ("failed" | "cancelled")) => {
                let why = r
                    .as_ref()
                    .ok()
                    .and_then(|v| v["error-desc"].as_str())
                    .unwrap_or("");
                bail!("migration {s}: {why} {}", g.qemu_log().trim());
            }
            _ => {}
        }
        if let Err(e) = &r
            && !alive()
        {
            bail!("QEMU exited ({e:#}): {}", g.qemu_log().trim());
        }
        if Instant::now() >= deadline {
            bail!("no completed migration after {:.0} s", within.as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
