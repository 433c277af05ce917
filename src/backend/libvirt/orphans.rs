//! The domains ocrig owns by name, listed and destroyed (orphans of a sweep that is gone).

use super::*;

/// Every domain ocrig creates has a name with this prefix; cleanup touches nothing else.
pub const OWNED_PREFIX: &str = "ocrig-";

/// Names of all domains on `uri` (running or defined) whose names start with `prefix`, sorted.
pub fn list_owned(uri: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let conn = open(uri)?;
    let doms = conn
        .list_all_domains(0)
        .map_err(|e| anyhow::anyhow!("listing domains on {uri}: {}", e.message()))?;
    let mut names: Vec<String> = doms
        .iter()
        .filter_map(|d| d.name().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    Ok(names)
}

/// Destroys the running domain `name` (left behind by a killed ocrig). Already gone is fine.
/// Refuses names without the `ocrig-` prefix, so it cannot stop someone else's VM.
pub fn destroy_named(uri: &str, name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        name.starts_with(OWNED_PREFIX),
        "refusing to destroy {name}: not an ocrig domain"
    );
    let conn = open(uri)?;
    let dom = match conn.lookup_domain_by_name(name) {
        Ok(d) => d,
        Err(e) if is_gone(&e) => return Ok(()),
        Err(e) => anyhow::bail!("looking up domain {name}: {}", e.message()),
    };
    destroy_dom(&dom, name)
}
