//! The fork pass's state machine without Slurm: a stand-in records what it is asked to do,
//! the store is in memory, and the copy jobs' reports (which the real copy jobs put in their
//! Comment after averaging on their node) are written into the stand-in jobs' records. The
//! daemon never touches the spool: the tests' spool folder does not exist.
//! The real-cluster scenarios are in the workspace's `tests/fork_slurm.rs`.

use hadar_daemon::DaemonConfig;
use hadar_daemon::fork::{ForkSlurm, Forker};
use hadar_daemon::fork_consolidate::{CopyReport, RoundReport};
use hadar_slurm::{JobStatus, SlurmError, SlurmJob};
use hadar_store::{
    ForkCopy, ForkJob, ForkRound, ForkState, JobRow, OuterStep, Phase, RoundState, Store,
};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<String>>>);

impl Calls {
    fn log(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl ForkSlurm for Calls {
    fn submit_as(&self, uid: u32, _: u32, script: &Path, _: &Path) -> Result<u64, SlurmError> {
        self.0
            .lock()
            .unwrap()
            .push(format!("submit {uid} {}", script.display()));
        Ok(900)
    }
    fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        self.0.lock().unwrap().push(format!("cancel {id}"));
        Ok(())
    }
    fn batch_script(&self, _: u64) -> Result<String, SlurmError> {
        Ok("#!/bin/sh\nexec hadar-fork-run -- true\n".into())
    }
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        self.0.lock().unwrap().push(format!("comment {id} {text}"));
        Ok(())
    }
    fn release(&self, id: u64) -> Result<(), SlurmError> {
        self.0.lock().unwrap().push(format!("release {id}"));
        Ok(())
    }
}

struct Bench {
    _dir: tempfile::TempDir,
    spool: PathBuf,
    calls: Calls,
    forker: Forker,
    store: Store,
    rows: BTreeMap<u64, JobRow>,
    owner: (u32, u32),
}

const JOB: u64 = 7;

fn bench() -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let meta = std::fs::metadata(dir.path()).unwrap();
    let owner = (meta.uid(), meta.gid());
    let spool = dir.path().join("spool");
    let avg = PathBuf::from("/usr/bin/hadar");
    let config = DaemonConfig::parse(
        "t.toml",
        &format!(
            "[sidecar]\npolicy = \"hadare\"\nround_seconds = 10\n[fork]\nspool = \"{}\"\nrunner = \"/r/hadar-fork-run\"\ndeadline_margin_seconds = 2\nmax_failed_rounds = 2\n",
            spool.display()
        ),
    )
    .unwrap();
    let calls = Calls::default();
    let forker = Forker::new(Box::new(calls.clone()), &config, avg);
    let mut row = JobRow::new(
        JOB,
        "forked".into(),
        "hadar:v1 gpus=1 steps=100 fork=yes".into(),
        1,
        100.0,
        0.0,
    );
    row.user_id = Some(owner.0);
    row.group_id = Some(owner.1);
    let mut rows = BTreeMap::new();
    rows.insert(JOB, row);
    let mut store = Store::in_memory().unwrap();
    store
        .write(|w| w.put_fork_job(&ForkJob::new(JOB, 100.0)))
        .unwrap();
    Bench {
        _dir: dir,
        spool,
        calls,
        forker,
        store,
        rows,
        owner,
    }
}

fn slurm_job(id: u64, name: &str, status: JobStatus, held: bool, owner: (u32, u32)) -> SlurmJob {
    reported(id, name, status, held, owner, None)
}

/// A job as Slurm shows it, with its `Comment` when given.
fn reported(
    id: u64,
    name: &str,
    status: JobStatus,
    held: bool,
    owner: (u32, u32),
    comment: Option<&str>,
) -> SlurmJob {
    let comment = comment
        .map(|c| format!("   Comment={c}\n"))
        .unwrap_or_default();
    let text = format!(
        "JobId={id} JobName={name}\n   UserId=u({}) GroupId=g({}) \n   Priority={} JobState={} Reason={}\n{comment}",
        owner.0,
        owner.1,
        if held { 0 } else { 1 },
        match status {
            JobStatus::Running => "RUNNING",
            JobStatus::Completed => "COMPLETED",
            _ => "PENDING",
        },
        if held { "JobHeldUser" } else { "None" }
    );
    hadar_slurm::job::parse_jobs(&text).0.remove(0)
}

fn round(b: &Bench, state: RoundState, copy_job: Option<u64>) -> ForkRound {
    let dir = b.spool.join(JOB.to_string()).join("round-0");
    let copy = |k: usize, node: &str| ForkCopy {
        node: node.into(),
        gpu_type: "v100".into(),
        gpus: 1,
        budget: 50,
        checkpoint: dir
            .join(format!("copy-{k}.safetensors"))
            .display()
            .to_string(),
        result: dir.join(format!("copy-{k}.json")).display().to_string(),
        steps: None,
        ok: None,
        exit_code: None,
        weight: None,
        seconds: None,
        inner_state_from: None,
    };
    ForkRound {
        job: JOB,
        round: 0,
        state,
        copy_job,
        copy_job_name: format!("hadar-fork-{JOB}-r0"),
        copies: vec![copy(0, "n1"), copy(1, "n3")],
        start_from: None,
        consolidated: b
            .spool
            .join(JOB.to_string())
            .join("consolidated-0.safetensors")
            .display()
            .to_string(),
        deadline_unix: u64::MAX,
        started_s: 0.0,
        ended_s: None,
        steps: 0.0,
        message: None,
        outer: None,
        copy_seconds: None,
    }
}

/// What a copy job whose copies succeeded with `(steps, seconds)` and were averaged on
/// its node reports in its Comment.
fn copies_succeeded(results: &[(u64, Option<f64>)]) -> String {
    RoundReport::Ran {
        averaged: true,
        copies: results
            .iter()
            .map(|(steps, secs)| CopyReport {
                ok: true,
                steps: *steps as f64,
                seconds: *secs,
                exit_code: Some(0),
            })
            .collect(),
    }
    .encode()
}

/// The ended copy job `id` of round `r`, with `comment`.
fn ended(b: &Bench, id: u64, r: u64, comment: Option<&str>) -> SlurmJob {
    let name = format!("hadar-fork-{JOB}-r{r}");
    reported(id, &name, JobStatus::Completed, false, b.owner, comment)
}

fn advance(b: &mut Bench, slurm: &[SlurmJob]) {
    let owned: BTreeSet<u64> = [JOB].into_iter().collect();
    b.forker
        .advance(&mut b.store, &mut b.rows, &owned, slurm, 1000.0, 0.0);
}

#[test]
fn a_copy_job_submitted_but_unrecorded_is_adopted_not_submitted_again() {
    let mut b = bench();
    let r = round(&b, RoundState::Submitting, None);
    b.store.write(|w| w.put_fork_round(&r)).unwrap();
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let copies = slurm_job(900, "hadar-fork-7-r0", JobStatus::Running, false, b.owner);
    advance(&mut b, &[logical, copies]);
    let open = b.store.open_fork_round(JOB).unwrap().unwrap();
    assert_eq!(
        (open.state, open.copy_job),
        (RoundState::Running, Some(900))
    );
    assert!(
        b.calls.log().iter().all(|c| !c.starts_with("submit")),
        "{:?}",
        b.calls.log()
    );
}

#[test]
fn a_round_never_submitted_is_given_up_and_counts_nothing() {
    let mut b = bench();
    let r = round(&b, RoundState::Submitting, None);
    b.store.write(|w| w.put_fork_round(&r)).unwrap();
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    advance(&mut b, &[logical]);
    assert!(b.store.open_fork_round(JOB).unwrap().is_none());
    let rounds = b.store.fork_rounds(JOB).unwrap();
    assert_eq!(rounds[0].state, RoundState::Abandoned);
    assert_eq!(b.store.fork_job(JOB).unwrap().unwrap().steps_done, 0.0);
}

#[test]
fn a_cancelled_logical_job_cancels_its_copies_and_counts_nothing() {
    let mut b = bench();
    let r = round(&b, RoundState::Running, Some(900));
    b.store.write(|w| w.put_fork_round(&r)).unwrap();
    b.rows.get_mut(&JOB).unwrap().phase = Phase::Finished;
    let copies = slurm_job(900, "hadar-fork-7-r0", JobStatus::Running, false, b.owner);
    advance(&mut b, &[copies]);
    assert_eq!(b.calls.log(), vec!["cancel 900".to_string()]);
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!((fj.state, fj.steps_done), (ForkState::Cancelled, 0.0));
    assert_eq!(
        b.store.fork_rounds(JOB).unwrap()[0].state,
        RoundState::Abandoned
    );
}

#[test]
fn finished_copies_are_consolidated_once_and_a_done_job_is_released() {
    let mut b = bench();
    let r = round(&b, RoundState::Running, Some(900));
    b.store.write(|w| w.put_fork_round(&r)).unwrap();
    let report = copies_succeeded(&[(60, Some(12.0)), (40, Some(10.0))]);
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let done = ended(&b, 900, 0, Some(&report));
    advance(&mut b, &[logical.clone(), done.clone()]);
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!((fj.state, fj.steps_done), (ForkState::Done, 100.0));
    let counted = &b.store.fork_rounds(JOB).unwrap()[0];
    assert_eq!(counted.state, RoundState::Consolidated);
    assert_eq!(counted.copies[0].weight, Some(0.6));
    assert!(!b.spool.exists(), "the daemon never touches the spool");
    let log = b.calls.log();
    assert!(
        log.iter()
            .any(|c| c.contains("state=done") && c.contains("steps=100/100")),
        "{log:?}"
    );
    assert!(log.contains(&format!("release {JOB}")), "{log:?}");
    // Both copies ran 1 V100: 100 steps in 22 s of their programs' time.
    let learned = b.store.learned_rates(JOB).unwrap();
    assert_eq!(learned.len(), 1, "{learned:?}");
    assert_eq!(
        (learned[0].gpu_type.as_str(), learned[0].workers),
        ("v100", 1)
    );
    assert!((learned[0].rate - 100.0 / 22.0).abs() < 1e-9, "{learned:?}");
    // Another round over the same state adds nothing, learns nothing and releases nothing more.
    advance(&mut b, &[logical, done]);
    assert_eq!(b.store.fork_job(JOB).unwrap().unwrap().steps_done, 100.0);
    assert_eq!(b.store.learned_rates(JOB).unwrap()[0].samples, 1);
}

/// Results written by a runner from before the `seconds` field still consolidate; they
/// only teach no rate.
#[test]
fn results_without_timing_count_steps_and_learn_nothing() {
    let mut b = bench();
    let r = round(&b, RoundState::Running, Some(900));
    b.store.write(|w| w.put_fork_round(&r)).unwrap();
    let report = copies_succeeded(&[(30, None), (20, None)]);
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let done = ended(&b, 900, 0, Some(&report));
    advance(&mut b, &[logical, done]);
    assert_eq!(b.store.fork_job(JOB).unwrap().unwrap().steps_done, 50.0);
    assert!(b.store.learned_rates(JOB).unwrap().is_empty());
}

#[test]
fn copies_failing_round_after_round_fail_the_job() {
    let mut b = bench();
    for attempt in 0..2u64 {
        let mut r = round(&b, RoundState::Running, Some(900 + attempt));
        r.round = attempt;
        b.store.write(|w| w.put_fork_round(&r)).unwrap();
        let failed = CopyReport {
            ok: false,
            steps: 0.0,
            seconds: None,
            exit_code: Some(3),
        };
        let report = RoundReport::Ran {
            averaged: false,
            copies: vec![failed.clone(), failed],
        }
        .encode();
        let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
        let copies = ended(&b, 900 + attempt, attempt, Some(&report));
        advance(&mut b, &[logical, copies]);
    }
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!((fj.state, fj.steps_done), (ForkState::Failed, 0.0));
    assert!(fj.message.unwrap().contains("exit code 3"));
    let log = b.calls.log();
    assert!(log.iter().any(|c| c.contains("state=failed")), "{log:?}");
    assert!(log.contains(&format!("release {JOB}")), "{log:?}");
}

/// Counting a round planned with the outer step moves the job's velocity with its checkpoint
/// (the step itself is taken in the copy job; its options are `fork::outer_args`, tested
/// beside it).
#[test]
fn an_outer_round_counted_moves_the_velocity() {
    let mut b = bench();
    let job_dir = b.spool.join(JOB.to_string());
    let start = job_dir
        .join("consolidated-0.safetensors")
        .display()
        .to_string();
    let velocity = job_dir.join("momentum-1.safetensors").display().to_string();
    let mut r = round(&b, RoundState::Running, Some(901));
    r.round = 1;
    r.copy_job_name = format!("hadar-fork-{JOB}-r1");
    r.consolidated = job_dir
        .join("consolidated-1.safetensors")
        .display()
        .to_string();
    r.start_from = Some(start.clone());
    r.outer = Some(OuterStep {
        lr: 1.0,
        momentum: 0.5,
        momentum_from: None,
        momentum_out: Some(velocity.clone()),
    });
    let mut fj = ForkJob::new(JOB, 100.0);
    fj.checkpoint = Some(start.clone());
    fj.next_round = 2;
    b.store
        .write(|w| {
            w.put_fork_job(&fj)?;
            w.put_fork_round(&r)
        })
        .unwrap();
    let report = copies_succeeded(&[(30, Some(5.0)), (20, Some(5.0))]);
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let done = ended(&b, 901, 1, Some(&report));
    advance(&mut b, &[logical, done]);
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!(fj.steps_done, 50.0);
    assert_eq!(fj.checkpoint.as_deref(), Some(r.consolidated.as_str()));
    assert_eq!(fj.momentum.as_deref(), Some(velocity.as_str()));
}

/// A copy job that ended without a report (killed before it averaged) fails its round; one
/// Slurm no longer shows (its record expired while the daemon was down) is redone; a report
/// whose averaging failed counts nothing.
#[test]
fn unreported_lost_and_unaveraged_rounds_count_nothing() {
    for (case, copy_job) in [
        ("unreported", Some(None)),
        ("lost", None),
        (
            "unaveraged",
            Some(Some("hadar-round:v1;avg=failed;c0=ok:30:5:0;c1=ok:20:5:0")),
        ),
    ] {
        let mut b = bench();
        let r = round(&b, RoundState::Running, Some(900));
        b.store.write(|w| w.put_fork_round(&r)).unwrap();
        let mut slurm = vec![slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner)];
        if let Some(comment) = copy_job {
            slurm.push(ended(&b, 900, 0, comment));
        }
        advance(&mut b, &slurm);
        let fj = b.store.fork_job(JOB).unwrap().unwrap();
        assert_eq!(fj.steps_done, 0.0, "{case}");
        let round = &b.store.fork_rounds(JOB).unwrap()[0];
        let expect = if case == "lost" {
            RoundState::Abandoned
        } else {
            RoundState::Failed
        };
        assert_eq!(round.state, expect, "{case}: {round:?}");
        assert_eq!(fj.failed_rounds, u32::from(case != "lost"), "{case}");
        assert!(
            !b.spool.exists(),
            "{case}: the daemon never touches the spool"
        );
    }
}
