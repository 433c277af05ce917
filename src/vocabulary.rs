//! Words every layer speaks: the scenario states them, the plan and the journal carry them, the
//! statistics and reports read them. They live here, below all of those, so that each layer
//! imports only downward (the scenario never imports the sweep, the journal never imports the
//! YAML model).

use serde::{Deserialize, Serialize};

/// Which direction of a metric is an improvement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    #[default]
    Higher,
    Lower,
}

/// Whether variants with identical guests share one boot per level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GuestSharing {
    /// Variants whose guests are identical (kernel, command line, CPU model) share one boot per
    /// level, and their runs interleave in it.
    #[default]
    Shared,
    /// Every variant boots fresh guests of its own at every level.
    PerVariant,
}

/// The order of the runs within one boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RunOrder {
    /// Round after round, run k of every cell (workload-major, variant-minor), so the variants
    /// of a workload run next to each other in time.
    #[default]
    RoundRobin,
    /// Each round's cells in a seeded random order.
    Shuffle,
}
