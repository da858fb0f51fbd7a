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
//!   may be split across types at once, so no non-forking schedule can beat it. Where a
//!   type's GPU count is not a multiple of a gang size, it also counts whole gangs (see
//!   [gang cuts](#gang-cuts)).
//! * [`fluid_makespan_forking`] (`lower-bound-fork`): a job may use any number of GPUs at
//!   once; each GPU-second of type `j` gives it the best per-GPU rate it has there,
//!   `max over measured g of X[j][g] / g`. This bounds forking schedules (HadarE) too.
//!
//! # Gang cuts
//!
//! Capacity alone lets a type of 6 GPUs hold one and a half 4-worker gangs at once; a real
//! schedule holds one. For every type `t` and gang size `w` with `G_t` not a multiple of
//! `w`, at any moment at most `floor(G_t / w)` gangs of `w` or more workers run wholly on
//! `t` (each takes at least `w` of its `G_t` GPUs), so their time on `t` in an interval is
//! at most `floor(G_t / w)` times its length. A gang may also mix types; it then runs at
//! its slowest type's rate (`min over used types of X[type][N_i]`), which is at most the
//! job's second-best rate over the cluster's types, `X2_i`. So when any cut applies, the
//! LP splits a job's time into *whole* time on one type (rate `X[t][N_i]`, counted by the
//! cuts) and *mixed* time (rate `X2_i`, using `N_i` GPU-seconds per second spread over any
//! types the job can run on, not counted by the cuts). Every gang schedule maps into this
//! LP: a mixed gang with `g_t` GPUs on type `t` for `dt` is mixed time `g_t / N_i * dt` on
//! each `t`, using the same GPU-seconds and crediting at least its real progress. The
//! result is still a lower bound and never below the LP without cuts. When no cut applies
//! (every type's count a multiple of every gang size that can run on it, as on Gavel's
//! 4+4+4 and 16+16+16 clusters) the LP is exactly the one without them.
//!
//! When there are more distinct arrival times than [`MAX_INTERVALS`], arrivals are rounded
//! down onto that many breakpoints (quantiles of the arrival times). Rounding an arrival
//! down only lets a job start earlier, so the result is still a lower bound, slightly
//! weaker, and the LP stays small.

use crate::cluster::{Cluster, GpuType};
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
type RateFn = fn(&Job, &Cluster, GpuType) -> Option<f64>;

fn own_rate(job: &Job, cluster: &Cluster, t: GpuType) -> Option<f64> {
    // A gang of N workers needs N GPUs of the type, even in the fluid relaxation's
    // time-sharing sense (it uses N GPUs while it runs).
    if job.workers > cluster.total_of_type(t) {
        return None;
    }
    job.rate_on(t)
}

fn per_gpu_rate(job: &Job, _cluster: &Cluster, t: GpuType) -> Option<f64> {
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

/// A gang cut: on type `ti`, the jobs of at least `workers` workers run whole gangs at
/// most `gangs` at a time.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GangCut {
    ti: usize,
    workers: u32,
    gangs: u32,
}

/// The gang cuts that are not implied by capacity: a type whose GPU count is not a multiple
/// of a gang size `w`, where more jobs of `w` or more workers can run whole than
/// `floor(G_t / w)`.
fn gang_cuts(cluster: &Cluster, jobs: &[Job], rates: &[Vec<Option<f64>>]) -> Vec<GangCut> {
    let mut cuts = Vec::new();
    for (ti, t) in cluster.types().enumerate() {
        let gpus = cluster.total_of_type(t);
        let mut sizes: Vec<u32> = jobs
            .iter()
            .zip(rates)
            .filter(|(_, r)| r[ti].is_some())
            .map(|(j, _)| j.workers.max(1))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for &w in &sizes {
            let gangs = gpus / w;
            let fit = jobs
                .iter()
                .zip(rates)
                .filter(|(j, r)| r[ti].is_some() && j.workers >= w)
                .count();
            if gpus % w != 0 && fit > gangs as usize {
                cuts.push(GangCut {
                    ti,
                    workers: w,
                    gangs,
                });
            }
        }
    }
    cuts
}

/// The fastest a gang mixing two or more of the cluster's types can run: the job's
/// second-best rate (0 when it can run on fewer than two types).
fn mixed_rate(job: &Job, cluster: &Cluster) -> f64 {
    let mut r: Vec<f64> = cluster.types().filter_map(|t| job.rate_on(t)).collect();
    r.sort_by(|a, b| b.total_cmp(a));
    r.get(1).copied().unwrap_or(0.0)
}

/// The LP's variables of one job: per interval, per type, its whole-gang time (`whole`,
/// where the bound's rate allows) and, with gang cuts, its mixed-gang time (`mixed`).
struct JobVars {
    whole: Vec<Vec<Option<Var>>>,
    mixed: Vec<Vec<Option<Var>>>,
    mixed_rate: f64,
}

fn solve_bound(
    cluster: &Cluster,
    jobs: &[Job],
    rate: RateFn,
    forking: bool,
    max_intervals: usize,
) -> Result<f64, BoundError> {
    let arrivals = check_jobs(jobs)?;
    let types: Vec<GpuType> = cluster.types().collect();
    let rates: Vec<Vec<Option<f64>>> = jobs
        .iter()
        .map(|j| types.iter().map(|&t| rate(j, cluster, t)).collect())
        .collect();
    for (j, r) in jobs.iter().zip(&rates) {
        if j.total_steps > 0.0 && r.iter().all(Option::is_none) {
            return Err(BoundError::CannotRun(j.id));
        }
    }
    let cuts = if forking {
        Vec::new()
    } else {
        gang_cuts(cluster, jobs, &rates)
    };
    let starts = breakpoints(&arrivals, max_intervals);
    let scale = time_scale(cluster, jobs, &rates, &starts);
    let mut b = BoundLp::new(starts, scale);
    let vars: Vec<JobVars> = jobs
        .iter()
        .zip(&arrivals)
        .zip(&rates)
        .map(|((job, &a), job_rates)| {
            let mixed_rate = if cuts.is_empty() {
                0.0
            } else {
                mixed_rate(job, cluster)
            };
            b.job_vars(job, a, job_rates, &types, mixed_rate)
        })
        .collect();
    for ((job, v), job_rates) in jobs.iter().zip(&vars).zip(&rates) {
        b.completion(job, v, job_rates, forking);
    }
    for (ti, &t) in types.iter().enumerate() {
        b.capacity(
            jobs,
            &vars,
            ti,
            f64::from(cluster.total_of_type(t)),
            forking,
        );
    }
    for cut in &cuts {
        b.gang_cut(jobs, &vars, cut);
    }
    b.solve()
}

/// Refuses jobs with a non-finite or negative arrival or step count; returns the arrivals
/// measured from the first.
fn check_jobs(jobs: &[Job]) -> Result<Vec<f64>, BoundError> {
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
    Ok(jobs.iter().map(|j| j.arrival_s - first).collect())
}

/// The LP's unit of time, so that its numbers are of order one: the length of the horizon
/// if each job ran alone at its best rate, back to back, spread over the GPUs.
fn time_scale(cluster: &Cluster, jobs: &[Job], rates: &[Vec<Option<f64>>], starts: &[f64]) -> f64 {
    let serial: f64 = jobs
        .iter()
        .zip(rates)
        .map(|(j, r)| {
            j.total_steps
                / r.iter()
                    .flatten()
                    .copied()
                    .fold(0.0, f64::max)
                    .max(f64::MIN_POSITIVE)
        })
        .sum();
    (serial / f64::from(cluster.total_gpus().max(1)))
        .max(starts[starts.len() - 1])
        .max(1.0)
}

/// The time-indexed LP being built: the intervals, the unit of time and the free length of
/// the last interval, which it minimises.
struct BoundLp {
    lp: LinearProgram,
    /// The length of the last interval, in `scale` units.
    tail: Var,
    /// The intervals' starts, seconds from the first arrival.
    starts: Vec<f64>,
    /// The last interval's index.
    k_last: usize,
    /// Seconds per LP time unit.
    scale: f64,
}

impl BoundLp {
    fn new(starts: Vec<f64>, scale: f64) -> BoundLp {
        let mut lp = LinearProgram::new();
        let tail = lp.add_nonneg();
        let k_last = starts.len() - 1;
        BoundLp {
            lp,
            tail,
            starts,
            k_last,
            scale,
        }
    }

    /// Interval `k`'s length (not the last), in `scale` units.
    fn len(&self, k: usize) -> f64 {
        (self.starts[k + 1] - self.starts[k]) / self.scale
    }

    /// A job's variables: per interval from its own (its arrival `a` rounded down onto a
    /// breakpoint), per type, its scaled time as a whole gang and, with cuts
    /// (`mixed_rate > 0`), as part of a mixed gang.
    fn job_vars(
        &mut self,
        job: &Job,
        a: f64,
        job_rates: &[Option<f64>],
        types: &[GpuType],
        mixed_rate: f64,
    ) -> JobVars {
        let first_k = self.starts.partition_point(|&s| s <= a).saturating_sub(1);
        let mut grid = |on: &dyn Fn(usize) -> bool| -> Vec<Vec<Option<Var>>> {
            (0..=self.k_last)
                .map(|k| {
                    (0..types.len())
                        .map(|ti| (k >= first_k && on(ti)).then(|| self.lp.add_nonneg()))
                        .collect()
                })
                .collect()
        };
        let whole = grid(&|ti| job_rates[ti].is_some());
        let mixed = grid(&|ti| mixed_rate > 0.0 && job.rate_on(types[ti]).is_some());
        JobVars {
            whole,
            mixed,
            mixed_rate,
        }
    }

    /// `terms <= bound` in interval k (for the last one, `terms <= bound * tail`).
    fn limit(&mut self, mut terms: Vec<(Var, f64)>, k: usize, bound: f64) {
        if terms.is_empty() {
            return;
        }
        if k < self.k_last {
            let rhs = bound * self.len(k);
            self.lp.at_most(terms, rhs);
        } else {
            terms.push((self.tail, -bound));
            self.lp.at_most(terms, 0.0);
        }
    }

    /// The job completes its steps (in `scale`-second units of rate x time) and, unless
    /// forking, runs at most once at any moment.
    fn completion(&mut self, job: &Job, v: &JobVars, job_rates: &[Option<f64>], forking: bool) {
        let per_step = self.scale / job.total_steps.max(f64::MIN_POSITIVE);
        let mut done: Vec<(Var, f64)> = Vec::new();
        for k in 0..=self.k_last {
            for (x, r) in v.whole[k].iter().zip(job_rates) {
                if let (Some(x), Some(r)) = (x, r) {
                    done.push((*x, r * per_step));
                }
            }
            for x in v.mixed[k].iter().flatten() {
                done.push((*x, v.mixed_rate * per_step));
            }
            if !forking {
                let terms = v.whole[k].iter().chain(&v.mixed[k]).flatten();
                self.limit(terms.map(|&x| (x, 1.0)).collect(), k, 1.0);
            }
        }
        if job.total_steps > 0.0 {
            self.lp.at_least(done, 1.0);
        }
    }

    /// Type `ti` gives out at most `gpus` GPU-seconds per second in every interval: a gang
    /// holds its workers; a forking job's variable is already in GPU-seconds.
    fn capacity(&mut self, jobs: &[Job], vars: &[JobVars], ti: usize, gpus: f64, forking: bool) {
        for k in 0..=self.k_last {
            let terms: Vec<(Var, f64)> = jobs
                .iter()
                .zip(vars)
                .flat_map(|(job, v)| {
                    let w = if forking { 1.0 } else { f64::from(job.workers) };
                    [v.whole[k][ti], v.mixed[k][ti]]
                        .into_iter()
                        .flatten()
                        .map(move |x| (x, w))
                })
                .collect();
            self.limit(terms, k, gpus);
        }
    }

    /// At most `cut.gangs` whole gangs of `cut.workers` or more run on the cut's type at once.
    fn gang_cut(&mut self, jobs: &[Job], vars: &[JobVars], cut: &GangCut) {
        for k in 0..=self.k_last {
            let terms: Vec<(Var, f64)> = jobs
                .iter()
                .zip(vars)
                .filter(|(job, _)| job.workers >= cut.workers)
                .filter_map(|(_, v)| v.whole[k][cut.ti].map(|x| (x, 1.0)))
                .collect();
            self.limit(terms, k, f64::from(cut.gangs));
        }
    }

    /// Minimises the makespan: the last interval's start plus its free length.
    fn solve(mut self) -> Result<f64, BoundError> {
        self.lp.minimize([(self.tail, 1.0)]);
        let sol = self.lp.solve()?;
        Ok(self.starts[self.k_last] + sol.value(self.tail).max(0.0) * self.scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::{RateCurve, ThroughputProfile};

    fn job(id: u64, arrival_s: f64, workers: u32, steps: f64, curves: Vec<Vec<(u32, f64)>>) -> Job {
        Job {
            restart_s: None,
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
    fn whole_gangs_are_counted_where_a_type_does_not_divide() {
        // Two 4-worker jobs of 100 s alone on 6 V100s: capacity alone would run 1.5 gangs
        // at once (800 GPU-seconds / 6 GPUs = 133 s); only one fits, so 200 s.
        let c = cluster(&[("v100", 6)]);
        let jobs: Vec<Job> = (0..2)
            .map(|i| job(i, 0.0, 4, 400.0, vec![vec![(4, 4.0)]]))
            .collect();
        assert!(close(fluid_makespan(&c, &jobs).unwrap(), 200.0));
        // With two K80s (rate 1) a second gang may mix 2 V100s and 2 K80s at the K80's
        // rate. By hand: each job whole on V100 for T/2 (one gang at a time) and mixed for
        // T/2: 4 T/2 + T/2 = 400 steps, T = 160 s. Capacity alone (no whole-gang count)
        // gives 400 / 3.25 = 123 s; a real schedule (one job whole on V100 0-100 s while
        // the other runs mixed, then it whole for 75 s) ends at 175 s.
        let c = cluster(&[("v100", 6), ("k80", 2)]);
        let jobs: Vec<Job> = (0..2)
            .map(|i| job(i, 0.0, 4, 400.0, vec![vec![(4, 4.0)], vec![(4, 1.0)]]))
            .collect();
        let b = fluid_makespan(&c, &jobs).unwrap();
        assert!(close(b, 160.0), "{b}");
        // Types that hold whole gangs exactly (Gavel's clusters) have no cuts.
        let c = cluster(&[("v100", 4), ("k80", 8)]);
        let mixed: Vec<Job> = [1, 2, 4]
            .iter()
            .enumerate()
            .map(|(i, &w)| job(i as u64, 0.0, w, 10.0, vec![vec![(w, 1.0)], vec![(w, 1.0)]]))
            .collect();
        let rates: Vec<Vec<Option<f64>>> = mixed
            .iter()
            .map(|j| c.types().map(|t| own_rate(j, &c, t)).collect())
            .collect();
        assert!(gang_cuts(&c, &mixed, &rates).is_empty());
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
