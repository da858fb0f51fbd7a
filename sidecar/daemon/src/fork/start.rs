//! New rounds for forked jobs: the mixed round ([`plan_mixed`], as the simulator runs it)
//! gives them copies on the GPUs the plain jobs' plan leaves, and each planned job's round is
//! recorded, then submitted as one heterogeneous copy job as the job's user.

use super::*;

/// The plain jobs' side of the mixed round, as the round's decision left it.
pub struct PlainRound<'a> {
    /// The cluster both policies plan over (the plain plan's node and type ids), less the
    /// GPUs neither may give (jobs hadar does not manage, managed jobs Slurm runs that the
    /// plain jobs do not account for); `None` when no GPU is left.
    pub cluster: Option<&'a hadar_core::Cluster>,
    /// The GPU type names of the managed partitions, in the cluster's order.
    pub types: &'a [String],
    /// The plain jobs' states (a started one with where it runs now).
    pub jobs: &'a [JobState],
    /// Their enforced plan (the placements the daemon carries out this round).
    pub plan: &'a hadar_core::RoundPlan,
}

impl Forker {
    /// Plans the forked jobs that have no open round by the mixed round's forked plan (HadarE
    /// over what `plain` leaves, [`plan_mixed`]), and submits one copy job per planned job.
    /// Returns the actions taken and a decision per owned job.
    #[allow(clippy::too_many_arguments)]
    pub fn start_rounds(
        &mut self,
        store: &mut Store,
        rows: &BTreeMap<u64, JobRow>,
        specs: &BTreeMap<u64, JobSpec>,
        owned: &BTreeSet<u64>,
        slurm_jobs: &[SlurmJob],
        plain: &PlainRound<'_>,
        table: &ThroughputTable,
        priors: &Priors,
        now_unix: f64,
        epoch: f64,
    ) -> (ActionLog, BTreeMap<u64, ForkDecision>) {
        let now_s = now_unix - epoch;
        let mut done = Vec::new();
        let mut decisions = BTreeMap::new();
        let mut states = Vec::new();
        let mut trackers: BTreeMap<u64, ForkJob> = BTreeMap::new();
        for &id in owned {
            let (Some(row), Some(spec)) = (rows.get(&id), specs.get(&id)) else {
                continue;
            };
            let Ok(Some(fj)) = store.fork_job(id) else {
                continue;
            };
            let open = store.open_fork_round(id).ok().flatten();
            decisions.insert(id, describe(&fj, open.as_ref()));
            let held = slurm_jobs.iter().any(|j| j.id == id && j.is_held());
            if fj.state != ForkState::Active || open.is_some() || !held {
                continue;
            }
            let Some(cluster) = plain.cluster else {
                continue;
            };
            let js = fork_state(store, row, spec, &fj, plain.types, cluster, table, priors);
            states.push(js);
            trackers.insert(id, fj);
        }
        let Some(cluster) = plain.cluster else {
            return (done, decisions);
        };
        if states.is_empty() {
            return (done, decisions);
        }
        let mut jobs: Vec<JobState> = plain.jobs.to_vec();
        jobs.extend(states.iter().cloned());
        jobs.sort_by(|a, b| a.job.arrival_order(&b.job));
        let forked: BTreeSet<JobId> = states.iter().map(JobState::id).collect();
        let input = RoundInput {
            now_s,
            round_s: self.round_s,
            restart_s: self.restart_s,
            cluster,
            jobs: &jobs,
        };
        // The plain jobs were planned by the round's decision (the served policy, as
        // `plan_mixed`'s plain policy would): their plan is given, not planned again.
        let mixed = plan_mixed(&input, &forked, &self.hadare, |_| plain.plan.clone());
        let plan = mixed.forked;
        if let Some(Err(e)) = mixed.left.as_ref().map(|l| plan.validate(l, &states)) {
            tracing::error!("HadarE's plan is invalid, no copies started: {e}");
            return (done, decisions);
        }
        for a in &plan.assignments {
            let id = a.job.0;
            let (Some(row), Some(fj), Some(js)) = (
                rows.get(&id),
                trackers.get(&id),
                states.iter().find(|s| s.job.id == a.job),
            ) else {
                continue;
            };
            let sj = slurm_jobs.iter().find(|j| j.id == id);
            let outer = specs
                .get(&id)
                .and_then(|s| s.outer)
                .unwrap_or_else(|| self.config.default_outer());
            match self.start_round(
                store,
                row,
                sj,
                fj,
                js,
                outer,
                cluster,
                a.placement.parts(),
                now_unix,
                epoch,
            ) {
                Ok(round) => {
                    let placement = copies_gpus(&round.copies);
                    done.push((
                        id,
                        "fork-start".into(),
                        format!(
                            "round {}: copy job {} with {} copies on {}",
                            round.round,
                            round.copy_job.unwrap_or(0),
                            round.copies.len(),
                            crate::explain::placement_words(&placement)
                        ),
                    ));
                    decisions.insert(id, describe(fj, Some(&round)));
                }
                Err(e) => {
                    tracing::warn!(job = id, "forked job: cannot start its copies: {e}");
                    done.push((id, "fork-start".into(), format!("error: {e}")));
                }
            }
        }
        for w in &plan.waiting {
            if let Some(d) = decisions.get_mut(&w.job.0) {
                d.text = format!("{}; waits for GPUs: {}", d.text, w.reason);
            }
        }
        (done, decisions)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_round(
        &mut self,
        store: &mut Store,
        row: &JobRow,
        sj: Option<&SlurmJob>,
        fj: &ForkJob,
        js: &JobState,
        outer: Outer,
        cluster: &hadar_core::Cluster,
        parts: &[Part],
        now_unix: f64,
        epoch: f64,
    ) -> Result<ForkRound, ForkError> {
        let id = row.id;
        let (uid, gid) = owner(row)?;
        let r = fj.next_round;
        let job_dir = self.config.spool.join(id.to_string());
        let round_dir = job_dir.join(format!("round-{r}"));
        // The spool is only written by the copy job, on its node, as the job's user: the
        // user's script goes to it inside the copy job's own script.
        let script = job_dir.join("job.sh");
        let user_script = self.api.batch_script(id)?;
        // Each copy's share of the remaining steps, in proportion to its expected rate: the
        // budgets add up to exactly what is left, so no round overshoots the total.
        let remaining = (fj.total_steps - fj.steps_done).ceil().max(0.0) as u64;
        let rates: Vec<f64> = parts
            .iter()
            .map(|p| js.job.throughput.rate_or_zero(p.gpu_type, p.gpus).max(1e-9))
            .collect();
        let budgets = split_budget(remaining, &rates);
        let deadline =
            (now_unix + self.round_s - self.config.deadline_margin_seconds).floor() as u64;
        // The round the start checkpoint came from: copy k's inner optimizer state, left
        // beside its checkpoint, goes to this round's copy k.
        let previous = store.fork_rounds(id)?.into_iter().rev().find(|p| {
            p.state == RoundState::Consolidated && Some(&p.consolidated) == fj.checkpoint.as_ref()
        });
        let copies = plan_copies(cluster, parts, &budgets, &round_dir, previous.as_ref());
        let mut round = ForkRound {
            job: id,
            round: r,
            state: RoundState::Submitting,
            copy_job: None,
            copy_job_name: format!("hadar-fork-{id}-r{r}"),
            copies,
            start_from: fj.checkpoint.clone(),
            consolidated: job_dir
                .join(format!("consolidated-{r}.safetensors"))
                .display()
                .to_string(),
            deadline_unix: deadline,
            started_s: now_unix - epoch,
            ended_s: None,
            steps: 0.0,
            message: None,
            outer: outer_step(outer, fj, &job_dir, r),
            copy_seconds: None,
        };
        let plan = RoundPlan {
            round: round.clone(),
            epoch,
            steps_done: fj.steps_done,
            total_steps: fj.total_steps,
        };
        let in_job = InJob {
            hadar_bin: &self.hadar_bin,
            job_dir: &job_dir,
            user_script: &user_script,
            plan: &serde_json::to_string(&plan).unwrap_or_default(),
        };
        let text = copy_script(
            &round,
            &self.config.runner,
            &script,
            fj.steps_done as u64,
            &copy_options(sj, row.workers),
            &round_dir,
            &in_job,
        );
        // sbatch reads the script on the daemon's host: a private temporary file.
        let tmp = private_script(&text, uid, gid)?;
        let mut next = fj.clone();
        next.next_round = r + 1;
        store.write(|w| {
            w.put_fork_round(&round)?;
            w.put_fork_job(&next)
        })?;
        crate::faults::reached("fork-round-written");
        // Slurm changes to the spool on the node; the script makes the round's folder.
        let submitted = self.api.submit_as(uid, gid, tmp.path(), &self.config.spool);
        drop(tmp);
        match submitted {
            Ok(copy) => {
                crate::faults::reached("fork-copies-submitted");
                round.copy_job = Some(copy);
                round.state = RoundState::Running;
                store.write(|w| w.put_fork_round(&round))?;
                Ok(round)
            }
            Err(e) => {
                round.state = RoundState::Abandoned;
                round.message = Some(format!("sbatch failed: {e}"));
                round.ended_s = Some(now_unix - epoch);
                store.write(|w| w.put_fork_round(&round))?;
                Err(e.into())
            }
        }
    }
}

/// The copies of the job's last round, as a forked placement (for HadarE's stickiness).
pub(crate) fn previous_copies(
    store: &Store,
    id: u64,
    cluster: &hadar_core::Cluster,
) -> Option<Placement> {
    let last = store.fork_rounds(id).ok()?.into_iter().next_back()?;
    let parts: Option<Vec<Part>> = last
        .copies
        .iter()
        .map(|c| {
            Some(Part {
                node: cluster.node_by_name(&c.node)?,
                gpu_type: cluster.type_by_name(&c.gpu_type)?,
                gpus: c.gpus,
            })
        })
        .collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| Placement::forked(parts))
}

pub(crate) fn owner(row: &JobRow) -> Result<(u32, u32), ForkError> {
    match (row.user_id, row.group_id) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => Err(ForkError::NoOwner(row.id)),
    }
}

/// Writes a copy job's script to a temporary file for sbatch (mode 0600, owned by the job's
/// user, removed when dropped).
pub(crate) fn private_script(
    text: &str,
    uid: u32,
    gid: u32,
) -> Result<tempfile::NamedTempFile, ForkError> {
    use std::io::Write;
    let io = |e: std::io::Error| ForkError::Spool {
        path: std::env::temp_dir().display().to_string(),
        reason: format!("cannot write a copy job's script: {e}"),
    };
    let mut f = tempfile::Builder::new()
        .prefix("hadar-copies-")
        .suffix(".sbatch")
        .tempfile()
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.flush().map_err(io)?;
    // Readable by the user too, in case sbatch reads it after taking the user's identity.
    let _ = std::os::unix::fs::chown(f.path(), Some(uid), Some(gid));
    Ok(f)
}

/// A forked job's state for HadarE: its copy-size profile, its remaining steps, and its
/// last round's copies (for stickiness).
#[allow(clippy::too_many_arguments)]
fn fork_state(
    store: &Store,
    row: &JobRow,
    spec: &JobSpec,
    fj: &ForkJob,
    types: &[String],
    cluster: &hadar_core::Cluster,
    table: &ThroughputTable,
    priors: &Priors,
) -> JobState {
    let id = row.id;
    let learned = store.learned_rates(id).unwrap_or_default();
    let throughput = fork_profile(spec, types, &learned, table, priors);
    let job = Arc::new(Job {
        id: JobId(id),
        kind: spec.job_type.clone().unwrap_or_else(|| row.name.clone()),
        arrival_s: row.arrival_s,
        workers: row.workers,
        total_steps: fj.total_steps,
        weight: 1.0,
        throughput,
    });
    let mut js = JobState::arrived(job, types.len());
    js.remaining_steps = (fj.total_steps - fj.steps_done).max(1.0);
    js.placement = previous_copies(store, id, cluster);
    js.rounds_run = fj.next_round as u32;
    js
}

/// The round's copies: one per part with a budget, each with its checkpoint and result
/// files in `round_dir` and, when the start checkpoint came from `previous`, that round's
/// copy's inner optimizer state.
fn plan_copies(
    cluster: &hadar_core::Cluster,
    parts: &[Part],
    budgets: &[u64],
    round_dir: &Path,
    previous: Option<&ForkRound>,
) -> Vec<ForkCopy> {
    let mut copies = Vec::new();
    for (p, b) in parts.iter().zip(budgets).filter(|(_, b)| **b > 0) {
        let k = copies.len();
        copies.push(ForkCopy {
            node: cluster.node(p.node).name.clone(),
            gpu_type: cluster.type_name(p.gpu_type).to_string(),
            gpus: p.gpus,
            budget: *b,
            checkpoint: round_dir
                .join(format!("copy-{k}.safetensors"))
                .display()
                .to_string(),
            result: round_dir
                .join(format!("copy-{k}.json"))
                .display()
                .to_string(),
            steps: None,
            ok: None,
            exit_code: None,
            weight: None,
            seconds: None,
            inner_state_from: previous
                .and_then(|p| p.copies.get(k))
                .filter(|c| c.ok == Some(true))
                .map(|c| format!("{}.inner", c.checkpoint)),
        });
    }
    copies
}
