//! Online refinement: a job's throughput estimate that starts from the prior (the traits
//! model) and moves towards measured step rates as the job runs.
//!
//! Each (GPU type, worker count) the job has run on keeps an exponentially weighted average
//! (of logarithms: a geometric average) that starts at the current estimate and moves
//! towards each measurement by
//! `alpha = max(min_alpha, 1 / (prior_weight + observations))`: the first measurement
//! counts far more than the prior (which is worth `prior_weight` measurements), later ones
//! settle into a plain EWMA that still follows drift. Cells the job has not run on are the
//! prior times a correction factor learned from the cells it has: the geometric mean of
//! estimate/prior over the same type's measured cells if any, else over all measured cells.
//! So one measurement on V100 also moves the K80 estimate when the traits misjudged the job
//! as a whole.
//!
//! Everything here is deterministic; every estimate lies within
//! `prior x [min(1, r), max(1, r)]` over the measured/prior ratios `r` seen so far.

use crate::cluster::GpuType;
use crate::throughput::{RateCurve, ThroughputProfile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How fast measurements replace the prior.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RefineSettings {
    /// What the prior is worth, in measurements (smaller trusts measurements sooner).
    pub prior_weight: f64,
    /// The EWMA weight of a new measurement once warmed up (0 < min_alpha <= 1).
    pub min_alpha: f64,
}

impl Default for RefineSettings {
    /// The prior is worth a quarter of a measurement (its typical error, tens of percent, is
    /// far above a measured round's); the EWMA then keeps 30% of each new measurement.
    fn default() -> Self {
        RefineSettings {
            prior_weight: 0.25,
            min_alpha: 0.3,
        }
    }
}

/// Why a measurement was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RefineError {
    /// The measured rate is not a finite positive number.
    #[error(
        "measured rate on GPU type {gpu_type} with {workers} workers must be a finite positive number, got {rate}"
    )]
    BadRate {
        /// The type index.
        gpu_type: usize,
        /// Worker count.
        workers: u32,
        /// The value given.
        rate: f64,
    },
    /// Zero workers.
    #[error("a measurement needs at least one worker")]
    NoWorkers,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Cell {
    estimate: f64,
    observations: u32,
}

/// One job's refined throughput estimate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OnlineEstimate {
    prior: ThroughputProfile,
    settings: RefineSettings,
    measured: BTreeMap<(u16, u32), Cell>,
}

impl OnlineEstimate {
    /// Starts from a prior profile with the default settings.
    pub fn new(prior: ThroughputProfile) -> Self {
        OnlineEstimate::with_settings(prior, RefineSettings::default())
    }

    /// Starts from a prior profile with chosen settings (clamped to sensible ranges).
    pub fn with_settings(prior: ThroughputProfile, settings: RefineSettings) -> Self {
        let settings = RefineSettings {
            prior_weight: if settings.prior_weight.is_finite() {
                settings.prior_weight.max(0.0)
            } else {
                0.25
            },
            min_alpha: if settings.min_alpha.is_finite() {
                settings.min_alpha.clamp(1e-3, 1.0)
            } else {
                0.3
            },
        };
        OnlineEstimate {
            prior,
            settings,
            measured: BTreeMap::new(),
        }
    }

    /// The prior this estimate started from.
    pub fn prior(&self) -> &ThroughputProfile {
        &self.prior
    }

    /// Records a measured rate (steps/s of the whole job) with `workers` workers of type `t`.
    pub fn observe(&mut self, t: GpuType, workers: u32, rate: f64) -> Result<(), RefineError> {
        if workers == 0 {
            return Err(RefineError::NoWorkers);
        }
        if !(rate.is_finite() && rate > 0.0) {
            return Err(RefineError::BadRate {
                gpu_type: t.index(),
                workers,
                rate,
            });
        }
        let start = self.rate(t, workers).unwrap_or(rate);
        let cell = self.measured.entry((t.0, workers)).or_insert(Cell {
            estimate: start,
            observations: 0,
        });
        cell.observations += 1;
        let alpha = (1.0 / (self.settings.prior_weight + f64::from(cell.observations)))
            .max(self.settings.min_alpha)
            .min(1.0);
        // Averaging logarithms: rates are ratio-scale, and a prior several times off should
        // not take more rounds to forget than one a few percent off.
        cell.estimate = (cell.estimate.ln() + alpha * (rate.ln() - cell.estimate.ln())).exp();
        Ok(())
    }

    /// Measurements recorded for one cell.
    pub fn observations(&self, t: GpuType, workers: u32) -> u32 {
        self.measured
            .get(&(t.0, workers))
            .map_or(0, |c| c.observations)
    }

    /// Geometric mean of estimate/prior over measured cells that have a prior and pass `keep`.
    fn ratio_where(&self, keep: impl Fn(u16) -> bool) -> Option<f64> {
        let (mut sum, mut n) = (0.0, 0u32);
        for (&(t, w), cell) in &self.measured {
            if !keep(t) {
                continue;
            }
            if let Some(p) = self.prior.rate(GpuType(t), w) {
                sum += (cell.estimate / p).ln();
                n += 1;
            }
        }
        (n > 0).then(|| (sum / f64::from(n)).exp())
    }

    /// The job-level correction factor: how far measurements put the job from its prior
    /// (1 before any measurement).
    pub fn correction(&self) -> f64 {
        self.ratio_where(|_| true).unwrap_or(1.0)
    }

    /// The correction applied to a type's unmeasured cells.
    fn correction_for(&self, t: GpuType) -> f64 {
        self.ratio_where(|u| u == t.0)
            .unwrap_or_else(|| self.correction())
    }

    /// The current estimate of steps/s with `workers` workers of type `t`; `None` when
    /// neither the prior nor a measurement says the job can run so.
    pub fn rate(&self, t: GpuType, workers: u32) -> Option<f64> {
        if let Some(cell) = self.measured.get(&(t.0, workers)) {
            return Some(cell.estimate);
        }
        self.prior
            .rate(t, workers)
            .map(|p| p * self.correction_for(t))
    }

    /// The current estimates as a profile: every prior point, plus measured cells the prior
    /// lacked.
    pub fn profile(&self) -> ThroughputProfile {
        let types = self.prior.type_count().max(
            self.measured
                .keys()
                .map(|&(t, _)| usize::from(t) + 1)
                .max()
                .unwrap_or(0),
        );
        let curves = (0..types)
            .map(|i| {
                let t = GpuType(i as u16);
                let mut workers: Vec<u32> = self
                    .prior
                    .curve(t)
                    .points()
                    .iter()
                    .map(|&(n, _)| n)
                    .collect();
                workers.extend(
                    self.measured
                        .keys()
                        .filter(|&&(u, _)| u == t.0)
                        .map(|&(_, w)| w),
                );
                RateCurve::new(
                    workers
                        .into_iter()
                        .filter_map(|w| self.rate(t, w).map(|r| (w, r))),
                )
            })
            .collect();
        ThroughputProfile::new(curves)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn prior() -> ThroughputProfile {
        ThroughputProfile::new(vec![
            RateCurve::new([(1, 10.0), (2, 18.0)]), // "v100"
            RateCurve::new([(1, 4.0), (2, 7.0)]),   // "k80"
        ])
    }

    #[test]
    fn converges_to_a_constant_measurement() {
        let mut e = OnlineEstimate::new(prior());
        for _ in 0..80 {
            e.observe(GpuType(0), 1, 25.0).unwrap();
        }
        assert!((e.rate(GpuType(0), 1).unwrap() - 25.0).abs() < 1e-6);
    }

    #[test]
    fn first_measurement_outweighs_the_prior() {
        let mut e = OnlineEstimate::new(prior());
        e.observe(GpuType(0), 1, 20.0).unwrap();
        let r = e.rate(GpuType(0), 1).unwrap();
        assert!((r - 10.0 * 2f64.powf(0.8)).abs() < 1e-9, "{r}"); // 80% of the way, geometrically
    }

    #[test]
    fn measuring_one_type_corrects_the_others() {
        let mut e = OnlineEstimate::new(prior());
        for _ in 0..80 {
            e.observe(GpuType(0), 1, 20.0).unwrap(); // the job runs 2x its prior on v100
        }
        assert!((e.correction() - 2.0).abs() < 1e-6);
        assert!(
            (e.rate(GpuType(1), 1).unwrap() - 8.0).abs() < 1e-5,
            "k80 estimate should double"
        );
        assert!(
            (e.rate(GpuType(0), 2).unwrap() - 36.0).abs() < 1e-4,
            "unmeasured worker count of a measured type"
        );
        let p = e.profile();
        assert!((p.rate(GpuType(1), 2).unwrap() - 14.0).abs() < 1e-4);
    }

    #[test]
    fn a_type_uses_its_own_ratio_once_measured() {
        let mut e = OnlineEstimate::new(prior());
        for _ in 0..80 {
            e.observe(GpuType(0), 1, 20.0).unwrap();
            e.observe(GpuType(1), 1, 2.0).unwrap();
        }
        assert!((e.rate(GpuType(1), 2).unwrap() - 3.5).abs() < 1e-4);
    }

    #[test]
    fn bad_measurements_are_refused() {
        let mut e = OnlineEstimate::new(prior());
        assert!(matches!(
            e.observe(GpuType(0), 1, f64::NAN),
            Err(RefineError::BadRate { .. })
        ));
        assert!(matches!(
            e.observe(GpuType(0), 1, 0.0),
            Err(RefineError::BadRate { .. })
        ));
        assert_eq!(e.observe(GpuType(0), 0, 1.0), Err(RefineError::NoWorkers));
        assert_eq!(e.observations(GpuType(0), 1), 0);
    }

    #[test]
    fn a_cell_without_prior_takes_measurements() {
        let mut e = OnlineEstimate::new(prior());
        e.observe(GpuType(1), 8, 30.0).unwrap();
        assert!((e.rate(GpuType(1), 8).unwrap() - 30.0).abs() < 1e-9);
        assert!((e.profile().rate(GpuType(1), 8).unwrap() - 30.0).abs() < 1e-9);
        assert!((e.correction() - 1.0).abs() < 1e-12, "no prior, no ratio");
    }

    proptest! {
        #[test]
        fn estimates_stay_between_prior_and_measurements(
            obs in proptest::collection::vec((0u16..2, prop_oneof![Just(1u32), Just(2u32)], 0.1f64..100.0), 1..40)
        ) {
            let p = prior();
            let mut e = OnlineEstimate::new(p.clone());
            let (mut lo, mut hi) = (1.0f64, 1.0f64);
            for (t, w, r) in obs {
                e.observe(GpuType(t), w, r).unwrap();
                let ratio = r / p.rate(GpuType(t), w).unwrap();
                lo = lo.min(ratio);
                hi = hi.max(ratio);
                for u in 0..2u16 {
                    for n in [1u32, 2] {
                        let got = e.rate(GpuType(u), n).unwrap() / p.rate(GpuType(u), n).unwrap();
                        prop_assert!(got >= lo * (1.0 - 1e-9) && got <= hi * (1.0 + 1e-9), "ratio {got} outside [{lo}, {hi}]");
                    }
                }
            }
        }

        #[test]
        fn a_measured_cell_lies_between_its_start_and_its_measurements(
            rates in proptest::collection::vec(0.1f64..100.0, 1..30)
        ) {
            let mut e = OnlineEstimate::new(prior());
            let (mut lo, mut hi) = (10.0f64, 10.0f64);
            for r in rates {
                e.observe(GpuType(0), 1, r).unwrap();
                lo = lo.min(r);
                hi = hi.max(r);
                let got = e.rate(GpuType(0), 1).unwrap();
                prop_assert!(got >= lo - 1e-9 && got <= hi + 1e-9);
            }
        }
    }
}
