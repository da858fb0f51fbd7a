//! Fluid lower bounds on the makespan (`lower-bound`, `lower-bound-fork`).
//!
//! Both relax the round-based, gang-scheduled problem to a time-indexed LP: time from the
//! first arrival is cut at every distinct arrival time into intervals, and in each interval
//! a job may spend any amount of time on each GPU type, as long as
//!
//! * it does not run before it arrives (it has no variables in earlier intervals),
//! * no type gives out more GPU-seconds than it has in the interval,
//! * the job completes its steps.
//!
//! The makespan `T` is the end of the last interval (which starts at the last arrival and
//! has a free length); the LP minimises it.
//!
//! * [`fluid_makespan`] (`lower-bound`): job `i` runs with its own `N_i` workers at rate
//!   `X[type][N_i]` and, at any moment, at most once: the sum over types of its time in an
//!   interval is at most the interval's length. Gangs are not required to be whole and time
//!   may be split across types at once, so no non-forking schedule can beat it.
//! * [`fluid_makespan_forking`] (`lower-bound-fork`): a job may use any number of GPUs at
//!   once; each GPU-second of type `j` gives it the best per-GPU rate it has there,
//!   `max over measured g of X[j][g] / g`. This bounds forking schedules (HadarE) too.
//!
//! When there are more distinct arrival times than [`MAX_INTERVALS`], arrivals are rounded
//! down onto that many breakpoints (quantiles of the arrival times). Rounding an arrival
//! down only lets a job start earlier, so the result is still a lower bound, slightly
//! weaker, and the LP stays small.

use crate::cluster::Cluster;
use crate::job::{Job, JobId};
use crate::lp::{LinearProgram, LpError, Var};

/// The most intervals the time-indexed LP uses by default. On Gavel's 120-job Poisson
/// trace, 32 intervals give a bound 0.2% below the exact one (all 120 arrivals as
/// breakpoints) in a fifth of the time.
pub const MAX_INTERVALS: usize = 32;

/// Why a bound could not be computed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BoundError {
    /// The workload is empty.
    #[error("the workload has no jobs")]
    NoJobs,
    /// A job can run on no GPU type of the cluster, so no schedule finishes.
    #[error(
        "job {0} can run on no GPU type of the cluster (with its worker count), so no schedule completes it"
    )]
    CannotRun(JobId),
    /// A job has a non-finite arrival time or step count.
    #[error("job {0} has a non-finite or negative arrival time or step count")]
    BadJob(JobId),
    /// The name given is a round policy, not a bound.
    #[error("`{0}` is a round policy, not a bound")]
    NotABound(&'static str),
    /// The LP solver failed.
    #[error("the bound's LP failed: {0}")]
    Lp(#[from] LpError),
}

/// Per-type rate of a job in each bound: `None` where it cannot run.
type RateFn = fn(&Job, &Cluster, crate::cluster::GpuType) -> Option<f64>;

fn own_rate(job: &Job, cluster: &Cluster, t: crate::cluster::GpuType) -> Option<f64> {
    // A gang of N workers needs N GPUs of the type, even in the fluid relaxation's
    // time-sharing sense (it uses N GPUs while it runs).
    if job.workers > cluster.total_of_type(t) {
        return None;
    }
    job.rate_on(t)
}

fn per_gpu_rate(job: &Job, _cluster: &Cluster, t: crate::cluster::GpuType) -> Option<f64> {
    job.throughput
        .curve(t)
        .points()
        .iter()
        .map(|&(g, r)| r / f64::from(g))
        .reduce(f64::max)
}

/// `lower-bound`: the fluid makespan with each job at its own worker count, in seconds
/// from the first arrival.
pub fn fluid_makespan(cluster: &Cluster, jobs: &[Job]) -> Result<f64, BoundError> {
    solve_bound(cluster, jobs, own_rate, false, MAX_INTERVALS)
}

/// [`fluid_makespan`] with at most `max_intervals` time intervals (at least 2 are used):
/// fewer intervals solve faster and give a bound that is lower (weaker) but still valid.
pub fn fluid_makespan_in(
    cluster: &Cluster,
    jobs: &[Job],
    max_intervals: usize,
) -> Result<f64, BoundError> {
    solve_bound(cluster, jobs, own_rate, false, max_intervals)
}

/// `lower-bound-fork`: the fluid makespan when jobs may use any number of GPUs at the best
/// per-GPU rate, in seconds from the first arrival.
pub fn fluid_makespan_forking(cluster: &Cluster, jobs: &[Job]) -> Result<f64, BoundError> {
    solve_bound(cluster, jobs, per_gpu_rate, true, MAX_INTERVALS)
}

/// The interval start times: distinct arrivals relative to the first, reduced to at most
/// `max` breakpoints (at least 2) by taking quantiles; the first arrival is always kept.
fn breakpoints(arrivals: &[f64], max: usize) -> Vec<f64> {
    let max = max.max(2);
    let mut distinct: Vec<f64> = arrivals.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    if distinct.len() <= max {
        return distinct;
    }
    let last = distinct.len() - 1;
    let mut picked: Vec<f64> = (0..max).map(|k| distinct[k * last / (max - 1)]).collect();
    picked.dedup();
    picked
}

fn solve_bound(
    cluster: &Cluster,
    jobs: &[Job],
    rate: RateFn,
    forking: bool,
    max_intervals: usize,
) -> Result<f64, BoundError> {
    if jobs.is_empty() {
        return Err(BoundError::NoJobs);
    }
    for j in jobs {
        if !(j.arrival_s.is_finite()
            && j.arrival_s >= 0.0
            && j.total_steps.is_finite()
            && j.total_steps >= 0.0)
        {
            return Err(BoundError::BadJob(j.id));
        }
    }
    let first = jobs
        .iter()
        .map(|j| j.arrival_s)
        .fold(f64::INFINITY, f64::min);
    let arrivals: Vec<f64> = jobs.iter().map(|j| j.arrival_s - first).collect();
    let starts = breakpoints(&arrivals, max_intervals);
    let k_last = starts.len() - 1;
    let types: Vec<_> = cluster.types().collect();
    let rates: Vec<Vec<Option<f64>>> = jobs
        .iter()
        .map(|j| types.iter().map(|&t| rate(j, cluster, t)).collect())
        .collect();
    for (j, r) in jobs.iter().zip(&rates) {
        if j.total_steps > 0.0 && r.iter().all(Option::is_none) {
            return Err(BoundError::CannotRun(j.id));
        }
    }

    // Time is measured in units of `scale` seconds so that the LP's numbers are of order
    // one: the length of the horizon if each job ran alone at its best rate, back to back,
    // spread over the GPUs.
    let serial: f64 = jobs
        .iter()
        .zip(&rates)
        .map(|(j, r)| {
            j.total_steps
                / r.iter()
                    .flatten()
                    .copied()
                    .fold(0.0, f64::max)
                    .max(f64::MIN_POSITIVE)
        })
        .sum();
    let scale = (serial / f64::from(cluster.total_gpus().max(1)))
        .max(starts[k_last])
        .max(1.0);
    let len = |k: usize| (starts[k + 1] - starts[k]) / scale;

    let mut lp = LinearProgram::new();
    let tail = lp.add_nonneg(); // length of the last interval, in `scale` units
    // y[i][k][t]: time (scaled) job i runs on type t in interval k, for k from its own
    // interval on (arrival rounded down onto a breakpoint).
    let mut y: Vec<Vec<Vec<Option<Var>>>> = Vec::with_capacity(jobs.len());
    for (i, &a) in arrivals.iter().enumerate() {
        let first_k = starts.partition_point(|&s| s <= a).saturating_sub(1);
        let per_k = (0..=k_last)
            .map(|k| {
                types
                    .iter()
                    .enumerate()
                    .map(|(ti, _)| {
                        (k >= first_k && rates[i][ti].is_some()).then(|| lp.add_nonneg())
                    })
                    .collect()
            })
            .collect();
        y.push(per_k);
    }
    for ((job, y_job), job_rates) in jobs.iter().zip(&y).zip(&rates) {
        // Completion: steps done, in `scale`-second units of rate x time.
        let mut done: Vec<(Var, f64)> = Vec::new();
        for (k, y_k) in y_job.iter().enumerate() {
            for (v, r) in y_k.iter().zip(job_rates) {
                if let (Some(v), Some(r)) = (v, r) {
                    done.push((*v, r * scale / job.total_steps.max(f64::MIN_POSITIVE)));
                }
            }
            if !forking {
                // At most one copy of the job at a time.
                let terms: Vec<(Var, f64)> = y_k.iter().flatten().map(|&v| (v, 1.0)).collect();
                if terms.is_empty() {
                    continue;
                }
                if k < k_last {
                    lp.at_most(terms, len(k));
                } else {
                    let mut terms = terms;
                    terms.push((tail, -1.0));
                    lp.at_most(terms, 0.0);
                }
            }
        }
        if job.total_steps > 0.0 {
            lp.at_least(done, 1.0);
        }
    }
    for (ti, &t) in types.iter().enumerate() {
        let gpus = f64::from(cluster.total_of_type(t));
        for k in 0..=k_last {
            // GPU-seconds used: a gang holds its workers; a forking job's variable is
            // already in GPU-seconds.
            let mut terms: Vec<(Var, f64)> = jobs
                .iter()
                .zip(&y)
                .filter_map(|(job, y_job)| {
                    y_job[k][ti].map(|v| (v, if forking { 1.0 } else { f64::from(job.workers) }))
                })
                .collect();
            if terms.is_empty() {
                continue;
            }
            if k < k_last {
                lp.at_most(terms, gpus * len(k));
            } else {
                terms.push((tail, -gpus));
                lp.at_most(terms, 0.0);
            }
        }
    }
    lp.minimize([(tail, 1.0)]);
    let sol = lp.solve()?;
    Ok(starts[k_last] + sol.value(tail).max(0.0) * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::{RateCurve, ThroughputProfile};

    fn job(id: u64, arrival_s: f64, workers: u32, steps: f64, curves: Vec<Vec<(u32, f64)>>) -> Job {
        Job {
            id: JobId(id),
            kind: "test".into(),
            arrival_s,
            workers,
            total_steps: steps,
            weight: 1.0,
            throughput: ThroughputProfile::new(curves.into_iter().map(RateCurve::new).collect()),
        }
    }

    fn cluster(counts: &[(&str, u32)]) -> Cluster {
        let c: Vec<(String, u32)> = counts.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        Cluster::from_type_counts(&c, 1).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-4 * b.abs().max(1.0)
    }

    #[test]
    fn capacity_bound_by_hand() {
        // Three 1-GPU jobs of 100 s on 2 GPUs: 300 GPU-seconds / 2 GPUs = 150 s; no job is
        // longer than that alone, so 150 s is the answer.
        let c = cluster(&[("v100", 2)]);
        let jobs: Vec<Job> = (0..3)
            .map(|i| job(i, 0.0, 1, 100.0, vec![vec![(1, 1.0)]]))
            .collect();
        assert!(close(fluid_makespan(&c, &jobs).unwrap(), 150.0));
    }

    #[test]
    fn a_job_cannot_go_faster_than_its_own_workers() {
        // One 1-GPU job of 100 s on 4 GPUs: 100 s, not 25 s; forking may use all 4 GPUs.
        let c = cluster(&[("v100", 4)]);
        let jobs = vec![job(0, 0.0, 1, 100.0, vec![vec![(1, 1.0)]])];
        assert!(close(fluid_makespan(&c, &jobs).unwrap(), 100.0));
        assert!(close(fluid_makespan_forking(&c, &jobs).unwrap(), 25.0));
    }

    #[test]
    fn arrivals_are_respected() {
        // One GPU; job 0 (100 s) at t = 0, job 1 (100 s) at t = 50: the GPU is busy from 0
        // to 200 s at best. Times are from the first arrival, so shifting both arrivals by
        // 1000 s changes nothing.
        let c = cluster(&[("v100", 1)]);
        let jobs = vec![
            job(0, 0.0, 1, 100.0, vec![vec![(1, 1.0)]]),
            job(1, 50.0, 1, 100.0, vec![vec![(1, 1.0)]]),
        ];
        assert!(close(fluid_makespan(&c, &jobs).unwrap(), 200.0));
        // A late long job: job 1 arrives at 500 s, after job 0 is done: 600 s.
        let jobs = vec![
            job(0, 1000.0, 1, 100.0, vec![vec![(1, 1.0)]]),
            job(1, 1500.0, 1, 100.0, vec![vec![(1, 1.0)]]),
        ];
        assert!(close(fluid_makespan(&c, &jobs).unwrap(), 600.0));
    }

    #[test]
    fn heterogeneous_split_by_hand() {
        // One v100 (job rate 2) and one k80 (rate 1), one 1-GPU job of 300 steps: it may use
        // both types at once in the relaxation only up to its own single time line, so the
        // best is all on v100: 150 s. Two such jobs: split v100 and k80 time so both end
        // together: total rate 3 steps/s over 600 steps = 200 s, each job within 200 s.
        let c = cluster(&[("v100", 1), ("k80", 1)]);
        let curves = || vec![vec![(1, 2.0)], vec![(1, 1.0)]];
        let one = vec![job(0, 0.0, 1, 300.0, curves())];
        assert!(close(fluid_makespan(&c, &one).unwrap(), 150.0));
        let two = vec![
            job(0, 0.0, 1, 300.0, curves()),
            job(1, 0.0, 1, 300.0, curves()),
        ];
        assert!(close(fluid_makespan(&c, &two).unwrap(), 200.0));
    }

    #[test]
    fn gangs_use_their_workers_and_forking_uses_the_best_per_gpu_rate() {
        // A 2-worker job at 4 steps/s (2 per GPU) and 400 steps on 2 GPUs: 100 s either way.
        // With a measured 1-GPU rate of 3 steps/s, forking gets 3 per GPU: 400 / 6 s.
        let c = cluster(&[("v100", 2)]);
        let jobs = vec![job(0, 0.0, 2, 400.0, vec![vec![(1, 3.0), (2, 4.0)]])];
        assert!(close(fluid_makespan(&c, &jobs).unwrap(), 100.0));
        assert!(close(
            fluid_makespan_forking(&c, &jobs).unwrap(),
            400.0 / 6.0
        ));
        // A gang larger than any type cannot run: a clear error.
        let big = vec![job(7, 0.0, 4, 400.0, vec![vec![(4, 8.0)]])];
        assert_eq!(
            fluid_makespan(&c, &big),
            Err(BoundError::CannotRun(JobId(7)))
        );
    }

    #[test]
    fn coarsened_breakpoints_still_bound_from_below() {
        // Jobs of 150 s arriving every 100 s on one GPU: the exact bound is the last arrival
        // plus the backlog it finds. With few intervals, arrivals are rounded down and the
        // bound may only drop, never below the pure work bound.
        let c = cluster(&[("v100", 1)]);
        let n = 20u64;
        let jobs: Vec<Job> = (0..n)
            .map(|i| job(i, 100.0 * i as f64, 1, 150.0, vec![vec![(1, 1.0)]]))
            .collect();
        let exact = solve_bound(&c, &jobs, own_rate, false, usize::MAX).unwrap();
        // The GPU is never idle from 0 on, so the exact answer is all the work: 3000 s.
        assert!(close(exact, 150.0 * n as f64), "{exact}");
        let coarse = solve_bound(&c, &jobs, own_rate, false, 4).unwrap();
        assert!(coarse <= exact * (1.0 + 1e-6), "{coarse} > {exact}");
        assert!(coarse >= 150.0 * n as f64 - 1e-3, "{coarse}");
        // Long gaps: exact = last arrival (1900 s) + 100 s; coarse rounds the last arrival
        // down onto a breakpoint and can only be lower.
        let sparse: Vec<Job> = (0..n)
            .map(|i| job(i, 100.0 * i as f64, 1, 100.0, vec![vec![(1, 1.0)]]))
            .collect();
        let exact = solve_bound(&c, &sparse, own_rate, false, usize::MAX).unwrap();
        assert!(close(exact, 2000.0), "{exact}");
        let coarse = solve_bound(&c, &sparse, own_rate, false, 3).unwrap();
        assert!(
            coarse <= exact * (1.0 + 1e-6) && coarse >= 100.0 * n as f64 - 1e-3,
            "{coarse}"
        );
        let arrivals: Vec<f64> = sparse.iter().map(|j| j.arrival_s).collect();
        assert_eq!(breakpoints(&arrivals, 3).len(), 3);
        assert_eq!(breakpoints(&arrivals, 3)[0], 0.0);
    }

    #[test]
    fn empty_and_bad_workloads_are_refused() {
        let c = cluster(&[("v100", 1)]);
        assert_eq!(fluid_makespan(&c, &[]), Err(BoundError::NoJobs));
        let bad = vec![job(3, f64::NAN, 1, 1.0, vec![vec![(1, 1.0)]])];
        assert_eq!(fluid_makespan(&c, &bad), Err(BoundError::BadJob(JobId(3))));
    }
}
