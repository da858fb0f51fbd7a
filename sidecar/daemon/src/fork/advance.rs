//! Forked jobs' open rounds moved on each round: a copy job that ended is consolidated
//! (its report read, the tracker updated, the logical job's progress set), one lost or
//! failed is given up, and a logical job that is done, failed or cancelled is settled.

use super::*;
impl Forker {
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
                done.push(ActionDone::new(
                    id,
                    ActionKind::Fork,
                    ActionOutcome::Failed(e.to_string()),
                ));
            }
        }
        done
    }

    /// Moves job `id`'s open round on (adopts or redoes one being submitted, settles a
    /// running one), marks the forked job cancelled if the logical job left Slurm, then shows
    /// its progress.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn advance_one(
        &mut self,
        store: &mut Store,
        rows: &mut BTreeMap<u64, JobRow>,
        id: u64,
        slurm_jobs: &[SlurmJob],
        now_unix: f64,
        epoch: f64,
        done: &mut ActionLog,
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
                adopt_or_redo(store, &mut round, &row, slurm_jobs, now_s, done)?;
            }
            if round.state == RoundState::Running {
                self.advance_running_round(
                    store, id, &mut fj, round, &row, slurm_jobs, now_unix, now_s, done,
                )?;
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
        self.show_progress(store, rows, id, &fj, slurm_jobs, done)
    }

    /// Settles a round whose copy job was submitted: cancels it when the logical job left
    /// Slurm, gives it up when it is still pending past its deadline, consolidates it once it
    /// ended (`fj` then reread, as consolidating rewrites it).
    #[allow(clippy::too_many_arguments)]
    fn advance_running_round(
        &mut self,
        store: &mut Store,
        id: u64,
        fj: &mut ForkJob,
        mut round: ForkRound,
        row: &JobRow,
        slurm_jobs: &[SlurmJob],
        now_unix: f64,
        now_s: f64,
        done: &mut ActionLog,
    ) -> Result<(), ForkError> {
        let copy = round.copy_job.unwrap_or(0);
        let active = copy_job_active(slurm_jobs, copy);
        if row.phase == Phase::Finished {
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
                w.put_fork_job(fj)
            })?;
            done.push(ActionDone::new(
                id,
                ActionKind::ForkCancel,
                ActionOutcome::Done(format!("copy job {copy}")),
            ));
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
                round.message = Some("its copy job did not start before its deadline".into());
                store.write(|w| w.put_fork_round(&round))?;
                done.push(ActionDone::new(
                    id,
                    ActionKind::ForkRedo,
                    ActionOutcome::Done(format!("round {}", round.round)),
                ));
            }
        } else {
            self.consolidate(store, fj, round, row, slurm_jobs, now_s, done)?;
            if let Some(reread) = store.fork_job(id)? {
                *fj = reread;
            }
        }
        Ok(())
    }

    /// Shows the logical job's progress in its comment and releases it once the forked job
    /// is no longer active, so its batch script runs once more and ends it.
    fn show_progress(
        &mut self,
        store: &mut Store,
        rows: &mut BTreeMap<u64, JobRow>,
        id: u64,
        fj: &ForkJob,
        slurm_jobs: &[SlurmJob],
        done: &mut ActionLog,
    ) -> Result<(), ForkError> {
        let sj = slurm_jobs.iter().find(|j| j.id == id);
        let open = store.open_fork_round(id)?;
        let text = comment(fj, open.as_ref());
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
            done.push(ActionDone::new(
                id,
                ActionKind::ForkRelease,
                ActionOutcome::Done(fj.state.as_str().to_string()),
            ));
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
    pub(crate) fn consolidate(
        &mut self,
        store: &mut Store,
        fj: &mut ForkJob,
        mut round: ForkRound,
        row: &JobRow,
        slurm_jobs: &[SlurmJob],
        now_s: f64,
        done: &mut ActionLog,
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
            done.push(ActionDone::new(
                row.id,
                ActionKind::ForkRedo,
                ActionOutcome::Done(format!("round {}", round.round)),
            ));
            return Ok(());
        };
        // What Slurm bills for it (`sacct`'s Elapsed): the leader's run time.
        if let (Some(start), Some(end)) = (leader.start_time, leader.end_time) {
            round.copy_seconds = Some((end - start).max(0) as f64);
        }
        let (averaged, errors) = read_report(&mut round, leader, copy);
        for c in round.copies.iter_mut().filter(|c| c.ok.is_none()) {
            c.ok = Some(false);
            c.steps = Some(0.0);
        }
        let good: Vec<usize> = (0..round.copies.len())
            .filter(|k| round.copies[*k].ok == Some(true))
            .collect();
        round.ended_s = Some(now_s);
        if good.is_empty() {
            let why = errors.join("; ");
            // Counted as failed below: this is the count the job's message gives.
            let job_message = format!(
                "no copy succeeded in {} rounds in a row; last: {why}",
                fj.failed_rounds + 1
            );
            return self.fail_round(store, fj, round, row.id, why.clone(), job_message, done);
        }
        let steps: Vec<f64> = good
            .iter()
            .map(|k| round.copies[*k].steps.unwrap_or(0.0))
            .collect();
        let weights = consolidation_weights(&steps);
        for (k, w) in good.iter().zip(&weights) {
            round.copies[*k].weight = Some(*w);
        }
        if averaged {
            self.count_round(store, &round, row, &good, &steps, done)?;
            return Ok(());
        }
        let why = format!(
            "averaging failed on the compute node (see {}/copies.out)",
            round_dir(&round).display()
        );
        self.fail_round(store, fj, round, row.id, why.clone(), why, done)
    }

    /// Records `round` of job `job` failed (`why`), counts it against the job, and fails the
    /// job (with `job_message`) when it has failed `[fork] max_failed_rounds` in a row.
    #[allow(clippy::too_many_arguments)]
    fn fail_round(
        &self,
        store: &mut Store,
        fj: &mut ForkJob,
        mut round: ForkRound,
        job: u64,
        why: String,
        job_message: String,
        done: &mut ActionLog,
    ) -> Result<(), ForkError> {
        round.state = RoundState::Failed;
        round.message = Some(why.clone());
        fj.failed_rounds += 1;
        fj.next_round = fj.next_round.max(round.round + 1);
        if fj.failed_rounds >= self.config.max_failed_rounds {
            fj.state = ForkState::Failed;
            fj.message = Some(job_message);
        }
        store.write(|w| {
            w.put_fork_round(&round)?;
            w.put_fork_job(fj)
        })?;
        done.push(ActionDone::new(
            job,
            ActionKind::ForkRoundFailed,
            ActionOutcome::Done(why),
        ));
        Ok(())
    }

    /// Counts a consolidated round: its steps added to the job in one transaction with the
    /// rates its copies measured.
    fn count_round(
        &self,
        store: &mut Store,
        round: &ForkRound,
        row: &JobRow,
        good: &[usize],
        steps: &[f64],
        done: &mut ActionLog,
    ) -> Result<(), ForkError> {
        crate::faults::reached("fork-averaged");
        // The copies' measured rates are learned in the transaction that counts the
        // round, so a round redone after a crash is learned from once, like its steps.
        let observed = observed_rates(round);
        let alpha = self.learn_weight;
        let counted = store.write(|w| {
            let counted = w.consolidate_round(round)?;
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
        done.push(ActionDone::new(
            row.id,
            ActionKind::ForkConsolidate,
            ActionOutcome::Done(format!(
                "round {}: {} copies, {total} steps{}",
                round.round,
                good.len(),
                if counted { "" } else { " (already counted)" }
            )),
        ));
        Ok(())
    }
}

/// The steps per second each successful copy of `round` did, as `(type, GPUs, rate)`: its
/// steps over the seconds its program ran. Copies that did no steps or have no timing teach
/// nothing; copies of one type and size are averaged, each weighted by its time.
pub(crate) fn observed_rates(round: &ForkRound) -> Vec<(String, u32, f64)> {
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

/// The failed copies of a reported round, in words.
pub(crate) fn copy_errors(round: &ForkRound) -> Vec<String> {
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

/// True while any component of copy job `id` has not ended.
pub(crate) fn copy_job_active(slurm_jobs: &[SlurmJob], id: u64) -> bool {
    slurm_jobs
        .iter()
        .filter(|j| j.id == id || j.het_job_id == Some(id))
        .any(|j| !j.status.is_terminal())
}

/// The copy job's report applied to `round`: whether the copies were averaged, and what
/// went wrong, in words.
fn read_report(round: &mut ForkRound, leader: &SlurmJob, copy: u64) -> (bool, Vec<String>) {
    let report = leader.comment.as_deref().and_then(RoundReport::decode);
    match report {
        Some(RoundReport::Ran { averaged, copies }) if apply(round, &copies) => {
            (averaged, copy_errors(round))
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
    }
}

/// A round written but whose copy job was never recorded (the daemon stopped between the
/// two): its copy job adopted when Slurm shows it (found by name), else the round redone.
fn adopt_or_redo(
    store: &mut Store,
    round: &mut ForkRound,
    row: &JobRow,
    slurm_jobs: &[SlurmJob],
    now_s: f64,
    done: &mut ActionLog,
) -> Result<(), ForkError> {
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
            store.write(|w| w.put_fork_round(round))?;
            done.push(ActionDone::new(
                row.id,
                ActionKind::ForkAdopt,
                ActionOutcome::Done(format!("copy job {}", j.id)),
            ));
        }
        None => {
            round.state = RoundState::Abandoned;
            round.ended_s = Some(now_s);
            round.message = Some("its copy job was never submitted; redone".into());
            store.write(|w| w.put_fork_round(round))?;
            done.push(ActionDone::new(
                row.id,
                ActionKind::ForkRedo,
                ActionOutcome::Done(format!("round {}", round.round)),
            ));
        }
    }
    Ok(())
}
