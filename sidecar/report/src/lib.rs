//! Reports people look at: per-job CSV and SVG plots of one or more scheduling runs, from the
//! simulator (`hadar simulate --report DIR`) or from a `hadar serve` state database
//! (`hadar report --state DB`). The caller turns its own records into [`Run`]s; this crate
//! computes the series ([`series`]) and writes the files ([`write_report`]).

mod error;
mod jobs_csv;
mod plot;
pub mod series;
pub mod shadow;

pub use error::ReportError;
pub use shadow::{ShadowComparison, ShadowRow, write_shadow};

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One job of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobRecord {
    /// The job's id.
    pub id: u64,
    /// Its kind or name (a job type, a Slurm job name).
    pub kind: String,
    /// GPUs it asked for.
    pub gpus: u32,
    /// When it arrived (submitted), in seconds on the run's clock.
    pub arrival_s: f64,
    /// When it first started; `None` if it never did.
    pub first_start_s: Option<f64>,
    /// When it finished; `None` if it had not when the run ended.
    pub finish_s: Option<f64>,
    /// How often it restarted (moved, or resumed after a pause).
    pub restarts: u32,
}

impl JobRecord {
    /// Completion time (finish minus arrival), for a finished job.
    pub fn jct_s(&self) -> Option<f64> {
        self.finish_s.map(|f| f - self.arrival_s)
    }

    /// Time from arrival to first start, for a started job.
    pub fn queueing_s(&self) -> Option<f64> {
        self.first_start_s.map(|s| s - self.arrival_s)
    }
}

/// A stretch of time during which a job held GPUs of one type on one node.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// The job.
    pub job: u64,
    /// Start of the stretch.
    pub start_s: f64,
    /// End of the stretch.
    pub end_s: f64,
    /// The node.
    pub node: String,
    /// The GPU type.
    pub gpu_type: String,
    /// How many GPUs of that type.
    pub gpus: u32,
}

/// One policy's (or one daemon's) run.
#[derive(Clone, Debug)]
pub struct Run {
    /// Its name, used in file names and legends (`hadar`, `gavel`, `serve`).
    pub name: String,
    /// Its jobs.
    pub jobs: Vec<JobRecord>,
    /// Where its jobs ran, stretch by stretch.
    pub segments: Vec<Segment>,
    /// GPUs per type of the cluster.
    pub capacity: BTreeMap<String, u32>,
}

/// Writes the report of `runs` into `dir` (created if missing): `jobs.csv` (one row per run
/// and job), `segments.csv` (one row per stretch on GPUs), `jct-cdf.svg` (every run), and per run `busy-NAME.svg` (GPUs busy per type over
/// time) and `timeline-NAME.svg` (one row per job: waiting, then running on each type).
/// Returns the files written.
pub fn write_report(dir: &Path, runs: &[Run]) -> Result<Vec<PathBuf>, ReportError> {
    if runs.is_empty() {
        return Err(ReportError::Empty);
    }
    std::fs::create_dir_all(dir).map_err(|e| ReportError::io(dir, e))?;
    let mut written = Vec::new();
    let jobs = dir.join("jobs.csv");
    jobs_csv::write_jobs(&jobs, runs)?;
    written.push(jobs);
    let segments = dir.join("segments.csv");
    jobs_csv::write_segments(&segments, runs)?;
    written.push(segments);
    let cdf = dir.join("jct-cdf.svg");
    plot::jct_cdf(&cdf, runs)?;
    written.push(cdf);
    for run in runs {
        let stem = file_stem(&run.name);
        let busy = dir.join(format!("busy-{stem}.svg"));
        plot::busy_over_time(&busy, run)?;
        written.push(busy);
        let timeline = dir.join(format!("timeline-{stem}.svg"));
        plot::timeline(&timeline, run)?;
        written.push(timeline);
    }
    Ok(written)
}

/// A run's name as a file-name part: letters, digits, `-` and `_`; anything else becomes `_`.
fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
