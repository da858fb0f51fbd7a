//! `hadar replay` on a state database holding kept rounds: a round kept as decided replays
//! identically (exit 0), one whose recorded decision was altered names the first difference
//! (exit 1), and a round or database that is not there is a clear error (exit 2). Forked
//! jobs' rounds of copies are compared too.

use hadar_daemon::DaemonConfig;
use hadar_daemon::decide::decide;
use hadar_daemon::fork::ForkView;
use hadar_daemon::kept::keep;
use hadar_daemon::snapshot::RoundSnapshot;
use hadar_daemon::spec::JobSpec;
use hadar_slurm::{NodeInfo, NodeState, SlurmJob};
use hadar_store::{ForkJob, JobRow, RoundRow, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

const RECORD: &str = "hadar:v1 gpus=2 type=resnet50-b64 steps=1000";

fn slurm_job(id: u64) -> SlurmJob {
    SlurmJob::held_with_record(id, RECORD)
}

/// Round `round` with jobs 1 and 2 waiting on two nodes of V100s and K80s.
fn snapshot(round: u64) -> RoundSnapshot {
    let node = |name: &str, t: &str| NodeInfo {
        name: name.into(),
        state: NodeState::Idle,
        gpus: vec![(t.to_string(), 4)],
        partitions: vec!["gpu".into()],
        features: Vec::new(),
        free: Default::default(),
    };
    let rows: BTreeMap<u64, JobRow> = [1, 2]
        .map(|id| {
            let arrival = 10.0 + id as f64 / 3.0;
            (
                id,
                JobRow::new(id, format!("job{id}"), RECORD.into(), 2, 1000.0, arrival),
            )
        })
        .into();
    RoundSnapshot {
        round,
        now_unix: 1_000_100.0 + round as f64,
        now_s: 100.0 + round as f64,
        nodes: vec![node("n1", "v100"), node("n2", "k80")],
        slurm_jobs: vec![slurm_job(1), slurm_job(2)],
        before: rows.clone(),
        specs: rows
            .keys()
            .map(|id| (*id, JobSpec::from_record(RECORD).unwrap()))
            .collect(),
        rows,
        owned: BTreeSet::new(),
        forks: Default::default(),
        learned: BTreeMap::new(),
        site: Default::default(),
        retypes: true,
        slurm_release: None,
        chosen: Default::default(),
    }
}

/// A state database whose rounds 1 and 2 are kept as decided, and round 3 with its
/// recorded text for job 2 altered.
fn state(path: &Path) {
    let mut store = Store::open(path).unwrap();
    let config = DaemonConfig::parse("t.toml", "").unwrap();
    let table = hadar_formats::embedded::throughputs().unwrap();
    for round in 1..=3 {
        let snap = snapshot(round);
        let mut d = decide(&snap, &config, &table, config.round_policy().as_mut()).unwrap();
        if round == 3 {
            let j2 = d.decisions.iter_mut().find(|d| d.job == 2).unwrap();
            j2.text = "altered".into();
        }
        store
            .write(|w| {
                w.put_round(
                    &RoundRow {
                        round,
                        started_s: snap.now_s,
                        ..Default::default()
                    },
                    &d.decisions,
                )
            })
            .unwrap();
        keep(&mut store, &snap, &d, &config, &table).unwrap();
    }
}

fn hadar(args: &[&str], state: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .arg("replay")
        .arg("--state")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_kept_round_replays_identically() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    state(&db);
    let (code, out, err) = text(&hadar(&["--round", "2"], &db));
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "round 2: identical\n"),
        "{err}"
    );
}

#[test]
fn an_altered_record_is_named_with_its_job_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    state(&db);
    let (code, out, err) = text(&hadar(&["--round", "3"], &db));
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.starts_with(
            "round 3: differs: job 2: decision.text: recorded \"altered\", recomputed \""
        ),
        "{out}"
    );
    let (code, out, _) = text(&hadar(&["--all"], &db));
    assert_eq!(code, Some(1));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..2],
        ["round 1: identical", "round 2: identical"],
        "{out}"
    );
    assert_eq!(lines[3], "replayed 3 rounds (1 to 3): 1 not identical");
}

#[test]
fn a_missing_round_or_database_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    state(&db);
    let (code, _, err) = text(&hadar(&["--round", "7"], &db));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("round 7: not run yet; the last round is 3"),
        "{err}"
    );
    let (code, _, err) = text(&hadar(&["--round", "1"], &dir.path().join("none.db")));
    assert_eq!(code, Some(2));
    assert!(err.contains("no state database at"), "{err}");
    let (code, _, err) = text(&hadar(&[], &db));
    assert_eq!(code, Some(2), "--round or --all is required: {err}");
}

#[test]
fn a_pruned_round_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    state(&db);
    Store::open(&db)
        .unwrap()
        .prune(hadar_store::Horizon {
            before_s: 0.0,
            through_round: 1,
            snapshots_through_round: 0,
        })
        .unwrap();
    let (code, _, err) = text(&hadar(&["--round", "1"], &db));
    assert_eq!(code, Some(2));
    assert!(
        err.contains("round 1: pruned (kept rounds are 2 to 3;"),
        "{err}"
    );
}

/// Round `round` of [`snapshot`] with job 3, `fork=yes`, held between its rounds with no
/// copies yet: the fork pass owns it, and its tracker is in the snapshot.
fn forked_snapshot(round: u64) -> RoundSnapshot {
    const FORKED: &str = "hadar:v1 gpus=2 type=resnet50-b64 steps=1000 fork=yes";
    let mut s = snapshot(round);
    let row = JobRow::new(3, "job3".into(), FORKED.into(), 2, 1000.0, 11.5);
    s.rows.insert(3, row.clone());
    s.before.insert(3, row);
    s.specs.insert(3, JobSpec::from_record(FORKED).unwrap());
    s.slurm_jobs.push(SlurmJob::held_with_record(3, FORKED));
    s.owned.insert(3);
    s.forks.insert(
        3,
        ForkView {
            tracker: ForkJob::new(3, 1000.0),
            open: None,
            last_copies: Vec::new(),
        },
    );
    s
}

/// A forked job's round of copies is part of the decision: kept, replayed identically, and
/// an altered one is named. A round kept before forked jobs' trackers were (format 1) is
/// refused with a clear error when it has forked jobs.
#[test]
fn forked_rounds_are_replayed_and_older_formats_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let mut store = Store::open(&db).unwrap();
    let config = DaemonConfig::parse("t.toml", "").unwrap();
    let table = hadar_formats::embedded::throughputs().unwrap();
    for round in 1..=3 {
        let snap = forked_snapshot(round);
        let mut d = decide(&snap, &config, &table, config.round_policy().as_mut()).unwrap();
        assert_eq!(d.forks.len(), 1, "job 3 gets a round: {:?}", d.decisions);
        assert_eq!((d.forks[0].job, d.forks[0].round), (3, 0));
        let j3 = d.decisions.iter().find(|d| d.job == 3).unwrap();
        assert!(
            j3.runs && j3.text.starts_with("runs forked (HadarE): round 0"),
            "{j3:?}"
        );
        if round == 2 {
            d.forks[0].copies[0].budget += 1;
        }
        store
            .write(|w| {
                w.put_round(
                    &RoundRow {
                        round,
                        started_s: snap.now_s,
                        ..Default::default()
                    },
                    &d.decisions,
                )
            })
            .unwrap();
        keep(&mut store, &snap, &d, &config, &table).unwrap();
    }
    // Round 3 as a hadar before format 2 kept it: no format, no trackers.
    let k = store.kept_round(3).unwrap().unwrap();
    let mut data: serde_json::Value = serde_json::from_str(&k.data).unwrap();
    let kept = data.as_object_mut().unwrap();
    kept.remove("format");
    kept["snapshot"].as_object_mut().unwrap().remove("forks");
    kept["outcome"].as_object_mut().unwrap().remove("forks");
    let data = data.to_string();
    store
        .write(|w| w.put_round_snapshot(3, k.started_s, &k.digest, &k.inputs, &data))
        .unwrap();
    drop(store);

    let (code, out, err) = text(&hadar(&["--round", "1"], &db));
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "round 1: identical\n"),
        "{err}"
    );
    let (code, out, _) = text(&hadar(&["--round", "2"], &db));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.starts_with("round 2: differs: job 3: fork start 1: recorded {"),
        "{out}"
    );
    let (code, _, err) = text(&hadar(&["--round", "3"], &db));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("round 3: recorded with an older format (1, this hadar reads 2)"),
        "{err}"
    );
    let (code, out, _) = text(&hadar(&["--all"], &db));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.ends_with(
            "replayed 3 rounds (1 to 3): 1 not identical, 1 recorded with an older format\n"
        ),
        "{out}"
    );
}
