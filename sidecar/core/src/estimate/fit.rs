//! Fitting the model's four constants to measured single-worker rates.
//!
//! The fit minimises a robust loss of the log ratio between estimate and measurement (the
//! soft-L1 loss `2 (sqrt(1 + (e/s)^2) - 1)` with scale `s` = 0.25), so a job type the traits
//! cannot explain (a host-bound one) does not drag the constants away from the rest. The
//! search is Nelder-Mead over the logarithms of the constants from two fixed starts, so it
//! is deterministic.

use super::gpu::GpuSpec;
use super::job::JobTraits;
use super::model::{ModelConstants, estimate_rate};

/// One measured rate to fit: a job alone on one GPU.
#[derive(Clone, Debug)]
pub struct Sample<'a> {
    /// The job's traits.
    pub job: &'a JobTraits,
    /// The GPU it ran on.
    pub gpu: &'a GpuSpec,
    /// Measured steps/s with one worker (positive).
    pub rate: f64,
}

/// Scale of the robust loss, in log units (about 25% error).
const LOSS_SCALE: f64 = 0.25;
/// Function evaluations allowed per start.
const MAX_EVALUATIONS: usize = 6000;

fn robust(e: f64) -> f64 {
    let z = e / LOSS_SCALE;
    2.0 * ((1.0 + z * z).sqrt() - 1.0)
}

/// The fit's loss for a set of constants (lower is better).
pub fn loss(k: &ModelConstants, samples: &[Sample<'_>]) -> f64 {
    samples
        .iter()
        .map(|s| match estimate_rate(s.job, s.gpu, 1, k) {
            Some(r) => robust(r.ln() - s.rate.ln()),
            None => robust(10.0),
        })
        .sum()
}

/// Fits the constants to the samples; with no usable sample, returns the defaults.
pub fn fit_constants(samples: &[Sample<'_>]) -> ModelConstants {
    let usable: Vec<Sample<'_>> = samples
        .iter()
        .filter(|s| s.rate.is_finite() && s.rate > 0.0)
        .cloned()
        .collect();
    if usable.is_empty() {
        return ModelConstants::default();
    }
    let f = |x: &[f64; 4]| {
        let v = loss(&ModelConstants::from_log(*x), &usable);
        if v.is_finite() { v } else { f64::MAX }
    };
    let starts = [
        ModelConstants {
            efficiency: 0.3,
            pre_pascal_factor: 0.5,
            step_overhead_s: 0.005,
            layer_overhead_s: 2e-4,
        },
        ModelConstants {
            efficiency: 0.6,
            pre_pascal_factor: 0.3,
            step_overhead_s: 0.02,
            layer_overhead_s: 1e-5,
        },
    ];
    let mut best: Option<([f64; 4], f64)> = None;
    for s in starts {
        let (x, v) = nelder_mead(&f, s.to_log(), 0.5, MAX_EVALUATIONS);
        if best.is_none_or(|(_, b)| v < b) {
            best = Some((x, v));
        }
    }
    best.map(|(x, _)| ModelConstants::from_log(x))
        .unwrap_or_default()
}

/// Minimises `f` from `start` with the Nelder-Mead simplex method (standard coefficients),
/// stopping after `max_evals` evaluations or when the simplex's values agree to 1e-12.
fn nelder_mead<const N: usize>(
    f: &impl Fn(&[f64; N]) -> f64,
    start: [f64; N],
    step: f64,
    max_evals: usize,
) -> ([f64; N], f64) {
    let mut simplex: Vec<([f64; N], f64)> = Vec::with_capacity(N + 1);
    simplex.push((start, f(&start)));
    for i in 0..N {
        let mut p = start;
        p[i] += step;
        simplex.push((p, f(&p)));
    }
    let mut evals = N + 1;
    let by_value = |a: &([f64; N], f64), b: &([f64; N], f64)| a.1.total_cmp(&b.1);
    while evals < max_evals {
        simplex.sort_by(by_value);
        let (best, worst) = (simplex[0].1, simplex[N].1);
        if (worst - best).abs() <= 1e-12 * (1.0 + best.abs()) {
            break;
        }
        let mut centroid = [0.0; N];
        for (p, _) in &simplex[..N] {
            for i in 0..N {
                centroid[i] += p[i] / N as f64;
            }
        }
        let towards = |t: f64| {
            let mut q = [0.0; N];
            for i in 0..N {
                q[i] = centroid[i] + t * (simplex[N].0[i] - centroid[i]);
            }
            q
        };
        let reflected = towards(-1.0);
        let fr = f(&reflected);
        evals += 1;
        if fr < simplex[0].1 {
            let expanded = towards(-2.0);
            let fe = f(&expanded);
            evals += 1;
            simplex[N] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[N - 1].1 {
            simplex[N] = (reflected, fr);
        } else {
            let contracted = if fr < simplex[N].1 {
                towards(-0.5)
            } else {
                towards(0.5)
            };
            let fc = f(&contracted);
            evals += 1;
            if fc < fr.min(simplex[N].1) {
                simplex[N] = (contracted, fc);
            } else {
                let best_point = simplex[0].0;
                for entry in simplex.iter_mut().skip(1) {
                    for (x, b) in entry.0.iter_mut().zip(best_point) {
                        *x = b + 0.5 * (*x - b);
                    }
                    entry.1 = f(&entry.0);
                    evals += 1;
                }
            }
        }
    }
    simplex.sort_by(by_value);
    simplex[0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::gpu::gpu_spec;
    use crate::estimate::job::gavel_job_traits;

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let f = |x: &[f64; 2]| (x[0] - 1.5).powi(2) + 3.0 * (x[1] + 0.5).powi(2);
        let (x, v) = nelder_mead(&f, [0.0, 0.0], 0.5, 2000);
        assert!(
            (x[0] - 1.5).abs() < 1e-4 && (x[1] + 0.5).abs() < 1e-4 && v < 1e-8,
            "{x:?} {v}"
        );
    }

    #[test]
    fn fit_recovers_constants_that_generated_the_data() {
        let truth = ModelConstants {
            efficiency: 0.5,
            pre_pascal_factor: 0.6,
            step_overhead_s: 0.008,
            layer_overhead_s: 3e-4,
        };
        let jobs = gavel_job_traits();
        let gpus: Vec<GpuSpec> = ["k80", "p100", "v100"]
            .iter()
            .map(|g| gpu_spec(g).unwrap())
            .collect();
        let samples: Vec<Sample<'_>> = jobs
            .iter()
            .flat_map(|j| {
                gpus.iter().map(move |g| Sample {
                    job: j,
                    gpu: g,
                    rate: estimate_rate(j, g, 1, &truth).unwrap(),
                })
            })
            .collect();
        let got = fit_constants(&samples);
        for (a, b) in got.to_log().iter().zip(truth.to_log()) {
            assert!((a - b).abs() < 0.02, "fitted {got:?} vs truth {truth:?}");
        }
        assert!(loss(&got, &samples) < 1e-3);
    }
}
