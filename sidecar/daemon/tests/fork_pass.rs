//! The fork pass's state machine without Slurm: a stand-in records what it is asked to do,
//! the store is in memory, the spool a temporary folder and `hadar average` a small script.
//! The real-cluster scenarios are in the workspace's `tests/fork_slurm.rs`.

use hadar_daemon::DaemonConfig;
use hadar_daemon::fork::{ForkSlurm, Forker};
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
    // `hadar average --out OUT [OPTIONS] IN:STEPS...` stand-in: logs its arguments to
    // `average.log` beside it and copies the first input.
    let avg = dir.path().join("fake-hadar");
    std::fs::write(
        &avg,
        "#!/bin/sh\n[ \"$1\" = average ] || exit 9\necho \"$@\" >> \"$(dirname \"$0\")/average.log\"\nout=$3\nfor a in \"$@\"; do case $a in *:[0-9]*) in=${a%:*}; break ;; esac; done\ncp \"$in\" \"$out\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&avg, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
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
    let text = format!(
        "JobId={id} JobName={name}\n   UserId=u({}) GroupId=g({}) \n   Priority={} JobState={} Reason={}\n",
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
    std::fs::create_dir_all(&dir).unwrap();
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
    }
}

/// Writes what the fork runner leaves for copies that succeeded: a checkpoint and a result
/// with `(steps, seconds)` (no `seconds` field when `None`, as older runners wrote).
fn copies_succeeded(r: &ForkRound, results: &[(u64, Option<f64>)]) {
    for (k, (steps, secs)) in results.iter().enumerate() {
        std::fs::write(&r.copies[k].checkpoint, "ckpt").unwrap();
        let secs = secs
            .map(|t| format!("\"seconds\":{t},"))
            .unwrap_or_default();
        std::fs::write(
            &r.copies[k].result,
            format!("{{\"fork_index\":{k},\"copies\":{},\"round\":0,\"steps\":{steps},{secs}\"exit_code\":0,\"ok\":true,\"error\":\"\"}}\n", results.len()),
        )
        .unwrap();
    }
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
    copies_succeeded(&r, &[(60, Some(12.0)), (40, Some(10.0))]);
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let done = slurm_job(900, "hadar-fork-7-r0", JobStatus::Completed, false, b.owner);
    advance(&mut b, &[logical.clone(), done.clone()]);
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!((fj.state, fj.steps_done), (ForkState::Done, 100.0));
    let counted = &b.store.fork_rounds(JOB).unwrap()[0];
    assert_eq!(counted.state, RoundState::Consolidated);
    assert_eq!(counted.copies[0].weight, Some(0.6));
    assert!(Path::new(&counted.consolidated).is_file());
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
    copies_succeeded(&r, &[(30, None), (20, None)]);
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let done = slurm_job(900, "hadar-fork-7-r0", JobStatus::Completed, false, b.owner);
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
        for k in 0..2 {
            std::fs::write(
                &r.copies[k].result,
                format!("{{\"fork_index\":{k},\"copies\":2,\"round\":{attempt},\"steps\":0,\"exit_code\":3,\"ok\":false,\"error\":\"program exited with status 3\"}}\n"),
            )
            .unwrap();
        }
        let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
        advance(&mut b, &[logical]);
    }
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!((fj.state, fj.steps_done), (ForkState::Failed, 0.0));
    assert!(fj.message.unwrap().contains("status 3"));
    let log = b.calls.log();
    assert!(log.iter().any(|c| c.contains("state=failed")), "{log:?}");
    assert!(log.contains(&format!("release {JOB}")), "{log:?}");
}

/// A round planned with the outer step hands it to `hadar average` (the velocity explicitly
/// zero in the job's first round with momentum, so that a file left by an earlier attempt of
/// this round is not read), and counting the round moves the job's velocity with its
/// checkpoint.
#[test]
fn an_outer_round_passes_its_step_to_average_and_moves_the_velocity() {
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
    copies_succeeded(&r, &[(30, Some(5.0)), (20, Some(5.0))]);
    let logical = slurm_job(JOB, "forked", JobStatus::Pending, true, b.owner);
    let done = slurm_job(901, "hadar-fork-7-r1", JobStatus::Completed, false, b.owner);
    advance(&mut b, &[logical, done]);
    let log = std::fs::read_to_string(b.spool.parent().unwrap().join("average.log")).unwrap();
    assert!(
        log.contains(&format!(
            "--outer nesterov --start {start} --outer-lr 1 --outer-momentum 0.5 --momentum-state {velocity} --momentum-zero "
        )),
        "{log}"
    );
    let fj = b.store.fork_job(JOB).unwrap().unwrap();
    assert_eq!(fj.steps_done, 50.0);
    assert_eq!(fj.checkpoint.as_deref(), Some(r.consolidated.as_str()));
    assert_eq!(fj.momentum.as_deref(), Some(velocity.as_str()));
}
