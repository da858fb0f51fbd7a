//! Exact mode: the round's placement that maximises the total utility of the jobs it runs,
//! by branch and bound, for small instances.
//!
//! The round's objective (the same one [`super::round_objective`] scores any plan by) is
//! `sum over placed jobs of utility(job, rate of its placement)`, with a moved running
//! job's utility restart-discounted when stickiness is on. It is what the primal-dual
//! approximates online; comparing the two on small instances measures its optimality gap.
//!
//! Why a hand-written branch and bound rather than a general ILP solver: a job's utility
//! depends on its placement only through its bottleneck type, so the search branches on
//! a handful of options per job (skip, keep its old placement, or run with bottleneck `b`
//! on types at least as fast as `b`) instead of on per-slot integer variables, and checks
//! capacity with Hall's condition on the GPU types (exact without node limits: a job may
//! take any free GPU of an allowed type). Only a selection that would beat the best found
//! is turned into concrete per-node placements, by an exhaustive search that also enforces
//! the node limits. Everything is integral and deterministic, with no solver tolerances to
//! reason about, and the search is bounded by a node budget: past it the best found is
//! returned and marked unproven.

use super::dual::{gang_rate, is_uniform};
use crate::cluster::{Cluster, GpuType};
use crate::placement::{Part, Placement};

/// One job as the exact search sees it: as the primal-dual's dual subroutine does.
pub type ExactJob<'a> = super::dual::DualJob<'a>;

/// The exact search's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ExactSolution {
    /// Per job (same order as the input), its placement or `None` when it waits.
    pub placements: Vec<Option<Placement>>,
    /// The total utility of the placed jobs.
    pub objective: f64,
    /// True when the search finished within its budget, so the answer is optimal.
    pub proven: bool,
    /// Search nodes visited.
    pub search_nodes: u64,
}

#[derive(Clone, Copy, Debug)]
enum Choice {
    Keep,
    Move { mask: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Opt {
    value: f64,
    choice: Choice,
}

/// Most types for which Hall's condition is checked over all subsets; beyond it only the
/// concrete search checks feasibility.
const HALL_MAX_TYPES: usize = 12;

struct Search<'a, 'j> {
    jobs: &'a [ExactJob<'j>],
    order: Vec<usize>,
    options: Vec<Vec<Opt>>,
    types: usize,
    nodes: usize,
    free: Vec<u32>,
    free_by_type: Vec<u32>,
    /// (job, mask) of the moves selected on the current path.
    moves: Vec<(usize, u64)>,
    kept: Vec<usize>,
    /// Per depth, the remaining jobs' (best value, workers), densest first.
    suffix: Vec<Vec<(f64, u32)>>,
    best_value: f64,
    best: Option<Vec<Option<Placement>>>,
    visited: u64,
    limit: u64,
    aborted: bool,
}

/// Solves the round exactly, visiting at most `search_limit` search nodes.
pub fn solve(cluster: &Cluster, jobs: &[ExactJob<'_>], search_limit: u64) -> ExactSolution {
    let types = cluster.type_count();
    let mut free = Vec::with_capacity(cluster.nodes().len() * types);
    for n in cluster.nodes() {
        free.extend_from_slice(&n.gpus);
    }
    let free_by_type = cluster.gpus_by_type();
    let options: Vec<Vec<Opt>> = jobs
        .iter()
        .map(|job| job_options(cluster, job, &free_by_type))
        .collect();
    let (order, suffix) = search_order(jobs, &options);
    let mut s = Search {
        jobs,
        order,
        options,
        types,
        nodes: cluster.nodes().len(),
        free,
        free_by_type,
        moves: Vec::new(),
        kept: Vec::new(),
        suffix,
        best_value: 0.0,
        best: None,
        visited: 0,
        limit: search_limit,
        aborted: false,
    };
    s.branch(0, 0.0);
    let placements = s.best.take().unwrap_or_else(|| vec![None; jobs.len()]);
    ExactSolution {
        objective: objective(jobs, &placements),
        placements,
        proven: !s.aborted,
        search_nodes: s.visited,
    }
}

/// A job's choices, best first: keeping its placement where it still may, and a move to
/// each set of its equally fast types (or, mixing types, to all types as fast or faster)
/// with GPUs enough.
fn job_options(cluster: &Cluster, job: &ExactJob<'_>, free_by_type: &[u32]) -> Vec<Opt> {
    let types = cluster.type_count();
    let mut opts: Vec<Opt> = keep_option(cluster, job).into_iter().collect();
    let mut usable: Vec<(usize, f64)> = job
        .rates
        .iter()
        .enumerate()
        .filter(|(t, r)| **r > 0.0 && *t < types)
        .map(|(t, r)| (t, *r))
        .collect();
    usable.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut mask = 0u64;
    let mut supply = 0;
    let mut i = 0;
    while i < usable.len() {
        let rate_b = usable[i].1;
        if !job.mixed_types {
            mask = 0;
            supply = 0;
        }
        while i < usable.len() && usable[i].1 == rate_b {
            if usable[i].0 < 64 {
                mask |= 1 << usable[i].0;
            }
            supply += free_by_type[usable[i].0];
            i += 1;
        }
        if supply >= job.workers && job.workers > 0 {
            opts.push(Opt {
                value: job.utility.at(rate_b, job.previous.is_some()),
                choice: Choice::Move { mask },
            });
        }
    }
    opts.sort_by(|a, b| b.value.total_cmp(&a.value));
    opts
}

/// Keeping the job's previous placement, when it is still in the cluster, of a shape the
/// job may take, and runs.
fn keep_option(cluster: &Cluster, job: &ExactJob<'_>) -> Option<Opt> {
    let prev = job.previous?;
    let rate = gang_rate(job.rates, job.workers, prev);
    let in_cluster = prev.parts().iter().all(|p| {
        p.node.index() < cluster.nodes().len()
            && p.gpu_type.index() < cluster.type_count()
            && p.gpus <= cluster.capacity(p.node, p.gpu_type)
    });
    let shape_ok = job.mixed_types || prev.types().len() == 1;
    let keep = rate > 0.0
        && in_cluster
        && shape_ok
        && prev.nodes().len() as u32 <= job.limit_on(&prev.types())
        && (!job.uniform || is_uniform(prev));
    keep.then(|| Opt {
        value: job.utility.at(rate, false),
        choice: Choice::Keep,
    })
}

/// The order the search takes the jobs with choices in (best option first), and per depth
/// the remaining jobs' (best value, workers), densest first, for the search's bound.
fn search_order(jobs: &[ExactJob<'_>], options: &[Vec<Opt>]) -> (Vec<usize>, Vec<Vec<(f64, u32)>>) {
    let top = |j: usize| options[j].first().map_or(0.0, |o| o.value);
    let mut order: Vec<usize> = (0..jobs.len())
        .filter(|&j| !options[j].is_empty())
        .collect();
    order.sort_by(|&a, &b| top(b).total_cmp(&top(a)).then(a.cmp(&b)));
    let mut suffix = Vec::with_capacity(order.len() + 1);
    for d in 0..=order.len() {
        let mut rest: Vec<(f64, u32)> = order[d..]
            .iter()
            .map(|&j| (top(j), jobs[j].workers))
            .collect();
        rest.sort_by(|a, b| (b.0 / b.1 as f64).total_cmp(&(a.0 / a.1 as f64)));
        suffix.push(rest);
    }
    (order, suffix)
}

/// The utility the placements earn.
fn objective(jobs: &[ExactJob<'_>], placements: &[Option<Placement>]) -> f64 {
    placements
        .iter()
        .zip(jobs)
        .filter_map(|(p, j)| {
            p.as_ref().map(|p| {
                j.utility.at(
                    gang_rate(j.rates, j.workers, p),
                    j.previous.is_some_and(|q| q != p),
                )
            })
        })
        .sum()
}

impl Search<'_, '_> {
    fn tick(&mut self) -> bool {
        self.visited += 1;
        if self.visited > self.limit {
            self.aborted = true;
        }
        !self.aborted
    }

    /// An upper bound on what jobs from depth `d` on can still add: their best values,
    /// packed fractionally into the GPUs not yet spoken for.
    fn bound(&self, d: usize) -> f64 {
        let pending: u32 = self.moves.iter().map(|(j, _)| self.jobs[*j].workers).sum();
        let mut room = self
            .free_by_type
            .iter()
            .sum::<u32>()
            .saturating_sub(pending) as f64;
        let mut total = 0.0;
        for (v, n) in &self.suffix[d] {
            if room <= 0.0 {
                break;
            }
            let n = *n as f64;
            total += v * (room / n).min(1.0);
            room -= n;
        }
        total
    }

    fn branch(&mut self, d: usize, value: f64) {
        if !self.tick() {
            return;
        }
        if d == self.order.len() {
            if value > self.best_value + 1e-12 && self.realise() {
                self.best_value = value;
            }
            return;
        }
        if value + self.bound(d) <= self.best_value + 1e-12 {
            return;
        }
        let j = self.order[d];
        for k in 0..self.options[j].len() {
            let opt = self.options[j][k];
            match opt.choice {
                Choice::Keep => {
                    let Some(prev) = self.jobs[j].previous else {
                        continue;
                    };
                    if !self.fits(prev) {
                        continue;
                    }
                    self.apply(prev, false);
                    self.kept.push(j);
                    if self.hall_ok() {
                        self.branch(d + 1, value + opt.value);
                    }
                    self.kept.pop();
                    self.apply(prev, true);
                }
                Choice::Move { mask } => {
                    self.moves.push((j, mask));
                    if self.hall_ok() {
                        self.branch(d + 1, value + opt.value);
                    }
                    self.moves.pop();
                }
            }
            if self.aborted {
                return;
            }
        }
        self.branch(d + 1, value);
    }

    fn fits(&self, p: &Placement) -> bool {
        p.parts()
            .iter()
            .all(|q| self.free[q.node.index() * self.types + q.gpu_type.index()] >= q.gpus)
    }

    fn apply(&mut self, p: &Placement, give_back: bool) {
        for q in p.parts() {
            let i = q.node.index() * self.types + q.gpu_type.index();
            if give_back {
                self.free[i] += q.gpus;
                self.free_by_type[q.gpu_type.index()] += q.gpus;
            } else {
                self.free[i] -= q.gpus;
                self.free_by_type[q.gpu_type.index()] -= q.gpus;
            }
        }
    }

    /// Hall's condition: for every set `S` of types, the moves confined to `S` need no more
    /// than `S` has free. Necessary always; sufficient when no node limit binds.
    fn hall_ok(&self) -> bool {
        if self.types > HALL_MAX_TYPES {
            let pending: u32 = self.moves.iter().map(|(j, _)| self.jobs[*j].workers).sum();
            return pending <= self.free_by_type.iter().sum::<u32>();
        }
        for s in 1u64..(1u64 << self.types) {
            let need: u32 = self
                .moves
                .iter()
                .filter(|(_, m)| m & !s == 0)
                .map(|(j, _)| self.jobs[*j].workers)
                .sum();
            if need == 0 {
                continue;
            }
            let have: u32 = (0..self.types)
                .filter(|t| s >> t & 1 == 1)
                .map(|t| self.free_by_type[t])
                .sum();
            if need > have {
                return false;
            }
        }
        true
    }

    /// Turns the selected moves into concrete placements on the capacity the kept jobs
    /// leave, recording them as the best answer; false when none exists (or the budget ran
    /// out).
    fn realise(&mut self) -> bool {
        let mut moves = self.moves.clone();
        // Most constrained first: fewest free GPUs among its allowed types.
        let supply = |m: u64, s: &Self| -> u32 {
            (0..s.types.min(64))
                .filter(|t| m >> t & 1 == 1)
                .map(|t| s.free_by_type[t])
                .sum()
        };
        moves.sort_by_key(|(j, m)| (supply(*m, self), std::cmp::Reverse(self.jobs[*j].workers)));
        let mut free = self.free.clone();
        let mut chosen: Vec<(usize, Placement)> = Vec::new();
        if !self.place_moves(&moves, 0, &mut free, &mut chosen) {
            return false;
        }
        let mut out: Vec<Option<Placement>> = vec![None; self.jobs.len()];
        for &j in &self.kept {
            out[j] = self.jobs[j].previous.cloned();
        }
        for (j, p) in chosen {
            out[j] = Some(p);
        }
        self.best = Some(out);
        true
    }

    fn place_moves(
        &mut self,
        moves: &[(usize, u64)],
        k: usize,
        free: &mut Vec<u32>,
        chosen: &mut Vec<(usize, Placement)>,
    ) -> bool {
        if k == moves.len() {
            return true;
        }
        let (j, mask) = moves[k];
        let resources: Vec<usize> = (0..self.nodes * self.types)
            .filter(|&i| {
                let t = i % self.types;
                t < 64 && mask >> t & 1 == 1 && free[i] > 0
            })
            .collect();
        let mut parts: Vec<Part> = Vec::new();
        self.enumerate(
            moves,
            k,
            &resources,
            0,
            self.jobs[j].workers,
            0,
            usize::MAX,
            &mut parts,
            free,
            chosen,
        )
    }

    /// Chooses how many GPUs the `k`-th move takes from `resources[r..]`, then places the
    /// remaining moves; true at the first complete assignment.
    #[allow(clippy::too_many_arguments)]
    fn enumerate(
        &mut self,
        moves: &[(usize, u64)],
        k: usize,
        resources: &[usize],
        r: usize,
        remaining: u32,
        nodes_used: u32,
        last_node: usize,
        parts: &mut Vec<Part>,
        free: &mut Vec<u32>,
        chosen: &mut Vec<(usize, Placement)>,
    ) -> bool {
        if !self.tick() {
            return false;
        }
        let (j, _) = moves[k];
        if remaining == 0 {
            let p = Placement::gang(parts.iter().copied());
            let job = &self.jobs[j];
            if p.nodes().len() as u32 > job.limit_on(&p.types()) || (job.uniform && !is_uniform(&p))
            {
                return false;
            }
            chosen.push((j, p));
            if self.place_moves(moves, k + 1, free, chosen) {
                return true;
            }
            chosen.pop();
            return false;
        }
        if r == resources.len() {
            return false;
        }
        let i = resources[r];
        let node = i / self.types;
        let t = i % self.types;
        let new_node = node != last_node;
        let take_max = free[i].min(remaining);
        if !new_node || nodes_used < self.jobs[j].max_nodes {
            for take in (1..=take_max).rev() {
                free[i] -= take;
                parts.push(Part {
                    node: crate::cluster::NodeId(node as u32),
                    gpu_type: GpuType(t as u16),
                    gpus: take,
                });
                let used = if new_node { nodes_used + 1 } else { nodes_used };
                let found = self.enumerate(
                    moves,
                    k,
                    resources,
                    r + 1,
                    remaining - take,
                    used,
                    node,
                    parts,
                    free,
                    chosen,
                );
                parts.pop();
                free[i] += take;
                if found {
                    return true;
                }
                if self.aborted {
                    return false;
                }
            }
        }
        // Skipping this resource: `last_node` stays the last node actually used.
        self.enumerate(
            moves,
            k,
            resources,
            r + 1,
            remaining,
            nodes_used,
            last_node,
            parts,
            free,
            chosen,
        )
    }
}
