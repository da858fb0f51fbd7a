//! Shadow mode (`hadar serve --shadow`, `[sidecar] shadow = true`): the daemon reads the live
//! cluster and queue every round and records what Hadar would do, and acts on nothing. Slurm
//! schedules as usual: no job is released, held, updated, requeued, signalled or cancelled,
//! no copy job is submitted, and no intent is written.
//!
//! The job_submit plugin is not enabled in shadow mode, so jobs carry no hadar record: every
//! pending or running GPU job of the managed partitions is shadowed, with its request read
//! from Slurm's own fields ([`request_of`]), but for the jobs the plugin would leave to Slurm
//! for what their records show ([`Shadowed`]). Per round the store gets:
//!
//! * one [`JobRow`] per shadowed job with what Slurm did: submit, first start, end (its
//!   `SubmitTime`, `StartTime`, `EndTime`), the GPUs it held by node and type, its final state;
//! * a [`RoundRow`] (no actions) and one [`Decision`] per active job saying what Hadar would
//!   have done with it this round (start it where, move it, preempt it, leave it waiting).
//!
//! `hadar status` says the daemon is in shadow mode (the store's `mode` meta value), and
//! `hadar report --state DB` compares, for the jobs that ran, Slurm's measured JCTs with
//! those Hadar predicts through the simulator.

use crate::sd_notify::Notifier;
use hadar_daemon::config::DaemonConfig;
use hadar_daemon::decide::RoundDecision;
use hadar_daemon::error::DaemonError;
use hadar_daemon::slurm_api::SlurmApi;
use hadar_daemon::snapshot::RoundSnapshot;
use hadar_daemon::spec::JobSpec;
use hadar_daemon::{explain, view};
use hadar_formats::ThroughputTable;
use hadar_request::gpu::{Scope, TresFields};
use hadar_slurm::{JobStatus, NodeInfo, SlurmJob};
use hadar_store::{Decision, Horizon, JobRow, NodeGpus, Phase, RoundRow, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The store's meta key naming the mode the daemon last ran in.
pub const MODE_KEY: &str = "mode";
/// Its value in shadow mode.
pub const SHADOW: &str = "shadow";
/// Its value when the daemon acts.
pub const ACTING: &str = "acting";
/// The meta key keeping the shadow daemon's round length (the report simulates with it).
pub const ROUND_SECONDS_KEY: &str = "shadow_round_seconds";
/// The meta key keeping the shadow daemon's restart cost.
pub const RESTART_SECONDS_KEY: &str = "shadow_restart_seconds";
/// The meta key keeping the shadow daemon's whole configuration, as JSON: the report
/// predicts with the policy and settings the shadow decided with.
pub const CONFIG_KEY: &str = "shadow_config";
/// The final state of a shadowed job that left Slurm's list before its end was seen.
pub const GONE: &str = "GONE";

/// Whether the store was last written by a daemon in shadow mode.
pub fn is_shadow(store: &Store) -> bool {
    store.meta(MODE_KEY).ok().flatten().as_deref() == Some(SHADOW)
}

/// A GPU job's request as Slurm holds it: `(GPUs in all, the request as text)`. A running
/// job's GPUs are those it holds; a pending one's come from `TresPerJob`, or `TresPerNode`
/// times its requested node list's length (at least one node; Slurm's node count of a
/// pending job is not read). `None` for a job with no GPUs.
pub fn request_of(job: &SlurmJob) -> Option<(u32, String)> {
    let text = [&job.tres_per_job, &job.tres_per_node]
        .into_iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    let held: u32 = job.gpu_parts().iter().map(|(_, _, c)| c).sum();
    if held > 0 {
        return Some((held, text));
    }
    // Slurm writes a count after `:` (`gres/gpu:v100:2`) or, in some forms, after `=`.
    let per_job = job.tres_per_job.as_deref().map(|t| t.replace('=', ":"));
    let per_node = job.tres_per_node.as_deref().map(|t| t.replace('=', ":"));
    let fields = TresFields {
        per_job: per_job.as_deref(),
        per_node: per_node.as_deref(),
        ..TresFields::default()
    };
    let req = hadar_request::gpu::extract(&fields, u32::MAX)
        .ok()?
        .request?;
    let per = u32::try_from(req.total()).ok()?;
    let gpus = match req.scope {
        Scope::PerJob => per,
        Scope::PerNode => per * (job.req_nodes.len().max(1) as u32),
    };
    (gpus > 0).then_some((gpus, text))
}

/// Which jobs are shadowed: the GPU jobs of the managed partitions that the plugin would
/// manage.
#[derive(Clone, Copy, Debug)]
pub struct Shadowed<'a> {
    /// `[slurm] managed_partitions` (all when empty).
    pub partitions: &'a [String],
    /// The site's `JobRequeue`: where it is 1, a job's `Requeue=0` is its user's
    /// `--no-requeue` (or an admin's update), which the plugin leaves to Slurm; where it is
    /// 0 every job shows `Requeue=0`, and the plugin would manage (and make requeueable) all
    /// but those that said `--no-requeue`, which the record cannot tell apart.
    pub site_requeues: bool,
}

impl Shadowed<'_> {
    /// Whether `job` is shadowed.
    fn takes(&self, job: &SlurmJob) -> bool {
        job.het_job_id.is_none() && in_scope(job, self.partitions) && !self.left_to_slurm(job)
    }

    /// Whether the plugin would leave a job to Slurm for what its record shows: it chose
    /// its nodes ([`chose_nodes`]), has a `--deadline` (`Unmanaged::Deadline`), asks for
    /// licenses (`Unmanaged::Licenses`), or may not be requeued on a site that requeues by
    /// default (`Unmanaged::NoRequeue`).
    fn left_to_slurm(&self, job: &SlurmJob) -> bool {
        chose_nodes(job)
            || job.site.deadline.is_some()
            || job.site.licenses.is_some()
            || (self.site_requeues && job.site.requeue == Some(false))
    }
}

/// Whether a job is in the managed partitions (`partitions` empty: all); a pending job may
/// name several.
fn in_scope(job: &SlurmJob, partitions: &[String]) -> bool {
    partitions.is_empty()
        || job
            .partition
            .as_deref()
            .is_some_and(|p| p.split(',').any(|p| partitions.iter().any(|q| q == p)))
}

/// Whether a job's user chose its nodes in a way the plugin would leave to Slurm
/// (`hadar_request::Unmanaged::NodeChoice`): a `--nodelist`, or a `--constraint` hadar does
/// not read. In shadow mode nothing else sets a job's required nodes. An `--exclude` list
/// and a constraint hadar reads are honoured in the plan, as the daemon honours them.
fn chose_nodes(job: &SlurmJob) -> bool {
    let unread = |f: &str| !f.trim().is_empty() && hadar_request::constraint::parse(f).is_err();
    !job.req_nodes.is_empty() || job.features.as_deref().is_some_and(unread)
}

/// Where a job ran: its GPUs by node and type, or, when Slurm no longer lists them (a job
/// that ended between two rounds), its nodes with its GPUs spread evenly and the type left
/// blank (the report takes it from the node).
fn placement_of(job: &SlurmJob, gpus: u32) -> Option<NodeGpus> {
    let held = hadar_daemon::reconcile::allocation(job);
    if !held.is_empty() {
        return Some(held);
    }
    if job.nodes.is_empty() {
        return None;
    }
    let each = (gpus / job.nodes.len() as u32).max(1);
    Some(
        job.nodes
            .iter()
            .map(|n| (n.clone(), vec![(String::new(), each)]))
            .collect(),
    )
}

/// Brings the shadowed jobs' rows in line with Slurm at `now_s` (seconds since `epoch`):
/// new GPU jobs of the managed partitions are added, and each row follows what Slurm did
/// (started, requeued, ended, or left the list). Pure.
pub fn observe(
    rows: &mut BTreeMap<u64, JobRow>,
    jobs: &[SlurmJob],
    shadowed: Shadowed<'_>,
    now_s: f64,
    epoch: f64,
) {
    let at = |t: Option<i64>| t.map(|t| t as f64 - epoch);
    for j in jobs.iter().filter(|j| shadowed.takes(j)) {
        let Some((gpus, request)) = request_of(j) else {
            continue;
        };
        let row = rows.entry(j.id).or_insert_with(|| {
            let mut r = JobRow::new(
                j.id,
                j.name.clone(),
                format!("slurm request: {request}"),
                gpus,
                0.0,
                at(j.submit_time).unwrap_or(now_s),
            );
            r.user_id = j.user_id;
            r.group_id = j.group_id;
            r
        });
        if row.phase == Phase::Finished {
            continue;
        }
        match &j.status {
            JobStatus::Pending | JobStatus::Requeued => {
                if row.phase == Phase::Running {
                    row.preemptions += 1;
                }
                row.phase = Phase::Waiting;
            }
            JobStatus::Running | JobStatus::Suspended => {
                if row.phase != Phase::Running {
                    row.starts += 1;
                }
                row.phase = Phase::Running;
                row.workers = gpus;
                row.placement = placement_of(j, gpus).or(row.placement.take());
                let start = at(j.start_time).unwrap_or(now_s);
                row.first_start_s.get_or_insert(start);
                row.run_s = (now_s - start).max(0.0);
            }
            s => {
                let end = at(j.end_time).unwrap_or(now_s);
                if let Some(start) = at(j.start_time).filter(|s| *s < end) {
                    row.first_start_s.get_or_insert(start);
                    row.run_s = end - start;
                    if row.placement.is_none() {
                        row.placement = placement_of(j, gpus);
                    }
                }
                row.phase = Phase::Finished;
                row.finished_s = Some(end);
                row.final_state = Some(s.as_str().to_uppercase());
            }
        }
    }
    for r in rows.values_mut() {
        if r.phase != Phase::Finished && !jobs.iter().any(|j| j.id == r.id) {
            r.phase = Phase::Finished;
            r.finished_s = Some(now_s);
            r.final_state = Some(GONE.into());
        }
    }
}

/// The spec a shadowed job is planned with: its GPUs, and its job type when its Slurm job
/// name names one of the throughput table's (`resnet50-b64`, `transformer`, ...); any other
/// job runs at the default rate on every type. The GPU types its request names do not bind
/// Hadar (as for managed jobs without `gpu-types=`).
pub fn spec_of(row: &JobRow, table: &ThroughputTable) -> JobSpec {
    JobSpec {
        restart_s: None,
        workers: row.workers,
        steps: None,
        job_type: table.resolve_job_type(&row.name).map(str::to_owned),
        hints: Vec::new(),
        gpu_types: None,
        fork: false,
        model: None,
        outer: None,
    }
}

/// What Hadar would do with one job this round, against what Slurm does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Would {
    /// Start a waiting job.
    Start,
    /// Leave a running job where it runs.
    Keep,
    /// Move a running job elsewhere.
    Move,
    /// Preempt a running job.
    Preempt,
    /// Leave a waiting job waiting.
    Wait,
}

impl Would {
    /// The word for the report and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Would::Start => "start",
            Would::Keep => "keep",
            Would::Move => "move",
            Would::Preempt => "preempt",
            Would::Wait => "wait",
        }
    }

    /// Whether acting on it would have changed what Slurm does.
    pub fn is_action(self) -> bool {
        matches!(self, Would::Start | Would::Move | Would::Preempt)
    }
}

/// What Hadar would do with a job now at `now` (its current placement) given `planned`.
pub fn would(now: Option<&NodeGpus>, running: bool, planned: Option<&NodeGpus>) -> Would {
    match (running, planned) {
        (false, Some(_)) => Would::Start,
        (false, None) => Would::Wait,
        (true, None) => Would::Preempt,
        (true, Some(p)) => match now {
            Some(here) if view::same_counts(here, p) => Would::Keep,
            _ => Would::Move,
        },
    }
}

/// One shadow round's outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShadowRound {
    /// The round number.
    pub round: u64,
    /// Shadowed jobs pending or running.
    pub active: usize,
    /// What Hadar would have done, per job.
    pub would: Vec<(u64, Would)>,
    /// Milliseconds the whole round took.
    pub total_ms: f64,
}

/// What a shadow round records: its summary, each active job's decision in the shadow's
/// words, and what hadar would do with each.
struct ShadowPlan {
    summary: RoundRow,
    decisions: Vec<Decision>,
    would: Vec<(u64, Would)>,
}

/// The daemon in shadow mode.
pub struct Shadow<S: SlurmApi> {
    slurm: S,
    store: Store,
    config: DaemonConfig,
    table: ThroughputTable,
    epoch: f64,
    round: u64,
    notifier: Notifier,
    /// The round policy, kept across rounds as the acting daemon keeps it.
    policy: Box<dyn hadar_core::Policy>,
}

impl<S: SlurmApi> Shadow<S> {
    /// A shadow daemon over this Slurm and store; marks the store as written in shadow mode.
    pub fn new(
        slurm: S,
        mut store: Store,
        config: DaemonConfig,
        now_unix: f64,
    ) -> Result<Self, DaemonError> {
        let (table, epoch, round) = hadar_daemon::daemon::opening(&mut store, now_unix, &config)?;
        store.set_meta(MODE_KEY, SHADOW)?;
        store.set_meta(ROUND_SECONDS_KEY, &config.sidecar.round_seconds.to_string())?;
        store.set_meta(
            RESTART_SECONDS_KEY,
            &config.sidecar.restart_seconds.to_string(),
        )?;
        match serde_json::to_string(&config) {
            Ok(kept) => store.set_meta(CONFIG_KEY, &kept)?,
            Err(e) => tracing::warn!("the report will predict with Hadar's defaults: {e}"),
        }
        let policy = config.round_policy();
        Ok(Shadow {
            slurm,
            store,
            config,
            table,
            epoch,
            round,
            notifier: Notifier::new(None, None, None),
            policy,
        })
    }

    /// Tells systemd of readiness and the watchdog through `notifier`.
    pub fn with_notifier(mut self, notifier: Notifier) -> Self {
        self.notifier = notifier;
        self
    }

    /// The state database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs rounds every `round_seconds` until `stop` (a notice only shortens nothing: there
    /// is no plugin to send one, but the channel is drained).
    pub fn run(&mut self, stop: &AtomicBool, wake: &Receiver<()>, clock: &dyn Fn() -> f64) {
        while !stop.load(Ordering::SeqCst) {
            let started = Instant::now();
            match self.round(clock()) {
                Ok(r) => {
                    self.notifier.ready();
                    let count = |w: Would| r.would.iter().filter(|(_, x)| *x == w).count();
                    tracing::info!(
                        round = r.round,
                        active = r.active,
                        would_start = count(Would::Start),
                        would_move = count(Would::Move),
                        would_preempt = count(Would::Preempt),
                        total_ms = r.total_ms,
                        "shadow round done (nothing acted on)"
                    );
                    if let Err(e) = self.prune(clock()) {
                        tracing::warn!("pruning old history: {e}");
                    }
                }
                Err(e) => tracing::error!("shadow round failed: {e}"),
            }
            self.notifier.tick();
            let period = self.config.sidecar.round();
            while !stop.load(Ordering::SeqCst) {
                self.notifier.tick();
                let left = period.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break;
                }
                let _ = wake.recv_timeout(left.min(Duration::from_millis(200)));
            }
        }
        self.notifier.stopping();
    }

    fn prune(&mut self, now_unix: f64) -> Result<(), DaemonError> {
        let s = &self.config.sidecar;
        let horizon = Horizon {
            before_s: now_unix - self.epoch - s.keep_days * 86_400.0,
            through_round: self.round.saturating_sub(s.keep_rounds),
            snapshots_through_round: 0,
        };
        self.store.prune(horizon)?;
        Ok(())
    }

    /// One round: read Slurm, record what it did, plan as Hadar would, record that. Acts on
    /// nothing.
    pub fn round(&mut self, now_unix: f64) -> Result<ShadowRound, DaemonError> {
        let started = Instant::now();
        let now_s = now_unix - self.epoch;
        let (slurm_jobs, _) = self.slurm.jobs()?;
        let nodes = self.slurm.nodes()?;
        let site_requeues = self.slurm.site_config()?.job_requeue;
        self.round += 1;
        let round = self.round;
        let mut rows: BTreeMap<u64, JobRow> =
            self.store.jobs()?.into_iter().map(|r| (r.id, r)).collect();
        let before = rows.clone();
        let shadowed = Shadowed {
            partitions: &self.config.partitions,
            site_requeues,
        };
        observe(&mut rows, &slurm_jobs, shadowed, now_s, self.epoch);
        let site = hadar_daemon::site::read(&self.slurm, now_unix, &slurm_jobs);
        let snap = observed_snapshot(
            round,
            (now_unix, now_s),
            nodes,
            slurm_jobs,
            rows,
            before,
            site,
            &self.table,
        );
        let ShadowPlan {
            summary,
            decisions,
            would,
        } = self.plan(&snap)?;
        let (rows, before) = (&snap.rows, &snap.before);
        self.store.write(|w| {
            for r in rows.values() {
                if before.get(&r.id) != Some(r) {
                    w.put_job(r)?;
                }
            }
            w.put_round(&summary, &decisions)?;
            w.set_meta("round", &round.to_string())
        })?;
        self.beat(round, now_unix);
        Ok(ShadowRound {
            round,
            active: rows.values().filter(|r| r.phase != Phase::Finished).count(),
            would,
            total_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Writes the heartbeat, as an acting daemon does after each round, so that the
    /// fail-open timer (which finds nothing to release in shadow mode) sees a live daemon and
    /// `hadar status` reports no failed-open cluster.
    fn beat(&self, round: u64, now_unix: f64) {
        let hb = hadar_daemon::failopen::Heartbeat {
            round,
            at_unix: now_unix,
            holder: hadar_daemon::failopen::holder(),
        };
        if let Err(e) =
            hadar_daemon::failopen::write_heartbeat(&self.config.sidecar.heartbeat_path(), &hb)
        {
            tracing::warn!("could not write the heartbeat: {e}");
        }
    }

    /// The acting daemon's decision ([`hadar_daemon::decide::decide`], with this config and round
    /// policy) on the round as observed, as a round summary and decisions in the shadow's
    /// words.
    fn plan(&mut self, snap: &RoundSnapshot) -> Result<ShadowPlan, DaemonError> {
        let t0 = Instant::now();
        let d =
            hadar_daemon::decide::decide(snap, &self.config, &self.table, self.policy.as_mut())?;
        let decision_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let mut summary = hadar_daemon::summary::summary(snap, &d, &self.config.partitions);
        summary.decision_ms = decision_ms;
        summary.policy = format!("{} (shadow)", self.config.sidecar.policy.name().plain());
        summary.slurm_release = self.slurm.slurm_release();
        let (decisions, would) = shadow_decisions(snap, &d);
        Ok(ShadowPlan {
            summary,
            decisions,
            would,
        })
    }
}

/// What the acting daemon's [`hadar_daemon::decide::decide`] reads, from what the shadow daemon
/// observed: the shadowed jobs' rows as the managed jobs, each one's spec from its Slurm
/// request ([`spec_of`]), no learned rates and no forked jobs (shadowed jobs report nothing
/// and fork nothing). Pure.
#[allow(clippy::too_many_arguments)]
pub fn observed_snapshot(
    round: u64,
    (now_unix, now_s): (f64, f64),
    nodes: Vec<NodeInfo>,
    slurm_jobs: Vec<SlurmJob>,
    rows: BTreeMap<u64, JobRow>,
    before: BTreeMap<u64, JobRow>,
    site: hadar_daemon::site::Site,
    table: &ThroughputTable,
) -> RoundSnapshot {
    let specs = rows
        .values()
        .filter(|r| r.phase != Phase::Finished)
        .map(|r| (r.id, spec_of(r, table)))
        .collect();
    RoundSnapshot {
        round,
        now_unix,
        now_s,
        nodes,
        slurm_jobs,
        rows,
        before,
        specs,
        owned: BTreeSet::new(),
        forks: BTreeMap::new(),
        learned: BTreeMap::new(),
        site,
        // Shadowed jobs are never updated, so whether an update would retype them is moot.
        retypes: true,
        slurm_release: None,
        chosen: Default::default(),
    }
}

/// Each active shadowed job's decision in the shadow's words: what hadar would do with it
/// (the acting decision's placement, or why it would wait), beside what Slurm did.
fn shadow_decisions(snap: &RoundSnapshot, d: &RoundDecision) -> (Vec<Decision>, Vec<(u64, Would)>) {
    let mut decisions = Vec::new();
    let mut woulds = Vec::new();
    for r in snap.rows.values().filter(|r| r.phase != Phase::Finished) {
        let running = r.phase == Phase::Running;
        let plan = d.planned.get(&r.id);
        let w = would(r.placement.as_ref(), running, plan);
        let mut out = Decision::new(r.id, snap.round);
        out.runs = plan.is_some();
        out.placement = plan.cloned();
        let words = |p: &NodeGpus| explain::placement_words(p);
        let slurm = match (running, &r.placement) {
            (true, Some(p)) => format!("Slurm runs it on {}", words(p)),
            _ => "Slurm keeps it pending".to_string(),
        };
        let why = d
            .decisions
            .iter()
            .find(|x| x.job == r.id)
            .map(|x| x.text.as_str())
            .filter(|t| !t.is_empty());
        out.text = match (w, plan) {
            (Would::Start, Some(p)) => {
                format!("(shadow) hadar would start it on {}; {slurm}", words(p))
            }
            (Would::Move, Some(p)) => {
                format!("(shadow) hadar would move it to {}; {slurm}", words(p))
            }
            (Would::Keep, _) => format!("(shadow) hadar would leave it where it runs; {slurm}"),
            (Would::Preempt, _) => format!("(shadow) hadar would preempt it; {slurm}"),
            _ => match why {
                Some(why) => format!("(shadow) hadar would keep it waiting ({why}); {slurm}"),
                None => format!("(shadow) hadar would keep it waiting; {slurm}"),
            },
        };
        decisions.push(out);
        woulds.push((r.id, w));
    }
    (decisions, woulds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeAlloc;

    fn job(id: u64, status: JobStatus, gres: &str) -> SlurmJob {
        SlurmJob {
            name: "resnet50".into(),
            group_id: Some(1000),
            status,
            reason: None,
            priority: Some(1),
            admin_comment: None,
            tres_per_node: Some(gres.into()),
            submit_time: Some(1_000),
            ..SlurmJob::held_with_record(id, "")
        }
    }

    #[test]
    fn a_gpu_jobs_request_comes_from_slurms_fields() {
        assert_eq!(
            request_of(&job(1, JobStatus::Pending, "gres/gpu:v100=2")).map(|r| r.0),
            Some(2)
        );
        assert_eq!(
            request_of(&job(1, JobStatus::Pending, "gres:gpu:k80:3")).map(|r| r.0),
            Some(3)
        );
        let mut two_nodes = job(2, JobStatus::Pending, "gres/gpu=3");
        two_nodes.req_nodes = vec!["n1".into(), "n2".into()];
        assert_eq!(request_of(&two_nodes).map(|r| r.0), Some(6));
        assert_eq!(request_of(&job(3, JobStatus::Pending, "cpu=4")), None);
        let mut running = job(4, JobStatus::Running, "gres/gpu=1");
        running.alloc = vec![NodeAlloc {
            node: "n1".into(),
            gpus: vec![("v100".into(), 4)],
        }];
        assert_eq!(request_of(&running).map(|r| r.0), Some(4), "what it holds");
    }

    #[test]
    fn rows_follow_what_slurm_did() {
        let mut rows = BTreeMap::new();
        let parts = vec!["gpu".to_string()];
        let parts = Shadowed {
            partitions: &parts,
            site_requeues: true,
        };
        let mut j = job(7, JobStatus::Pending, "gres/gpu:p100=1");
        observe(&mut rows, &[j.clone()], parts, 10.0, 0.0);
        assert_eq!(rows[&7].phase, Phase::Waiting);
        assert_eq!(rows[&7].arrival_s, 1_000.0);
        j.status = JobStatus::Running;
        j.start_time = Some(1_020);
        j.nodes = vec!["n2".into()];
        j.alloc = vec![NodeAlloc {
            node: "n2".into(),
            gpus: vec![("p100".into(), 1)],
        }];
        observe(&mut rows, &[j.clone()], parts, 1_030.0, 0.0);
        assert_eq!(rows[&7].phase, Phase::Running);
        assert_eq!(rows[&7].first_start_s, Some(1_020.0));
        j.status = JobStatus::Completed;
        j.end_time = Some(1_100);
        j.alloc.clear();
        observe(&mut rows, &[j], parts, 1_105.0, 0.0);
        let r = &rows[&7];
        assert_eq!(r.phase, Phase::Finished);
        assert_eq!(r.finished_s, Some(1_100.0));
        assert_eq!(r.final_state.as_deref(), Some("COMPLETED"));
        assert_eq!(
            r.placement,
            Some(vec![("n2".into(), vec![("p100".into(), 1)])]),
            "where it ran is kept"
        );
        // Another partition's job is not shadowed; a vanished one is gone.
        let mut other = job(8, JobStatus::Pending, "gres/gpu=1");
        other.partition = Some("cpu".into());
        let waiting = job(9, JobStatus::Pending, "gres/gpu=1");
        // Nor is a job with a node list, a constraint hadar does not read, a deadline,
        // licenses, or Requeue=0 on a site that requeues by default: the plugin would leave
        // it to Slurm. An exclusion or a constraint hadar reads is honoured.
        let mut chosen = Vec::new();
        for (id, choose) in [
            (
                10,
                (|j: &mut SlurmJob| j.req_nodes = vec!["n1".into()]) as fn(&mut SlurmJob),
            ),
            (11, |j: &mut SlurmJob| j.features = Some("[ib|eth]".into())),
            (12, |j: &mut SlurmJob| j.exc_nodes = vec!["n1".into()]),
            (13, |j: &mut SlurmJob| j.features = Some("ib".into())),
            (14, |j: &mut SlurmJob| j.site.deadline = Some(5_000)),
            (15, |j: &mut SlurmJob| {
                j.site.licenses = Some("matlab:1".into())
            }),
            (16, |j: &mut SlurmJob| j.site.requeue = Some(false)),
            (17, |j: &mut SlurmJob| j.site.requeue = Some(true)),
        ] {
            let mut j = job(id, JobStatus::Pending, "gres/gpu=1");
            choose(&mut j);
            chosen.push(j);
        }
        chosen.extend([other, waiting]);
        observe(&mut rows, &chosen, parts, 1_110.0, 0.0);
        assert!(!rows.contains_key(&8));
        assert!([10, 11, 14, 15, 16].iter().all(|id| !rows.contains_key(id)));
        assert!([12, 13, 17].iter().all(|id| rows.contains_key(id)));
        // Where the site's JobRequeue is 0, Requeue=0 is every job's: shadowed.
        let mut no_requeue_site = BTreeMap::new();
        let no_requeue = chosen.iter().find(|j| j.id == 16).unwrap().clone();
        let site = Shadowed {
            site_requeues: false,
            ..parts
        };
        observe(&mut no_requeue_site, &[no_requeue], site, 1_110.0, 0.0);
        assert!(no_requeue_site.contains_key(&16));
        observe(&mut rows, &[], parts, 1_120.0, 0.0);
        assert_eq!(rows[&9].final_state.as_deref(), Some(GONE));
    }

    #[test]
    fn would_compares_the_plan_with_slurm() {
        let here: NodeGpus = vec![("n1".into(), vec![("v100".into(), 1)])];
        let there: NodeGpus = vec![("n2".into(), vec![("p100".into(), 1)])];
        assert_eq!(would(None, false, Some(&here)), Would::Start);
        assert_eq!(would(None, false, None), Would::Wait);
        assert_eq!(would(Some(&here), true, Some(&here)), Would::Keep);
        assert_eq!(would(Some(&here), true, Some(&there)), Would::Move);
        assert_eq!(would(Some(&here), true, None), Would::Preempt);
        assert!(!Would::Keep.is_action() && Would::Preempt.is_action());
    }
}
