//! Forked (HadarE) jobs on Slurm: each round, a `fork=yes` job runs as its copies, one
//! heterogeneous Slurm job with one component per node (that node's GPU type and count),
//! submitted as the job's own user; after the round its copies' checkpoints are averaged
//! (weighted by steps) by the copy job itself, on its node, as the job's user, which reports
//! the round in its `Comment` ([`crate::fork_consolidate`]); the daemon reads that report and
//! updates the persisted Job Tracker ([`hadar_store::fork`]). The daemon never reads or writes
//! the spool: its host need not mount it.
//!
//! The user sees one logical job: the job they submitted stays in Slurm's queue, held, while
//! its copies run; its `Comment` shows its progress
//! (`hadar-fork:v1;state=running;round=R;copies=N;steps=S/T;pct=P`). When the aggregated
//! steps reach the total, the daemon sets `state=done` and releases it: its batch script
//! runs once more, and the fork runner (`hadar-fork-run -- PROGRAM`) sees `state=done` and
//! exits 0 without training, so `afterok` dependents start. When copies fail round after
//! round, it sets `state=failed` and releases it, and the runner exits 1. When the logical
//! job is cancelled, its running copy job is cancelled and the open round counts nothing.
//!
//! Sharing the cluster: jobs without `fork=yes` are planned by Hadar first (see the daemon's
//! round); forked jobs are then planned by HadarE over the GPUs nothing else holds or is
//! about to hold. A copy job holds its GPUs until its deadline, a little before the next
//! round, so every round both policies see the whole cluster again.
//!
//! Crash safety: a round is written to the store (state `submitting`) before its copy job
//! is submitted, and its steps are added to the job's aggregate only in the transaction that
//! marks it consolidated. A restarted daemon adopts a copy job it submitted but did not
//! record (found by name), completes a round whose copies ran while it was down, and gives
//! up (redoes from the last consolidated checkpoint) a round it cannot account for,
//! including one whose ended copy job Slurm no longer shows. The averaging runs once, in the
//! copy job, whatever happens to the daemon; a restarted daemon reads the same report.

use crate::config::{DaemonConfig, ForkConfig};
use crate::fork_consolidate::{RoundPlan, RoundReport, apply};
use crate::spec::{self, JobSpec, Priors};
use crate::view;
use hadar_core::policies::hadare::{HadarEConfig, plan_round};
use hadar_core::tracker::consolidation_weights;
use hadar_core::{Job, JobId, JobState, Part, Placement, RoundInput};
use hadar_formats::ThroughputTable;
use hadar_request::Outer;
use hadar_slurm::{JobStatus, NodeInfo, Slurm, SlurmError, SlurmJob};
use hadar_store::{
    ForkCopy, ForkJob, ForkRound, ForkState, JobRow, NodeGpus, OuterStep, Phase, RoundState, Store,
    StoreError,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tag of the progress comment the daemon keeps on a forked logical job.
pub const COMMENT_TAG: &str = "hadar-fork:v1";

/// What the fork pass needs from Slurm beyond [`crate::SlurmApi`]; implemented by [`Slurm`].
pub trait ForkSlurm {
    /// Submits a batch script as user `uid`/group `gid`; returns the job id.
    fn submit_as(
        &self,
        uid: u32,
        gid: u32,
        script: &Path,
        workdir: &Path,
    ) -> Result<u64, SlurmError>;
    /// Cancels a job.
    fn cancel(&self, id: u64) -> Result<(), SlurmError>;
    /// The batch script a job was submitted with.
    fn batch_script(&self, id: u64) -> Result<String, SlurmError>;
    /// Sets a job's `Comment`.
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError>;
    /// Releases a held job.
    fn release(&self, id: u64) -> Result<(), SlurmError>;
}

impl ForkSlurm for Slurm {
    fn submit_as(
        &self,
        uid: u32,
        gid: u32,
        script: &Path,
        workdir: &Path,
    ) -> Result<u64, SlurmError> {
        Slurm::submit_as(self, uid, gid, script, workdir)
    }
    fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::cancel(self, id)
    }
    fn batch_script(&self, id: u64) -> Result<String, SlurmError> {
        Slurm::batch_script(self, id)
    }
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        Slurm::set_comment(self, id, text)
    }
    fn release(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::release(self, id)
    }
}

/// Why a step of the fork pass failed for one job (the job is retried next round).
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// Slurm refused or failed a command.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file in the spool could not be written or read.
    #[error("spool {path}: {reason}")]
    Spool {
        /// The file or folder.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// The logical job's owner is unknown (Slurm did not show a user and group id).
    #[error("job {0}: Slurm shows no user or group id, so its copies cannot run as its owner")]
    NoOwner(u64),
}

/// What the fork pass did, as `(job, action, outcome)`.
pub type ActionLog = Vec<(u64, String, String)>;

/// What the fork pass says about one forked job, for `hadar explain`.
#[derive(Clone, Debug, PartialEq)]
pub struct ForkDecision {
    /// Its copies this round, when it has some.
    pub placement: Option<NodeGpus>,
    /// The explanation in words.
    pub text: String,
}

/// The fork pass: runs forked jobs as rounds of copies.
pub struct Forker {
    api: Box<dyn ForkSlurm + Send>,
    config: ForkConfig,
    hadare: HadarEConfig,
    round_s: f64,
    restart_s: f64,
    /// `[sidecar] rate_learning_weight`: how much a new measurement moves a learned rate.
    learn_weight: f64,
    partitions: Vec<String>,
    hadar_bin: PathBuf,
}

impl Forker {
    /// A fork pass over this Slurm with the daemon's settings; `hadar_bin` is the `hadar`
    /// binary that averages copies when `[fork].hadar_bin` is unset.
    pub fn new(api: Box<dyn ForkSlurm + Send>, config: &DaemonConfig, hadar_bin: PathBuf) -> Self {
        Forker {
            api,
            hadar_bin: config.fork.hadar_bin.clone().unwrap_or(hadar_bin),
            config: config.fork.clone(),
            hadare: config.hadare.clone(),
            round_s: config.sidecar.round_seconds,
            restart_s: config.sidecar.restart_seconds,
            learn_weight: config.sidecar.rate_learning_weight,
            partitions: config.partitions.clone(),
        }
    }

    /// The ids of the jobs the fork pass owns this round: every unfinished `fork=yes` job,
    /// and every job whose tracker is not closed (a cancelled job's copies still to stop).
    pub fn owned(
        &self,
        store: &Store,
        rows: &BTreeMap<u64, JobRow>,
        specs: &BTreeMap<u64, JobSpec>,
    ) -> Result<BTreeSet<u64>, StoreError> {
        let mut out: BTreeSet<u64> = rows
            .values()
            .filter(|r| r.phase != Phase::Finished)
            .filter(|r| specs.get(&r.id).is_some_and(|s| s.fork))
            .map(|r| r.id)
            .collect();
        for f in store.fork_jobs()? {
            if f.state == ForkState::Active
                || rows.get(&f.job).is_some_and(|r| r.phase != Phase::Finished)
            {
                out.insert(f.job);
            }
        }
        Ok(out)
    }

    /// Brings every owned job's open round forward (adopt, wait, consolidate, cancel) and
    /// releases jobs that are done or failed. Returns the actions taken, `(job, what)`.
    pub fn advance(
        &mut self,
        store: &mut Store,
        rows: &mut BTreeMap<u64, JobRow>,
        owned: &BTreeSet<u64>,
        slurm_jobs: &[SlurmJob],
        now_unix: f64,
        epoch: f64,
    ) -> ActionLog {
        let mut done = Vec::new();
        for &id in owned {
            if let Err(e) =
                self.advance_one(store, rows, id, slurm_jobs, now_unix, epoch, &mut done)
            {
                tracing::warn!(job = id, "forked job: {e}; retried next round");
                done.push((id, "fork".into(), format!("error: {e}")));
            }
        }
        done
    }

    #[allow(clippy::too_many_arguments)]
    fn advance_one(
        &mut self,
        store: &mut Store,
        rows: &mut BTreeMap<u64, JobRow>,
        id: u64,
        slurm_jobs: &[SlurmJob],
        now_unix: f64,
        epoch: f64,
        done: &mut Vec<(u64, String, String)>,
    ) -> Result<(), ForkError> {
        let now_s = now_unix - epoch;
        let Some(row) = rows.get(&id).cloned() else {
            return Ok(());
        };
        let mut fj = match store.fork_job(id)? {
            Some(f) => f,
            None => {
                let f = ForkJob::new(id, row.total_steps);
                store.write(|w| w.put_fork_job(&f))?;
                f
            }
        };
        let gone = row.phase == Phase::Finished;
        if let Some(mut round) = store.open_fork_round(id)? {
            if round.state == RoundState::Submitting {
                // The daemon stopped between writing the round and recording its copy job.
                let found = slurm_jobs.iter().find(|j| {
                    j.name == round.copy_job_name
                        && j.het_job_id.is_none_or(|h| h == j.id)
                        && j.user_id == row.user_id
                });
                match found {
                    Some(j) => {
                        round.copy_job = Some(j.id);
                        round.state = RoundState::Running;
                        store.write(|w| w.put_fork_round(&round))?;
                        done.push((id, "fork-adopt".into(), format!("copy job {}", j.id)));
                    }
                    None => {
                        round.state = RoundState::Abandoned;
                        round.ended_s = Some(now_s);
                        round.message = Some("its copy job was never submitted; redone".into());
                        store.write(|w| w.put_fork_round(&round))?;
                        done.push((id, "fork-redo".into(), format!("round {}", round.round)));
                    }
                }
            }
            if round.state == RoundState::Running {
                let copy = round.copy_job.unwrap_or(0);
                let active = copy_job_active(slurm_jobs, copy);
                if gone {
                    if active {
                        self.api.cancel(copy)?;
                    }
                    round.state = RoundState::Abandoned;
                    round.ended_s = Some(now_s);
                    round.message = Some("the logical job left Slurm; copies cancelled".into());
                    fj.state = ForkState::Cancelled;
                    fj.message = Some(format!(
                        "job {} was {}; its copies were cancelled",
                        id,
                        row.final_state.as_deref().unwrap_or("cancelled")
                    ));
                    store.write(|w| {
                        w.put_fork_round(&round)?;
                        w.put_fork_job(&fj)
                    })?;
                    done.push((id, "fork-cancel".into(), format!("copy job {copy}")));
                    return Ok(());
                }
                if active {
                    let pending_past_deadline = slurm_jobs
                        .iter()
                        .filter(|j| j.id == copy || j.het_job_id == Some(copy))
                        .any(|j| j.status == JobStatus::Pending)
                        && now_unix > round.deadline_unix as f64;
                    if pending_past_deadline {
                        // Its GPUs were taken before it started: give the round up.
                        self.api.cancel(copy)?;
                        round.state = RoundState::Abandoned;
                        round.ended_s = Some(now_s);
                        round.message =
                            Some("its copy job did not start before its deadline".into());
                        store.write(|w| w.put_fork_round(&round))?;
                        done.push((id, "fork-redo".into(), format!("round {}", round.round)));
                    }
                } else {
                    self.consolidate(store, &mut fj, round, &row, slurm_jobs, now_s, done)?;
                    fj = store.fork_job(id)?.unwrap_or(fj);
                }
            }
        } else if gone && fj.state == ForkState::Active {
            fj.state = ForkState::Cancelled;
            fj.message = Some(format!(
                "job {} was {} before it was done",
                id,
                row.final_state.as_deref().unwrap_or("cancelled")
            ));
            store.write(|w| w.put_fork_job(&fj))?;
        }
        if gone {
            return Ok(());
        }
        // The logical job's comment shows its progress; a finished job is released.
        let sj = slurm_jobs.iter().find(|j| j.id == id);
        let open = store.open_fork_round(id)?;
        let text = comment(&fj, open.as_ref());
        if sj.is_some_and(|j| j.comment.as_deref() != Some(text.as_str())) {
            self.api.set_comment(id, &text)?;
        }
        if fj.state != ForkState::Active
            && let Some(j) = sj
            && j.is_held()
        {
            self.api.release(id)?;
            if let Some(r) = rows.get_mut(&id) {
                r.phase = Phase::Starting;
            }
            done.push((id, "fork-release".into(), fj.state.as_str().to_string()));
        }
        if let Some(r) = rows.get_mut(&id) {
            r.steps_done = fj.steps_done;
        }
        Ok(())
    }

    /// Counts a finished round from what its copy job reported (its `Comment`, set by the
    /// job itself after it averaged the copies on its node; see [`crate::fork_consolidate`]),
    /// or records it failed. The daemon never reads the spool.
    #[allow(clippy::too_many_arguments)]
    fn consolidate(
        &mut self,
        store: &mut Store,
        fj: &mut ForkJob,
        mut round: ForkRound,
        row: &JobRow,
        slurm_jobs: &[SlurmJob],
        now_s: f64,
        done: &mut Vec<(u64, String, String)>,
    ) -> Result<(), ForkError> {
        let copy = round.copy_job.unwrap_or(0);
        let Some(leader) = slurm_jobs.iter().find(|j| j.id == copy) else {
            // Slurm forgot the copy job (MinJobAge) before the daemon read its report.
            round.state = RoundState::Abandoned;
            round.ended_s = Some(now_s);
            round.message = Some(format!(
                "copy job {copy} left Slurm before its report was read; redone"
            ));
            store.write(|w| w.put_fork_round(&round))?;
            done.push((row.id, "fork-redo".into(), format!("round {}", round.round)));
            return Ok(());
        };
        // What Slurm bills for it (`sacct`'s Elapsed): the leader's run time.
        if let (Some(start), Some(end)) = (leader.start_time, leader.end_time) {
            round.copy_seconds = Some((end - start).max(0) as f64);
        }
        let report = leader.comment.as_deref().and_then(RoundReport::decode);
        let (averaged, errors) = match report {
            Some(RoundReport::Ran { averaged, copies }) if apply(&mut round, &copies) => {
                (averaged, copy_errors(&round))
            }
            Some(RoundReport::Error(why)) => (
                false,
                vec![format!("the copy job could not run the round: {why}")],
            ),
            _ => (
                false,
                vec![format!(
                    "copy job {copy} ended ({}) without reporting its round",
                    leader.status.as_str()
                )],
            ),
        };
        for c in round.copies.iter_mut().filter(|c| c.ok.is_none()) {
            c.ok = Some(false);
            c.steps = Some(0.0);
        }
        let good: Vec<usize> = (0..round.copies.len())
            .filter(|k| round.copies[*k].ok == Some(true))
            .collect();
        round.ended_s = Some(now_s);
        if good.is_empty() {
            round.state = RoundState::Failed;
            round.message = Some(errors.join("; "));
            fj.failed_rounds += 1;
            fj.next_round = fj.next_round.max(round.round + 1);
            if fj.failed_rounds >= self.config.max_failed_rounds {
                fj.state = ForkState::Failed;
                fj.message = Some(format!(
                    "no copy succeeded in {} rounds in a row; last: {}",
                    fj.failed_rounds,
                    errors.join("; ")
                ));
            }
            store.write(|w| {
                w.put_fork_round(&round)?;
                w.put_fork_job(fj)
            })?;
            done.push((row.id, "fork-round-failed".into(), errors.join("; ")));
            return Ok(());
        }
        let steps: Vec<f64> = good
            .iter()
            .map(|k| round.copies[*k].steps.unwrap_or(0.0))
            .collect();
        let weights = consolidation_weights(&steps);
        for (k, w) in good.iter().zip(&weights) {
            round.copies[*k].weight = Some(*w);
        }
        let averaging = if averaged {
            Ok(())
        } else {
            Err(format!(
                "averaging failed on the compute node (see {}/copies.out)",
                round_dir(&round).display()
            ))
        };
        match averaging {
            Ok(()) => {
                crate::faults::reached("fork-averaged");
                // The copies' measured rates are learned in the transaction that counts the
                // round, so a round redone after a crash is learned from once, like its steps.
                let observed = observed_rates(&round);
                let alpha = self.learn_weight;
                let counted = store.write(|w| {
                    let counted = w.consolidate_round(&round)?;
                    if counted {
                        for (gpu_type, gpus, rate) in &observed {
                            w.learn_rate(row.id, gpu_type, *gpus, *rate, alpha)?;
                        }
                    }
                    Ok(counted)
                })?;
                if counted && !observed.is_empty() {
                    tracing::info!(
                        job = row.id,
                        round = round.round,
                        "learned from the copies' rates: {}",
                        observed
                            .iter()
                            .map(|(t, g, r)| format!("{g}x{t} {r:.2} steps/s"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                crate::faults::reached("fork-counted");
                let total: f64 = steps.iter().sum();
                done.push((
                    row.id,
                    "fork-consolidate".into(),
                    format!(
                        "round {}: {} copies, {total} steps{}",
                        round.round,
                        good.len(),
                        if counted { "" } else { " (already counted)" }
                    ),
                ));
            }
            Err(why) => {
                round.state = RoundState::Failed;
                round.message = Some(why.clone());
                fj.failed_rounds += 1;
                fj.next_round = fj.next_round.max(round.round + 1);
                if fj.failed_rounds >= self.config.max_failed_rounds {
                    fj.state = ForkState::Failed;
                    fj.message = round.message.clone();
                }
                store.write(|w| {
                    w.put_fork_round(&round)?;
                    w.put_fork_job(fj)
                })?;
                done.push((row.id, "fork-round-failed".into(), why));
            }
        }
        Ok(())
    }

    /// Plans the forked jobs that have no open round with HadarE, over the GPUs nothing
    /// holds (`occupied` lists `(node, type, count)` held or about to be held), and submits
    /// one copy job per planned job. Returns the actions taken and a decision per owned job.
    #[allow(clippy::too_many_arguments)]
    pub fn start_rounds(
        &mut self,
        store: &mut Store,
        rows: &BTreeMap<u64, JobRow>,
        specs: &BTreeMap<u64, JobSpec>,
        owned: &BTreeSet<u64>,
        nodes: &[NodeInfo],
        slurm_jobs: &[SlurmJob],
        occupied: &[(String, String, u32)],
        table: &ThroughputTable,
        priors: &Priors,
        now_unix: f64,
        epoch: f64,
    ) -> (ActionLog, BTreeMap<u64, ForkDecision>) {
        let now_s = now_unix - epoch;
        let mut done = Vec::new();
        let mut decisions = BTreeMap::new();
        let cv = view::build(nodes, &self.partitions, occupied);
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
            let Some(cluster) = &cv.cluster else {
                continue;
            };
            let learned = store.learned_rates(id).unwrap_or_default();
            let throughput = fork_profile(spec, &cv.types, &learned, table, priors);
            let job = Arc::new(Job {
                id: JobId(id),
                kind: spec.job_type.clone().unwrap_or_else(|| row.name.clone()),
                arrival_s: row.arrival_s,
                workers: row.workers,
                total_steps: fj.total_steps,
                weight: 1.0,
                throughput,
            });
            let mut js = JobState::arrived(job, cv.types.len());
            js.remaining_steps = (fj.total_steps - fj.steps_done).max(1.0);
            js.placement = previous_copies(store, id, cluster);
            js.rounds_run = fj.next_round as u32;
            states.push(js);
            trackers.insert(id, fj);
        }
        let Some(cluster) = &cv.cluster else {
            return (done, decisions);
        };
        if states.is_empty() {
            return (done, decisions);
        }
        states.sort_by(|a, b| a.job.arrival_order(&b.job));
        let input = RoundInput {
            now_s,
            round_s: self.round_s,
            restart_s: self.restart_s,
            cluster,
            jobs: &states,
        };
        let plan = plan_round(&self.hadare, &input);
        if let Err(e) = plan.validate(cluster, &states) {
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
    fn start_round(
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
        let mut copies = Vec::new();
        for (p, b) in parts.iter().zip(&budgets).filter(|(_, b)| **b > 0) {
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
                    .as_ref()
                    .and_then(|p| p.copies.get(k))
                    .filter(|c| c.ok == Some(true))
                    .map(|c| format!("{}.inner", c.checkpoint)),
            });
        }
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

/// A forked job's throughput for copies of every size up to its worker count (1, 2, 4, ...
/// and the count itself), each from [`spec::profile`]'s sources for that size, so that
/// HadarE may run a 4-GPU job as copies of 2 GPUs on nodes that have only 2 of a type.
pub fn fork_profile(
    spec: &JobSpec,
    type_names: &[String],
    learned: &[hadar_store::LearnedRate],
    table: &ThroughputTable,
    priors: &Priors,
) -> hadar_core::ThroughputProfile {
    let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |g| g.checked_mul(2))
        .take_while(|g| *g < spec.workers)
        .collect();
    sizes.push(spec.workers);
    let mut points: Vec<Vec<(u32, f64)>> = vec![Vec::new(); type_names.len()];
    for g in sizes {
        let sized = JobSpec {
            workers: g,
            ..spec.clone()
        };
        let (p, _) = spec::profile(&sized, type_names, learned, table, priors);
        for (i, per_type) in points.iter_mut().enumerate() {
            if let Some(r) = p
                .rate(hadar_core::GpuType(i as u16), g)
                .filter(|r| *r > 0.0)
            {
                per_type.push((g, r));
            }
        }
    }
    hadar_core::ThroughputProfile::new(points.into_iter().map(hadar_core::RateCurve::new).collect())
}

/// The steps per second each successful copy of `round` did, as `(type, GPUs, rate)`: its
/// steps over the seconds its program ran. Copies that did no steps or have no timing teach
/// nothing; copies of one type and size are averaged, each weighted by its time.
fn observed_rates(round: &ForkRound) -> Vec<(String, u32, f64)> {
    let mut by_kind: BTreeMap<(String, u32), (f64, f64)> = BTreeMap::new();
    for c in round.copies.iter().filter(|c| c.ok == Some(true)) {
        let (Some(steps), Some(secs)) = (c.steps, c.seconds) else {
            continue;
        };
        if steps > 0.0 && secs > 0.0 {
            let e = by_kind.entry((c.gpu_type.clone(), c.gpus)).or_default();
            e.0 += steps;
            e.1 += secs;
        }
    }
    by_kind
        .into_iter()
        .map(|((t, g), (steps, secs))| (t, g, steps / secs))
        .collect()
}

/// Writes a copy job's script to a temporary file for sbatch (mode 0600, owned by the job's
/// user, removed when dropped).
fn private_script(text: &str, uid: u32, gid: u32) -> Result<tempfile::NamedTempFile, ForkError> {
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

/// The failed copies of a reported round, in words.
fn copy_errors(round: &ForkRound) -> Vec<String> {
    round
        .copies
        .iter()
        .filter(|c| c.ok == Some(false))
        .map(|c| match c.exit_code {
            Some(e) => format!("copy on {}: failed (exit code {e})", c.node),
            None => format!("copy on {}: no result (killed or never started)", c.node),
        })
        .collect()
}

/// A round's folder in the spool (the folder of its copies' checkpoints).
fn round_dir(round: &ForkRound) -> PathBuf {
    round
        .copies
        .first()
        .and_then(|c| Path::new(&c.checkpoint).parent())
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// True while any component of copy job `id` has not ended.
fn copy_job_active(slurm_jobs: &[SlurmJob], id: u64) -> bool {
    slurm_jobs
        .iter()
        .filter(|j| j.id == id || j.het_job_id == Some(id))
        .any(|j| !j.status.is_terminal())
}

fn owner(row: &JobRow) -> Result<(u32, u32), ForkError> {
    match (row.user_id, row.group_id) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => Err(ForkError::NoOwner(row.id)),
    }
}

/// The copies of the job's last round, as a forked placement (for HadarE's stickiness).
fn previous_copies(store: &Store, id: u64, cluster: &hadar_core::Cluster) -> Option<Placement> {
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

/// The outer step of round `r` of a job choosing `outer`: none for the plain mean, and none
/// in a job's first counted round (its copies built their start themselves, so there is no
/// start checkpoint to step from). The velocity is read from the file the job's last
/// counted round wrote and written to a new file of this round.
fn outer_step(outer: Outer, fj: &ForkJob, job_dir: &Path, r: u64) -> Option<OuterStep> {
    let Outer::Nesterov { lr, momentum } = outer else {
        return None;
    };
    fj.checkpoint.as_ref()?;
    Some(OuterStep {
        lr,
        momentum,
        momentum_from: if momentum > 0.0 {
            fj.momentum.clone()
        } else {
            None
        },
        momentum_out: (momentum > 0.0).then(|| {
            job_dir
                .join(format!("momentum-{r}.safetensors"))
                .display()
                .to_string()
        }),
    })
}

/// `hadar average`'s options for a round's outer step (none for the plain mean).
pub fn outer_args(round: &ForkRound) -> Vec<String> {
    let (Some(o), Some(start)) = (&round.outer, &round.start_from) else {
        return Vec::new();
    };
    let mut args: Vec<String> = vec![
        "--outer".into(),
        "nesterov".into(),
        "--start".into(),
        start.clone(),
        "--outer-lr".into(),
        o.lr.to_string(),
        "--outer-momentum".into(),
        o.momentum.to_string(),
    ];
    if let Some(out) = &o.momentum_out {
        args.extend(["--momentum-state".into(), out.clone()]);
        match &o.momentum_from {
            Some(from) => args.extend(["--momentum-from".into(), from.clone()]),
            // Explicitly zero: a file left at `out` by an earlier attempt of this very
            // round must not be read as the previous velocity.
            None => args.push("--momentum-zero".into()),
        }
    }
    args
}

/// Splits `total` steps over copies in proportion to `rates` (largest remainders get the
/// leftover steps, lowest index first on ties); the parts add up to `total` exactly.
pub fn split_budget(total: u64, rates: &[f64]) -> Vec<u64> {
    let sum: f64 = rates.iter().filter(|r| r.is_finite() && **r > 0.0).sum();
    if rates.is_empty() {
        return Vec::new();
    }
    if sum <= 0.0 {
        let mut out = vec![total / rates.len() as u64; rates.len()];
        for slot in out.iter_mut().take((total % rates.len() as u64) as usize) {
            *slot += 1;
        }
        return out;
    }
    let exact: Vec<f64> = rates
        .iter()
        .map(|r| {
            if r.is_finite() && *r > 0.0 {
                total as f64 * r / sum
            } else {
                0.0
            }
        })
        .collect();
    let mut out: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let given: u64 = out.iter().sum();
    let mut order: Vec<usize> = (0..rates.len()).collect();
    order.sort_by(|a, b| {
        let fa = exact[*a] - exact[*a].floor();
        let fb = exact[*b] - exact[*b].floor();
        fb.total_cmp(&fa).then(a.cmp(b))
    });
    for k in order.into_iter().take(total.saturating_sub(given) as usize) {
        out[k] += 1;
    }
    out
}

/// The GPUs of a round's copies, in Slurm's names.
pub fn copies_gpus(copies: &[ForkCopy]) -> NodeGpus {
    copies
        .iter()
        .map(|c| (c.node.clone(), vec![(c.gpu_type.clone(), c.gpus)]))
        .collect()
}

/// The logical job's progress comment: one word with no spaces, so that `scontrol show job`
/// prints it unambiguously and a shell reads it with one pattern.
pub fn comment(fj: &ForkJob, open: Option<&ForkRound>) -> String {
    let (round, copies) = match open {
        Some(r) => (r.round, r.copies.len()),
        None => (fj.next_round, 0),
    };
    format!(
        "{COMMENT_TAG};state={};round={round};copies={copies};steps={}/{};pct={:.0}",
        fj.state.as_str(),
        fj.steps_done as u64,
        fj.total_steps as u64,
        fj.percent().floor()
    )
}

fn describe(fj: &ForkJob, open: Option<&ForkRound>) -> ForkDecision {
    let progress = format!(
        "{} of {} steps ({:.0}%)",
        fj.steps_done as u64,
        fj.total_steps as u64,
        fj.percent().floor()
    );
    match (fj.state, open) {
        (ForkState::Active, Some(r)) => {
            let gpus = copies_gpus(&r.copies);
            ForkDecision {
                text: format!(
                    "runs forked (HadarE): round {}, {} copies on {}; {progress}",
                    r.round,
                    r.copies.len(),
                    crate::explain::placement_words(&gpus)
                ),
                placement: Some(gpus),
            }
        }
        (ForkState::Active, None) => ForkDecision {
            placement: None,
            text: format!("forked (HadarE), between rounds; {progress}"),
        },
        (state, _) => ForkDecision {
            placement: None,
            text: format!(
                "forked (HadarE), {}; {progress}{}",
                state.as_str(),
                fj.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        },
    }
}

/// The `#SBATCH` options every copy job of a logical job carries from it, so that the site's
/// accounting bills the copies as it would the job: its partition, account, QOS and time
/// limit, and its CPUs and memory per GPU (the job's CPUs and memory over its `workers`
/// GPUs, rounded up). Each option only when Slurm shows the job's value; values are Slurm's
/// own names and numbers, which hold no spaces.
fn copy_options(sj: Option<&SlurmJob>, workers: u32) -> String {
    let Some(j) = sj else {
        return String::new();
    };
    let safe = |v: &str| !v.is_empty() && !v.contains(char::is_whitespace);
    let mut out = String::new();
    for (key, value) in [
        ("partition", j.partition.as_deref()),
        ("account", j.site.account.as_deref()),
        ("qos", j.site.qos.as_deref()),
    ] {
        if let Some(v) = value.filter(|v| safe(v)) {
            out.push_str(&format!(" --{key}={v}"));
        }
    }
    if let Some(t) = j.site.time_limit_min {
        out.push_str(&format!(" --time={t}"));
    }
    let w = u64::from(workers.max(1));
    if let Some(c) = j.site.cpus {
        out.push_str(&format!(
            " --cpus-per-gpu={}",
            u64::from(c).div_ceil(w).max(1)
        ));
    }
    if let Some(m) = j.site.mem_per_node_mb {
        let nodes = j.nodes.len().max(1) as u64;
        out.push_str(&format!(
            " --mem-per-gpu={}M",
            (m * nodes).div_ceil(w).max(1)
        ));
    }
    out
}

/// What a copy job's script carries besides its copies: it makes the spool's folders, writes
/// the user's script and the round's plan there, and after the copies averages them.
struct InJob<'a> {
    /// `hadar` on the compute nodes.
    hadar_bin: &'a Path,
    /// The job's folder in the spool.
    job_dir: &'a Path,
    /// The logical job's batch script.
    user_script: &'a str,
    /// The round's [`RoundPlan`] as JSON.
    plan: &'a str,
}

/// The heterogeneous batch script that runs one round's copies: one component per copy
/// (its node, its GPUs of one type), each running the fork runner with the user's script
/// as the program, and then, on the first copy's node, `hadar fork-consolidate`, whose
/// report the script puts in its job's `Comment` (see [`crate::fork_consolidate`]).
/// `#HADAR off` keeps the plugin from managing it; the embedded files are base64, so no
/// line of theirs reads as a directive.
fn copy_script(
    round: &ForkRound,
    runner: &Path,
    user_script: &Path,
    steps_done: u64,
    options: &str,
    dir: &Path,
    in_job: &InJob,
) -> String {
    let mut s = String::from("#!/bin/sh\n");
    let n = round.copies.len();
    for (k, c) in round.copies.iter().enumerate() {
        if k > 0 {
            s.push_str("#SBATCH hetjob\n");
        }
        s.push_str(&format!(
            "#SBATCH --job-name={} --nodes=1 --ntasks=1 --nodelist={} --gres=gpu:{}:{}{options} --export=ALL --output=/dev/null\n",
            round.copy_job_name, c.node, c.gpu_type, c.gpus,
        ));
    }
    s.push_str("#HADAR off\n");
    s.push_str(&format!(
        "# hadar: round {} of job {} ({n} copies); written by hadar serve\n",
        round.round, round.job
    ));
    s.push_str(&in_job_setup(in_job, user_script, dir));
    for (k, c) in round.copies.iter().enumerate() {
        // A single copy is an ordinary job: srun refuses --het-group there.
        let group = if n > 1 {
            format!("--het-group={k} ")
        } else {
            String::new()
        };
        let mut start = round
            .start_from
            .as_deref()
            .map(|p| format!(" --start-from {}", quote(p)))
            .unwrap_or_default();
        if let Some(inner) = &c.inner_state_from {
            start.push_str(&format!(" --inner-state-from {}", quote(inner)));
        }
        s.push_str(&format!(
            "srun {group}--ntasks=1 env HADAR_GPU_TYPE={} HADAR_GPUS={} {} --index {k} --copies {n} --round {} --checkpoint-out {} --result {}{start} --step-budget {} --deadline {} --steps-done {steps_done} -- {} &\n",
            quote(&c.gpu_type),
            c.gpus,
            quote(&runner.display().to_string()),
            round.round,
            quote(&c.checkpoint),
            quote(&c.result),
            c.budget,
            round.deadline_unix,
            quote(&user_script.display().to_string()),
        ));
    }
    s.push_str(&format!(
        "wait\nreport=$({} fork-consolidate round.json) || report='{TAG};error=consolidation-did-not-run'\nhadar_report \"$report\"\nexit 0\n",
        quote(&in_job.hadar_bin.display().to_string()),
        TAG = crate::fork_consolidate::TAG,
    ));
    s
}

/// The copy job's first lines: the job's folder (made by the user, refused when someone
/// else owns it), the round's folder as the working directory and output, the user's script
/// (once) and the round's plan.
fn in_job_setup(in_job: &InJob, user_script: &Path, dir: &Path) -> String {
    let tag = crate::fork_consolidate::TAG;
    let job_dir = quote(&in_job.job_dir.display().to_string());
    let script = quote(&user_script.display().to_string());
    format!(
        "set -u\numask 077\n\
         hadar_report() {{ scontrol update JobId=\"$SLURM_JOB_ID\" Comment=\"$1\" || true; }}\n\
         mkdir -p {job_dir} 2>/dev/null\n\
         if [ ! -d {job_dir} ] || [ ! -O {job_dir} ]; then hadar_report '{tag};error=spool-folder-missing-or-not-the-users'; exit 1; fi\n\
         chmod 0700 {job_dir}\n\
         mkdir -p {dir} && cd {dir} || {{ hadar_report '{tag};error=cannot-make-the-round-folder'; exit 1; }}\n\
         exec >>copies.out 2>&1\n\
         if [ ! -f {script} ]; then\n\
         base64 -d >{script}.tmp <<'HADAR_EOF'\n{}\nHADAR_EOF\n\
         chmod 0700 {script}.tmp && mv -f {script}.tmp {script}\n\
         fi\n\
         base64 -d >round.json <<'HADAR_EOF'\n{}\nHADAR_EOF\n",
        crate::fork_consolidate::base64(in_job.user_script.as_bytes()),
        crate::fork_consolidate::base64(in_job.plan.as_bytes()),
        dir = quote(&dir.display().to_string()),
    )
}

/// Single-quotes a word for the shell.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn forked_profiles_offer_every_copy_size_up_to_the_workers() {
        let table = hadar_formats::embedded::throughputs().unwrap();
        let spec = JobSpec {
            workers: 4,
            steps: Some(10),
            job_type: Some("resnet18-b64".into()),
            hints: vec![],
            gpu_types: None,
            fork: true,
            model: None,
            outer: None,
        };
        let types = vec!["v100".to_string(), "k80".to_string()];
        let priors = Priors {
            default_rate_per_gpu: 1.0,
            throughput_scale: 1.0,
        };
        let p = fork_profile(&spec, &types, &[], &table, &priors);
        for g in [1, 2, 4] {
            assert_eq!(
                p.rate(hadar_core::GpuType(1), g),
                spec::table_rate(&table, "ResNet-18 (batch size 64)", "k80", g),
                "{g} GPUs"
            );
        }
        assert_eq!(p.rate(hadar_core::GpuType(0), 3), None);
    }

    #[test]
    fn budgets_follow_rates_and_add_up() {
        assert_eq!(split_budget(100, &[3.0, 1.0]), vec![75, 25]);
        assert_eq!(split_budget(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(split_budget(5, &[0.0, 0.0]), vec![3, 2]);
        assert_eq!(split_budget(0, &[2.0]), vec![0]);
        assert!(split_budget(7, &[]).is_empty());
    }

    #[test]
    fn the_comment_is_one_word_with_the_progress() {
        let mut fj = ForkJob::new(9, 1000.0);
        fj.steps_done = 805.0;
        let c = comment(&fj, None);
        assert_eq!(
            c,
            "hadar-fork:v1;state=active;round=0;copies=0;steps=805/1000;pct=80"
        );
        assert!(!c.contains(' '));
        fj.state = ForkState::Done;
        assert!(comment(&fj, None).contains("state=done"));
    }

    fn test_in_job() -> InJob<'static> {
        InJob {
            hadar_bin: Path::new("/usr/bin/hadar"),
            job_dir: Path::new("/sp/1"),
            user_script: "#!/bin/sh\n#HADAR fork=yes\n#SBATCH --gres=gpu:1\n",
            plan: "{}",
        }
    }

    #[test]
    fn the_copy_script_has_one_component_per_copy_and_quotes_paths() {
        let copy = |node: &str, t: &str, k: usize| ForkCopy {
            node: node.into(),
            gpu_type: t.into(),
            gpus: 2,
            budget: 40,
            checkpoint: format!("/sp/1/round-0/copy-{k}.safetensors"),
            result: format!("/sp/1/round-0/copy-{k}.json"),
            steps: None,
            ok: None,
            exit_code: None,
            weight: None,
            seconds: None,
            inner_state_from: (k == 1).then(|| "/sp/1/round-0/copy-1.safetensors.inner".into()),
        };
        let round = ForkRound {
            job: 1,
            round: 0,
            state: RoundState::Submitting,
            copy_job: None,
            copy_job_name: "hadar-fork-1-r0".into(),
            copies: vec![copy("n1", "v100", 0), copy("n3", "k80", 1)],
            start_from: Some("/sp/it's.safetensors".into()),
            consolidated: "/sp/1/consolidated-0.safetensors".into(),
            deadline_unix: 1234,
            started_s: 0.0,
            ended_s: None,
            steps: 0.0,
            message: None,
            outer: None,
            copy_seconds: None,
        };
        let s = copy_script(
            &round,
            Path::new("/r/hadar-fork-run"),
            Path::new("/sp/1/job.sh"),
            7,
            " --partition=gpu",
            Path::new("/sp/1/round-0"),
            &test_in_job(),
        );
        assert_eq!(s.matches("#SBATCH hetjob").count(), 1, "{s}");
        assert!(
            s.contains("--nodelist=n1 --gres=gpu:v100:2 --partition=gpu"),
            "{s}"
        );
        assert!(s.contains("--nodelist=n3 --gres=gpu:k80:2"), "{s}");
        assert!(s.contains("#HADAR off"));
        // The user's script rides along as base64: none of its directives reach sbatch or
        // the plugin; the copy job makes the user's folder, refusing one not its user's, and
        // averages after its copies, reporting in its own Comment.
        assert!(
            !s.contains("#HADAR fork") && !s.contains("--gres=gpu:1\n"),
            "{s}"
        );
        assert!(s.contains(&crate::fork_consolidate::base64(
            test_in_job().user_script.as_bytes()
        )));
        assert!(s.contains("[ ! -O '/sp/1' ]"), "{s}");
        assert!(s.contains("--output=/dev/null"), "{s}");
        assert!(
            s.contains("wait\nreport=$('/usr/bin/hadar' fork-consolidate round.json)"),
            "{s}"
        );
        assert!(
            s.contains("scontrol update JobId=\"$SLURM_JOB_ID\" Comment=\"$1\""),
            "{s}"
        );
        assert!(s.contains("srun --het-group=1 --ntasks=1 env HADAR_GPU_TYPE='k80' HADAR_GPUS=2 '/r/hadar-fork-run' --index 1 --copies 2 --round 0"), "{s}");
        assert!(s.contains("--start-from '/sp/it'\\''s.safetensors'"), "{s}");
        // Copy 1 gets the inner optimizer state of the previous round's copy 1; copy 0 none.
        assert!(
            s.contains("--start-from '/sp/it'\\''s.safetensors' --inner-state-from '/sp/1/round-0/copy-1.safetensors.inner' --step-budget 40"),
            "{s}"
        );
        assert_eq!(s.matches("--inner-state-from").count(), 1, "{s}");
        assert!(
            s.contains("--step-budget 40 --deadline 1234 --steps-done 7 -- '/sp/1/job.sh' &"),
            "{s}"
        );
        let single = ForkRound {
            copies: vec![round.copies[0].clone()],
            ..round
        };
        let s = copy_script(
            &single,
            Path::new("/r/run"),
            Path::new("/sp/1/job.sh"),
            0,
            "",
            Path::new("/d"),
            &test_in_job(),
        );
        assert!(!s.contains("hetjob") && !s.contains("--het-group"), "{s}");
        assert!(s.contains("srun --ntasks=1 env HADAR_GPU_TYPE='v100' HADAR_GPUS=2 '/r/run' --index 0 --copies 1"), "{s}");
    }

    #[test]
    fn copies_carry_the_jobs_partition_accounting_and_per_gpu_cpus_and_memory() {
        let text = "JobId=5 JobName=a\n   Priority=0 Account=proj QOS=high JobState=PENDING Reason=JobHeldAdmin\n   TimeLimit=1-02:00:00 TimeMin=N/A\n   Partition=gpu\n   NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=1\n   MinCPUsNode=8 MinMemoryNode=4G MinTmpDiskNode=0\n";
        let j = hadar_slurm::job::parse_jobs(text).0.remove(0);
        assert_eq!(
            copy_options(Some(&j), 2),
            " --partition=gpu --account=proj --qos=high --time=1560 --cpus-per-gpu=4 --mem-per-gpu=2048M"
        );
        assert_eq!(copy_options(None, 2), "");
    }

    #[test]
    fn the_outer_step_reads_the_last_velocity_and_writes_a_new_one() {
        let dir = Path::new("/sp/9");
        let nesterov = Outer::Nesterov {
            lr: 1.0,
            momentum: 0.5,
        };
        let mut fj = ForkJob::new(9, 100.0);
        // No start checkpoint yet (round 0) or the plain mean: no outer step.
        assert_eq!(outer_step(nesterov, &fj, dir, 0), None);
        fj.checkpoint = Some("/sp/9/consolidated-0.safetensors".into());
        assert_eq!(outer_step(Outer::Mean, &fj, dir, 1), None);
        let first = outer_step(nesterov, &fj, dir, 1).unwrap();
        assert_eq!(first.momentum_from, None);
        assert_eq!(
            first.momentum_out.as_deref(),
            Some("/sp/9/momentum-1.safetensors")
        );
        fj.momentum = first.momentum_out.clone();
        let second = outer_step(nesterov, &fj, dir, 2).unwrap();
        assert_eq!(
            second.momentum_from.as_deref(),
            Some("/sp/9/momentum-1.safetensors")
        );
        assert_eq!(
            second.momentum_out.as_deref(),
            Some("/sp/9/momentum-2.safetensors")
        );
        // No momentum: no velocity to keep.
        let plain = Outer::Nesterov {
            lr: 0.7,
            momentum: 0.0,
        };
        assert_eq!(outer_step(plain, &fj, dir, 2).unwrap().momentum_out, None);

        // The averaging command: a first velocity is explicitly zero (an earlier attempt's
        // file must not count), later ones name the previous round's file.
        let round = |outer: Option<OuterStep>| ForkRound {
            job: 9,
            round: 2,
            state: RoundState::Running,
            copy_job: None,
            copy_job_name: "hadar-fork-9-r2".into(),
            copies: vec![],
            start_from: fj.checkpoint.clone(),
            consolidated: "/sp/9/consolidated-2.safetensors".into(),
            deadline_unix: 0,
            started_s: 0.0,
            ended_s: None,
            steps: 0.0,
            message: None,
            outer,
            copy_seconds: None,
        };
        assert!(outer_args(&round(None)).is_empty());
        let a = outer_args(&round(Some(first))).join(" ");
        assert_eq!(
            a,
            "--outer nesterov --start /sp/9/consolidated-0.safetensors --outer-lr 1 --outer-momentum 0.5 --momentum-state /sp/9/momentum-1.safetensors --momentum-zero"
        );
        let a = outer_args(&round(Some(second))).join(" ");
        assert!(
            a.ends_with("--momentum-state /sp/9/momentum-2.safetensors --momentum-from /sp/9/momentum-1.safetensors"),
            "{a}"
        );
    }

    proptest! {
        #[test]
        fn budgets_always_add_up_to_the_total(total in 0u64..1_000_000, rates in prop::collection::vec(0.0f64..100.0, 1..8)) {
            let b = split_budget(total, &rates);
            prop_assert_eq!(b.len(), rates.len());
            prop_assert_eq!(b.iter().sum::<u64>(), total);
        }
    }
}
