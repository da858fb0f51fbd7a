//! HadarE: Hadar with job forking, so that no node idles while work remains.
//!
//! Each job may run as several independent copies, each on its own node using GPUs of one
//! type there. A copy with `g` GPUs of type `r` advances at the job's rate for `g` workers
//! on `r` (`X[r][g]`); the job's progress in a round is the sum of its copies' steps, and at
//! the round's end the copies are consolidated (in simulation their progress is summed; on a
//! cluster their weights are averaged in proportion to the steps each did).
//!
//! A round is planned in three passes over one Hadar price book (prices per (node, type),
//! exponential in use, see [`crate::market::prices`]):
//!
//! 1. **Admission** (Hadar's primal-dual): jobs in arrival order each get their best single
//!    copy, the (node, type, size) that maximises utility minus price, when that payoff is
//!    positive. Utilities are Hadar's ([`crate::market::utility`]), functions of the job's
//!    total rate.
//! 2. **Forking**: further sweeps in the same order offer each job one more copy on a node it
//!    does not use yet, admitted when the *marginal* payoff (utility gained minus price) is
//!    positive. Utilities are concave in the rate, so extra copies are worth less and nodes
//!    spread over jobs; the price book decides which jobs get which nodes.
//! 3. **Work conservation**: GPUs still free go, node by node, to the job whose utility
//!    gains most from one more copy there, whatever the price, so no GPU idles while some
//!    job could use it.
//!
//! Copies per job are capped ([`HadarEConfig::max_copies`]). A copy uses at most the job's
//! own worker count: the job's hyperparameters (global batch size, learning rate) were set
//! for that many workers, and a larger world size would change its optimisation. With
//! stickiness, a copy that stays where it ran counts as not moved (no restart in its
//! utility), so copies stay put unless moving gains more than the restart costs.

use crate::cluster::{GpuType, NodeId};
use crate::market::{DEFAULT_CRITICALITY, JobUtility, Objective, PriceBook};
use crate::placement::{Part, Placement};
use crate::plan::{Assignment, RoundPlan, WaitReason, Waiting};
use crate::policy::{Policy, RoundInput};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The progress of a job running `copies` copies whose steps sum to `summed`: the share
/// `efficiency` of them when two or more are consolidated, all of them for one copy (the job
/// itself). The one rule HadarE plans with and the simulator charges.
pub fn forked_progress(summed: f64, copies: usize, efficiency: f64) -> f64 {
    if copies > 1 {
        summed * efficiency
    } else {
        summed
    }
}

/// HadarE's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HadarEConfig {
    /// What the utility rewards (as in Hadar).
    pub objective: Objective,
    /// The most copies one job may run at once. Averaging many copies dilutes each one's
    /// progress and costs a larger consolidation, so the default is moderate.
    pub max_copies: u32,
    /// Give GPUs the primal-dual passes left free to the jobs that gain most from them.
    pub work_conservation: bool,
    /// Prefer keeping copies where they ran.
    pub stickiness: bool,
    /// Weight of the makespan-aware factor of the `avg-jct` utility, as in Hadar.
    pub criticality: f64,
    /// Weight of the cluster-wide per-type price term (see
    /// [`PriceBook::with_type_pressure`]).
    pub type_pressure: f64,
    /// The share of a job's summed copy steps that counts as progress when it runs as two
    /// or more copies (1: all; docs/hadare-quality.md measures what consolidation is worth).
    /// A second copy must then add more than the first loses to pay.
    pub progress_efficiency: f64,
}

impl Default for HadarEConfig {
    fn default() -> Self {
        HadarEConfig {
            objective: Objective::AvgJct,
            max_copies: 8,
            work_conservation: true,
            stickiness: true,
            criticality: DEFAULT_CRITICALITY,
            type_pressure: DEFAULT_HADARE_TYPE_PRESSURE,
            progress_efficiency: 1.0,
        }
    }
}

/// HadarE's default weight of the cluster-wide per-type price term. Copies of one job may
/// run on any type, so a signal of which type is filling lets each job's copies go where
/// they gain most relative to others; on Gavel's traces it shortened HadarE's TTD on 11 of
/// 13 runs (docs/algorithms.md), whereas for gang-scheduled Hadar it did not help (default 0 there).
pub const DEFAULT_HADARE_TYPE_PRESSURE: f64 = 1.0;

/// The HadarE policy.
#[derive(Clone, Debug, Default)]
pub struct HadarEPolicy {
    config: HadarEConfig,
}

impl HadarEPolicy {
    /// A HadarE policy with these settings.
    pub fn new(config: HadarEConfig) -> Self {
        HadarEPolicy { config }
    }
}

impl Policy for HadarEPolicy {
    fn name(&self) -> &str {
        "hadare"
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        plan_round(&self.config, input)
    }
}

/// One way to run a copy: `gpus` GPUs of `gpu_type` at `rate` steps/s.
#[derive(Clone, Copy, Debug)]
struct CopyOption {
    gpu_type: GpuType,
    gpus: u32,
    rate: f64,
}

/// A job being planned: its copy options, utility and the copies chosen so far.
struct Forkable {
    index: usize,
    options: Vec<CopyOption>,
    utility: JobUtility,
    previous: Vec<Part>,
    ran_before: bool,
    copies: Vec<Part>,
    /// The copies' summed rate.
    rate: f64,
    price: f64,
    moved: bool,
    /// [`HadarEConfig::progress_efficiency`].
    efficiency: f64,
}

impl Forkable {
    fn uses(&self, n: NodeId) -> bool {
        self.copies.iter().any(|c| c.node == n)
    }

    /// Utility gained by adding a copy of `rate` (kept in place or not).
    fn gain(&self, rate: f64, kept: bool) -> f64 {
        let moved_after = self.ran_before && (self.moved || !kept);
        let copies = self.copies.len();
        self.utility
            .at(self.progress(self.rate + rate, copies + 1), moved_after)
            - self.utility.at(
                self.progress(self.rate, copies),
                self.moved && self.ran_before,
            )
    }

    /// Whether one more copy of `rate` steps/s makes the job progress faster after the
    /// consolidation's discount (always, at efficiency 1).
    fn adds_progress(&self, rate: f64) -> bool {
        let copies = self.copies.len();
        self.progress(self.rate + rate, copies + 1) > self.progress(self.rate, copies)
    }

    /// Progress per second of `copies` copies summing to `summed` steps/s.
    fn progress(&self, summed: f64, copies: usize) -> f64 {
        forked_progress(summed, copies, self.efficiency)
    }
}

/// An `f64` ordered by `total_cmp`, for the work-conservation heap.
#[derive(Clone, Copy, Debug)]
struct TotalF64(f64);

impl PartialEq for TotalF64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}

impl Eq for TotalF64 {}

impl PartialOrd for TotalF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TotalF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A candidate copy for one job, with its gain and price.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    part: Part,
    rate: f64,
    gain: f64,
    price: f64,
    kept: bool,
}

/// The job's best next copy on a node it does not use yet. With `priced`, candidates are
/// ranked by gain minus price, otherwise by gain per GPU (for work conservation).
fn best_copy(book: &PriceBook, job: &Forkable, priced: bool) -> Option<Candidate> {
    let mut best: Option<(f64, Candidate)> = None;
    let consider = |cand: Candidate, best: &mut Option<(f64, Candidate)>| {
        let score = if priced {
            cand.gain - cand.price
        } else {
            cand.gain / cand.part.gpus as f64
        };
        let better = match best {
            None => true,
            Some((s, b)) => score > *s || (score == *s && cand.part < b.part),
        };
        if better {
            *best = Some((score, cand));
        }
    };
    // A previous copy that is still free keeps its place at no restart.
    for prev in &job.previous {
        if job.uses(prev.node) || book.free(prev.node, prev.gpu_type) < prev.gpus {
            continue;
        }
        if let Some(o) = job
            .options
            .iter()
            .find(|o| o.gpu_type == prev.gpu_type && o.gpus == prev.gpus)
        {
            let price = book
                .placement_cost(&Placement::gang([*prev]))
                .unwrap_or(f64::INFINITY);
            consider(
                Candidate {
                    part: *prev,
                    rate: o.rate,
                    gain: job.gain(o.rate, true),
                    price,
                    kept: true,
                },
                &mut best,
            );
        }
    }
    // Otherwise any node class with room: all its nodes are priced alike.
    for class in book.classes() {
        let Some(&node) = class.nodes.iter().find(|n| !job.uses(**n)) else {
            continue;
        };
        for o in &job.options {
            let t = o.gpu_type.index();
            let (cap, used) = class.key[t];
            let Some(price) = book.cost_at(t, cap, used, o.gpus) else {
                continue;
            };
            let part = Part {
                node,
                gpu_type: o.gpu_type,
                gpus: o.gpus,
            };
            let kept = job.previous.contains(&part);
            consider(
                Candidate {
                    part,
                    rate: o.rate,
                    gain: job.gain(o.rate, kept),
                    price,
                    kept,
                },
                &mut best,
            );
        }
    }
    best.map(|(_, c)| c)
}

/// Pass 3: work conservation, copy by copy, each time to the job whose best copy gains
/// most per GPU (lowest index on ties). Giving out GPUs only removes candidates, so a
/// job's score can only fall until the job itself gains a copy: a lazy heap of scores
/// (each an upper bound, re-checked when it reaches the top; a job is re-scored exactly
/// after its own copy) picks the same copies as rescanning every job each time.
fn conserve_work(book: &mut PriceBook, jobs: &mut [Forkable], max_copies: usize) {
    let unpriced_score = |book: &PriceBook, job: &Forkable| {
        if job.copies.len() >= max_copies {
            return None;
        }
        best_copy(book, job, false)
            .filter(|c| job.adds_progress(c.rate))
            .map(|c| (c.gain / c.part.gpus as f64, c))
    };
    let mut heap: BinaryHeap<(TotalF64, Reverse<usize>)> = jobs
        .iter()
        .enumerate()
        .filter_map(|(k, job)| {
            unpriced_score(book, job).map(|(score, _)| (TotalF64(score), Reverse(k)))
        })
        .collect();
    while let Some((TotalF64(stored), Reverse(k))) = heap.pop() {
        if book.free_total() == 0 {
            break;
        }
        let Some((score, c)) = unpriced_score(book, &jobs[k]) else {
            continue;
        };
        if score.total_cmp(&stored).is_lt() {
            heap.push((TotalF64(score), Reverse(k)));
            continue;
        }
        add_copy(book, &mut jobs[k], c);
        if let Some((next, _)) = unpriced_score(book, &jobs[k]) {
            heap.push((TotalF64(next), Reverse(k)));
        }
    }
}

fn add_copy(book: &mut PriceBook, job: &mut Forkable, c: Candidate) {
    book.charge(&Placement::gang([c.part]));
    job.copies.push(c.part);
    job.rate += c.rate;
    job.price += c.price;
    job.moved |= !c.kept;
}

/// Plans one HadarE round.
pub fn plan_round(config: &HadarEConfig, input: &RoundInput<'_>) -> RoundPlan {
    plan_round_with(config, input, conserve_work)
}

/// How the work-conservation pass gives out the GPUs left: [`conserve_work`]; tests swap
/// in a plain rescan to check the two agree.
type ConservePass = fn(&mut PriceBook, &mut [Forkable], usize);

fn plan_round_with(
    config: &HadarEConfig,
    input: &RoundInput<'_>,
    conserve: ConservePass,
) -> RoundPlan {
    let cluster = input.cluster;
    let max_copies = config.max_copies.max(1) as usize;
    let (mut jobs, mut waiting) = forkables(config, input);
    let horizon = jobs
        .iter()
        .map(|j| j.utility.remaining_best_s())
        .fold(0.0, f64::max);
    for j in &mut jobs {
        j.utility.set_criticality(horizon, config.criticality);
    }
    let Ok(bounds) = PriceBook::bounds_from_utilities(
        jobs.iter()
            .map(|j| j.utility.best() / input.jobs[j.index].job.workers.max(1) as f64),
    ) else {
        return RoundPlan {
            assignments: Vec::new(),
            waiting,
        };
    };
    jobs.sort_by(|a, b| {
        input.jobs[a.index]
            .job
            .arrival_order(&input.jobs[b.index].job)
    });
    let mut book = PriceBook::new(cluster, &[bounds]).with_type_pressure(config.type_pressure);
    let best_priced_out = priced_sweeps(&mut book, &mut jobs, max_copies);
    if config.work_conservation {
        conserve(&mut book, &mut jobs, max_copies);
    }
    let assignments = assign(input, &book, &jobs, &best_priced_out, &mut waiting);
    RoundPlan {
        assignments,
        waiting,
    }
}

/// Each job's copy options (every type and worker count it can run with on one node) and
/// utility, in input order; the jobs that can run nowhere wait.
fn forkables(config: &HadarEConfig, input: &RoundInput<'_>) -> (Vec<Forkable>, Vec<Waiting>) {
    let cluster = input.cluster;
    let mut jobs: Vec<Forkable> = Vec::with_capacity(input.jobs.len());
    let mut waiting = Vec::new();
    for (index, js) in input.jobs.iter().enumerate() {
        let workers = js.job.workers;
        let mut options = Vec::new();
        for t in cluster.types() {
            if cluster.total_of_type(t) == 0 {
                continue;
            }
            for &(g, rate) in js.job.throughput.curve(t).points() {
                if g <= workers && g <= cluster.max_per_node(t) {
                    options.push(CopyOption {
                        gpu_type: t,
                        gpus: g,
                        rate,
                    });
                }
            }
        }
        if options.is_empty() {
            waiting.push(Waiting {
                job: js.id(),
                reason: WaitReason::CannotRunAnywhere,
            });
            continue;
        }
        let best_rate = options.iter().map(|o| o.rate).fold(0.0, f64::max);
        let utility = JobUtility::new(
            config.objective,
            js,
            best_rate,
            input.now_s,
            input.round_s,
            input.restart_of(js),
            config.stickiness,
        );
        let previous = if config.stickiness {
            js.placement
                .as_ref()
                .map(|p| p.parts().to_vec())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        jobs.push(Forkable {
            index,
            options,
            utility,
            previous,
            ran_before: js.rounds_run > 0,
            copies: Vec::new(),
            rate: 0.0,
            price: 0.0,
            moved: false,
            efficiency: config.progress_efficiency,
        });
    }
    (jobs, waiting)
}

/// Passes 1 and 2: sweeps of the primal-dual test, one copy per job per sweep, until a sweep
/// adds none. Returns, per job that got no copy, its best priced-out candidate.
fn priced_sweeps(
    book: &mut PriceBook,
    jobs: &mut [Forkable],
    max_copies: usize,
) -> Vec<Option<Candidate>> {
    let mut best_priced_out: Vec<Option<Candidate>> = vec![None; jobs.len()];
    loop {
        let mut added = false;
        for (k, job) in jobs.iter_mut().enumerate() {
            if job.copies.len() >= max_copies || book.free_total() == 0 {
                continue;
            }
            match best_copy(book, job, true) {
                Some(c) if c.gain - c.price > 0.0 => {
                    add_copy(book, job, c);
                    added = true;
                }
                other => {
                    if job.copies.is_empty() {
                        best_priced_out[k] = other;
                    }
                }
            }
        }
        if !added {
            return best_priced_out;
        }
    }
}

/// The jobs with copies as forked assignments (by job id); the others join `waiting` with
/// why they got none.
fn assign(
    input: &RoundInput<'_>,
    book: &PriceBook,
    jobs: &[Forkable],
    best_priced_out: &[Option<Candidate>],
    waiting: &mut Vec<Waiting>,
) -> Vec<Assignment> {
    let mut assignments = Vec::new();
    for (k, job) in jobs.iter().enumerate() {
        let js = &input.jobs[job.index];
        if job.copies.is_empty() {
            let reason = match best_priced_out[k] {
                Some(c) => WaitReason::PriceAboveUtility {
                    utility: c.gain,
                    price: c.price,
                },
                None if book.free_total() == 0 => WaitReason::DoesNotFit,
                None => WaitReason::NoThroughputOnFreeTypes,
            };
            waiting.push(Waiting {
                job: js.id(),
                reason,
            });
            continue;
        }
        let placement = Placement::forked(job.copies.iter().copied());
        let rate = job.progress(
            placement.rate(&js.job.throughput, js.job.workers),
            job.copies.len(),
        );
        let utility = job.utility.at(rate, job.moved && job.ran_before);
        assignments.push(Assignment {
            job: js.id(),
            placement,
            rate,
            payoff: Some(utility - job.price),
        });
    }
    assignments.sort_by_key(|a| a.job);
    assignments
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::job::{Job, JobId, JobState};
    use crate::placement::PlacementKind;
    use crate::throughput::{RateCurve, ThroughputProfile};
    use proptest::prelude::*;
    use std::sync::Arc;

    fn job(id: u64, workers: u32, rates: &[&[(u32, f64)]], remaining: f64) -> JobState {
        let job = Job {
            restart_s: None,
            id: JobId(id),
            kind: "t".into(),
            arrival_s: id as f64,
            workers,
            total_steps: remaining,
            weight: 1.0,
            throughput: ThroughputProfile::new(
                rates
                    .iter()
                    .map(|r| RateCurve::new(r.iter().copied()))
                    .collect(),
            ),
        };
        JobState::arrived(Arc::new(job), rates.len())
    }

    fn input<'a>(cluster: &'a Cluster, jobs: &'a [JobState]) -> RoundInput<'a> {
        RoundInput {
            now_s: 0.0,
            round_s: 360.0,
            restart_s: 0.0,
            cluster,
            jobs,
        }
    }

    #[test]
    fn fewer_jobs_than_nodes_fork_to_fill_every_node() {
        // 2 jobs, 6 one-GPU nodes of two types: every node gets a copy.
        let cluster =
            Cluster::from_type_counts(&[("v100".into(), 3), ("k80".into(), 3)], 1).unwrap();
        let jobs = vec![
            job(0, 1, &[&[(1, 4.0)], &[(1, 1.0)]], 1e5),
            job(1, 1, &[&[(1, 2.0)], &[(1, 1.5)]], 1e5),
        ];
        let plan = plan_round(&HadarEConfig::default(), &input(&cluster, &jobs));
        plan.validate(&cluster, &jobs).unwrap();
        let used: u32 = plan.assignments.iter().map(|a| a.placement.gpus()).sum();
        assert_eq!(used, 6, "{plan:?}");
        assert!(
            plan.assignments
                .iter()
                .all(|a| a.placement.kind() == PlacementKind::Forked)
        );
        assert!(
            plan.assignments
                .iter()
                .all(|a| a.placement.parts().len() >= 2),
            "both jobs fork: {plan:?}"
        );
    }

    #[test]
    fn a_copy_that_loses_more_to_consolidation_than_it_adds_is_not_forked() {
        // One job, a fast v100 (4 steps/s) and a slow k80 (1): two copies sum to 5, which at
        // efficiency 0.7 counts 3.5, less than the v100 alone; at 0.9 (4.5) the copy pays.
        let cluster =
            Cluster::from_type_counts(&[("v100".into(), 1), ("k80".into(), 1)], 1).unwrap();
        let jobs = vec![job(0, 1, &[&[(1, 4.0)], &[(1, 1.0)]], 1e5)];
        let at = |progress_efficiency| {
            let cfg = HadarEConfig {
                progress_efficiency,
                ..HadarEConfig::default()
            };
            let plan = plan_round(&cfg, &input(&cluster, &jobs));
            let a = plan.assignments[0].clone();
            (a.placement.parts().len(), a.rate)
        };
        assert_eq!(at(0.7), (1, 4.0));
        assert_eq!(at(0.9), (2, 4.5));
    }

    #[test]
    fn copies_are_capped() {
        let cluster = Cluster::from_type_counts(&[("v100".into(), 8)], 1).unwrap();
        let jobs = vec![job(0, 1, &[&[(1, 1.0)]], 1e5)];
        let cfg = HadarEConfig {
            max_copies: 3,
            ..HadarEConfig::default()
        };
        let plan = plan_round(&cfg, &input(&cluster, &jobs));
        assert_eq!(plan.assignments[0].placement.parts().len(), 3);
    }

    #[test]
    fn a_copy_never_exceeds_the_jobs_own_size() {
        // One 2-worker job on a node of 4 GPUs: copies of at most 2 GPUs; one node means one copy.
        let cluster = Cluster::from_type_counts(&[("v100".into(), 4)], 4).unwrap();
        let jobs = vec![job(0, 2, &[&[(1, 1.0), (2, 1.8), (4, 3.0)]], 1e5)];
        let plan = plan_round(&HadarEConfig::default(), &input(&cluster, &jobs));
        assert_eq!(plan.assignments[0].placement.gpus(), 2);
        assert_eq!(plan.assignments[0].rate, 1.8);
    }

    #[test]
    fn a_job_without_throughput_waits_with_the_reason() {
        let cluster = Cluster::from_type_counts(&[("v100".into(), 2)], 1).unwrap();
        let jobs = vec![job(0, 1, &[&[]], 1e5)];
        let plan = plan_round(&HadarEConfig::default(), &input(&cluster, &jobs));
        assert_eq!(
            plan.waiting,
            vec![Waiting {
                job: JobId(0),
                reason: WaitReason::CannotRunAnywhere
            }]
        );
    }

    #[test]
    fn running_copies_stay_put_when_sticky() {
        let cluster = Cluster::from_type_counts(&[("v100".into(), 4)], 1).unwrap();
        let mut jobs = vec![job(0, 1, &[&[(1, 1.0)]], 1e5)];
        let first = plan_round(&HadarEConfig::default(), &input(&cluster, &jobs));
        jobs[0].placement = Some(first.assignments[0].placement.clone());
        jobs[0].rounds_run = 1;
        let again = plan_round(
            &HadarEConfig::default(),
            &RoundInput {
                restart_s: 30.0,
                ..input(&cluster, &jobs)
            },
        );
        assert_eq!(
            again.assignments[0].placement,
            first.assignments[0].placement
        );
    }

    /// The work-conservation pass as first written: rescan every job for each copy.
    fn conserve_by_rescan(book: &mut PriceBook, jobs: &mut [Forkable], max_copies: usize) {
        loop {
            let mut best: Option<(f64, usize, Candidate)> = None;
            for (k, job) in jobs.iter().enumerate() {
                if job.copies.len() >= max_copies || book.free_total() == 0 {
                    continue;
                }
                if let Some(c) = best_copy(book, job, false).filter(|c| job.adds_progress(c.rate)) {
                    let score = c.gain / c.part.gpus as f64;
                    if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
                        best = Some((score, k, c));
                    }
                }
            }
            match best {
                Some((_, k, c)) => add_copy(book, &mut jobs[k], c),
                None => break,
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// The lazy heap of the work-conservation pass gives out exactly the copies a full
        /// rescan for each copy would, with and without type pressure.
        #[test]
        fn lazy_work_conservation_matches_a_full_rescan(
            nodes in prop::collection::vec((0u32..5, 0u32..5), 1..8),
            specs in prop::collection::vec((1u32..5, 0.1f64..10.0, 0.1f64..10.0, 1.0f64..1e6), 1..10),
            max_copies in 1u32..6,
            type_pressure in prop::sample::select(vec![0.0, 1.0]),
        ) {
            let cluster_nodes: Vec<crate::cluster::Node> = nodes.iter().enumerate()
                .map(|(i, (a, b))| crate::cluster::Node { name: format!("n{i}"), gpus: vec![*a, *b] })
                .collect();
            prop_assume!(nodes.iter().any(|(a, b)| a + b > 0));
            let cluster = Cluster::new(vec!["a".into(), "b".into()], cluster_nodes).unwrap();
            let jobs: Vec<JobState> = specs.iter().enumerate().map(|(i, (w, ra, rb, rem))| {
                let a: Vec<(u32, f64)> = (1..=*w).map(|g| (g, ra * g as f64 * 0.9)).collect();
                let b: Vec<(u32, f64)> = vec![(1, *rb)];
                job(i as u64, *w, &[&a, &b], *rem)
            }).collect();
            let cfg = HadarEConfig { max_copies, type_pressure, ..HadarEConfig::default() };
            let inp = input(&cluster, &jobs);
            let fast = plan_round(&cfg, &inp);
            let slow = plan_round_with(&cfg, &inp, conserve_by_rescan);
            prop_assert_eq!(fast, slow);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Copies of one job never share a node, no node gives out more GPUs than it has, and
        /// a job's rate is the sum of its copies' rates.
        #[test]
        fn plans_respect_nodes_and_capacity(
            nodes in prop::collection::vec((0u32..5, 0u32..5), 1..8),
            specs in prop::collection::vec((1u32..5, 0.1f64..10.0, 0.1f64..10.0, 1.0f64..1e6), 1..10),
            max_copies in 1u32..6,
        ) {
            let cluster_nodes: Vec<crate::cluster::Node> = nodes.iter().enumerate()
                .map(|(i, (a, b))| crate::cluster::Node { name: format!("n{i}"), gpus: vec![*a, *b] })
                .collect();
            prop_assume!(nodes.iter().any(|(a, b)| a + b > 0));
            let cluster = Cluster::new(vec!["a".into(), "b".into()], cluster_nodes).unwrap();
            let jobs: Vec<JobState> = specs.iter().enumerate().map(|(i, (w, ra, rb, rem))| {
                let a: Vec<(u32, f64)> = (1..=*w).map(|g| (g, ra * g as f64 * 0.9)).collect();
                let b: Vec<(u32, f64)> = vec![(1, *rb)];
                job(i as u64, *w, &[&a, &b], *rem)
            }).collect();
            let cfg = HadarEConfig { max_copies, ..HadarEConfig::default() };
            let plan = plan_round(&cfg, &input(&cluster, &jobs));
            prop_assert!(plan.validate(&cluster, &jobs).is_ok(), "{:?}", plan.validate(&cluster, &jobs));
            for a in &plan.assignments {
                let js = jobs.iter().find(|j| j.id() == a.job).unwrap();
                let sum: f64 = a.placement.parts().iter().map(|p| js.job.throughput.rate_or_zero(p.gpu_type, p.gpus)).sum();
                prop_assert!((sum - a.rate).abs() <= 1e-9 * sum.max(1.0));
                prop_assert!(a.placement.parts().len() <= max_copies as usize);
            }
            prop_assert_eq!(plan.assignments.len() + plan.waiting.len(), jobs.len());
        }
    }
}
