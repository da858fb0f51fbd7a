//! Type commitment: the GPU type a waiting job not held to types may be started on this round.
//!
//! Hadar's plan starts a job on a free slow type (work conservation) expecting to move it to a
//! fast one later. On Slurm a move is a checkpoint, a requeue and a restart, and a job whose
//! request names types never leaves them (Slurm 22.05 keeps every type a job was given); when
//! the daemon held every job to its first types, that expectation made jobs run many times
//! longer on K80s than waiting for a V100 would have taken. So a start is treated as a
//! commitment for the job's remaining work, wherever the plan would not move the job later.
//!
//! So each round, before planning, the served policy ([`super::served`]) looks ahead with a list schedule: GPUs busy
//! with running and starting jobs stay busy until their predicted ends; then the waiting
//! jobs, one after the other, each take the node and type where they would finish first
//! (earliest finish time, whole remaining work at that type's rate; a job that could only
//! start later also waits for the round that notices the freed GPUs), the queue taken in the
//! order that gives the best predicted schedule ([`best_schedule`]). A waiting job not held to
//! types may then use only its chosen type this round: a slow type when running all of its
//! work there ends before waiting for a faster one would, its fast type otherwise. A job that
//! the look-ahead starts only in a later round is left out of this round's plan, so that
//! jobs after it do not take the GPUs it waits for (as Slurm's backfill reserves them).
//! Jobs held to types keep them and are planned as before, and so do started jobs while the
//! look-ahead is on ([`kept_types`]): it counts on them staying until they end.
//!
//! Where a restart costs well under a round, though, the plan does move a job up when a
//! faster type frees ([`Moves`]): its stickiness weighs the restart against the faster rate.
//! There a start on a slow type is no commitment, and holding to it only idles GPUs. So a
//! job the look-ahead would start later is left to the plan when starting it on any free
//! type now and moving it then beats waiting (it does more than a restart's worth of work
//! meanwhile, and the plan would move it), and a started job keeps its types only while
//! moving it to its fastest type would not pay. Where a restart costs a round or more (the
//! daemon's short rounds) neither ever holds, and the look-ahead commits as described.
//! Pure: no Slurm, no clock. [`commit`] is the pass; the rest are its parts.

use super::{JobFacts, JobPhase, TargetFacts, restrict_types};
use crate::job::JobId;
use crate::market::utility::moved_share;
use crate::placement::{Part, Placement};
use crate::{Cluster, JobState};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One node's GPUs per type, in Slurm's names.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCapacity {
    /// The node.
    pub node: String,
    /// `(type, count)` usable by managed jobs.
    pub gpus: Vec<(String, u32)>,
}

/// GPUs held by a running or starting job until a predicted time.
#[derive(Clone, Debug, PartialEq)]
pub struct Busy {
    /// The node.
    pub node: String,
    /// The GPU type.
    pub gpu_type: String,
    /// How many GPUs of the type on the node.
    pub gpus: u32,
    /// When they are expected to be free, seconds since the store's epoch (infinite when
    /// the job's rate is unknown).
    pub until_s: f64,
}

/// A waiting job, in the order the look-ahead takes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Queued {
    /// The job.
    pub job: u64,
    /// GPUs it needs, all on one node.
    pub workers: u32,
    /// Steps left.
    pub remaining_steps: f64,
    /// Its weight from the site's priority ([`crate::site`]): the look-ahead's score counts
    /// its finish time this many times, so of equal jobs the higher-priority one goes first.
    pub weight: f64,
    /// Its steps/s with all its workers on each type it may use (missing or non-positive:
    /// it cannot run there).
    pub rates: Vec<(String, f64)>,
}

/// Where the look-ahead puts a waiting job.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The node.
    pub node: String,
    /// The GPU type.
    pub gpu_type: String,
    /// When it would start, seconds since the epoch.
    pub start_s: f64,
    /// When it would finish.
    pub finish_s: f64,
}

impl Choice {
    /// Whether the job would start in this round (at `now_s`).
    pub fn starts_now(&self, now_s: f64) -> bool {
        self.start_s <= now_s
    }
}

/// The look-ahead: for each queued job that fits on one node of some type it may use, where
/// it would finish first. `now_s` is the round's time; `next_round_s` is the delay before a
/// job whose GPUs free up later can be started (the next round notices the freed GPUs).
/// Each job's GPUs are taken in the look-ahead until its predicted finish, so later jobs see
/// the queue ahead of them. Ties go to the faster type, then to the tightest fit (fewest
/// GPUs of the pool left free), then to the earlier node.
pub fn look_ahead(
    nodes: &[NodeCapacity],
    busy: &[Busy],
    queue: &[Queued],
    now_s: f64,
    next_round_s: f64,
) -> BTreeMap<u64, Choice> {
    // free[(node, type)]: one entry per GPU, the time it is free.
    let mut free: Vec<((usize, String), Vec<f64>)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for (t, c) in &n.gpus {
            if *c > 0 {
                free.push(((i, t.clone()), vec![now_s; *c as usize]));
            }
        }
    }
    for b in busy {
        let Some(i) = nodes.iter().position(|n| n.node == b.node) else {
            continue;
        };
        if let Some((_, slots)) = free
            .iter_mut()
            .find(|((n, t), _)| *n == i && t.eq_ignore_ascii_case(&b.gpu_type))
        {
            // The earliest-free GPUs are the ones this job holds: the pool starts all free.
            slots.sort_by(f64::total_cmp);
            for s in slots.iter_mut().take(b.gpus as usize) {
                *s = s.max(b.until_s);
            }
        }
    }
    let mut out = BTreeMap::new();
    for q in queue {
        if q.workers == 0 || q.remaining_steps.is_nan() {
            continue;
        }
        let mut best: Option<(f64, f64, usize, usize, Choice)> = None;
        for (slot_index, ((node, t), slots)) in free.iter_mut().enumerate() {
            let Some(rate) = q
                .rates
                .iter()
                .find(|(u, _)| u.eq_ignore_ascii_case(t))
                .map(|(_, r)| *r)
                .filter(|r| *r > 0.0 && r.is_finite())
            else {
                continue;
            };
            if slots.len() < q.workers as usize {
                continue;
            }
            slots.sort_by(f64::total_cmp);
            let ready = slots[q.workers as usize - 1];
            let start = if ready <= now_s {
                now_s
            } else {
                ready + next_round_s
            };
            let finish = start + q.remaining_steps.max(0.0) / rate;
            // GPUs of the pool still free when the job starts, besides its own: fewer is a
            // tighter fit, which keeps whole nodes for larger jobs.
            let spare = slots.iter().filter(|s| **s <= ready).count() - q.workers as usize;
            let better = match &best {
                None => true,
                Some((f, r, sp, _, _)) => {
                    finish < *f || (finish == *f && (rate > *r || (rate == *r && spare < *sp)))
                }
            };
            if better {
                best = Some((
                    finish,
                    rate,
                    spare,
                    slot_index,
                    Choice {
                        node: nodes[*node].node.clone(),
                        gpu_type: t.clone(),
                        start_s: start,
                        finish_s: finish,
                    },
                ));
            }
        }
        if let Some((finish, _, _, slot_index, choice)) = best {
            let slots = &mut free[slot_index].1;
            for s in slots.iter_mut().take(q.workers as usize) {
                *s = finish;
            }
            out.insert(q.job, choice);
        }
    }
    out
}

/// Weight of the predicted makespan against the sum of predicted finish times in
/// [`schedule_score`]. Both matter to users; on a model of the comparison workload
/// (`hadar-serve-compare`, 12 seeds) the sum alone let single long jobs end late, the
/// makespan alone delayed short jobs, and 2 beat Slurm alone on both in 11 of 12.
pub const MAKESPAN_WEIGHT: f64 = 2.0;

/// How far into the queue [`best_schedule`] exchanges jobs: the jobs that can start soon.
pub const SEARCH_WINDOW: usize = 32;

/// The work [`best_schedule`] may do in one round, counted as jobs times GPU pools (a node's
/// GPUs of one type) looked at: the order search stops once it is spent, so a large queue on
/// a large cluster is searched less. At least the starting orders are always tried.
pub const SEARCH_BUDGET: usize = 2_000_000;

/// How good a look-ahead is, lower being better: the sum of the queued jobs' predicted
/// finish times plus [`MAKESPAN_WEIGHT`] times the predicted makespan (busy GPUs' ends
/// included), in seconds from `now_s`.
pub fn schedule_score(choices: &BTreeMap<u64, Choice>, busy: &[Busy], now_s: f64) -> f64 {
    weighted_score(choices, busy, now_s, &HashMap::new())
}

/// [`schedule_score`] with each job's finish time counted `weights[job]` times (1 when
/// missing).
fn weighted_score(
    choices: &BTreeMap<u64, Choice>,
    busy: &[Busy],
    now_s: f64,
    weights: &HashMap<u64, f64>,
) -> f64 {
    let sum: f64 = choices
        .iter()
        .map(|(j, c)| weights.get(j).copied().unwrap_or(1.0) * (c.finish_s - now_s))
        .sum();
    let last = choices
        .values()
        .map(|c| c.finish_s)
        .chain(busy.iter().map(|b| b.until_s).filter(|u| u.is_finite()))
        .fold(now_s, f64::max);
    sum + MAKESPAN_WEIGHT * (last - now_s)
}

/// The look-ahead over the best order of the queue found: the order a look-ahead takes jobs
/// in decides who gets the fast GPUs first, and arrival order alone (first come, first
/// served, as Slurm) leaves short jobs behind long ones and long ones on slow types. Tries
/// arrival order, shortest and longest first (remaining time at the job's fastest type,
/// alone and times its GPU count), then exchanges pairs of jobs among the first
/// [`SEARCH_WINDOW`] while that lowers [`schedule_score`], within [`SEARCH_BUDGET`]. Ties
/// keep the earlier candidate (arrival order first). Deterministic.
pub fn best_schedule(
    nodes: &[NodeCapacity],
    busy: &[Busy],
    queue: &[Queued],
    now_s: f64,
    next_round_s: f64,
) -> BTreeMap<u64, Choice> {
    let fastest = |q: &Queued| {
        let best = q
            .rates
            .iter()
            .map(|(_, r)| *r)
            .filter(|r| *r > 0.0 && r.is_finite())
            .fold(0.0, f64::max);
        if best > 0.0 {
            q.remaining_steps.max(0.0) / best
        } else {
            f64::INFINITY
        }
    };
    let key =
        |q: &Queued, by_gpus: bool| fastest(q) * if by_gpus { f64::from(q.workers) } else { 1.0 };
    let mut candidates: Vec<Vec<Queued>> = vec![queue.to_vec()];
    for by_gpus in [false, true] {
        let mut shortest = queue.to_vec();
        shortest.sort_by(|a, b| key(a, by_gpus).total_cmp(&key(b, by_gpus)));
        let mut longest = queue.to_vec();
        longest.sort_by(|a, b| key(b, by_gpus).total_cmp(&key(a, by_gpus)));
        candidates.push(shortest);
        candidates.push(longest);
    }
    let pools: usize = nodes
        .iter()
        .map(|n| n.gpus.iter().filter(|(_, c)| *c > 0).count())
        .sum();
    let max_evaluations = SEARCH_BUDGET / (queue.len().max(1) * pools.max(1));
    let mut evaluations = 0usize;
    let weights: HashMap<u64, f64> = queue
        .iter()
        .filter(|q| q.weight.is_finite() && q.weight > 0.0)
        .map(|q| (q.job, q.weight))
        .collect();
    let evaluate = |order: &[Queued], evaluations: &mut usize| {
        *evaluations += 1;
        let c = look_ahead(nodes, busy, order, now_s, next_round_s);
        let score = weighted_score(&c, busy, now_s, &weights);
        (score, c)
    };
    let mut best: Option<(f64, Vec<Queued>, BTreeMap<u64, Choice>)> = None;
    for order in candidates {
        let (score, c) = evaluate(&order, &mut evaluations);
        if best.as_ref().is_none_or(|(b, _, _)| score < *b) {
            best = Some((score, order, c));
        }
    }
    let Some((mut score, mut order, mut choices)) = best else {
        return BTreeMap::new();
    };
    let window = order.len().min(SEARCH_WINDOW);
    let mut improved = true;
    while improved && evaluations < max_evaluations {
        improved = false;
        for i in 0..window {
            for k in i + 1..window {
                if evaluations >= max_evaluations {
                    break;
                }
                order.swap(i, k);
                let (s, c) = evaluate(&order, &mut evaluations);
                if s < score {
                    score = s;
                    choices = c;
                    improved = true;
                } else {
                    order.swap(i, k);
                }
            }
        }
    }
    choices
}

/// The plan's restart economics: a running job moves from one rate to a faster one only
/// when the faster rate, less the restart's share of a round, still beats staying (the
/// stickiness of [`crate::market::JobUtility::at`] and `best_offer`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moves {
    /// The round, seconds.
    pub round_s: f64,
    /// What a move costs a job, seconds.
    pub restart_s: f64,
}

impl Moves {
    /// The same economics for `job`, at its own restart cost where it has one.
    pub fn of(self, job: &crate::Job) -> Moves {
        Moves {
            restart_s: job.restart_or(self.restart_s),
            ..self
        }
    }

    /// Whether the plan would move a job running at `from` steps/s to free GPUs where it
    /// runs at `to`.
    pub fn pay(&self, from: f64, to: f64) -> bool {
        from > 0.0 && to * moved_share(self.round_s, self.restart_s) > from
    }

    /// Whether starting a job now at `slow` steps/s and moving it to its chosen type
    /// (`chosen` steps/s) when that frees in `wait_s` beats waiting for it: it does more
    /// than a restart's worth of the chosen type's work meanwhile, and the plan would move it.
    pub fn beat_waiting(&self, slow: f64, chosen: f64, wait_s: f64) -> bool {
        chosen > 0.0 && wait_s * slow / chosen > self.restart_s.max(0.0) && self.pay(slow, chosen)
    }
}

/// The GPU types a started job keeps while the look-ahead is on: those of its current
/// placement, for a running, starting or preempting job that the target does not already hold
/// to types (`None` otherwise). The look-ahead counts on started jobs staying where they are
/// until they end; a move to another type would take GPUs it keeps for a waiting job, which
/// then waits longer, while the moved job pays a checkpoint and a restart.
pub fn kept_types(facts: &JobFacts) -> Option<Vec<String>> {
    if facts.held_types.is_some() || !facts.phase.is_started() {
        return None;
    }
    let types: BTreeSet<String> = facts.holds.iter().map(|(_, t, _)| t.clone()).collect();
    (!types.is_empty()).then(|| types.into_iter().collect())
}

/// The look-ahead's inputs: each node's GPUs per type, the GPUs of running, starting and
/// preempting jobs until `now_s` plus their remaining steps at their placement's rate (by the
/// profile the plan uses, else the job's last reported rate, else never), and the waiting jobs
/// in the order of `states` (arrival order) with their rates on every type they may use.
/// `facts` gives phases and held GPUs in the target's names; a job without facts is left out.
pub fn inputs(
    cluster: &Cluster,
    states: &[JobState],
    facts: &TargetFacts,
    now_s: f64,
) -> (Vec<NodeCapacity>, Vec<Busy>, Vec<Queued>) {
    let nodes = cluster
        .nodes()
        .iter()
        .map(|n| NodeCapacity {
            node: n.name.clone(),
            gpus: cluster
                .types()
                .map(|t| (cluster.type_name(t).to_string(), n.gpus[t.index()]))
                .filter(|(_, c)| *c > 0)
                .collect(),
        })
        .collect();
    let mut busy = Vec::new();
    let mut queue = Vec::new();
    for js in states {
        let Some(f) = facts.jobs.get(&js.id()) else {
            continue;
        };
        let workers = js.job.workers;
        if f.phase.is_started() {
            let rate = js
                .placement
                .as_ref()
                .map(|p| p.rate(&js.job.throughput, workers))
                .filter(|r| *r > 0.0)
                .or(f.last_rate.filter(|r| *r > 0.0));
            let until_s = match rate {
                Some(r) => now_s + js.remaining_steps.max(0.0) / r,
                None => f64::INFINITY,
            };
            for (node, t, c) in &f.holds {
                busy.push(Busy {
                    node: node.clone(),
                    gpu_type: t.clone(),
                    gpus: *c,
                    until_s,
                });
            }
        } else {
            queue.push(Queued {
                job: js.id().0,
                workers,
                remaining_steps: js.remaining_steps,
                weight: js.job.weight,
                rates: cluster
                    .types()
                    .map(|t| {
                        (
                            cluster.type_name(t).to_string(),
                            js.job.throughput.rate_or_zero(t, workers),
                        )
                    })
                    .collect(),
            });
        }
    }
    (nodes, busy, queue)
}

/// What the look-ahead did to a round's jobs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Commitments {
    /// Each waiting job not held to types, where the look-ahead puts it.
    pub choices: BTreeMap<JobId, Choice>,
    /// The jobs whose types it limited, with the types left to them (the chosen type of a
    /// committed job; the current types of a started one).
    pub restricted: BTreeMap<JobId, Vec<String>>,
}

impl Commitments {
    /// The jobs it leaves for a later round.
    pub fn deferred(&self, now_s: f64) -> impl Iterator<Item = (&JobId, &Choice)> {
        self.choices
            .iter()
            .filter(move |(_, c)| !c.starts_now(now_s))
    }
}

/// The pass: restricts each waiting job not held to types to the GPU type the look-ahead over
/// the queue chooses for it, and returns the choices. Moving a job later costs a checkpoint, a
/// requeue and a restart, so it may use only the type where its remaining work ends first;
/// one the look-ahead starts only in a later round is left out of `states`, so that jobs
/// after it do not take the GPUs it waits for (as Slurm's backfill reserves them), unless
/// starting it elsewhere now and moving it then beats waiting (`moves`); a started job not
/// held to types keeps its current types unless moving it to its fastest type would pay.
/// `moves.round_s` is also the delay before a round notices freed GPUs.
pub fn commit(
    cluster: &Cluster,
    states: &mut Vec<JobState>,
    facts: &TargetFacts,
    now_s: f64,
    moves: Moves,
) -> Commitments {
    let (nodes, busy, queue) = inputs(cluster, states, facts, now_s);
    let mut choices: BTreeMap<JobId, Choice> =
        best_schedule(&nodes, &busy, &queue, now_s, moves.round_s)
            .into_iter()
            .map(|(id, c)| (JobId(id), c))
            .collect();
    choices.retain(|id, _| {
        facts
            .jobs
            .get(id)
            .is_some_and(|f| f.phase == JobPhase::Waiting && f.held_types.is_none())
    });
    let queued: HashMap<u64, &Queued> = queue.iter().map(|q| (q.job, q)).collect();
    let own_moves: HashMap<JobId, Moves> = states
        .iter()
        .map(|js| (js.id(), moves.of(&js.job)))
        .collect();
    choices.retain(|id, c| {
        c.starts_now(now_s)
            || !queued.get(&id.0).is_some_and(|q| {
                let moves = own_moves.get(id).copied().unwrap_or(moves);
                q.starting_elsewhere_beats(c, now_s, moves)
            })
    });
    states.retain(|js| choices.get(&js.id()).is_none_or(|c| c.starts_now(now_s)));
    let mut restricted = BTreeMap::new();
    for js in states.iter_mut() {
        let id = js.id();
        let Some(choice) = choices.get(&id) else {
            // A started job keeps its types, as the look-ahead counted on: moving it to
            // GPUs the look-ahead keeps for a waiting job would undo both choices. Unless
            // the plan would move it up anyway, where a restart is cheap.
            if let Some(kept) = facts
                .jobs
                .get(&id)
                .and_then(kept_types)
                .filter(|_| !moving_up_pays(js, moves))
            {
                restrict_types(cluster, js, &kept);
                restricted.insert(id, kept);
            }
            continue;
        };
        let only = vec![choice.gpu_type.clone()];
        restrict_types(cluster, js, &only);
        restricted.insert(id, only);
        // The GPUs the look-ahead starts it on are given to the plan as the job's
        // placement, as for a job being started: the plan holds them for it until its
        // turn and keeps it there unless moving gains more than a restart, so the plan
        // packs jobs as the look-ahead did (a job starting now on other GPUs could leave a
        // larger one that was counted on no room).
        js.placement = match (
            cluster.node_by_name(&choice.node),
            cluster.type_by_name(&choice.gpu_type),
        ) {
            (Some(node), Some(gpu_type)) => Some(Placement::gang([Part {
                node,
                gpu_type,
                gpus: js.job.workers,
            }])),
            _ => None,
        };
    }
    Commitments {
        choices,
        restricted,
    }
}

/// Whether the plan would move started job `js` from its placement to its fastest type.
fn moving_up_pays(js: &JobState, moves: Moves) -> bool {
    let workers = js.job.workers;
    let Some((_, best)) = js.job.throughput.fastest(workers) else {
        return false;
    };
    js.placement.as_ref().is_some_and(|p| {
        moves
            .of(&js.job)
            .pay(p.rate(&js.job.throughput, workers), best)
    })
}

impl Queued {
    /// Whether starting it now on its slowest usable type and moving it to its choice `c`
    /// when that frees beats waiting for `c`.
    fn starting_elsewhere_beats(&self, c: &Choice, now_s: f64, moves: Moves) -> bool {
        let chosen = self
            .rates
            .iter()
            .find(|(t, _)| *t == c.gpu_type)
            .map_or(0.0, |(_, r)| *r);
        let slowest = self
            .rates
            .iter()
            .map(|(_, r)| *r)
            .filter(|r| *r > 0.0)
            .fold(f64::INFINITY, f64::min);
        slowest.is_finite() && moves.beat_waiting(slowest, chosen, c.start_s - now_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Vec<NodeCapacity> {
        vec![
            NodeCapacity {
                node: "n1".into(),
                gpus: vec![("v100".into(), 4)],
            },
            NodeCapacity {
                node: "n3".into(),
                gpus: vec![("k80".into(), 4)],
            },
        ]
    }

    fn job(id: u64, workers: u32, steps: f64, v100: f64, k80: f64) -> Queued {
        Queued {
            job: id,
            workers,
            remaining_steps: steps,
            weight: 1.0,
            rates: vec![("v100".into(), v100), ("k80".into(), k80)],
        }
    }

    fn busy_v100(gpus: u32, until: f64) -> Busy {
        Busy {
            node: "n1".into(),
            gpu_type: "v100".into(),
            gpus,
            until_s: until,
        }
    }

    #[test]
    fn a_free_fast_type_is_taken_at_once() {
        let c = look_ahead(&cluster(), &[], &[job(1, 2, 100.0, 10.0, 2.0)], 0.0, 3.0);
        assert_eq!(c[&1].gpu_type, "v100");
        assert!(c[&1].starts_now(0.0));
        assert_eq!(c[&1].finish_s, 10.0);
    }

    #[test]
    fn a_job_waits_for_its_fast_type_when_the_slow_one_would_end_later() {
        // V100s busy for 20 s more: waiting (20 + 3 + 10 = 33 s) beats 50 s on K80s.
        let c = look_ahead(
            &cluster(),
            &[busy_v100(4, 20.0)],
            &[job(1, 2, 100.0, 10.0, 2.0)],
            0.0,
            3.0,
        );
        assert_eq!(c[&1].gpu_type, "v100");
        assert!(!c[&1].starts_now(0.0));
        assert_eq!(c[&1].start_s, 23.0);
        assert_eq!(c[&1].finish_s, 33.0);
    }

    #[test]
    fn a_job_takes_the_slow_type_when_its_whole_run_there_ends_first() {
        // V100s busy for 100 s: 50 s on K80s now is better.
        let c = look_ahead(
            &cluster(),
            &[busy_v100(4, 100.0)],
            &[job(1, 2, 100.0, 10.0, 2.0)],
            0.0,
            3.0,
        );
        assert_eq!(c[&1].gpu_type, "k80");
        assert!(c[&1].starts_now(0.0));
        assert_eq!(c[&1].finish_s, 50.0);
    }

    #[test]
    fn later_jobs_see_the_queue_ahead_of_them() {
        // Four 4-GPU jobs of 10 s on V100 (40 s on K80): the first takes the V100s; the
        // second ends sooner queued for them (10 + 3 + 10 = 23 s) than on the K80s (40 s),
        // and so does the third (36 s); the fourth would end at 49 s and takes the K80s.
        let q: Vec<Queued> = (1..=4).map(|i| job(i, 4, 100.0, 10.0, 2.5)).collect();
        let c = look_ahead(&cluster(), &[], &q, 0.0, 3.0);
        let types: Vec<&str> = (1..=4).map(|i| c[&i].gpu_type.as_str()).collect();
        assert_eq!(types, ["v100", "v100", "v100", "k80"]);
        assert_eq!(c[&2].finish_s, 23.0);
        assert_eq!(c[&3].finish_s, 36.0);
        assert!(c[&4].starts_now(0.0));
    }

    #[test]
    fn jobs_fit_on_one_node_and_only_on_types_they_can_use() {
        let nodes = vec![
            NodeCapacity {
                node: "n4".into(),
                gpus: vec![("v100".into(), 2), ("k80".into(), 2)],
            },
            NodeCapacity {
                node: "n3".into(),
                gpus: vec![("k80".into(), 4)],
            },
        ];
        // 4 GPUs fit only on n3's K80s, however fast the V100s are.
        let c = look_ahead(&nodes, &[], &[job(1, 4, 100.0, 50.0, 1.0)], 0.0, 3.0);
        assert_eq!(
            (c[&1].node.as_str(), c[&1].gpu_type.as_str()),
            ("n3", "k80")
        );
        // A job that cannot run on K80 waits for the V100s, however long.
        let c = look_ahead(
            &nodes,
            &[Busy {
                node: "n4".into(),
                gpu_type: "v100".into(),
                gpus: 2,
                until_s: 500.0,
            }],
            &[job(2, 1, 100.0, 10.0, 0.0)],
            0.0,
            3.0,
        );
        assert_eq!((c[&2].gpu_type.as_str(), c[&2].start_s), ("v100", 503.0));
        // Too large for any node: no choice, the plan decides.
        assert!(look_ahead(&nodes, &[], &[job(3, 5, 1.0, 1.0, 1.0)], 0.0, 3.0).is_empty());
    }

    #[test]
    fn ties_go_to_the_tightest_fit_so_whole_nodes_stay_free() {
        let nodes = vec![
            NodeCapacity {
                node: "n3".into(),
                gpus: vec![("k80".into(), 4)],
            },
            NodeCapacity {
                node: "n4".into(),
                gpus: vec![("v100".into(), 2), ("k80".into(), 2)],
            },
        ];
        let k80_only = |id, workers| Queued {
            job: id,
            workers,
            remaining_steps: 10.0,
            weight: 1.0,
            rates: vec![("k80".into(), 1.0)],
        };
        let c = look_ahead(&nodes, &[], &[k80_only(1, 2), k80_only(2, 4)], 0.0, 3.0);
        assert_eq!(c[&1].node, "n4");
        assert_eq!(c[&2].node, "n3");
        assert!(c[&2].starts_now(0.0));
    }

    /// A 2-worker job: 10 steps/s on V100 (`v100`), 2 on K80, `remaining` steps left.
    fn two_worker(cluster: &Cluster, id: u64, v100: Option<f64>, remaining: f64) -> JobState {
        use crate::{Job, RateCurve, ThroughputProfile};
        use std::sync::Arc;
        let curve =
            |r: Option<f64>| r.map_or_else(RateCurve::default, |r| RateCurve::new([(2, r)]));
        let job = Arc::new(Job {
            restart_s: None,
            id: JobId(id),
            kind: String::new(),
            arrival_s: 0.0,
            workers: 2,
            total_steps: 1000.0,
            weight: 1.0,
            throughput: ThroughputProfile::new(vec![curve(v100), curve(Some(2.0))]),
        });
        let mut js = JobState::arrived(job, cluster.type_count());
        js.remaining_steps = remaining;
        js
    }

    fn on_n1() -> Vec<(String, String, u32)> {
        vec![("n1".into(), "v100".into(), 2)]
    }

    fn started(phase: JobPhase, holds: Vec<(String, String, u32)>) -> JobFacts {
        JobFacts {
            phase,
            holds,
            ..JobFacts::waiting()
        }
    }

    #[test]
    fn inputs_hold_running_jobs_until_their_predicted_end_and_queue_the_waiting() {
        let cluster = crate::passes::two_node_cluster();
        let n1 = cluster.node_by_name("n1").unwrap();
        let v100 = cluster.type_by_name("v100").unwrap();
        let held = Placement::gang([Part {
            node: n1,
            gpu_type: v100,
            gpus: 2,
        }]);
        let mut states = vec![
            two_worker(&cluster, 1, Some(10.0), 100.0),
            two_worker(&cluster, 2, None, 100.0),
            two_worker(&cluster, 3, Some(10.0), 500.0),
            two_worker(&cluster, 5, Some(10.0), 500.0),
        ];
        states[0].placement = Some(held.clone());
        states[1].placement = Some(held);
        let facts = TargetFacts {
            jobs: [
                (JobId(1), started(JobPhase::Running, on_n1())),
                (JobId(2), started(JobPhase::Starting, on_n1())),
                (JobId(3), JobFacts::waiting()),
            ]
            .into_iter()
            .collect(),
            node_types: BTreeMap::new(),
        };
        let (nodes, busy, queue) = inputs(&cluster, &states, &facts, 50.0);
        assert_eq!(nodes[0].gpus, vec![("v100".to_string(), 4)]);
        assert_eq!(nodes[1].gpus, vec![("k80".to_string(), 4)]);
        assert_eq!(busy.len(), 2);
        assert_eq!((busy[0].gpus, busy[0].until_s), (2, 60.0));
        assert!(busy[1].until_s.is_infinite(), "no rate known: {busy:?}");
        assert_eq!(queue.len(), 1, "job 5 has no facts: left out");
        assert_eq!(queue[0].job, 3);
        assert_eq!(
            queue[0].rates,
            vec![("v100".to_string(), 10.0), ("k80".to_string(), 2.0)]
        );
        // Job 3 waits for the two V100s whose end is known (60 s, then the next round):
        // 63 + 50 = 113 s, against 50 + 250 = 300 s on the K80s now.
        let c = look_ahead(&nodes, &busy, &queue, 50.0, 3.0);
        assert_eq!(
            (c[&3].gpu_type.as_str(), c[&3].start_s, c[&3].finish_s),
            ("v100", 63.0, 113.0)
        );
    }

    #[test]
    fn the_pass_defers_jobs_pins_types_and_keeps_started_jobs_on_theirs() {
        let cluster = crate::passes::two_node_cluster();
        let n1 = cluster.node_by_name("n1").unwrap();
        let v100 = cluster.type_by_name("v100").unwrap();
        let k80 = cluster.type_by_name("k80").unwrap();
        // Job 1 runs on 2 of n1's V100s for 10 s more; jobs 2 to 4 wait, job 4 held to K80
        // by the target. The V100s are worth waiting for (5 times the K80s' rate), so at
        // least one waiting job is left for a later round.
        let mut states = vec![
            two_worker(&cluster, 1, Some(10.0), 100.0),
            two_worker(&cluster, 2, Some(10.0), 1000.0),
            two_worker(&cluster, 3, Some(10.0), 100.0),
            two_worker(&cluster, 4, Some(10.0), 100.0),
        ];
        states[0].placement = Some(Placement::gang([Part {
            node: n1,
            gpu_type: v100,
            gpus: 2,
        }]));
        let mut facts = TargetFacts::default();
        facts
            .jobs
            .insert(JobId(1), started(JobPhase::Running, on_n1()));
        facts.jobs.insert(JobId(2), JobFacts::waiting());
        facts.jobs.insert(JobId(3), JobFacts::waiting());
        facts.jobs.insert(
            JobId(4),
            JobFacts {
                held_types: Some(vec!["k80".into()]),
                ..JobFacts::waiting()
            },
        );
        let c = commit(
            &cluster,
            &mut states,
            &facts,
            0.0,
            Moves {
                round_s: 3.0,
                restart_s: 3.0,
            },
        );
        assert!(
            !c.choices.contains_key(&JobId(4)),
            "held jobs keep their types"
        );
        assert_eq!(c.restricted[&JobId(1)], vec!["v100".to_string()]);
        for (id, choice) in c.choices.iter().filter(|(_, c)| c.starts_now(0.0)) {
            assert_eq!(c.restricted[id], vec![choice.gpu_type.clone()]);
        }
        let deferred: Vec<JobId> = c.deferred(0.0).map(|(id, _)| *id).collect();
        let planned: Vec<JobId> = states.iter().map(|s| s.id()).collect();
        for id in &deferred {
            assert!(!planned.contains(id), "{id} deferred but planned");
        }
        assert!(!deferred.is_empty(), "{c:?}");
        assert_eq!(planned.len() + deferred.len(), 4);
        for js in states.iter().filter(|s| c.choices.contains_key(&s.id())) {
            let t = cluster.type_by_name(&c.choices[&js.id()].gpu_type).unwrap();
            let other = if t == v100 { k80 } else { v100 };
            assert_eq!(js.job.throughput.rate(other, 2), None, "pinned to {t:?}");
            assert_eq!(js.placement.as_ref().unwrap().types(), vec![t]);
        }
    }

    #[test]
    fn where_a_restart_is_cheap_long_waits_are_not_held_and_slow_starts_not_kept() {
        let cluster = crate::passes::two_node_cluster();
        let n1 = cluster.node_by_name("n1").unwrap();
        let n3 = cluster.node_by_name("n3").unwrap();
        let v100 = cluster.type_by_name("v100").unwrap();
        let k80 = cluster.type_by_name("k80").unwrap();
        let on = |node, gpu_type| {
            Placement::gang([Part {
                node,
                gpu_type,
                gpus: 2,
            }])
        };
        // Job 1 holds 2 of n1's V100s for 500 s more, job 2 the other two for 10 s, job 3
        // runs on K80s at a fifth of its V100 rate; jobs 4 and 5 wait. Neither wait is
        // worth a K80 start when a restart costs the whole round; with 360 s rounds and
        // 60 s restarts, a 500 s wait does 100 s of V100 work on K80s first.
        let setup = || {
            let mut states = vec![
                two_worker(&cluster, 1, Some(10.0), 5000.0),
                two_worker(&cluster, 2, Some(10.0), 100.0),
                two_worker(&cluster, 3, Some(10.0), 1000.0),
                two_worker(&cluster, 4, Some(10.0), 1000.0),
                two_worker(&cluster, 5, Some(10.0), 1000.0),
            ];
            states[0].placement = Some(on(n1, v100));
            states[1].placement = Some(on(n1, v100));
            states[2].placement = Some(on(n3, k80));
            let mut facts = TargetFacts::default();
            facts
                .jobs
                .insert(JobId(1), started(JobPhase::Running, on_n1()));
            facts
                .jobs
                .insert(JobId(2), started(JobPhase::Running, on_n1()));
            facts.jobs.insert(
                JobId(3),
                started(JobPhase::Running, vec![("n3".into(), "k80".into(), 2)]),
            );
            facts.jobs.insert(JobId(4), JobFacts::waiting());
            facts.jobs.insert(JobId(5), JobFacts::waiting());
            (states, facts)
        };
        let (mut states, facts) = setup();
        let costly = Moves {
            round_s: 3.0,
            restart_s: 3.0,
        };
        let c = commit(&cluster, &mut states, &facts, 0.0, costly);
        assert_eq!(c.deferred(0.0).count(), 2, "{c:?}");
        assert_eq!(states.len(), 3);
        assert_eq!(c.restricted[&JobId(3)], vec!["k80".to_string()]);

        let (mut states, facts) = setup();
        let cheap = Moves {
            round_s: 360.0,
            restart_s: 60.0,
        };
        let c = commit(&cluster, &mut states, &facts, 0.0, cheap);
        // A job waiting for V100s waits at least the round that notices them free (370 s),
        // 74 s of V100 work on K80s: none is held out. One may start now (on the free K80s,
        // committed there); any other is left to the plan with every type.
        assert_eq!(c.deferred(0.0).count(), 0, "{c:?}");
        assert_eq!(states.len(), 5);
        let mut released = 0;
        for id in [JobId(4), JobId(5)] {
            let js = states.iter().find(|s| s.id() == id).unwrap();
            match c.choices.get(&id) {
                Some(choice) => {
                    assert!(choice.starts_now(0.0));
                    assert_eq!(c.restricted[&id], vec![choice.gpu_type.clone()]);
                }
                None => {
                    released += 1;
                    assert!(!c.restricted.contains_key(&id));
                    assert_eq!(js.job.throughput.rate(k80, 2), Some(2.0));
                    assert_eq!(js.job.throughput.rate(v100, 2), Some(10.0));
                }
            }
        }
        assert!(released > 0, "{c:?}");
        // Job 3 may move up to the V100s (10 x 300/360 > 2); jobs 1 and 2 are on their
        // fastest type and keep it.
        assert!(!c.restricted.contains_key(&JobId(3)), "{c:?}");
        assert_eq!(c.restricted[&JobId(1)], vec!["v100".to_string()]);
    }

    #[test]
    fn a_move_pays_only_when_the_faster_rate_outruns_the_restart() {
        let m = Moves {
            round_s: 360.0,
            restart_s: 60.0,
        };
        assert!(m.pay(2.0, 10.0));
        assert!(!m.pay(9.0, 10.0), "300/360 of 10 is under 9");
        assert!(!m.pay(0.0, 10.0), "a job that does not run is not moved");
        let never = Moves {
            round_s: 3.0,
            restart_s: 3.0,
        };
        assert!(!never.pay(0.1, 1000.0));
        assert!(!never.beat_waiting(2.0, 10.0, 1e6));
        // 400 s at a fifth of the rate is 80 s of work, more than a 60 s restart; 250 s is 50.
        assert!(m.beat_waiting(2.0, 10.0, 400.0));
        assert!(!m.beat_waiting(2.0, 10.0, 250.0));
    }

    #[test]
    fn the_search_puts_a_short_job_before_a_long_one_that_arrived_first() {
        let one_v100 = vec![NodeCapacity {
            node: "n1".into(),
            gpus: vec![("v100".into(), 1)],
        }];
        let only_v100 = |id, steps| Queued {
            job: id,
            workers: 1,
            remaining_steps: steps,
            weight: 1.0,
            rates: vec![("v100".into(), 1.0)],
        };
        let queue = vec![only_v100(1, 100.0), only_v100(2, 10.0)];
        let arrival = look_ahead(&one_v100, &[], &queue, 0.0, 3.0);
        assert!(arrival[&1].starts_now(0.0));
        // Arrival order: 100 + 113 plus twice 113; short first: 10 + 113 plus twice 113.
        assert_eq!(schedule_score(&arrival, &[], 0.0), 439.0);
        let best = best_schedule(&one_v100, &[], &queue, 0.0, 3.0);
        assert!(
            best[&2].starts_now(0.0) && !best[&1].starts_now(0.0),
            "{best:?}"
        );
        assert_eq!(schedule_score(&best, &[], 0.0), 349.0);
    }

    #[test]
    fn the_score_counts_busy_gpus_in_the_makespan_only() {
        let c: BTreeMap<u64, Choice> = [(
            1,
            Choice {
                node: "n1".into(),
                gpu_type: "v100".into(),
                start_s: 10.0,
                finish_s: 30.0,
            },
        )]
        .into_iter()
        .collect();
        assert_eq!(schedule_score(&c, &[], 10.0), 20.0 + 2.0 * 20.0);
        let busy = [busy_v100(1, 60.0), busy_v100(1, f64::INFINITY)];
        assert_eq!(schedule_score(&c, &busy, 10.0), 20.0 + 2.0 * 50.0);
    }

    proptest::proptest! {
        #[test]
        fn the_search_never_does_worse_than_arrival_order_and_places_every_job_that_fits(
            jobs in proptest::collection::vec(
                (1u32..=4, 1.0f64..500.0, 0.5f64..20.0, 0.0f64..20.0, 0.0f64..20.0),
                0..12,
            ),
            busy_until in proptest::collection::vec(0.0f64..200.0, 0..4),
        ) {
            let nodes = vec![
                NodeCapacity { node: "n1".into(), gpus: vec![("v100".into(), 4)] },
                NodeCapacity { node: "n2".into(), gpus: vec![("p100".into(), 4)] },
                NodeCapacity { node: "n4".into(), gpus: vec![("v100".into(), 2), ("k80".into(), 2)] },
            ];
            let busy: Vec<Busy> = busy_until.iter().map(|u| busy_v100(1, *u)).collect();
            let queue: Vec<Queued> = jobs
                .iter()
                .enumerate()
                .map(|(i, (w, steps, v, p, k))| Queued {
                    job: i as u64,
                    workers: *w,
                    remaining_steps: *steps,
                    weight: 1.0,
                    rates: vec![("v100".into(), *v), ("p100".into(), *p), ("k80".into(), *k)],
                })
                .collect();
            let arrival = look_ahead(&nodes, &busy, &queue, 5.0, 3.0);
            let best = best_schedule(&nodes, &busy, &queue, 5.0, 3.0);
            proptest::prop_assert!(
                schedule_score(&best, &busy, 5.0) <= schedule_score(&arrival, &busy, 5.0) + 1e-9
            );
            // Any order places the same jobs: those with a type and a node that can hold them.
            let placed: Vec<u64> = best.keys().copied().collect();
            let expected: Vec<u64> = arrival.keys().copied().collect();
            proptest::prop_assert_eq!(placed, expected);
            for (id, c) in &best {
                let q = &queue[*id as usize];
                let rate = q.rates.iter().find(|(t, _)| *t == c.gpu_type).map(|(_, r)| *r);
                proptest::prop_assert!(rate.is_some_and(|r| r > 0.0));
                proptest::prop_assert!(c.start_s >= 5.0 && c.finish_s >= c.start_s);
            }
        }
    }

    #[test]
    fn started_jobs_keep_their_types_unless_the_target_already_holds_them() {
        let mut f = started(
            JobPhase::Running,
            vec![
                ("n4".into(), "v100".into(), 2),
                ("n4".into(), "k80".into(), 1),
            ],
        );
        for (phase, kept) in [
            (JobPhase::Running, true),
            (JobPhase::Starting, true),
            (JobPhase::Preempting, true),
            (JobPhase::Waiting, false),
        ] {
            f.phase = phase;
            assert_eq!(
                kept_types(&f),
                kept.then(|| vec!["k80".to_string(), "v100".to_string()]),
                "{phase:?}"
            );
        }
        f.phase = JobPhase::Running;
        f.held_types = Some(vec!["v100".into()]);
        assert_eq!(
            kept_types(&f),
            None,
            "the target's own hold is planned as before"
        );
        f.held_types = None;
        f.holds.clear();
        assert_eq!(kept_types(&f), None);
    }

    #[test]
    fn busy_gpus_of_unknown_length_are_never_counted_on() {
        let c = look_ahead(
            &cluster(),
            &[busy_v100(4, f64::INFINITY)],
            &[job(1, 1, 100.0, 100.0, 0.1)],
            0.0,
            3.0,
        );
        assert_eq!(c[&1].gpu_type, "k80");
    }
}
