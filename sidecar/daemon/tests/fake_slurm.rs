//! The daemon's round against an in-memory stand-in for Slurm that follows the rules the
//! real one showed (a released job with a placement starts on exactly those GPUs; a requeue
//! makes a running job pending and held again). The real-cluster tests are in the
//! workspace's `tests/serve_slurm.rs`; these check the daemon's logic in milliseconds.

use hadar_daemon::action_log::{ActionKind, ActionOutcome};
use hadar_daemon::daemon::SlurmApi;
use hadar_daemon::spec::JobSpec;
use hadar_daemon::{Daemon, DaemonConfig};
use hadar_slurm::{GpuSpec, JobStatus, NodeAlloc, NodeInfo, NodeState, SlurmError, SlurmJob};
use hadar_store::{IntentKind, Outcome, Phase, Store};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

#[derive(Default)]
struct State {
    nodes: Vec<NodeInfo>,
    jobs: BTreeMap<u64, SlurmJob>,
    placements: BTreeMap<u64, GpuSpec>,
    /// Jobs whose begin time is still ahead (`scontrol update StartTime=...`).
    begin_later: std::collections::BTreeSet<u64>,
    /// Answers the next job listings give instead of the jobs, as Slurm's JSON text.
    bad_answers: Vec<String>,
    /// The cluster's licenses (`scontrol show licenses`).
    licenses: Vec<hadar_slurm::license::License>,
    /// The partitions (`scontrol show partition`); none listed: none judged.
    partitions: Vec<hadar_slurm::site::PartitionFigures>,
    /// Whether an update of a pending job's GPU types replaces them (24.11 on) rather than
    /// adding to them for good (22.05).
    retypes: bool,
    log: Vec<String>,
}

#[derive(Clone, Default)]
struct FakeSlurm(Rc<RefCell<State>>);

fn node(name: &str, gpus: &[(&str, u32)]) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        state: NodeState::Idle,
        gpus: gpus.iter().map(|(t, c)| (t.to_string(), *c)).collect(),
        partitions: vec!["gpu".into()],
        features: Vec::new(),
        free: Default::default(),
    }
}

impl FakeSlurm {
    fn testbed() -> FakeSlurm {
        let f = FakeSlurm::default();
        f.0.borrow_mut().nodes = vec![
            node("n1", &[("v100", 4)]),
            node("n2", &[("p100", 4)]),
            node("n3", &[("k80", 4)]),
            node("n4", &[("v100", 2), ("k80", 2)]),
        ];
        f
    }

    fn submit(&self, id: u64, record: &str) {
        let job = SlurmJob::held_with_record(id, record);
        self.0.borrow_mut().jobs.insert(id, job);
    }

    /// What slurmctld's scheduler would do: start released jobs on their placements.
    fn schedule(&self) {
        let mut s = self.0.borrow_mut();
        let ids: Vec<u64> = s
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Pending && !j.is_held())
            .map(|j| j.id)
            .filter(|id| !s.begin_later.contains(id))
            .collect();
        for id in ids {
            let spec = s
                .placements
                .get(&id)
                .cloned()
                .expect("released without a placement");
            let j = s.jobs.get_mut(&id).unwrap();
            j.status = JobStatus::Running;
            j.start_time = Some(1_000_010);
            j.alloc = spec
                .nodes
                .iter()
                .map(|(n, g)| NodeAlloc {
                    node: n.clone(),
                    gpus: g.clone(),
                })
                .collect();
        }
    }

    /// What `scontrol update JobId=ID StartTime=now+1day` does: the job, once released,
    /// waits with `Reason=BeginTime`.
    fn begin_tomorrow(&self, id: u64) {
        let mut s = self.0.borrow_mut();
        s.begin_later.insert(id);
        let j = s.jobs.get_mut(&id).unwrap();
        if !j.is_held() {
            j.reason = Some("BeginTime".into());
        }
    }

    fn finish(&self, id: u64) {
        let mut s = self.0.borrow_mut();
        let j = s.jobs.get_mut(&id).unwrap();
        j.status = JobStatus::Completed;
        j.end_time = Some(1_000_020);
        j.alloc.clear();
    }

    /// A running job ends at Unix time `t`.
    fn finish_at(&self, id: u64, t: i64) {
        self.finish(id);
        self.0.borrow_mut().jobs.get_mut(&id).unwrap().end_time = Some(t);
    }

    /// Slurm forgets an ended job (MinJobAge).
    fn forget(&self, id: u64) {
        self.0.borrow_mut().jobs.remove(&id);
    }

    fn set_node_state(&self, name: &str, state: NodeState) {
        let mut s = self.0.borrow_mut();
        s.nodes.iter_mut().find(|n| n.name == name).unwrap().state = state;
    }

    fn status(&self, id: u64) -> JobStatus {
        self.0.borrow().jobs[&id].status.clone()
    }

    fn alloc(&self, id: u64) -> Vec<NodeAlloc> {
        self.0.borrow().jobs[&id].alloc.clone()
    }

    fn log(&self) -> Vec<String> {
        self.0.borrow().log.clone()
    }
}

impl SlurmApi for FakeSlurm {
    fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        Ok(self.0.borrow().nodes.clone())
    }
    fn jobs(&self) -> Result<(Vec<SlurmJob>, hadar_slurm::job::Refused), SlurmError> {
        if let Some(text) = self.0.borrow_mut().bad_answers.pop() {
            return Ok((hadar_slurm::json::parse_jobs(&text)?, vec![]));
        }
        Ok((self.0.borrow().jobs.values().cloned().collect(), vec![]))
    }
    fn job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError> {
        Ok(self.0.borrow().jobs.get(&id).cloned())
    }
    fn set_placement(&self, id: u64, spec: &GpuSpec) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("place {id}"));
        s.placements.insert(id, spec.clone());
        // As `scontrol update` shows it: the nodes required and a GPU request.
        let j = s.jobs.get_mut(&id).unwrap();
        j.req_nodes = spec.nodes.iter().map(|(n, _)| n.clone()).collect();
        j.tres_per_node = Some(format!("gres/gpu:{}", spec.per_node_counts()[0]));
        Ok(())
    }
    fn start_now(&self, id: u64) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("start-now {id}"));
        s.begin_later.remove(&id);
        let j = s.jobs.get_mut(&id).unwrap();
        if j.reason.as_deref() == Some("BeginTime") {
            j.reason = Some("None".into());
        }
        Ok(())
    }
    fn release(&self, id: u64) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("release {id}"));
        let later = s.begin_later.contains(&id);
        let j = s.jobs.get_mut(&id).unwrap();
        j.priority = Some(1);
        j.reason = Some(if later { "BeginTime" } else { "None" }.into());
        Ok(())
    }
    fn hold(&self, id: u64) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("hold {id}"));
        let j = s.jobs.get_mut(&id).unwrap();
        j.priority = Some(0);
        j.reason = Some("JobHeldUser".into());
        Ok(())
    }
    fn signal(&self, id: u64, signal: &str) -> Result<(), SlurmError> {
        self.0
            .borrow_mut()
            .log
            .push(format!("signal {id} {signal}"));
        Ok(())
    }
    fn set_admin_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("admin-comment {id}"));
        s.jobs.get_mut(&id).unwrap().admin_comment = Some(text.to_string());
        Ok(())
    }
    fn clear_gpu_request(&self, id: u64) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("clear-gpus {id}"));
        let j = s.jobs.get_mut(&id).unwrap();
        j.tres_per_node = None;
        j.tres_per_job = None;
        Ok(())
    }
    fn retypes_pending_jobs(&self) -> bool {
        self.0.borrow().retypes
    }
    fn site_figures(&self) -> Result<hadar_slurm::site::SiteFigures, SlurmError> {
        Ok(hadar_slurm::site::SiteFigures {
            licenses: self.0.borrow().licenses.clone(),
            partitions: self.0.borrow().partitions.clone(),
            ..Default::default()
        })
    }
    fn requeue_hold(&self, id: u64) -> Result<(), SlurmError> {
        let mut s = self.0.borrow_mut();
        s.log.push(format!("requeuehold {id}"));
        let j = s.jobs.get_mut(&id).unwrap();
        j.status = JobStatus::Pending;
        j.priority = Some(0);
        j.reason = Some("JobHeldUser".into());
        j.restarts += 1;
        j.alloc.clear();
        Ok(())
    }
}

fn config() -> DaemonConfig {
    DaemonConfig::parse(
        "test.toml",
        "[sidecar]\nround_seconds = 1\npreempt_grace_seconds = 0\n",
    )
    .unwrap()
}

fn daemon(slurm: &FakeSlurm, store: Store) -> Daemon<FakeSlurm> {
    daemon_with(slurm, store, config())
}

fn daemon_with(slurm: &FakeSlurm, store: Store, config: DaemonConfig) -> Daemon<FakeSlurm> {
    Daemon::new(
        slurm.clone(),
        store,
        config,
        Box::new(JobSpec::from_record),
        1_000_000.0,
    )
    .unwrap()
}

fn gpus_of(alloc: &[NodeAlloc]) -> u32 {
    alloc
        .iter()
        .flat_map(|a| a.gpus.iter().map(|(_, c)| *c))
        .sum()
}

#[test]
fn held_jobs_are_placed_started_and_then_left_alone() {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=2 type=resnet50-b64 steps=1000");
    slurm.submit(2, "hadar:v1 gpus=4 type=transformer-b64 steps=1000");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let r = d.round(1_000_001.0).unwrap();
    assert_eq!(
        r.actions
            .iter()
            .filter(|a| a.action == ActionKind::Start
                && a.outcome == ActionOutcome::Intent(Outcome::Ok))
            .count(),
        2,
        "{r:?}"
    );
    slurm.schedule();
    assert_eq!(gpus_of(&slurm.alloc(1)), 2);
    assert_eq!(gpus_of(&slurm.alloc(2)), 4);
    let r = d.round(1_000_002.0).unwrap();
    assert!(
        r.actions.is_empty(),
        "a plan equal to what runs needs no action: {r:?}"
    );
    let rows = d.store().jobs().unwrap();
    assert!(
        rows.iter()
            .all(|j| j.phase == Phase::Running && j.starts == 1)
    );
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(dec.runs && dec.text.starts_with("runs on "), "{}", dec.text);

    slurm.finish(1);
    d.round(1_000_003.0).unwrap();
    let j = d.store().job(1).unwrap().unwrap();
    assert_eq!(
        (j.phase, j.final_state.as_deref()),
        (Phase::Finished, Some("completed"))
    );
}

/// A held 2-GPU job 1 and a folder for the state database (`state.db`).
fn one_held_job() -> (tempfile::TempDir, FakeSlurm) {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=2 steps=1000");
    (tempfile::tempdir().unwrap(), slurm)
}

/// A 2-GPU job 1 that a daemon (its store in `state.db` of the returned folder) started in
/// one round before it stopped.
fn one_job_started_by_a_daemon_that_then_stops() -> (tempfile::TempDir, FakeSlurm) {
    let (dir, slurm) = one_held_job();
    let mut d = daemon(&slurm, Store::open(&dir.path().join("state.db")).unwrap());
    d.round(1_000_001.0).unwrap();
    (dir, slurm)
}

#[test]
fn a_restarted_daemon_never_starts_a_job_twice() {
    let (dir, slurm) = one_job_started_by_a_daemon_that_then_stops();
    let path = dir.path().join("state.db");
    // A crash left a start intent open, for a job that Slurm shows released already.
    {
        let mut s = Store::open(&path).unwrap();
        s.write(|w| w.add_intent(9, 1, IntentKind::Start, None, 5.0))
            .unwrap();
    }
    let mut d = daemon(&slurm, Store::open(&path).unwrap());
    // Left open until the daemon leads (a standby must not touch the leader's intents).
    assert_eq!(d.store().open_intents().unwrap().len(), 1);
    let r = d.round(1_000_002.0).unwrap();
    let open = d.store().open_intents().unwrap();
    assert!(
        open.is_empty(),
        "open intents are closed when the daemon starts leading: {open:?}"
    );
    assert!(
        d.store()
            .all_intents()
            .unwrap()
            .iter()
            .any(|i| i.outcome == Some(Outcome::Interrupted))
    );
    assert!(r.actions.is_empty(), "{r:?}");
    slurm.schedule();
    d.round(1_000_003.0).unwrap();
    assert_eq!(
        slurm
            .log()
            .iter()
            .filter(|l| l.starts_with("release"))
            .count(),
        1,
        "{:?}",
        slurm.log()
    );
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Running);
}

/// The crash test's case: a daemon killed between giving a job its placement and making it
/// eligible, then the job released by its owner with a begin time a day ahead. The next run
/// takes the interrupted start as done; the job must not wait a day for its planned GPUs.
#[test]
fn a_started_job_left_waiting_for_a_begin_time_is_made_eligible() {
    let (dir, slurm) = one_job_started_by_a_daemon_that_then_stops();
    let path = dir.path().join("state.db");
    // Undo what the start did after its placement and leave the start intent open.
    {
        let mut s = slurm.0.borrow_mut();
        let j = s.jobs.get_mut(&1).unwrap();
        j.priority = Some(0);
        j.reason = Some("JobHeldUser".into());
    }
    {
        let mut s = Store::open(&path).unwrap();
        let i = s.last_intent(1).unwrap().unwrap();
        s.write(|w| w.add_intent(1, 1, IntentKind::Start, i.placement.as_ref(), 5.0))
            .unwrap();
    }
    let (mut d, log) = released_for_tomorrow_then_a_round(&slurm, &path, 1_000_005.0);
    assert_eq!(
        log,
        ["start-now 1".to_string()],
        "made eligible, not placed or released again"
    );
    slurm.schedule();
    assert_eq!(slurm.status(1), JobStatus::Running);
    assert_eq!(gpus_of(&slurm.alloc(1)), 2);
    d.round(1_000_006.0).unwrap();
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Running);
}

/// The CI failure of stop 26: a daemon killed between releasing a job and noting the start,
/// and the job run to its end by Slurm before the next daemon's first round. That round
/// finds it held in the store and ended in Slurm: it ran once, started by hadar, from the
/// time Slurm started it.
#[test]
fn a_job_started_by_a_killed_daemon_that_ends_before_the_next_round_counts_one_start() {
    let (dir, slurm) = one_job_started_by_a_daemon_that_then_stops();
    let path = dir.path().join("state.db");
    {
        // The store as the kill left it: the row still waiting, the start intent open.
        let mut s = Store::open(&path).unwrap();
        let i = s.last_intent(1).unwrap().unwrap();
        let mut row = s.job(1).unwrap().unwrap();
        (row.phase, row.placement, row.starts) = (Phase::Waiting, None, 0);
        s.write(|w| {
            w.put_job(&row)?;
            w.add_intent(1, 1, IntentKind::Start, i.placement.as_ref(), 5.0)
        })
        .unwrap();
    }
    slurm.schedule();
    slurm.0.borrow_mut().jobs.get_mut(&1).unwrap().nodes = vec!["n1".into()];
    slurm.finish_at(1, 1_000_016);
    let mut d = daemon(&slurm, Store::open(&path).unwrap());
    d.round(1_000_018.0).unwrap();
    let j = d.store().job(1).unwrap().unwrap();
    assert_eq!(
        (j.phase, j.final_state.as_deref(), j.starts),
        (Phase::Finished, Some("completed"), 1)
    );
    assert_eq!((j.first_start_s, j.finished_s), (Some(10.0), Some(16.0)));
    assert_eq!(j.run_s, 6.0);
    assert!(
        !slurm
            .log()
            .iter()
            .any(|l| l.starts_with("hold") || l.starts_with("requeue")),
        "an ended job is left alone: {:?}",
        slurm.log()
    );
}

/// A job its owner released (the daemon never started it) that Slurm ran to its end before
/// a round saw it: it ran, but hadar did not start it.
#[test]
fn a_job_released_by_its_owner_that_ends_unseen_is_not_a_start_of_hadars() {
    let (dir, slurm) = one_held_job();
    let path = dir.path().join("state.db");
    let mut d = daemon(&slurm, Store::open(&path).unwrap());
    // No GPU free for it: the round leaves it held.
    slurm.0.borrow_mut().nodes.clear();
    d.round(1_000_001.0).unwrap();
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Waiting);
    {
        let mut s = slurm.0.borrow_mut();
        let j = s.jobs.get_mut(&1).unwrap();
        (j.status, j.priority, j.start_time) = (JobStatus::Running, Some(1), Some(1_000_003));
        j.nodes = vec!["n2".into()];
    }
    slurm.finish_at(1, 1_000_007);
    d.round(1_000_009.0).unwrap();
    let j = d.store().job(1).unwrap().unwrap();
    assert_eq!((j.phase, j.starts), (Phase::Finished, 0));
    assert_eq!((j.first_start_s, j.run_s), (Some(3.0), 4.0));
}

/// Job 1 released by its owner into a begin time a day ahead, then one round of a daemon
/// started on `path` at `now`: the daemon, and what it asked of Slurm.
fn released_for_tomorrow_then_a_round(
    slurm: &FakeSlurm,
    path: &std::path::Path,
    now: f64,
) -> (Daemon<FakeSlurm>, Vec<String>) {
    slurm.begin_tomorrow(1);
    slurm.release(1).unwrap();
    let mut d = daemon(slurm, Store::open(path).unwrap());
    let log_before = slurm.log().len();
    d.round(now).unwrap();
    let log = slurm.log()[log_before..].to_vec();
    (d, log)
}

/// Checks a round's Slurm log for job 1 released by someone else: held again first, and made
/// eligible (if at all) only after a placement of the daemon's.
fn held_again_then_placed(log: &[String]) {
    assert_eq!(log.first().map(String::as_str), Some("hold 1"), "{log:?}");
    let first = |what: &str| log.iter().position(|l| l == what);
    if let Some(eligible) = first("start-now 1") {
        assert!(
            first("place 1").is_some_and(|p| p < eligible),
            "made eligible only after a placement: {log:?}"
        );
    }
}

/// The crash test's other case: a daemon killed after writing a start's intent but before
/// giving the job its placement, then the job released by its owner with a begin time a day
/// ahead. The release was not the daemon's: the job has no GPU request, and made eligible it
/// would run with none. It is held again, then started on a placement of its own.
#[test]
fn a_job_released_after_a_start_cut_short_before_its_placement_is_held_again() {
    let (dir, slurm) = one_held_job();
    let path = dir.path().join("state.db");
    {
        let mut s = Store::open(&path).unwrap();
        let placement = vec![("n1".to_string(), vec![("v100".to_string(), 2)])];
        s.write(|w| w.add_intent(1, 1, IntentKind::Start, Some(&placement), 5.0))
            .unwrap();
    }
    let (mut d, log) = released_for_tomorrow_then_a_round(&slurm, &path, 1_000_005.0);
    held_again_then_placed(&log);
    slurm.schedule();
    d.round(1_000_006.0).unwrap();
    slurm.schedule();
    assert_eq!(slurm.status(1), JobStatus::Running);
    assert_eq!(gpus_of(&slurm.alloc(1)), 2);
}

/// The crash test's hold step after a preemption: a daemon killed right after requeueing a
/// running job held, then the job released by its owner with a begin time a day ahead. The
/// next run must hold it again, not take it as started on its last placement; so must the
/// run after one killed while holding it again (its last intent then a hold).
#[test]
fn a_job_released_after_a_preemption_cut_short_is_held_again() {
    for last in ["preempt", "hold"] {
        let (dir, slurm) = one_job_started_by_a_daemon_that_then_stops();
        let path = dir.path().join("state.db");
        slurm.schedule();
        {
            let mut d = daemon(&slurm, Store::open(&path).unwrap());
            d.round(1_000_002.0).unwrap();
            assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Running);
        }
        {
            let mut s = Store::open(&path).unwrap();
            s.write(|w| w.add_intent(2, 1, IntentKind::Preempt, None, 3.0))
                .unwrap();
            if last == "hold" {
                s.write(|w| w.add_intent(3, 1, IntentKind::Hold, None, 4.0))
                    .unwrap();
            }
        }
        slurm.requeue_hold(1).unwrap();
        let (_, log) = released_for_tomorrow_then_a_round(&slurm, &path, 1_000_010.0);
        held_again_then_placed(&log);
    }
}

#[test]
fn jobs_on_a_drained_node_are_checkpointed_requeued_and_placed_again() {
    let slurm = FakeSlurm::testbed();
    // Only K80s allowed, so it lands on n3 or n4; fill n4's K80s first with another job.
    slurm.submit(1, "hadar:v1 gpus=2 steps=1000 gpu-types=k80");
    slurm.submit(2, "hadar:v1 gpus=4 steps=1000 gpu-types=k80");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    d.round(1_000_001.0).unwrap();
    slurm.schedule();
    d.round(1_000_002.0).unwrap();
    let on_n3 = [1, 2]
        .into_iter()
        .find(|id| slurm.alloc(*id).first().is_some_and(|a| a.node == "n3"))
        .expect("a job on n3");
    let on_n3_gpus = gpus_of(&slurm.alloc(on_n3));
    slurm.set_node_state("n3", NodeState::Draining);
    let r = d.round(1_000_003.0).unwrap();
    assert!(
        r.actions.iter().any(|a| a.job == on_n3
            && a.action == ActionKind::Preempt
            && a.outcome == ActionOutcome::Intent(Outcome::Ok)),
        "{r:?}"
    );
    let log = slurm.log();
    let sig = log
        .iter()
        .position(|l| *l == format!("signal {on_n3} USR1"))
        .expect("checkpoint signal");
    let rq = log
        .iter()
        .position(|l| *l == format!("requeuehold {on_n3}"))
        .expect("requeue");
    assert!(sig < rq, "signal before requeue: {log:?}");
    assert_eq!(slurm.status(on_n3), JobStatus::Pending);
    let row = d.store().job(on_n3).unwrap().unwrap();
    assert_eq!((row.phase, row.preemptions), (Phase::Waiting, 1));
    // Without n3 only n4's two K80s remain: a 2-GPU job can be placed there again once free.
    if on_n3_gpus == 2 {
        if slurm.status(3 - on_n3) == JobStatus::Running {
            slurm.finish(3 - on_n3);
        }
        let r = d.round(1_000_004.0).unwrap();
        assert!(
            r.actions
                .iter()
                .any(|a| a.job == on_n3 && a.action == ActionKind::Start),
            "{r:?}"
        );
        slurm.schedule();
        assert_eq!(slurm.alloc(on_n3)[0].node, "n4");
    }
}

/// Job 1 started (two rounds at a `grace` s preemption grace time), then its node drained:
/// the next round preempts it.
fn a_job_whose_node_drains(grace: f64) -> (FakeSlurm, Daemon<FakeSlurm>) {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=2 steps=1000 gpu-types=k80");
    let config = DaemonConfig::parse(
        "test.toml",
        &format!("[sidecar]\nround_seconds = 1\npreempt_grace_seconds = {grace}\n"),
    )
    .unwrap();
    let mut d = daemon_with(&slurm, Store::in_memory().unwrap(), config);
    d.round(1_000_001.0).unwrap();
    slurm.schedule();
    d.round(1_000_002.0).unwrap();
    let node = slurm.alloc(1)[0].node.clone();
    slurm.set_node_state(&node, NodeState::Draining);
    (slurm, d)
}

#[test]
fn a_preempted_job_keeps_its_gpus_through_its_grace_time_and_no_round_waits_for_it() {
    let (slurm, mut d) = a_job_whose_node_drains(1.5);
    let signalled = std::time::Instant::now();
    let r = d.round(1_000_003.0).unwrap();
    assert!(
        signalled.elapsed().as_secs_f64() < 1.5,
        "the round returned before the grace time ended"
    );
    let kinds: Vec<ActionKind> = r
        .actions
        .iter()
        .filter(|a| a.job == 1)
        .map(|a| a.action)
        .collect();
    assert_eq!(kinds, vec![ActionKind::Checkpoint], "{r:?}");
    assert!(slurm.log().contains(&"signal 1 USR1".to_string()));
    assert!(!slurm.log().iter().any(|l| l.starts_with("requeuehold")));
    assert_eq!(slurm.status(1), JobStatus::Running);
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Preempting);
    assert_eq!(
        d.store().open_intents().unwrap().len(),
        1,
        "the preemption stays open"
    );
    // A round inside the grace time neither signals again nor requeues.
    let r = d.round(1_000_004.0).unwrap();
    assert!(r.actions.iter().all(|a| a.job != 1), "{r:?}");
    assert_eq!(
        slurm
            .log()
            .iter()
            .filter(|l| l.starts_with("signal 1"))
            .count(),
        1
    );
    std::thread::sleep(std::time::Duration::from_secs_f64(1.6).saturating_sub(signalled.elapsed()));
    let r = d.round(1_000_005.0).unwrap();
    assert!(
        r.actions.iter().any(|a| a.job == 1
            && a.action == ActionKind::Preempt
            && a.outcome == ActionOutcome::Intent(Outcome::Ok)),
        "{r:?}"
    );
    assert_eq!(slurm.status(1), JobStatus::Pending);
    let row = d.store().job(1).unwrap().unwrap();
    assert_eq!((row.phase, row.preemptions), (Phase::Waiting, 1));
    assert!(d.store().open_intents().unwrap().is_empty());
}

#[test]
fn a_job_that_ends_during_its_grace_time_closes_its_preemption() {
    let (slurm, mut d) = a_job_whose_node_drains(60.0);
    d.round(1_000_003.0).unwrap();
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Preempting);
    slurm.finish(1);
    d.round(1_000_004.0).unwrap();
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Finished);
    assert!(d.store().open_intents().unwrap().is_empty());
    let i = d.store().last_intent(1).unwrap().unwrap();
    assert_eq!(
        i.outcome,
        Some(Outcome::Skipped("no longer running".into()))
    );
    assert!(!slurm.log().iter().any(|l| l.starts_with("requeuehold")));
}

#[test]
fn unmanaged_jobs_keep_their_gpus_out_of_the_plan() {
    let slurm = FakeSlurm::testbed();
    {
        // A job Slurm runs on its own holds all four V100s of n1.
        let mut s = slurm.0.borrow_mut();
        let mut j = SlurmJob {
            admin_comment: None,
            ..dummy(50)
        };
        j.status = JobStatus::Running;
        j.alloc = vec![NodeAlloc {
            node: "n1".into(),
            gpus: vec![("v100".into(), 4)],
        }];
        s.jobs.insert(50, j);
    }
    slurm.submit(1, "hadar:v1 gpus=4 steps=1000 gpu-types=v100");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let r = d.round(1_000_001.0).unwrap();
    assert!(
        r.actions.is_empty(),
        "no four free V100s on one node or across n1+n4: {r:?}"
    );
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(!dec.runs && dec.text.starts_with("waits"), "{}", dec.text);
}

fn started(r: &hadar_daemon::RoundReport) -> Vec<u64> {
    r.actions
        .iter()
        .filter(|a| {
            a.action == ActionKind::Start && a.outcome == ActionOutcome::Intent(Outcome::Ok)
        })
        .map(|a| a.job)
        .collect()
}

#[test]
fn a_job_that_never_ran_waits_for_its_fast_type_unless_a_slow_one_ends_first() {
    // Three 4-GPU jobs of 1000 steps: 25 s on n1's four V100s. Job 2 would take 250 s on
    // P100 or K80, so it waits for job 1's V100s (free in 25 s, taken at the next round, so
    // it ends in 51 s); job 3 runs at 8 steps/s per P100 (31 s), which ends before it could
    // get the V100s after job 2 (in 77 s).
    let submit = |slurm: &FakeSlurm| {
        slurm.submit(
            1,
            "hadar:v1 gpus=4 steps=1000 throughput=v100:10,p100:1,k80:1",
        );
        slurm.submit(
            2,
            "hadar:v1 gpus=4 steps=1000 throughput=v100:10,p100:1,k80:1",
        );
        slurm.submit(
            3,
            "hadar:v1 gpus=4 steps=1000 throughput=v100:10,p100:8,k80:1",
        );
    };
    let slurm = FakeSlurm::testbed();
    submit(&slurm);
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let r = d.round(1_000_001.0).unwrap();
    assert_eq!(started(&r), vec![1, 3], "{r:?}");
    slurm.schedule();
    assert_eq!(slurm.alloc(1)[0].gpus, vec![("v100".to_string(), 4)]);
    assert_eq!(slurm.alloc(3)[0].gpus, vec![("p100".to_string(), 4)]);
    let dec = d.store().decision(2).unwrap().unwrap();
    assert!(
        !dec.runs
            && dec.text.starts_with("waits for v100: ")
            && dec
                .text
                .contains("start there in about 26 s and end in about 51 s"),
        "{}",
        dec.text
    );
    assert_eq!(d.store().job(2).unwrap().unwrap().bound_types, None);
    // Once job 1 ends, job 2 gets the V100s.
    slurm.finish(1);
    let r = d.round(1_000_026.0).unwrap();
    assert_eq!(started(&r), vec![2], "{r:?}");
    slurm.schedule();
    assert_eq!(slurm.alloc(2)[0].node, "n1");

    // Without the look-ahead, Hadar's work conservation starts job 2 at once with slow GPUs
    // (at their pace), whose types Slurm keeps for its whole run.
    let slurm = FakeSlurm::testbed();
    submit(&slurm);
    let off = DaemonConfig::parse(
        "test.toml",
        "[sidecar]\nround_seconds = 1\npreempt_grace_seconds = 0\nearliest_finish_types = false\n",
    )
    .unwrap();
    let mut d = daemon_with(&slurm, Store::in_memory().unwrap(), off);
    let r = d.round(1_000_001.0).unwrap();
    assert!(started(&r).contains(&2), "{r:?}");
    slurm.schedule();
    assert!(
        slurm.alloc(2)[0].gpus.iter().any(|(t, _)| t != "v100"),
        "{:?}",
        slurm.alloc(2)
    );
}

#[test]
fn a_started_job_keeps_its_type_when_a_faster_one_frees_up() {
    // Job 1 takes n1's four V100s, job 3 n4's two; job 2 ends sooner on two P100s now
    // (62.5 s) than after job 1 (77 s). When job 1 ends, the V100s would make job 2 faster,
    // and with no restart cost Hadar's plan would move it there; the look-ahead, which
    // counted on it staying, keeps it.
    let run = || {
        let slurm = FakeSlurm::testbed();
        slurm.submit(
            1,
            "hadar:v1 gpus=4 steps=1000 throughput=v100:10,p100:1,k80:1",
        );
        slurm.submit(
            2,
            "hadar:v1 gpus=2 steps=1000 throughput=v100:10,p100:8,k80:1",
        );
        slurm.submit(3, "hadar:v1 gpus=2 steps=1000 gpu-types=v100");
        let config = DaemonConfig::parse(
            "test.toml",
            "[sidecar]\nround_seconds = 1\npreempt_grace_seconds = 0\nrestart_seconds = 0\n",
        )
        .unwrap();
        let mut d = daemon_with(&slurm, Store::in_memory().unwrap(), config);
        d.round(1_000_001.0).unwrap();
        slurm.schedule();
        d.round(1_000_002.0).unwrap();
        let on_p100 = slurm
            .alloc(2)
            .first()
            .is_some_and(|a| a.gpus[0].0 == "p100");
        slurm.finish(1);
        let r = d.round(1_000_027.0).unwrap();
        let moved = r
            .actions
            .iter()
            .any(|a| a.job == 2 && a.action == ActionKind::Preempt);
        (on_p100, moved)
    };
    assert_eq!(run(), (true, false), "kept on its P100s");
}

fn dummy(id: u64) -> SlurmJob {
    let f = FakeSlurm::testbed();
    f.submit(id, "x");
    f.0.borrow().jobs[&id].clone()
}

#[test]
fn an_unreadable_answer_skips_the_round_and_loses_or_repeats_nothing() {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=2 type=resnet50-b64 steps=1000");
    slurm.submit(2, "hadar:v1 gpus=1 steps=1000");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let unknown = r#"{"jobs": [], "meta": {"plugin": {"data_parser": "data_parser/v0.0.99"}}}"#;
    let truncated = r#"{"jobs": [{"job_id": 1, "job_state": ["PEND"#;
    let not_json = "slurm_load_jobs error: Socket timed out on send/recv operation";
    // Popped from the end: the non-JSON answer first, then the truncated, then the unknown.
    slurm.0.borrow_mut().bad_answers = vec![unknown.into(), truncated.into(), not_json.into()];
    for (t, says) in [
        (1_000_001.0, "not JSON"),
        (1_000_002.0, "truncated"),
        (1_000_003.0, "data_parser v0.0.99 is not one hadar reads"),
    ] {
        let e = d.round(t).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    assert!(
        slurm.0.borrow().log.is_empty(),
        "nothing is done in a round that could not read Slurm: {:?}",
        slurm.0.borrow().log
    );
    let r = d.round(1_000_004.0).unwrap();
    assert_eq!(started(&r), vec![1, 2], "{r:?}");
    slurm.schedule();
    let r = d.round(1_000_005.0).unwrap();
    assert!(r.actions.is_empty(), "{r:?}");
    let log = slurm.0.borrow().log.clone();
    assert_eq!(
        log.iter().filter(|l| l.starts_with("release")).count(),
        2,
        "{log:?}"
    );
}

#[test]
fn a_typed_start_binds_the_job_to_its_types_only_where_slurm_keeps_them() {
    for retypes in [false, true] {
        let slurm = FakeSlurm::default();
        slurm.0.borrow_mut().nodes = vec![node("n4", &[("v100", 2), ("k80", 2)])];
        slurm.0.borrow_mut().retypes = retypes;
        // A user who allows two of the types gets a typed request.
        slurm.submit(
            1,
            "hadar:v1 gpus=1 type=resnet50-b64 steps=1000 gpu-types=v100,k80",
        );
        let mut d = daemon(&slurm, Store::in_memory().unwrap());
        let r = d.round(1_000_001.0).unwrap();
        assert_eq!(started(&r), vec![1], "{r:?}");
        let placed = slurm.0.borrow().placements[&1].clone();
        assert!(placed.typed, "{placed:?}");
        let row = d.store().job(1).unwrap().unwrap();
        if retypes {
            assert_eq!(row.bound_types, None, "24.11+ replaces types on update");
        } else {
            assert_eq!(row.bound_types, Some(vec!["v100".to_string()]));
        }
    }
}

/// The database file and its WAL, in bytes.
fn db_bytes(path: &std::path::Path) -> u64 {
    let wal = path.with_extension("db-wal");
    [path, wal.as_path()]
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

#[test]
fn many_rounds_of_jobs_coming_and_going_leave_the_database_the_same_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let slurm = FakeSlurm::testbed();
    // A horizon of 300 rounds (the days' one, 0.05 days = 432 rounds of 10 s, is longer).
    let config = DaemonConfig::parse(
        "test.toml",
        "[sidecar]\nround_seconds = 10\npreempt_grace_seconds = 0\nkeep_days = 0.05\nkeep_rounds = 300\n",
    )
    .unwrap();
    let mut d = daemon_with(&slurm, Store::open(&path).unwrap(), config);
    let mut live: std::collections::VecDeque<(u64, u64)> = Default::default();
    let (mut settled, mut most) = (0, 0);
    for i in 1..=2400u64 {
        let now = 1_000_000.0 + 10.0 * i as f64;
        if i % 3 == 0 {
            slurm.submit(i, "hadar:v1 gpus=1 type=resnet50-b64 steps=1000");
            live.push_back((i, i));
        }
        d.round_with_upkeep(now).unwrap();
        slurm.schedule();
        for (id, since) in &live {
            // A job runs about nine rounds, and Slurm forgets it 40 rounds after it ended
            // (MinJobAge).
            if i - since == 9 && slurm.status(*id) == JobStatus::Running {
                slurm.finish_at(*id, now as i64);
            }
        }
        while live.front().is_some_and(|(_, since)| i - since >= 50) {
            slurm.forget(live.pop_front().unwrap().0);
        }
        if i == 800 {
            settled = db_bytes(&path);
        }
        if i > 800 {
            most = most.max(db_bytes(&path));
        }
    }
    // 1,600 more rounds, 530 more jobs: the file does not grow (freed pages are reused).
    assert!(
        most <= settled + settled / 10,
        "the database grew from {settled} to {most} bytes"
    );
    eprintln!("database: {settled} bytes at round 800, at most {most} after");
    let store = d.store();
    let jobs = store.jobs().unwrap();
    assert!(
        jobs.len() < 200,
        "{} job rows: finished jobs were not pruned",
        jobs.len()
    );
    assert!(
        jobs.iter().any(|j| j.phase == Phase::Finished),
        "jobs finished within the horizon are kept"
    );
    for (id, _) in &live {
        assert!(
            store.job(*id).unwrap().is_some(),
            "job {id} is still in Slurm"
        );
    }
    assert!(!store.decisions_of_round(2400).unwrap().is_empty());
    assert!(store.last_round().unwrap().is_some_and(|r| r.round == 2400));
}

#[test]
fn a_standby_does_nothing_until_the_leaders_lease_expires() {
    let (dir, slurm) = one_held_job();
    let path = dir.path().join("state.db");
    // Another daemon holds the lease until 1_000_090 (lease_seconds 90 from 1_000_000).
    {
        let mut s = Store::open(&path).unwrap();
        let g = s
            .acquire_lease("other:1", 1_000_000.0, (90.0, 5.0), &|_| false)
            .unwrap();
        assert!(matches!(g, hadar_store::LeaseGrant::Leading(_)));
    }
    let mut d = daemon(&slurm, Store::open(&path).unwrap());
    let e = d.round(1_000_050.0).unwrap_err();
    assert!(e.to_string().contains("standing by: other:1 leads"), "{e}");
    assert!(!d.is_leading());
    assert!(
        slurm.log().is_empty(),
        "a standby never acts: {:?}",
        slurm.log()
    );
    // Expired, but within the allowed clock skew: still standing by.
    assert!(d.round(1_000_094.0).is_err());
    let r = d.round(1_000_096.0).unwrap();
    assert!(d.is_leading());
    assert_eq!(started(&r), vec![1], "{r:?}");
    let l = d.store().lease().unwrap().unwrap();
    assert_eq!(l.term, 2);
    assert!(
        d.store()
            .all_intents()
            .unwrap()
            .iter()
            .all(|i| i.holder.as_deref() == Some(l.holder.as_str()))
    );
}

#[test]
fn a_daemon_stopped_cleanly_hands_its_lease_over_at_once() {
    let (dir, slurm) = one_held_job();
    let path = dir.path().join("state.db");
    let mut first = daemon(&slurm, Store::open(&path).unwrap());
    first.round(1_000_001.0).unwrap();
    assert!(first.is_leading());
    // Stopped before its next round: it leaves its lease behind expired.
    let (_wake, rx) = std::sync::mpsc::channel();
    first.run(&std::sync::atomic::AtomicBool::new(true), &rx, &|| {
        1_000_002.0
    });
    assert!(!first.is_leading());
    slurm.submit(2, "hadar:v1 gpus=2 steps=1000");
    let mut next = daemon(&slurm, Store::open(&path).unwrap());
    let r = next.round(1_000_003.0).unwrap();
    assert!(next.is_leading(), "led well within the 90 s lease");
    assert_eq!(started(&r), vec![2], "{r:?}");
    assert_eq!(next.store().lease().unwrap().unwrap().term, 2);
}

/// Every round of a run that starts, preempts, re-places and finishes jobs decides the same
/// again from its kept snapshot; with another configuration the decision can differ.
#[test]
fn every_kept_round_replays_identically() {
    use hadar_ops::replay::{Replayed, replay};
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=2 steps=1000 gpu-types=k80");
    slurm.submit(2, "hadar:v1 gpus=4 steps=1000 gpu-types=k80");
    slurm.submit(3, "hadar:v1 gpus=2 type=resnet50-b64 steps=1000");
    slurm.submit(4, "hadar:v1 gpus=4 type=transformer-b64 steps=1000");
    slurm.submit(5, "hadar:v1 gpus=1 type=a3c steps=1000");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    d.round(1_000_001.0).unwrap();
    slurm.schedule();
    d.round(1_000_002.0).unwrap();
    slurm.set_node_state("n3", NodeState::Draining);
    d.round(1_000_003.0).unwrap();
    slurm.finish(3);
    slurm.submit(6, "hadar:v1 gpus=2 type=lm-b20 steps=1000");
    d.round(1_000_004.0).unwrap();
    slurm.schedule();
    d.round(1_000_005.0).unwrap();
    let store = d.store();
    assert_eq!(store.kept_rounds().unwrap(), vec![1, 2, 3, 4, 5]);
    for round in 1..=5 {
        assert_eq!(
            replay(store, round, None).unwrap(),
            Replayed::Identical,
            "round {round}"
        );
    }
    // Decided with another configuration (priors twice as fast), round 1 differs: its
    // rates are not the recorded ones.
    let other = DaemonConfig::parse(
        "other.toml",
        "[sidecar]\nround_seconds = 1\npreempt_grace_seconds = 0\nthroughput_scale = 2\n",
    )
    .unwrap();
    match replay(store, 1, Some(&other)).unwrap() {
        Replayed::Differs(diff) => assert!(diff.job.is_some(), "{diff}"),
        Replayed::Identical => panic!("another configuration decided the same"),
    }
    let e = replay(store, 9, None).unwrap_err().to_string();
    assert_eq!(e, "round 9: not run yet; the last round is 5");
}

/// A job Slurm would not start yet (its user's hold, an unmet dependency) is not planned,
/// and its decision says why, as its comment does: `hadar explain` reads it.
#[test]
fn a_blocked_job_s_decision_says_what_it_waits_for() {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=1 steps=1000 hold=user");
    slurm.submit(2, "hadar:v1 gpus=1 steps=1000");
    slurm.submit(3, "hadar:v1 gpus=1 steps=1000");
    {
        let mut s = slurm.0.borrow_mut();
        let j = s.jobs.get_mut(&2).unwrap();
        j.site.dependency = Some("afterok:3(unfulfilled)".into());
    }
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let r = d.round(1_000_001.0).unwrap();
    assert_eq!(started(&r), [3], "{r:?}");
    let held = d.store().decision(1).unwrap().unwrap();
    assert!(!held.runs, "{held:?}");
    assert!(
        held.text.contains("held by its user"),
        "the held job's decision: {}",
        held.text
    );
    let dependent = d.store().decision(2).unwrap().unwrap();
    assert!(
        !dependent.runs
            && dependent
                .text
                .contains("its dependency afterok:3(unfulfilled)"),
        "the dependent job's decision: {}",
        dependent.text
    );
    let reason = dependent.wait_reason.expect("a machine-readable reason");
    assert_eq!(
        reason["hold"]["dependency"], "afterok:3(unfulfilled)",
        "{reason}"
    );
}

/// A released job whose license another job took before it started: Slurm keeps it pending
/// with `Reason=Licenses`. It is held again (its planned GPUs go back to the plan), waits
/// while the license is taken, and is placed again once it is free.
#[test]
fn a_released_job_slurm_keeps_pending_for_its_licenses_is_held_until_they_are_free() {
    let slurm = FakeSlurm::testbed();
    let matlab = |free: u32| {
        vec![hadar_slurm::license::License {
            name: "matlab".into(),
            total: 1,
            free,
        }]
    };
    slurm.0.borrow_mut().licenses = matlab(1);
    slurm.submit(1, "hadar:v1 gpus=1 steps=1000");
    slurm.0.borrow_mut().jobs.get_mut(&1).unwrap().site.licenses = Some("matlab:1".into());
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let r = d.round(1_000_001.0).unwrap();
    assert_eq!(started(&r), [1], "its license is free: {r:?}");
    // Another job takes the license before Slurm starts job 1.
    {
        let mut s = slurm.0.borrow_mut();
        s.licenses = matlab(0);
        s.jobs.get_mut(&1).unwrap().reason = Some("Licenses".into());
    }
    let before = slurm.log().len();
    d.round(1_000_002.0).unwrap();
    let log = slurm.log()[before..].to_vec();
    assert!(log.contains(&"hold 1".to_string()), "{log:?}");
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(
        !dec.runs && dec.text.contains("waiting for its licenses matlab:1"),
        "{}",
        dec.text
    );
    slurm.schedule();
    assert_eq!(slurm.status(1), JobStatus::Pending);
    let r = d.round(1_000_003.0).unwrap();
    assert!(started(&r).is_empty(), "still no license: {r:?}");
    assert_eq!(d.store().job(1).unwrap().unwrap().phase, Phase::Waiting);
    slurm.0.borrow_mut().licenses = matlab(1);
    let r = d.round(1_000_004.0).unwrap();
    assert_eq!(started(&r), [1], "its license is free again: {r:?}");
    slurm.schedule();
    assert_eq!(slurm.status(1), JobStatus::Running);
}

/// A running managed job whose user made it non-requeueable (`Requeue=0`) is never preempted
/// (slurmctld would refuse the requeue, and the job would wait on its GPUs to be requeued),
/// even off a draining node; its GPUs stay out of the plan until it ends.
#[test]
fn a_running_job_that_may_no_longer_be_requeued_runs_where_it_is_to_its_end() {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=4 steps=1000 gpu-types=v100");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    d.round(1_000_001.0).unwrap();
    slurm.schedule();
    assert_eq!(slurm.alloc(1)[0].node, "n1");
    slurm.0.borrow_mut().jobs.get_mut(&1).unwrap().site.requeue = Some(false);
    slurm.submit(2, "hadar:v1 gpus=4 steps=1000 gpu-types=v100");
    let r = d.round(1_000_002.0).unwrap();
    assert!(r.actions.is_empty(), "n1's V100s are job 1's: {r:?}");
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(dec.runs && dec.text.contains("Requeue=0"), "{}", dec.text);
    slurm.set_node_state("n1", NodeState::Draining);
    let before = slurm.log().len();
    let r = d.round(1_000_003.0).unwrap();
    let log = slurm.log()[before..].to_vec();
    assert!(
        !log.iter()
            .any(|l| l.starts_with("signal 1") || l.starts_with("requeue")),
        "not preempted off the draining node: {log:?} {r:?}"
    );
    assert_eq!(slurm.status(1), JobStatus::Running);
    slurm.finish(1);
    slurm.set_node_state("n1", NodeState::Idle);
    let r = d.round(1_000_004.0).unwrap();
    assert_eq!(started(&r), [2], "{r:?}");
}

/// A released job whose partition an admin sets DOWN before Slurm starts it is held again
/// (Slurm would keep it pending, its GPUs held idle), waits while the partition starts no
/// jobs, and is placed again once it is UP.
#[test]
fn a_released_job_whose_partition_goes_down_is_held_until_it_is_up() {
    use hadar_slurm::site::{PartitionFigures, PartitionState};
    let slurm = FakeSlurm::testbed();
    let gpu = |state: PartitionState| {
        vec![PartitionFigures {
            name: "gpu".into(),
            priority_job_factor: 1.0,
            state,
            ..Default::default()
        }]
    };
    slurm.0.borrow_mut().partitions = gpu(PartitionState::Up);
    slurm.submit(1, "hadar:v1 gpus=1 steps=1000");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    let r = d.round(1_000_001.0).unwrap();
    assert_eq!(started(&r), [1], "{r:?}");
    slurm.0.borrow_mut().partitions = gpu(PartitionState::Down);
    let before = slurm.log().len();
    d.round(1_000_002.0).unwrap();
    assert!(
        slurm.log()[before..].contains(&"hold 1".to_string()),
        "{:?}",
        slurm.log()
    );
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(dec.text.contains("gpu (DOWN)"), "{}", dec.text);
    let r = d.round(1_000_003.0).unwrap();
    assert!(started(&r).is_empty(), "the partition is down: {r:?}");
    slurm.0.borrow_mut().partitions = gpu(PartitionState::Up);
    let r = d.round(1_000_004.0).unwrap();
    assert_eq!(started(&r), [1], "{r:?}");
}

/// A job released to its GPUs that Slurm keeps pending for a reason of its own says so in
/// its decision (`hadar explain`), rather than only that it runs there.
#[test]
fn a_released_job_slurm_has_not_started_says_slurms_reason() {
    let slurm = FakeSlurm::testbed();
    slurm.submit(1, "hadar:v1 gpus=1 steps=1000");
    let mut d = daemon(&slurm, Store::in_memory().unwrap());
    d.round(1_000_001.0).unwrap();
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(!dec.text.contains("not started yet"), "{}", dec.text);
    slurm.0.borrow_mut().jobs.get_mut(&1).unwrap().reason = Some("Resources".into());
    d.round(1_000_002.0).unwrap();
    let dec = d.store().decision(1).unwrap().unwrap();
    assert!(
        dec.runs
            && dec
                .text
                .contains("it is not started yet: Slurm shows it pending with Reason=Resources"),
        "{}",
        dec.text
    );
}

/// A GPU job as Slurm holds it without the plugin (shadow mode): pending, not held, its
/// request by count in `TresPerJob`, its name a job type.
fn unmanaged_pending(id: u64, name: &str, gpus: u32) -> SlurmJob {
    let mut j = SlurmJob::held_with_record(id, "");
    j.admin_comment = None;
    j.name = name.into();
    j.reason = Some("Resources".into());
    j.priority = Some(100);
    j.tres_per_job = Some(format!("gres/gpu:{gpus}"));
    j
}

/// `hadar serve --shadow` records the acting daemon's decision: on the same Slurm state, the
/// placements a shadow round records are those [`decide`] makes on the snapshot the shadow
/// observed, with the file's policy and passes (the look-ahead, Slurm's rules, the site's
/// rules), whichever policy the file names; the round says which.
#[test]
fn the_shadow_daemon_decides_as_the_acting_daemon_on_the_same_snapshot() {
    use hadar_daemon::decide::decide;
    use hadar_ops::shadow::{Shadow, Shadowed, observe, observed_snapshot};
    for policy in ["hadar", "gavel", "tiresias"] {
        let slurm = FakeSlurm::testbed();
        let jobs = [
            (1, "resnet50-b64", 4),
            (2, "transformer-b64", 2),
            (3, "a3c", 1),
            (4, "lm-b20", 4),
            (5, "cyclegan", 2),
            (6, "resnet18-b64", 8),
        ];
        for (id, name, gpus) in jobs {
            slurm
                .0
                .borrow_mut()
                .jobs
                .insert(id, unmanaged_pending(id, name, gpus));
        }
        // One job Slurm already runs on n1's four V100s.
        let mut running = unmanaged_pending(7, "resnet50-b64", 4);
        running.status = JobStatus::Running;
        running.start_time = Some(1_000_000);
        running.alloc = vec![NodeAlloc {
            node: "n1".into(),
            gpus: vec![("v100".into(), 4)],
        }];
        slurm.0.borrow_mut().jobs.insert(7, running);
        let config = DaemonConfig::parse(
            "shadow.toml",
            &format!("[sidecar]\nround_seconds = 60\nshadow = true\npolicy = \"{policy}\"\n"),
        )
        .unwrap();
        let now = 1_000_001.0;
        let mut shadow = Shadow::new(
            slurm.clone(),
            Store::in_memory().unwrap(),
            config.clone(),
            now,
        )
        .unwrap();
        shadow.round(now).unwrap();
        let recorded: BTreeMap<u64, _> = shadow
            .store()
            .decisions_of_round(1)
            .unwrap()
            .into_iter()
            .filter_map(|d| Some((d.job, d.placement?)))
            .collect();
        // The acting side, from the same Slurm state observed afresh.
        let (slurm_jobs, _) = slurm.jobs().unwrap();
        let mut rows = BTreeMap::new();
        let shadowed = Shadowed {
            partitions: &config.partitions,
            site_requeues: false,
        };
        observe(&mut rows, &slurm_jobs, shadowed, 0.0, now);
        let table = hadar_formats::embedded::throughputs().unwrap();
        let site = hadar_daemon::site::read(&slurm, now, &slurm_jobs);
        let snap = observed_snapshot(
            1,
            (now, 0.0),
            slurm.nodes().unwrap(),
            slurm_jobs,
            rows,
            BTreeMap::new(),
            site,
            &table,
        );
        let acting = decide(&snap, &config, &table, config.round_policy().as_mut()).unwrap();
        assert!(!acting.planned.is_empty(), "{policy}: something is planned");
        assert_eq!(recorded, acting.planned, "{policy}");
        let round = shadow.store().last_round().unwrap().unwrap();
        assert_eq!(round.policy, format!("{policy} (shadow)"));
        assert!(round.actions.is_empty(), "a shadow acts on nothing");
        assert!(
            slurm.log().is_empty(),
            "a shadow changes nothing: {:?}",
            slurm.log()
        );
    }
}
