//! The daemon's round: read Slurm, reconcile with the store, plan with the Hadar core,
//! enforce the plan, record the round.
//!
//! Crash safety: every action is written to the store as an intent before it is carried out
//! and closed after; each action first checks the job's state in Slurm, so repeating it is
//! harmless; and every round starts from Slurm's state, never from memory. A daemon killed
//! at any point therefore restarts, closes the intents it finds open (noting them), and
//! carries on from what Slurm shows: no job is lost, and none runs twice (Slurm runs a job id
//! once at a time; only a requeue, which the daemon does after a checkpoint, reruns it).

use crate::config::DaemonConfig;
use crate::fork::Forker;
use crate::observe::{RoundEnd, RoundObserver};
use crate::spec::{self, JobSpec, RateOrigins};
use crate::{decide, failopen, faults, summary};
use hadar_formats::ThroughputTable;
use hadar_slurm::SlurmError;
use hadar_store::{Horizon, LeaseGrant, Outcome, Store, StoreError};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub use crate::error::DaemonError;
pub use crate::slurm_api::{SlurmApi, now_unix};
pub use crate::summary::RoundReport;

/// The shortest time from one round's start to the next when a notice wakes the daemon.
pub const MIN_WOKEN_GAP: Duration = Duration::from_secs(2);

/// Seconds between a job's requeue and its next start (see the start action).
pub(crate) const REQUEUE_SETTLE_SECONDS: f64 = 2.5;

/// Reads a hadar record into a job spec.
pub type Decoder = Box<dyn Fn(&str) -> Result<JobSpec, String> + Send>;

/// The daemon.
pub struct Daemon<S: SlurmApi> {
    pub(crate) slurm: S,
    pub(crate) store: Store,
    pub(crate) config: DaemonConfig,
    pub(crate) table: ThroughputTable,
    /// The round policy (`[sidecar] policy`), kept across rounds for the books it keeps.
    pub(crate) policy: Box<dyn hadar_core::Policy>,
    pub(crate) decode: Decoder,
    pub(crate) epoch: f64,
    pub(crate) round: u64,
    /// The number of this run's first round (its adoption report is logged).
    pub(crate) first_round: u64,
    pub(crate) refused: HashSet<u64>,
    pub(crate) fork: Option<Forker>,
    /// What watches the rounds (metrics, systemd's notifications).
    pub(crate) observers: Vec<Box<dyn RoundObserver>>,
    /// Who this daemon is in the lease (`host:pid`).
    pub(crate) holder: String,
    /// Whether it held the lease at its last check.
    pub(crate) leading: bool,
    /// When the first grace time of a job signalled to checkpoint ends (Unix seconds): the
    /// round that requeues it is due then, whatever the round length.
    pub(crate) requeue_due_unix: Option<f64>,
}

/// What a daemon (acting or shadow) reads as it opens its store: the embedded throughput
/// table (rating the site's GPU type names by `config`'s catalog), the store's epoch and the
/// last round it recorded (0 for a new store).
pub fn opening(
    store: &mut Store,
    now_unix: f64,
    config: &DaemonConfig,
) -> Result<(ThroughputTable, f64, u64), DaemonError> {
    let table = hadar_formats::embedded::throughputs()
        .map_err(|e| DaemonError::InvalidPlan(e.to_string()))?
        .with_catalog(config.gpu_catalog());
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
        let (table, epoch, round) = crate::daemon::opening(&mut store, now_unix, &config)?;
        Ok(Daemon {
            slurm,
            store,
            policy: config.round_policy(),
            config,
            table,
            decode,
            epoch,
            round,
            first_round: round + 1,
            refused: HashSet::new(),
            fork: None,
            observers: Vec::new(),
            holder: failopen::holder(),
            leading: false,
            requeue_due_unix: None,
        })
    }

    /// Takes or renews the leader's lease at `now_unix`. On becoming leader it closes the
    /// intents a previous leader (or run) left open and continues the round count from the
    /// store; on standby it returns [`DaemonError::Standby`] and must not act.
    pub(crate) fn lead(&mut self, now_unix: f64) -> Result<(), DaemonError> {
        let s = &self.config.sidecar;
        let (ttl, skew) = (s.lease_seconds, s.max_clock_skew_seconds);
        match self.store.acquire_lease(
            &self.holder,
            now_unix,
            (ttl, skew),
            &failopen::holder_died,
        )? {
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
                                w.close_intent(i.id, now_s, &Outcome::Interrupted)?;
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

    /// Tells `observer` of the daemon's life and each round's end (metrics, systemd).
    pub fn with_observer(mut self, observer: Box<dyn RoundObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    fn tell(&mut self, what: impl Fn(&mut dyn RoundObserver)) {
        for o in &mut self.observers {
            what(o.as_mut());
        }
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
    pub(crate) fn profile(
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
            &crate::decide::priors(&self.config),
        ))
    }

    /// Runs rounds until `stop` is set: one every `round_seconds`, or sooner when `wake`
    /// receives (a new job was announced). A failed round is logged and the next one starts
    /// again from Slurm's state.
    pub fn run(&mut self, stop: &AtomicBool, wake: &Receiver<()>, clock: &dyn Fn() -> f64) {
        while !stop.load(Ordering::SeqCst) {
            let started = Instant::now();
            let round_start = clock();
            match self.round_with_upkeep(round_start) {
                Ok(r) => {
                    tracing::info!(
                        round = r.round,
                        active = r.active,
                        actions = r.actions.len(),
                        decision_ms = r.decision_ms,
                        read_ms = r.read_ms,
                        enforce_ms = r.enforce_ms,
                        total_ms = r.total_ms,
                        slurm_commands = r.slurm_io.commands,
                        slurm_bytes = r.slurm_io.bytes_read,
                        full_reads = r.slurm_io.full_reads,
                        jobs_read = r.slurm_io.jobs_read,
                        jobs_listed = r.slurm_io.jobs_listed,
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
            // A checkpointed job is requeued by the first round after its grace time.
            if let Some(due) = self.requeue_due_unix {
                let wait = Duration::from_secs_f64((due - round_start).max(0.0));
                period = period.min(wait.max(MIN_WOKEN_GAP));
            }
            let mut woken: Option<Instant> = None;
            // Sleep in short steps so that a stop request is honoured promptly. A notice
            // shortens the wait to `MIN_WOKEN_GAP` after this round's start: during a burst
            // of submissions (one notice each) rounds back to back would read the whole
            // queue from slurmctld continuously (measured: 2,000 submissions in 6 s woke
            // nine rounds, and raised sbatch's p99 latency by tens of ms). The woken round
            // also waits `wake_settle_seconds` from the first notice, so that it sees the
            // burst rather than its first few jobs.
            while !stop.load(Ordering::SeqCst) {
                self.tell(|o| o.tick());
                // A woken round also waits out the settle time from its first notice.
                let settle = woken.map_or(Duration::ZERO, |w| {
                    self.config
                        .sidecar
                        .wake_settle()
                        .saturating_sub(w.elapsed())
                });
                let left = period.saturating_sub(started.elapsed()).max(settle);
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
                    woken.get_or_insert_with(Instant::now);
                }
            }
        }
        self.resign();
        self.tell(|o| o.stopping());
    }

    /// One round, then what follows every round: the observers told (metrics, systemd's
    /// notifications), and the pruning of history past the configured horizon.
    pub fn round_with_upkeep(&mut self, now_unix: f64) -> Result<RoundReport, DaemonError> {
        let result = self.round(now_unix);
        if result.is_ok()
            && let Err(e) = self.prune(now_unix)
        {
            tracing::warn!("pruning old history: {e}");
        }
        let end = match &result {
            Ok(report) => RoundEnd::Done {
                report,
                store: &self.store,
                now_unix,
            },
            Err(DaemonError::Standby { .. }) => RoundEnd::Standby,
            Err(e) => RoundEnd::Failed(e),
        };
        for o in &mut self.observers {
            o.round_end(&end);
            o.tick();
        }
        result
    }

    /// Deletes history older than `keep_days` or `keep_rounds`, and kept rounds' snapshots
    /// older than `keep_snapshot_rounds` (see [`Store::prune`]).
    fn prune(&mut self, now_unix: f64) -> Result<(), DaemonError> {
        let s = &self.config.sidecar;
        let horizon = Horizon {
            before_s: now_unix - self.epoch - s.keep_days * 86_400.0,
            through_round: self.round.saturating_sub(s.keep_rounds),
            snapshots_through_round: self.round.saturating_sub(s.keep_snapshot_rounds),
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

    /// Runs one round at wall-clock time `now_unix`: read (Slurm and the store, once, into a
    /// [`crate::snapshot::RoundSnapshot`]), decide (pure, [`decide::decide`]), enforce, record.
    pub fn round(&mut self, now_unix: f64) -> Result<RoundReport, DaemonError> {
        let io_before = self.slurm.io();
        let (snap, reading) = self.read(now_unix)?;
        let t0 = Instant::now();
        let decision = decide::decide(&snap, &self.config, &self.table, self.policy.as_mut())?;
        let decision_ms = t0.elapsed().as_secs_f64() * 1000.0;
        faults::reached("round-planned");
        let enforced = self.carry_out(&snap, &decision, reading.fork_actions)?;
        let mut decisions = decision.decisions.clone();
        // A planned round that could not be submitted does not run; the kept decision is
        // still the one decided (replay compares decisions, not outcomes).
        for (job, why) in &enforced.fork_failures {
            if let Some(d) = decisions.iter_mut().find(|d| d.job == *job) {
                d.runs = false;
                d.placement = None;
                d.text = format!("forked (HadarE): its round's copies could not start: {why}");
            }
        }
        let mut summary = summary::summary(&snap, &decision, &self.config.partitions);
        summary.decision_ms = decision_ms;
        summary.policy = if self.fork.is_some() {
            "hadar+hadare".into()
        } else {
            self.config.sidecar.policy.name().plain().to_string()
        };
        summary.actions = summary::action_texts(&enforced.done);
        self.store.write(|w| {
            w.put_round(&summary, &decisions)?;
            w.set_meta("round", &snap.round.to_string())
        })?;
        faults::reached("round-recorded");
        self.keep_round(&snap, &decision);
        self.beat(snap.round, reading.took_back);
        Ok(RoundReport {
            round: snap.round,
            active: decision.states.len() + decision.deferred,
            actions: enforced.done,
            decision_ms,
            read_ms: reading.read_ms,
            enforce_ms: enforced.enforce_ms,
            total_ms: reading.started.elapsed().as_secs_f64() * 1000.0,
            slurm_io: self.slurm.io().since(io_before),
        })
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
}

/// An action's outcome: Slurm's error, when it failed, is the outcome.
pub(crate) fn outcome(result: Result<Outcome, SlurmError>) -> Outcome {
    result.unwrap_or_else(|e| Outcome::Error(e.to_string()))
}
