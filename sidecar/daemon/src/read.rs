//! The round's first phase: everything the round reads from Slurm and the store, read once
//! into a [`RoundSnapshot`] that [`crate::decide`] plans from without further IO.
//!
//! Reading includes the upkeep that must precede planning because it changes what there is
//! to plan: failed-open jobs taken back, array elements split off, the store reconciled with
//! Slurm, jobs released by someone else held again, forked jobs' open rounds moved on, and
//! progress reports learned as rates. Each of those actions is an intent in the store, as in
//! enforcement; the snapshot is taken after them.

use crate::action_log::ActionLog;
use crate::daemon::Daemon;
use crate::error::DaemonError;
use crate::fork::ForkView;
use crate::reconcile::{self, Event};
use crate::slurm_api::SlurmApi;
use crate::snapshot::RoundSnapshot;
use crate::spec::JobSpec;
use crate::{arrays, faults, view};
use hadar_slurm::{JobStatus, SlurmJob};
use hadar_store::{JobRow, Phase};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// The fork pass's part of the reading: the jobs it owns, their trackers, what it did.
type ForkReading = (BTreeSet<u64>, BTreeMap<u64, ForkView>, ActionLog);

/// What reading did besides taking the snapshot.
pub struct Reading {
    /// When the round started (after the lease check).
    pub started: Instant,
    /// Milliseconds spent reading Slurm's nodes and jobs.
    pub read_ms: f64,
    /// How many jobs carried a fail-open mark.
    pub took_back: usize,
    /// The fork pass's actions on forked jobs' open rounds.
    pub fork_actions: ActionLog,
}

impl<S: SlurmApi> Daemon<S> {
    /// Takes the lease, reads Slurm and the store, does the upkeep that precedes planning,
    /// and returns the round's snapshot.
    pub(crate) fn read(&mut self, now_unix: f64) -> Result<(RoundSnapshot, Reading), DaemonError> {
        self.lead(now_unix)?;
        let now_s = now_unix - self.epoch;
        let started = Instant::now();
        // The jobs first: the nodes read last stand in when no job changed since.
        let (mut slurm_jobs, refused_records) = self.slurm.jobs()?;
        let nodes = self.slurm.nodes()?;
        let read_ms = started.elapsed().as_secs_f64() * 1000.0;
        faults::reached("round-read");
        let mut untrusted: BTreeSet<u64> = refused_records
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
        let retypes = self.slurm.retypes_pending_jobs();
        let events = self.reconcile_rows(
            round,
            now_s,
            &slurm_jobs,
            &untrusted,
            &before,
            &mut rows,
            retypes,
        )?;
        self.make_released_jobs_eligible(now_unix, &slurm_jobs, &rows);
        let site = crate::site::read(&self.slurm, now_unix, &slurm_jobs);
        let specs: BTreeMap<u64, JobSpec> = rows
            .values()
            .filter(|r| r.phase != Phase::Finished)
            .filter_map(|r| Some((r.id, (self.decode)(&r.record).ok()?)))
            .collect();
        let (owned, forks, fork_actions) =
            self.advance_forks(&mut rows, &specs, &slurm_jobs, now_unix)?;
        self.learn(&events, &specs, &before, &rows)?;
        faults::reached("round-reconciled");
        let mut learned = BTreeMap::new();
        for id in specs.keys() {
            learned.insert(*id, self.store.learned_rates(*id)?);
        }
        let snapshot = RoundSnapshot {
            round,
            now_unix,
            now_s,
            nodes,
            slurm_jobs,
            rows,
            before,
            specs,
            owned,
            forks,
            learned,
            site,
            retypes,
            slurm_release: self.slurm.slurm_release(),
            chosen: Default::default(),
        };
        let reading = Reading {
            started,
            read_ms,
            took_back,
            fork_actions,
        };
        Ok((snapshot, reading))
    }

    /// The store's jobs brought in line with Slurm's (see [`reconcile`]), jobs released by
    /// someone else held again; returns the round's events.
    #[allow(clippy::too_many_arguments)]
    fn reconcile_rows(
        &mut self,
        round: u64,
        now_s: f64,
        slurm_jobs: &[SlurmJob],
        untrusted: &BTreeSet<u64>,
        before: &BTreeMap<u64, JobRow>,
        rows: &mut BTreeMap<u64, JobRow>,
        retypes: bool,
    ) -> Result<Vec<Event>, DaemonError> {
        let mut events = reconcile::reconcile(
            rows,
            slurm_jobs,
            now_s,
            self.epoch,
            self.config.sidecar.default_steps,
            &*self.decode,
            untrusted,
        );
        if retypes {
            // This release replaces a pending job's GPU types when they are updated: a typed
            // request binds no job to types, and a preempted job may come back on any.
            for r in rows.values_mut() {
                r.bound_types = None;
            }
        }
        events.extend(self.released_after_a_requeue(before, rows)?);
        self.log_events(&events);
        if round == self.first_round {
            self.log_adoption(&events, slurm_jobs, before.len());
        }
        self.put_back_on_hold(round, &events, slurm_jobs, rows)?;
        self.count_starts_of_ended_jobs(&events, before, slurm_jobs, rows)?;
        Ok(events)
    }

    /// Logs the first round's adoption of the managed jobs the store did not know.
    fn log_adoption(&self, events: &[Event], slurm_jobs: &[SlurmJob], known: usize) {
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
            known,
            adopted = adopted.len(),
            running,
            "first round: {} managed jobs taken from Slurm that the state database did not know ({running} of them running)",
            adopted.len()
        );
    }

    /// Forked jobs are the fork pass's: their open rounds move on before planning. Returns
    /// the jobs it owns, their trackers as they stand after that, and what it did.
    fn advance_forks(
        &mut self,
        rows: &mut BTreeMap<u64, JobRow>,
        specs: &BTreeMap<u64, JobSpec>,
        slurm_jobs: &[SlurmJob],
        now_unix: f64,
    ) -> Result<ForkReading, DaemonError> {
        let Some(f) = self.fork.as_mut() else {
            return Ok((BTreeSet::new(), BTreeMap::new(), Vec::new()));
        };
        let owned = f.owned(&self.store, rows, specs)?;
        let actions = f.advance(
            &mut self.store,
            rows,
            &owned,
            slurm_jobs,
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
        let mut forks = BTreeMap::new();
        for &id in &owned {
            if let Some(v) = ForkView::read(&self.store, id)? {
                forks.insert(id, v);
            }
        }
        Ok((owned, forks, actions))
    }

    /// Saves the reconciled jobs and learns the rates the jobs' progress reports show.
    fn learn(
        &mut self,
        events: &[Event],
        specs: &BTreeMap<u64, JobSpec>,
        before: &BTreeMap<u64, JobRow>,
        rows: &BTreeMap<u64, JobRow>,
    ) -> Result<(), DaemonError> {
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
        Ok(())
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
}
