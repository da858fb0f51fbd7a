//! `jobs.csv`: one row per run and job, the figures a researcher loads into a notebook.

use crate::{ReportError, Run};
use std::path::Path;

/// The columns, in order.
const HEADER: [&str; 10] = [
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

/// Writes the rows to a temporary file beside `path`, then renames it into place.
pub fn write(path: &Path, runs: &[Run]) -> Result<(), ReportError> {
    let temp = path.with_extension("csv.tmp");
    let csv_error = |source| ReportError::Csv {
        path: path.to_path_buf(),
        source,
    };
    let mut out = csv::Writer::from_path(&temp).map_err(csv_error)?;
    out.write_record(HEADER).map_err(csv_error)?;
    let number = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for run in runs {
        for job in &run.jobs {
            out.write_record([
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
            ])
            .map_err(csv_error)?;
        }
    }
    out.flush().map_err(|e| ReportError::io(path, e))?;
    drop(out);
    std::fs::rename(&temp, path).map_err(|e| ReportError::io(path, e))
}
