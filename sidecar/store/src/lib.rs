//! The hadar daemon's state, kept in one SQLite database (WAL mode).
//!
//! Slurm is the source of truth for which jobs exist and where they run; this store keeps
//! what Slurm does not: each managed job's progress and service so far, the rates learned
//! from its progress reports, the intent of every action before it is carried out (so a
//! restarted daemon knows what it may have left half done), and each round's plan with its
//! reasons (which `hadar status` and `hadar explain` read), and the Job Tracker of forked
//! (HadarE) jobs ([`fork`]). History past a configured horizon is pruned ([`Store::prune`]).
//! The schema carries a version and older databases are migrated
//! in place; every write is one transaction.

pub mod fork;
pub mod intent;
mod prune;
mod schema;
mod snapshots;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

pub use fork::{ForkCopy, ForkJob, ForkRound, ForkState, OuterStep, RoundState};
pub use intent::{IntentKind, Outcome};
pub use lease::{Lease, LeaseGrant};
pub use prune::{Horizon, Pruned};
pub use schema::SCHEMA_VERSION;
pub use snapshots::KeptRound;

pub mod lease;

/// What went wrong with the state database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused an operation.
    #[error("state database {path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file has no hadar tables (yet): a daemon that is creating it has not finished, or
    /// the file is not a hadar state database.
    #[error(
        "state database {path} has no hadar tables yet: a starting daemon has not finished creating it, or it is not hadar's state database"
    )]
    NoSchema {
        /// The database file.
        path: String,
    },
    /// The database was written by another schema version.
    #[error(
        "state database {path} has schema version {found}, this hadar uses {expected}; move it aside or use the matching hadar"
    )]
    Version {
        /// The database file.
        path: String,
        /// The version found.
        found: i64,
        /// The version this build uses.
        expected: i64,
    },
    /// This daemon no longer holds the leader's lease (another daemon took it, or it
    /// expired while this one was paused): nothing may be done.
    #[error(
        "not the leader: the lease is held by {holder} until {expires_unix:.0} (this daemon is {me})"
    )]
    NotLeader {
        /// This daemon.
        me: String,
        /// The lease's holder.
        holder: String,
        /// Its expiry, Unix seconds.
        expires_unix: f64,
    },
    /// A stored JSON value could not be read back.
    #[error("state database {path}: corrupt {what} for job {job}: {reason}")]
    Corrupt {
        /// The database file.
        path: String,
        /// The column.
        what: &'static str,
        /// The job.
        job: u64,
        /// The parser's message.
        reason: String,
    },
}

/// Where a managed job stands, from the daemon's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Held by Slurm, waiting for a placement.
    Waiting,
    /// Given a placement and released; not yet seen running.
    Starting,
    /// Running.
    Running,
    /// Signalled to checkpoint; to be requeued held.
    Preempting,
    /// Left Slurm's queue for good (completed, failed, cancelled, ...).
    Finished,
}

impl Phase {
    /// The phase as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Preempting => "preempting",
            Phase::Finished => "finished",
        }
    }
}

/// GPUs per node and type, as `(node, [(type, count)])`; the store's spelling of a placement.
pub type NodeGpus = Vec<(String, Vec<(String, u32)>)>;

/// One managed job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    /// Slurm's job id.
    pub id: u64,
    /// The owner's numeric user id, when known.
    pub user_id: Option<u32>,
    /// The owner's numeric group id, when known.
    #[serde(default)]
    pub group_id: Option<u32>,
    /// The job's name.
    pub name: String,
    /// The hadar record from the job's AdminComment.
    pub record: String,
    /// Number of GPUs (workers) the job trains with.
    pub workers: u32,
    /// Steps to complete.
    pub total_steps: f64,
    /// Arrival, seconds since the store's epoch.
    pub arrival_s: f64,
    /// The daemon's view of the job.
    pub phase: Phase,
    /// Its current (or intended) placement.
    pub placement: Option<NodeGpus>,
    /// Steps done, from its last progress report (or checkpoint).
    pub steps_done: f64,
    /// Steps/s it last reported.
    pub last_rate: Option<f64>,
    /// When it last reported, seconds since the epoch.
    pub last_report_s: Option<f64>,
    /// Seconds it has run.
    pub run_s: f64,
    /// Seconds it has run with at least one GPU of each type, by type name.
    pub run_s_by_type: BTreeMap<String, f64>,
    /// GPU-seconds received.
    pub attained_gpu_s: f64,
    /// Rounds in which it ran.
    pub rounds_run: u32,
    /// When it first ran, seconds since the epoch.
    pub first_start_s: Option<f64>,
    /// When it finished, seconds since the epoch.
    pub finished_s: Option<f64>,
    /// Slurm's final state word (`completed`, `cancelled`, ...).
    pub final_state: Option<String>,
    /// Times the daemon released it onto a placement.
    pub starts: u32,
    /// Times the daemon preempted it.
    pub preemptions: u32,
    /// Slurm's restart count when the daemon last saw it.
    pub restarts: u32,
    /// While it runs: the time up to which its run time is counted, seconds since the epoch.
    pub accounted_s: Option<f64>,
    /// The GPU types of its first placement. Slurm 22.05 keeps a job's first GPU types: a
    /// later request of other types leaves it pending forever (BadConstraints), so the
    /// daemon places it again only on these types.
    #[serde(default)]
    pub bound_types: Option<Vec<String>>,
    /// For an element of a job array, its name as Slurm prints it (`12_3`): an element
    /// split off its array gets a job id of its own, which users do not know it by.
    #[serde(default)]
    pub array_task: Option<String>,
}

impl JobRow {
    /// A job just seen for the first time.
    pub fn new(
        id: u64,
        name: String,
        record: String,
        workers: u32,
        total_steps: f64,
        arrival_s: f64,
    ) -> JobRow {
        JobRow {
            id,
            user_id: None,
            group_id: None,
            name,
            record,
            workers,
            total_steps,
            arrival_s,
            phase: Phase::Waiting,
            placement: None,
            steps_done: 0.0,
            last_rate: None,
            last_report_s: None,
            run_s: 0.0,
            run_s_by_type: BTreeMap::new(),
            attained_gpu_s: 0.0,
            rounds_run: 0,
            first_start_s: None,
            finished_s: None,
            final_state: None,
            starts: 0,
            preemptions: 0,
            restarts: 0,
            accounted_s: None,
            bound_types: None,
            array_task: None,
        }
    }
}

/// A rate learned for one job on one GPU type and worker count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearnedRate {
    /// The job.
    pub job: u64,
    /// The GPU type.
    pub gpu_type: String,
    /// Workers.
    pub workers: u32,
    /// Steps/s, an exponentially weighted moving average of the reports.
    pub rate: f64,
    /// Reports folded in.
    pub samples: u32,
}

/// An action the daemon is about to take (or took).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// Its row id.
    pub id: i64,
    /// The round.
    pub round: u64,
    /// The job.
    pub job: u64,
    /// What it does (stored as `start`, `preempt`, `hold`, ...).
    pub action: IntentKind,
    /// The placement, for a start.
    pub placement: Option<NodeGpus>,
    /// When it was written, seconds since the epoch.
    pub created_s: f64,
    /// When it was carried out, if it was.
    pub done_s: Option<f64>,
    /// What happened (stored as `ok`, `skipped: WHY`, `error: WHY` or `interrupted`).
    pub outcome: Option<Outcome>,
    /// The daemon that wrote it (`host:pid`), when it ran under a lease.
    #[serde(default)]
    pub holder: Option<String>,
}

/// One round's summary, for `hadar status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundRow {
    /// Round number, from 1.
    pub round: u64,
    /// When it started, seconds since the epoch.
    pub started_s: f64,
    /// Wall-clock milliseconds the policy took to decide.
    pub decision_ms: f64,
    /// The policy that decided.
    pub policy: String,
    /// The Slurm release the round talked to (`26.05.3`), when known.
    #[serde(default)]
    pub slurm_release: Option<String>,
    /// Usable GPUs per type.
    pub capacity: BTreeMap<String, u32>,
    /// GPUs per type given to managed jobs by the plan.
    pub planned_use: BTreeMap<String, u32>,
    /// GPUs per type held by jobs Slurm shows running (managed or not) at the round's start.
    pub busy: BTreeMap<String, u32>,
    /// Nodes left out of the cluster view, with their state.
    pub unusable_nodes: Vec<(String, String)>,
    /// Hadar's price bounds `(L, U)` for the round, when it had any.
    pub price_bounds: Option<(f64, f64)>,
    /// Per-GPU price of each (node, type) after the plan, as `(node, type, price)`.
    pub prices: Vec<(String, String, f64)>,
    /// Actions taken: `(job, action)`.
    pub actions: Vec<(u64, String)>,
    /// Each node of the managed partitions with GPUs, for `hadar status` per partition and
    /// per node (empty in rounds recorded before it was kept).
    #[serde(default)]
    pub nodes: Vec<NodeRow>,
}

/// One node's GPUs in a round.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    /// The node.
    pub name: String,
    /// Its managed partitions (all of its partitions when every partition is managed).
    pub partitions: Vec<String>,
    /// Its Slurm state, when it is left out of scheduling; `None` when usable.
    pub unusable: Option<String>,
    /// GPUs per type.
    pub gpus: BTreeMap<String, u32>,
    /// GPUs per type held by running jobs (managed or not) at the round's start.
    pub busy: BTreeMap<String, u32>,
    /// GPUs per type the plan gives to managed jobs.
    pub planned: BTreeMap<String, u32>,
}

/// What the last round decided for one job, for `hadar explain`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The job.
    pub job: u64,
    /// The round.
    pub round: u64,
    /// True when the job runs this round.
    pub runs: bool,
    /// Its placement when it runs.
    pub placement: Option<NodeGpus>,
    /// Its expected steps/s there.
    pub rate: Option<f64>,
    /// The policy's payoff (utility minus price) for it.
    pub payoff: Option<f64>,
    /// The policy's reason when it waits (machine-readable JSON of the core's WaitReason).
    pub wait_reason: Option<serde_json::Value>,
    /// The explanation in words.
    pub text: String,
}

impl Decision {
    /// A decision that the job waits, with no reason or words yet (filled in by the caller).
    pub fn new(job: u64, round: u64) -> Decision {
        Decision {
            job,
            round,
            runs: false,
            placement: None,
            rate: None,
            payoff: None,
            wait_reason: None,
            text: String::new(),
        }
    }
}

/// The state database.
pub struct Store {
    conn: Connection,
    path: String,
    /// When set, every intent is written only under this daemon's lease (see [`lease`]).
    fence: Option<Fence>,
}

/// Who this daemon is and how long a renewal lasts, for the lease check of each intent.
#[derive(Clone, Debug)]
struct Fence {
    holder: String,
    ttl: f64,
    /// The daemon's clock minus the system clock at the grant (0 in service; tests drive
    /// the daemon with their own clock), so each intent's check reads the daemon's time.
    offset: f64,
}

fn read_lease(conn: &Connection) -> rusqlite::Result<Option<Lease>> {
    conn.query_row(
        "SELECT holder, expires_unix, term FROM lease WHERE id = 1",
        [],
        |r| {
            Ok(Lease {
                holder: r.get(0)?,
                expires_unix: r.get(1)?,
                term: r.get::<_, i64>(2)? as u64,
            })
        },
    )
    .optional()
}

fn write_lease(conn: &Connection, l: &Lease) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO lease(id, holder, expires_unix, term) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT(id) DO UPDATE SET holder = excluded.holder, expires_unix = excluded.expires_unix, term = excluded.term",
        params![l.holder, l.expires_unix, l.term as i64],
    )
    .map(|_| ())
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode, and checks or creates
    /// the schema.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let shown = path.display().to_string();
        let conn = Connection::open(path).map_err(|source| StoreError::Sqlite {
            path: shown.clone(),
            source,
        })?;
        Store::init(conn, shown)
    }

    /// Opens the database read-only (for `hadar status` and `explain`); it must exist.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let shown = path.display().to_string();
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|source| StoreError::Sqlite {
                path: shown.clone(),
                source,
            })?;
        let store = Store {
            conn,
            path: shown,
            fence: None,
        };
        let has_meta: bool = store
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|source| StoreError::Sqlite {
                path: store.path.clone(),
                source,
            })?;
        if !has_meta {
            return Err(StoreError::NoSchema { path: store.path });
        }
        store.check_version()?;
        Ok(store)
    }

    /// An in-memory database, for tests.
    pub fn in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Sqlite {
            path: ":memory:".into(),
            source,
        })?;
        Store::init(conn, ":memory:".into())
    }

    fn init(conn: Connection, path: String) -> Result<Store, StoreError> {
        let mut store = Store {
            conn,
            path,
            fence: None,
        };
        let p = store.path.clone();
        let err = |source| StoreError::Sqlite {
            path: p.clone(),
            source,
        };
        store
            .conn
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        store
            .conn
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        store
            .conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        let tx = store.conn.transaction().map_err(err)?;
        let has_meta: bool = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(err)?
            > 0;
        if !has_meta {
            tx.execute_batch(schema::CREATE).map_err(err)?;
            tx.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', '1')",
                [],
            )
            .map_err(err)?;
        }
        let mut version: i64 = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(err)?
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1);
        for (from, sql) in schema::MIGRATIONS {
            if version == *from {
                tx.execute_batch(sql).map_err(err)?;
                version = from + 1;
                tx.execute(
                    "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                    params![version.to_string()],
                )
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        store.check_version()?;
        Ok(store)
    }

    fn check_version(&self) -> Result<(), StoreError> {
        let found: i64 = self
            .meta("schema_version")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1);
        if found != SCHEMA_VERSION {
            return Err(StoreError::Version {
                path: self.path.clone(),
                found,
                expected: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Asks for the leader's lease as `me` at `now_unix` ([`lease::decide`], in one
    /// immediate transaction, so two daemons never both win); a holder that `died` (see
    /// [`lease::unless_holder_died`]) is not waited for. While it leads, every intent checks
    /// and extends the lease in its own transaction; on standby, intents are refused.
    pub fn acquire_lease(
        &mut self,
        me: &str,
        now_unix: f64,
        (ttl, skew): (f64, f64),
        died: &dyn Fn(&str) -> bool,
    ) -> Result<LeaseGrant, StoreError> {
        let grant = self.change_lease(|current| {
            let current = lease::unless_holder_died(current, me, died);
            let grant = lease::decide(current.as_ref(), me, now_unix, ttl, skew);
            let write = match &grant {
                LeaseGrant::Leading(l) => Some(l.clone()),
                LeaseGrant::Standby(_) => None,
            };
            (grant, write)
        })?;
        self.fence = Some(Fence {
            holder: me.to_string(),
            ttl,
            offset: now_unix - unix_now(),
        });
        Ok(grant)
    }

    /// Ends `me`'s lease on a clean stop ([`lease::resign`]); whether it held it.
    pub fn resign_lease(&mut self, me: &str) -> Result<bool, StoreError> {
        self.change_lease(|current| {
            let left = lease::resign(current, me);
            (left.is_some(), left)
        })
    }

    /// Reads the lease and writes what `change` makes of it (`None`: left as it is), in one
    /// immediate transaction, so that two daemons never both change it from the same state.
    fn change_lease<T>(
        &mut self,
        change: impl FnOnce(Option<&Lease>) -> (T, Option<Lease>),
    ) -> Result<T, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(err)?;
        let (out, write) = change(read_lease(&tx).map_err(err)?.as_ref());
        if let Some(l) = &write {
            write_lease(&tx, l).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(out)
    }

    /// The lease as stored (for `hadar status`).
    pub fn lease(&self) -> Result<Option<Lease>, StoreError> {
        read_lease(&self.conn).map_err(self.err())
    }

    /// A value from the `meta` table.
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.err())
    }

    /// Sets a value in the `meta` table.
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.conn
            .execute("INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value", params![key, value])
            .map(|_| ())
            .map_err(self.err())
    }

    /// The epoch (Unix seconds) all `_s` times count from: set on first use, then fixed.
    pub fn epoch(&mut self, now_unix: f64) -> Result<f64, StoreError> {
        if let Some(e) = self.meta("epoch_unix")?.and_then(|v| v.parse().ok()) {
            return Ok(e);
        }
        self.set_meta("epoch_unix", &now_unix.to_string())?;
        Ok(now_unix)
    }

    /// Runs `f` in one transaction; nothing is written unless it returns `Ok`.
    pub fn write<T>(
        &mut self,
        f: impl FnOnce(&mut Writer<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let path = self.path.clone();
        // Immediate when fenced: the lease read by an intent must not change before commit.
        let behavior = if self.fence.is_some() {
            rusqlite::TransactionBehavior::Immediate
        } else {
            rusqlite::TransactionBehavior::Deferred
        };
        let tx = self
            .conn
            .transaction_with_behavior(behavior)
            .map_err(|source| StoreError::Sqlite {
                path: path.clone(),
                source,
            })?;
        let mut w = Writer {
            tx,
            path: path.clone(),
            fence: self.fence.clone(),
        };
        let out = f(&mut w)?;
        w.tx.commit()
            .map_err(|source| StoreError::Sqlite { path, source })?;
        Ok(out)
    }

    /// Every job, by id.
    pub fn jobs(&self) -> Result<Vec<JobRow>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT data FROM jobs ORDER BY id")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(self.decode_job(&row.map_err(self.err())?)?);
        }
        Ok(out)
    }

    /// One job.
    pub fn job(&self, id: u64) -> Result<Option<JobRow>, StoreError> {
        let data: Option<String> = self
            .conn
            .query_row(
                "SELECT data FROM jobs WHERE id = ?1",
                params![id as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        data.map(|d| self.decode_job(&d)).transpose()
    }

    fn decode_job(&self, data: &str) -> Result<JobRow, StoreError> {
        serde_json::from_str(data).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            what: "job",
            job: 0,
            reason: e.to_string(),
        })
    }

    /// The rates learned for one job.
    pub fn learned_rates(&self, job: u64) -> Result<Vec<LearnedRate>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT gpu_type, workers, rate, samples FROM learned_rates WHERE job = ?1 ORDER BY gpu_type, workers")
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![job as i64], |r| {
                Ok(LearnedRate {
                    job,
                    gpu_type: r.get(0)?,
                    workers: r.get(1)?,
                    rate: r.get(2)?,
                    samples: r.get(3)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// Intents not yet carried out, oldest first.
    pub fn open_intents(&self) -> Result<Vec<Intent>, StoreError> {
        self.intents_where("done_s IS NULL")
    }

    /// Every intent, oldest first.
    pub fn all_intents(&self) -> Result<Vec<Intent>, StoreError> {
        self.intents_where("1")
    }

    /// The most recent intent about `job`, if any.
    pub fn last_intent(&self, job: u64) -> Result<Option<Intent>, StoreError> {
        Ok(self
            .intents_where(&format!(
                "id = (SELECT MAX(id) FROM intents WHERE job = {})",
                job as i64
            ))?
            .pop())
    }

    fn intents_where(&self, cond: &str) -> Result<Vec<Intent>, StoreError> {
        let sql = format!(
            "SELECT id, round, job, action, placement, created_s, done_s, outcome, holder FROM intents WHERE {cond} ORDER BY id"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| {
                let placement: Option<String> = r.get(4)?;
                Ok(Intent {
                    id: r.get(0)?,
                    round: r.get::<_, i64>(1)? as u64,
                    job: r.get::<_, i64>(2)? as u64,
                    action: word(r, 3)?,
                    placement: placement.and_then(|p| serde_json::from_str(&p).ok()),
                    created_s: r.get(5)?,
                    done_s: r.get(6)?,
                    outcome: r
                        .get::<_, Option<String>>(7)?
                        .map(|_| word(r, 7))
                        .transpose()?,
                    holder: r.get(8)?,
                })
            })
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// The most recent round.
    pub fn last_round(&self) -> Result<Option<RoundRow>, StoreError> {
        let data: Option<String> = self
            .conn
            .query_row(
                "SELECT data FROM rounds ORDER BY round DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        data.map(|d| {
            serde_json::from_str(&d).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                what: "round",
                job: 0,
                reason: e.to_string(),
            })
        })
        .transpose()
    }

    /// The latest decision about one job.
    pub fn decision(&self, job: u64) -> Result<Option<Decision>, StoreError> {
        let data: Option<String> = self
            .conn
            .query_row(
                "SELECT data FROM decisions WHERE job = ?1",
                params![job as i64],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.err())?;
        data.map(|d| {
            serde_json::from_str(&d).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                what: "decision",
                job,
                reason: e.to_string(),
            })
        })
        .transpose()
    }
}

impl Store {
    /// The decisions made in round `round` (one per job the round planned), by job.
    pub fn decisions_of_round(&self, round: u64) -> Result<Vec<Decision>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT data FROM decisions WHERE json_extract(data, '$.round') = ?1 ORDER BY job",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![round as i64], |r| r.get::<_, String>(0))
            .map_err(self.err())?;
        let mut out = Vec::new();
        for data in rows {
            let data = data.map_err(self.err())?;
            out.push(
                serde_json::from_str(&data).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    what: "decision",
                    job: 0,
                    reason: e.to_string(),
                })?,
            );
        }
        Ok(out)
    }
}

/// Writes inside one transaction (see [`Store::write`]).
pub struct Writer<'a> {
    tx: Transaction<'a>,
    path: String,
    fence: Option<Fence>,
}

impl Writer<'_> {
    fn err(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Inserts or replaces a job.
    pub fn put_job(&mut self, job: &JobRow) -> Result<(), StoreError> {
        let data = serde_json::to_string(job).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            what: "job",
            job: job.id,
            reason: e.to_string(),
        })?;
        self.tx
            .execute(
                "INSERT INTO jobs(id, phase, data) VALUES (?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET phase = excluded.phase, data = excluded.data",
                params![job.id as i64, job.phase.as_str(), data],
            )
            .map(|_| ())
            .map_err(self.err())
    }

    /// Folds one observed rate into a job's learned rate for `(gpu_type, workers)`:
    /// `new = alpha * observed + (1 - alpha) * old` (the first report is taken as is).
    /// Returns the new rate.
    pub fn learn_rate(
        &mut self,
        job: u64,
        gpu_type: &str,
        workers: u32,
        observed: f64,
        alpha: f64,
    ) -> Result<f64, StoreError> {
        let old: Option<(f64, u32)> = self
            .tx
            .query_row(
                "SELECT rate, samples FROM learned_rates WHERE job = ?1 AND gpu_type = ?2 AND workers = ?3",
                params![job as i64, gpu_type, workers],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        let (rate, samples) = match old {
            Some((r, n)) => (alpha * observed + (1.0 - alpha) * r, n + 1),
            None => (observed, 1),
        };
        self.tx
            .execute(
                "INSERT INTO learned_rates(job, gpu_type, workers, rate, samples) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(job, gpu_type, workers) DO UPDATE SET rate = excluded.rate, samples = excluded.samples",
                params![job as i64, gpu_type, workers, rate, samples],
            )
            .map_err(self.err())?;
        Ok(rate)
    }

    /// Writes an intent before acting; returns its id.
    pub fn add_intent(
        &mut self,
        round: u64,
        job: u64,
        action: IntentKind,
        placement: Option<&NodeGpus>,
        now_s: f64,
    ) -> Result<i64, StoreError> {
        let placement = placement.map(|p| serde_json::to_string(p).unwrap_or_default());
        // Fenced: no action without the lease, and each intent extends it (a long round,
        // such as a preemption's grace period, keeps its lease as long as it acts).
        let holder = match &self.fence {
            Some(f) => {
                let now = unix_now() + f.offset;
                let current = read_lease(&self.tx).map_err(self.err())?;
                if !lease::may_act(current.as_ref(), &f.holder, now) {
                    let l = current.unwrap_or(Lease {
                        holder: "nobody".into(),
                        expires_unix: 0.0,
                        term: 0,
                    });
                    return Err(StoreError::NotLeader {
                        me: f.holder.clone(),
                        holder: l.holder,
                        expires_unix: l.expires_unix,
                    });
                }
                if let Some(mut l) = current {
                    l.expires_unix = l.expires_unix.max(now + f.ttl);
                    write_lease(&self.tx, &l).map_err(self.err())?;
                }
                Some(f.holder.clone())
            }
            None => None,
        };
        self.tx
            .execute(
                "INSERT INTO intents(round, job, action, placement, created_s, holder) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![round as i64, job as i64, action.as_str(), placement, now_s, holder],
            )
            .map_err(self.err())?;
        Ok(self.tx.last_insert_rowid())
    }

    /// Marks an intent carried out, with its outcome.
    pub fn close_intent(
        &mut self,
        id: i64,
        now_s: f64,
        outcome: &Outcome,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "UPDATE intents SET done_s = ?2, outcome = ?3 WHERE id = ?1",
                params![id, now_s, outcome.to_string()],
            )
            .map(|_| ())
            .map_err(self.err())
    }

    /// Saves a round's summary and its per-job decisions (replacing earlier decisions).
    pub fn put_round(
        &mut self,
        round: &RoundRow,
        decisions: &[Decision],
    ) -> Result<(), StoreError> {
        let data = serde_json::to_string(round).unwrap_or_default();
        self.tx
            .execute(
                "INSERT INTO rounds(round, data) VALUES (?1, ?2) ON CONFLICT(round) DO UPDATE SET data = excluded.data",
                params![round.round as i64, data],
            )
            .map_err(self.err())?;
        for d in decisions {
            let data = serde_json::to_string(d).unwrap_or_default();
            self.tx
                .execute(
                    "INSERT INTO decisions(job, data) VALUES (?1, ?2) ON CONFLICT(job) DO UPDATE SET data = excluded.data",
                    params![d.job as i64, data],
                )
                .map_err(self.err())?;
        }
        Ok(())
    }

    /// Sets a value in the `meta` table.
    pub fn set_meta(&mut self, key: &str, value: &str) -> Result<(), StoreError> {
        self.tx
            .execute("INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value", params![key, value])
            .map(|_| ())
            .map_err(self.err())
    }
}

/// Column `i` of a row, a stored word read as its type (an intent's kind or outcome).
fn word<T>(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<T>
where
    T: std::str::FromStr<Err = intent::UnknownWord>,
{
    let text: String = r.get(i)?;
    text.parse().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

#[cfg(test)]
mod tests;
