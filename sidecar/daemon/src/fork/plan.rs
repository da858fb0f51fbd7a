//! The forked jobs' part of the round's decision, pure: from each forked job's tracker as
//! the snapshot read it ([`ForkView`]) and the plain jobs' enforced plan, the mixed round's
//! forked plan ([`plan_mixed`], as the simulator runs it), each planned job's next round
//! sized into copies with their step budgets ([`ForkStart`]), and every forked job's
//! decision in words. The enforcer only submits the planned rounds ([`Forker::start_planned`]).

use super::*;
use crate::snapshot::RoundSnapshot;
use crate::view::{self, ClusterView};
use hadar_core::site::reservations::{Nodes, plan_in_pools};
use std::collections::HashSet;

/// A forked job's fork-pass state as the round's snapshot holds it (read from the store
/// after the job's open round moved on).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkView {
    /// Its tracker.
    pub tracker: ForkJob,
    /// Its open round, if any.
    pub open: Option<ForkRound>,
    /// The copies of its last round, `(node, type, GPUs)` (HadarE keeps a job where its
    /// copies ran when that pays).
    pub last_copies: Vec<(String, String, u32)>,
}

impl ForkView {
    /// Job `id`'s view from the store; `None` without a tracker.
    pub fn read(store: &Store, id: u64) -> Result<Option<ForkView>, StoreError> {
        let Some(tracker) = store.fork_job(id)? else {
            return Ok(None);
        };
        let open = store.open_fork_round(id)?;
        let last_copies = store
            .fork_rounds(id)?
            .into_iter()
            .next_back()
            .map(|r| {
                r.copies
                    .into_iter()
                    .map(|c| (c.node, c.gpu_type, c.gpus))
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(ForkView {
            tracker,
            open,
            last_copies,
        }))
    }
}

/// One copy of a planned round: where it runs and its share of the remaining steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedCopy {
    /// The node.
    pub node: String,
    /// Its GPU type.
    pub gpu_type: String,
    /// Its GPUs.
    pub gpus: u32,
    /// Its step budget.
    pub budget: u64,
}

/// A forked job's next round, as decided: the enforcer submits it as one copy job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkStart {
    /// The logical job.
    pub job: u64,
    /// The round's index (the tracker's next round).
    pub round: u64,
    /// Its copies (those with a budget), in the plan's order.
    pub copies: Vec<PlannedCopy>,
}

impl ForkStart {
    /// The copies' GPUs, in Slurm's names.
    pub fn gpus(&self) -> NodeGpus {
        self.copies
            .iter()
            .map(|c| (c.node.clone(), vec![(c.gpu_type.clone(), c.gpus)]))
            .collect()
    }
}

/// The forked jobs' part of the round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ForkedRound {
    /// The rounds to start, in the plan's order.
    pub starts: Vec<ForkStart>,
    /// Every forked job's decision.
    pub decisions: BTreeMap<u64, ForkDecision>,
}

/// The plain jobs' side of the round the forked plan is made over.
pub struct PlainSide<'a> {
    /// The cluster view the plain plan was made over.
    pub cv: &'a ClusterView,
    /// The plain jobs' states before the look-ahead (a started one with where it runs now;
    /// the look-ahead's states carry the placements it pins instead).
    pub states: &'a [JobState],
    /// Their enforceable placements.
    pub planned: &'a BTreeMap<u64, NodeGpus>,
}

/// Plans the forked jobs with no open round by the mixed round's forked plan over what
/// `plain` leaves, and says what every forked job of `snap` does this round.
pub fn plan_forks(
    snap: &RoundSnapshot,
    config: &DaemonConfig,
    table: &ThroughputTable,
    priors: &Priors,
    plain: &PlainSide<'_>,
) -> ForkedRound {
    let mut out = ForkedRound::default();
    let (cluster, plan) = plain_round(snap, plain);
    let mut states = Vec::new();
    for &id in &snap.owned {
        let (Some(row), Some(spec), Some(fv)) =
            (snap.rows.get(&id), snap.specs.get(&id), snap.forks.get(&id))
        else {
            continue;
        };
        out.decisions
            .insert(id, describe(&fv.tracker, fv.open.as_ref()));
        let held = snap.slurm_jobs.iter().any(|j| j.id == id && j.is_held());
        if fv.tracker.state != ForkState::Active || fv.open.is_some() || !held {
            continue;
        }
        if let Some(cluster) = &cluster {
            let learned = snap.learned.get(&id).map_or(&[][..], Vec::as_slice);
            let types = &plain.cv.types;
            states.push(fork_state(
                row, spec, fv, types, cluster, learned, table, priors,
            ));
        }
    }
    // Forked jobs are offered the nodes their reservation and their user's choice allow, as
    // plain jobs are; one that waits for its reservation is not forked this round.
    let (offers, waits) = snap
        .site
        .offers(states.iter().map(|s| s.id().0), snap.chosen_nodes());
    for (job, why) in &waits {
        states.retain(|s| s.id() != *job);
        if let Some(d) = out.decisions.get_mut(&job.0) {
            d.text = format!("{}; waits: {why}", d.text);
        }
    }
    let Some(cluster) = cluster.filter(|_| !states.is_empty()) else {
        return out;
    };
    let mut jobs: Vec<JobState> = plain.states.to_vec();
    jobs.extend(states.iter().cloned());
    jobs.sort_by(|a, b| a.job.arrival_order(&b.job));
    let forked: BTreeSet<JobId> = states.iter().map(JobState::id).collect();
    let input = RoundInput {
        now_s: snap.now_s,
        round_s: config.sidecar.round_seconds,
        restart_s: config.sidecar.restart_seconds,
        cluster: &cluster,
        jobs: &jobs,
    };
    // The plain jobs were planned by the round's served policy (as `plan_mixed`'s plain
    // policy would): their enforced plan is given, not planned again.
    let mixed = plan_mixed(&input, &forked, &config.hadare, |_| plan.clone());
    let plan = match &mixed.left {
        Some(left) if offers.values().any(|o| o.nodes != Nodes::All) => {
            plan_in_pools(left, &states, &offers, &BTreeSet::new(), |c, js| {
                let pool = RoundInput {
                    cluster: c,
                    jobs: js,
                    ..input
                };
                hadar_core::policies::hadare::plan_round(&config.hadare, &pool)
            })
        }
        _ => mixed.forked,
    };
    if let Some(Err(e)) = mixed.left.as_ref().map(|l| plan.validate(l, &states)) {
        tracing::error!("HadarE's plan is invalid, no copies started: {e}");
        return out;
    }
    for a in &plan.assignments {
        let (Some(js), Some(fv)) = (
            states.iter().find(|s| s.job.id == a.job),
            snap.forks.get(&a.job.0),
        ) else {
            continue;
        };
        let start = size_round(&fv.tracker, js, &cluster, a.placement.parts());
        out.decisions.insert(a.job.0, starts(&fv.tracker, &start));
        out.starts.push(start);
    }
    for w in &plan.waiting {
        if let Some(d) = out.decisions.get_mut(&w.job.0) {
            d.text = format!("{}; waits for GPUs: {}", d.text, w.reason);
        }
    }
    out
}

/// The job's next round on `parts`: each copy's share of the remaining steps, in
/// proportion to its expected rate (the budgets add up to exactly what is left, so no round
/// overshoots the total); copies left without steps are not run.
fn size_round(
    fj: &ForkJob,
    js: &JobState,
    cluster: &hadar_core::Cluster,
    parts: &[Part],
) -> ForkStart {
    let remaining = (fj.total_steps - fj.steps_done).ceil().max(0.0) as u64;
    let rates: Vec<f64> = parts
        .iter()
        .map(|p| js.job.throughput.rate_or_zero(p.gpu_type, p.gpus).max(1e-9))
        .collect();
    let budgets = split_budget(remaining, &rates);
    let copies = parts
        .iter()
        .zip(budgets)
        .filter(|(_, b)| *b > 0)
        .map(|(p, budget)| PlannedCopy {
            node: cluster.node(p.node).name.clone(),
            gpu_type: cluster.type_name(p.gpu_type).to_string(),
            gpus: p.gpus,
            budget,
        })
        .collect();
    ForkStart {
        job: fj.job,
        round: fj.next_round,
        copies,
    }
}

/// The decision of a job whose round `start` starts this round.
fn starts(fj: &ForkJob, start: &ForkStart) -> ForkDecision {
    let gpus = start.gpus();
    ForkDecision {
        text: running_words(fj, start.round, start.copies.len(), &gpus),
        placement: Some(gpus),
    }
}

/// The plain jobs' side of the mixed round: the cluster the plain plan was made over, less
/// the GPUs of managed jobs Slurm runs whose placement the plain jobs' states do not carry
/// (a finished job still completing, one the site's limits leave out); and the enforced placements as a plan.
fn plain_round(
    snap: &RoundSnapshot,
    plain: &PlainSide<'_>,
) -> (Option<hadar_core::Cluster>, hadar_core::RoundPlan) {
    let Some(cluster) = &plain.cv.cluster else {
        return (None, hadar_core::RoundPlan::default());
    };
    let placed: HashSet<u64> = plain
        .states
        .iter()
        .filter(|s| s.placement.is_some())
        .map(|s| s.id().0)
        .collect();
    // Jobs not in `rows` hold GPUs the cluster view already left out.
    let mut held: Vec<(String, String, u32)> = snap
        .slurm_jobs
        .iter()
        .filter(|j| {
            snap.rows.contains_key(&j.id)
                && !placed.contains(&j.id)
                && matches!(
                    j.status,
                    JobStatus::Running | JobStatus::Completing | JobStatus::Suspended
                )
        })
        .flat_map(|j| j.gpu_parts())
        .collect();
    held.extend(waiting_copies(snap));
    let assignments = plain
        .planned
        .iter()
        .filter_map(|(id, gpus)| {
            Some(hadar_core::Assignment {
                job: JobId(*id),
                placement: view::to_placement(cluster, gpus)?,
                rate: 0.0,
                payoff: None,
            })
        })
        .collect();
    let plan = hadar_core::RoundPlan {
        assignments,
        waiting: Vec::new(),
    };
    (view::less(cluster, &held), plan)
}

/// The GPUs of open rounds whose copy job's GPUs Slurm does not list as held. A copy job
/// holds its GPUs from its submission to its end, but the cluster view leaves out only the
/// GPUs Slurm lists for running and completing jobs: a round soon after (one woken by a
/// submission) would plan other copies onto those of a copy job still queued, and those would
/// wait in Slurm's queue and start with little of their round left; a round whose read of the
/// jobs finds a copy job ending without its GPUs listed would hand them out while the open
/// round still counts them.
fn waiting_copies(snap: &RoundSnapshot) -> Vec<(String, String, u32)> {
    snap.forks
        .values()
        .filter_map(|fv| fv.open.as_ref())
        .filter(|r| holds_unlisted_gpus(r.copy_job, &snap.slurm_jobs))
        .flat_map(|r| r.copies.iter())
        .map(|c| (c.node.clone(), c.gpu_type.clone(), c.gpus))
        .collect()
}

/// Whether an open round's copies hold GPUs Slurm does not list: its copy job is not yet
/// submitted (`None`), or some of its parts have not ended and none lists a GPU (queued, or
/// ending).
fn holds_unlisted_gpus(copy_job: Option<u64>, slurm_jobs: &[SlurmJob]) -> bool {
    let Some(id) = copy_job else {
        return true;
    };
    let parts: Vec<&SlurmJob> = slurm_jobs
        .iter()
        .filter(|j| j.id == id || j.het_job_id == Some(id))
        .collect();
    parts.iter().any(|j| !j.status.is_terminal()) && parts.iter().all(|j| j.gpu_parts().is_empty())
}

/// A forked job's state for HadarE: its copy-size profile, its remaining steps, and its
/// last round's copies (for stickiness).
#[allow(clippy::too_many_arguments)]
fn fork_state(
    row: &JobRow,
    spec: &JobSpec,
    fv: &ForkView,
    types: &[String],
    cluster: &hadar_core::Cluster,
    learned: &[hadar_store::LearnedRate],
    table: &ThroughputTable,
    priors: &Priors,
) -> JobState {
    let fj = &fv.tracker;
    let throughput = fork_profile(spec, types, learned, table, priors);
    let job = Arc::new(Job {
        restart_s: spec.restart_s,
        id: JobId(row.id),
        kind: spec.job_type.clone().unwrap_or_else(|| row.name.clone()),
        arrival_s: row.arrival_s,
        workers: row.workers,
        total_steps: fj.total_steps,
        weight: 1.0,
        throughput,
    });
    let mut js = JobState::arrived(job, types.len());
    js.remaining_steps = (fj.total_steps - fj.steps_done).max(1.0);
    js.placement = previous_copies(&fv.last_copies, cluster);
    js.rounds_run = fj.next_round as u32;
    js
}

/// The copies of the job's last round, as a forked placement (for HadarE's stickiness).
fn previous_copies(
    last: &[(String, String, u32)],
    cluster: &hadar_core::Cluster,
) -> Option<Placement> {
    let parts: Option<Vec<Part>> = last
        .iter()
        .map(|(node, gpu_type, gpus)| {
            Some(Part {
                node: cluster.node_by_name(node)?,
                gpu_type: cluster.type_by_name(gpu_type)?,
                gpus: *gpus,
            })
        })
        .collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| Placement::forked(parts))
}

#[cfg(test)]
mod tests {
    use super::holds_unlisted_gpus;
    use hadar_slurm::{JobStatus, NodeAlloc, SlurmJob};

    /// Copy job 40's two parts (40 and 41) in `status`, listing their GPUs or not.
    fn copy_job(status: JobStatus, listed: bool) -> Vec<SlurmJob> {
        [40, 41]
            .into_iter()
            .map(|id| {
                let mut j = SlurmJob::held_with_record(id, "");
                j.het_job_id = Some(40);
                j.status = status.clone();
                if listed {
                    j.alloc = vec![NodeAlloc {
                        node: format!("n{id}"),
                        gpus: vec![("k80".into(), 1)],
                    }];
                }
                j
            })
            .collect()
    }

    #[test]
    fn an_open_rounds_gpus_are_held_until_slurm_lists_them_or_the_copy_job_ends() {
        assert!(holds_unlisted_gpus(None, &[]), "not submitted yet");
        assert!(holds_unlisted_gpus(
            Some(40),
            &copy_job(JobStatus::Pending, false)
        ));
        // Ending without its GPUs listed (read while the copy job completes): still held, or
        // a round would hand them out while the open round counts them.
        assert!(holds_unlisted_gpus(
            Some(40),
            &copy_job(JobStatus::Completing, false)
        ));
        assert!(holds_unlisted_gpus(
            Some(40),
            &copy_job(JobStatus::Running, false)
        ));
        // Listed GPUs are left out of the cluster view already; an ended job holds nothing.
        assert!(!holds_unlisted_gpus(
            Some(40),
            &copy_job(JobStatus::Running, true)
        ));
        assert!(!holds_unlisted_gpus(
            Some(40),
            &copy_job(JobStatus::Completing, true)
        ));
        assert!(!holds_unlisted_gpus(
            Some(40),
            &copy_job(JobStatus::Completed, false)
        ));
        assert!(
            !holds_unlisted_gpus(Some(40), &[]),
            "Slurm no longer lists it"
        );
    }
}
