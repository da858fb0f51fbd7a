//! New rounds for forked jobs, as the round's decision planned them
//! ([`super::plan::plan_forks`]): each planned round is recorded, then submitted as one
//! heterogeneous copy job as the job's user.

use super::*;

impl Forker {
    /// Submits the rounds `starts` (the round's decision) as one copy job each. Returns the
    /// actions taken, and the jobs whose round could not start with why.
    #[allow(clippy::too_many_arguments)]
    pub fn start_planned(
        &mut self,
        store: &mut Store,
        rows: &BTreeMap<u64, JobRow>,
        specs: &BTreeMap<u64, JobSpec>,
        slurm_jobs: &[SlurmJob],
        starts: &[ForkStart],
        now_unix: f64,
        epoch: f64,
    ) -> (ActionLog, BTreeMap<u64, String>) {
        let mut done = Vec::new();
        let mut failed = BTreeMap::new();
        for start in starts {
            let id = start.job;
            let Some(row) = rows.get(&id) else {
                continue;
            };
            let sj = slurm_jobs.iter().find(|j| j.id == id);
            let outer = specs
                .get(&id)
                .and_then(|s| s.outer)
                .unwrap_or_else(|| self.config.default_outer());
            match self.start_round(store, row, sj, start, outer, now_unix, epoch) {
                Ok(round) => {
                    let placement = copies_gpus(&round.copies);
                    done.push(ActionDone::new(
                        id,
                        ActionKind::ForkStart,
                        ActionOutcome::Done(format!(
                            "round {}: copy job {} with {} copies on {}",
                            round.round,
                            round.copy_job.unwrap_or(0),
                            round.copies.len(),
                            crate::explain::placement_words(&placement)
                        )),
                    ));
                }
                Err(e) => {
                    tracing::warn!(job = id, "forked job: cannot start its copies: {e}");
                    done.push(ActionDone::new(
                        id,
                        ActionKind::ForkStart,
                        ActionOutcome::Failed(e.to_string()),
                    ));
                    failed.insert(id, e.to_string());
                }
            }
        }
        (done, failed)
    }

    /// Records round `start` of a forked job and submits its copy job as the job's user.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_round(
        &mut self,
        store: &mut Store,
        row: &JobRow,
        sj: Option<&SlurmJob>,
        start: &ForkStart,
        outer: Outer,
        now_unix: f64,
        epoch: f64,
    ) -> Result<ForkRound, ForkError> {
        let id = row.id;
        let (uid, gid) = owner(row)?;
        let fj = store
            .fork_job(id)?
            .filter(|f| f.next_round == start.round && f.state == ForkState::Active)
            .ok_or(ForkError::Moved(id, start.round))?;
        let fj = &fj;
        let r = start.round;
        let job_dir = self.config.spool.join(id.to_string());
        let round_dir = job_dir.join(format!("round-{r}"));
        let user_script = self.api.batch_script(id)?;
        let deadline =
            (now_unix + self.round_s - self.config.deadline_margin_seconds).floor() as u64;
        // The round the start checkpoint came from: copy k's inner optimizer state, left
        // beside its checkpoint, goes to this round's copy k.
        let previous = store.fork_rounds(id)?.into_iter().rev().find(|p| {
            p.state == RoundState::Consolidated && Some(&p.consolidated) == fj.checkpoint.as_ref()
        });
        let copies = plan_copies(&start.copies, &round_dir, previous.as_ref());
        let round = ForkRound {
            job: id,
            round: r,
            state: RoundState::Submitting,
            copy_job: None,
            copy_job_name: copy_job_name(id, r),
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
        let text = self.copy_job_script(
            &round,
            fj,
            &copy_options(sj, row.workers),
            &job_dir,
            &round_dir,
            &user_script,
            epoch,
        );
        self.submit_round(store, fj, round, &text, (uid, gid), now_unix - epoch)
    }

    /// The batch script of `round`'s copy job, with the logical job's `user_script` and the
    /// round's plan inside it.
    #[allow(clippy::too_many_arguments)]
    fn copy_job_script(
        &self,
        round: &ForkRound,
        fj: &ForkJob,
        options: &str,
        job_dir: &Path,
        round_dir: &Path,
        user_script: &str,
        epoch: f64,
    ) -> String {
        // The spool is only written by the copy job, on its node, as the job's user: the
        // user's script goes to it inside the copy job's own script.
        let script = job_dir.join("job.sh");
        let plan = RoundPlan {
            round: round.clone(),
            epoch,
            steps_done: fj.steps_done,
            total_steps: fj.total_steps,
        };
        let in_job = InJob {
            hadar_bin: &self.hadar_bin,
            job_dir,
            user_script,
            plan: &serde_json::to_string(&plan).unwrap_or_default(),
        };
        copy_script(
            round,
            &self.config.runner,
            &script,
            fj.steps_done as u64,
            options,
            round_dir,
            &in_job,
        )
    }

    /// Writes `round` (and the forked job's next round number) to the store, then submits
    /// the copy job `text` as the job's user `(uid, gid)`. The round is written first so that
    /// a daemon restarted in between finds the copy job it submitted. On success the round
    /// is running; if sbatch fails it is abandoned, `now_s` its end.
    fn submit_round(
        &mut self,
        store: &mut Store,
        fj: &ForkJob,
        mut round: ForkRound,
        text: &str,
        (uid, gid): (u32, u32),
        now_s: f64,
    ) -> Result<ForkRound, ForkError> {
        // sbatch reads the script on the daemon's host: a private temporary file.
        let tmp = private_script(text, uid, gid)?;
        let mut next = fj.clone();
        next.next_round = round.round + 1;
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
                round.ended_s = Some(now_s);
                store.write(|w| w.put_fork_round(&round))?;
                Err(e.into())
            }
        }
    }
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

/// The round's copies, each with its checkpoint and result files in `round_dir` and, when
/// the start checkpoint came from `previous`, that round's copy's inner optimizer state.
fn plan_copies(
    planned: &[PlannedCopy],
    round_dir: &Path,
    previous: Option<&ForkRound>,
) -> Vec<ForkCopy> {
    planned
        .iter()
        .enumerate()
        .map(|(k, p)| ForkCopy {
            node: p.node.clone(),
            gpu_type: p.gpu_type.clone(),
            gpus: p.gpus,
            budget: p.budget,
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
        })
        .collect()
}
