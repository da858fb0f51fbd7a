//! The daemon's round: read Slurm, reconcile with the store, plan with the Hadar core,
//! enforce the plan, record the round.
//!
//! Crash safety: every action is written to the store as an intent before it is carried out
//! and closed after; each action first checks the job's state in Slurm, so repeating it is
//! harmless; and every round starts from Slurm's state, never from memory. A daemon killed
//! at any point therefore restarts, closes the intents it finds open (noting them), and
//! carries on from what Slurm shows: no job is lost, and none runs twice (Slurm runs a job id
//! once at a time; only a requeue, which the daemon does after a checkpoint, reruns it).

use crate::actions::{self, Action};
use crate::config::DaemonConfig;
use crate::fork::Forker;
use crate::metrics::Metrics;
use crate::reconcile::{self, Event};
use crate::sd_notify::Notifier;
use crate::spec::{self, JobSpec, Priors, RateOrigins};
use crate::{arrays, eligible, exclusive, explain, facts, failopen, faults, view};
use hadar_core::market::PriceBook;
use hadar_core::passes::enforce::Verdict;
use hadar_core::passes::lookahead::Choice;
use hadar_core::passes::served::decide_with;
use hadar_core::policies::hadar::HadarConfig;
use hadar_core::{Job, JobId, JobState, RoundInput};
use hadar_formats::ThroughputTable;
use hadar_request::FailOpenMark;
use hadar_slurm::job::Refused;
use hadar_slurm::{GpuSpec, JobStatus, NodeInfo, Slurm, SlurmError, SlurmJob};
use hadar_store::{
    Decision, Horizon, JobRow, LeaseGrant, NodeGpus, Phase, RoundRow, Store, StoreError,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The shortest time from one round's start to the next when a notice wakes the daemon.
pub const MIN_WOKEN_GAP: Duration = Duration::from_secs(2);

/// Seconds between a job's requeue and its next start (see the start action).
const REQUEUE_SETTLE_SECONDS: f64 = 2.5;

/// What the daemon needs from Slurm; implemented by [`Slurm`] and by test doubles.
pub trait SlurmApi {
    /// All nodes.
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError>;
    /// All jobs, and refused records.
    fn jobs(&self) -> Result<(Vec<SlurmJob>, Refused), SlurmError>;
    /// One job.
    fn job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError>;
    /// Gives a pending job its GPUs.
    fn set_placement(&self, id: u64, spec: &GpuSpec) -> Result<(), SlurmError>;
    /// Makes a job eligible now.
    fn start_now(&self, id: u64) -> Result<(), SlurmError>;
    /// Releases a held job.
    fn release(&self, id: u64) -> Result<(), SlurmError>;
    /// Holds a pending job.
    fn hold(&self, id: u64) -> Result<(), SlurmError>;
    /// Signals a job.
    fn signal(&self, id: u64, signal: &str) -> Result<(), SlurmError>;
    /// Requeues a job held.
    fn requeue_hold(&self, id: u64) -> Result<(), SlurmError>;
    /// Sets a job's admin comment (the record; used to take back a failed-open job).
    fn set_admin_comment(&self, id: u64, text: &str) -> Result<(), SlurmError>;
    /// Removes a pending job's GPU request, as the plugin does at submission.
    fn clear_gpu_request(&self, id: u64) -> Result<(), SlurmError>;
    /// The Slurm release answering, when known (for the log and `hadar status`).
    fn slurm_release(&self) -> Option<String> {
        None
    }
    /// Splits a pending array element off into a job record of its own
    /// ([`Slurm::split_array_element`]); test doubles have no arrays.
    fn split_array_element(
        &self,
        _array_id: u64,
        _task: u32,
        _admin_comment: &str,
    ) -> Result<(), SlurmError> {
        Ok(())
    }
    /// Sets a waiting job's `Comment` (why it waits, for `squeue`); test doubles ignore it.
    fn set_comment(&self, _id: u64, _text: &str) -> Result<(), SlurmError> {
        Ok(())
    }
    /// Whether updating a pending job's GPU types replaces them (24.11 and later) rather than
    /// adding to them for the job's life (22.05, and the default).
    fn retypes_pending_jobs(&self) -> bool {
        false
    }
    /// The site's priority settings, job accounts and limits ([`crate::site`]); none by
    /// default.
    fn site_figures(&self) -> Result<hadar_slurm::site::SiteFigures, SlurmError> {
        Ok(Default::default())
    }
}

impl SlurmApi for Slurm {
    fn site_figures(&self) -> Result<hadar_slurm::site::SiteFigures, SlurmError> {
        Slurm::site_figures(self)
    }
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        Slurm::nodes(self)
    }
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        Slurm::set_comment(self, id, text)
    }
    fn jobs(&self) -> Result<(Vec<SlurmJob>, Refused), SlurmError> {
        Slurm::jobs(self)
    }
    fn job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError> {
        Slurm::job(self, id)
    }
    fn set_placement(&self, id: u64, spec: &GpuSpec) -> Result<(), SlurmError> {
        Slurm::set_placement(self, id, spec)
    }
    fn start_now(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::start_now(self, id)
    }
    fn release(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::release(self, id)
    }
    fn hold(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::hold(self, id)
    }
    fn signal(&self, id: u64, signal: &str) -> Result<(), SlurmError> {
        Slurm::signal(self, id, signal)
    }
    fn requeue_hold(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::requeue_hold(self, id)
    }
    fn set_admin_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        Slurm::set_admin_comment(self, id, text)
    }
    fn clear_gpu_request(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::clear_gpu_request(self, id)
    }
    fn slurm_release(&self) -> Option<String> {
        Slurm::slurm_release(self).ok().map(|r| r.to_string())
    }
    fn split_array_element(
        &self,
        array_id: u64,
        task: u32,
        admin_comment: &str,
    ) -> Result<(), SlurmError> {
        Slurm::split_array_element(self, array_id, task, admin_comment)
    }
    fn retypes_pending_jobs(&self) -> bool {
        Slurm::slurm_release(self).is_ok_and(|r| r.retypes_pending_jobs())
    }
}

/// Why a round failed (the next round starts again from Slurm's state).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Slurm could not be read.
    #[error("reading Slurm: {0}")]
    Slurm(#[from] SlurmError),
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another daemon holds the leader's lease: this one stands by and does nothing.
    #[error("standing by: {holder} leads until {expires_unix:.0}")]
    Standby {
        /// The leader.
        holder: String,
        /// Its lease's expiry, Unix seconds.
        expires_unix: f64,
    },
    /// The policy produced a plan that breaks capacity or gang rules (a bug; nothing enforced).
    #[error("the plan is invalid, nothing was enforced: {0}")]
    InvalidPlan(String),
}

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundReport {
    /// The round number.
    pub round: u64,
    /// Active managed jobs.
    pub active: usize,
    /// Actions carried out, `(job, action, outcome)`.
    pub actions: Vec<(u64, String, String)>,
    /// Milliseconds the policy took.
    pub decision_ms: f64,
    /// Milliseconds spent reading Slurm's nodes and jobs.
    pub read_ms: f64,
    /// Milliseconds spent carrying out the actions (preemption grace periods included).
    pub enforce_ms: f64,
    /// Milliseconds of the whole round: read, reconcile, decide, enforce, record.
    pub total_ms: f64,
}

/// Reads a hadar record into a job spec.
pub type Decoder = Box<dyn Fn(&str) -> Result<JobSpec, String> + Send>;

/// The daemon.
pub struct Daemon<S: SlurmApi> {
    slurm: S,
    store: Store,
    config: DaemonConfig,
    table: ThroughputTable,
    decode: Decoder,
    epoch: f64,
    round: u64,
    /// The number of this run's first round (its adoption report is logged).
    first_round: u64,
    refused: HashSet<u64>,
    fork: Option<Forker>,
    metrics: Option<Arc<Metrics>>,
    notifier: Notifier,
    /// Who this daemon is in the lease (`host:pid`).
    holder: String,
    /// Whether it held the lease at its last check.
    leading: bool,
}

/// What a daemon (acting or shadow) reads as it opens its store: the embedded throughput
/// table, the store's epoch and the last round it recorded (0 for a new store).
pub(crate) fn opening(
    store: &mut Store,
    now_unix: f64,
) -> Result<(ThroughputTable, f64, u64), DaemonError> {
    let table = hadar_formats::embedded::throughputs()
        .map_err(|e| DaemonError::InvalidPlan(e.to_string()))?;
    let epoch = store.epoch(now_unix)?;
    let round = store
        .meta("round")?
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    Ok((table, epoch, round))
}

impl<S: SlurmApi> Daemon<S> {
    /// A daemon over this Slurm and store, fixing the store's epoch at `now_unix` on first use
    /// and closing intents a previous run left open.
    pub fn new(
        slurm: S,
        mut store: Store,
        config: DaemonConfig,
        decode: Decoder,
        now_unix: f64,
    ) -> Result<Self, DaemonError> {
        let (table, epoch, round) = crate::daemon::opening(&mut store, now_unix)?;
        Ok(Daemon {
            slurm,
            store,
            config,
            table,
            decode,
            epoch,
            round,
            first_round: round + 1,
            refused: HashSet::new(),
            fork: None,
            metrics: None,
            notifier: Notifier::new(None, None, None),
            holder: failopen::holder(),
            leading: false,
        })
    }

    /// Takes or renews the leader's lease at `now_unix`. On becoming leader it closes the
    /// intents a previous leader (or run) left open and continues the round count from the
    /// store; on standby it returns [`DaemonError::Standby`] and must not act.
    fn lead(&mut self, now_unix: f64) -> Result<(), DaemonError> {
        let s = &self.config.sidecar;
        let (ttl, skew) = (s.lease_seconds, s.max_clock_skew_seconds);
        match self
            .store
            .acquire_lease(&self.holder, now_unix, ttl, skew)?
        {
            LeaseGrant::Standby(l) => {
                if self.leading {
                    tracing::warn!(holder = %l.holder, "lost the leader's lease; standing by");
                }
                self.leading = false;
                Err(DaemonError::Standby {
                    holder: l.holder,
                    expires_unix: l.expires_unix,
                })
            }
            LeaseGrant::Leading(l) => {
                if !self.leading {
                    tracing::info!(term = l.term, holder = %self.holder, "leading (the leader's lease is ours)");
                    self.leading = true;
                    self.round = self
                        .store
                        .meta("round")?
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0);
                    self.first_round = self.round + 1;
                    let open = self.store.open_intents()?;
                    let now_s = now_unix - self.epoch;
                    if !open.is_empty() {
                        self.store.write(|w| {
                            for i in &open {
                                tracing::warn!(job = i.job, action = %i.action, round = i.round, "an earlier run left this action unfinished; Slurm's state decides what happens next");
                                w.close_intent(i.id, now_s, "interrupted")?;
                            }
                            Ok(())
                        })?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Whether this daemon held the lease at its last check.
    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// Runs `fork=yes` jobs as forked copies with this fork pass (`policy = "hadare"`);
    /// without it they are scheduled like every other job.
    pub fn with_forking(mut self, forker: Forker) -> Self {
        self.fork = Some(forker);
        self
    }

    /// Records each round in these metrics.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Tells systemd through this notifier that the daemon is ready, alive and stopping.
    pub fn with_notifier(mut self, notifier: Notifier) -> Self {
        self.notifier = notifier;
        self
    }

    /// The store (for reports and tests).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The Slurm handle.
    pub fn slurm(&self) -> &S {
        &self.slurm
    }

    /// Job `id`'s throughput on `types` under `spec`, with where each rate came from (its
    /// learned rates first; see [`spec::profile`]).
    fn profile(
        &self,
        id: u64,
        spec: &JobSpec,
        types: &[String],
    ) -> Result<(hadar_core::ThroughputProfile, RateOrigins), DaemonError> {
        let learned = self.store.learned_rates(id)?;
        Ok(spec::profile(
            spec,
            types,
            &learned,
            &self.table,
            &self.priors(),
        ))
    }

    fn priors(&self) -> Priors {
        Priors {
            default_rate_per_gpu: self.config.sidecar.default_rate_per_gpu,
            throughput_scale: self.config.sidecar.throughput_scale,
        }
    }

    /// Runs rounds until `stop` is set: one every `round_seconds`, or sooner when `wake`
    /// receives (a new job was announced). A failed round is logged and the next one starts
    /// again from Slurm's state.
    pub fn run(&mut self, stop: &AtomicBool, wake: &Receiver<()>, clock: &dyn Fn() -> f64) {
        while !stop.load(Ordering::SeqCst) {
            let started = Instant::now();
            match self.round_with_upkeep(clock()) {
                Ok(r) => {
                    tracing::info!(
                        round = r.round,
                        active = r.active,
                        actions = r.actions.len(),
                        decision_ms = r.decision_ms,
                        read_ms = r.read_ms,
                        enforce_ms = r.enforce_ms,
                        total_ms = r.total_ms,
                        "round done"
                    )
                }
                Err(DaemonError::Standby { .. }) => {}
                Err(DaemonError::Store(StoreError::NotLeader { .. })) => {
                    self.leading = false;
                    tracing::warn!(
                        "lost the leader's lease during the round; stopped acting and standing by"
                    )
                }
                Err(e) => tracing::error!(
                    "round failed: {e}; the next round rebuilds its view from Slurm"
                ),
            }
            let mut renewed = Instant::now();
            let mut period = self.config.sidecar.round();
            // Sleep in short steps so that a stop request is honoured promptly. A notice
            // shortens the wait to `MIN_WOKEN_GAP` after this round's start: during a burst
            // of submissions (one notice each) rounds back to back would read the whole
            // queue from slurmctld continuously (measured: 2,000 submissions in 6 s woke
            // nine rounds, and raised sbatch's p99 latency by tens of ms).
            while !stop.load(Ordering::SeqCst) {
                self.notifier.tick();
                let left = period.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break;
                }
                // A leader keeps its lease while it waits (rounds may be longer than it).
                if self.leading
                    && renewed.elapsed().as_secs_f64() > self.config.sidecar.lease_seconds / 3.0
                {
                    renewed = Instant::now();
                    if let Err(e) = self.lead(clock()) {
                        tracing::warn!("{e}");
                    }
                }
                if wake
                    .recv_timeout(left.min(Duration::from_millis(200)))
                    .is_ok()
                {
                    while wake.try_recv().is_ok() {}
                    period = period.min(MIN_WOKEN_GAP);
                }
            }
        }
        self.resign();
        self.notifier.stopping();
    }

    /// One round, then what follows every round: metrics, systemd's notifications, and the
    /// pruning of history past the configured horizon.
    pub fn round_with_upkeep(&mut self, now_unix: f64) -> Result<RoundReport, DaemonError> {
        let result = self.round(now_unix);
        match &result {
            Ok(report) => {
                self.notifier.ready();
                if let Some(m) = &self.metrics
                    && let Err(e) = m.round_done(report, &self.store, now_unix)
                {
                    tracing::warn!("metrics: {e}");
                }
                if let Err(e) = self.prune(now_unix) {
                    tracing::warn!("pruning old history: {e}");
                }
            }
            // A standby is up and doing its job: systemd must see it ready (or it would be
            // restarted at TimeoutStartSec), and its waiting is not a failed round.
            Err(DaemonError::Standby { .. }) => self.notifier.ready(),
            Err(e) => {
                if let Some(m) = &self.metrics {
                    m.round_failed(e);
                }
            }
        }
        self.notifier.tick();
        if let (Some(m), Some(path)) = (&self.metrics, &self.config.sidecar.metrics_textfile)
            && let Err(e) = m.write_textfile(path)
        {
            tracing::warn!("writing the metrics textfile {}: {e}", path.display());
        }
        result
    }

    /// Deletes history older than `keep_days` or `keep_rounds` (see [`Store::prune`]).
    fn prune(&mut self, now_unix: f64) -> Result<(), DaemonError> {
        let s = &self.config.sidecar;
        let horizon = Horizon {
            before_s: now_unix - self.epoch - s.keep_days * 86_400.0,
            through_round: self.round.saturating_sub(s.keep_rounds),
        };
        let pruned = self.store.prune(horizon)?;
        if pruned.total() > 0 {
            tracing::debug!(?pruned, "pruned history past the horizon");
        }
        Ok(())
    }

    /// Ends this daemon's lease when it stops cleanly, so that the daemon started next (a
    /// restart, or the standby) leads at once rather than after the lease and the skew.
    /// A failure only costs that wait.
    fn resign(&mut self) {
        if !self.leading {
            return;
        }
        self.leading = false;
        match self.store.resign_lease(&self.holder) {
            Ok(true) => tracing::info!("stopped: gave up the leader's lease"),
            Ok(false) => {}
            Err(e) => tracing::warn!(
                "could not give up the leader's lease (the next daemon waits for it to expire): {e}"
            ),
        }
    }

    /// Slurm's jobs read again after this round changed some, with the ids of the records
    /// it could not trust.
    fn reread_jobs(&self) -> Result<(Vec<SlurmJob>, BTreeSet<u64>), DaemonError> {
        let (jobs, refused) = self.slurm.jobs()?;
        let untrusted = refused
            .iter()
            .filter_map(|(id, _)| id.parse().ok())
            .collect();
        Ok((jobs, untrusted))
    }

    /// Runs one round at wall-clock time `now_unix`.
    pub fn round(&mut self, now_unix: f64) -> Result<RoundReport, DaemonError> {
        self.lead(now_unix)?;
        let now_s = now_unix - self.epoch;
        let round_started = Instant::now();
        let nodes = self.slurm.nodes()?;
        let (mut slurm_jobs, refused_records) = self.slurm.jobs()?;
        let read_ms = round_started.elapsed().as_secs_f64() * 1000.0;
        faults::reached("round-read");
        let mut untrusted: std::collections::BTreeSet<u64> = refused_records
            .iter()
            .filter_map(|(id, _)| id.parse().ok())
            .collect();
        for (id, why) in refused_records {
            tracing::warn!(job = %id, "ignoring an untrustworthy job record: {why}");
        }
        self.round += 1;
        let round = self.round;
        let mut rows: BTreeMap<u64, JobRow> =
            self.store.jobs()?.into_iter().map(|r| (r.id, r)).collect();
        let before = rows.clone();
        let took_back = self.take_back_failed_open(round, &slurm_jobs, &mut rows)?;
        if took_back > 0 {
            // Held again, stripped or unmarked: this round plans from Slurm's state after that.
            (slurm_jobs, untrusted) = self.reread_jobs()?;
        }
        if self.split_arrays(&slurm_jobs, now_unix) > 0 {
            // Each split-off element is a job record of its own, with its own id, from now on.
            (slurm_jobs, untrusted) = self.reread_jobs()?;
        }
        // An array's record of pending elements is not a job hadar plans (see `arrays`).
        slurm_jobs.retain(|j| !arrays::is_pending_group(j));
        let mut events = reconcile::reconcile(
            &mut rows,
            &slurm_jobs,
            now_s,
            self.epoch,
            self.config.sidecar.default_steps,
            &*self.decode,
            &untrusted,
        );
        if self.slurm.retypes_pending_jobs() {
            // This release replaces a pending job's GPU types when they are updated: a typed
            // request binds no job to types, and a preempted job may come back on any.
            for r in rows.values_mut() {
                r.bound_types = None;
            }
        }
        events.extend(self.released_after_a_requeue(&before, &rows)?);
        self.log_events(&events);
        if round == self.first_round {
            let adopted: Vec<&SlurmJob> = events
                .iter()
                .filter_map(|e| match e {
                    Event::New(id) => slurm_jobs.iter().find(|j| j.id == *id),
                    _ => None,
                })
                .collect();
            let running = adopted
                .iter()
                .filter(|j| j.status == JobStatus::Running)
                .count();
            tracing::info!(
                known = before.len(),
                adopted = adopted.len(),
                running,
                "first round: {} managed jobs taken from Slurm that the state database did not know ({running} of them running)",
                adopted.len()
            );
        }
        self.put_back_on_hold(round, &events, &slurm_jobs, &mut rows)?;
        self.make_released_jobs_eligible(now_unix, &slurm_jobs, &rows);

        // The cluster view: GPUs held by jobs hadar does not manage are not the policy's.
        let foreign: Vec<(String, String, u32)> = slurm_jobs
            .iter()
            .filter(|j| {
                !rows.contains_key(&j.id)
                    && matches!(
                        j.status,
                        JobStatus::Running | JobStatus::Completing | JobStatus::Suspended
                    )
            })
            .flat_map(|j| j.gpu_parts())
            .collect();
        // Nodes with jobs hadar does not manage, which an exclusive job may not share.
        let busy: BTreeSet<String> = foreign.iter().map(|(n, _, _)| n.clone()).collect();
        let mut foreign = foreign;
        let exclusive_ids = exclusive::fence_off(&rows, &nodes, &mut foreign);
        let cv = view::build(&nodes, &self.config.partitions, &foreign);
        let mut site = crate::site::read(&self.slurm, now_unix);
        let strength = self.config.hadar.priority_strength;

        // Specs, learned rates and profiles of the active jobs.
        let mut specs: BTreeMap<u64, JobSpec> = BTreeMap::new();
        for r in rows.values().filter(|r| r.phase != Phase::Finished) {
            if let Ok(s) = (self.decode)(&r.record) {
                specs.insert(r.id, s);
            }
        }
        // Forked jobs are the fork pass's: their open rounds move on before planning.
        let owned: BTreeSet<u64> = match &self.fork {
            Some(f) => f.owned(&self.store, &rows, &specs)?,
            None => BTreeSet::new(),
        };
        let mut fork_actions = Vec::new();
        if let Some(f) = self.fork.as_mut() {
            fork_actions = f.advance(
                &mut self.store,
                &mut rows,
                &owned,
                &slurm_jobs,
                now_unix,
                self.epoch,
            );
            self.store.write(|w| {
                for id in &owned {
                    if let Some(r) = rows.get(id) {
                        w.put_job(r)?;
                    }
                }
                Ok(())
            })?;
        }
        let alpha = self.config.sidecar.rate_learning_weight;
        let learn: Vec<(u64, String, u32, f64)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Progress {
                    job,
                    rate,
                    placement,
                } => {
                    let spec = specs.get(job)?;
                    let types = view::per_type(placement);
                    let gpu_type = if types.len() == 1 {
                        types.keys().next()?.clone()
                    } else {
                        // A gang over several types runs at its slowest type's pace: credit
                        // the report to the type currently believed slowest.
                        let names: Vec<String> = types.keys().cloned().collect();
                        let (_, origins) = self.profile(*job, spec, &names).ok()?;
                        origins
                            .iter()
                            .filter_map(|(t, r, _)| r.map(|r| (t.clone(), r)))
                            .min_by(|a, b| a.1.total_cmp(&b.1))
                            .map(|(t, _)| t)?
                    };
                    Some((*job, gpu_type, spec.workers, *rate))
                }
                _ => None,
            })
            .collect();
        self.store.write(|w| {
            for r in rows.values() {
                if before.get(&r.id) != Some(r) {
                    w.put_job(r)?;
                }
            }
            for (job, t, n, rate) in &learn {
                w.learn_rate(*job, t, *n, *rate, alpha)?;
            }
            Ok(())
        })?;
        faults::reached("round-reconciled");

        // Waiting jobs Slurm would not start yet (user hold, dependency, --begin).
        let blocked: BTreeMap<u64, eligible::Blocked> = slurm_jobs
            .iter()
            .filter(|j| rows.get(&j.id).is_some_and(|r| r.phase == Phase::Waiting))
            .filter_map(|j| Some((j.id, eligible::blocked(j, now_unix)?)))
            .collect();

        // Plan.
        let mut origins_by_job: BTreeMap<u64, RateOrigins> = BTreeMap::new();
        let mut states: Vec<JobState> = Vec::new();
        let mut site_blocked = Vec::new();
        if let Some(cluster) = &cv.cluster {
            for r in rows.values().filter(|r| {
                r.phase != Phase::Finished && !owned.contains(&r.id) && !blocked.contains_key(&r.id)
            }) {
                let Some(spec) = specs.get(&r.id) else {
                    continue;
                };
                let spec = bind_types(spec, r.bound_types.as_deref());
                let (throughput, origins) = self.profile(r.id, &spec, &cv.types)?;
                origins_by_job.insert(r.id, origins);
                let job = Arc::new(Job {
                    id: JobId(r.id),
                    kind: spec.job_type.clone().unwrap_or_else(|| r.name.clone()),
                    arrival_s: r.arrival_s,
                    workers: r.workers,
                    total_steps: r.total_steps,
                    weight: site.weight(r.id, r.workers, now_s - r.arrival_s, cluster, strength),
                    throughput,
                });
                let mut js = JobState::arrived(job, cv.types.len());
                js.remaining_steps = (r.total_steps - r.steps_done).max(1.0).min(r.total_steps);
                js.placement = r
                    .placement
                    .as_ref()
                    .and_then(|p| view::to_placement(cluster, p));
                js.run_s = r.run_s;
                js.run_s_by_type = cv
                    .types
                    .iter()
                    .map(|t| r.run_s_by_type.get(t).copied().unwrap_or(0.0))
                    .collect();
                js.attained_gpu_s = r.attained_gpu_s;
                js.rounds_run = r.rounds_run;
                js.first_start_s = r.first_start_s;
                states.push(js);
            }
            states.sort_by(|a, b| a.job.arrival_order(&b.job));
            site_blocked = crate::site::blocked(&mut site, &mut states, &slurm_jobs, cluster);
        }
        // Jobs whose Slurm request names GPU types: those a user restricted to some types
        // (only a typed request keeps them there) and those Slurm already holds to types.
        // Every other job gets typeless requests (see `GpuSpec::update_fields`).
        let typed: HashSet<u64> = rows
            .values()
            .filter(|r| {
                r.bound_types.is_some() || specs.get(&r.id).is_some_and(|s| s.gpu_types.is_some())
            })
            .map(|r| r.id)
            .collect();
        // Decide: the served policy (look-ahead, site-aware Hadar, Slurm's rules), pure.
        let served = self.config.served();
        let mut target = facts::target(&rows, &typed, &nodes);
        crate::site::reservations::leave_out_of_lookahead(&site, &mut target);
        let hadar_config: HadarConfig = self.config.hadar.clone();
        let t0 = Instant::now();
        let mut stats = None;
        let decision = match &cv.cluster {
            Some(cluster) => {
                let input = RoundInput {
                    now_s,
                    round_s: self.config.sidecar.round_seconds,
                    restart_s: self.config.sidecar.restart_seconds,
                    cluster,
                    jobs: &states,
                };
                let d = decide_with(&served, &input, &target, |i| {
                    let (plan, s) =
                        crate::site::plan(&site, &hadar_config, i, &slurm_jobs, &site_blocked);
                    stats = Some(s);
                    plan
                });
                d.plan
                    .validate(cluster, &d.jobs)
                    .map_err(|e| DaemonError::InvalidPlan(e.to_string()))?;
                Some(d)
            }
            None => None,
        };
        let decision_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let mut commitments: BTreeMap<u64, Choice> = BTreeMap::new();
        let mut planned: BTreeMap<u64, NodeGpus> = BTreeMap::new();
        let mut unenforceable: Vec<(u64, String)> = Vec::new();
        let mut plan = None;
        if let (Some(d), Some(cluster)) = (decision, &cv.cluster) {
            // Rates' origins under the types the look-ahead left each job, for the words.
            for (id, types) in &d.commitments.restricted {
                if let Some(spec) = specs.get(&id.0) {
                    let spec = bind_types(spec, Some(types));
                    let (_, origins) = self.profile(id.0, &spec, &cv.types)?;
                    origins_by_job.insert(id.0, origins);
                }
            }
            for (a, (_, verdict)) in d.plan.assignments.iter().zip(&d.verdicts) {
                let gpus = view::to_node_gpus(cluster, &a.placement);
                match verdict {
                    Verdict::Enforced => {
                        planned.insert(a.job.0, gpus);
                    }
                    // A running or starting job stays where it is rather than being
                    // preempted towards GPUs Slurm would not give it.
                    Verdict::Stays { .. } => {
                        if let Some(here) = rows.get(&a.job.0).and_then(|r| r.placement.clone()) {
                            planned.insert(a.job.0, here);
                        }
                    }
                    Verdict::Refused { why } => unenforceable.push((
                        a.job.0,
                        format!("{}: {why}", explain::placement_words(&gpus)),
                    )),
                }
            }
            commitments = d
                .commitments
                .choices
                .into_iter()
                .map(|(id, c)| (id.0, c))
                .collect();
            states = d.jobs;
            plan = Some(d.plan);
        }

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
        for (id, why) in exclusive::conflicts(&planned, &exclusive_ids, &is_new, &busy) {
            let gpus = planned.remove(&id).unwrap_or_default();
            unenforceable.push((id, format!("{}: {why}", explain::placement_words(&gpus))));
        }

        // Enforce.
        let gang_rows: BTreeMap<u64, JobRow> = rows
            .iter()
            .filter(|(id, _)| !owned.contains(id))
            .map(|(id, r)| (*id, r.clone()))
            .collect();
        let mut todo = actions::plan(&gang_rows, &planned);
        // A job on a node that is down or not responding can neither checkpoint nor be
        // requeued by us (a requeue sent then was seen to leave the job started elsewhere
        // without its GPUs); Slurm requeues it itself when it declares the node dead, and it
        // is placed again then.
        let down: HashSet<&str> = nodes
            .iter()
            .filter(|n| n.state == hadar_slurm::NodeState::Down)
            .map(|n| n.name.as_str())
            .collect();
        todo.retain(|a| match a {
            Action::Preempt { job } => !rows
                .get(job)
                .and_then(|r| r.placement.as_ref())
                .is_some_and(|p| p.iter().any(|(n, _)| down.contains(n.as_str()))),
            _ => true,
        });
        actions::order_starts_by_gres(&mut todo, &|node: &str, gpu_type: &str| {
            nodes
                .iter()
                .find(|n| n.name == node)
                .and_then(|n| {
                    n.gpus
                        .iter()
                        .position(|(t, _)| t.eq_ignore_ascii_case(gpu_type))
                })
                .unwrap_or(usize::MAX)
        });
        faults::reached("round-planned");
        self.say_why_jobs_wait(&slurm_jobs, &rows, &planned, &blocked, &specs, &owned);
        let enforce_started = Instant::now();
        let mut done = self.enforce(round, &todo, &mut rows, &typed)?;
        let enforce_ms = enforce_started.elapsed().as_secs_f64() * 1000.0;

        // Forked jobs get the GPUs that no job holds and Hadar's plan does not give out.
        let mut fork_decisions = BTreeMap::new();
        if let Some(f) = self.fork.as_mut() {
            let mut occupied: Vec<(String, String, u32)> = slurm_jobs
                .iter()
                .filter(|j| {
                    matches!(
                        j.status,
                        JobStatus::Running | JobStatus::Completing | JobStatus::Suspended
                    )
                })
                .flat_map(|j| j.gpu_parts())
                .collect();
            for (id, gpus) in &planned {
                if rows.get(id).is_some_and(|r| r.phase != Phase::Running) {
                    for (node, per_type) in gpus {
                        for (t, c) in per_type {
                            occupied.push((node.clone(), t.clone(), *c));
                        }
                    }
                }
            }
            let priors = Priors {
                default_rate_per_gpu: self.config.sidecar.default_rate_per_gpu,
                throughput_scale: self.config.sidecar.throughput_scale,
            };
            let (started, decided) = f.start_rounds(
                &mut self.store,
                &rows,
                &specs,
                &owned,
                &nodes,
                &slurm_jobs,
                &occupied,
                &self.table,
                &priors,
                now_unix,
                self.epoch,
            );
            fork_actions.extend(started);
            fork_decisions = decided;
        }
        for (job, action, outcome) in &fork_actions {
            tracing::info!(job, action = %action, "{outcome}");
        }
        done.extend(fork_actions);

        // Record the round.
        let mut summary = RoundRow {
            round,
            started_s: now_s,
            decision_ms,
            policy: if self.fork.is_some() {
                "hadar+hadare".into()
            } else {
                "hadar".into()
            },
            slurm_release: self.slurm.slurm_release(),
            ..Default::default()
        };
        summary.unusable_nodes = cv.unusable.clone();
        if let Some(cluster) = &cv.cluster {
            for t in cluster.types() {
                summary
                    .capacity
                    .insert(cluster.type_name(t).to_string(), cluster.total_of_type(t));
            }
            for p in planned.values() {
                for (t, c) in view::per_type(p) {
                    *summary.planned_use.entry(t).or_default() += c;
                }
            }
            if let (Some(stats), Some(plan)) = (&stats, &plan)
                && let Some(bounds) = stats.price_bounds
            {
                summary.price_bounds = Some((bounds.low, bounds.high));
                let mut book = PriceBook::new(cluster, &vec![bounds; cluster.type_count()]);
                for a in &plan.assignments {
                    book.charge(&a.placement);
                }
                for n in cluster.node_ids() {
                    for t in cluster.types() {
                        if cluster.capacity(n, t) > 0 {
                            summary.prices.push((
                                cluster.node(n).name.clone(),
                                cluster.type_name(t).to_string(),
                                book.next_price(n, t),
                            ));
                        }
                    }
                }
            }
        }
        for j in &slurm_jobs {
            if j.status == JobStatus::Running {
                for (_, t, c) in j.gpu_parts() {
                    *summary.busy.entry(t).or_default() += c;
                }
            }
        }
        let held: Vec<(String, String, u32)> = slurm_jobs
            .iter()
            .filter(|j| j.status == JobStatus::Running)
            .flat_map(|j| j.gpu_parts())
            .collect();
        summary.nodes = view::node_rows(&nodes, &self.config.partitions, planned.values(), &held);
        summary.actions = done
            .iter()
            .map(|(j, a, o)| (*j, format!("{a}: {o}")))
            .collect();
        let mut decisions = self.decisions(
            round,
            &rows,
            &plan,
            &planned,
            &origins_by_job,
            &cv.unusable,
            &before,
        );
        for (job, f) in &fork_decisions {
            if let Some(d) = decisions.iter_mut().find(|d| d.job == *job) {
                d.runs = f.placement.is_some();
                d.placement = f.placement.clone();
                d.wait_reason = None;
                d.text = f.text.clone();
            }
        }
        for (job, why) in &unenforceable {
            if let Some(d) = decisions.iter_mut().find(|d| d.job == *job) {
                d.runs = false;
                d.placement = None;
                d.text = format!("waits: Hadar's best placement for it, {why}");
            }
        }
        for (job, c) in commitments.iter().filter(|(_, c)| !c.starts_now(now_s)) {
            if let Some(d) = decisions.iter_mut().find(|d| d.job == *job && !d.runs) {
                let rates = origins_by_job
                    .get(job)
                    .map(|o| explain::rates_words(o))
                    .unwrap_or_default();
                d.text =
                    explain::committed(&c.gpu_type, c.start_s - now_s, c.finish_s - now_s, &rates);
            }
        }
        if let Some(cluster) = &cv.cluster {
            site.explain(&mut decisions, &states, now_s, cluster, strength);
        }
        self.store.write(|w| {
            w.put_round(&summary, &decisions)?;
            w.set_meta("round", &round.to_string())
        })?;
        faults::reached("round-recorded");
        self.beat(round, took_back);
        let deferred = commitments
            .values()
            .filter(|c| !c.starts_now(now_s))
            .count();
        Ok(RoundReport {
            round,
            active: states.len() + deferred,
            actions: done,
            decision_ms,
            read_ms,
            enforce_ms,
            total_ms: round_started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Splits the pending elements of managed arrays that may run now off into job records
    /// of their own ([`arrays::splits`]); returns how many it split.
    fn split_arrays(&self, slurm_jobs: &[SlurmJob], now_unix: f64) -> usize {
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
    fn take_back_failed_open(
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
                failopen::TakeBack::Adopt => "adopt",
                _ => "take-back",
            };
            let intent = self
                .store
                .write(|w| w.add_intent(round, sj.id, action, None, t))?;
            let outcome = match what {
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
            let text = outcome_text(&outcome.map(|_| "ok".to_string()));
            tracing::info!(job = sj.id, action, outcome = %text, "a job failed open while the daemon was away");
            if text == "ok"
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

    /// Writes the heartbeat after a completed round (what `hadar fail-open` reads), and
    /// removes the fail-open state once a round found no failed-open job left to take back.
    /// A failure is logged, not fatal: the round's work is done; a heartbeat that stays
    /// unwritten fails the cluster open, which is the safe side.
    fn beat(&self, round: u64, failed_open_jobs: usize) {
        let path = self.config.sidecar.heartbeat_path();
        let hb = failopen::Heartbeat {
            round,
            at_unix: now_unix(),
            holder: failopen::holder(),
        };
        if let Err(e) = failopen::write_heartbeat(&path, &hb) {
            tracing::error!(
                "could not write the heartbeat (hadar fail-open will take this daemon for dead): {e}"
            );
        }
        if failed_open_jobs == 0 && failopen::state_path(&path).exists() {
            match failopen::clear_state(&path) {
                Ok(()) => tracing::info!(
                    "every failed-open job is back under hadar; the cluster is no longer failed open"
                ),
                Err(e) => tracing::warn!("{e}"),
            }
        }
    }

    /// Holds again every managed job that left hold without the daemon releasing it (its
    /// owner ran `scontrol release`; the plugin had stripped its GPUs, so it must not run
    /// outside the plan): a pending one is held (as root: an admin hold its owner cannot
    /// release), a running one requeued held. A job whose last intent is a start that a crash
    /// cut short, and that carries that start's placement in Slurm, was released by the
    /// daemon itself (or by its owner after the placement, which runs it as planned) and is
    /// taken as starting. One without the placement (the crash came before it) was released
    /// by someone else and would run with no GPU: it is held again like any other.
    fn put_back_on_hold(
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
            let last = self.store.last_intent(job)?;
            let sj = slurm_jobs.iter().find(|j| j.id == job);
            if let Some(i) = last.filter(|i| {
                i.action == "start"
                    && i.outcome.as_deref().is_none_or(|o| o == "interrupted")
                    && sj.is_some_and(|sj| carries_placement(sj, i.placement.as_ref()))
            }) {
                if let Some(r) = rows.get_mut(&job) {
                    r.phase = Phase::Starting;
                    r.placement = i.placement;
                }
                continue;
            }
            tracing::warn!(
                job,
                running,
                "a managed job left hold without hadar releasing it (its owner ran `scontrol release`?); holding it again"
            );
            let t = now_unix() - self.epoch;
            let (action, outcome) = if running {
                let intent = self
                    .store
                    .write(|w| w.add_intent(round, job, "requeue-hold", None, t))?;
                (intent, self.slurm.requeue_hold(job))
            } else {
                // A hold like the planned ones, with the same crash points: a crash after the
                // intent leaves the job released, and the next run holds it again.
                let intent = self
                    .store
                    .write(|w| w.add_intent(round, job, "hold", None, t))?;
                faults::reached("hold-intent");
                let outcome = self.slurm.hold(job);
                faults::reached("hold-done");
                (intent, outcome)
            };
            let text = outcome_text(&outcome.map(|_| "ok".to_string()));
            if let Some(r) = rows.get_mut(&job) {
                r.phase = Phase::Waiting;
                r.placement = None;
            }
            self.close(action, &text, rows.get(&job))?;
        }
        Ok(())
    }

    /// Jobs that this daemon's own preemption requeued held and that are now pending but no
    /// longer held: a daemon killed right after the requeue left the row running, and someone
    /// (the owner) released the job before this run saw it held; or killed while holding such
    /// a job again (its last intent a hold), leaving it released. Reconcile takes a running
    /// job seen pending and released as being started (as after Slurm's own requeue of a
    /// failed node's job), which would run it on its last placement outside the plan; these
    /// are holds released by someone else, to be held again.
    fn released_after_a_requeue(
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
                .is_some_and(|i| ["preempt", "requeue-hold", "hold"].contains(&i.action.as_str()));
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
    fn make_released_jobs_eligible(
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

    /// Writes in each waiting job's `Comment` why it waits (see [`eligible::reason_words`]);
    /// best effort: a failed update is logged and retried next round.
    fn say_why_jobs_wait(
        &self,
        slurm_jobs: &[SlurmJob],
        rows: &BTreeMap<u64, JobRow>,
        planned: &BTreeMap<u64, NodeGpus>,
        blocked: &BTreeMap<u64, eligible::Blocked>,
        specs: &BTreeMap<u64, JobSpec>,
        owned: &BTreeSet<u64>,
    ) {
        let mut queue: Vec<&JobRow> = rows
            .values()
            .filter(|r| r.phase == Phase::Waiting && !owned.contains(&r.id))
            .filter(|r| !planned.contains_key(&r.id) && !blocked.contains_key(&r.id))
            .collect();
        queue.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.id.cmp(&b.id)));
        for j in slurm_jobs {
            let Some(r) = rows.get(&j.id).filter(|r| r.phase == Phase::Waiting) else {
                continue;
            };
            if owned.contains(&r.id) {
                continue;
            }
            let position = queue.iter().position(|q| q.id == r.id).map_or(0, |p| p + 1);
            let types = specs.get(&r.id).and_then(|s| s.gpu_types.as_deref());
            let words = match planned.get(&r.id) {
                Some(gpus) => format!("hadar: starting on {}", explain::placement_words(gpus)),
                None => eligible::reason_words(blocked.get(&r.id), r.workers, types, position),
            };
            if eligible::may_write(j.comment.as_deref(), &words)
                && let Err(e) = self.slurm.set_comment(r.id, &words)
            {
                tracing::warn!(job = r.id, "could not write why the job waits: {e}");
            }
        }
    }

    fn log_events(&mut self, events: &[Event]) {
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

    /// Carries out the actions: holds, then checkpoint signals to every job being preempted,
    /// one grace period, their requeues, then starts. Each action is an intent in the store
    /// first and is closed with its outcome; a failed action does not stop the others.
    fn enforce(
        &mut self,
        round: u64,
        todo: &[Action],
        rows: &mut BTreeMap<u64, JobRow>,
        typed: &HashSet<u64>,
    ) -> Result<Vec<(u64, String, String)>, DaemonError> {
        let mut done = Vec::new();
        let now = |d: &Self| now_unix() - d.epoch;
        let preempts: Vec<&Action> = todo
            .iter()
            .filter(|a| matches!(a, Action::Preempt { .. }))
            .collect();
        let mut signalled: Vec<(u64, i64)> = Vec::new();
        for a in todo.iter().filter(|a| matches!(a, Action::Hold { .. })) {
            let id = a.job();
            let t = now(self);
            let intent = self
                .store
                .write(|w| w.add_intent(round, id, "hold", None, t))?;
            faults::reached("hold-intent");
            let outcome = match self.slurm.job(id) {
                Ok(Some(j)) if j.status == JobStatus::Pending && !j.is_held() => {
                    self.slurm.hold(id).map(|_| "ok".to_string())
                }
                Ok(_) => Ok("skipped: not a released pending job".to_string()),
                Err(e) => Err(e),
            };
            faults::reached("hold-done");
            let text = outcome_text(&outcome);
            if let (Ok(_), Some(r)) = (&outcome, rows.get_mut(&id)) {
                r.phase = Phase::Waiting;
                r.placement = None;
            }
            self.close(intent, &text, rows.get(&id))?;
            done.push((id, "hold".into(), text));
        }
        let signal = self.config.sidecar.preempt_signal.clone();
        for a in &preempts {
            let id = a.job();
            let t = now(self);
            let intent = self
                .store
                .write(|w| w.add_intent(round, id, "preempt", None, t))?;
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
                    let text = format!("error: {e}");
                    self.close(intent, &text, rows.get(&id))?;
                    done.push((id, "preempt".into(), text));
                }
            }
        }
        if !signalled.is_empty() {
            std::thread::sleep(Duration::from_secs_f64(
                self.config.sidecar.preempt_grace_seconds,
            ));
        }
        for (id, intent) in signalled {
            let outcome = match self.slurm.job(id) {
                Ok(Some(j)) if j.status == JobStatus::Running => {
                    self.slurm.requeue_hold(id).map(|_| "ok".to_string())
                }
                Ok(_) => Ok("skipped: no longer running".to_string()),
                Err(e) => Err(e),
            };
            faults::reached("preempt-requeued");
            let text = outcome_text(&outcome);
            if let Some(r) = rows.get_mut(&id) {
                if matches!(outcome.as_deref(), Ok("ok")) {
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
            done.push((id, "preempt".into(), text));
        }
        for a in todo {
            let Action::Start { job: id, placement } = a else {
                continue;
            };
            let id = *id;
            // slurmd refuses to launch a job whose credential is from the same second as the
            // revocation of its last run ("Job credential revoked"; the job then fails): a
            // job requeued moments ago (by this round, or by a run that crashed right after
            // its requeue) is started only once the requeue has settled.
            if let Some(prev) = self
                .store
                .last_intent(id)?
                .filter(|i| i.action == "preempt" || i.action == "requeue-hold")
            {
                let since = now(self) - prev.done_s.unwrap_or(prev.created_s);
                if since < REQUEUE_SETTLE_SECONDS {
                    std::thread::sleep(Duration::from_secs_f64(REQUEUE_SETTLE_SECONDS - since));
                }
            }
            let t = now(self);
            let intent = self
                .store
                .write(|w| w.add_intent(round, id, "start", Some(placement), t))?;
            faults::reached("start-intent");
            let spec = GpuSpec {
                nodes: placement.clone(),
                typed: typed.contains(&id),
            };
            let outcome = match self.slurm.job(id) {
                Ok(Some(j)) if j.status == JobStatus::Pending && j.is_held() => self
                    .slurm
                    .set_placement(id, &spec)
                    .inspect(|_| faults::reached("start-placed"))
                    .and_then(|_| self.slurm.start_now(id))
                    .and_then(|_| self.slurm.release(id))
                    .map(|_| "ok".to_string()),
                Ok(Some(j)) => Ok(format!(
                    "skipped: job is {} and not held",
                    j.status.as_str()
                )),
                Ok(None) => Ok("skipped: Slurm no longer knows the job".to_string()),
                Err(e) => Err(e),
            };
            faults::reached("start-released");
            let text = outcome_text(&outcome);
            if matches!(outcome.as_deref(), Ok("ok"))
                && let Some(r) = rows.get_mut(&id)
            {
                r.phase = Phase::Starting;
                r.placement = Some(placement.clone());
                r.starts += 1;
                if spec.typed && !self.slurm.retypes_pending_jobs() {
                    // Slurm now holds the job to these types (and any it had) for good.
                    let mut types = r.bound_types.clone().unwrap_or_default();
                    types.extend(view::per_type(placement).into_keys());
                    types.sort();
                    types.dedup();
                    r.bound_types = Some(types);
                }
            }
            self.close(intent, &text, rows.get(&id))?;
            done.push((id, "start".into(), text));
        }
        Ok(done)
    }

    fn close(&mut self, intent: i64, text: &str, row: Option<&JobRow>) -> Result<(), DaemonError> {
        let now_s = now_unix() - self.epoch;
        self.store.write(|w| {
            if let Some(r) = row {
                w.put_job(r)?;
            }
            w.close_intent(intent, now_s, text)
        })?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn decisions(
        &self,
        round: u64,
        rows: &BTreeMap<u64, JobRow>,
        plan: &Option<hadar_core::RoundPlan>,
        planned: &BTreeMap<u64, NodeGpus>,
        origins: &BTreeMap<u64, RateOrigins>,
        unusable: &[(String, String)],
        before: &BTreeMap<u64, JobRow>,
    ) -> Vec<Decision> {
        let mut out = Vec::new();
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
        for r in rows.values().filter(|r| r.phase != Phase::Finished) {
            let rates = origins
                .get(&r.id)
                .map(|o| explain::rates_words(o))
                .unwrap_or_default();
            let base = Decision::new(r.id, round);
            let d = match plan {
                None => Decision {
                    text: explain::no_cluster(unusable),
                    ..base
                },
                Some(_) => {
                    if let Some(a) = assigned.get(&r.id) {
                        let p = planned.get(&r.id).cloned().unwrap_or_default();
                        let kept = before
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
                            text: format!(
                                "waits: no record of this job's request could be read. {rates}"
                            ),
                            ..base
                        }
                    }
                }
            };
            out.push(d);
        }
        out
    }
}

/// The spec with its GPU types limited to `bound` (the types of its first placement).
fn bind_types(spec: &JobSpec, bound: Option<&[String]>) -> JobSpec {
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

fn outcome_text(o: &Result<String, SlurmError>) -> String {
    match o {
        Ok(s) => s.clone(),
        Err(e) => format!("error: {e}"),
    }
}

/// Seconds since 1970 by the system clock.
pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
