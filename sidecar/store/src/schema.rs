//! The database schema. Bump [`SCHEMA_VERSION`] on any change; an older or newer database is
//! refused rather than misread.

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 1;

/// Creates every table (run once, in the transaction that creates the database).
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
