//! The persisted Job Tracker of forked (HadarE) jobs.
//!
//! A forked job is one logical Slurm job whose training runs, round after round, as copies
//! (one heterogeneous Slurm job per round, one component per node). Per logical job the
//! store keeps a [`ForkJob`] (aggregated steps, latest consolidated checkpoint, whether it is
//! done); per round a [`ForkRound`] (copies with node, type, GPUs, step budget, checkpoint,
//! steps done and consolidation weight; the copy job's id; the consolidated checkpoint).
//!
//! Crash safety rests on one rule: a round's steps are added to its job's aggregate in the
//! same transaction that marks the round consolidated ([`Writer::consolidate_round`]), and a
//! round already consolidated is never counted again. A daemon killed at any point therefore
//! finds every round either counted once or not at all: an open round is completed (its
//! copies' results are still on disk) or given up and redone from the last consolidated
//! checkpoint.

use crate::{Store, StoreError, Writer};
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

/// Where a forked job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkState {
    /// Still training: rounds of copies run until its steps reach the total.
    Active,
    /// Its aggregated steps reached the total; the logical job is released to finish (exit 0).
    Done,
    /// It gave up (copies failed round after round); the logical job is released to fail.
    Failed,
    /// The logical job left Slurm (scancel) before it was done; its copies were cancelled.
    Cancelled,
}

impl ForkState {
    /// The state as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ForkState::Active => "active",
            ForkState::Done => "done",
            ForkState::Failed => "failed",
            ForkState::Cancelled => "cancelled",
        }
    }
}

/// One logical forked job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkJob {
    /// The logical job's Slurm id.
    pub job: u64,
    /// Its state.
    pub state: ForkState,
    /// Steps to complete, summed over copies and rounds.
    pub total_steps: f64,
    /// Steps done so far: the sum of the steps of its consolidated rounds, nothing else.
    pub steps_done: f64,
    /// The index the next round gets (rounds count from 0).
    pub next_round: u64,
    /// The latest consolidated checkpoint (none before the first consolidation).
    pub checkpoint: Option<String>,
    /// Rounds in a row in which no copy succeeded.
    pub failed_rounds: u32,
    /// Why it failed or was cancelled, for `hadar status` and the finish step.
    pub message: Option<String>,
    /// The outer optimizer's velocity after the latest consolidated round, when that round
    /// took an outer step with momentum (set with `checkpoint`, in the same transaction).
    #[serde(default)]
    pub momentum: Option<String>,
}

impl ForkJob {
    /// A forked job not yet run.
    pub fn new(job: u64, total_steps: f64) -> ForkJob {
        ForkJob {
            job,
            state: ForkState::Active,
            total_steps,
            steps_done: 0.0,
            next_round: 0,
            checkpoint: None,
            failed_rounds: 0,
            message: None,
            momentum: None,
        }
    }

    /// Percent of the total done, 0 to 100.
    pub fn percent(&self) -> f64 {
        if self.total_steps <= 0.0 {
            return 100.0;
        }
        (100.0 * self.steps_done / self.total_steps).clamp(0.0, 100.0)
    }
}

/// Where one round of a forked job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoundState {
    /// Written before the copy job is submitted (an intent): the copy job id is not known yet.
    Submitting,
    /// The copy job was submitted and has not been consolidated.
    Running,
    /// Its copies were averaged and its steps counted.
    Consolidated,
    /// No copy succeeded (or consolidation failed): nothing counted, the job's checkpoint is
    /// unchanged.
    Failed,
    /// Given up without result (the logical job was cancelled, or the copy job was lost
    /// before it was submitted): nothing counted; the next round redoes the work.
    Abandoned,
}

impl RoundState {
    /// The state as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RoundState::Submitting => "submitting",
            RoundState::Running => "running",
            RoundState::Consolidated => "consolidated",
            RoundState::Failed => "failed",
            RoundState::Abandoned => "abandoned",
        }
    }

    /// True while the round is neither counted nor given up.
    pub fn is_open(self) -> bool {
        matches!(self, RoundState::Submitting | RoundState::Running)
    }
}

/// One copy of one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkCopy {
    /// The node it runs on.
    pub node: String,
    /// The GPU type it uses.
    pub gpu_type: String,
    /// GPUs it uses.
    pub gpus: u32,
    /// The most steps it may do this round.
    pub budget: u64,
    /// Where it writes its checkpoint.
    pub checkpoint: String,
    /// Where the fork runner writes its result.
    pub result: String,
    /// Steps it reported (set at consolidation; 0 for a failed copy).
    pub steps: Option<f64>,
    /// Whether it kept the contract and exited 0 (set at consolidation).
    pub ok: Option<bool>,
    /// Its exit status (set at consolidation when known).
    pub exit_code: Option<i32>,
    /// Its consolidation weight, `steps / aggregated steps` (set at consolidation).
    pub weight: Option<f64>,
    /// Wall-clock seconds its program ran, as the fork runner measured them (set at
    /// consolidation; absent in rounds recorded before runners reported it).
    #[serde(default)]
    pub seconds: Option<f64>,
    /// The inner optimizer state the previous round's copy of the same index left beside
    /// its checkpoint (`--inner-state-from`), when there was one.
    #[serde(default)]
    pub inner_state_from: Option<String>,
}

/// One round of one forked job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkRound {
    /// The logical job.
    pub job: u64,
    /// The round, from 0.
    pub round: u64,
    /// Its state.
    pub state: RoundState,
    /// The heterogeneous Slurm job running the copies, once submitted.
    pub copy_job: Option<u64>,
    /// The copy job's name (how a restarted daemon finds a copy job whose id it never saw).
    pub copy_job_name: String,
    /// The copies, in component order.
    pub copies: Vec<ForkCopy>,
    /// The consolidated checkpoint the copies start from (none in round 0).
    pub start_from: Option<String>,
    /// The consolidated checkpoint this round writes.
    pub consolidated: String,
    /// Unix time by which every copy must have written its checkpoint and exited.
    pub deadline_unix: u64,
    /// When the round was planned, seconds since the store's epoch.
    pub started_s: f64,
    /// When it was consolidated or given up, seconds since the epoch.
    pub ended_s: Option<f64>,
    /// Steps counted for it (the sum over successful copies; set at consolidation).
    pub steps: f64,
    /// What went wrong, for a failed or abandoned round.
    pub message: Option<String>,
    /// How the copies are consolidated; `None`: their weighted mean.
    #[serde(default)]
    pub outer: Option<OuterStep>,
    /// Seconds the copy job ran as Slurm shows them (`EndTime - StartTime` of its leader,
    /// what `sacct` bills as `Elapsed`), set when the round is consolidated or fails.
    #[serde(default)]
    pub copy_seconds: Option<f64>,
}

impl ForkRound {
    /// GPU-seconds the round's copy job used: its GPUs times [`ForkRound::copy_seconds`]
    /// (0 while unknown).
    pub fn gpu_seconds(&self) -> f64 {
        let gpus: u32 = self.copies.iter().map(|c| c.gpus).sum();
        f64::from(gpus) * self.copy_seconds.unwrap_or(0.0)
    }
}

/// A round's outer Nesterov step (`hadar average --outer nesterov`), fixed when the round is
/// planned so that a consolidation repeated after a crash is the same command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OuterStep {
    /// The outer learning rate.
    pub lr: f64,
    /// The outer momentum.
    pub momentum: f64,
    /// The previous round's velocity (none: zero).
    pub momentum_from: Option<String>,
    /// Where this round's velocity goes (a new file each round, never the one read).
    pub momentum_out: Option<String>,
}

impl Store {
    /// Every forked job, by id.
    pub fn fork_jobs(&self) -> Result<Vec<ForkJob>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT job, data FROM fork_jobs ORDER BY job")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (job, data) = row.map_err(self.err())?;
            out.push(self.decode(&data, "fork job", job as u64)?);
        }
        Ok(out)
    }

    /// One forked job.
    pub fn fork_job(&self, job: u64) -> Result<Option<ForkJob>, StoreError> {
        let data: Option<String> = self
            .conn
            .query_row(
                "SELECT data FROM fork_jobs WHERE job = ?1",
                params![job as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        data.map(|d| self.decode(&d, "fork job", job)).transpose()
    }

    /// Every round of one forked job, oldest first.
    pub fn fork_rounds(&self, job: u64) -> Result<Vec<ForkRound>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT data FROM fork_rounds WHERE job = ?1 ORDER BY round")
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![job as i64], |r| r.get::<_, String>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(self.decode(&row.map_err(self.err())?, "fork round", job)?);
        }
        Ok(out)
    }

    /// The round of a forked job that is neither counted nor given up, if any.
    pub fn open_fork_round(&self, job: u64) -> Result<Option<ForkRound>, StoreError> {
        Ok(self
            .fork_rounds(job)?
            .into_iter()
            .rev()
            .find(|r| r.state.is_open()))
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        data: &str,
        what: &'static str,
        job: u64,
    ) -> Result<T, StoreError> {
        serde_json::from_str(data).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            what,
            job,
            reason: e.to_string(),
        })
    }
}

impl Writer<'_> {
    fn json<T: Serialize>(
        &self,
        v: &T,
        what: &'static str,
        job: u64,
    ) -> Result<String, StoreError> {
        serde_json::to_string(v).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            what,
            job,
            reason: e.to_string(),
        })
    }

    /// Inserts or replaces a forked job.
    pub fn put_fork_job(&mut self, job: &ForkJob) -> Result<(), StoreError> {
        let data = self.json(job, "fork job", job.job)?;
        self.tx
            .execute(
                "INSERT INTO fork_jobs(job, state, data) VALUES (?1, ?2, ?3) ON CONFLICT(job) DO UPDATE SET state = excluded.state, data = excluded.data",
                params![job.job as i64, job.state.as_str(), data],
            )
            .map(|_| ())
            .map_err(self.err())
    }

    /// Inserts or replaces a round. Refuses to overwrite a consolidated round (its steps are
    /// counted; only [`Writer::consolidate_round`] may write that state).
    pub fn put_fork_round(&mut self, round: &ForkRound) -> Result<(), StoreError> {
        if round.state == RoundState::Consolidated {
            return Err(self.refusal(
                round,
                "only consolidate_round may mark a round consolidated",
            ));
        }
        if self.round_state(round.job, round.round)? == Some(RoundState::Consolidated) {
            return Err(self.refusal(round, "the round is consolidated and counted already"));
        }
        self.write_round(round)
    }

    fn refusal(&self, round: &ForkRound, why: &str) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what: "fork round",
            job: round.job,
            reason: format!("round {}: {why}", round.round),
        }
    }

    fn write_round(&mut self, round: &ForkRound) -> Result<(), StoreError> {
        let data = self.json(round, "fork round", round.job)?;
        self.tx
            .execute(
                "INSERT INTO fork_rounds(job, round, state, data) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(job, round) DO UPDATE SET state = excluded.state, data = excluded.data",
                params![round.job as i64, round.round as i64, round.state.as_str(), data],
            )
            .map(|_| ())
            .map_err(self.err())
    }

    fn round_state(&self, job: u64, round: u64) -> Result<Option<RoundState>, StoreError> {
        let state: Option<String> = self
            .tx
            .query_row(
                "SELECT state FROM fork_rounds WHERE job = ?1 AND round = ?2",
                params![job as i64, round as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        Ok(state.map(|s| match s.as_str() {
            "submitting" => RoundState::Submitting,
            "running" => RoundState::Running,
            "consolidated" => RoundState::Consolidated,
            "failed" => RoundState::Failed,
            _ => RoundState::Abandoned,
        }))
    }

    /// Marks `round` consolidated and adds its steps (the sum of its copies' steps) to the
    /// job's aggregate, sets the job's checkpoint to the round's consolidated one, and marks
    /// the job done when the aggregate reaches its total, all in this transaction. A round
    /// already consolidated is left alone and nothing is added: returns `false` then, `true`
    /// when the round was counted now. The job and round must exist.
    pub fn consolidate_round(&mut self, round: &ForkRound) -> Result<bool, StoreError> {
        if self.round_state(round.job, round.round)? == Some(RoundState::Consolidated) {
            return Ok(false);
        }
        let data: Option<String> = self
            .tx
            .query_row(
                "SELECT data FROM fork_jobs WHERE job = ?1",
                params![round.job as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        let Some(data) = data else {
            return Err(self.refusal(round, "its forked job is not in the store"));
        };
        let mut job: ForkJob = serde_json::from_str(&data).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            what: "fork job",
            job: round.job,
            reason: e.to_string(),
        })?;
        let mut r = round.clone();
        r.state = RoundState::Consolidated;
        r.steps = r.copies.iter().filter_map(|c| c.steps).sum();
        job.steps_done += r.steps;
        job.checkpoint = Some(r.consolidated.clone());
        // The velocity moves with the checkpoint: a round without an outer step (or without
        // momentum) leaves none, and the next round starts from zero.
        job.momentum = r.outer.as_ref().and_then(|o| o.momentum_out.clone());
        job.failed_rounds = 0;
        job.next_round = job.next_round.max(r.round + 1);
        if job.steps_done >= job.total_steps && job.state == ForkState::Active {
            job.state = ForkState::Done;
        }
        self.write_round(&r)?;
        self.put_fork_job(&job)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(node: &str, t: &str, steps: Option<f64>) -> ForkCopy {
        ForkCopy {
            node: node.into(),
            gpu_type: t.into(),
            gpus: 1,
            budget: 100,
            checkpoint: format!("/s/{node}.safetensors"),
            result: format!("/s/{node}.json"),
            steps,
            ok: steps.map(|_| true),
            exit_code: steps.map(|_| 0),
            weight: None,
            seconds: None,
            inner_state_from: None,
        }
    }

    fn round(job: u64, r: u64, steps: [f64; 2]) -> ForkRound {
        ForkRound {
            job,
            round: r,
            state: RoundState::Running,
            copy_job: Some(100 + r),
            copy_job_name: format!("hadar-fork-{job}-r{r}"),
            copies: vec![
                copy("n1", "v100", Some(steps[0])),
                copy("n3", "k80", Some(steps[1])),
            ],
            start_from: None,
            consolidated: format!("/s/round-{r}.safetensors"),
            deadline_unix: 0,
            started_s: 0.0,
            ended_s: None,
            steps: 0.0,
            message: None,
            outer: None,
            copy_seconds: None,
        }
    }

    #[test]
    fn a_rounds_gpu_seconds_are_its_copies_gpus_times_slurms_run_time() {
        let mut r = round(5, 0, [10.0, 10.0]);
        assert_eq!(r.gpu_seconds(), 0.0, "unknown until consolidated");
        r.copies[0].gpus = 2;
        r.copy_seconds = Some(7.0);
        let gpus: u32 = r.copies.iter().map(|c| c.gpus).sum();
        assert_eq!(r.gpu_seconds(), f64::from(gpus) * 7.0);
        // Rounds stored before the field existed read back without it.
        let mut v = serde_json::to_value(&r).unwrap();
        v.as_object_mut().unwrap().remove("copy_seconds");
        let old: ForkRound = serde_json::from_value(v).unwrap();
        assert_eq!(old.copy_seconds, None);
    }

    #[test]
    fn the_velocity_moves_with_the_checkpoint_and_rounds_without_one_clear_it() {
        let mut s = Store::in_memory().unwrap();
        let with_outer = |r: u64, out: Option<&str>| ForkRound {
            outer: Some(OuterStep {
                lr: 1.0,
                momentum: 0.5,
                momentum_from: None,
                momentum_out: out.map(String::from),
            }),
            ..round(5, r, [10.0, 10.0])
        };
        s.write(|w| {
            w.put_fork_job(&ForkJob::new(5, 1000.0))?;
            w.put_fork_round(&round(5, 0, [10.0, 10.0]))?;
            w.consolidate_round(&round(5, 0, [10.0, 10.0]))
        })
        .unwrap();
        assert_eq!(s.fork_job(5).unwrap().unwrap().momentum, None);
        s.write(|w| {
            w.put_fork_round(&with_outer(1, Some("/s/momentum-1")))?;
            w.consolidate_round(&with_outer(1, Some("/s/momentum-1")))
        })
        .unwrap();
        let j = s.fork_job(5).unwrap().unwrap();
        assert_eq!(j.momentum.as_deref(), Some("/s/momentum-1"));
        // Counting round 1 again (a crash after the commit) changes nothing.
        assert!(
            !s.write(|w| w.consolidate_round(&with_outer(1, Some("/s/x"))))
                .unwrap()
        );
        assert_eq!(s.fork_job(5).unwrap().unwrap(), j);
        s.write(|w| {
            w.put_fork_round(&round(5, 2, [10.0, 10.0]))?;
            w.consolidate_round(&round(5, 2, [10.0, 10.0]))
        })
        .unwrap();
        assert_eq!(s.fork_job(5).unwrap().unwrap().momentum, None);
    }

    #[test]
    fn a_round_is_counted_once_even_when_consolidation_is_repeated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut s = Store::open(&path).unwrap();
        s.write(|w| {
            w.put_fork_job(&ForkJob::new(7, 500.0))?;
            w.put_fork_round(&round(7, 0, [120.0, 80.0]))
        })
        .unwrap();
        assert_eq!(s.open_fork_round(7).unwrap().unwrap().round, 0);
        assert!(
            s.write(|w| w.consolidate_round(&round(7, 0, [120.0, 80.0])))
                .unwrap()
        );
        // A daemon that crashed after committing, restarted, and consolidates again (from a
        // stale copy of the round) adds nothing.
        drop(s);
        let mut s = Store::open(&path).unwrap();
        assert!(
            !s.write(|w| w.consolidate_round(&round(7, 0, [120.0, 80.0])))
                .unwrap()
        );
        let e = s.write(|w| w.put_fork_round(&round(7, 0, [1.0, 1.0])));
        assert!(e.is_err(), "a counted round cannot be reopened");
        let j = s.fork_job(7).unwrap().unwrap();
        assert_eq!(j.steps_done, 200.0);
        assert_eq!(j.next_round, 1);
        assert_eq!(j.checkpoint.as_deref(), Some("/s/round-0.safetensors"));
        assert!(s.open_fork_round(7).unwrap().is_none());
        // The next rounds reach the total: the job is done with exactly the sum counted.
        s.write(|w| {
            w.put_fork_round(&round(7, 1, [150.0, 50.0]))?;
            w.consolidate_round(&round(7, 1, [150.0, 50.0]))?;
            w.put_fork_round(&round(7, 2, [60.0, 40.0]))?;
            w.consolidate_round(&round(7, 2, [60.0, 40.0]))
        })
        .unwrap();
        let j = s.fork_job(7).unwrap().unwrap();
        assert_eq!((j.steps_done, j.state), (500.0, ForkState::Done));
        let rounds = s.fork_rounds(7).unwrap();
        assert_eq!(rounds.len(), 3);
        assert!(rounds.iter().all(|r| r.state == RoundState::Consolidated));
        assert_eq!(rounds.iter().map(|r| r.steps).sum::<f64>(), j.steps_done);
    }

    #[test]
    fn an_interrupted_transaction_counts_nothing() {
        let mut s = Store::in_memory().unwrap();
        s.write(|w| {
            w.put_fork_job(&ForkJob::new(3, 100.0))?;
            w.put_fork_round(&round(3, 0, [10.0, 20.0]))
        })
        .unwrap();
        let r: Result<(), StoreError> = s.write(|w| {
            w.consolidate_round(&round(3, 0, [10.0, 20.0]))?;
            Err(StoreError::Version {
                path: "crash".into(),
                found: 0,
                expected: 0,
            })
        });
        assert!(r.is_err());
        let j = s.fork_job(3).unwrap().unwrap();
        assert_eq!(j.steps_done, 0.0);
        assert_eq!(
            s.open_fork_round(3).unwrap().unwrap().state,
            RoundState::Running
        );
        assert!(
            s.write(|w| w.consolidate_round(&round(3, 0, [10.0, 20.0])))
                .unwrap()
        );
        assert_eq!(s.fork_job(3).unwrap().unwrap().steps_done, 30.0);
    }

    #[test]
    fn a_version_1_database_is_migrated_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(crate::schema::CREATE).unwrap();
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', '1')",
                [],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO jobs(id, phase, data) VALUES (5, 'waiting', ?1)",
                params![
                    serde_json::to_string(&crate::JobRow::new(
                        5,
                        "j".into(),
                        "r".into(),
                        1,
                        10.0,
                        0.0
                    ))
                    .unwrap()
                ],
            )
            .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        assert_eq!(
            s.meta("schema_version").unwrap().as_deref(),
            Some(crate::SCHEMA_VERSION.to_string().as_str())
        );
        assert_eq!(s.jobs().unwrap().len(), 1, "old rows kept");
        // Version 3's lease table and intent holders exist.
        assert_eq!(s.lease().unwrap(), None);
        s.write(|w| w.add_intent(1, 5, crate::IntentKind::Hold, None, 0.0))
            .unwrap();
        assert_eq!(s.all_intents().unwrap()[0].holder, None);
        s.write(|w| w.put_fork_job(&ForkJob::new(5, 10.0))).unwrap();
        assert_eq!(s.fork_jobs().unwrap().len(), 1);
    }
}
