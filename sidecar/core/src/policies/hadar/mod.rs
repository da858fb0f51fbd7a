//! Hadar: the task-level heterogeneity-aware scheduler, as an online primal-dual round.
//!
//! Each round:
//! 1. Every job that can run gets a utility function of its rate ([`utility`]); `U` and `L`
//!    come from the jobs' utilities per GPU-round ([`PriceBook::bounds_from_utilities`]):
//!    over all types from each job's best utility, and by default per type from each job's
//!    utility with all its workers on that type ([`PriceBook::bounds_by_type`]). Utilities
//!    and prices are the market HadarE shares ([`crate::market`]).
//! 2. The makespan guard ([`guard`]), in rounds when jobs are not streaming in (with
//!    `guard_quiet_rounds`), solves the fluid LP of the remaining work: jobs with
//!    under a round of slack to its horizon are urgent and go first, placed whatever the
//!    prices on types fast enough to end by it, or failing that (where jobs may be
//!    preempted) on the fastest types it can get, with jobs that have slack making room;
//!    every other job is offered, in the priced pass, only the types its work belongs on
//!    at the LP's shadow prices.
//!    Overdue gangs ([`overdue`]), on multi-GPU nodes, that jobs ranked after them kept
//!    overtaking for several times their own run time, come next, placed the same way but
//!    taking GPUs only from the jobs that overtook them.
//!    Then jobs are taken in order (utility per GPU by default, [`JobOrder`]). For each, the dual
//!    subroutine ([`dual::best_offer`]) finds the gang placement of all its workers that
//!    maximises utility minus price; the job is admitted when that payoff is positive, and
//!    the GPUs it takes raise their (node, type) prices ([`prices`]).
//! 3. Beyond the paper, each switchable in [`HadarConfig`]:
//!    * work conservation: after the primal-dual pass, jobs priced out are offered the GPUs
//!      still free, in the same order, at whatever payoff. Admitted jobs keep exactly what
//!      they were given, so none is delayed; afterwards no waiting job fits in the free GPUs.
//!    * stickiness: a running job's old placement is a candidate that costs no restart,
//!      while moving it discounts its utility by the restart time (`RoundInput::restart_s`),
//!      so it moves only when the gain beats the restart; with reservations its GPUs are
//!      held for it until its turn, so jobs considered earlier do not displace it.
//!    * pace boost ([`pace`]): with the guard, a started long job that lags an even pace
//!      from its first start to the guard's horizon bids more (its makespan-aware factor is
//!      scaled up), so long jobs are not held back once begun.
//!    * tail plan ([`tail`]): when at most `tail_jobs` jobs are left and the guard finds
//!      every one urgent, a configuration LP that packs whole gangs (which the fluid LP
//!      does not) chooses who runs on which type, instead of the passes above.
//!    * swap improvement: admitted jobs with the same worker count exchange placements
//!      while that raises the round's total utility, so each type goes to the jobs that
//!      gain most from it (the online pass takes jobs in order and cannot see that).
//!    * settling ([`settle`]): with stickiness and a restart that costs anything, once the
//!      plan is made, a job moved to other GPUs of the types it ran on gets its own back
//!      (the job that took them takes others of its types), so no job restarts for nothing.
//!    * exact mode ([`exact`]): the whole round solved optimally by branch and bound (small
//!      instances), to measure the primal-dual's optimality gap.

pub mod dual;
pub mod exact;
pub mod guard;
pub mod overdue;
pub mod pace;
mod packing;
mod settle;
mod swap;
pub mod synthetic;
mod tail;

/// The default weight of the makespan-aware utility factor, listed with Hadar's other
/// defaults; defined with the utilities in [`crate::market`] (HadarE's default too).
pub use crate::market::DEFAULT_CRITICALITY;
/// Hadar's objective (a field of [`HadarConfig`]); defined with the utilities in
/// [`crate::market`].
pub use crate::market::Objective;
pub use packing::Packing;

use crate::job::{JobId, JobState};
pub use crate::market::RoundStats;
use crate::market::{JobUtility, PriceBook};
use crate::placement::{Placement, PlacementKind};
use crate::plan::{Assignment, RoundPlan, WaitReason, Waiting};
use crate::policy::{Policy, RoundInput};
use crate::throughput::ThroughputProfile;
use dual::{DualJob, DualOutcome, best_offer, gang_rate};
use guard::{GuardJob, Urgency};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The order in which the primal-dual pass considers jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobOrder {
    /// Arrival order, ties by id: the online algorithm of the paper.
    Arrival,
    /// Highest best utility per GPU first (the default since the makespan guard: with
    /// long jobs started by their latest start times, the rest go shortest first).
    #[default]
    UtilityPerGpu,
    /// Least remaining time (at the job's fastest type) first.
    ShortestRemaining,
    /// Critical jobs first, longest first: those whose remaining time at their best speed
    /// is at least [`CRITICAL_SHARE`] of the fluid horizon (all remaining work spread over
    /// all GPUs), which set the makespan unless they run now; then the rest by utility per
    /// GPU.
    CriticalFirst,
}

impl JobOrder {
    /// The CLI and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            JobOrder::Arrival => "arrival",
            JobOrder::UtilityPerGpu => "utility-per-gpu",
            JobOrder::ShortestRemaining => "shortest-remaining",
            JobOrder::CriticalFirst => "critical-first",
        }
    }
}

impl std::str::FromStr for JobOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "arrival" => Ok(JobOrder::Arrival),
            "utility-per-gpu" => Ok(JobOrder::UtilityPerGpu),
            "shortest-remaining" => Ok(JobOrder::ShortestRemaining),
            "critical-first" => Ok(JobOrder::CriticalFirst),
            other => Err(format!(
                "unknown job order `{other}`; known: arrival, utility-per-gpu, shortest-remaining, critical-first"
            )),
        }
    }
}

/// The default weight of the cluster-wide per-type price term (measured in docs/algorithms.md).
pub const DEFAULT_TYPE_PRESSURE: f64 = 0.0;

/// The default margin of the makespan guard, in rounds (measured in docs/results-gavel.md).
pub const DEFAULT_GUARD_MARGIN_ROUNDS: f64 = 1.0;

/// The default margin of the makespan guard as a share of its horizon (measured in
/// docs/results-gavel.md).
pub const DEFAULT_GUARD_MARGIN_SHARE: f64 = 0.05;

/// The default type tolerance of the makespan guard (measured in docs/results-gavel.md).
pub const DEFAULT_GUARD_TYPE_TOLERANCE: f64 = 0.0;

/// The default weight of the pace boost ([`pace`]; measured in docs/results-gavel.md).
pub const DEFAULT_PACE_WEIGHT: f64 = 3.0;

/// The default least share of the horizon a job's best time must be for the pace boost
/// (measured in docs/results-gavel.md).
pub const DEFAULT_PACE_MIN_SHARE: f64 = 0.3;

/// The default most jobs for the tail plan ([`tail`]; measured in docs/results-gavel.md).
pub const DEFAULT_TAIL_JOBS: usize = 5;

/// The largest `tail_jobs` allowed: the tail plan's configurations grow as (types + 1) to
/// this power.
pub const MAX_TAIL_JOBS: usize = 6;

/// Hadar's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HadarConfig {
    /// What the utility rewards.
    pub objective: Objective,
    /// The order jobs are considered in.
    pub order: JobOrder,
    /// The most nodes one job may span. `None`: no limit beyond its worker count, as in the
    /// paper's model. A job too large to fit on this many of the cluster's largest nodes
    /// may use the fewest nodes that can hold it, so the limit never makes a job unrunnable.
    pub max_nodes_per_job: Option<u32>,
    /// A gang spanning several nodes takes the same number of GPUs on each (one type per
    /// node; one type throughout when types may not mix), as one Slurm job's one per-node
    /// request gives it; on one node any mix. Off (the simulator's default): any split.
    pub uniform_gangs: bool,
    /// Give GPUs the primal-dual left idle to jobs it priced out.
    pub work_conservation: bool,
    /// Keep running jobs in place unless moving gains more than the restart costs.
    pub stickiness: bool,
    /// With stickiness, hold each running job's GPUs for it until its turn in the online
    /// pass, so that jobs considered earlier cannot displace it.
    pub reserve_running: bool,
    /// After admission, let admitted jobs of equal size exchange placements while that
    /// raises the round's total utility (capacity use is unchanged, so nobody is delayed).
    pub swap_improvement: bool,
    /// Let one job's workers span several GPU types (Hadar's task-level heterogeneity);
    /// off, every job runs on a single type.
    pub mixed_types: bool,
    /// Price each GPU type by what jobs gain on it (`U` and `L` per type) rather than one
    /// pair for all types as in the paper.
    pub per_type_prices: bool,
    /// Solve each round exactly by branch and bound (small instances only).
    pub exact: bool,
    /// Search nodes the exact mode may visit per round before it settles for the best
    /// plan found (the primal-dual plan when that is better).
    pub exact_search_limit: u64,
    /// Weight of the makespan-aware factor of the `avg-jct` utility (see
    /// [`JobUtility::set_criticality`]); 0 is plain shortest-remaining-time utility.
    pub criticality: f64,
    /// Weight of the cluster-wide per-type utilisation term of the prices (see
    /// [`PriceBook::with_type_pressure`]); 0 is the paper's per-(node, type) price.
    pub type_pressure: f64,
    /// Start each job by its latest start time for the fluid bound of the remaining work
    /// ([`guard`]): a job with less slack than `guard_margin_rounds` rounds runs this round,
    /// first and regardless of price, on types fast enough to end by the bound.
    pub makespan_guard: bool,
    /// The makespan guard's margin, in rounds.
    pub guard_margin_rounds: f64,
    /// The makespan guard acts only in rounds when jobs are not streaming in: when the
    /// arrivals within the last this many rounds span less than a round
    /// ([`guard::streaming`]). 0: every round.
    pub guard_quiet_rounds: f64,
    /// A further margin of the makespan guard, as a share of its horizon: a job is urgent
    /// once its slack is under `guard_margin_rounds` rounds plus this share of the fluid
    /// horizon of the remaining work.
    pub guard_margin_share: f64,
    /// With the makespan guard, the priced pass offers each job only the types whose cost
    /// per step at the fluid LP's shadow prices is within this share of its cheapest
    /// ([`guard::Fluid::efficient_types`]); work conservation may still use the others.
    /// Infinite: no such restriction.
    pub guard_type_tolerance: f64,
    /// How strongly the site's multifactor priority weighs against throughput: a job's
    /// weight in the utility is `exp(priority_strength × priority fraction)`
    /// ([`crate::site::priority`]); 0: priority is ignored. Read by the daemon (and the
    /// simulator for traces with accounts), which set each job's weight; the plan only sees
    /// the weights.
    pub priority_strength: f64,
    /// Gang packing ([`packing`]): when GPUs idle because every waiting gang is larger than
    /// what is free, smaller admitted jobs with slack yield this round so one fits.
    pub packing: Packing,
    /// With the makespan guard, the weight of the pace boost ([`pace::pace_factor`]): a
    /// started job behind an even pace from its first start to the guard's horizon has
    /// its makespan-aware utility factor scaled by `1 + pace_weight x lag x its share of
    /// the horizon`. 0 turns it off.
    pub pace_weight: f64,
    /// The least share of the guard's horizon a job's remaining best time must be for the
    /// pace boost.
    pub pace_min_share: f64,
    /// With the makespan guard, the tail plan ([`tail`]): when at most this many jobs can
    /// run and every one is urgent, a restart costs under half a round, and every job may
    /// put each worker on its own node, a configuration LP that packs whole gangs chooses
    /// who runs on which type. 0 turns it off; at most [`MAX_TAIL_JOBS`].
    pub tail_jobs: usize,
    /// Overdue gangs ([`overdue`]): a gang on multi-GPU nodes that jobs ranked after it keep
    /// overtaking is placed after the urgent jobs once it has waited this many times its
    /// remaining best time. 0 turns it off.
    pub overdue_factor: f64,
}

impl Default for HadarConfig {
    fn default() -> Self {
        HadarConfig {
            objective: Objective::AvgJct,
            order: JobOrder::default(),
            max_nodes_per_job: None,
            uniform_gangs: false,
            work_conservation: true,
            stickiness: true,
            reserve_running: true,
            swap_improvement: true,
            mixed_types: true,
            per_type_prices: false,
            exact: false,
            exact_search_limit: 2_000_000,
            criticality: DEFAULT_CRITICALITY,
            type_pressure: DEFAULT_TYPE_PRESSURE,
            makespan_guard: true,
            guard_margin_rounds: DEFAULT_GUARD_MARGIN_ROUNDS,
            guard_quiet_rounds: 0.0,
            guard_margin_share: DEFAULT_GUARD_MARGIN_SHARE,
            guard_type_tolerance: DEFAULT_GUARD_TYPE_TOLERANCE,
            priority_strength: 1.0,
            packing: Packing::default(),
            pace_weight: DEFAULT_PACE_WEIGHT,
            pace_min_share: DEFAULT_PACE_MIN_SHARE,
            tail_jobs: DEFAULT_TAIL_JOBS,
            overdue_factor: overdue::DEFAULT_OVERDUE_FACTOR,
        }
    }
}

/// The Hadar policy.
#[derive(Clone, Debug, Default)]
pub struct HadarPolicy {
    config: HadarConfig,
    last: RoundStats,
}

impl HadarPolicy {
    /// A Hadar policy with these settings.
    pub fn new(config: HadarConfig) -> Self {
        HadarPolicy {
            config,
            last: RoundStats::default(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &HadarConfig {
        &self.config
    }

    /// Figures from the most recent round.
    pub fn last_round(&self) -> &RoundStats {
        &self.last
    }
}

impl Policy for HadarPolicy {
    fn name(&self) -> &str {
        "hadar"
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let (plan, stats) = plan_round(&self.config, input);
        self.last = stats;
        plan
    }

    fn last_round_stats(&self) -> Option<RoundStats> {
        Some(self.last.clone())
    }
}

/// A job prepared for the round: its rates on the cluster's types and its utility.
struct Prepared<'a> {
    index: usize,
    workers: u32,
    rates: Vec<f64>,
    /// Its throughput, where its rates depend on the nodes a gang spans.
    spread: Option<&'a ThroughputProfile>,
    utility: JobUtility,
    previous: Option<&'a Placement>,
    max_nodes: u32,
    /// The most nodes of each type it may span ([`node_limit`]).
    max_nodes_by_type: Vec<u32>,
    uniform: bool,
    mixed_types: bool,
    urgency: Urgency,
    /// `rates` with the types the guard finds inefficient for this job set to 0, for the
    /// priced pass (`None`: no restriction).
    priced_rates: Option<Vec<f64>>,
    /// Its place in the round's order before urgent and overdue jobs move ahead.
    rank: usize,
    /// Whether it has waited long while jobs ranked after it ran ([`overdue`]).
    long_waiting: bool,
}

impl Prepared<'_> {
    /// Seconds of work left at the fastest type of the GPUs it holds (at its best rate when
    /// it holds none, or none it runs on).
    fn remaining_where_held_s(&self) -> f64 {
        let held = self.previous.map_or(0.0, |q| {
            q.parts()
                .iter()
                .map(|part| self.rates[part.gpu_type.index()])
                .fold(0.0, f64::max)
        });
        if held > 0.0 {
            self.utility.remaining_at_s(held)
        } else {
            self.utility.remaining_best_s()
        }
    }
}

/// The most nodes a job of `workers` workers may span on a type whose largest node holds
/// `largest` GPUs of it: the configured limit, or where the job does not fit on that many of
/// them, the fewest nodes of the type that hold it (so the limit never keeps a job off a
/// type of smaller nodes, nor makes it unrunnable); no more nodes than workers.
fn node_limit(limit: Option<u32>, workers: u32, largest: u32) -> u32 {
    let needed = workers.div_ceil(largest.max(1));
    limit.map_or(workers, |m| m.max(needed)).min(workers).max(1)
}

fn prepare<'a>(config: &HadarConfig, input: &RoundInput<'a>) -> (Vec<Prepared<'a>>, Vec<Waiting>) {
    let cluster = input.cluster;
    let present: Vec<bool> = cluster
        .types()
        .map(|t| cluster.total_of_type(t) > 0)
        .collect();
    let largest_by_type: Vec<u32> = cluster.types().map(|t| cluster.max_per_node(t)).collect();
    let mut ready = Vec::with_capacity(input.jobs.len());
    let mut waiting = Vec::new();
    for (index, js) in input.jobs.iter().enumerate() {
        let workers = js.job.workers;
        let rates: Vec<f64> = cluster
            .types()
            .map(|t| {
                if present[t.index()] {
                    js.job.throughput.rate_or_zero(t, workers)
                } else {
                    0.0
                }
            })
            .collect();
        let best_rate = rates.iter().copied().fold(0.0, f64::max);
        if workers == 0 || best_rate <= 0.0 {
            waiting.push(Waiting {
                job: js.id(),
                reason: WaitReason::CannotRunAnywhere,
            });
            continue;
        }
        let previous = if config.stickiness {
            js.placement
                .as_ref()
                .filter(|p| p.kind() == PlacementKind::Gang)
        } else {
            None
        };
        let utility = JobUtility::new(
            config.objective,
            js,
            best_rate,
            input.now_s,
            input.round_s,
            input.restart_of(js),
            config.stickiness,
        );
        let max_nodes_by_type: Vec<u32> = largest_by_type
            .iter()
            .map(|&largest| node_limit(config.max_nodes_per_job, workers, largest))
            .collect();
        let max_nodes = max_nodes_by_type.iter().copied().max().unwrap_or(1);
        ready.push(Prepared {
            index,
            workers,
            rates,
            spread: js.job.throughput.has_spread().then_some(&js.job.throughput),
            utility,
            previous,
            max_nodes,
            max_nodes_by_type,
            uniform: config.uniform_gangs,
            mixed_types: config.mixed_types,
            urgency: Urgency::Slack,
            priced_rates: None,
            rank: 0,
            long_waiting: false,
        });
    }
    let horizon = criticality_horizon(input);
    for p in &mut ready {
        p.utility.set_criticality(horizon, config.criticality);
    }
    (ready, waiting)
}

/// Marks the jobs the makespan guard finds urgent and restricts each job's priced pass to
/// its efficient types; returns the guard's horizon.
fn apply_guard(config: &HadarConfig, input: &RoundInput<'_>, ready: &mut [Prepared<'_>]) -> f64 {
    let cluster = input.cluster;
    let capacity = cluster.gpus_by_type();
    let jobs: Vec<GuardJob<'_>> = ready
        .iter()
        .map(|p| GuardJob {
            workers: p.workers,
            remaining_steps: input.jobs[p.index].remaining_steps,
            rates: &p.rates,
        })
        .collect();
    let margin_s = config.guard_margin_rounds.max(0.0) * input.round_s;
    let g = guard::assess(
        &capacity,
        &jobs,
        margin_s,
        config.guard_margin_share,
        config.guard_type_tolerance,
    );
    for ((p, u), ok) in ready.iter_mut().zip(g.urgency).zip(g.efficient) {
        p.urgency = u;
        let js = &input.jobs[p.index];
        p.utility.scale_criticality(pace::pace_factor(
            config.pace_weight,
            config.pace_min_share,
            js.first_start_s.map(|t| input.now_s - t),
            js.remaining_steps,
            js.job.total_steps,
            p.utility.remaining_best_s(),
            g.horizon_s,
        ));
        if ok.iter().zip(&p.rates).any(|(ok, r)| !ok && *r > 0.0) {
            p.priced_rates = Some(
                p.rates
                    .iter()
                    .zip(&ok)
                    .map(|(r, ok)| if *ok { *r } else { 0.0 })
                    .collect(),
            );
        }
    }
    g.horizon_s
}

fn order_jobs(config: &HadarConfig, input: &RoundInput<'_>, ready: &mut [Prepared<'_>]) {
    match config.order {
        JobOrder::Arrival => {
            ready.sort_by(|a, b| {
                input.jobs[a.index]
                    .job
                    .arrival_order(&input.jobs[b.index].job)
            });
        }
        JobOrder::UtilityPerGpu => {
            ready.sort_by(|a, b| {
                let da = a.utility.best() / a.workers as f64;
                let db = b.utility.best() / b.workers as f64;
                db.total_cmp(&da)
                    .then(input.jobs[a.index].id().cmp(&input.jobs[b.index].id()))
            });
        }
        JobOrder::ShortestRemaining => {
            let remaining = |p: &Prepared<'_>| {
                let best = p.rates.iter().copied().fold(0.0, f64::max);
                input.jobs[p.index].remaining_steps / best
            };
            ready.sort_by(|a, b| {
                remaining(a)
                    .total_cmp(&remaining(b))
                    .then(input.jobs[a.index].id().cmp(&input.jobs[b.index].id()))
            });
        }
        JobOrder::CriticalFirst => {
            // The fluid horizon: the time all remaining work would take spread over every
            // GPU at each job's best speed. A job whose own remaining time is a large share
            // of it will set the makespan unless it runs now.
            let total_gpus = input.cluster.total_gpus().max(1) as f64;
            let best_time = |p: &Prepared<'_>| {
                let best = p.rates.iter().copied().fold(0.0, f64::max);
                input.jobs[p.index].remaining_steps / best
            };
            let horizon: f64 = ready
                .iter()
                .map(|p| best_time(p) * p.workers as f64)
                .sum::<f64>()
                / total_gpus;
            let threshold = CRITICAL_SHARE * horizon;
            ready.sort_by(|a, b| {
                let (ta, tb) = (best_time(a), best_time(b));
                let (ca, cb) = (ta >= threshold, tb >= threshold);
                let da = a.utility.best() / a.workers as f64;
                let db = b.utility.best() / b.workers as f64;
                cb.cmp(&ca)
                    .then_with(|| {
                        if ca && cb {
                            tb.total_cmp(&ta)
                        } else {
                            db.total_cmp(&da)
                        }
                    })
                    .then(input.jobs[a.index].id().cmp(&input.jobs[b.index].id()))
            });
        }
    }
}

/// The share of the fluid horizon from which a job counts as critical
/// ([`JobOrder::CriticalFirst`]).
pub const CRITICAL_SHARE: f64 = 0.5;

/// Plans one round with the given settings, returning the plan and its figures.
pub fn plan_round(config: &HadarConfig, input: &RoundInput<'_>) -> (RoundPlan, RoundStats) {
    let (mut ready, mut waiting) = prepare(config, input);
    let position: HashMap<JobId, usize> = input
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.id(), i))
        .collect();
    let pos = |id: JobId| position.get(&id).copied().unwrap_or(usize::MAX);
    let mut stats = RoundStats::default();
    let Ok(bounds) =
        PriceBook::bounds_from_utilities(ready.iter().map(|p| p.utility.best() / p.workers as f64))
    else {
        waiting.sort_by_key(|w| pos(w.job));
        return (
            RoundPlan {
                assignments: Vec::new(),
                waiting,
            },
            stats,
        );
    };
    stats.price_bounds = Some(bounds);
    let types = input.cluster.type_count();
    stats.type_price_bounds = if config.per_type_prices {
        let samples = ready.iter().flat_map(|p| {
            p.rates
                .iter()
                .enumerate()
                .filter(|(_, r)| **r > 0.0)
                .map(|(t, r)| (t, p.utility.at(*r, false) / p.workers as f64))
        });
        PriceBook::bounds_by_type(types, samples, bounds)
    } else {
        vec![bounds; types]
    };
    // Ordered before the guard scales utilities by the pace boost: the boost raises what a
    // started long job earns in the priced pass without moving it ahead of shorter jobs
    // (ordering after it was measured worse on both aims: docs/results-gavel.md).
    order_jobs(config, input, &mut ready);
    if !config.exact {
        let window_s = config.guard_quiet_rounds.max(0.0) * input.round_s;
        let arrivals = input.jobs.iter().map(|j| j.job.arrival_s);
        if config.makespan_guard
            && !guard::streaming(arrivals, input.now_s, window_s, input.round_s)
        {
            stats.horizon_s = Some(apply_guard(config, input, &mut ready));
        }
        // Ranked in the order just made, before urgent and overdue jobs move ahead.
        overdue::mark(config.overdue_factor, input, &mut ready);
        ready.sort_by(|a, b| {
            let (ka, sa) = a.urgency.place_key();
            let (kb, sb) = b.urgency.place_key();
            ka.cmp(&kb).then(sa.total_cmp(&sb))
        });
        let urgent = |p: &&Prepared<'_>| matches!(p.urgency, Urgency::Urgent { .. });
        stats.urgent = ready.iter().filter(urgent).count();
        stats.overdue = ready.iter().filter(|p| p.urgency.is_urgent()).count() - stats.urgent;
    }
    let book = PriceBook::new(input.cluster, &stats.type_price_bounds)
        .with_type_pressure(config.type_pressure);
    let mut work = RoundWork {
        book,
        assignments: Vec::new(),
        waiting,
        stats,
    };
    if config.exact {
        if let Some(better) = exact_pass(config, input, &ready, &mut work) {
            return better;
        }
    } else if !tail_pass(config, input, &ready, &mut work) {
        primal_dual_pass(config, input, &ready, &mut work);
    }
    let RoundWork {
        mut assignments,
        mut waiting,
        mut stats,
        ..
    } = work;
    settle_pass(config, input, &ready, &pos, &mut assignments, &mut stats);
    assignments.sort_by_key(|a| pos(a.job));
    waiting.sort_by_key(|w| pos(w.job));
    (
        RoundPlan {
            assignments,
            waiting,
        },
        stats,
    )
}

/// Settling ([`settle`]): with stickiness and where a restart costs anything, a job the
/// plan moves to other GPUs of the types it ran on gets its own GPUs back, and jobs that
/// move anyway take others of theirs. Where a restart is free there is nothing to save.
/// The jobs kept in place earn their utility without the restart.
fn settle_pass(
    config: &HadarConfig,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    pos: &impl Fn(JobId) -> usize,
    assignments: &mut [Assignment],
    stats: &mut RoundStats,
) {
    if !config.stickiness || input.max_restart_s() <= 0.0 {
        return;
    }
    let previous: Vec<Option<&Placement>> = assignments
        .iter()
        .map(|a| {
            input
                .jobs
                .get(pos(a.job))
                .and_then(|js| js.placement.as_ref())
        })
        .collect();
    let restored = settle::settle(input.cluster, assignments, &previous);
    if restored.is_empty() {
        return;
    }
    let prepared: HashMap<usize, &Prepared<'_>> = ready.iter().map(|p| (p.index, p)).collect();
    for i in restored {
        let a = &assignments[i];
        if let Some(p) = prepared.get(&pos(a.job)) {
            stats.kept += 1;
            stats.objective += p.utility.at(a.rate, false) - p.utility.at(a.rate, true);
        }
    }
}

/// The tail plan ([`tail`]): it applies with the guard, to at most `tail_jobs` jobs, all
/// urgent, where a restart costs under half a round (as gang packing) and every job may put
/// each worker on its own node (its configurations count GPUs per type, which a node limit
/// would make too many). Then it places the configuration it chooses, each
/// job on its type at the prices (a running job keeps its GPUs where they are of that
/// type), and with work conservation offers the GPUs left to the other jobs; they wait
/// otherwise. Returns whether it planned the round.
fn tail_pass(
    config: &HadarConfig,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    work: &mut RoundWork,
) -> bool {
    let applies = config.makespan_guard
        && !ready.is_empty()
        && ready.len() <= config.tail_jobs.min(MAX_TAIL_JOBS)
        && input.max_restart_s() * 2.0 < input.round_s
        && ready
            .iter()
            .all(|p| p.urgency.is_urgent() && p.max_nodes >= p.workers);
    if !applies {
        return false;
    }
    let cluster = input.cluster;
    let capacity = cluster.gpus_by_type();
    let jobs: Vec<tail::TailJob<'_>> = ready
        .iter()
        .map(|p| tail::TailJob {
            workers: p.workers,
            rates: &p.rates,
            remaining_steps: input.jobs[p.index].remaining_steps,
        })
        .collect();
    let Some(chosen) = tail::choose(&capacity, &jobs) else {
        return false;
    };
    let (book, assignments, waiting, stats) = work.parts();
    stats.tail = true;
    let mut placed = vec![false; ready.len()];
    for (k, t) in chosen {
        let p = &ready[k];
        let on_type: Vec<f64> = (0..p.rates.len())
            .map(|u| if u == t { p.rates[u] } else { 0.0 })
            .collect();
        let restricted = DualJob {
            rates: &on_type,
            ..dual_job(p)
        };
        if let DualOutcome::Offer(o) = best_offer(book, &restricted) {
            placed[k] = true;
            stats.admitted += 1;
            admit(book, assignments, stats, p, &input.jobs[p.index], o);
        }
    }
    for p in ready
        .iter()
        .zip(&placed)
        .filter(|(_, placed)| !**placed)
        .map(|(p, _)| p)
    {
        let js = &input.jobs[p.index];
        if config.work_conservation
            && let DualOutcome::Offer(o) = best_offer(book, &dual_job(p))
        {
            stats.filled += 1;
            admit(book, assignments, stats, p, js, o);
        } else {
            waiting.push(Waiting {
                job: js.id(),
                reason: WaitReason::TimeShare,
            });
        }
    }
    true
}

/// The round being built: the prices so far, the jobs placed and those waiting, and the
/// round's statistics.
struct RoundWork {
    book: PriceBook,
    assignments: Vec<Assignment>,
    waiting: Vec<Waiting>,
    stats: RoundStats,
}

impl RoundWork {
    /// Each part on its own, for passes that use them side by side.
    fn parts(
        &mut self,
    ) -> (
        &mut PriceBook,
        &mut Vec<Assignment>,
        &mut Vec<Waiting>,
        &mut RoundStats,
    ) {
        (
            &mut self.book,
            &mut self.assignments,
            &mut self.waiting,
            &mut self.stats,
        )
    }
}

/// The exact round (`--exact`): places the jobs by branch and bound, or returns the greedy
/// round's plan instead when the search was cut short and the greedy round scores higher.
fn exact_pass(
    config: &HadarConfig,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    work: &mut RoundWork,
) -> Option<(RoundPlan, RoundStats)> {
    let (book, assignments, waiting, stats) = work.parts();
    let exact_jobs: Vec<exact::ExactJob<'_>> = ready.iter().map(dual_job).collect();
    let solution = exact::solve(input.cluster, &exact_jobs, config.exact_search_limit);
    stats.exact_proven = Some(solution.proven);
    if !solution.proven {
        let greedy = plan_round(
            &HadarConfig {
                exact: false,
                ..config.clone()
            },
            input,
        );
        if greedy.1.objective > solution.objective {
            let (plan, mut s) = greedy;
            s.exact_proven = Some(false);
            return Some((plan, s));
        }
    }
    for (p, placement) in ready.iter().zip(solution.placements) {
        let js = &input.jobs[p.index];
        match placement {
            Some(placement) => {
                let price = book.placement_cost(&placement).unwrap_or(f64::NAN);
                book.charge(&placement);
                let rate = gang_rate(&p.rates, p.workers, &placement);
                let moved = p.previous.is_some_and(|q| *q != placement);
                if p.previous.is_some() && !moved {
                    stats.kept += 1;
                }
                let utility = p.utility.at(rate, moved);
                stats.admitted += 1;
                stats.objective += utility;
                assignments.push(Assignment {
                    job: js.id(),
                    placement,
                    rate,
                    payoff: Some(utility - price),
                });
            }
            None => waiting.push(Waiting {
                job: js.id(),
                reason: reason_when_left_out(book, p),
            }),
        }
    }
    None
}

/// The online pass over the ordered jobs (urgent ones first), then work conservation and
/// swaps: the primal-dual proper.
fn primal_dual_pass(
    config: &HadarConfig,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    work: &mut RoundWork,
) {
    let (mut owners, priced_out) = online_pass(config, input, ready, work);
    fill_and_improve(config, input, ready, work, &mut owners, &priced_out);
}

/// The online pass: each job in order takes its best offer if it pays (an urgent job the
/// offer it may take from yielding jobs). Returns, per assignment, the prepared job it is
/// of, and the jobs left out.
fn online_pass(
    config: &HadarConfig,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    work: &mut RoundWork,
) -> (Vec<usize>, Vec<usize>) {
    let (book, assignments, waiting, stats) = work.parts();
    let mut priced_out: Vec<usize> = Vec::new();
    // owners[i]: the prepared job of assignments[i].
    let mut owners: Vec<usize> = Vec::new();
    let mut reserved = hold_for_running_jobs(config, ready, book);
    let yielders = if ready.iter().any(|p| p.urgency.is_urgent()) {
        yield_order(ready, &reserved)
    } else {
        Vec::new()
    };
    // Once a round, not per urgent job: it walks every job.
    let max_restart_s = input.max_restart_s();
    for (k, p) in ready.iter().enumerate() {
        let js = &input.jobs[p.index];
        if reserved[k]
            && let Some(prev) = p.previous
        {
            book.release(prev);
            reserved[k] = false;
        }
        if p.urgency.is_urgent()
            && let Some(o) = urgent_offer(
                book,
                ready,
                &mut reserved,
                &yielders,
                p,
                max_restart_s,
                input.round_s,
            )
        {
            stats.admitted += 1;
            owners.push(k);
            admit(book, assignments, stats, p, js, o);
            continue;
        }
        let priced = DualJob {
            rates: p.priced_rates.as_deref().unwrap_or(&p.rates),
            ..dual_job(p)
        };
        match best_offer(book, &priced) {
            DualOutcome::Offer(o) if o.payoff() > 0.0 => {
                stats.admitted += 1;
                owners.push(k);
                admit(book, assignments, stats, p, js, o);
            }
            DualOutcome::Offer(o) => {
                priced_out.push(k);
                waiting.push(Waiting {
                    job: js.id(),
                    reason: WaitReason::PriceAboveUtility {
                        utility: o.utility,
                        price: o.price,
                    },
                });
            }
            DualOutcome::NoPlacement(reason) => {
                // GPUs held for running jobs considered later may be freed after this
                // job's turn (a running job priced out does not take them back), so
                // work conservation tries it again.
                priced_out.push(k);
                waiting.push(Waiting {
                    job: js.id(),
                    reason,
                });
            }
        }
    }
    (owners, priced_out)
}

/// After the online pass: work conservation and packing fill what it left free, and swaps
/// improve what it admitted.
fn fill_and_improve(
    config: &HadarConfig,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    work: &mut RoundWork,
    owners: &mut Vec<usize>,
    priced_out: &[usize],
) {
    let (book, assignments, waiting, stats) = work.parts();
    if config.work_conservation {
        let plan = packing::Admitted {
            assignments,
            owners,
            waiting,
        };
        conserve_work(input, ready, book, plan, stats, priced_out);
    }
    let plan = packing::Admitted {
        assignments,
        owners,
        waiting,
    };
    let packed = packing::pack(
        config.packing,
        input,
        ready,
        book,
        plan,
        |book, assignments, k, o| {
            stats.filled += 1;
            let p = &ready[k];
            admit(book, assignments, stats, p, &input.jobs[p.index], o);
        },
    );
    if config.swap_improvement {
        swap::improve(ready, assignments, owners);
    }
    // Swaps change rates, and packing removes yielding jobs: count the round again.
    if config.swap_improvement || packed > 0 {
        recount(ready, assignments, owners, stats);
    }
}

/// With reservations, every running job's old GPUs are held for it until its turn, so
/// that jobs placed before it do not take them and force it to restart; returns which
/// prepared jobs hold theirs.
fn hold_for_running_jobs(
    config: &HadarConfig,
    ready: &[Prepared<'_>],
    book: &mut PriceBook,
) -> Vec<bool> {
    let mut reserved = vec![false; ready.len()];
    if config.stickiness && config.reserve_running {
        for (k, p) in ready.iter().enumerate() {
            if let Some(prev) = p.previous
                && book.fits(prev)
            {
                book.charge(prev);
                reserved[k] = true;
            }
        }
    }
    reserved
}

/// Work conservation: the jobs the priced pass left out (`priced_out`, in its order) take
/// whatever still fits, prices aside, and leave the waiting list.
fn conserve_work(
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    book: &mut PriceBook,
    plan: packing::Admitted<'_>,
    stats: &mut RoundStats,
    priced_out: &[usize],
) {
    let mut filled: std::collections::HashSet<JobId> = std::collections::HashSet::new();
    for &k in priced_out {
        let p = &ready[k];
        let js = &input.jobs[p.index];
        if let DualOutcome::Offer(o) = best_offer(book, &dual_job(p)) {
            stats.filled += 1;
            filled.insert(js.id());
            plan.owners.push(k);
            admit(book, plan.assignments, stats, p, js, o);
        }
    }
    if !filled.is_empty() {
        plan.waiting.retain(|w| !filled.contains(&w.job));
    }
}

/// The round's objective and kept count from its final assignments (`owners[i]`: the
/// prepared job of `assignments[i]`).
fn recount(
    ready: &[Prepared<'_>],
    assignments: &[Assignment],
    owners: &[usize],
    stats: &mut RoundStats,
) {
    stats.objective = 0.0;
    stats.kept = 0;
    for (a, &k) in assignments.iter().zip(owners) {
        let p = &ready[k];
        let kept = p.previous.is_some_and(|q| *q == a.placement);
        stats.kept += usize::from(kept);
        stats.objective += p.utility.at(a.rate, p.previous.is_some() && !kept);
    }
}

/// Running jobs with slack whose reserved GPUs urgent jobs may take, longest time left on
/// the GPUs they hold first: a round's wait is the smallest share of their time, and the
/// jobs closest to finishing where they run, which matter most to the average JCT, keep
/// their GPUs. The time is at the fastest type a job holds (the GPUs it would give up), not
/// at its best type anywhere: a job held on P100s whose best type is a V100 it does not
/// have is as far from finishing as the P100s make it.
fn yield_order(ready: &[Prepared<'_>], reserved: &[bool]) -> Vec<usize> {
    let mut v: Vec<(f64, usize)> = (0..ready.len())
        .filter(|&k| reserved[k] && !ready[k].urgency.is_urgent())
        .map(|k| (ready[k].remaining_where_held_s(), k))
        .collect();
    v.sort_by(|a, b| b.0.total_cmp(&a.0));
    v.into_iter().map(|(_, k)| k).collect()
}

/// An urgent job's placement, whatever its price: on types at least `min_rate` fast (its
/// deadline rate), taking GPUs held for running jobs with slack, one job at a time in
/// `yielders` order, until it fits (a job with slack can wait a round, this one cannot).
/// Failing that, where jobs may be preempted, on the fastest types it can get: each slower
/// rate it has in turn, the types at least that fast, again making room. So a job that
/// cannot reach its deadline rate still runs as fast as the cluster allows, and a slack job
/// makes room for it before it falls to a type far slower than its own. The slowest level
/// is anywhere it runs, at the prices, since any progress shortens its lateness. `None`
/// when it fits nowhere. Running jobs yield only when their restart costs less than the urgent job
/// would lose by waiting a round (`round_s - slack_s`): where a restart costs a whole round,
/// as on a real cluster's short rounds, nobody is preempted for it, and it takes the
/// deadline types if free or else the best free placement at the prices, which weighs
/// staying where it runs against a restart.
fn urgent_offer(
    book: &mut PriceBook,
    ready: &[Prepared<'_>],
    reserved: &mut [bool],
    yielders: &[usize],
    p: &Prepared<'_>,
    max_restart_s: f64,
    round_s: f64,
) -> Option<dual::Offer> {
    // An overdue job has no deadline: it tries its fastest types first, and takes GPUs only
    // from the jobs that overtook it.
    let (min_rate, slack_s, yielders) = match p.urgency {
        Urgency::Urgent { min_rate, slack_s } => {
            (min_rate, slack_s, std::borrow::Cow::Borrowed(yielders))
        }
        Urgency::Overdue { .. } => {
            let best = p.rates.iter().copied().fold(0.0, f64::max);
            let overtook = |&&k: &&usize| overdue::may_yield_to(p, &ready[k]);
            (
                best,
                0.0,
                std::borrow::Cow::Owned(yielders.iter().filter(overtook).copied().collect()),
            )
        }
        Urgency::Slack => return None,
    };
    let may_preempt = max_restart_s < round_s - slack_s;
    let mut levels = rate_levels(&p.rates, min_rate);
    if !may_preempt && levels.len() > 2 {
        // Without room to make, only the deadline types and then anywhere (the last level).
        levels.drain(1..levels.len() - 1);
    }
    let yielders: &[usize] = if may_preempt { &yielders } else { &[] };
    levels.into_iter().find_map(|level| {
        let fast: Vec<f64> = p
            .rates
            .iter()
            .map(|&r| if r >= level { r } else { 0.0 })
            .collect();
        offer_making_room(book, ready, reserved, yielders, p, &fast)
    })
}

/// The rates an urgent job tries, fastest first: `min_rate` (its deadline rate), then each
/// of its rates below it. The last level admits every type it runs on: at the prices, that
/// is anywhere it runs.
fn rate_levels(rates: &[f64], min_rate: f64) -> Vec<f64> {
    let mut slower: Vec<f64> = rates
        .iter()
        .copied()
        .filter(|&r| r > 0.0 && r < min_rate)
        .collect();
    slower.sort_by(|a, b| b.total_cmp(a));
    slower.dedup();
    std::iter::once(min_rate).chain(slower).collect()
}

/// `p`'s best placement on the types with a rate in `fast` (0 elsewhere): in free GPUs, or
/// else in GPUs that `yielders` (in order) give up, released one job at a time until it
/// fits. Jobs released for a level where it still does not fit stay released: their GPUs
/// are free for the slower levels and for the jobs after it.
fn offer_making_room(
    book: &mut PriceBook,
    ready: &[Prepared<'_>],
    reserved: &mut [bool],
    yielders: &[usize],
    p: &Prepared<'_>,
    fast: &[f64],
) -> Option<dual::Offer> {
    let restricted = DualJob {
        rates: fast,
        ..dual_job(p)
    };
    if let DualOutcome::Offer(o) = best_offer(book, &restricted) {
        return Some(o);
    }
    let free_fast = |book: &PriceBook| -> u32 {
        (0..fast.len())
            .filter(|&t| fast[t] > 0.0)
            .map(|t| book.free_of_type(t))
            .sum()
    };
    for &k in yielders {
        let Some(prev) = ready[k].previous.filter(|_| reserved[k]) else {
            continue;
        };
        if !prev.types().iter().any(|t| fast[t.index()] > 0.0) {
            continue;
        }
        book.release(prev);
        reserved[k] = false;
        if free_fast(book) >= p.workers
            && let DualOutcome::Offer(o) = best_offer(book, &restricted)
        {
            return Some(o);
        }
    }
    None
}

fn dual_job<'a>(p: &'a Prepared<'a>) -> DualJob<'a> {
    DualJob {
        workers: p.workers,
        rates: &p.rates,
        spread: p.spread,
        utility: &p.utility,
        previous: p.previous,
        max_nodes: p.max_nodes,
        max_nodes_by_type: &p.max_nodes_by_type,
        uniform: p.uniform,
        mixed_types: p.mixed_types,
    }
}

fn admit(
    book: &mut PriceBook,
    assignments: &mut Vec<Assignment>,
    stats: &mut RoundStats,
    p: &Prepared<'_>,
    js: &JobState,
    offer: dual::Offer,
) {
    if p.previous.is_some_and(|q| *q == offer.placement) {
        stats.kept += 1;
    }
    book.charge(&offer.placement);
    stats.objective += offer.utility;
    let payoff = offer.payoff();
    assignments.push(Assignment {
        job: js.id(),
        placement: offer.placement,
        rate: offer.rate,
        payoff: Some(payoff),
    });
}

/// Why a job the exact search left out waits: priced out if it has a placement in what is
/// left, otherwise why not.
fn reason_when_left_out(book: &PriceBook, p: &Prepared<'_>) -> WaitReason {
    match best_offer(book, &dual_job(p)) {
        DualOutcome::Offer(o) => WaitReason::PriceAboveUtility {
            utility: o.utility,
            price: o.price,
        },
        DualOutcome::NoPlacement(r) => r,
    }
}

/// The horizon of the makespan-aware utility factor: the largest remaining time, at its
/// fastest rate on a type the cluster has, of any job that can run this round.
fn criticality_horizon(input: &RoundInput<'_>) -> f64 {
    let cluster = input.cluster;
    // Once, not per job: counting a type's GPUs walks every node.
    let present: Vec<_> = cluster
        .types()
        .filter(|&t| cluster.total_of_type(t) > 0)
        .collect();
    let mut horizon = 0.0_f64;
    for js in input.jobs {
        let workers = js.job.workers;
        let best = present
            .iter()
            .map(|&t| js.job.throughput.rate_or_zero(t, workers))
            .fold(0.0, f64::max);
        if workers > 0 && best > 0.0 {
            horizon = horizon.max(js.remaining_steps.max(0.0) / best.max(1e-12));
        }
    }
    horizon
}

/// The round's objective, by which the primal-dual and the exact mode are compared: the
/// total utility of the placed jobs, each at its placement's rate (restart-discounted for a
/// running job that moves, when stickiness is on). Assignments of unknown jobs count zero.
pub fn round_objective(config: &HadarConfig, input: &RoundInput<'_>, plan: &RoundPlan) -> f64 {
    let by_id: HashMap<JobId, &JobState> = input.jobs.iter().map(|j| (j.id(), j)).collect();
    let horizon = criticality_horizon(input);
    let mut total = 0.0;
    for a in &plan.assignments {
        let Some(js) = by_id.get(&a.job) else {
            continue;
        };
        let rates: Vec<f64> = input
            .cluster
            .types()
            .map(|t| js.job.throughput.rate_or_zero(t, js.job.workers))
            .collect();
        // As in `prepare`: the best rate on a type the cluster has.
        let best_rate = input
            .cluster
            .types()
            .filter(|&t| input.cluster.total_of_type(t) > 0)
            .map(|t| rates[t.index()])
            .fold(0.0, f64::max);
        let mut u = JobUtility::new(
            config.objective,
            js,
            best_rate,
            input.now_s,
            input.round_s,
            input.restart_of(js),
            config.stickiness,
        );
        u.set_criticality(horizon, config.criticality);
        let moved = js.placement.as_ref().is_some_and(|p| *p != a.placement);
        total += u.at(gang_rate(&rates, js.job.workers, &a.placement), moved);
    }
    total
}

#[cfg(test)]
mod tests;
