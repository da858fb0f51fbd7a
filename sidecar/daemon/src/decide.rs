//! The round's decision, pure: from a [`RoundSnapshot`] and the configuration, the served
//! policy's plan (look-ahead, site-aware Hadar, Slurm's rules), the placements the daemon
//! can enforce, the actions that carry them out, the forked jobs' rounds (the mixed round's
//! forked plan over what that leaves, [`crate::fork::plan`]), and each job's decision in
//! words. No IO, no clock: the same snapshot gives the same decision.

use crate::actions::{self, Action};
use crate::config::DaemonConfig;
use crate::eligible;
use crate::error::DaemonError;
use crate::fork::{ForkStart, PlainSide};
use crate::snapshot::RoundSnapshot;
use crate::spec::{self, JobSpec, Priors, RateOrigins, RateSource};
use crate::view::{self, ClusterView};
use crate::{exclusive, explain, facts, unmovable};
use hadar_core::gate::Hold;
use hadar_core::passes::enforce::Verdict;
use hadar_core::passes::lookahead::Choice;
use hadar_core::passes::served::{ServedDecision, decide_with};
use hadar_core::policies::hadar::RoundStats;
use hadar_core::site::SiteWaits;
use hadar_core::{Cluster, Job, JobId, JobState, Policy, RoundInput, RoundPlan, WaitReason};
use hadar_formats::ThroughputTable;
use hadar_slurm::{JobStatus, NodeState};
use hadar_store::{Decision, JobRow, NodeGpus, Phase};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// What the round decided.
#[derive(Clone, Debug)]
pub struct RoundDecision {
    /// The cluster as the policy saw it.
    pub cv: ClusterView,
    /// Waiting jobs Slurm would not start yet (user hold, dependency, `--begin`).
    pub blocked: BTreeMap<u64, Hold>,
    /// Jobs whose Slurm request names GPU types.
    pub typed: HashSet<u64>,
    /// The planned jobs' states after the look-ahead.
    pub states: Vec<JobState>,
    /// The core's plan (`None` without a usable cluster).
    pub plan: Option<RoundPlan>,
    /// The planner's statistics (its price bounds).
    pub stats: Option<RoundStats>,
    /// The enforceable placements, job to GPUs.
    pub planned: BTreeMap<u64, NodeGpus>,
    /// Planned jobs whose start the look-ahead defers.
    pub deferred: usize,
    /// The actions that carry the plan out, in order.
    pub actions: Vec<Action>,
    /// The forked jobs' rounds to start, after the actions, on the GPUs they leave.
    pub forks: Vec<ForkStart>,
    /// Each active job's decision in words (a forked job's from the fork pass's plan).
    pub decisions: Vec<Decision>,
}

/// The served policy's output translated into Slurm's names and checked for what the
/// daemon can enforce.
#[derive(Default)]
struct Translated {
    planned: BTreeMap<u64, NodeGpus>,
    unenforceable: Vec<(u64, String)>,
    commitments: BTreeMap<u64, Choice>,
}

/// Decides the round from `snap`, planning the plain jobs with `policy` (the round policy
/// of `[sidecar] policy`, [`DaemonConfig::round_policy`]; one that keeps books across rounds,
/// such as Gavel's or Tiresias', is given the same one every round).
///
/// The round's stages, in order: gate (what Slurm would not start, what can no longer
/// move), view (the GPUs the policy may use), narrow (each planned job's rates, its weight
/// from the site's priority, and the jobs the site's reservations and limits hold back),
/// plan (the served passes around `policy`, within the site's rules), judge (exclusive
/// nodes), act (the actions), explain (each job's decision in words), fork (the forked
/// jobs' rounds over what is left).
pub fn decide(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    table: &ThroughputTable,
    policy: &mut dyn Policy,
) -> Result<RoundDecision, DaemonError> {
    let unmovable = unmovable::unmovable(&snap.rows, &snap.slurm_jobs);
    let blocked = blocked(snap);
    let (cv, exclusive_ids, busy) = cluster_view(snap, config, &unmovable);
    let priors = priors(config);
    let mut origins: BTreeMap<u64, RateOrigins> = BTreeMap::new();
    let (states, site_waits) = match &cv.cluster {
        Some(cluster) => job_states(
            snap,
            config,
            table,
            &priors,
            cluster,
            &cv.types,
            &blocked,
            &unmovable,
            &mut origins,
        ),
        None => (Vec::new(), SiteWaits::default()),
    };
    let typed = typed_requests(snap);
    // The forked plan needs where the plain jobs run now; the look-ahead's states carry
    // the placements it pins instead.
    let current = states.clone();
    let mut planned = match &cv.cluster {
        Some(cluster) => {
            let d = served(snap, config, cluster, &states, &typed, &site_waits, policy)?;
            let restricted = &d.commitments.restricted;
            kept_origins(snap, table, &priors, restricted, &cv.types, &mut origins);
            Planned {
                t: translate(&snap.rows, cluster, &d),
                states: d.jobs,
                plan: Some(d.plan),
                stats: policy.last_round_stats(),
            }
        }
        None => Planned::default(),
    };
    judge_exclusive(snap, &mut planned.t, &exclusive_ids, &busy);
    let actions = enforcement(snap, &planned.t.planned, &unmovable);
    let mut decisions = explain_round(
        snap,
        config,
        &cv,
        &planned,
        &origins,
        &blocked,
        &unmovable,
        &site_waits,
    );
    let plain = PlainSide {
        cv: &cv,
        states: &current,
        planned: &planned.t.planned,
    };
    let forks = forked(snap, config, table, &plain, &mut decisions);
    let deferred = planned
        .t
        .commitments
        .values()
        .filter(|c| !c.starts_now(snap.now_s))
        .count();
    Ok(RoundDecision {
        cv,
        blocked,
        typed,
        states: planned.states,
        plan: planned.plan,
        stats: planned.stats,
        planned: planned.t.planned,
        deferred,
        actions,
        forks,
        decisions,
    })
}

/// What the plan stage gives the later ones.
#[derive(Default)]
struct Planned {
    /// The plan in Slurm's names, with the look-ahead's commitments.
    t: Translated,
    /// The planned jobs' states after the look-ahead.
    states: Vec<JobState>,
    /// The core's plan.
    plan: Option<RoundPlan>,
    /// The planner's statistics.
    stats: Option<RoundStats>,
}

/// Jobs whose Slurm request names GPU types: those a user restricted to some types (only a
/// typed request keeps them there) and those Slurm already holds to types. Every other job
/// gets typeless requests (see `GpuSpec::update_fields`).
fn typed_requests(snap: &RoundSnapshot) -> HashSet<u64> {
    snap.rows
        .values()
        .filter(|r| {
            r.bound_types.is_some() || snap.specs.get(&r.id).is_some_and(|s| s.gpu_types.is_some())
        })
        .map(|r| r.id)
        .collect()
}

/// The judge stage: a placement that would share a node with an exclusive job (or put an
/// exclusive job beside others) is not enforced; the job waits, and says why.
fn judge_exclusive(
    snap: &RoundSnapshot,
    t: &mut Translated,
    exclusive_ids: &BTreeSet<u64>,
    busy: &BTreeSet<String>,
) {
    let rows = &snap.rows;
    let planned = &t.planned;
    let is_new = |id: u64| {
        rows.get(&id).is_none_or(|r| {
            !matches!(r.phase, Phase::Running | Phase::Starting)
                || !r
                    .placement
                    .as_ref()
                    .zip(planned.get(&id))
                    .is_some_and(|(p, q)| view::same_gpus(p, q))
        })
    };
    for (id, why) in exclusive::conflicts(planned, exclusive_ids, &is_new, busy) {
        let gpus = t.planned.remove(&id).unwrap_or_default();
        t.unenforceable
            .push((id, format!("{}: {why}", explain::placement_words(&gpus))));
    }
}

/// The explain stage: each active job's decision in words, from the plan, what Slurm
/// holds back, what cannot move, the rules' overrides and the site's priority and limits.
#[allow(clippy::too_many_arguments)]
fn explain_round(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    cv: &ClusterView,
    planned: &Planned,
    origins: &BTreeMap<u64, RateOrigins>,
    blocked: &BTreeMap<u64, Hold>,
    unmovable: &BTreeSet<u64>,
    site_waits: &SiteWaits,
) -> Vec<Decision> {
    let t = &planned.t;
    let mut decisions = decisions(
        snap,
        &planned.plan,
        &t.planned,
        origins,
        &cv.unusable,
        blocked,
    );
    released_not_started(snap, &mut decisions);
    unmovable::explain(&snap.rows, unmovable, &mut decisions);
    explain_overrides(snap, t, origins, &mut decisions);
    if let Some(cluster) = &cv.cluster {
        // The site's priority factors, and the limits on one type that keep a job off it.
        snap.site.explain(
            &mut decisions,
            &planned.states,
            &site_waits.typed_off,
            snap.now_s,
            cluster,
            config.hadar.priority_strength,
        );
    }
    decisions
}

/// The waiting jobs Slurm would not start yet, with why: each job's own hold, dependency,
/// begin time or partition that starts no jobs, then, among the rest, the licenses the
/// cluster has free; and the released jobs Slurm keeps pending for their licenses or in
/// such a partition (not planned, so held again).
fn blocked(snap: &RoundSnapshot) -> BTreeMap<u64, Hold> {
    let status = eligible::states(&snap.slurm_jobs);
    let in_phase = |phase: Phase| {
        snap.slurm_jobs
            .iter()
            .filter(move |j| snap.rows.get(&j.id).is_some_and(|r| r.phase == phase))
    };
    let partition_state = |p: &str| snap.site.partition_state(p);
    let mut blocked: BTreeMap<u64, Hold> = in_phase(Phase::Waiting)
        .filter_map(|j| {
            let blocked = eligible::blocked(j, snap.now_unix, |id| status.get(&id).copied())
                .or_else(|| eligible::partition_closed(j, partition_state))?;
            Some((j.id, blocked))
        })
        .collect();
    for j in in_phase(Phase::Starting).filter(|j| !j.is_held()) {
        if let Some(b) = eligible::partition_closed(j, partition_state)
            .or_else(|| eligible::pending_for_licenses(j))
        {
            blocked.insert(j.id, b);
        }
    }
    let free = snap.site.licenses();
    if !free.is_empty() {
        let waiting = in_phase(Phase::Waiting).filter(|j| !blocked.contains_key(&j.id));
        let starting = in_phase(Phase::Starting)
            .filter(|j| j.status == JobStatus::Pending && !blocked.contains_key(&j.id));
        for (id, asked) in eligible::short_of_licenses(waiting, starting, free) {
            blocked.insert(id, Hold::Licenses(asked));
        }
    }
    blocked
}

/// The forked jobs' rounds over what `plain` leaves (see [`crate::fork::plan`]), their
/// decisions put in `decisions`.
fn forked(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    table: &ThroughputTable,
    plain: &PlainSide<'_>,
    decisions: &mut [Decision],
) -> Vec<ForkStart> {
    let forked = crate::fork::plan_forks(snap, config, table, &priors(config), plain);
    for (job, f) in &forked.decisions {
        if let Some(d) = decisions.iter_mut().find(|d| d.job == *job) {
            d.runs = f.placement.is_some();
            d.placement = f.placement.clone();
            d.wait_reason = None;
            d.text = f.text.clone();
        }
    }
    forked.starts
}

/// The cluster view (GPUs held by jobs hadar does not manage, or can no longer move, are not
/// the policy's), with the exclusive jobs' fencing, the exclusive jobs, and the nodes with
/// unmanaged jobs (which an exclusive job may not share).
fn cluster_view(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    unmovable: &BTreeSet<u64>,
) -> (ClusterView, BTreeSet<u64>, BTreeSet<String>) {
    let mut foreign: Vec<(String, String, u32)> = snap
        .slurm_jobs
        .iter()
        .filter(|j| {
            (!snap.rows.contains_key(&j.id) || unmovable.contains(&j.id))
                && matches!(
                    j.status,
                    JobStatus::Running | JobStatus::Completing | JobStatus::Suspended
                )
        })
        .flat_map(|j| j.gpu_parts())
        .collect();
    let busy: BTreeSet<String> = foreign.iter().map(|(n, _, _)| n.clone()).collect();
    let exclusive_ids = exclusive::fence_off(&snap.rows, &snap.nodes, &mut foreign);
    let cv = view::build(&snap.nodes, &config.partitions, &foreign);
    (cv, exclusive_ids, busy)
}

/// The planned jobs' states (active, not forked, not blocked, not unmovable), in arrival
/// order, without those the site's limits hold back (returned with the limit); records each
/// job's rates' origins in `origins`.
#[allow(clippy::too_many_arguments)]
fn job_states(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    table: &ThroughputTable,
    priors: &Priors,
    cluster: &Cluster,
    types: &[String],
    blocked: &BTreeMap<u64, Hold>,
    unmovable: &BTreeSet<u64>,
    origins: &mut BTreeMap<u64, RateOrigins>,
) -> (Vec<JobState>, SiteWaits) {
    let strength = config.hadar.priority_strength;
    let now_s = snap.now_s;
    let mut states = Vec::new();
    for r in snap.rows.values().filter(|r| {
        r.phase != Phase::Finished
            && !snap.owned.contains(&r.id)
            && !blocked.contains_key(&r.id)
            && !unmovable.contains(&r.id)
    }) {
        let Some(spec) = snap.specs.get(&r.id) else {
            continue;
        };
        let bound = bind_types(spec, r.bound_types.as_deref());
        let (throughput, mut o) = profile(snap, table, priors, r.id, &bound, types);
        if r.bound_types.is_some() {
            let (_, usable) = profile(snap, table, priors, r.id, spec, types);
            o = spec::withheld(&usable, o, RateSource::Bound);
        }
        origins.insert(r.id, o);
        let spec = bound;
        let job = Arc::new(Job {
            restart_s: spec.restart_s,
            id: JobId(r.id),
            kind: spec.job_type.clone().unwrap_or_else(|| r.name.clone()),
            arrival_s: r.arrival_s,
            workers: r.workers,
            total_steps: r.total_steps,
            weight: snap
                .site
                .weight(r.id, r.workers, now_s - r.arrival_s, cluster, strength),
            throughput,
        });
        let mut js = JobState::arrived(job, types.len());
        js.remaining_steps = (r.total_steps - r.steps_done).max(1.0).min(r.total_steps);
        js.placement = r
            .placement
            .as_ref()
            .and_then(|p| view::to_placement(cluster, p));
        js.run_s = r.run_s;
        js.run_s_by_type = types
            .iter()
            .map(|t| r.run_s_by_type.get(t).copied().unwrap_or(0.0))
            .collect();
        js.attained_gpu_s = r.attained_gpu_s;
        js.rounds_run = r.rounds_run;
        js.first_start_s = r.first_start_s;
        states.push(js);
    }
    states.sort_by(|a, b| a.job.arrival_order(&b.job));
    let site_blocked = crate::site::blocked(
        &snap.site,
        snap.chosen_nodes(),
        &mut states,
        &snap.slurm_jobs,
        cluster,
    );
    (states, site_blocked)
}

/// The served policy (look-ahead, `policy` within the site's rules, Slurm's rules) over
/// `states`, its plan validated.
#[allow(clippy::too_many_arguments)]
fn served(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    cluster: &Cluster,
    states: &[JobState],
    typed: &HashSet<u64>,
    site_blocked: &SiteWaits,
    policy: &mut dyn Policy,
) -> Result<ServedDecision, DaemonError> {
    let mut target = facts::target(&snap.rows, typed, &snap.nodes);
    let chosen = snap.chosen_nodes();
    let site = &snap.site;
    crate::site::reservations::leave_out_of_lookahead(site, chosen, &mut target);
    let input = RoundInput {
        now_s: snap.now_s,
        round_s: config.sidecar.round_seconds,
        restart_s: config.sidecar.restart_seconds,
        cluster,
        jobs: states,
    };
    let d = decide_with(&config.served(), &input, &target, |i| {
        crate::site::plan(site, chosen, policy, i, &snap.slurm_jobs, site_blocked)
    });
    d.plan
        .validate(cluster, &d.jobs)
        .map_err(|e| DaemonError::InvalidPlan(e.to_string()))?;
    Ok(d)
}

/// The plan in Slurm's names: enforced placements, jobs that stay where they are, and the
/// refused ones with why; and the look-ahead's commitments.
fn translate(rows: &BTreeMap<u64, JobRow>, cluster: &Cluster, d: &ServedDecision) -> Translated {
    let mut t = Translated::default();
    for (a, (_, verdict)) in d.plan.assignments.iter().zip(&d.verdicts) {
        let gpus = view::to_node_gpus(cluster, &a.placement);
        match verdict {
            Verdict::Enforced => {
                t.planned.insert(a.job.0, gpus);
            }
            // A running or starting job stays where it is rather than being
            // preempted towards GPUs Slurm would not give it.
            Verdict::Stays { .. } => {
                if let Some(here) = rows.get(&a.job.0).and_then(|r| r.placement.clone()) {
                    t.planned.insert(a.job.0, here);
                }
            }
            Verdict::Refused { why } => t.unenforceable.push((
                a.job.0,
                format!("{}: {why}", explain::placement_words(&gpus)),
            )),
        }
    }
    t.commitments = d
        .commitments
        .choices
        .iter()
        .map(|(id, c)| (id.0, c.clone()))
        .collect();
    t
}

/// The actions that turn where the (not forked, not unmovable) jobs stand into `planned`,
/// in the order they are carried out.
fn enforcement(
    snap: &RoundSnapshot,
    planned: &BTreeMap<u64, NodeGpus>,
    unmovable: &BTreeSet<u64>,
) -> Vec<Action> {
    let gang_rows: BTreeMap<u64, JobRow> = snap
        .rows
        .iter()
        .filter(|(id, _)| !snap.owned.contains(id) && !unmovable.contains(id))
        .map(|(id, r)| (*id, r.clone()))
        .collect();
    let mut todo = actions::plan(&gang_rows, planned);
    // A job on a node that is down or not responding can neither checkpoint nor be
    // requeued by us (a requeue sent then was seen to leave the job started elsewhere
    // without its GPUs); Slurm requeues it itself when it declares the node dead, and it
    // is placed again then.
    let down: HashSet<&str> = snap
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Down)
        .map(|n| n.name.as_str())
        .collect();
    todo.retain(|a| match a {
        Action::Preempt { job } => !snap
            .rows
            .get(job)
            .and_then(|r| r.placement.as_ref())
            .is_some_and(|p| p.iter().any(|(n, _)| down.contains(n.as_str()))),
        _ => true,
    });
    actions::order_starts_by_gres(&mut todo, &|node: &str, gpu_type: &str| {
        snap.nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| {
                n.gpus
                    .iter()
                    .position(|(t, _)| t.eq_ignore_ascii_case(gpu_type))
            })
            .unwrap_or(usize::MAX)
    });
    todo
}

/// Each active job's decision from the plan; a job Slurm would not start yet (`blocked`)
/// is not planned, and its decision says what it waits for.
fn decisions(
    snap: &RoundSnapshot,
    plan: &Option<RoundPlan>,
    planned: &BTreeMap<u64, NodeGpus>,
    origins: &BTreeMap<u64, RateOrigins>,
    unusable: &[(String, String)],
    blocked: &BTreeMap<u64, Hold>,
) -> Vec<Decision> {
    // Looked up per job: a scan of the plan per job was quadratic in the queue length.
    let assigned: HashMap<u64, &hadar_core::Assignment> = plan
        .iter()
        .flat_map(|p| p.assignments.iter())
        .map(|a| (a.job.0, a))
        .collect();
    let waiting: HashMap<u64, &hadar_core::Waiting> = plan
        .iter()
        .flat_map(|p| p.waiting.iter())
        .map(|w| (w.job.0, w))
        .collect();
    let mut out = Vec::new();
    for r in snap.rows.values().filter(|r| r.phase != Phase::Finished) {
        let rates = origins
            .get(&r.id)
            .map(|o| explain::rates_words(o))
            .unwrap_or_default();
        let base = Decision::new(r.id, snap.round);
        let d = if let Some(hold) = blocked.get(&r.id) {
            let reason = WaitReason::SlurmHolds { hold: hold.clone() };
            Decision {
                wait_reason: serde_json::to_value(&reason).ok(),
                text: format!("waits, not planned: {reason}"),
                ..base
            }
        } else if plan.is_none() {
            Decision {
                text: explain::no_cluster(unusable),
                ..base
            }
        } else if let Some(a) = assigned.get(&r.id) {
            let p = planned.get(&r.id).cloned().unwrap_or_default();
            let kept = snap
                .before
                .get(&r.id)
                .and_then(|b| b.placement.as_ref())
                .is_some_and(|q| view::same_gpus(q, &p));
            let text = explain::runs(
                &p,
                a.rate,
                a.payoff,
                kept,
                a.placement.types().len() > 1,
                &rates,
            );
            Decision {
                runs: true,
                placement: Some(p),
                rate: Some(a.rate),
                payoff: a.payoff,
                text,
                ..base
            }
        } else if let Some(w) = waiting.get(&r.id) {
            Decision {
                wait_reason: serde_json::to_value(&w.reason).ok(),
                text: explain::waits(&w.reason, &rates),
                ..base
            }
        } else {
            Decision {
                text: format!("waits: no record of this job's request could be read. {rates}"),
                ..base
            }
        };
        out.push(d);
    }
    out
}

/// A job released in an earlier round that stays where it was placed, while Slurm still
/// shows it pending with a reason of its own (`Resources`, `Priority`, ...): its decision
/// says so, since "runs on" alone would hide that it does not run yet.
fn released_not_started(snap: &RoundSnapshot, decisions: &mut [Decision]) {
    let pending: HashMap<u64, &str> = snap
        .slurm_jobs
        .iter()
        .filter(|j| j.status == JobStatus::Pending && !j.is_held())
        .filter_map(|j| Some((j.id, j.reason.as_deref()?)))
        .filter(|(_, reason)| !matches!(*reason, "None" | ""))
        .collect();
    for d in decisions.iter_mut().filter(|d| d.runs) {
        let Some(reason) = pending.get(&d.job) else {
            continue;
        };
        let released_there = snap.rows.get(&d.job).is_some_and(|r| {
            r.phase == Phase::Starting
                && r.placement
                    .as_ref()
                    .zip(d.placement.as_ref())
                    .is_some_and(|(here, planned)| view::same_gpus(here, planned))
        });
        if released_there {
            d.text.push_str(&format!(
                " Released there in an earlier round, it is not started yet: Slurm shows it pending with Reason={reason}."
            ));
        }
    }
}

/// The words for jobs the daemon cannot place as planned and jobs the look-ahead defers.
fn explain_overrides(
    snap: &RoundSnapshot,
    t: &Translated,
    origins: &BTreeMap<u64, RateOrigins>,
    decisions: &mut [Decision],
) {
    let now_s = snap.now_s;
    for (job, why) in &t.unenforceable {
        if let Some(d) = decisions.iter_mut().find(|d| d.job == *job) {
            d.runs = false;
            d.placement = None;
            d.text = format!("waits: Hadar's best placement for it, {why}");
        }
    }
    for (job, c) in t.commitments.iter().filter(|(_, c)| !c.starts_now(now_s)) {
        if let Some(d) = decisions.iter_mut().find(|d| d.job == *job && !d.runs) {
            let rates = origins
                .get(job)
                .map(|o| explain::rates_words(o))
                .unwrap_or_default();
            d.text = explain::committed(&c.gpu_type, c.start_s - now_s, c.finish_s - now_s, &rates);
        }
    }
}

/// The rate priors the configuration sets.
pub fn priors(config: &DaemonConfig) -> Priors {
    Priors {
        default_rate_per_gpu: config.sidecar.default_rate_per_gpu,
        throughput_scale: config.sidecar.throughput_scale,
    }
}

/// Job `id`'s throughput on `types` under `spec`, with where each rate came from (its
/// learned rates in the snapshot first; see [`spec::profile`]).
fn profile(
    snap: &RoundSnapshot,
    table: &ThroughputTable,
    priors: &Priors,
    id: u64,
    spec: &JobSpec,
    types: &[String],
) -> (hadar_core::ThroughputProfile, RateOrigins) {
    let learned = snap.learned.get(&id).map_or(&[][..], Vec::as_slice);
    spec::profile(spec, types, learned, table, priors)
}

/// Rates' origins under the types the look-ahead left each job (`restricted`), for the
/// words: a type it took away is named as kept from the job this round.
fn kept_origins(
    snap: &RoundSnapshot,
    table: &ThroughputTable,
    priors: &Priors,
    restricted: &BTreeMap<JobId, Vec<String>>,
    types: &[String],
    origins: &mut BTreeMap<u64, RateOrigins>,
) {
    for (id, kept) in restricted {
        if let Some(s) = snap.specs.get(&id.0) {
            let s = bind_types(s, Some(kept));
            let (_, o) = profile(snap, table, priors, id.0, &s, types);
            let o = match origins.get(&id.0) {
                Some(usable) => spec::withheld(usable, o, RateSource::Kept),
                None => o,
            };
            origins.insert(id.0, o);
        }
    }
}

/// The spec with its GPU types limited to `bound` (the types of its first placement).
pub(crate) fn bind_types(spec: &JobSpec, bound: Option<&[String]>) -> JobSpec {
    let mut s = spec.clone();
    if let Some(b) = bound {
        let allowed: Vec<String> = match &spec.gpu_types {
            Some(own) => own
                .iter()
                .filter(|t| b.iter().any(|u| u.eq_ignore_ascii_case(t)))
                .cloned()
                .collect(),
            None => b.to_vec(),
        };
        s.gpu_types = Some(allowed);
    }
    s
}
