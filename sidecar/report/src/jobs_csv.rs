//! `jobs.csv` (one row per run and job) and `segments.csv` (one row per stretch a job held
//! GPUs of one type on one node): the figures a researcher loads into a notebook.

use crate::{ReportError, Run};
use std::path::Path;

/// The columns of `jobs.csv`, in order.
const JOB_HEADER: [&str; 10] = [
    "run",
    "job",
    "kind",
    "gpus",
    "arrival_s",
    "first_start_s",
    "finish_s",
    "jct_s",
    "queueing_s",
    "restarts",
];

/// The columns of `segments.csv`, in order.
const SEGMENT_HEADER: [&str; 7] = ["run", "job", "node", "gpu_type", "gpus", "start_s", "end_s"];

fn number(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.3}")).unwrap_or_default()
}

/// Writes `jobs.csv`.
pub fn write_jobs(path: &Path, runs: &[Run]) -> Result<(), ReportError> {
    let rows = runs.iter().flat_map(|run| {
        run.jobs.iter().map(move |job| {
            [
                run.name.clone(),
                job.id.to_string(),
                job.kind.clone(),
                job.gpus.to_string(),
                number(Some(job.arrival_s)),
                number(job.first_start_s),
                number(job.finish_s),
                number(job.jct_s()),
                number(job.queueing_s()),
                job.restarts.to_string(),
            ]
        })
    });
    write_rows(path, &JOB_HEADER, rows)
}

/// Writes `segments.csv`.
pub fn write_segments(path: &Path, runs: &[Run]) -> Result<(), ReportError> {
    let rows = runs.iter().flat_map(|run| {
        run.segments.iter().map(move |s| {
            [
                run.name.clone(),
                s.job.to_string(),
                s.node.clone(),
                s.gpu_type.clone(),
                s.gpus.to_string(),
                number(Some(s.start_s)),
                number(Some(s.end_s)),
            ]
        })
    });
    write_rows(path, &SEGMENT_HEADER, rows)
}

/// Writes the rows to a temporary file beside `path`, then renames it into place.
pub(crate) fn write_rows<const N: usize>(
    path: &Path,
    header: &[&str; N],
    rows: impl Iterator<Item = [String; N]>,
) -> Result<(), ReportError> {
    let temp = path.with_extension("csv.tmp");
    let csv_error = |source| ReportError::Csv {
        path: path.to_path_buf(),
        source,
    };
    let mut out = csv::Writer::from_path(&temp).map_err(csv_error)?;
    out.write_record(header).map_err(csv_error)?;
    for row in rows {
        out.write_record(&row).map_err(csv_error)?;
    }
    out.flush().map_err(|e| ReportError::io(path, e))?;
    drop(out);
    std::fs::rename(&temp, path).map_err(|e| ReportError::io(path, e))
}
