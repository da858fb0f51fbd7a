//! Reconciliation: brings the stored view of every managed job in line with what Slurm
//! reports, as a pure function of the two. Slurm decides which jobs exist, run, wait or have
//! ended; the store contributes what Slurm does not keep (progress, service received).

use crate::progress::Progress;
use crate::spec::JobSpec;
use hadar_slurm::{JobStatus, SlurmJob};
use hadar_store::{JobRow, NodeGpus, Phase};
use std::collections::{BTreeMap, BTreeSet};

/// What reconciliation noticed, for the log and for learning.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A managed job seen for the first time.
    New(u64),
    /// A managed job whose record was refused (it is left to Slurm, held).
    Refused(u64, String),
    /// A job seen running that was not running before.
    Started(u64),
    /// A job that left Slurm's queue for good, with Slurm's final state.
    Finished(u64, String),
    /// A job that was running and is now held again (preempted or requeued).
    Requeued(u64),
    /// A job hadar holds (phase waiting) found released or running although the daemon did
    /// not start it: its owner ran `scontrol release` (or a daemon crashed between releasing
    /// it and noting so; the daemon tells the two apart from its intents). The row is left
    /// waiting; the daemon holds the job again or requeues it held.
    LeftHold {
        /// The job.
        job: u64,
        /// Whether Slurm already runs it.
        running: bool,
    },
    /// A new progress report from a running job, on this placement.
    Progress {
        /// The job.
        job: u64,
        /// Its reported steps/s.
        rate: f64,
        /// Where it runs.
        placement: NodeGpus,
    },
}

/// Whether a Slurm job is managed by hadar: it carries the plugin's record and is not a
/// component of a heterogeneous job.
pub fn is_managed(job: &SlurmJob) -> bool {
    job.admin_comment
        .as_deref()
        .is_some_and(|c| c.starts_with("hadar:v1"))
}

/// The GPUs a running job holds, in Slurm's names.
pub fn allocation(job: &SlurmJob) -> NodeGpus {
    job.alloc
        .iter()
        .filter(|a| !a.gpus.is_empty())
        .map(|a| (a.node.clone(), a.gpus.clone()))
        .collect()
}

/// Whether a job holds GPUs or asks Slurm for some (a managed job the plugin stripped and
/// the daemon has not placed does neither).
fn has_gpus(job: &SlurmJob) -> bool {
    !allocation(job).is_empty()
        || [&job.tres_per_node, &job.tres_per_job]
            .into_iter()
            .flatten()
            .any(|t| hadar_request::gpu::mentions_gpu(t))
}

/// Reconciles `rows` (every job the store knows, by id) with Slurm's jobs at time `now_s`
/// (seconds since the store's epoch `epoch_unix`). `decode` reads a record into a spec;
/// `default_steps` is the length of a job that did not say. `untrusted` are the ids of jobs
/// Slurm lists but whose records could not be trusted (see `hadar_slurm::job::parse_jobs`):
/// they are left as they stand, never taken as vanished (a user whose comment forges another
/// job's record must not make the daemon drop that job).
pub fn reconcile(
    rows: &mut BTreeMap<u64, JobRow>,
    slurm_jobs: &[SlurmJob],
    now_s: f64,
    epoch_unix: f64,
    default_steps: u64,
    decode: &dyn Fn(&str) -> Result<JobSpec, String>,
    untrusted: &BTreeSet<u64>,
) -> Vec<Event> {
    let mut events = Vec::new();
    let by_id: BTreeMap<u64, &SlurmJob> = slurm_jobs.iter().map(|j| (j.id, j)).collect();
    let fresh = adopt(
        rows,
        slurm_jobs,
        now_s,
        epoch_unix,
        default_steps,
        decode,
        &mut events,
    );
    for row in rows
        .values_mut()
        .filter(|r| r.phase != Phase::Finished && !untrusted.contains(&r.id))
    {
        let Some(sj) = by_id.get(&row.id) else {
            row.phase = Phase::Finished;
            row.final_state = Some("vanished".into());
            row.finished_s = Some(now_s);
            row.accounted_s = None;
            events.push(Event::Finished(row.id, "vanished".into()));
            continue;
        };
        reconcile_row(
            row,
            sj,
            fresh.contains(&row.id),
            now_s,
            epoch_unix,
            &mut events,
        );
    }
    events
}

/// Brings one unfinished row in line with its job `sj` as Slurm shows it; `fresh` when the
/// row was adopted this round.
fn reconcile_row(
    row: &mut JobRow,
    sj: &SlurmJob,
    fresh: bool,
    now_s: f64,
    epoch_unix: f64,
    events: &mut Vec<Event>,
) {
    let left_hold = row.phase == Phase::Waiting
        && !(fresh && has_gpus(sj))
        && (sj.status == JobStatus::Running || (sj.status == JobStatus::Pending && !sj.is_held()));
    if left_hold {
        events.push(Event::LeftHold {
            job: row.id,
            running: sj.status == JobStatus::Running,
        });
        return;
    }
    row.restarts = sj.restarts;
    if row.group_id.is_none() {
        row.group_id = sj.group_id;
    }
    if row.bound_types.is_none() {
        // A typed request the store has no record of (a crash right after Slurm took it,
        // a rebuilt database) binds the job all the same: read it back from Slurm.
        let types = sj.requested_gpu_types();
        if !types.is_empty() {
            row.bound_types = Some(types);
        }
    }
    take_progress_report(row, sj, now_s, events);
    follow_status(row, sj, now_s, epoch_unix, events);
}

/// Takes the progress report in the job's comment, if it says something new; a running
/// job's report with a rate is an event, for learning.
fn take_progress_report(row: &mut JobRow, sj: &SlurmJob, now_s: f64, events: &mut Vec<Event>) {
    let report = sj.comment.as_deref().and_then(Progress::decode);
    if let Some(p) = report
        && (p.steps != row.steps_done || row.last_rate != Some(p.rate))
    {
        row.steps_done = p.steps;
        row.last_rate = Some(p.rate);
        row.last_report_s = Some(now_s);
        if sj.status == JobStatus::Running && p.rate > 0.0 {
            events.push(Event::Progress {
                job: row.id,
                rate: p.rate,
                placement: allocation(sj),
            });
        }
    }
}

/// Moves the row's phase to follow the job's Slurm state: finished, running, or waiting
/// (held) or starting (released) while pending.
fn follow_status(
    row: &mut JobRow,
    sj: &SlurmJob,
    now_s: f64,
    epoch_unix: f64,
    events: &mut Vec<Event>,
) {
    let rel = |t: Option<i64>| t.map(|t| t as f64 - epoch_unix);
    match &sj.status {
        s if s.is_terminal() => {
            ran_unseen(row, sj, now_s, epoch_unix);
            account(row, now_s, rel(sj.end_time));
            row.phase = Phase::Finished;
            row.final_state = Some(s.as_str().to_string());
            row.finished_s = Some(rel(sj.end_time).unwrap_or(now_s).min(now_s));
            events.push(Event::Finished(row.id, s.as_str().to_string()));
        }
        JobStatus::Running => seen_running(row, sj, now_s, epoch_unix, events),
        JobStatus::Pending => {
            account(row, now_s, None);
            row.accounted_s = None;
            if sj.is_held() {
                if matches!(
                    row.phase,
                    Phase::Running | Phase::Preempting | Phase::Starting
                ) && sj.restarts > 0
                {
                    events.push(Event::Requeued(row.id));
                }
                row.phase = Phase::Waiting;
                row.placement = None;
            } else if row.phase != Phase::Starting {
                row.phase = Phase::Starting;
            }
        }
        _ => {}
    }
}

/// Rows for the managed jobs the store does not know yet (Slurm's unseen, unfinished ones
/// that decode), with their events; returns their ids.
fn adopt(
    rows: &mut BTreeMap<u64, JobRow>,
    slurm_jobs: &[SlurmJob],
    now_s: f64,
    epoch_unix: f64,
    default_steps: u64,
    decode: &dyn Fn(&str) -> Result<JobSpec, String>,
    events: &mut Vec<Event>,
) -> BTreeSet<u64> {
    let rel = |t: Option<i64>| t.map(|t| t as f64 - epoch_unix);
    let unseen: Vec<&SlurmJob> = slurm_jobs
        .iter()
        .filter(|j| is_managed(j) && !rows.contains_key(&j.id))
        .collect();
    // Rows first seen now: after a lost state database a running managed job is new to the
    // store, and is trusted to have been started by a daemon if it has GPUs (the daemon
    // always gives a job its GPUs before releasing it; the plugin strips them).
    let mut fresh = BTreeSet::new();
    for sj in unseen {
        if sj.status.is_terminal() {
            continue; // ended before the daemon ever saw it: nothing to schedule
        }
        let record = sj.admin_comment.clone().unwrap_or_default();
        if sj.het_job_id.is_some() {
            events.push(Event::Refused(
                sj.id,
                "heterogeneous job components are not scheduled by hadar serve".into(),
            ));
            continue;
        }
        match decode(&record) {
            Ok(spec) => {
                let arrival = rel(sj.submit_time).unwrap_or(now_s);
                let steps = spec.steps.unwrap_or(default_steps) as f64;
                let mut row =
                    JobRow::new(sj.id, sj.name.clone(), record, spec.workers, steps, arrival);
                row.user_id = sj.user_id;
                row.group_id = sj.group_id;
                row.array_task = sj.array.as_ref().map(|a| a.label());
                rows.insert(sj.id, row);
                fresh.insert(sj.id);
                events.push(Event::New(sj.id));
            }
            Err(why) => events.push(Event::Refused(sj.id, why)),
        }
    }
    fresh
}

/// A row brought in line with its job that Slurm shows running.
fn seen_running(
    row: &mut JobRow,
    sj: &SlurmJob,
    now_s: f64,
    epoch_unix: f64,
    events: &mut Vec<Event>,
) {
    let rel = |t: Option<i64>| t.map(|t| t as f64 - epoch_unix);
    let alloc = allocation(sj);
    if row.phase != Phase::Running && row.phase != Phase::Preempting {
        events.push(Event::Started(row.id));
    }
    if row.phase != Phase::Preempting {
        row.phase = Phase::Running;
    }
    if row.first_start_s.is_none() {
        row.first_start_s = Some(rel(sj.start_time).unwrap_or(now_s).min(now_s));
        // A job first seen running (adopted after a lost state database) has started once.
        row.starts = row.starts.max(1);
    }
    if row.accounted_s.is_none() {
        row.accounted_s = Some(rel(sj.start_time).unwrap_or(now_s).min(now_s));
        row.rounds_run += 1;
    }
    // Just after a job restarts (seen after a node failure's requeue) Slurm can
    // list it running without its GPUs for a moment; the placement it was started
    // with stands until Slurm shows one, rather than look like a move.
    let shows_gpus = alloc.iter().any(|(_, g)| g.iter().any(|(_, c)| *c > 0));
    // Slurm 26.05 gives an `--exclusive` job every GPU of its nodes; hadar keeps
    // counting the GPUs it placed it on (the rest of its nodes is fenced off).
    let whole_nodes = crate::exclusive::is_exclusive(&row.record)
        && row
            .placement
            .as_ref()
            .is_some_and(|p| crate::exclusive::covers(&alloc, p));
    if (shows_gpus && !whole_nodes) || row.placement.is_none() {
        row.placement = Some(alloc);
    }
    account(row, now_s, None);
}

/// A row brought in line with a job that ended after a run no round saw (it started and
/// ended between two rounds, or while no daemon ran): Slurm's start time is its first start
/// if it had none, and the run is accounted from there. Whether the daemon started it is
/// the daemon's to tell from its intents; [`reconcile`] does not count it as a start.
fn ran_unseen(row: &mut JobRow, sj: &SlurmJob, now_s: f64, epoch_unix: f64) {
    // A job cancelled while pending has a start time (its end) but never had nodes.
    let Some(start) = sj.start_time.filter(|_| !sj.nodes.is_empty()) else {
        return;
    };
    if row.accounted_s.is_some() {
        return;
    }
    let start = (start as f64 - epoch_unix).min(now_s);
    row.first_start_s.get_or_insert(start);
    row.accounted_s = Some(start);
    row.rounds_run += 1;
}

/// Adds the time since the job was last accounted (up to `until` or `now_s`) to its service.
pub(crate) fn account(row: &mut JobRow, now_s: f64, until: Option<f64>) {
    let Some(from) = row.accounted_s else {
        return;
    };
    let to = until.unwrap_or(now_s).min(now_s);
    let dt = (to - from).max(0.0);
    row.run_s += dt;
    if let Some(p) = &row.placement {
        let gpus: u32 = p.iter().flat_map(|(_, g)| g.iter().map(|(_, c)| *c)).sum();
        row.attained_gpu_s += dt * gpus as f64;
        for t in crate::view::per_type(p).keys() {
            *row.run_s_by_type.entry(t.clone()).or_default() += dt;
        }
    }
    row.accounted_s = Some(to);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hadar_slurm::NodeAlloc;

    /// A job as Slurm shows it, managed (`hadar:v1 gpus=2 steps=100`), held or not.
    pub(crate) fn sj(id: u64, status: JobStatus, held: bool) -> SlurmJob {
        SlurmJob {
            name: format!("j{id}"),
            user_id: Some(0),
            status,
            reason: Some(if held {
                "JobHeldUser".into()
            } else {
                "None".into()
            }),
            priority: Some(if held { 0 } else { 1 }),
            submit_time: Some(1010),
            ..SlurmJob::held_with_record(id, "hadar:v1 gpus=2 steps=100")
        }
    }

    fn decode(_: &str) -> Result<JobSpec, String> {
        Ok(JobSpec {
            restart_s: None,
            workers: 2,
            steps: Some(100),
            job_type: None,
            hints: vec![],
            gpu_types: None,
            fork: false,
            model: None,
            outer: None,
        })
    }

    /// One reconciliation of `rows` with `jobs` at `now_s` (epoch 1000, 50 default steps,
    /// every record decoded by [`decode`], none untrusted).
    fn at(rows: &mut BTreeMap<u64, JobRow>, jobs: &[SlurmJob], now_s: f64) -> Vec<Event> {
        reconcile(rows, jobs, now_s, 1000.0, 50, &decode, &BTreeSet::new())
    }

    #[test]
    fn a_job_goes_through_its_life() {
        let mut rows = BTreeMap::new();
        let mut j = sj(5, JobStatus::Pending, true);
        let ev = at(&mut rows, std::slice::from_ref(&j), 20.0);
        assert_eq!(ev, vec![Event::New(5)]);
        assert_eq!(rows[&5].arrival_s, 10.0);
        assert_eq!(rows[&5].phase, Phase::Waiting);

        // The daemon's start marks the row before Slurm runs the job.
        rows.get_mut(&5).unwrap().phase = Phase::Starting;
        j.status = JobStatus::Running;
        j.start_time = Some(1025);
        j.alloc = vec![NodeAlloc {
            node: "n1".into(),
            gpus: vec![("v100".into(), 2)],
        }];
        j.comment = Some("hadar-progress:v1 steps=10 rate=2".into());
        let ev = at(&mut rows, std::slice::from_ref(&j), 30.0);
        assert!(ev.contains(&Event::Started(5)));
        assert!(
            ev.iter().any(|e| matches!(
                e,
                Event::Progress {
                    job: 5,
                    rate: 2.0,
                    ..
                }
            )),
            "{ev:?}"
        );
        let r = &rows[&5];
        assert_eq!(
            (r.phase, r.first_start_s, r.run_s, r.steps_done),
            (Phase::Running, Some(25.0), 5.0, 10.0)
        );
        assert_eq!(r.attained_gpu_s, 10.0);
        assert_eq!(r.run_s_by_type.get("v100"), Some(&5.0));

        j.status = JobStatus::Completed;
        j.end_time = Some(1040);
        let ev = at(&mut rows, std::slice::from_ref(&j), 45.0);
        assert_eq!(ev, vec![Event::Finished(5, "completed".into())]);
        let r = &rows[&5];
        assert_eq!(
            (r.phase, r.finished_s, r.run_s),
            (Phase::Finished, Some(40.0), 15.0)
        );
    }

    #[test]
    fn a_job_released_by_someone_else_is_reported_and_left_waiting() {
        let mut rows = BTreeMap::new();
        let j = sj(7, JobStatus::Pending, true);
        at(&mut rows, std::slice::from_ref(&j), 1.0);
        // Its owner runs `scontrol release`: pending, not held, and without GPUs.
        let released = sj(7, JobStatus::Pending, false);
        let ev = at(&mut rows, &[released], 2.0);
        assert_eq!(
            ev,
            vec![Event::LeftHold {
                job: 7,
                running: false
            }]
        );
        assert_eq!(rows[&7].phase, Phase::Waiting);
        // Slurm started it before the daemon's round: reported as running, still not
        // accounted as a run of hadar's.
        let mut running = sj(7, JobStatus::Running, false);
        running.tres_per_node = Some("gres:gpu:v100:4".into());
        let ev = at(&mut rows, &[running.clone()], 3.0);
        assert_eq!(
            ev,
            vec![Event::LeftHold {
                job: 7,
                running: true
            }]
        );
        assert_eq!(
            (rows[&7].phase, rows[&7].starts, rows[&7].first_start_s),
            (Phase::Waiting, 0, None)
        );
        // Seen for the first time released and without GPUs (released before any round):
        // also reported. Seen first running with GPUs (the store was lost): trusted.
        let mut fresh = BTreeMap::new();
        let ev = at(&mut fresh, &[sj(8, JobStatus::Pending, false)], 1.0);
        assert_eq!(
            ev,
            vec![
                Event::New(8),
                Event::LeftHold {
                    job: 8,
                    running: false
                }
            ]
        );
        let mut fresh = BTreeMap::new();
        running.alloc = vec![NodeAlloc {
            node: "n1".into(),
            gpus: vec![("v100".into(), 4)],
        }];
        let ev = at(&mut fresh, &[running], 4.0);
        assert_eq!(ev, vec![Event::New(7), Event::Started(7)]);
        assert_eq!((fresh[&7].phase, fresh[&7].starts), (Phase::Running, 1));
    }

    #[test]
    fn a_job_whose_record_is_untrusted_is_not_taken_as_vanished() {
        let mut rows = BTreeMap::new();
        let j = sj(9, JobStatus::Pending, true);
        at(&mut rows, &[j], 1.0);
        // Another user's comment forged a second record with id 9: Slurm's listing of job 9
        // was refused, so the job is missing from the trusted list.
        let ev = reconcile(
            &mut rows,
            &[],
            2.0,
            1000.0,
            50,
            &decode,
            &BTreeSet::from([9]),
        );
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(rows[&9].phase, Phase::Waiting);
        let ev = at(&mut rows, &[], 3.0);
        assert_eq!(ev, vec![Event::Finished(9, "vanished".into())]);
    }

    #[test]
    fn requeued_jobs_wait_and_vanished_jobs_finish() {
        let mut rows = BTreeMap::new();
        let mut j = sj(6, JobStatus::Running, false);
        j.alloc = vec![NodeAlloc {
            node: "n4".into(),
            gpus: vec![("v100".into(), 1), ("k80".into(), 1)],
        }];
        at(&mut rows, std::slice::from_ref(&j), 5.0);
        assert_eq!(rows[&6].phase, Phase::Running);
        let mut held = sj(6, JobStatus::Pending, true);
        held.restarts = 1;
        let ev = at(&mut rows, &[held], 9.0);
        assert_eq!(ev, vec![Event::Requeued(6)]);
        assert_eq!(
            (rows[&6].phase, rows[&6].placement.clone(), rows[&6].run_s),
            (Phase::Waiting, None, 4.0)
        );
        let ev = at(&mut rows, &[], 12.0);
        assert_eq!(ev, vec![Event::Finished(6, "vanished".into())]);
    }

    #[test]
    fn unmanaged_and_refused_jobs_are_not_adopted() {
        let mut rows = BTreeMap::new();
        let mut plain = sj(7, JobStatus::Pending, false);
        plain.admin_comment = None;
        let bad = sj(8, JobStatus::Pending, true);
        let ev = reconcile(
            &mut rows,
            &[plain, bad],
            1.0,
            1000.0,
            50,
            &|_| Err("broken".into()),
            &BTreeSet::new(),
        );
        assert_eq!(ev, vec![Event::Refused(8, "broken".into())]);
        assert!(rows.is_empty());
    }

    #[test]
    fn types_slurm_already_holds_a_job_to_are_read_back() {
        let mut rows = BTreeMap::new();
        let mut typed = sj(4, JobStatus::Pending, true);
        typed.tres_per_node = Some("gres:gpu:v100:2,gres:gpu:k80:2".into());
        let mut typeless = sj(5, JobStatus::Pending, true);
        typeless.tres_per_node = Some("gres:gpu:2".into());
        reconcile(
            &mut rows,
            &[typed, typeless],
            0.0,
            1000.0,
            10,
            &decode,
            &BTreeSet::new(),
        );
        assert_eq!(
            rows[&4].bound_types,
            Some(vec!["k80".to_string(), "v100".to_string()])
        );
        assert_eq!(rows[&5].bound_types, None);
    }

    #[test]
    fn a_restarted_job_listed_without_gpus_keeps_its_placement() {
        let mut rows = BTreeMap::new();
        let mut j = sj(6, JobStatus::Pending, true);
        at(&mut rows, std::slice::from_ref(&j), 20.0);
        let started = vec![("n4".to_string(), vec![("v100".to_string(), 2)])];
        rows.get_mut(&6).unwrap().placement = Some(started.clone());
        rows.get_mut(&6).unwrap().phase = Phase::Starting;
        j.status = JobStatus::Running;
        j.alloc = vec![NodeAlloc {
            node: "n4".into(),
            gpus: vec![],
        }];
        at(&mut rows, std::slice::from_ref(&j), 30.0);
        assert_eq!(rows[&6].phase, Phase::Running);
        assert_eq!(rows[&6].placement, Some(started));
    }
}
