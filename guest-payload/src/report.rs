//! The JSON schema every workload prints: one object, versioned by [`SCHEMA_VERSION`].
//!
//! Common fields are typed; workload-specific fields are flattened into the same object so a
//! lock result reads `{"workload":"lock","algo":"ticket","ops_total":...}`. `metrics` holds the
//! numbers the host summarises (name → value); every workload fills it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::checks::Check;
use crate::env::Env;

/// Bump when a field changes meaning or disappears; adding fields does not need a bump.
/// 2: lock acquire_latency sampled and nullable, mutex contended nullable (acquire lock),
/// futexlock counts per lock call (wait_share/wake_share gone), futex null for pthread.
/// (Schema 2 also gained, without a bump, the top-level `checks` array: the run's own physics
/// checks, see [`crate::checks`]; reports without it read as having no checks.)
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub schema: u32,
    pub workload: String,
    /// Wall time of the measured phase (after the start barrier, until the last worker stopped).
    pub elapsed_ns: u64,
    pub env: Env,
    /// Headline numbers for the host's statistics: name → value.
    pub metrics: BTreeMap<String, f64>,
    /// The run's own physics checks; a run with a failed one is not a result (the payload
    /// exits with status 3 after printing the report).
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Workload-specific fields (e.g. `algo`, `threads`, `ops_per_thread`).
    #[serde(flatten)]
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl Report {
    /// Builds a report from a workload's typed detail struct, which must serialise to an object.
    pub fn new<D: Serialize>(
        workload: &str,
        elapsed_ns: u64,
        env: Env,
        metrics: BTreeMap<String, f64>,
        detail: &D,
    ) -> anyhow::Result<Self> {
        let detail = match serde_json::to_value(detail)? {
            serde_json::Value::Object(map) => map,
            other => anyhow::bail!("workload detail must be a JSON object, got {other}"),
        };
        Ok(Self {
            schema: SCHEMA_VERSION,
            workload: workload.to_string(),
            elapsed_ns,
            env,
            metrics,
            checks: Vec::new(),
            detail,
        })
    }

    /// The same report with `checks` appended.
    pub fn with_checks(mut self, checks: Vec<Check>) -> Self {
        self.checks.extend(checks);
        self
    }

    /// The checks that failed.
    pub fn failed_checks(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.ok)
    }

    /// Reads the workload-specific part back as its typed struct.
    pub fn detail_as<D: for<'de> Deserialize<'de>>(&self) -> serde_json::Result<D> {
        serde_json::from_value(serde_json::Value::Object(self.detail.clone()))
    }
}
