//! Gavel's `.trace` format, read as it is: one job per line, ten tab-separated fields
//! `job_type command working_directory num_steps_arg needs_data_dir total_steps
//! scale_factor priority_weight SLO arrival_time`.
//!
//! hadar's one extension: an optional eleventh field, `restart_s`, the seconds this job loses
//! to a checkpoint and reload when it moves or resumes (whole or fractional, 0 or more),
//! which replaces the workload's `--restart-s` for it; empty or `-` for the workload's.
//! Gavel's own files have ten fields and read as before.
//!
//! Blank lines and lines starting with `#` are skipped (Gavel's files have neither, but a
//! hand-edited trace may). Job ids are the 0-based order of the jobs in the file, as in
//! Gavel. Every job must be able to run somewhere in the cluster: a job with no positive
//! throughput on any of the cluster's types is an error naming its line, never a job that
//! silently waits forever.

use crate::error::{FormatError, Location, read_file};
use crate::throughputs::ThroughputTable;
use hadar_core::{Cluster, Job, JobId};
use std::path::Path;

const FIELDS: [&str; 11] = [
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
    "restart_s",
];

/// Reads a trace file against a throughput table and cluster.
pub fn load_trace(
    path: &Path,
    table: &ThroughputTable,
    cluster: &Cluster,
) -> Result<Vec<Job>, FormatError> {
    let text = read_file(path)?;
    parse_trace(&text, &path.display().to_string(), table, cluster)
}

/// Parses trace text; `origin` names the input in errors.
pub fn parse_trace(
    text: &str,
    origin: &str,
    table: &ThroughputTable,
    cluster: &Cluster,
) -> Result<Vec<Job>, FormatError> {
    let mut jobs = Vec::new();
    let mut last_arrival = 0.0f64;
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let at = |field: usize| Location::of(origin).line(lineno).field(FIELDS[field]);
        let fields = TraceLine::parse(line, Location::of(origin).line(lineno), &at)?;
        if fields.arrival_s < last_arrival {
            return Err(FormatError::invalid(
                at(9),
                format!(
                    "arrival times must not decrease: {} comes after {last_arrival}",
                    fields.arrival_s
                ),
            ));
        }
        last_arrival = fields.arrival_s;
        jobs.push(fields.into_job(JobId(jobs.len() as u64), table, cluster, &at)?);
    }
    if jobs.is_empty() {
        return Err(FormatError::invalid(
            Location::of(origin),
            "the trace has no jobs",
        ));
    }
    Ok(jobs)
}

/// The fields of one trace line that make a job, each checked on its own.
struct TraceLine<'a> {
    job_type: &'a str,
    total_steps: f64,
    workers: u32,
    weight: f64,
    arrival_s: f64,
    restart_s: Option<f64>,
}

impl<'a> TraceLine<'a> {
    /// Splits and checks `line`; `line_at` names the line, `at(i)` its field `i`.
    fn parse(
        line: &'a str,
        line_at: Location,
        at: &dyn Fn(usize) -> Location,
    ) -> Result<Self, FormatError> {
        let cols: Vec<&str> = line.split('\t').collect();
        if !(cols.len() == FIELDS.len() - 1 || cols.len() == FIELDS.len()) {
            return Err(FormatError::invalid(
                line_at,
                format!(
                    "expected 10 tab-separated fields ({}), or 11 with {}, found {}",
                    FIELDS[..10].join(" "),
                    FIELDS[10],
                    cols.len()
                ),
            ));
        }
        let job_type = cols[0].trim();
        if job_type.is_empty() {
            return Err(FormatError::invalid(at(0), "the job type is empty"));
        }
        let needs_data_dir: u8 = parse_num(cols[4], at(4))?;
        if needs_data_dir > 1 {
            return Err(FormatError::invalid(
                at(4),
                format!("expected 0 or 1, found `{}`", cols[4].trim()),
            ));
        }
        let total_steps: f64 = parse_num(cols[5], at(5))?;
        if !(total_steps.is_finite() && total_steps > 0.0) {
            return Err(FormatError::invalid(
                at(5),
                format!("steps must be positive, found `{}`", cols[5].trim()),
            ));
        }
        let workers: u32 = parse_num(cols[6], at(6))?;
        if workers == 0 {
            return Err(FormatError::invalid(
                at(6),
                "a job needs at least one worker (GPU)",
            ));
        }
        let weight: f64 = parse_num(cols[7], at(7))?;
        if !(weight.is_finite() && weight > 0.0) {
            return Err(FormatError::invalid(
                at(7),
                format!(
                    "priority weight must be positive, found `{}`",
                    cols[7].trim()
                ),
            ));
        }
        let slo: f64 = parse_num(cols[8], at(8))?;
        if !(slo.is_finite() && (slo == -1.0 || slo > 0.0)) {
            return Err(FormatError::invalid(
                at(8),
                format!(
                    "SLO must be -1 (none) or positive, found `{}`",
                    cols[8].trim()
                ),
            ));
        }
        let arrival_s: f64 = parse_num(cols[9], at(9))?;
        if !(arrival_s.is_finite() && arrival_s >= 0.0) {
            return Err(FormatError::invalid(
                at(9),
                format!(
                    "arrival time must be a non-negative number of seconds, found `{}`",
                    cols[9].trim()
                ),
            ));
        }
        let restart_s = match cols.get(10).map(|c| c.trim()) {
            None | Some("" | "-") => None,
            Some(text) => Some(
                text.parse::<f64>()
                    .ok()
                    .filter(|r| r.is_finite() && *r >= 0.0)
                    .ok_or_else(|| {
                        FormatError::invalid(
                            at(10),
                            format!("expected seconds of at least 0 (or `-` for the workload's restart), found `{text}`"),
                        )
                    })?,
            ),
        };
        Ok(TraceLine {
            job_type,
            total_steps,
            workers,
            weight,
            arrival_s,
            restart_s,
        })
    }

    /// The job `id` these fields describe, with its rates on `cluster` from `table`; an
    /// error when the table does not know its type or it could run nowhere.
    fn into_job(
        self,
        id: JobId,
        table: &ThroughputTable,
        cluster: &Cluster,
        at: &dyn Fn(usize) -> Location,
    ) -> Result<Job, FormatError> {
        let TraceLine {
            job_type,
            total_steps,
            workers,
            weight,
            arrival_s,
            restart_s,
        } = self;
        let Some(throughput) = table.profile(job_type, cluster) else {
            let known: Vec<&str> = table.job_types().collect();
            return Err(FormatError::invalid(
                at(0),
                format!(
                    "unknown job type `{job_type}`; the throughput table knows {} types, e.g. `{}`",
                    known.len(),
                    known.first().unwrap_or(&"")
                ),
            ));
        };
        let job = Job {
            restart_s,
            id,
            kind: job_type.to_string(),
            arrival_s,
            workers,
            total_steps,
            weight,
            throughput,
        };
        if !job.can_run_somewhere(cluster.types()) {
            return Err(FormatError::invalid(
                at(6),
                format!(
                    "job `{job_type}` with {workers} workers has no positive throughput on any GPU type of the cluster ({}): it could never run",
                    cluster.type_names().join(", ")
                ),
            ));
        }
        Ok(job)
    }
}

fn parse_num<T: std::str::FromStr>(s: &str, at: Location) -> Result<T, FormatError> {
    let s = s.trim();
    s.parse::<T>().map_err(|_| {
        let kind = std::any::type_name::<T>();
        let what = if kind.starts_with('u') || kind.starts_with('i') {
            "a whole number"
        } else {
            "a number"
        };
        FormatError::invalid(at, format!("expected {what}, found `{s}`"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> ThroughputTable {
        ThroughputTable::parse_gavel_json(
            r#"{"v100": {"('A', 1)": {"null": 2.0}, "('A', 4)": {"null": 6.0}, "('Z', 1)": {"null": 0.0}},
                "k80": {"('A', 1)": {"null": 1.0}}}"#,
            "t.json",
        )
        .unwrap()
    }

    fn cluster() -> Cluster {
        Cluster::from_type_counts(&[("v100".into(), 4), ("k80".into(), 4)], 1).unwrap()
    }

    fn line(fields: [&str; 10]) -> String {
        fields.join("\t")
    }

    #[test]
    fn reads_jobs_with_ids_in_order() {
        let text = format!(
            "{}\n{}\n",
            line([
                "A",
                "cmd",
                "wd",
                "--steps",
                "1",
                "100",
                "1",
                "1",
                "-1.000000",
                "0"
            ]),
            line([
                "A", "cmd", "wd", "--steps", "0", "50", "4", "2", "-1", "10.5"
            ])
        );
        let jobs = parse_trace(&text, "x.trace", &table(), &cluster()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[1].id, JobId(1));
        assert_eq!(jobs[1].workers, 4);
        assert_eq!(jobs[1].arrival_s, 10.5);
        assert_eq!(jobs[1].weight, 2.0);
    }

    fn err(fields: [&str; 10]) -> String {
        let text = format!(
            "{}\n{}\n",
            line(["A", "c", "w", "s", "1", "100", "1", "1", "-1", "0"]),
            line(fields)
        );
        parse_trace(&text, "x.trace", &table(), &cluster())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_line_and_field() {
        assert_eq!(
            err(["A", "c", "w", "s", "1", "abc", "1", "1", "-1", "0"]),
            "x.trace:2: field `total_steps`: expected a number, found `abc`"
        );
        assert_eq!(
            err(["A", "c", "w", "s", "1", "10", "-1", "1", "-1", "0"]),
            "x.trace:2: field `scale_factor`: expected a whole number, found `-1`"
        );
        assert!(
            err(["B", "c", "w", "s", "1", "10", "1", "1", "-1", "0"])
                .starts_with("x.trace:2: field `job_type`: unknown job type `B`")
        );
        assert!(
            err(["A", "c", "w", "s", "1", "10", "2", "1", "-1", "0"]).contains("could never run")
        );
        assert!(
            err(["Z", "c", "w", "s", "1", "10", "1", "1", "-1", "0"]).contains("could never run")
        );
        assert!(
            err(["A", "c", "w", "s", "1", "-5", "1", "1", "-1", "0"])
                .contains("steps must be positive")
        );
    }

    #[test]
    fn wrong_column_count_is_reported() {
        let e = parse_trace("A\tb\tc\n", "x.trace", &table(), &cluster())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "x.trace:1: expected 10 tab-separated fields (job_type command working_directory num_steps_arg needs_data_dir total_steps scale_factor priority_weight SLO arrival_time), or 11 with restart_s, found 3"
        );
    }

    #[test]
    fn an_eleventh_field_is_the_jobs_own_restart_cost() {
        let ten = ["A", "c", "w", "s", "1", "100", "1", "1", "-1", "0"];
        let with = |r: &str| format!("{}\t{r}\n", line(ten));
        let jobs = parse_trace(&with("120"), "x.trace", &table(), &cluster()).unwrap();
        assert_eq!(jobs[0].restart_s, Some(120.0));
        for none in ["", "-"] {
            let jobs = parse_trace(&with(none), "x.trace", &table(), &cluster()).unwrap();
            assert_eq!(jobs[0].restart_s, None, "`{none}`");
        }
        let jobs =
            parse_trace(&format!("{}\n", line(ten)), "x.trace", &table(), &cluster()).unwrap();
        assert_eq!(jobs[0].restart_s, None);
        let e = parse_trace(&with("-3"), "x.trace", &table(), &cluster())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.trace:1: field `restart_s`: expected seconds"),
            "{e}"
        );
    }

    #[test]
    fn decreasing_arrivals_are_refused() {
        let text = format!(
            "{}\n{}\n",
            line(["A", "c", "w", "s", "1", "100", "1", "1", "-1", "20"]),
            line(["A", "c", "w", "s", "1", "100", "1", "1", "-1", "10"])
        );
        let e = parse_trace(&text, "x.trace", &table(), &cluster())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.trace:2: field `arrival_time`: arrival times must not decrease"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "[A-Za-z0-9\\t\\n .\\-#]{0,300}") {
            let _ = parse_trace(&text, "fuzz", &table(), &cluster());
        }
    }
}
