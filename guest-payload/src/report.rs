//! The JSON schema every workload prints: one object, versioned by [`SCHEMA_VERSION`].
//!
//! Common fields are typed; workload-specific fields are flattened into the same object so a
//! lock result reads `{"workload":"lock","algo":"ticket","ops_total":...}`. `metrics` holds the
//! numbers the host summarises (name → value); every workload fills it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::env::Env;

/// Bump when a field changes meaning or disappears; adding fields does not need a bump.
/// 2: lock acquire_latency sampled and nullable, mutex contended nullable (acquire lock),
/// futexlock counts per lock call (wait_share/wake_share gone), futex null for pthread.
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
            detail,
        })
    }

    /// Reads the workload-specific part back as its typed struct.
    pub fn detail_as<D: for<'de> Deserialize<'de>>(&self) -> serde_json::Result<D> {
        serde_json::from_value(serde_json::Value::Object(self.detail.clone()))
    }
}
