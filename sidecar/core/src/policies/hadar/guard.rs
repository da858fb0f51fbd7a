//! The makespan guard: latest start times from the fluid bound of the remaining work.
//!
//! Hadar's utility ranks short jobs first (shortest remaining time minimises average JCT),
//! so on its own it leaves the longest jobs to the end, where they run while GPUs idle and
//! set a makespan well above the fluid bound. The guard keeps SRPT's order for every job
//! that can still afford to wait, and makes a job *urgent* once it cannot:
//!
//! 1. Each round it solves the fluid relaxation of the work left (every active job from
//!    now, time split freely across GPU types, each job at most at its own workers' rate,
//!    capacity per type; [`fluid_horizon`]). Its optimum `H` is the soonest the remaining
//!    work could possibly end, so `now + H` is the target the round steers for.
//! 2. A job needing `t_best` at its fastest rate has slack `H - t_best`: it can wait that
//!    long and still end by the target. When its slack is under `margin` (a round or two),
//!    it is urgent: it must run this round, and at no less than `remaining / H` steps/s (the
//!    average rate that ends it by the target), so types too slow for that are barred.
//!
//! The policy places urgent jobs first, least slack first, whatever the prices say (the
//! deadline is a constraint, not a utility to trade). Everything else is left to the
//! primal-dual. Since the bound is solved again every round from what is left, a job
//! that was kept waiting loses slack round after round and is started in time; jobs that
//! have slack are ordered by utility as before.
//!
//! Cost: one LP per round. Only the [`LP_JOBS`] longest jobs enter it one by one; shorter
//! ones cannot be urgent unless the horizon shrinks to their length, and are pooled per
//! (fastest type, usable types) without a per-job time limit, which lowers the bound only
//! where it did not bind. Pure: no clock, no IO.

use crate::lp::{LinearProgram, Row, Var};

/// How many jobs, longest first, the guard's LP models one by one.
pub const LP_JOBS: usize = 48;

/// One active job as the guard sees it.
#[derive(Clone, Copy, Debug)]
pub struct GuardJob<'a> {
    /// GPUs it runs on (its gang).
    pub workers: u32,
    /// Steps still to run.
    pub remaining_steps: f64,
    /// Its steps/s with all its workers on each GPU type (0 where it cannot run).
    pub rates: &'a [f64],
}

impl GuardJob<'_> {
    fn best_rate(&self) -> f64 {
        self.rates.iter().copied().fold(0.0, f64::max)
    }

    /// Its remaining time at its fastest rate (infinite when it can run nowhere).
    pub fn best_time_s(&self) -> f64 {
        let best = self.best_rate();
        if best > 0.0 {
            self.remaining_steps.max(0.0) / best
        } else {
            f64::INFINITY
        }
    }
}

/// The guard's verdict on one job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Urgency {
    /// It can wait at least `margin` and still end by the target: planned by utility.
    Slack,
    /// It must run this round, at `min_rate` steps/s or faster, to end by the target.
    Urgent {
        /// The slowest rate that still ends it by the target.
        min_rate: f64,
        /// Seconds it could still wait (under the margin, possibly zero).
        slack_s: f64,
    },
    /// A gang smaller jobs keep overtaking ([`super::overdue`]): placed after the urgent
    /// jobs and before the priced pass, longest waiting first.
    Overdue {
        /// Seconds it has waited, since it arrived, not running.
        waited_s: f64,
    },
}

impl Urgency {
    /// True for a job placed before the priced pass: [`Urgency::Urgent`] or
    /// [`Urgency::Overdue`].
    pub fn is_urgent(&self) -> bool {
        matches!(self, Urgency::Urgent { .. } | Urgency::Overdue { .. })
    }

    /// The slack of an urgent job (infinite for any other).
    pub fn slack_s(&self) -> f64 {
        match self {
            Urgency::Urgent { slack_s, .. } => *slack_s,
            Urgency::Overdue { .. } | Urgency::Slack => f64::INFINITY,
        }
    }

    /// Where the job goes in the round: urgent jobs first, least slack first; then overdue
    /// ones, longest waiting first; then the rest (a stable sort keeps their order).
    pub fn place_key(&self) -> (u8, f64) {
        match self {
            Urgency::Urgent { slack_s, .. } => (0, *slack_s),
            Urgency::Overdue { waited_s } => (1, -waited_s),
            Urgency::Slack => (2, 0.0),
        }
    }
}

/// The guard's reading of a round.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    /// The fluid horizon of the remaining work, seconds from now.
    pub horizon_s: f64,
    /// Per job, in the order given.
    pub urgency: Vec<Urgency>,
    /// Per job, the types its work belongs on in the fluid optimum (see [`Fluid`]); all
    /// its usable types when the LP was not solved.
    pub efficient: Vec<Vec<bool>>,
}

/// Judges every job against the fluid horizon `H` of all of them: urgent when its slack is
/// under `margin_s + margin_share * H` (the share covers what the fluid model misses:
/// gangs that must find all their GPUs at once, mixed-type gangs at the slowest type's
/// rate, so the real end slips past `H` in proportion to it); and marks the types each job's work is worth doing on, within
/// `tolerance` (relative) of its cheapest at the LP's shadow prices. `capacity[t]` is the
/// cluster's GPUs of type `t`.
pub fn assess(
    capacity: &[u32],
    jobs: &[GuardJob<'_>],
    margin_s: f64,
    margin_share: f64,
    tolerance: f64,
) -> Guard {
    let fluid = fluid(capacity, jobs);
    let share = if margin_share.is_finite() {
        margin_share.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let margin_s = margin_s + share * fluid.horizon_s.max(0.0);
    let urgency = jobs
        .iter()
        .map(|j| urgency(j, fluid.horizon_s, margin_s))
        .collect();
    let efficient = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| fluid.efficient_types(i, j, tolerance))
        .collect();
    Guard {
        horizon_s: fluid.horizon_s,
        urgency,
        efficient,
    }
}

fn urgency(job: &GuardJob<'_>, horizon_s: f64, margin_s: f64) -> Urgency {
    let t_best = job.best_time_s();
    // A NaN horizon is no horizon: `is_nan` is checked apart from the sign.
    if !t_best.is_finite() || horizon_s.is_nan() || horizon_s <= 0.0 {
        return Urgency::Slack;
    }
    let slack_s = (horizon_s - t_best).max(0.0);
    if slack_s >= margin_s {
        return Urgency::Slack;
    }
    Urgency::Urgent {
        // Never above its best rate, so its fastest type always qualifies.
        min_rate: (job.remaining_steps / horizon_s).min(job.best_rate()),
        slack_s,
    }
}

/// Whether jobs are streaming in: the arrivals within the `window_s` seconds before `now_s`
/// span `batch_s` or more (jobs submitted together, within `batch_s` of one another, are one
/// batch, however large). The guard's horizon is the soonest the work present could end;
/// while more keeps arriving, that is not when the work ends, and the urgent long jobs it
/// puts first delay the short ones for a target that moves. A window of 0 sees no stream.
pub fn streaming(
    arrivals: impl IntoIterator<Item = f64>,
    now_s: f64,
    window_s: f64,
    batch_s: f64,
) -> bool {
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for a in arrivals {
        let recent = now_s - a < window_s;
        if recent {
            first = first.min(a);
            last = last.max(a);
        }
    }
    last - first >= batch_s.max(0.0) && last >= first
}

/// The fluid relaxation of the remaining work, solved.
#[derive(Clone, Debug, PartialEq)]
pub struct Fluid {
    /// Its optimum: the soonest the remaining work could end, seconds from now.
    pub horizon_s: f64,
    /// Shadow price of each type's capacity: how much the horizon would shrink per
    /// GPU-horizon of the type added (0 for a type with capacity to spare). Empty when the
    /// LP was not solved.
    pub type_value: Vec<f64>,
    /// Per job (in the order given), the shadow price of its own time limit (running at
    /// most once at a time): positive for the jobs that set the horizon. 0 for pooled jobs.
    pub job_value: Vec<f64>,
}

impl Fluid {
    /// The types on which job `i`'s work is worth doing: those whose cost per step at the
    /// shadow prices, `(type_value[t] * workers + job_value) / rate[t]`, is within
    /// `tolerance` of the job's cheapest. By complementary slackness the fluid optimum
    /// puts the job's work only on its cheapest types, so work done elsewhere delays the
    /// end. With no prices (LP unsolved) or `tolerance` infinite, every usable type.
    pub fn efficient_types(&self, i: usize, job: &GuardJob<'_>, tolerance: f64) -> Vec<bool> {
        let usable: Vec<bool> = job.rates.iter().map(|&r| r > 0.0).collect();
        if self.type_value.len() != job.rates.len() || !tolerance.is_finite() {
            return usable;
        }
        let own = self.job_value.get(i).copied().unwrap_or(0.0).max(0.0);
        let cost: Vec<f64> = job
            .rates
            .iter()
            .zip(&self.type_value)
            .map(|(&r, &mu)| {
                if r > 0.0 {
                    (mu.max(0.0) * f64::from(job.workers) + own) / r
                } else {
                    f64::INFINITY
                }
            })
            .collect();
        let finite = cost.iter().copied().filter(|c| c.is_finite());
        let cheapest = finite.clone().fold(f64::INFINITY, f64::min);
        let dearest = finite.fold(0.0, f64::max);
        let bar = cheapest * (1.0 + tolerance.max(0.0)) + 1e-9 * dearest;
        cost.iter().map(|&c| c.is_finite() && c <= bar).collect()
    }
}

/// One row of the LP: a job, or a pool of short jobs that share their usable types.
struct Item {
    /// GPU-seconds of each type the whole item takes if done there (`None`: unusable).
    gpu_s: Vec<Option<f64>>,
    /// For a single job, seconds on each type (its gang runs at most once at a time).
    own_s: Option<Vec<Option<f64>>>,
}

/// The fluid makespan of the remaining work from now, in seconds: the least `H` such that
/// every job can be completed within `H`, splitting its time freely over the types it can
/// use, running at most once at a time, with no type giving out more than its GPUs x `H`.
/// It is never below the longest job's time at its fastest rate. Falls back to a simple
/// bound (the longest job, or all work spread over all GPUs at each job's best rate) when
/// the LP cannot be solved.
pub fn fluid_horizon(capacity: &[u32], jobs: &[GuardJob<'_>]) -> f64 {
    fluid(capacity, jobs).horizon_s
}

/// [`fluid_horizon`] with the LP's shadow prices.
pub fn fluid(capacity: &[u32], jobs: &[GuardJob<'_>]) -> Fluid {
    let longest = jobs
        .iter()
        .map(GuardJob::best_time_s)
        .filter(|t| t.is_finite())
        .fold(0.0, f64::max);
    let total: f64 = capacity.iter().map(|&c| f64::from(c)).sum();
    let spread = jobs
        .iter()
        .map(|j| j.best_time_s() * f64::from(j.workers))
        .filter(|t| t.is_finite())
        .sum::<f64>()
        / total.max(1.0);
    let simple = longest.max(spread);
    let unsolved = |horizon_s: f64| Fluid {
        horizon_s,
        type_value: Vec::new(),
        job_value: Vec::new(),
    };
    if simple <= 0.0 {
        return unsolved(0.0);
    }
    let (items, item_of) = lp_items(capacity, jobs);
    match solve(capacity, &items, simple) {
        Some(s) if s.horizon_s.is_finite() => Fluid {
            horizon_s: s.horizon_s.max(longest),
            type_value: s.type_value,
            job_value: item_of
                .iter()
                .map(|i| i.map_or(0.0, |i| s.own_value[i]))
                .collect(),
        },
        _ => unsolved(simple),
    }
}

/// The LP's answer: horizon, and shadow prices per type and per item's own-time row.
struct Solved {
    horizon_s: f64,
    type_value: Vec<f64>,
    own_value: Vec<f64>,
}

/// The LP's rows, and for each job the row that models it alone (`None`: pooled or left
/// out).
fn lp_items(capacity: &[u32], jobs: &[GuardJob<'_>]) -> (Vec<Item>, Vec<Option<usize>>) {
    let usable = |j: &GuardJob<'_>, t: usize| j.rates[t] > 0.0 && capacity[t] > 0;
    let mut order: Vec<(usize, &GuardJob<'_>)> = jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| j.remaining_steps > 0.0 && j.best_time_s().is_finite())
        .collect();
    order.sort_by(|a, b| b.1.best_time_s().total_cmp(&a.1.best_time_s()));
    let mut item_of = vec![None; jobs.len()];
    let types = capacity.len();
    let mut items: Vec<Item> = Vec::new();
    // Pools keyed by (fastest type, bit set of usable types).
    let mut pools: Vec<((usize, u64), Vec<f64>)> = Vec::new();
    for (k, (i, j)) in order.into_iter().enumerate() {
        let secs = |t: usize| usable(j, t).then(|| j.remaining_steps / j.rates[t]);
        if k < LP_JOBS {
            item_of[i] = Some(items.len());
            items.push(Item {
                gpu_s: (0..types)
                    .map(|t| secs(t).map(|s| s * f64::from(j.workers)))
                    .collect(),
                own_s: Some((0..types).map(secs).collect()),
            });
            continue;
        }
        let fastest = (0..types)
            .max_by(|&a, &b| j.rates[a].total_cmp(&j.rates[b]))
            .unwrap_or(0);
        let mask = (0..types.min(64))
            .filter(|&t| usable(j, t))
            .fold(0u64, |m, t| m | (1 << t));
        let key = (fastest, mask);
        let at = match pools.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                pools.push((key, vec![0.0; types]));
                pools.len() - 1
            }
        };
        for t in 0..types {
            if let Some(s) = secs(t) {
                pools[at].1[t] += s * f64::from(j.workers);
            }
        }
    }
    items.extend(pools.into_iter().map(|((_, mask), gpu_s)| {
        Item {
            gpu_s: gpu_s
                .into_iter()
                .enumerate()
                .map(|(t, s)| (t < 64 && mask & (1 << t) != 0).then_some(s))
                .collect(),
            own_s: None,
        }
    }));
    (items, item_of)
}

/// Solves the horizon LP in units of `scale` seconds (so its numbers are of order one).
fn solve(capacity: &[u32], items: &[Item], scale: f64) -> Option<Solved> {
    if items.is_empty() {
        return None;
    }
    let mut lp = LinearProgram::new();
    let horizon = lp.add_nonneg();
    // x[i][t]: the share of item i done on type t.
    let x: Vec<Vec<Option<Var>>> = items
        .iter()
        .map(|it| {
            it.gpu_s
                .iter()
                .map(|s| s.map(|_| lp.add_var(0.0, 1.0)))
                .collect()
        })
        .collect();
    let mut own_rows: Vec<Option<Row>> = Vec::with_capacity(items.len());
    for (it, xs) in items.iter().zip(&x) {
        let shares: Vec<(Var, f64)> = xs.iter().flatten().map(|&v| (v, 1.0)).collect();
        if shares.is_empty() {
            return None;
        }
        lp.at_least(shares, 1.0);
        own_rows.push(it.own_s.as_ref().map(|own| {
            let mut terms: Vec<(Var, f64)> = xs
                .iter()
                .zip(own)
                .filter_map(|(v, s)| Some(((*v)?, (*s)? / scale)))
                .collect();
            terms.push((horizon, -1.0));
            lp.at_most(terms, 0.0)
        }));
    }
    let mut type_rows: Vec<Option<Row>> = Vec::with_capacity(capacity.len());
    for (t, &c) in capacity.iter().enumerate() {
        let mut terms: Vec<(Var, f64)> = items
            .iter()
            .zip(&x)
            .filter_map(|(it, xs)| Some((xs[t]?, it.gpu_s[t]? / scale)))
            .collect();
        if terms.is_empty() {
            type_rows.push(None);
            continue;
        }
        terms.push((horizon, -f64::from(c)));
        type_rows.push(Some(lp.at_most(terms, 0.0)));
    }
    lp.minimize([(horizon, 1.0)]);
    let sol = lp.solve().ok()?;
    let dual = |r: &Option<Row>| r.map_or(0.0, |r| sol.dual(r).max(0.0));
    Some(Solved {
        horizon_s: sol.value(horizon).max(0.0) * scale,
        type_value: type_rows.iter().map(dual).collect(),
        own_value: own_rows.iter().map(dual).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn job(workers: u32, steps: f64, rates: &[f64]) -> GuardJob<'_> {
        GuardJob {
            workers,
            remaining_steps: steps,
            rates,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-4 * b.abs().max(1.0)
    }

    #[test]
    fn jobs_stream_in_when_recent_arrivals_span_a_batch_or_more() {
        // A batch submitted together is one arrival, however large and however spread
        // within the batch time.
        assert!(!streaming([0.0, 0.0, 0.0], 10.0, 100.0, 3.0));
        assert!(!streaming([0.0, 1.0, 2.5], 10.0, 100.0, 3.0));
        assert!(streaming([0.0, 1.0, 5.0], 10.0, 100.0, 3.0));
        // Arrivals older than the window do not count; a window of 0 sees none.
        assert!(!streaming([0.0, 95.0], 100.0, 50.0, 3.0));
        assert!(!streaming([90.0, 95.0], 100.0, 0.0, 3.0));
        assert!(!streaming(std::iter::empty(), 100.0, 50.0, 3.0));
    }

    #[test]
    fn the_horizon_is_the_longest_job_or_the_capacity_whichever_binds() {
        // Three 100 s jobs on 2 GPUs: capacity binds at 150 s.
        let r = [1.0];
        let jobs = [job(1, 100.0, &r), job(1, 100.0, &r), job(1, 100.0, &r)];
        assert!(close(fluid_horizon(&[2], &jobs), 150.0));
        // One 400 s job and two 100 s ones on 2 GPUs: the long one binds.
        let jobs = [job(1, 400.0, &r), job(1, 100.0, &r), job(1, 100.0, &r)];
        assert!(close(fluid_horizon(&[2], &jobs), 400.0));
    }

    #[test]
    fn the_horizon_splits_work_across_types_by_advantage() {
        // Job a runs 4x faster on type 0, job b equally on both; one GPU of each. The best
        // split puts a on type 0 (100 s) and b on type 1 (100 s).
        let (ra, rb) = ([4.0, 1.0], [1.0, 1.0]);
        let jobs = [job(1, 400.0, &ra), job(1, 100.0, &rb)];
        assert!(close(fluid_horizon(&[1, 1], &jobs), 100.0));
    }

    #[test]
    fn long_jobs_are_urgent_and_short_ones_wait() {
        let r = [2.0, 1.0];
        // On 1 + 1 GPUs: a job of 1,000 s at best and four of 100 s. The long job sets the
        // horizon, so it has no slack; it must run at least at 2,000 / 1,000 = 2 steps/s,
        // the fast type's rate.
        let jobs = [
            job(1, 2000.0, &r),
            job(1, 200.0, &r),
            job(1, 200.0, &r),
            job(1, 200.0, &r),
            job(1, 200.0, &r),
        ];
        let g = assess(&[1, 1], &jobs, 360.0, 0.0, 0.0);
        assert!(close(g.horizon_s, 1000.0));
        match g.urgency[0] {
            Urgency::Urgent { min_rate, slack_s } => {
                assert!(close(min_rate, 2.0));
                assert!(slack_s < 1.0);
            }
            other => panic!("the long job must be urgent, not {other:?}"),
        }
        assert!(g.urgency[1..].iter().all(|u| *u == Urgency::Slack));
    }

    #[test]
    fn pooled_short_jobs_still_count_against_capacity() {
        // More jobs than the LP models one by one: the pooled ones still fill the GPU.
        let r = [1.0];
        let jobs: Vec<GuardJob<'_>> = (0..LP_JOBS + 50).map(|_| job(1, 10.0, &r)).collect();
        let h = fluid_horizon(&[1], &jobs);
        assert!(close(h, 10.0 * (LP_JOBS + 50) as f64), "{h}");
    }

    proptest! {
        #[test]
        fn the_horizon_bounds_every_job_and_the_total_work(
            specs in prop::collection::vec((1u32..4, 1.0f64..1e4, 0.1f64..5.0, 0.0f64..5.0), 1..12),
            caps in (1u32..6, 0u32..6),
        ) {
            let rates: Vec<[f64; 2]> = specs.iter().map(|s| [s.2, s.3]).collect();
            let jobs: Vec<GuardJob<'_>> = specs.iter().zip(&rates)
                .map(|(s, r)| job(s.0.min(caps.0), s.1, r)).collect();
            let cap = [caps.0, caps.1];
            let h = fluid_horizon(&cap, &jobs);
            for j in &jobs {
                prop_assert!(h >= j.best_time_s() * (1.0 - 1e-6));
            }
            // All work at each job's best rate, over all GPUs, is a weaker bound still.
            let spread: f64 = jobs.iter().map(|j| j.best_time_s() * f64::from(j.workers)).sum::<f64>()
                / f64::from(cap[0] + cap[1]);
            prop_assert!(h >= spread * (1.0 - 1e-4));
            let g = assess(&cap, &jobs, 360.0, 0.0, 0.0);
            for (j, u) in jobs.iter().zip(&g.urgency) {
                if let Urgency::Urgent { min_rate, .. } = u {
                    prop_assert!(*min_rate <= j.best_rate() * (1.0 + 1e-12));
                    prop_assert!(j.remaining_steps / min_rate <= h * (1.0 + 1e-9) || *min_rate == j.best_rate());
                }
            }
        }
    }
}
