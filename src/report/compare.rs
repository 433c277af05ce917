//! `ocrig compare A B …`: results of one matrix merged into one journal, the first one's
//! baseline against every side's variants (mmtests' compare-kernels layout).

use super::*;

/// Two result directories of the same matrix, A as base and B as patched ([`compare_all`]).
#[cfg(test)]
pub fn compare(a: Digested, b: Digested, format: Format, opts: &ReportOptions) -> anyhow::Result<String> {
    Ok(compare_all(vec![a, b], format, opts, None)?.0)
}

/// `ocrig compare A B C …`: result directories of the same matrix, the first as the base (the
/// mmtests compare-kernels use case), each other side's variants against its baseline. The
/// sides are named by [`ReportOptions::compare_names`] (e.g. the directories' names), else by
/// their variant when each journal has a single, different one, else `A`, `B`, `C` …. See
/// [`merge_all`]. Takes the journals' digests: the merged journal is made of them, not of
/// copies. With `fail_on`, the gate's verdict on the merged report too.
pub fn compare_all(
    sides: Vec<Digested>,
    format: Format,
    opts: &ReportOptions,
    fail_on: Option<gate::FailOn>,
) -> anyhow::Result<(String, Option<gate::Gate>)> {
    let names = opts
        .compare_names
        .clone()
        .filter(|n| n.len() == sides.len())
        .unwrap_or_else(|| default_names(&sides));
    let merged = merge_all(sides.into_iter().zip(names.iter().cloned()).collect())?;
    let mut input = ReportInput::build(&merged, opts);
    let names = distinct_names(&names);
    input.compare_pairs = names[1..]
        .iter()
        .flat_map(|other| kernel_symbols::compare_pairs(&merged, &names[0], other))
        .collect();
    let gate = fail_on.map(|f| gate::Gate::of(&input.model, f));
    Ok((format.exporter().render(&input)?, gate))
}

/// Each side's own variant where every journal has a single one and they all differ, else
/// `A`, `B`, `C` … (`side 27` … past `Z`).
pub(crate) fn default_names(sides: &[Digested]) -> Vec<String> {
    let singles: Vec<&String> = sides
        .iter()
        .filter_map(|d| match d.header.variants.as_slice() {
            [v] => Some(v),
            _ => None,
        })
        .collect();
    let all_differ =
        singles.len() == sides.len() && singles.iter().enumerate().all(|(i, v)| !singles[..i].contains(v));
    if all_differ {
        return singles.into_iter().cloned().collect();
    }
    letters(sides.len())
}

/// The sides' names made distinct: a name given twice is told apart by its position
/// (`old (A)`, `old (B)`).
pub(crate) fn distinct_names(names: &[String]) -> Vec<String> {
    let tag = letters(names.len());
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if names.iter().filter(|m| *m == n).count() > 1 {
                format!("{n} ({})", tag[i])
            } else {
                n.clone()
            }
        })
        .collect()
}

/// `A`, `B`, `C` … for `n` sides (`side 27` … past `Z`).
fn letters(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match u8::try_from(i).ok().filter(|i| *i < 26) {
            Some(i) => char::from(b'A' + i).to_string(),
            None => format!("side {}", i + 1),
        })
        .collect()
}

/// Added, times the side's position, to each later side's boot groups and blocks in
/// [`merge_all`], so none is taken for another side's.
pub(crate) const OTHER_SWEEP: u32 = 1 << 24;

/// Results directories that cannot be compared (other levels or workloads, or too many): bad
/// input.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotOneMatrix(pub String);

/// The most sides [`merge_all`] takes (each later side's slots are moved by [`OTHER_SWEEP`]).
pub const MAX_SIDES: usize = 255;

/// Merges two journals of the same matrix into one whose baseline is A's ([`merge_all`]).
#[cfg(test)]
pub fn merge(a: Digested, b: Digested, a_name: &str, b_name: &str) -> anyhow::Result<Digested> {
    merge_all(vec![(a, a_name.to_string()), (b, b_name.to_string())])
}

/// Merges journals of the same matrix, each with its side's name, into one whose baseline is
/// the first one's.
///
/// Each side's variants are renamed after the side: a journal with one variant contributes
/// variant `name`; one with several contributes `name/variant` for each (the first side's
/// baseline variant is the merged baseline). A name given twice is told apart by position
/// ([`distinct_names`]). Refuses journals whose levels or workloads (ids, metric, direction)
/// differ from the first one's, naming the difference (bad input).
pub fn merge_all(sides: Vec<(Digested, String)>) -> anyhow::Result<Digested> {
    anyhow::ensure!(
        (2..=MAX_SIDES).contains(&sides.len()),
        NotOneMatrix(format!(
            "a comparison takes 2 to {MAX_SIDES} results directories, not {}",
            sides.len()
        ))
    );
    let names = distinct_names(&sides.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>());
    for ((d, _), name) in sides.iter().zip(&names).skip(1) {
        check_same_matrix(&sides[0].0.header, &d.header, &names[0], name)
            .map_err(|e| NotOneMatrix(e.to_string()))?;
    }
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
    let maps: Vec<BTreeMap<String, Arc<str>>> =
        sides.iter().zip(&names).map(|((d, _), n)| rename(d, n)).collect();
    let first = &sides[0].0;
    let mut header = first.header.clone();
    header.scenario = names.join(" vs ");
    header.baseline = maps[0]
        .get(&first.header.baseline)
        .map(|v| v.to_string())
        .unwrap_or_else(|| names[0].clone());
    let mut variants = vec![header.baseline.clone()];
    for v in maps.iter().flat_map(|m| m.values()) {
        if !variants.iter().any(|x| **x == **v) {
            variants.push(v.to_string());
        }
    }
    header.variants = variants;
    let plain = |map: &BTreeMap<String, Arc<str>>| -> BTreeMap<String, String> {
        map.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
    };
    let plains: Vec<BTreeMap<String, String>> = maps.iter().map(plain).collect();
    header.runs_on.kernels = sides
        .iter()
        .zip(&plains)
        .flat_map(|((j, _), map)| {
            j.header
                .runs_on
                .kernels
                .iter()
                .filter_map(|(v, k)| Some((map.get(v)?.clone(), k.clone())))
                .collect::<Vec<_>>()
        })
        .collect();
    header.kernel_identity = sides
        .iter()
        .zip(&plains)
        .flat_map(|((j, _), map)| kernels::renamed(&j.header.kernel_identity, map).collect::<Vec<_>>())
        .collect();
    let total: usize = sides.iter().map(|(d, _)| d.runs.len()).sum();
    let mut runs = Vec::with_capacity(total);
    for (i, ((side, _), map)) in sides.into_iter().zip(&maps).enumerate() {
        // Each side's digests move over from its end, its room given back as it empties
        // (journals of a million records each are most of the memory), then are put back in
        // order.
        let from = runs.len();
        let offset = OTHER_SWEEP * i as u32;
        let mut side_runs = side.runs;
        while let Some(mut r) = side_runs.pop() {
            r.variant = map[&*r.variant].clone();
            // Another side's guests and blocks are not the first one's: a comparison across
            // two sweeps pairs nothing and is unpaired over bring-ups (`stats::effect`), and
            // one side's guest set's warm-ups are never taken for another's.
            r.slot.0 += offset;
            r.block = r.block.saturating_add(offset);
            runs.push(r);
            if side_runs.len().is_multiple_of(1 << 16) {
                side_runs.shrink_to_fit();
            }
        }
        runs[from..].reverse();
    }
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
