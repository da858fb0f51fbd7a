//! Swap improvement: admitted jobs of equal worker count exchange whole placements while
//! that raises the round's total utility.
//!
//! The online pass gives each job, in order, its best placement at the prices of that
//! moment, so an early job with little to gain from fast GPUs can hold them while a later
//! job that would gain much runs on slow ones. Exchanging two placements of the same size
//! changes no (node, type) usage, so capacity, prices and every other job are untouched.
//!
//! A gang job's rate depends only on the set of types its placement uses, so placements
//! are grouped by type set. For each pair of sets, jobs on the first are ranked by what
//! they would gain on the second and vice versa, and the top pairs are exchanged while the
//! exact gain (with restart discounts for running jobs) is positive. A few passes over all
//! pairs of sets suffice in practice; the number is capped to bound the time.

use super::Prepared;
use super::dual::gang_rate;
use crate::placement::Placement;
use crate::plan::Assignment;
use std::collections::{BTreeMap, HashMap};

/// Passes over all pairs of type sets.
const PASSES: usize = 3;

fn type_set(p: &Placement) -> Option<u64> {
    let mut m = 0u64;
    for part in p.parts() {
        if part.gpu_type.index() >= 64 {
            return None;
        }
        m |= 1 << part.gpu_type.index();
    }
    Some(m)
}

fn rate_on_set(rates: &[f64], set: u64) -> f64 {
    let mut r = f64::INFINITY;
    for (t, x) in rates.iter().enumerate().take(64) {
        if set >> t & 1 == 1 {
            r = r.min(*x);
        }
    }
    if r.is_finite() && r > 0.0 { r } else { 0.0 }
}

/// Utility of job `p` on `placement`.
fn utility_on(p: &Prepared<'_>, placement: &Placement) -> f64 {
    let rate = gang_rate(&p.rates, p.workers, placement);
    let moved = p.previous.is_some_and(|q| q != placement);
    p.utility.at(rate, moved)
}

/// Improves `assignments` in place; `owners[i]` is the prepared job of `assignments[i]`.
pub(super) fn improve(ready: &[Prepared<'_>], assignments: &mut [Assignment], owners: &[usize]) {
    let mut groups: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, &k) in owners.iter().enumerate() {
        // An urgent job keeps the fast placement the makespan guard gave it.
        if ready[k].urgency.is_urgent() {
            continue;
        }
        groups.entry(ready[k].workers).or_default().push(i);
    }
    let mut sizes: Vec<u32> = groups.keys().copied().collect();
    sizes.sort_unstable();
    for size in sizes {
        let members = &groups[&size];
        if members.len() < 2 {
            continue;
        }
        for _ in 0..PASSES {
            let mut improved = false;
            let mut by_set: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
            for &i in members {
                if let Some(m) = type_set(&assignments[i].placement) {
                    by_set.entry(m).or_default().push(i);
                }
            }
            let sets: Vec<u64> = by_set.keys().copied().collect();
            for (x, &s1) in sets.iter().enumerate() {
                for &s2 in &sets[x + 1..] {
                    // Current members of each set (earlier exchanges may have moved some).
                    let on = |s: u64, a: &[Assignment]| -> Vec<usize> {
                        members
                            .iter()
                            .copied()
                            .filter(|&i| type_set(&a[i].placement) == Some(s))
                            .collect()
                    };
                    let gain_if = |i: usize, to: u64, a: &[Assignment]| {
                        let p = &ready[owners[i]];
                        let now = utility_on(p, &a[i].placement);
                        p.utility
                            .at(rate_on_set(&p.rates, to), p.previous.is_some())
                            - now
                    };
                    let mut first: Vec<(f64, usize)> = on(s1, assignments)
                        .into_iter()
                        .map(|i| (gain_if(i, s2, assignments), i))
                        .collect();
                    let mut second: Vec<(f64, usize)> = on(s2, assignments)
                        .into_iter()
                        .map(|i| (gain_if(i, s1, assignments), i))
                        .collect();
                    first.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                    second.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                    for (&(g1, i), &(g2, k)) in first.iter().zip(&second) {
                        if g1 + g2 <= 1e-12 {
                            break;
                        }
                        let (pi, pk) = (&ready[owners[i]], &ready[owners[k]]);
                        // Never hand a job a placement it cannot run on.
                        if gang_rate(&pi.rates, pi.workers, &assignments[k].placement) <= 0.0
                            || gang_rate(&pk.rates, pk.workers, &assignments[i].placement) <= 0.0
                        {
                            continue;
                        }
                        let before = utility_on(pi, &assignments[i].placement)
                            + utility_on(pk, &assignments[k].placement);
                        let after = utility_on(pi, &assignments[k].placement)
                            + utility_on(pk, &assignments[i].placement);
                        if after <= before + 1e-12 * before.abs().max(1e-300) {
                            continue;
                        }
                        // Each job must stay admissible at the price of the placement it
                        // receives (or be no worse off than before), so that the next
                        // round's online pass keeps the exchanged placements instead of
                        // undoing them.
                        let price_i = utility_on(pi, &assignments[i].placement)
                            - assignments[i].payoff.unwrap_or(0.0);
                        let price_k = utility_on(pk, &assignments[k].placement)
                            - assignments[k].payoff.unwrap_or(0.0);
                        let new_i = utility_on(pi, &assignments[k].placement) - price_k;
                        let new_k = utility_on(pk, &assignments[i].placement) - price_i;
                        let stays =
                            |new: f64, old: Option<f64>| new > 0.0 || new >= old.unwrap_or(0.0);
                        if !stays(new_i, assignments[i].payoff)
                            || !stays(new_k, assignments[k].payoff)
                        {
                            continue;
                        }
                        exchange(ready, owners, assignments, i, k);
                        improved = true;
                    }
                }
            }
            if !improved {
                break;
            }
        }
    }
}

/// Exchanges the placements of assignments `i` and `k`, carrying each placement's price
/// (utility minus payoff at admission) with it.
fn exchange(ready: &[Prepared<'_>], owners: &[usize], a: &mut [Assignment], i: usize, k: usize) {
    let price =
        |x: &Assignment, p: &Prepared<'_>| utility_on(p, &x.placement) - x.payoff.unwrap_or(0.0);
    let (pi, pk) = (&ready[owners[i]], &ready[owners[k]]);
    let (price_i, price_k) = (price(&a[i], pi), price(&a[k], pk));
    let placement_i = std::mem::replace(&mut a[i].placement, Placement::gang([]));
    let placement_k = std::mem::replace(&mut a[k].placement, placement_i);
    a[i].placement = placement_k;
    for (x, p, price) in [(i, pi, price_k), (k, pk, price_i)] {
        a[x].rate = gang_rate(&p.rates, p.workers, &a[x].placement);
        a[x].payoff = Some(utility_on(p, &a[x].placement) - price);
    }
}
