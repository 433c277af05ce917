//! Words every layer speaks: the scenario states them, the plan and the journal carry them, the
//! statistics and reports read them. They live here, below all of those, so that each layer
//! imports only downward (the scenario never imports the sweep, the journal never imports the
//! YAML model).

use serde::{Deserialize, Serialize};

/// Which direction of a metric is an improvement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    #[default]
    Higher,
    Lower,
}

/// Whether variants with identical guests share one boot per level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunOrder {
    /// Round after round, run k of every cell (workload-major, variant-minor), so the variants
    /// of a workload run next to each other in time.
    #[default]
    RoundRobin,
    /// Each round's cells in a seeded random order.
    Shuffle,
}

/// How a guest is started.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StartMethod {
    /// A cold boot of the kernel.
    #[default]
    Boot,
    /// A restore of a saved template guest of the same shape (built on first use); a clone
    /// that cannot be had or does not come up is replaced by a cold boot. The clone loads its
    /// own copy of the guest's RAM from the saved state into QEMU's anonymous memory, which
    /// the host backs with transparent huge pages as it does a booted guest's.
    Clone,
    /// A clone that maps the template's RAM file private instead (`backend::RamBacking::CloneOf`,
    /// where the backend can): pages it only reads stay one page-cache copy for every clone
    /// (56–65 MiB PSS per 128 MiB clone against 139–157), but the guest's RAM is then on 4 KiB
    /// host pages where a booted guest's is on 2 MiB ones (AnonHugePages measured 0 against
    /// 137 MiB), so memory-bound guest work may run slower than in a booted guest (under KVM,
    /// 4 KiB pages also mean 4 KiB EPT entries). For density (many guests on a big host),
    /// not for figures compared with booted guests.
    #[serde(rename = "clone-shared")]
    CloneShared,
}

impl StartMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            StartMethod::Boot => "boot",
            StartMethod::Clone => "clone",
            StartMethod::CloneShared => "clone-shared",
        }
    }

    /// Restored from a template (either kind of clone).
    pub fn is_clone(self) -> bool {
        self != StartMethod::Boot
    }
}

/// Which guests' results make a run's headline value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HeadlineFrom {
    /// Guest 0's alone: the other guests ran something else (`background: idle | hog`), or
    /// the journal predates the choice.
    #[default]
    PrimaryGuest,
    /// The mean over every guest of the run (`background: same`: each ran the measured
    /// workload, started at the same instant). The guests are one run's subsamples, so the run
    /// stays the unit a comparison counts; their mean is the same quantity as guest 0's figure
    /// with less of the host's say in it (at 2x the host gives one guest's vCPUs a CPU pair
    /// when it takes it from another's).
    EveryGuest,
}
