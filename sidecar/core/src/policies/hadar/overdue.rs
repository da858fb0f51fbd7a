//! The overdue gang: a gang that smaller jobs ranked after it keep overtaking.
//!
//! On nodes of several GPUs a gang needs whole nodes, or large parts of several, free at
//! once. Every round, work conservation gives the GPUs that free up to smaller jobs ranked
//! after it, and stickiness keeps them there, spread over the nodes the gang needs, so its
//! turn may never come: on Sia's Philly workloads, ten-minute 16-GPU jobs waited 10-13 hours
//! for two free 8-GPU nodes while smaller jobs ranked after them ran (docs/algorithms.md,
//! "Gangs that never fit"). Gavel and Tiresias do not starve them, since every round they
//! re-rank and preempt.
//!
//! A job is *long-waiting* when all of these hold:
//!
//! - it is a gang (more than one worker) that may run on a type whose nodes hold more than
//!   one GPU (on one-GPU nodes a gang needs free GPUs, not free nodes; gang packing serves
//!   it there);
//! - a job ranked after it, in the round's order, runs (it is being overtaken);
//! - it has waited, since it arrived and not running, more than `factor` times its remaining
//!   time at its best rate (and more than a round).
//!
//! A long-waiting job that is not running, and that the makespan guard did not find urgent,
//! is *overdue*: it is placed right after the urgent jobs, with their offer, which may make
//! room by preempting running jobs where a restart costs less than a round. It takes GPUs
//! only from running jobs ranked after it that are not long-waiting themselves, so overdue
//! gangs never take turns preempting one another and never preempt what the order puts
//! first. Pure: no clock, no IO.

use super::Prepared;
use super::guard::Urgency;
use crate::policy::RoundInput;

/// The default `factor`: a gang is overdue once it has waited six times its remaining best
/// time (measured in docs/algorithms.md).
pub const DEFAULT_OVERDUE_FACTOR: f64 = 6.0;

/// Marks the long-waiting jobs of `ready` (in the round's order, which sets each job's rank)
/// and makes the waiting ones overdue. `factor` 0 (or not a positive number) marks none.
pub(super) fn mark(factor: f64, input: &RoundInput<'_>, ready: &mut [Prepared<'_>]) {
    let overtaken = overtaken(ready);
    for (rank, p) in ready.iter_mut().enumerate() {
        p.rank = rank;
        let waited_s = waited_s(input, p);
        p.long_waiting = factor > 0.0
            && overtaken[rank]
            && needs_nodes(input, p)
            && waited_s > factor * p.utility.remaining_best_s().max(input.round_s);
        if p.long_waiting && p.previous.is_none() && !p.urgency.is_urgent() {
            p.urgency = Urgency::Overdue { waited_s };
        }
    }
}

/// Whether a running job `q` may give up its GPUs to the overdue job `p`: it ranks after
/// `p` and has not waited long itself.
pub(super) fn may_yield_to(p: &Prepared<'_>, q: &Prepared<'_>) -> bool {
    q.rank > p.rank && !q.long_waiting
}

/// Per job in order: whether some job after it runs.
fn overtaken(ready: &[Prepared<'_>]) -> Vec<bool> {
    let mut overtaken = vec![false; ready.len()];
    let mut running_after = false;
    for k in (0..ready.len()).rev() {
        overtaken[k] = running_after;
        running_after |= ready[k].previous.is_some();
    }
    overtaken
}

/// Seconds since the job arrived that it has not been running.
fn waited_s(input: &RoundInput<'_>, p: &Prepared<'_>) -> f64 {
    let js = &input.jobs[p.index];
    (input.now_s - js.job.arrival_s - js.run_s).max(0.0)
}

/// A gang that may run on a type whose nodes hold more than one GPU.
fn needs_nodes(input: &RoundInput<'_>, p: &Prepared<'_>) -> bool {
    p.workers > 1
        && input
            .cluster
            .types()
            .any(|t| p.rates[t.index()] > 0.0 && input.cluster.max_per_node(t) > 1)
}
