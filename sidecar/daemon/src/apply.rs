//! The round's last act before its record: the decision carried out on Slurm. Holds, then
//! checkpoint signals to the jobs being preempted and the requeues of those whose grace time
//! is over (the round does not wait for it), then starts; then the forked jobs' rounds the decision planned, as copy jobs. Each action is an intent in
//! the store first and is closed with its outcome; a failed action does not stop the others.

use crate::action_log::{ActionDone, ActionKind, ActionLog, ActionOutcome};
use crate::actions::Action;
use crate::daemon::{Daemon, DaemonError, REQUEUE_SETTLE_SECONDS, SlurmApi, now_unix, outcome};
use crate::decide::RoundDecision;
use crate::eligible;
use crate::explain;
use crate::faults;
use crate::reconcile;
use crate::room::Room;
use crate::snapshot::RoundSnapshot;
use crate::view;
use hadar_slurm::{GpuSpec, JobStatus, SlurmJob};
use hadar_store::{IntentKind, JobRow, NodeGpus, Outcome, Phase};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// What enforcement did.
pub struct Enforced {
    /// Actions carried out, `(job, action, outcome)`: the plan's, then the fork pass's.
    pub done: ActionLog,
    /// The forked jobs whose planned round could not start, with why.
    pub fork_failures: BTreeMap<u64, String>,
    /// Milliseconds spent carrying out the plan's actions.
    pub enforce_ms: f64,
}

impl<S: SlurmApi> Daemon<S> {
    /// Carries out `decision`, taken from `snap`: says why waiting jobs wait, enforces the
    /// plan's actions, then submits the forked jobs' planned rounds.
    pub(crate) fn carry_out(
        &mut self,
        snap: &RoundSnapshot,
        decision: &RoundDecision,
        mut fork_actions: ActionLog,
    ) -> Result<Enforced, DaemonError> {
        let mut rows = snap.rows.clone();
        self.say_why_jobs_wait(snap, decision);
        let started = Instant::now();
        let mut done = self.enforce(snap, &decision.actions, &mut rows, &decision.typed)?;
        let enforce_ms = started.elapsed().as_secs_f64() * 1000.0;
        let (started, fork_failures) = match self.fork.as_mut() {
            Some(f) => f.start_planned(
                &mut self.store,
                &rows,
                &snap.specs,
                &snap.slurm_jobs,
                &decision.forks,
                snap.now_unix,
                self.epoch,
            ),
            None => Default::default(),
        };
        fork_actions.extend(started);
        for a in &fork_actions {
            tracing::info!(job = a.job, action = %a.action, "{}", a.outcome);
        }
        done.extend(fork_actions);
        Ok(Enforced {
            done,
            fork_failures,
            enforce_ms,
        })
    }

    /// Carries out the plan's actions (see the module).
    fn enforce(
        &mut self,
        snap: &RoundSnapshot,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        typed: &HashSet<u64>,
    ) -> Result<ActionLog, DaemonError> {
        let mut done = Vec::new();
        self.hold_jobs(snap.round, todo, rows, &mut done)?;
        self.preempt_jobs(snap.round, todo, rows, &mut done)?;
        let requeued: HashSet<u64> = snap
            .rows
            .iter()
            .filter(|(_, r)| matches!(r.phase, Phase::Running | Phase::Preempting))
            .filter(|(id, _)| rows.get(id).is_some_and(|r| r.phase == Phase::Waiting))
            .map(|(id, _)| *id)
            .collect();
        let mut room = Room::new(&snap.nodes, &snap.slurm_jobs, &requeued, rows);
        self.start_jobs(snap, todo, rows, typed, &mut room, &mut done)?;
        Ok(done)
    }

    /// Holds the released jobs whose plan changed before they started.
    fn hold_jobs(
        &mut self,
        round: u64,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        let now = |d: &Self| now_unix() - d.epoch;
        for a in todo.iter().filter(|a| matches!(a, Action::Hold { .. })) {
            let id = a.job();
            let t = now(self);
            let intent = self
                .store
                .write(|w| w.add_intent(round, id, IntentKind::Hold, None, t))?;
            faults::reached("hold-intent");
            // A job Slurm started since the round's read stays `Starting`: the next round
            // sees it running and plans it so (marked waiting, it would look released by
            // someone else and be requeued).
            let (result, held) = match self.slurm.job(id) {
                Ok(Some(j)) if j.status == JobStatus::Pending && !j.is_held() => {
                    (self.slurm.hold(id).map(|_| Outcome::Ok), true)
                }
                Ok(Some(j)) if j.status == JobStatus::Pending => {
                    (Ok(Outcome::Skipped("already held".into())), true)
                }
                Ok(_) => (
                    Ok(Outcome::Skipped("not a released pending job".into())),
                    false,
                ),
                Err(e) => (Err(e), false),
            };
            faults::reached("hold-done");
            let text = outcome(result);
            if let (true, false, Some(r)) =
                (held, matches!(text, Outcome::Error(_)), rows.get_mut(&id))
            {
                r.phase = Phase::Waiting;
                r.placement = None;
            }
            self.close(intent, &text, rows.get(&id))?;
            done.push(ActionDone::new(
                id,
                ActionKind::Hold,
                ActionOutcome::Intent(text),
            ));
        }
        Ok(())
    }

    /// Signals the running jobs the plan preempts to checkpoint, then requeues held every
    /// job whose grace time is over (signalled `preempt_grace_seconds` ago or more, in this
    /// round or an earlier one), one command for each step. The round does not wait out a
    /// grace time: a signalled job keeps its GPUs until its requeue, and the next round is
    /// due when the first grace time still running ends ([`Daemon::requeue_due_unix`]).
    fn preempt_jobs(
        &mut self,
        round: u64,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        let preempts: Vec<u64> = todo
            .iter()
            .filter(|a| matches!(a, Action::Preempt { .. }))
            .map(Action::job)
            .collect();
        let in_phase = |rows: &BTreeMap<u64, JobRow>, phase: Phase| -> Vec<u64> {
            preempts
                .iter()
                .copied()
                .filter(|id| rows.get(id).is_some_and(|r| r.phase == phase))
                .collect()
        };
        let running = in_phase(rows, Phase::Running);
        self.signal_to_checkpoint(round, &running, rows, done)?;
        self.close_ended_preemptions(rows)?;
        let grace = self.config.sidecar.preempt_grace_seconds;
        let now_s = now_unix() - self.epoch;
        let mut over = Vec::new();
        let mut first_end: Option<f64> = None;
        for id in in_phase(rows, Phase::Preempting) {
            // Signalled when its preemption's intent was written (this run's, or one an
            // earlier run left unfinished); a job with no such intent is requeued now.
            let last = self.store.last_intent(id)?;
            let signalled_s = last
                .filter(|i| i.action == IntentKind::Preempt)
                .map_or(now_s - grace, |i| i.created_s);
            if signalled_s + grace <= now_s {
                over.push(id);
            } else {
                first_end =
                    Some(first_end.map_or(signalled_s + grace, |t| t.min(signalled_s + grace)));
            }
        }
        self.requeue_due_unix = first_end.map(|t| t + self.epoch);
        self.requeue_checkpointed(round, &over, rows, done)
    }

    /// Signals the running jobs `ids` to checkpoint, in one command; each is `Preempting`
    /// from then on, its preemption's intent left open until its requeue.
    fn signal_to_checkpoint(
        &mut self,
        round: u64,
        ids: &[u64],
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        if ids.is_empty() {
            return Ok(());
        }
        let t = now_unix() - self.epoch;
        let mut intents = HashMap::new();
        for &id in ids {
            let intent = self
                .store
                .write(|w| w.add_intent(round, id, IntentKind::Preempt, None, t))?;
            faults::reached("preempt-intent");
            intents.insert(id, intent);
        }
        let signal = self.config.sidecar.preempt_signal.clone();
        let failed = failures_by_job(ids, self.slurm.signal_many(ids, &signal));
        let grace = self.config.sidecar.preempt_grace_seconds;
        for &id in ids {
            if let Some(why) = failed.get(&id) {
                let text = Outcome::Error(why.clone());
                self.close(intents[&id], &text, rows.get(&id))?;
                done.push(ActionDone::new(
                    id,
                    ActionKind::Preempt,
                    ActionOutcome::Intent(text),
                ));
                continue;
            }
            if let Some(r) = rows.get_mut(&id) {
                r.phase = Phase::Preempting;
            }
            let r = rows.get(&id).cloned();
            self.store
                .write(|w| r.as_ref().map_or(Ok(()), |r| w.put_job(r)))?;
            done.push(ActionDone::new(
                id,
                ActionKind::Checkpoint,
                ActionOutcome::Done(format!("signalled {signal}; requeued after {grace} s")),
            ));
        }
        faults::reached("preempt-signalled");
        Ok(())
    }

    /// Closes the open preemptions of jobs that are no longer being preempted: they ended,
    /// or Slurm requeued them itself, during their grace time.
    fn close_ended_preemptions(&mut self, rows: &BTreeMap<u64, JobRow>) -> Result<(), DaemonError> {
        let open: Vec<_> = self
            .store
            .open_intents()?
            .into_iter()
            .filter(|i| i.action == IntentKind::Preempt)
            .filter(|i| {
                rows.get(&i.job)
                    .is_none_or(|r| r.phase != Phase::Preempting)
            })
            .collect();
        for i in open {
            let text = Outcome::Skipped("no longer running".into());
            self.close(i.id, &text, rows.get(&i.job))?;
        }
        Ok(())
    }

    /// Requeues held the signalled jobs `ids`, whose grace time is over, in one command, and
    /// closes their preemptions.
    fn requeue_checkpointed(
        &mut self,
        round: u64,
        ids: &[u64],
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = |d: &Self| now_unix() - d.epoch;
        let mut intents = HashMap::new();
        for &id in ids {
            let open = self
                .store
                .last_intent(id)?
                .filter(|i| i.action == IntentKind::Preempt && i.outcome.is_none());
            let intent = match open {
                Some(i) => i.id,
                // An earlier run's, closed as interrupted when this one began.
                None => {
                    let t = now(self);
                    self.store
                        .write(|w| w.add_intent(round, id, IntentKind::Preempt, None, t))?
                }
            };
            intents.insert(id, intent);
        }
        let failed = failures_by_job(ids, self.slurm.requeue_hold_many(ids));
        faults::reached("preempt-requeued");
        for &id in ids {
            let text = match failed.get(&id) {
                Some(why) => Outcome::Error(why.clone()),
                None => Outcome::Ok,
            };
            if let Some(r) = rows.get_mut(&id) {
                if text.is_ok() {
                    reconcile::account(r, now(self), None);
                    r.accounted_s = None;
                    r.phase = Phase::Waiting;
                    r.placement = None;
                    r.preemptions += 1;
                } else {
                    r.phase = Phase::Running;
                }
            }
            self.close(intents[&id], &text, rows.get(&id))?;
            done.push(ActionDone::new(
                id,
                ActionKind::Preempt,
                ActionOutcome::Intent(text),
            ));
        }
        Ok(())
    }

    /// Gives held jobs their planned GPUs and releases them, [`RELEASE_BATCH`] at a time
    /// (one command for many). A start whose GPUs are not free yet in `room` (a job in its
    /// preemption's grace time holds them) waits for a later round.
    fn start_jobs(
        &mut self,
        snap: &RoundSnapshot,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        typed: &HashSet<u64>,
        room: &mut Room,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        let read: HashMap<u64, &SlurmJob> = snap.slurm_jobs.iter().map(|j| (j.id, j)).collect();
        let mut placed = Vec::new();
        let mut waiting = 0usize;
        for a in todo {
            let Action::Start { job: id, placement } = a else {
                continue;
            };
            if !room.take(placement) {
                waiting += 1;
                continue;
            }
            let start = Start {
                id: *id,
                intent: self.start_intent(snap.round, *id, placement)?,
                placement,
                spec: request(snap, placement, typed.contains(id)),
            };
            // The round's own read of the job, not another: Slurm refuses the update of a job
            // that has started or ended since, which is then the outcome.
            let result = match read.get(id) {
                Some(j) if j.status == JobStatus::Pending && j.is_held() => {
                    let words = starting_words(placement);
                    let comment =
                        eligible::may_write(j.comment.as_deref(), &words).then_some(words);
                    self.slurm
                        .place_and_start(j, &start.spec, comment.as_deref())
                        .inspect(|_| faults::reached("start-placed"))
                        .map(|_| None)
                }
                Some(j) => Ok(Some(Outcome::Skipped(format!(
                    "job is {} and not held",
                    j.status.as_str()
                )))),
                None => Ok(Some(Outcome::Skipped(
                    "Slurm no longer knows the job".into(),
                ))),
            };
            match result {
                Ok(None) => placed.push(start),
                Ok(Some(text)) => self.started(snap, rows, done, start, text)?,
                Err(e) => self.started(snap, rows, done, start, Outcome::Error(e.to_string()))?,
            }
            if placed.len() >= RELEASE_BATCH {
                self.release_placed(snap, rows, done, std::mem::take(&mut placed))?;
            }
        }
        if waiting > 0 {
            tracing::info!(
                starts = waiting,
                "starts wait for GPUs that jobs in their preemption's grace time still hold"
            );
        }
        self.release_placed(snap, rows, done, placed)
    }

    /// Releases the jobs of `placed` in one command and closes their starts.
    fn release_placed(
        &mut self,
        snap: &RoundSnapshot,
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
        placed: Vec<Start<'_>>,
    ) -> Result<(), DaemonError> {
        if placed.is_empty() {
            return Ok(());
        }
        let ids: Vec<u64> = placed.iter().map(|s| s.id).collect();
        let failed = failures_by_job(&ids, self.slurm.release_many(&ids));
        for start in placed {
            faults::reached("start-released");
            let text = match failed.get(&start.id) {
                Some(why) => Outcome::Error(why.clone()),
                None => Outcome::Ok,
            };
            self.started(snap, rows, done, start, text)?;
        }
        Ok(())
    }

    /// Records the intent to start job `id` on `placement`, once a requeue of it moments ago
    /// has settled: slurmd refuses to launch a job whose credential is from the same second as
    /// the revocation of its last run ("Job credential revoked"; the job then fails).
    fn start_intent(
        &mut self,
        round: u64,
        id: u64,
        placement: &NodeGpus,
    ) -> Result<i64, DaemonError> {
        let now = |d: &Self| now_unix() - d.epoch;
        if let Some(prev) = self
            .store
            .last_intent(id)?
            .filter(|i| matches!(i.action, IntentKind::Preempt | IntentKind::RequeueHold))
        {
            let since = now(self) - prev.done_s.unwrap_or(prev.created_s);
            if since < REQUEUE_SETTLE_SECONDS {
                std::thread::sleep(Duration::from_secs_f64(REQUEUE_SETTLE_SECONDS - since));
            }
        }
        let t = now(self);
        let intent = self
            .store
            .write(|w| w.add_intent(round, id, IntentKind::Start, Some(placement), t))?;
        faults::reached("start-intent");
        Ok(intent)
    }

    /// Closes a start's intent with `text`; a job that started is `Starting` on its
    /// placement from now on.
    fn started(
        &mut self,
        snap: &RoundSnapshot,
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
        start: Start<'_>,
        text: Outcome,
    ) -> Result<(), DaemonError> {
        let id = start.id;
        if text.is_ok()
            && let Some(r) = rows.get_mut(&id)
        {
            r.phase = Phase::Starting;
            r.placement = Some(start.placement.clone());
            r.starts += 1;
            if start.spec.typed && !snap.retypes {
                // Slurm now holds the job to these types (and any it had) for good.
                let mut types = r.bound_types.clone().unwrap_or_default();
                types.extend(view::per_type(start.placement).into_keys());
                types.sort();
                types.dedup();
                r.bound_types = Some(types);
            }
        }
        self.close(start.intent, &text, rows.get(&id))?;
        done.push(ActionDone::new(
            id,
            ActionKind::Start,
            ActionOutcome::Intent(text),
        ));
        Ok(())
    }

    pub(crate) fn close(
        &mut self,
        intent: i64,
        text: &Outcome,
        row: Option<&JobRow>,
    ) -> Result<(), DaemonError> {
        let now_s = now_unix() - self.epoch;
        self.store.write(|w| {
            if let Some(r) = row {
                w.put_job(r)?;
            }
            w.close_intent(intent, now_s, text)
        })?;
        Ok(())
    }

    /// Writes in each waiting job's `Comment` why it waits (see [`eligible::reason_words`]),
    /// one command per distinct text; best effort: a failed update is logged and retried
    /// next round.
    fn say_why_jobs_wait(&self, snap: &RoundSnapshot, decision: &RoundDecision) {
        let (slurm_jobs, rows, owned) = (&snap.slurm_jobs, &snap.rows, &snap.owned);
        let (planned, blocked, specs) = (&decision.planned, &decision.blocked, &snap.specs);
        let mut queue: Vec<&JobRow> = rows
            .values()
            .filter(|r| r.phase == Phase::Waiting && !owned.contains(&r.id))
            .filter(|r| !planned.contains_key(&r.id) && !blocked.contains_key(&r.id))
            .collect();
        queue.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.id.cmp(&b.id)));
        // Looked up per job: a scan of the queue per job was quadratic in its length.
        let positions: HashMap<u64, usize> = queue
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id, i + 1))
            .collect();
        let site_reasons: BTreeMap<u64, String> = decision
            .plan
            .iter()
            .flat_map(|p| &p.waiting)
            .filter_map(|w| Some((w.job.0, eligible::site_words(&w.reason)?)))
            .collect();
        let starts: HashSet<u64> = decision
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Start { .. }))
            .map(Action::job)
            .collect();
        // Jobs that wait for the same reason are told so in one command.
        let mut by_words: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for j in slurm_jobs {
            let Some(r) = rows.get(&j.id).filter(|r| r.phase == Phase::Waiting) else {
                continue;
            };
            if owned.contains(&r.id) {
                continue;
            }
            let position = positions.get(&r.id).copied().unwrap_or(0);
            let types = specs.get(&r.id).and_then(|s| s.gpu_types.as_deref());
            if starts.contains(&r.id) {
                continue; // its start writes the comment with the placement (`start_jobs`)
            }
            let words = match planned.get(&r.id) {
                Some(gpus) => starting_words(gpus),
                None => match (blocked.get(&r.id), site_reasons.get(&r.id)) {
                    (None, Some(words)) => words.clone(),
                    (b, _) => eligible::reason_words(b, r.workers, types, position),
                },
            };
            if eligible::may_write(j.comment.as_deref(), &words) {
                by_words.entry(words).or_default().push(r.id);
            }
        }
        for (words, ids) in by_words {
            if let Err(e) = self.slurm.set_comments(&ids, &words) {
                tracing::warn!(
                    jobs = ids.len(),
                    "could not write why jobs wait ({words:?}): {e}"
                );
            }
        }
    }
}

/// How many placed jobs one `scontrol release` names. A start placed early waits for the
/// release of its whole batch; with a batch this size (about two seconds of placements at
/// 256 nodes) the jobs of a large round still start as they are placed, and the next round
/// does not find hundreds of them released but not yet started.
const RELEASE_BATCH: usize = 32;

/// One start under way: its intent, its placement and the request that gives it.
struct Start<'a> {
    id: u64,
    intent: i64,
    placement: &'a NodeGpus,
    spec: GpuSpec,
}

/// What a job's comment says once the round starts it on `gpus`.
fn starting_words(gpus: &NodeGpus) -> String {
    format!("hadar: starting on {}", explain::placement_words(gpus))
}

/// The GPU request that gives a job `placement`: typed when the job must keep its types
/// (`typed`), or when a typeless one would leave the type to Slurm
/// ([`view::leaves_the_type_to_slurm`]) and this release lets a later update replace the
/// types (on 22.05 a typed request would hold the job to them for good, so there the
/// request stays typeless and the start order, [`crate::actions::order_starts_by_gres`],
/// is what steers Slurm's choice). A typed request must give every node the same GPUs.
fn request(snap: &RoundSnapshot, placement: &NodeGpus, typed: bool) -> GpuSpec {
    let mut spec = GpuSpec {
        nodes: placement.clone(),
        typed: true,
    };
    spec.typed = typed
        || (snap.retypes
            && spec.is_uniform()
            && view::leaves_the_type_to_slurm(&snap.nodes, placement));
    spec
}

/// The jobs of a command on many (`ids`) that failed, with why: those its answer names, or
/// all of them when the command failed as a whole.
fn failures_by_job(
    ids: &[u64],
    answer: Result<Vec<(u64, String)>, hadar_slurm::SlurmError>,
) -> HashMap<u64, String> {
    match answer {
        Ok(failed) => failed.into_iter().collect(),
        Err(e) => ids.iter().map(|id| (*id, e.to_string())).collect(),
    }
}
