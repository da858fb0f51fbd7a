//! The upkeep that precedes each round's plan (see [`crate::snapshot`]): failed-open jobs
//! taken back, array elements split off, jobs released by someone else held again, started
//! jobs kept waiting for a begin time made eligible, and the round's events logged. Each
//! action on a job is an intent in the store first, as in enforcement.

use crate::daemon::{Daemon, DaemonError, REQUEUE_SETTLE_SECONDS, SlurmApi, now_unix, outcome};
use crate::reconcile::{self, Event};
use crate::{arrays, failopen, faults};
use hadar_request::FailOpenMark;
use hadar_slurm::{JobStatus, SlurmJob};
use hadar_store::{Intent, IntentKind, JobRow, NodeGpus, Outcome, Phase};
use std::collections::{BTreeMap, BTreeSet};

impl<S: SlurmApi> Daemon<S> {
    /// Splits the pending elements of managed arrays that may run now off into job records
    /// of their own ([`arrays::splits`]); returns how many it split.
    pub(crate) fn split_arrays(&self, slurm_jobs: &[SlurmJob], now_unix: f64) -> usize {
        let mut split = 0;
        for s in arrays::splits(slurm_jobs, now_unix) {
            match self
                .slurm
                .split_array_element(s.array_id, s.task, &s.record)
            {
                Ok(()) => {
                    split += 1;
                    tracing::info!(
                        array = s.array_id,
                        task = s.task,
                        "split an array element off to place it as a job of its own"
                    );
                }
                Err(e) => tracing::warn!(
                    array = s.array_id,
                    task = s.task,
                    "could not split an array element off (tried again next round): {e}"
                ),
            }
        }
        split
    }

    /// Takes back the jobs `hadar fail-open` handed to Slurm while no round completed: one
    /// Slurm has not started is held again and stripped of its GPU request, as the plugin
    /// does at submission, and its mark removed; a running one is unmarked and scheduled as
    /// a running job from here on (never requeued for having run outside the plan). Each is
    /// an intent in the store. Returns how many jobs carried a mark (0: nothing to re-read).
    pub(crate) fn take_back_failed_open(
        &mut self,
        round: u64,
        slurm_jobs: &[SlurmJob],
        rows: &mut BTreeMap<u64, JobRow>,
    ) -> Result<usize, DaemonError> {
        let mut marked = 0;
        for sj in slurm_jobs {
            let what = failopen::take_back(sj);
            if what == failopen::TakeBack::Nothing {
                continue;
            }
            marked += 1;
            let plain = FailOpenMark::strip(sj.admin_comment.as_deref().unwrap_or_default());
            let t = now_unix() - self.epoch;
            let action = match what {
                failopen::TakeBack::Adopt => IntentKind::Adopt,
                _ => IntentKind::TakeBack,
            };
            let intent = self
                .store
                .write(|w| w.add_intent(round, sj.id, action, None, t))?;
            let result = match what {
                failopen::TakeBack::Manage => {
                    // Held first: a job Slurm starts meanwhile refuses the hold, keeps its
                    // mark and is adopted next round.
                    let held = if sj.is_held() {
                        Ok(())
                    } else {
                        self.slurm.hold(sj.id)
                    };
                    held.and_then(|_| self.slurm.clear_gpu_request(sj.id))
                        .and_then(|_| self.slurm.set_admin_comment(sj.id, &plain))
                }
                _ => self.slurm.set_admin_comment(sj.id, &plain),
            };
            let text = outcome(result.map(|_| Outcome::Ok));
            tracing::info!(job = sj.id, action = %action, outcome = %text, "a job failed open while the daemon was away");
            if text.is_ok()
                && let Some(r) = rows.get_mut(&sj.id)
            {
                r.record = plain.clone();
                if what == failopen::TakeBack::Adopt {
                    r.phase = Phase::Running;
                    r.placement = Some(reconcile::allocation(sj));
                } else {
                    r.phase = Phase::Waiting;
                    r.placement = None;
                }
            }
            self.close(intent, &text, rows.get(&sj.id))?;
        }
        Ok(marked)
    }

    /// Holds again every managed job that left hold without the daemon releasing it (its
    /// owner ran `scontrol release`; the plugin had stripped its GPUs, so it must not run
    /// outside the plan): a pending one is held (as root: an admin hold its owner cannot
    /// release), a running one requeued held. A job whose last intent is a start that a crash
    /// cut short, and that carries that start's placement in Slurm, was released by the
    /// daemon itself (or by its owner after the placement, which runs it as planned) and is
    /// taken as starting. One without the placement (the crash came before it) was released
    /// by someone else and would run with no GPU: it is held again like any other.
    pub(crate) fn put_back_on_hold(
        &mut self,
        round: u64,
        events: &[Event],
        slurm_jobs: &[SlurmJob],
        rows: &mut BTreeMap<u64, JobRow>,
    ) -> Result<(), DaemonError> {
        for e in events {
            let Event::LeftHold { job, running } = *e else {
                continue;
            };
            if let Some(i) = self.start_cut_short(job, slurm_jobs)? {
                // The start went through: counted as the run that was cut short would have.
                if let Some(r) = rows.get_mut(&job) {
                    r.phase = Phase::Starting;
                    r.placement = i.placement;
                    r.starts += 1;
                }
                continue;
            }
            tracing::warn!(
                job,
                running,
                "a managed job left hold without hadar releasing it (its owner ran `scontrol release`?); holding it again"
            );
            let t = now_unix() - self.epoch;
            let (action, result) = if running {
                let intent = self
                    .store
                    .write(|w| w.add_intent(round, job, IntentKind::RequeueHold, None, t))?;
                (intent, self.slurm.requeue_hold(job))
            } else {
                // A hold like the planned ones, with the same crash points: a crash after the
                // intent leaves the job released, and the next run holds it again.
                let intent = self
                    .store
                    .write(|w| w.add_intent(round, job, IntentKind::Hold, None, t))?;
                faults::reached("hold-intent");
                let result = self.slurm.hold(job);
                faults::reached("hold-done");
                (intent, result)
            };
            let text = outcome(result.map(|_| Outcome::Ok));
            if let Some(r) = rows.get_mut(&job) {
                r.phase = Phase::Waiting;
                r.placement = None;
            }
            self.close(action, &text, rows.get(&job))?;
        }
        Ok(())
    }

    /// Counts the starts a crash cut short of the jobs that then ran to their end before this
    /// round saw them (held in the store, ended in Slurm after a run): their last intent is
    /// that start, and Slurm's record carries its placement (see [`Self::put_back_on_hold`]
    /// for the jobs still running).
    pub(crate) fn count_starts_of_ended_jobs(
        &self,
        events: &[Event],
        before: &BTreeMap<u64, JobRow>,
        slurm_jobs: &[SlurmJob],
        rows: &mut BTreeMap<u64, JobRow>,
    ) -> Result<(), DaemonError> {
        for e in events {
            let Event::Finished(job, _) = *e else {
                continue;
            };
            let held_before = before.get(&job).is_some_and(|b| b.phase == Phase::Waiting);
            if !held_before || self.start_cut_short(job, slurm_jobs)?.is_none() {
                continue;
            }
            if let Some(r) = rows.get_mut(&job) {
                r.starts += 1;
            }
        }
        Ok(())
    }

    /// `job`'s last intent if it is a start that a crash cut short and Slurm's record of the
    /// job carries that start's placement (so the start went through).
    fn start_cut_short(
        &self,
        job: u64,
        slurm_jobs: &[SlurmJob],
    ) -> Result<Option<Intent>, DaemonError> {
        let sj = slurm_jobs.iter().find(|j| j.id == job);
        Ok(self.store.last_intent(job)?.filter(|i| {
            i.action == IntentKind::Start
                && i.outcome
                    .as_ref()
                    .is_none_or(|o| *o == Outcome::Interrupted)
                && sj.is_some_and(|sj| carries_placement(sj, i.placement.as_ref()))
        }))
    }

    /// Jobs that this daemon's own preemption requeued held and that are now pending but no
    /// longer held: a daemon killed right after the requeue left the row running, and someone
    /// (the owner) released the job before this run saw it held; or killed while holding such
    /// a job again (its last intent a hold), leaving it released. Reconcile takes a running
    /// job seen pending and released as being started (as after Slurm's own requeue of a
    /// failed node's job), which would run it on its last placement outside the plan; these
    /// are holds released by someone else, to be held again.
    pub(crate) fn released_after_a_requeue(
        &self,
        before: &BTreeMap<u64, JobRow>,
        rows: &BTreeMap<u64, JobRow>,
    ) -> Result<Vec<Event>, DaemonError> {
        let mut out = Vec::new();
        for (&job, r) in rows {
            let was_running = before
                .get(&job)
                .is_some_and(|b| matches!(b.phase, Phase::Running | Phase::Preempting));
            if r.phase != Phase::Starting || !was_running {
                continue;
            }
            let requeued_by_us = self
                .store
                .last_intent(job)?
                .is_some_and(|i| i.action.requeues_or_holds());
            if requeued_by_us {
                out.push(Event::LeftHold {
                    job,
                    running: false,
                });
            }
        }
        Ok(out)
    }

    /// Makes eligible now every job being started that Slurm keeps waiting for a begin time
    /// (`Reason=BeginTime`). A start sets the placement, then the begin time, then releases;
    /// a daemon killed between the first two leaves the job held with whatever begin time it
    /// had (a requeue's, or one its owner set), and a release by anyone after that (the
    /// owner, or the next run taking the interrupted start as done) would leave it waiting
    /// for that time while its GPUs stay planned for it. A job requeued moments ago is left
    /// for a later round (see [`REQUEUE_SETTLE_SECONDS`]). Failures are logged and retried
    /// next round: the job is not lost, only late.
    pub(crate) fn make_released_jobs_eligible(
        &self,
        now_unix: f64,
        slurm_jobs: &[SlurmJob],
        rows: &BTreeMap<u64, JobRow>,
    ) {
        for sj in slurm_jobs.iter().filter(|j| {
            j.status == JobStatus::Pending
                && !j.is_held()
                && j.reason.as_deref() == Some("BeginTime")
                && rows.get(&j.id).is_some_and(|r| r.phase == Phase::Starting)
        }) {
            // Slurm sets SubmitTime to the time of the last requeue.
            let since = sj
                .submit_time
                .map_or(f64::INFINITY, |t| now_unix - t as f64);
            if since < REQUEUE_SETTLE_SECONDS {
                continue;
            }
            match self.slurm.start_now(sj.id) {
                Ok(()) => tracing::info!(
                    job = sj.id,
                    "a started job was waiting for a later begin time; made it eligible now"
                ),
                Err(e) => tracing::warn!(
                    job = sj.id,
                    "could not make a started job eligible now (retried next round): {e}"
                ),
            }
        }
    }

    pub(crate) fn log_events(&mut self, events: &[Event]) {
        for e in events {
            match e {
                Event::New(id) => tracing::info!(job = id, "new managed job"),
                Event::Refused(id, why) => {
                    if self.refused.insert(*id) {
                        tracing::warn!(job = id, "not scheduling this job: {why}");
                    }
                }
                Event::Started(id) => tracing::info!(job = id, "job is running"),
                Event::Finished(id, state) => {
                    tracing::info!(job = id, state = %state, "job left the queue")
                }
                Event::Requeued(id) => {
                    tracing::info!(job = id, "job is held again after a requeue")
                }
                Event::Progress { .. } | Event::LeftHold { .. } => {}
            }
        }
    }
}

/// Whether Slurm's `job` carries a start's `placement`: a GPU request (the plugin strips the
/// user's at submission; only a placement gives one back) and, as its required nodes,
/// exactly the placement's nodes (a requeued job keeps its last run's, which may differ).
/// Without the start's placement (an intent written before its placement field existed),
/// any required nodes with a GPU request count.
fn carries_placement(job: &SlurmJob, placement: Option<&NodeGpus>) -> bool {
    let has_gpus = job.tres_per_node.is_some() || job.tres_per_job.is_some();
    let planned: Option<BTreeSet<&str>> =
        placement.map(|p| p.iter().map(|(n, _)| n.as_str()).collect());
    let required: BTreeSet<&str> = job.req_nodes.iter().map(String::as_str).collect();
    has_gpus && !required.is_empty() && planned.is_none_or(|p| p == required)
}
