//! The round's last act before its record: the decision carried out on Slurm. Holds, then
//! checkpoint signals to every job being preempted, one grace period, their requeues, then
//! starts; then the forked jobs' rounds the decision planned, as copy jobs. Each action is an intent in
//! the store first and is closed with its outcome; a failed action does not stop the others.

use crate::action_log::{ActionDone, ActionKind, ActionLog, ActionOutcome};
use crate::actions::Action;
use crate::daemon::{Daemon, DaemonError, REQUEUE_SETTLE_SECONDS, SlurmApi, now_unix, outcome};
use crate::decide::RoundDecision;
use crate::eligible;
use crate::explain;
use crate::faults;
use crate::reconcile;
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
    /// Milliseconds spent carrying out the plan's actions (grace periods included).
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
        self.start_jobs(snap, todo, rows, typed, &mut done)?;
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
            let result = match self.slurm.job(id) {
                Ok(Some(j)) if j.status == JobStatus::Pending && !j.is_held() => {
                    self.slurm.hold(id).map(|_| Outcome::Ok)
                }
                Ok(_) => Ok(Outcome::Skipped("not a released pending job".into())),
                Err(e) => Err(e),
            };
            faults::reached("hold-done");
            let text = outcome(result);
            if let (false, Some(r)) = (matches!(text, Outcome::Error(_)), rows.get_mut(&id)) {
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

    /// Signals every job being preempted to checkpoint, waits one grace period, and
    /// requeues them held.
    fn preempt_jobs(
        &mut self,
        round: u64,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        let now = |d: &Self| now_unix() - d.epoch;
        let signal = self.config.sidecar.preempt_signal.clone();
        let preempts = todo.iter().filter(|a| matches!(a, Action::Preempt { .. }));
        let mut signalled: Vec<(u64, i64)> = Vec::new();
        for a in preempts {
            let id = a.job();
            let t = now(self);
            let intent = self
                .store
                .write(|w| w.add_intent(round, id, IntentKind::Preempt, None, t))?;
            faults::reached("preempt-intent");
            match self.slurm.signal(id, &signal) {
                Ok(()) => {
                    if let Some(r) = rows.get_mut(&id) {
                        r.phase = Phase::Preempting;
                    }
                    let r = rows.get(&id).cloned();
                    self.store
                        .write(|w| r.as_ref().map_or(Ok(()), |r| w.put_job(r)))?;
                    signalled.push((id, intent));
                    faults::reached("preempt-signalled");
                }
                Err(e) => {
                    let text = Outcome::Error(e.to_string());
                    self.close(intent, &text, rows.get(&id))?;
                    done.push(ActionDone::new(
                        id,
                        ActionKind::Preempt,
                        ActionOutcome::Intent(text),
                    ));
                }
            }
        }
        if !signalled.is_empty() {
            std::thread::sleep(Duration::from_secs_f64(
                self.config.sidecar.preempt_grace_seconds,
            ));
        }
        for (id, intent) in signalled {
            let result = match self.slurm.job(id) {
                Ok(Some(j)) if j.status == JobStatus::Running => {
                    self.slurm.requeue_hold(id).map(|_| Outcome::Ok)
                }
                Ok(_) => Ok(Outcome::Skipped("no longer running".into())),
                Err(e) => Err(e),
            };
            faults::reached("preempt-requeued");
            let text = outcome(result);
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
            self.close(intent, &text, rows.get(&id))?;
            done.push(ActionDone::new(
                id,
                ActionKind::Preempt,
                ActionOutcome::Intent(text),
            ));
        }
        Ok(())
    }

    /// Gives held jobs their planned GPUs and releases them, [`RELEASE_BATCH`] at a time
    /// (one command for many).
    fn start_jobs(
        &mut self,
        snap: &RoundSnapshot,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        typed: &HashSet<u64>,
        done: &mut ActionLog,
    ) -> Result<(), DaemonError> {
        let read: HashMap<u64, &SlurmJob> = snap.slurm_jobs.iter().map(|j| (j.id, j)).collect();
        let mut placed = Vec::new();
        for a in todo {
            let Action::Start { job: id, placement } = a else {
                continue;
            };
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
        let failed: HashMap<u64, String> = match self.slurm.release_many(&ids) {
            Ok(failed) => failed.into_iter().collect(),
            Err(e) => ids.iter().map(|id| (*id, e.to_string())).collect(),
        };
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
