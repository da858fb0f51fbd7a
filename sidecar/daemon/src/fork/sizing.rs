//! How a forked job is sized into copies: its throughput for copies of every size, and
//! its remaining steps split over the copies in proportion to their rates.

use super::*;
/// A forked job's throughput for copies of every size up to its worker count (1, 2, 4, ...
/// and the count itself), each from [`spec::profile`]'s sources for that size, so that
/// HadarE may run a 4-GPU job as copies of 2 GPUs on nodes that have only 2 of a type.
pub fn fork_profile(
    spec: &JobSpec,
    type_names: &[String],
    learned: &[hadar_store::LearnedRate],
    table: &ThroughputTable,
    priors: &Priors,
) -> hadar_core::ThroughputProfile {
    let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |g| g.checked_mul(2))
        .take_while(|g| *g < spec.workers)
        .collect();
    sizes.push(spec.workers);
    let mut points: Vec<Vec<(u32, f64)>> = vec![Vec::new(); type_names.len()];
    for g in sizes {
        let sized = JobSpec {
            workers: g,
            ..spec.clone()
        };
        let (p, _) = spec::profile(&sized, type_names, learned, table, priors);
        for (i, per_type) in points.iter_mut().enumerate() {
            if let Some(r) = p
                .rate(hadar_core::GpuType(i as u16), g)
                .filter(|r| *r > 0.0)
            {
                per_type.push((g, r));
            }
        }
    }
    hadar_core::ThroughputProfile::new(points.into_iter().map(hadar_core::RateCurve::new).collect())
}

/// Splits `total` steps over copies in proportion to `rates` (largest remainders get the
/// leftover steps, lowest index first on ties); the parts add up to `total` exactly.
pub fn split_budget(total: u64, rates: &[f64]) -> Vec<u64> {
    let sum: f64 = rates.iter().filter(|r| r.is_finite() && **r > 0.0).sum();
    if rates.is_empty() {
        return Vec::new();
    }
    if sum <= 0.0 {
        let mut out = vec![total / rates.len() as u64; rates.len()];
        for slot in out.iter_mut().take((total % rates.len() as u64) as usize) {
            *slot += 1;
        }
        return out;
    }
    let exact: Vec<f64> = rates
        .iter()
        .map(|r| {
            if r.is_finite() && *r > 0.0 {
                total as f64 * r / sum
            } else {
                0.0
            }
        })
        .collect();
    let mut out: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let given: u64 = out.iter().sum();
    let mut order: Vec<usize> = (0..rates.len()).collect();
    order.sort_by(|a, b| {
        let fa = exact[*a] - exact[*a].floor();
        let fb = exact[*b] - exact[*b].floor();
        fb.total_cmp(&fa).then(a.cmp(b))
    });
    for k in order.into_iter().take(total.saturating_sub(given) as usize) {
        out[k] += 1;
    }
    out
}
