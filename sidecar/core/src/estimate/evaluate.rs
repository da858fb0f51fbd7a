//! Judging the estimator against a measured throughput table (such as Gavel's).
//!
//! Honesty first: the model's constants are fitted to single-worker measurements, so every
//! job type is predicted by constants fitted on the *other* job types (leave-one-job-out);
//! the traits themselves come from model definitions, never from the table. Reported per
//! GPU type: mean absolute percentage error (MAPE) of single-worker rates, rank agreement
//! across job types (Spearman's rho, Kendall's tau-b), and the MAPE of multi-worker rates
//! (not fitted). Then the online refinement is replayed with simulated measurements
//! (the true rate times `1 + noise x z`, `z` standard normal from a seeded generator) to count
//! how many observed rounds bring the estimate within a tolerance of the truth.

use super::fit::{Sample, fit_constants};
use super::gpu::{GpuCatalog, GpuSpec};
use super::job::JobTraits;
use super::model::ModelConstants;
use super::online::OnlineEstimate;
use super::profile_for_types;
use crate::cluster::GpuType;
use crate::throughput::ThroughputProfile;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// One measured rate: job type, GPU type, workers, steps/s (zero: cannot run).
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Job type name, matched exactly against the traits table.
    pub job_type: String,
    /// GPU type name, matched against the GPU catalog (case-insensitive, aliases).
    pub gpu_type: String,
    /// Number of workers.
    pub workers: u32,
    /// Measured steps/s of the whole job.
    pub rate: f64,
}

/// How the refinement replay runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ReplaySettings {
    /// Relative standard deviation of a simulated measurement (0.05 = 5%).
    pub noise: f64,
    /// Seed of the noise generator.
    pub seed: u64,
    /// Relative error counted as converged (0.10 = within 10%).
    pub tolerance: f64,
    /// Rounds replayed per (job, GPU type).
    pub max_rounds: u32,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        ReplaySettings {
            noise: 0.05,
            seed: 0,
            tolerance: 0.10,
            max_rounds: 50,
        }
    }
}

/// Why an evaluation could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// No job type of the table has traits, or no GPU type has a spec.
    #[error("nothing to evaluate: {0}")]
    NothingToEvaluate(String),
    /// Replay settings out of range.
    #[error("{0}")]
    BadSettings(String),
}

/// Accuracy on one GPU type.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TypeAccuracy {
    /// The GPU type as the table names it.
    pub gpu_type: String,
    /// Job types with a positive single-worker measurement on it.
    pub jobs: usize,
    /// Mean absolute percentage error of single-worker estimates, percent.
    pub mape_pct: f64,
    /// Median absolute percentage error, percent.
    pub median_ape_pct: f64,
    /// Spearman's rank correlation between estimated and measured rates across job types.
    pub spearman: f64,
    /// Kendall's tau-b between the same.
    pub kendall: f64,
    /// Multi-worker entries (2, 4, 8 workers) compared.
    pub multi_worker_points: usize,
    /// Their MAPE, percent (none when there are none).
    pub multi_worker_mape_pct: Option<f64>,
}

/// One job type's single-worker estimate next to its measurement, per GPU type.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobComparison {
    /// The job type.
    pub job_type: String,
    /// Each GPU type with a positive single-worker measurement.
    pub rates: Vec<RateComparison>,
}

/// An estimated single-worker rate next to the measured one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateComparison {
    /// The GPU type as the table names it.
    pub gpu_type: String,
    /// Estimated steps/s (leave-one-job-out; 0 when the model says it cannot run).
    pub estimated: f64,
    /// Measured steps/s.
    pub measured: f64,
}

/// Refinement from one observation on a type, judged on the job's other types.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CrossType {
    /// The type the job was observed on (once).
    pub observed_type: String,
    /// MAPE on the other types from the prior alone, percent.
    pub others_prior_mape_pct: f64,
    /// MAPE on the other types after that one observation, percent.
    pub others_after_one_mape_pct: f64,
}

/// How fast the online refinement converges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Convergence {
    /// The replay settings.
    pub settings: ReplaySettings,
    /// (job, GPU type) cells replayed.
    pub cells: usize,
    /// Cells whose estimate got within tolerance within `max_rounds`.
    pub reached: usize,
    /// Cells whose prior was already within tolerance (0 rounds).
    pub prior_within: usize,
    /// Median rounds to get within tolerance over reached cells.
    pub median_rounds: Option<f64>,
    /// 90th percentile of the same (nearest rank).
    pub p90_rounds: Option<u32>,
    /// Largest rounds needed over reached cells.
    pub max_rounds_needed: Option<u32>,
    /// Cells within tolerance at the end of the replay.
    pub within_at_end: usize,
    /// One observation on a type, judged on the others.
    pub cross_type: Vec<CrossType>,
}

/// Pooled figures over every (job, type) pair.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overall {
    /// Single-worker entries compared.
    pub points: usize,
    /// Leave-one-job-out MAPE, percent.
    pub mape_pct: f64,
    /// Median absolute percentage error, percent.
    pub median_ape_pct: f64,
    /// Spearman's rho over all pairs (pooled).
    pub spearman: f64,
    /// Kendall's tau-b over all pairs (pooled).
    pub kendall: f64,
    /// Mean of the per-type Spearman's rho.
    pub mean_type_spearman: f64,
    /// MAPE of the constants fitted on the whole table (in-sample, for contrast), percent.
    pub in_sample_mape_pct: f64,
    /// MAPE of multi-worker entries, percent.
    pub multi_worker_mape_pct: Option<f64>,
}

/// The evaluation's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalReport {
    /// Constants fitted on every job type of the table.
    pub constants_all: ModelConstants,
    /// GPU types evaluated, in table order.
    pub gpu_types: Vec<String>,
    /// Per GPU type accuracy.
    pub per_type: Vec<TypeAccuracy>,
    /// Pooled accuracy.
    pub overall: Overall,
    /// Per job type comparisons.
    pub jobs: Vec<JobComparison>,
    /// Online refinement replay.
    pub refinement: Convergence,
    /// Job types in the table without traits (not evaluated).
    pub skipped_job_types: Vec<String>,
    /// GPU types in the table without a spec (not evaluated).
    pub skipped_gpu_types: Vec<String>,
}

/// Evaluates the estimator against `table` with job traits from `traits` and GPU specs from
/// `catalog`.
pub fn evaluate(
    table: &[Measurement],
    traits: &[JobTraits],
    catalog: &GpuCatalog,
    replay: &ReplaySettings,
) -> Result<EvalReport, EvalError> {
    check_settings(replay)?;
    let grid = Grid::new(table, traits, catalog)?;
    let constants_all = fit_constants(&grid.samples_without(None));
    let priors: Vec<ThroughputProfile> = (0..grid.jobs.len())
        .map(|j| {
            let k = fit_constants(&grid.samples_without(Some(j)));
            profile_for_types(grid.jobs[j], &grid.gpu_names, catalog, &k)
        })
        .collect();
    let in_sample: Vec<ThroughputProfile> = grid
        .jobs
        .iter()
        .map(|job| profile_for_types(job, &grid.gpu_names, catalog, &constants_all))
        .collect();
    let (per_type, overall) = accuracy(&grid, &priors, &in_sample);
    let jobs = job_rows(&grid, &priors);
    let refinement = refinement(&grid, &priors, replay);
    Ok(EvalReport {
        constants_all,
        gpu_types: grid.gpu_names,
        per_type,
        overall,
        jobs,
        refinement,
        skipped_job_types: grid.skipped_job_types,
        skipped_gpu_types: grid.skipped_gpu_types,
    })
}

/// Refuses replay settings out of range.
fn check_settings(replay: &ReplaySettings) -> Result<(), EvalError> {
    if !(replay.noise.is_finite() && replay.noise >= 0.0 && replay.noise < 1.0) {
        return Err(EvalError::BadSettings(format!(
            "noise must be in [0, 1), got {}",
            replay.noise
        )));
    }
    if !(replay.tolerance.is_finite() && replay.tolerance > 0.0) {
        return Err(EvalError::BadSettings(format!(
            "tolerance must be positive, got {}",
            replay.tolerance
        )));
    }
    Ok(())
}

/// The table's measurements on the job types with traits and the GPU types with specs.
struct Grid<'a> {
    /// GPU types evaluated, in first-seen order.
    gpu_names: Vec<String>,
    /// GPU types without a spec.
    skipped_gpu_types: Vec<String>,
    /// Job types without traits.
    skipped_job_types: Vec<String>,
    /// The evaluated GPU types' specs, indexed like `gpu_names`.
    specs: Vec<&'a GpuSpec>,
    /// The evaluated job types' traits, in first-seen order.
    jobs: Vec<&'a JobTraits>,
    /// `measured[j][g]`: the positive `(workers, rate)` points of job `j` on GPU type `g`.
    measured: Vec<Vec<Vec<(u32, f64)>>>,
}

impl<'a> Grid<'a> {
    /// Resolves the table's names against `traits` and `catalog`.
    fn new(
        table: &[Measurement],
        traits: &'a [JobTraits],
        catalog: &'a GpuCatalog,
    ) -> Result<Grid<'a>, EvalError> {
        let mut gpu_names: Vec<String> = Vec::new();
        let mut skipped_gpu_types: Vec<String> = Vec::new();
        let mut job_names: Vec<String> = Vec::new();
        let mut skipped_job_types: Vec<String> = Vec::new();
        for m in table {
            let gpus = if catalog.lookup(&m.gpu_type).is_some() {
                &mut gpu_names
            } else {
                &mut skipped_gpu_types
            };
            push_new(gpus, &m.gpu_type);
            let jobs = if traits.iter().any(|t| t.name == m.job_type) {
                &mut job_names
            } else {
                &mut skipped_job_types
            };
            push_new(jobs, &m.job_type);
        }
        if job_names.is_empty() {
            return Err(EvalError::NothingToEvaluate(
                "no job type of the table has traits".into(),
            ));
        }
        if gpu_names.is_empty() {
            return Err(EvalError::NothingToEvaluate(
                "no GPU type of the table is in the GPU catalog".into(),
            ));
        }
        let specs: Vec<&GpuSpec> = gpu_names.iter().filter_map(|g| catalog.lookup(g)).collect();
        let jobs: Vec<&JobTraits> = job_names
            .iter()
            .filter_map(|n| traits.iter().find(|t| &t.name == n))
            .collect();
        let mut measured = vec![vec![Vec::new(); specs.len()]; jobs.len()];
        for m in table {
            let (Some(j), Some(g)) = (
                job_names.iter().position(|n| *n == m.job_type),
                gpu_names.iter().position(|n| *n == m.gpu_type),
            ) else {
                continue;
            };
            if m.rate.is_finite() && m.rate > 0.0 {
                measured[j][g].push((m.workers, m.rate));
            }
        }
        Ok(Grid {
            gpu_names,
            skipped_gpu_types,
            skipped_job_types,
            specs,
            jobs,
            measured,
        })
    }

    /// Job `j`'s single-worker rate on GPU type `g`, when measured.
    fn single(&self, j: usize, g: usize) -> Option<f64> {
        self.measured[j][g]
            .iter()
            .find(|&&(w, _)| w == 1)
            .map(|&(_, r)| r)
    }

    /// The single-worker samples of every job type but `skip`.
    fn samples_without(&self, skip: Option<usize>) -> Vec<Sample<'a>> {
        let mut s = Vec::new();
        for (j, job) in self.jobs.iter().enumerate() {
            if Some(j) == skip {
                continue;
            }
            for (g, gpu) in self.specs.iter().enumerate() {
                if let Some(rate) = self.single(j, g) {
                    s.push(Sample { job, gpu, rate });
                }
            }
        }
        s
    }
}

/// Appends `name` unless `list` holds it.
fn push_new(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|n| n == name) {
        list.push(name.to_string());
    }
}

/// The absolute relative error of an estimate (1 when the model says the job cannot run).
fn ape(est: Option<f64>, truth: f64) -> f64 {
    est.map_or(1.0, |e| (e - truth).abs() / truth)
}

/// Per GPU type and pooled accuracy of the leave-one-job-out `priors` (and, for contrast,
/// of the `in_sample` profiles).
fn accuracy(
    grid: &Grid<'_>,
    priors: &[ThroughputProfile],
    in_sample: &[ThroughputProfile],
) -> (Vec<TypeAccuracy>, Overall) {
    let mut per_type = Vec::new();
    let (mut all_ape, mut all_est, mut all_meas, mut in_sample_ape, mut all_multi) =
        (vec![], vec![], vec![], vec![], vec![]);
    for (g, name) in grid.gpu_names.iter().enumerate() {
        let t = GpuType(g as u16);
        let (mut apes, mut est, mut meas, mut multi) = (vec![], vec![], vec![], vec![]);
        for j in 0..grid.jobs.len() {
            if let Some(truth) = grid.single(j, g) {
                let e = priors[j].rate(t, 1);
                apes.push(ape(e, truth));
                est.push(e.unwrap_or(0.0));
                meas.push(truth);
                in_sample_ape.push(ape(in_sample[j].rate(t, 1), truth));
            }
            for &(w, truth) in &grid.measured[j][g] {
                if w > 1 {
                    multi.push(ape(priors[j].rate(t, w), truth));
                }
            }
        }
        per_type.push(TypeAccuracy {
            gpu_type: name.clone(),
            jobs: apes.len(),
            mape_pct: 100.0 * mean(&apes),
            median_ape_pct: 100.0 * median(&apes).unwrap_or(0.0),
            spearman: spearman(&est, &meas),
            kendall: kendall_tau_b(&est, &meas),
            multi_worker_points: multi.len(),
            multi_worker_mape_pct: (!multi.is_empty()).then(|| 100.0 * mean(&multi)),
        });
        all_ape.extend(apes);
        all_est.extend(est);
        all_meas.extend(meas);
        all_multi.extend(multi);
    }
    let overall = Overall {
        points: all_ape.len(),
        mape_pct: 100.0 * mean(&all_ape),
        median_ape_pct: 100.0 * median(&all_ape).unwrap_or(0.0),
        spearman: spearman(&all_est, &all_meas),
        kendall: kendall_tau_b(&all_est, &all_meas),
        mean_type_spearman: mean(&per_type.iter().map(|p| p.spearman).collect::<Vec<_>>()),
        in_sample_mape_pct: 100.0 * mean(&in_sample_ape),
        multi_worker_mape_pct: (!all_multi.is_empty()).then(|| 100.0 * mean(&all_multi)),
    };
    (per_type, overall)
}

/// Each job type's single-worker estimates next to its measurements.
fn job_rows(grid: &Grid<'_>, priors: &[ThroughputProfile]) -> Vec<JobComparison> {
    (0..grid.jobs.len())
        .map(|j| JobComparison {
            job_type: grid.jobs[j].name.clone(),
            rates: (0..grid.specs.len())
                .filter_map(|g| {
                    grid.single(j, g).map(|measured| RateComparison {
                        gpu_type: grid.gpu_names[g].clone(),
                        estimated: priors[j].rate(GpuType(g as u16), 1).unwrap_or(0.0),
                        measured,
                    })
                })
                .collect(),
        })
        .collect()
}

/// The refinement replay: each (job, type) cell observed round after round on that type,
/// then one observation on a type judged on the job's other types. One seeded generator
/// draws the noise for both, in that order.
fn refinement(
    grid: &Grid<'_>,
    priors: &[ThroughputProfile],
    replay: &ReplaySettings,
) -> Convergence {
    let mut rng = SmallRng::seed_from_u64(replay.seed);
    let mut noisy = |truth: f64| truth * (1.0 + replay.noise * standard_normal(&mut rng)).max(0.05);
    let (mut rounds_needed, mut cells, mut prior_within, mut within_at_end) = (Vec::new(), 0, 0, 0);
    for (j, prior) in priors.iter().enumerate() {
        for g in 0..grid.specs.len() {
            let Some(truth) = grid.single(j, g) else {
                continue;
            };
            let t = GpuType(g as u16);
            cells += 1;
            let mut est = OnlineEstimate::new(prior.clone());
            let within = |e: &OnlineEstimate| ape(e.rate(t, 1), truth) <= replay.tolerance;
            let mut first = within(&est).then_some(0u32);
            for round in 1..=replay.max_rounds {
                // Measurements are positive by construction, so observe cannot fail here.
                let _ = est.observe(t, 1, noisy(truth));
                if first.is_none() && within(&est) {
                    first = Some(round);
                }
            }
            if first == Some(0) {
                prior_within += 1;
            }
            if within(&est) {
                within_at_end += 1;
            }
            if let Some(r) = first {
                rounds_needed.push(r);
            }
        }
    }
    rounds_needed.sort_unstable();
    let cross_type = cross_type(grid, priors, &mut noisy);
    let as_f64: Vec<f64> = rounds_needed.iter().map(|&r| f64::from(r)).collect();
    Convergence {
        settings: *replay,
        cells,
        reached: rounds_needed.len(),
        prior_within,
        median_rounds: median(&as_f64),
        p90_rounds: (!rounds_needed.is_empty()).then(|| {
            rounds_needed[((0.9 * rounds_needed.len() as f64).ceil() as usize)
                .clamp(1, rounds_needed.len())
                - 1]
        }),
        max_rounds_needed: rounds_needed.last().copied(),
        within_at_end,
        cross_type,
    }
}

/// Per observed GPU type: the MAPE on the job's other types before and after one
/// observation on it.
fn cross_type(
    grid: &Grid<'_>,
    priors: &[ThroughputProfile],
    noisy: &mut impl FnMut(f64) -> f64,
) -> Vec<CrossType> {
    let mut out = Vec::new();
    for (g, observed_type) in grid.gpu_names.iter().enumerate() {
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for (j, prior) in priors.iter().enumerate() {
            let Some(truth) = grid.single(j, g) else {
                continue;
            };
            let mut est = OnlineEstimate::new(prior.clone());
            let _ = est.observe(GpuType(g as u16), 1, noisy(truth));
            for h in (0..grid.specs.len()).filter(|&h| h != g) {
                if let Some(other) = grid.single(j, h) {
                    let u = GpuType(h as u16);
                    before.push(ape(prior.rate(u, 1), other));
                    after.push(ape(est.rate(u, 1), other));
                }
            }
        }
        if !before.is_empty() {
            out.push(CrossType {
                observed_type: observed_type.clone(),
                others_prior_mape_pct: 100.0 * mean(&before),
                others_after_one_mape_pct: 100.0 * mean(&after),
            });
        }
    }
    out
}

/// A standard normal draw (Box-Muller).
fn standard_normal(rng: &mut SmallRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut k = i;
        while k + 1 < idx.len() && v[idx[k + 1]] == v[idx[i]] {
            k += 1;
        }
        let avg = (i + k) as f64 / 2.0 + 1.0;
        for &p in &idx[i..=k] {
            r[p] = avg;
        }
        i = k + 1;
    }
    r
}

/// Spearman's rho: Pearson's correlation of the ranks (0 when undefined).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.len() < 2 {
        return 0.0;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let (ma, mb) = (mean(&ra), mean(&rb));
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for i in 0..ra.len() {
        sab += (ra[i] - ma) * (rb[i] - mb);
        saa += (ra[i] - ma).powi(2);
        sbb += (rb[i] - mb).powi(2);
    }
    if saa == 0.0 || sbb == 0.0 {
        0.0
    } else {
        sab / (saa * sbb).sqrt()
    }
}

/// Kendall's tau-b (ties accounted for; 0 when undefined).
pub fn kendall_tau_b(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.len() < 2 {
        return 0.0;
    }
    let (mut concordant, mut discordant, mut ties_a, mut ties_b) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..a.len() {
        for k in i + 1..a.len() {
            let (da, db) = ((a[i] - a[k]).signum(), (b[i] - b[k]).signum());
            let (ta, tb) = (a[i] == a[k], b[i] == b[k]);
            match (ta, tb) {
                (true, true) => {}
                (true, false) => ties_a += 1,
                (false, true) => ties_b += 1,
                (false, false) if da == db => concordant += 1,
                _ => discordant += 1,
            }
        }
    }
    let n1 = (concordant + discordant + ties_a) as f64;
    let n2 = (concordant + discordant + ties_b) as f64;
    if n1 == 0.0 || n2 == 0.0 {
        0.0
    } else {
        (concordant - discordant) as f64 / (n1 * n2).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::job::gavel_job_traits;
    use crate::estimate::model::estimate_rate;

    #[test]
    fn rank_statistics_match_hand_computed_values() {
        assert!((spearman(&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 30.0, 40.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&[1.0, 2.0, 3.0, 4.0], &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        // One swapped pair out of 6: tau = (5 - 1) / 6.
        assert!(
            (kendall_tau_b(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]) - 4.0 / 6.0).abs() < 1e-12
        );
        // rho for that swap: 1 - 6 x 2 / (4 x 15) = 0.8.
        assert!((spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]) - 0.8).abs() < 1e-12);
        assert_eq!(ranks(&[5.0, 1.0, 5.0]), vec![2.5, 1.0, 2.5]);
    }

    fn synthetic_table(k: &ModelConstants) -> Vec<Measurement> {
        let catalog = GpuCatalog::builtin();
        let mut t = Vec::new();
        for job in gavel_job_traits() {
            for g in ["k80", "p100", "v100"] {
                let gpu = catalog.lookup(g).unwrap();
                for w in [1, 2] {
                    t.push(Measurement {
                        job_type: job.name.clone(),
                        gpu_type: g.into(),
                        workers: w,
                        rate: estimate_rate(&job, gpu, w, k).unwrap(),
                    });
                }
            }
        }
        t.push(Measurement {
            job_type: "Unknown net".into(),
            gpu_type: "v100".into(),
            workers: 1,
            rate: 3.0,
        });
        t.push(Measurement {
            job_type: "LM (batch size 5)".into(),
            gpu_type: "tpu".into(),
            workers: 1,
            rate: 3.0,
        });
        t
    }

    #[test]
    fn a_table_the_model_generated_is_predicted_almost_exactly() {
        let truth = ModelConstants {
            efficiency: 0.45,
            pre_pascal_factor: 0.7,
            step_overhead_s: 0.006,
            layer_overhead_s: 2e-4,
        };
        let r = evaluate(
            &synthetic_table(&truth),
            &gavel_job_traits(),
            &GpuCatalog::builtin(),
            &ReplaySettings::default(),
        )
        .unwrap();
        assert_eq!(r.skipped_job_types, vec!["Unknown net".to_string()]);
        assert_eq!(r.skipped_gpu_types, vec!["tpu".to_string()]);
        assert_eq!(r.per_type.len(), 3);
        assert!(r.overall.mape_pct < 2.0, "{:?}", r.overall);
        assert!(r.overall.spearman > 0.99);
        assert_eq!(r.overall.multi_worker_mape_pct.map(|m| m < 2.0), Some(true));
        assert_eq!(r.refinement.cells, 78);
        assert_eq!(r.refinement.prior_within, 78);
    }

    #[test]
    fn refinement_fixes_a_misjudged_table() {
        // Every measured rate is half what the model says: the prior is 100% off.
        let mut t = synthetic_table(&ModelConstants::default());
        let traits: Vec<JobTraits> = gavel_job_traits()
            .into_iter()
            .map(|mut j| {
                j.forward_gflops_per_sample *= 0.2; // traits that misjudge every job
                j.layers_per_step = 1;
                j
            })
            .collect();
        for m in &mut t {
            m.rate *= 0.5;
        }
        let r = evaluate(
            &t,
            &traits,
            &GpuCatalog::builtin(),
            &ReplaySettings::default(),
        )
        .unwrap();
        assert_eq!(r.refinement.reached, r.refinement.cells);
        assert!(
            r.refinement.max_rounds_needed.unwrap() <= 10,
            "{:?}",
            r.refinement
        );
        for c in &r.refinement.cross_type {
            assert!(
                c.others_after_one_mape_pct < c.others_prior_mape_pct,
                "{c:?}"
            );
        }
    }

    #[test]
    fn nothing_known_is_an_error_and_bad_noise_is_refused() {
        let t = vec![Measurement {
            job_type: "x".into(),
            gpu_type: "v100".into(),
            workers: 1,
            rate: 1.0,
        }];
        let e = evaluate(
            &t,
            &gavel_job_traits(),
            &GpuCatalog::builtin(),
            &ReplaySettings::default(),
        )
        .unwrap_err();
        assert!(matches!(e, EvalError::NothingToEvaluate(_)));
        let bad = ReplaySettings {
            noise: -1.0,
            ..ReplaySettings::default()
        };
        assert!(matches!(
            evaluate(&t, &gavel_job_traits(), &GpuCatalog::builtin(), &bad),
            Err(EvalError::BadSettings(_))
        ));
    }
}
