//! `shadow.csv`: a shadow-mode serve run compared job by job with Hadar's prediction (see
//! `hadar report --state DB` on a database written by `hadar serve --shadow`).

use crate::{ReportError, Run};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One job Slurm ran, beside what Hadar predicts for it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShadowRow {
    /// The job.
    pub job: u64,
    /// Its Slurm job name.
    pub name: String,
    /// GPUs it held.
    pub gpus: u32,
    /// The GPU type(s) Slurm ran it on.
    pub slurm_gpu_type: String,
    /// Its measured runtime there (start to end), seconds.
    pub runtime_s: f64,
    /// Slurm's measured JCT: submit to end.
    pub slurm_jct_s: f64,
    /// Hadar's predicted JCT, `None` when the simulation did not finish the job.
    pub hadar_jct_s: Option<f64>,
}

/// The comparison of a shadow run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ShadowComparison {
    /// The jobs that ran, by id.
    pub rows: Vec<ShadowRow>,
    /// Slurm's makespan over those jobs: first submit to last end.
    pub slurm_makespan_s: f64,
    /// Hadar's predicted makespan over the same jobs.
    pub hadar_makespan_s: Option<f64>,
}

impl ShadowComparison {
    /// Slurm's measured JCTs (run `slurm`) beside Hadar's predicted ones (run `hadar`), for
    /// the jobs of `slurm` that finished; `ran_on` and `runtime_s` are per job.
    pub fn new(
        slurm: &Run,
        hadar: &Run,
        ran_on: &BTreeMap<u64, String>,
        runtime_s: &BTreeMap<u64, f64>,
    ) -> ShadowComparison {
        let predicted: BTreeMap<u64, f64> = hadar
            .jobs
            .iter()
            .filter_map(|j| Some((j.id, j.jct_s()?)))
            .collect();
        let rows: Vec<ShadowRow> = slurm
            .jobs
            .iter()
            .filter_map(|j| {
                Some(ShadowRow {
                    job: j.id,
                    name: j.kind.clone(),
                    gpus: j.gpus,
                    slurm_gpu_type: ran_on.get(&j.id)?.clone(),
                    runtime_s: *runtime_s.get(&j.id)?,
                    slurm_jct_s: j.jct_s()?,
                    hadar_jct_s: predicted.get(&j.id).copied(),
                })
            })
            .collect();
        ShadowComparison {
            slurm_makespan_s: makespan(slurm, &rows).unwrap_or(0.0),
            hadar_makespan_s: makespan(hadar, &rows),
            rows,
        }
    }

    /// Mean JCT of the compared jobs: Slurm's, and Hadar's where it predicted every one.
    pub fn mean_jct_s(&self) -> (f64, Option<f64>) {
        let n = self.rows.len().max(1) as f64;
        let slurm = self.rows.iter().map(|r| r.slurm_jct_s).sum::<f64>() / n;
        let hadar: Option<f64> = self.rows.iter().map(|r| r.hadar_jct_s).sum();
        (slurm, hadar.map(|h| h / n))
    }

    /// The comparison as rows of eight cells: per job its id, name, GPUs, the type Slurm ran
    /// it on, runtime, Slurm's JCT, Hadar's JCT and their ratio; then a makespan row and a
    /// mean-JCT row, named by `summary`. `num` writes a figure and `ratio` a ratio (`None`:
    /// no figure).
    pub fn cells(
        &self,
        summary: [&str; 2],
        num: impl Fn(Option<f64>) -> String,
        ratio: impl Fn(Option<f64>) -> String,
    ) -> Vec<[String; 8]> {
        let over = |h: Option<f64>, s: f64| h.filter(|_| s > 0.0).map(|h| h / s);
        let mut rows: Vec<[String; 8]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.job.to_string(),
                    r.name.clone(),
                    r.gpus.to_string(),
                    r.slurm_gpu_type.clone(),
                    num(Some(r.runtime_s)),
                    num(Some(r.slurm_jct_s)),
                    num(r.hadar_jct_s),
                    ratio(over(r.hadar_jct_s, r.slurm_jct_s)),
                ]
            })
            .collect();
        let (slurm_mean, hadar_mean) = self.mean_jct_s();
        for (what, s, h) in [
            (summary[0], self.slurm_makespan_s, self.hadar_makespan_s),
            (summary[1], slurm_mean, hadar_mean),
        ] {
            let mut row: [String; 8] = Default::default();
            row[0] = what.into();
            row[5] = num(Some(s));
            row[6] = num(h);
            row[7] = ratio(over(h, s));
            rows.push(row);
        }
        rows
    }
}

/// First arrival to last finish of a run's jobs among `rows`; `None` if one did not finish.
fn makespan(run: &Run, rows: &[ShadowRow]) -> Option<f64> {
    let jobs: Vec<_> = run
        .jobs
        .iter()
        .filter(|j| rows.iter().any(|r| r.job == j.id))
        .collect();
    let first = jobs.iter().map(|j| j.arrival_s).reduce(f64::min)?;
    let mut last = f64::MIN;
    for j in &jobs {
        last = last.max(j.finish_s?);
    }
    Some(last - first)
}

/// The columns of `shadow.csv`.
const HEADER: [&str; 8] = [
    "job",
    "name",
    "gpus",
    "slurm_gpu_type",
    "runtime_s",
    "slurm_jct_s",
    "hadar_predicted_jct_s",
    "predicted_over_slurm",
];

/// Writes `shadow.csv`: one row per job, then a `makespan` row and a `mean_jct` row.
pub fn write_shadow(path: &Path, c: &ShadowComparison) -> Result<(), ReportError> {
    let num = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    let rows = c.cells(["makespan", "mean_jct"], num, num);
    crate::jobs_csv::write_rows(path, &HEADER, rows.into_iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobRecord;

    fn run(name: &str, jobs: &[(u64, f64, Option<f64>)]) -> Run {
        Run {
            name: name.into(),
            jobs: jobs
                .iter()
                .map(|(id, arrival, finish)| JobRecord {
                    id: *id,
                    kind: format!("job{id}"),
                    gpus: 1,
                    arrival_s: *arrival,
                    first_start_s: Some(*arrival),
                    finish_s: *finish,
                    restarts: 0,
                })
                .collect(),
            segments: Vec::new(),
            capacity: BTreeMap::new(),
        }
    }

    #[test]
    fn jobs_slurm_ran_are_compared_with_the_prediction_and_written() {
        let slurm = run(
            "slurm",
            &[(1, 0.0, Some(10.0)), (2, 5.0, Some(30.0)), (3, 1.0, None)],
        );
        let hadar = run("hadar", &[(1, 0.0, Some(8.0)), (2, 5.0, Some(20.0))]);
        let ran_on = BTreeMap::from([(1, "v100".to_string()), (2, "k80".to_string())]);
        let runtime = BTreeMap::from([(1, 10.0), (2, 25.0)]);
        let c = ShadowComparison::new(&slurm, &hadar, &ran_on, &runtime);
        assert_eq!(c.rows.len(), 2, "the unfinished job is left out");
        assert_eq!(c.rows[1].slurm_jct_s, 25.0);
        assert_eq!(c.rows[1].hadar_jct_s, Some(15.0));
        assert_eq!(c.slurm_makespan_s, 30.0);
        assert_eq!(c.hadar_makespan_s, Some(20.0));
        assert_eq!(c.mean_jct_s(), (17.5, Some(11.5)));
        let dir = std::env::temp_dir().join(format!("hadar-shadow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shadow.csv");
        write_shadow(&path, &c).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("job,name,gpus,slurm_gpu_type"),
            "{text}"
        );
        assert_eq!(lines[2], "2,job2,1,k80,25.000,25.000,15.000,0.600");
        assert_eq!(lines[3], "makespan,,,,,30.000,20.000,0.667");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
