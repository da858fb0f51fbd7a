//! The database schema. Bump [`SCHEMA_VERSION`] on any change and add the step from the
//! previous version to [`MIGRATIONS`]: an older database is migrated in place, in one
//! transaction, when the daemon opens it; a newer one is refused rather than misread.

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 4;

/// Creates every table of version 1 (run once, in the transaction that creates the
/// database; the migrations then bring it to [`SCHEMA_VERSION`]).
pub const CREATE: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (id INTEGER PRIMARY KEY, phase TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX jobs_phase ON jobs(phase);
CREATE TABLE learned_rates (
    job INTEGER NOT NULL, gpu_type TEXT NOT NULL, workers INTEGER NOT NULL,
    rate REAL NOT NULL, samples INTEGER NOT NULL,
    PRIMARY KEY (job, gpu_type, workers));
CREATE TABLE intents (
    id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL, job INTEGER NOT NULL,
    action TEXT NOT NULL, placement TEXT, created_s REAL NOT NULL, done_s REAL, outcome TEXT);
CREATE TABLE rounds (round INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE decisions (job INTEGER PRIMARY KEY, data TEXT NOT NULL);
";

/// `(from version, SQL that brings it to from + 1)`, in order.
pub const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        // Version 2: the persisted Job Tracker of forked (HadarE) jobs: one row per logical job
        // (its aggregated steps and latest consolidated checkpoint) and one per (job, round)
        // (copies, nodes, types, steps, checkpoints, consolidation weights).
        "
CREATE TABLE fork_jobs (job INTEGER PRIMARY KEY, state TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE fork_rounds (
    job INTEGER NOT NULL, round INTEGER NOT NULL, state TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (job, round));
",
    ),
    (
        2,
        // Version 3: the leader's lease (one row; daemons sharing the database take turns)
        // and, on each intent, the daemon that wrote it, so the action log shows who acted.
        "
CREATE TABLE lease (
    id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL,
    expires_unix REAL NOT NULL, term INTEGER NOT NULL);
ALTER TABLE intents ADD COLUMN holder TEXT;
",
    ),
    (
        3,
        // Version 4: each round's snapshot and decision, for `hadar replay`; the inputs a
        // round was decided with besides its snapshot (the configuration as the daemon used
        // it and the throughput table) are kept once per distinct content, by digest.
        "
CREATE TABLE round_inputs (digest TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE round_snapshots (
    round INTEGER PRIMARY KEY, started_s REAL NOT NULL,
    inputs TEXT NOT NULL REFERENCES round_inputs(digest), data TEXT NOT NULL);
",
    ),
];
