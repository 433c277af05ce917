//! `ocrig compare A B`: two results of one matrix merged into one journal, A's variants against
//! B's.

use super::*;

/// `ocrig compare A B`: two result directories of the same matrix, A as base and B as patched
/// (the mmtests compare-kernels use case). The sides are named by
/// [`ReportOptions::compare_names`] (e.g. the directories' names), else by their variant when
/// each journal has a single, different one, else `A` and `B`. See [`merge`].
/// Takes both journals' digests: the merged journal is made of them, not of copies.
pub fn compare(a: Digested, b: Digested, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    let (an, bn) = opts
        .compare_names
        .clone()
        .unwrap_or_else(|| default_names(&a, &b));
    let merged = merge(a, b, &an, &bn)?;
    let mut input = ReportInput::build(&merged, opts);
    input.compare_pairs = kernel_symbols::compare_pairs(&merged, &an, &bn);
    format.exporter().render(&input)
}

pub(crate) fn default_names(a: &Digested, b: &Digested) -> (String, String) {
    match (a.header.variants.as_slice(), b.header.variants.as_slice()) {
        ([x], [y]) if x != y => (x.clone(), y.clone()),
        _ => ("A".into(), "B".into()),
    }
}

/// Added to B's boot groups and blocks in [`merge`], so none is taken for one of A's.
pub(crate) const OTHER_SWEEP: u32 = 1 << 24;

/// Merges two journals of the same matrix into one whose baseline is A's.
///
/// Each side's variants are renamed after the side: a journal with one variant contributes
/// variant `name`; one with several contributes `name/variant` for each (A's baseline variant is
/// the merged baseline). Refuses journals whose levels or workloads (ids, metric, direction)
/// differ, naming the difference.
pub fn merge(a: Digested, b: Digested, a_name: &str, b_name: &str) -> anyhow::Result<Digested> {
    check_same_matrix(&a.header, &b.header, a_name, b_name)?;
    let (a_name, b_name) = if a_name == b_name {
        (format!("{a_name} (A)"), format!("{b_name} (B)"))
    } else {
        (a_name.to_string(), b_name.to_string())
    };
    let rename = |j: &Digested, side: &str| -> BTreeMap<String, Arc<str>> {
        let mut variants = j.header.variants.clone();
        let mut seen: std::collections::HashSet<&str> =
            j.header.variants.iter().map(String::as_str).collect();
        for r in &j.runs {
            if seen.insert(&r.variant) {
                variants.push(r.variant.to_string());
            }
        }
        let single = variants.len() <= 1;
        variants
            .into_iter()
            .map(|v| {
                let to = if single {
                    side.to_string()
                } else {
                    format!("{side}/{v}")
                };
                (v, Arc::from(to))
            })
            .collect()
    };
    let (ra, rb) = (rename(&a, &a_name), rename(&b, &b_name));
    let mut header = a.header.clone();
    header.scenario = format!("{} vs {}", a_name, b_name);
    header.baseline = ra
        .get(&a.header.baseline)
        .map(|v| v.to_string())
        .unwrap_or_else(|| a_name.clone());
    let mut variants = vec![header.baseline.clone()];
    for v in ra.values().chain(rb.values()) {
        if !variants.iter().any(|x| **x == **v) {
            variants.push(v.to_string());
        }
    }
    header.variants = variants;
    let names = |map: &BTreeMap<String, Arc<str>>| -> BTreeMap<String, String> {
        map.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
    };
    let (na, nb) = (names(&ra), names(&rb));
    let kernels = |j: &Digested, map: &BTreeMap<String, String>| -> Vec<(String, String)> {
        j.header
            .runs_on
            .kernels
            .iter()
            .filter_map(|(v, k)| Some((map.get(v)?.clone(), k.clone())))
            .collect()
    };
    header.runs_on.kernels = kernels(&a, &na).into_iter().chain(kernels(&b, &nb)).collect();
    header.kernel_identity = kernels::renamed(&a.header.kernel_identity, &na)
        .chain(kernels::renamed(&b.header.kernel_identity, &nb))
        .collect();
    let mut runs = a.runs;
    for r in runs.iter_mut() {
        r.variant = ra[&*r.variant].clone();
    }
    // B's digests move over from its end, its room given back as it empties (both journals
    // of a million records each are most of the memory), then are put back in order.
    let from = runs.len();
    let mut b_runs = b.runs;
    runs.reserve_exact(b_runs.len());
    while let Some(mut r) = b_runs.pop() {
        r.variant = rb[&*r.variant].clone();
        // B's guests and blocks are not A's: a comparison across the two sweeps pairs nothing
        // and is unpaired over bring-ups (`stats::effect`), and a B guest set's warm-ups are
        // never taken for an A one's.
        r.slot.0 += OTHER_SWEEP;
        r.block = r.block.saturating_add(OTHER_SWEEP);
        runs.push(r);
        if b_runs.len().is_multiple_of(1 << 16) {
            b_runs.shrink_to_fit();
        }
    }
    runs[from..].reverse();
    Ok(Digested { header, runs })
}

pub(crate) fn check_same_matrix(
    a: &SweepHeader,
    b: &SweepHeader,
    a_name: &str,
    b_name: &str,
) -> anyhow::Result<()> {
    use crate::stats::cells::same_level;
    let (la, lb) = (&a.levels, &b.levels);
    let only = |x: &[f64], y: &[f64]| -> Vec<String> {
        x.iter()
            .filter(|l| !y.iter().any(|m| same_level(**l, *m)))
            .map(|l| fmt_level(*l))
            .collect()
    };
    let (oa, ob) = (only(la, lb), only(lb, la));
    if !oa.is_empty() || !ob.is_empty() {
        anyhow::bail!(
            "{a_name} and {b_name} ran different overcommit levels: only in {a_name}: [{}]; only in {b_name}: [{}]",
            oa.join(", "),
            ob.join(", ")
        );
    }
    let (wa, wb) = (&a.workloads, &b.workloads);
    let oa: Vec<&str> = wa
        .keys()
        .filter(|k| !wb.contains_key(*k))
        .map(String::as_str)
        .collect();
    let ob: Vec<&str> = wb
        .keys()
        .filter(|k| !wa.contains_key(*k))
        .map(String::as_str)
        .collect();
    if !oa.is_empty() || !ob.is_empty() {
        anyhow::bail!(
            "{a_name} and {b_name} ran different workloads: only in {a_name}: [{}]; only in {b_name}: [{}]",
            oa.join(", "),
            ob.join(", ")
        );
    }
    for (id, x) in wa {
        let y = &wb[id];
        if x.metric != y.metric || x.better != y.better {
            anyhow::bail!(
                "workload {id} reports differently: {a_name}: {} ({:?} is better), {b_name}: {} ({:?} is better)",
                x.metric,
                x.better,
                y.metric,
                y.better
            );
        }
    }
    Ok(())
}

// ---- formatting shared by the text formats ----
