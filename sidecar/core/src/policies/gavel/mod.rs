//! Gavel (Narayanan et al., OSDI 2020) as its simulator runs it: an LP allocation of time
//! fractions per GPU type, turned into rounds by a priority mechanism.
//!
//! Two objectives are provided, as the policies `gavel` (Gavel's `max_min_fairness_perf`)
//! and `gavel-makespan` (`min_total_duration_perf`); see [`allocation`]. The round
//! mechanism reproduces Gavel's simulator (`scheduler/scheduler.py` at commit c4fa400):
//!
//! * **Allocation resets.** The LP is re-solved only when a job arrived or finished since
//!   the last solve *and* at least 1,920 s passed since the last reset (or no reset has
//!   happened at a time after zero yet). At a reset each job's deficit on each type grows by
//!   `allocation x elapsed - time received`, and the time-received counters restart. Jobs
//!   that arrive between resets are not in the allocation: they get priority 0 and are
//!   never given GPUs until the next reset (though, as in Gavel, they may be picked in the
//!   first pass and hold GPUs of that type back for the round).
//! * **Priorities.** Per type, `allocation / (job's time on the type / all jobs' time on it)`
//!   since the last reset, where every job's counter starts at half a round so that the
//!   ratio is defined; 0 when the allocation or the throughput there is 0.
//! * **Selection.** For each type in Gavel's fixed order (v100, p100, k80, then any other
//!   type in declaration order) the jobs are sorted by (priority, deficit, allocation),
//!   highest first, ties in arrival order; the per-type lists are concatenated and walked
//!   once: a job takes all its GPUs from one type if enough are left there, at most once per
//!   round.
//! * **Placement.** Per type, larger jobs first; a job that ran on this type last round keeps
//!   its GPUs when none of them is taken yet; the others take free GPUs node by node.
//! * **Accounting.** After a round, each job that ran adds its run time (once, not per GPU)
//!   to its counter on the type it used and to the type's total.
//!
//! Not copied from Gavel: the multi-GPU job with fewer steps left than GPUs that "fails"
//! and is dropped (our engine runs it to completion), and the type shuffling and FIFO
//! leftovers of other Gavel policies. One deliberate difference: when a round would run
//! nothing although jobs are waiting only for an allocation, the allocation is recomputed at
//! once (Gavel does this only once no more arrivals are queued, otherwise it idles until the
//! next arrival).

pub mod allocation;

use crate::cluster::{Cluster, GpuType, NodeId};
use crate::job::{JobId, JobState};
use crate::placement::{Part, Placement};
use crate::plan::{Assignment, RoundPlan, WaitReason, Waiting};
use crate::policy::{Policy, RoundInput};
use allocation::AllocationProblem;
use std::collections::{HashMap, HashSet};

/// Gavel's default minimum time between allocation resets, in seconds.
pub const DEFAULT_MIN_RESET_INTERVAL_S: f64 = 1920.0;

/// Gavel's fixed order of GPU types when filling a round (heterogeneity-aware policies do
/// not shuffle it).
const GAVEL_TYPE_ORDER: [&str; 3] = ["v100", "p100", "k80"];

/// Which of Gavel's LP objectives drives the allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GavelObjective {
    /// `max_min_fairness_perf`: heterogeneity-aware least attained service.
    MaxMinFairness,
    /// `min_total_duration_perf`: the smallest makespan horizon.
    MinTotalDuration,
}

/// Settings of the Gavel mechanism.
#[derive(Clone, Debug, PartialEq)]
pub struct GavelOptions {
    /// Minimum seconds between allocation resets (Gavel: 1,920).
    pub min_reset_interval_s: f64,
}

impl Default for GavelOptions {
    fn default() -> Self {
        GavelOptions {
            min_reset_interval_s: DEFAULT_MIN_RESET_INTERVAL_S,
        }
    }
}

/// Counters about the LP side, for diagnosis and benchmarks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GavelStats {
    /// Allocations computed (resets).
    pub allocations: u32,
    /// Allocations whose LP failed, replaced by the proportional split.
    pub lp_failures: u32,
    /// Rounds in which nothing would have run because the waiting jobs had no allocation
    /// yet, so the allocation was recomputed early (where Gavel may idle instead).
    pub early_resets: u32,
}

/// One GPU: a slot on a node, of the type the assignment is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Worker {
    node: NodeId,
    slot: u32,
}

/// What the mechanism remembers about one active job.
#[derive(Clone, Debug)]
struct JobBook {
    id: JobId,
    /// Seconds run on each type since the last reset, plus the half-round start value.
    time_so_far: Vec<f64>,
    deficit: Vec<f64>,
    priority: Vec<f64>,
    /// The engine's `run_s` when last seen, to measure what the last round gave.
    seen_run_s: f64,
}

/// A job that ran in the previous round: on which type, and how long it was expected to
/// run (used when it finished and so is no longer reported).
#[derive(Clone, Debug)]
struct RanLastRound {
    job: JobId,
    gpu_type: GpuType,
    expected_s: f64,
}

/// The Gavel policy: an allocation LP plus Gavel's round mechanism.
pub struct GavelPolicy {
    objective: GavelObjective,
    options: GavelOptions,
    /// Active jobs in arrival order (Gavel iterates its dicts in insertion order).
    books: Vec<JobBook>,
    worker_time: Vec<f64>,
    allocation: HashMap<JobId, Vec<f64>>,
    last_reset_s: f64,
    need_update: bool,
    previous: HashMap<JobId, (GpuType, Vec<Worker>)>,
    ran_last_round: Vec<RanLastRound>,
    stats: GavelStats,
}

impl GavelPolicy {
    /// A Gavel policy with the given objective.
    pub fn new(objective: GavelObjective, options: GavelOptions) -> Self {
        GavelPolicy {
            objective,
            options,
            books: Vec::new(),
            worker_time: Vec::new(),
            allocation: HashMap::new(),
            last_reset_s: 0.0,
            need_update: true,
            previous: HashMap::new(),
            ran_last_round: Vec::new(),
            stats: GavelStats::default(),
        }
    }

    /// `gavel`: Gavel's `max_min_fairness_perf`.
    pub fn max_min_fairness() -> Self {
        GavelPolicy::new(GavelObjective::MaxMinFairness, GavelOptions::default())
    }

    /// `gavel-makespan`: Gavel's `min_total_duration_perf`.
    pub fn min_total_duration() -> Self {
        GavelPolicy::new(GavelObjective::MinTotalDuration, GavelOptions::default())
    }

    /// LP counters so far.
    pub fn stats(&self) -> &GavelStats {
        &self.stats
    }

    /// The current allocation of a job (time fraction per type), if it has one.
    pub fn allocation_of(&self, job: JobId) -> Option<&[f64]> {
        self.allocation.get(&job).map(Vec::as_slice)
    }

    /// Books the previous round, drops finished jobs and adds new ones.
    fn account(&mut self, input: &RoundInput<'_>) {
        let types = input.cluster.type_count();
        if self.worker_time.len() != types {
            self.worker_time = vec![0.0; types];
        }
        let active: HashMap<JobId, &JobState> = input.jobs.iter().map(|j| (j.id(), j)).collect();
        let ran = std::mem::take(&mut self.ran_last_round);
        for r in &ran {
            let Some(book) = self.books.iter_mut().find(|b| b.id == r.job) else {
                continue;
            };
            let ran_s = match active.get(&r.job) {
                Some(js) => (js.run_s - book.seen_run_s).max(0.0),
                None => r.expected_s,
            };
            let t = r.gpu_type.index();
            if t < types {
                book.time_so_far[t] += ran_s;
                self.worker_time[t] += ran_s;
            }
        }
        let before = self.books.len();
        self.books.retain(|b| active.contains_key(&b.id));
        if self.books.len() != before {
            self.need_update = true;
        }
        self.previous.retain(|id, _| active.contains_key(id));
        let known: HashSet<JobId> = self.books.iter().map(|b| b.id).collect();
        let half_round = input.round_s / 2.0;
        for js in input.jobs {
            if !known.contains(&js.id()) {
                self.books.push(JobBook {
                    id: js.id(),
                    time_so_far: vec![half_round; types],
                    deficit: vec![0.0; types],
                    priority: vec![0.0; types],
                    seen_run_s: js.run_s,
                });
                self.need_update = true;
            }
        }
        for book in &mut self.books {
            if let Some(js) = active.get(&book.id) {
                book.seen_run_s = js.run_s;
            }
        }
    }

    /// Deficits grow by what each job should have received minus what it received; the
    /// time counters restart at half a round.
    fn reset_time_run_so_far(&mut self, now_s: f64, half_round: f64) {
        let elapsed = now_s - self.last_reset_s;
        for w in &mut self.worker_time {
            *w = 0.0;
        }
        for book in &mut self.books {
            let alloc = self.allocation.get(&book.id);
            for t in 0..book.time_so_far.len() {
                let received = book.time_so_far[t] - half_round;
                let should = alloc.map_or(0.0, |a| a[t] * elapsed);
                book.deficit[t] += should - received;
                book.time_so_far[t] = half_round;
                self.worker_time[t] += half_round;
            }
        }
        self.last_reset_s = now_s;
    }

    fn compute_allocation(&mut self, input: &RoundInput<'_>, throughputs: &[Vec<f64>]) {
        let by_id: HashMap<JobId, &JobState> = input.jobs.iter().map(|j| (j.id(), j)).collect();
        let states: Vec<&JobState> = self
            .books
            .iter()
            .filter_map(|b| by_id.get(&b.id).copied())
            .collect();
        let scale_factors: Vec<u32> = states.iter().map(|j| j.job.workers).collect();
        let capacity: Vec<u32> = input
            .cluster
            .types()
            .map(|t| input.cluster.total_of_type(t))
            .collect();
        let problem = AllocationProblem {
            throughputs,
            scale_factors: &scale_factors,
            capacity: &capacity,
        };
        let result = match self.objective {
            GavelObjective::MaxMinFairness => {
                let weights: Vec<f64> = states.iter().map(|j| j.job.weight).collect();
                allocation::max_min_fairness_perf(&problem, &weights)
            }
            GavelObjective::MinTotalDuration => {
                let steps: Vec<f64> = states.iter().map(|j| j.remaining_steps).collect();
                allocation::min_total_duration_perf(&problem, &steps).map(|m| m.allocation)
            }
        };
        self.stats.allocations += 1;
        let x = result.unwrap_or_else(|_| {
            self.stats.lp_failures += 1;
            proportional_split(&problem)
        });
        self.allocation = states.iter().map(|j| j.id()).zip(x).collect();
    }

    /// Gavel's `_update_priorities`: maybe reset and re-solve, then recompute priorities.
    fn update_priorities(&mut self, input: &RoundInput<'_>, throughputs: &[Vec<f64>]) {
        let since = input.now_s - self.last_reset_s;
        let interval_elapsed =
            since >= self.options.min_reset_interval_s || self.last_reset_s == 0.0;
        if self.need_update && interval_elapsed {
            self.reset_time_run_so_far(input.now_s, input.round_s / 2.0);
            self.compute_allocation(input, throughputs);
            self.need_update = false;
        }
        for (i, book) in self.books.iter_mut().enumerate() {
            let alloc = self.allocation.get(&book.id);
            for t in 0..book.priority.len() {
                let fraction = if self.worker_time[t] == 0.0 {
                    0.0
                } else {
                    book.time_so_far[t] / self.worker_time[t]
                };
                book.priority[t] = match alloc {
                    None => 0.0,
                    Some(a) if a[t] == 0.0 || throughputs[i][t] <= 0.0 => 0.0,
                    Some(a) if fraction > 0.0 => a[t] / fraction,
                    Some(a) => a[t] * 1e9,
                };
            }
        }
    }

    /// Gavel's `_schedule_jobs_on_workers_helper`: which jobs run on which type.
    fn select(
        &self,
        order: &[GpuType],
        throughputs: &[Vec<f64>],
        workers: &[u32],
        capacity: &[u32],
    ) -> Vec<Vec<usize>> {
        let mut left: Vec<u32> = capacity.to_vec();
        let mut chosen: Vec<Vec<usize>> = vec![Vec::new(); capacity.len()];
        let mut scheduled = vec![false; self.books.len()];
        let mut queue: Vec<(usize, GpuType)> = Vec::new();
        for &t in order {
            let ti = t.index();
            let mut entries: Vec<usize> = (0..self.books.len()).collect();
            let key = |i: usize| {
                let b = &self.books[i];
                let a = self.allocation.get(&b.id).map_or(0.0, |a| a[ti]);
                (b.priority[ti], b.deficit[ti], a)
            };
            // Stable sort, highest first: ties keep arrival order, as Python's
            // `sorted(..., reverse=True)` does.
            entries.sort_by(|&x, &y| {
                let (kx, ky) = (key(x), key(y));
                ky.0.total_cmp(&kx.0)
                    .then(ky.1.total_cmp(&kx.1))
                    .then(ky.2.total_cmp(&kx.2))
            });
            queue.extend(entries.into_iter().map(|i| (i, t)));
        }
        for (i, t) in queue {
            let ti = t.index();
            if left[ti] == 0 || scheduled[i] || throughputs[i][ti] <= 0.0 || workers[i] > left[ti] {
                continue;
            }
            left[ti] -= workers[i];
            scheduled[i] = true;
            chosen[ti].push(i);
        }
        chosen
    }

    /// Gavel's placement: per type, larger jobs first, previous GPUs kept when free, the
    /// rest taken node by node.
    fn place(
        &self,
        cluster: &Cluster,
        order: &[GpuType],
        chosen: &[Vec<usize>],
        workers: &[u32],
    ) -> Vec<(usize, GpuType, Vec<Worker>)> {
        let mut out = Vec::new();
        for &t in order {
            let ti = t.index();
            let mut jobs: Vec<usize> = chosen[ti].clone();
            jobs.sort_by_key(|&i| std::cmp::Reverse(workers[i]));
            let mut servers: Vec<Vec<Worker>> = cluster
                .node_ids()
                .filter(|&n| cluster.capacity(n, t) > 0)
                .map(|n| {
                    (0..cluster.capacity(n, t))
                        .map(|slot| Worker { node: n, slot })
                        .collect()
                })
                .collect();
            let mut ptr = 0usize;
            let mut taken: HashSet<Worker> = HashSet::new();
            let mut placed: HashMap<usize, Vec<Worker>> = HashMap::new();
            let mut sizes: Vec<u32> = jobs.iter().map(|&i| workers[i]).collect();
            sizes.dedup();
            for size in sizes {
                for &i in jobs.iter().filter(|&&i| workers[i] == size) {
                    let Some((prev_t, prev_w)) = self.previous.get(&self.books[i].id) else {
                        continue;
                    };
                    let still_there = prev_w.iter().all(|w| w.slot < cluster.capacity(w.node, t));
                    if *prev_t == t && still_there && prev_w.iter().all(|w| !taken.contains(w)) {
                        taken.extend(prev_w.iter().copied());
                        placed.insert(i, prev_w.clone());
                    }
                }
                for &i in jobs.iter().filter(|&&i| workers[i] == size) {
                    if !self.allocation.contains_key(&self.books[i].id) {
                        continue;
                    }
                    let mut mine = placed.remove(&i).unwrap_or_default();
                    while (mine.len() as u32) < size && ptr < servers.len() {
                        if servers[ptr].is_empty() {
                            ptr += 1;
                            continue;
                        }
                        let w = servers[ptr].remove(0);
                        if taken.insert(w) {
                            mine.push(w);
                        }
                    }
                    if mine.len() as u32 == size {
                        placed.insert(i, mine);
                    } else {
                        for w in &mine {
                            taken.remove(w);
                        }
                    }
                }
            }
            let mut placed: Vec<(usize, Vec<Worker>)> = placed.into_iter().collect();
            placed.sort_by_key(|(i, _)| *i);
            out.extend(placed.into_iter().map(|(i, w)| (i, t, w)));
        }
        out
    }
}

/// Gavel's fixed type order, then the cluster's other types in declaration order.
fn type_order(cluster: &Cluster) -> Vec<GpuType> {
    let mut order: Vec<GpuType> = GAVEL_TYPE_ORDER
        .iter()
        .filter_map(|name| cluster.type_by_name(name))
        .collect();
    for t in cluster.types() {
        if !order.contains(&t) {
            order.push(t);
        }
    }
    order
}

/// A fallback allocation if an LP fails: each runnable job's time split over the types it
/// can use in proportion to their GPU counts, scaled down to fit capacity.
fn proportional_split(p: &AllocationProblem<'_>) -> Vec<Vec<f64>> {
    let total: f64 = p.capacity.iter().map(|&c| f64::from(c)).sum();
    let demand: f64 = p.scale_factors.iter().map(|&s| f64::from(s)).sum();
    let denom = total.max(demand).max(1.0);
    p.throughputs
        .iter()
        .map(|row| {
            row.iter()
                .zip(p.capacity)
                .map(|(&tp, &c)| if tp > 0.0 { f64::from(c) / denom } else { 0.0 })
                .collect()
        })
        .collect()
}

fn gang(workers: &[Worker], t: GpuType) -> Placement {
    Placement::gang(workers.iter().map(|w| Part {
        node: w.node,
        gpu_type: t,
        gpus: 1,
    }))
}

impl Policy for GavelPolicy {
    fn name(&self) -> &str {
        match self.objective {
            GavelObjective::MaxMinFairness => "gavel",
            GavelObjective::MinTotalDuration => "gavel-makespan",
        }
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let cluster = input.cluster;
        self.account(input);
        let by_id: HashMap<JobId, &JobState> = input.jobs.iter().map(|j| (j.id(), j)).collect();
        let capacity = cluster.gpus_by_type();
        // Jobs in book order (arrival order); a type with fewer GPUs than the job's workers
        // counts as one it cannot run on.
        let states: Vec<&JobState> = self.books.iter().map(|b| by_id[&b.id]).collect();
        let workers: Vec<u32> = states.iter().map(|j| j.job.workers).collect();
        let throughputs: Vec<Vec<f64>> = states
            .iter()
            .map(|j| {
                cluster
                    .types()
                    .map(|t| {
                        if j.job.workers <= capacity[t.index()] {
                            j.job.throughput.rate_or_zero(t, j.job.workers)
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        let order = type_order(cluster);

        self.update_priorities(input, &throughputs);
        let mut chosen = self.select(&order, &throughputs, &workers, &capacity);
        let mut placed = self.place(cluster, &order, &chosen, &workers);
        let waiting_for_allocation = states.iter().enumerate().any(|(i, j)| {
            !self.allocation.contains_key(&j.id()) && throughputs[i].iter().any(|&r| r > 0.0)
        });
        if placed.is_empty() && waiting_for_allocation {
            // Nothing would run: re-solve now instead of idling.
            self.stats.early_resets += 1;
            self.need_update = true;
            self.last_reset_s = 0.0;
            self.update_priorities(input, &throughputs);
            chosen = self.select(&order, &throughputs, &workers, &capacity);
            placed = self.place(cluster, &order, &chosen, &workers);
        }

        let mut plan = RoundPlan::default();
        let mut assigned = vec![false; states.len()];
        self.previous.clear();
        for (i, t, ws) in placed {
            let js = states[i];
            let rate = throughputs[i][t.index()];
            assigned[i] = true;
            plan.assignments.push(Assignment {
                job: js.id(),
                placement: gang(&ws, t),
                rate,
                payoff: Some(self.books[i].priority[t.index()]),
            });
            self.ran_last_round.push(RanLastRound {
                job: js.id(),
                gpu_type: t,
                expected_s: (js.remaining_steps / rate).min(input.round_s),
            });
            self.previous.insert(js.id(), (t, ws));
        }
        for (i, js) in states.iter().enumerate() {
            if assigned[i] {
                continue;
            }
            let reason = if !js.job.can_run_somewhere(cluster.types()) {
                WaitReason::CannotRunAnywhere
            } else if throughputs[i].iter().all(|&r| r <= 0.0) {
                WaitReason::DoesNotFit
            } else if !self.allocation.contains_key(&js.id()) {
                WaitReason::QueuedBehind { head: None }
            } else {
                WaitReason::TimeShare
            };
            plan.waiting.push(Waiting {
                job: js.id(),
                reason,
            });
        }
        plan
    }
}

#[cfg(test)]
mod tests;
