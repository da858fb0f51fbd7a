//! What the policies believe about job throughputs, when that is not the truth.
//!
//! By default policies see each job's true (measured) throughput table. To show what
//! scheduling before profiling costs, a simulation can instead give the policies estimates
//! ([`EstimatedThroughputs`]): a job's profile starts as the traits-based estimate of
//! [`hadar_core::estimate`] and is refined from the rates the job is measured at as it runs,
//! while the simulator advances every job at its true rate.

use hadar_core::estimate::{GpuCatalog, OnlineEstimate, gavel_job, profile_for};
use hadar_core::{Cluster, GpuType, Job, JobId, RateCurve, ThroughputProfile};
use std::collections::{HashMap, HashSet};

/// A source of the throughput profiles policies plan with.
pub trait Beliefs {
    /// The profile policies see for `job` from its arrival.
    fn on_arrival(&mut self, job: &Job) -> ThroughputProfile;

    /// The job ran with `gpus` GPUs of type `t` at `rate` steps/s (zero: it cannot run that
    /// way). Returns the profile policies see from now on.
    fn on_measurement(&mut self, job: JobId, t: GpuType, gpus: u32, rate: f64)
    -> ThroughputProfile;
}

/// Why estimated throughputs cannot be used for a workload.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("no job traits are known for job type `{0}`, so its throughput cannot be estimated")]
pub struct UnknownTraits(pub String);

/// Traits-based estimates refined online from measurements.
pub struct EstimatedThroughputs {
    cluster: Cluster,
    /// The GPUs the estimator knows.
    catalog: GpuCatalog,
    estimates: HashMap<JobId, OnlineEstimate>,
    cannot_run: HashSet<(JobId, GpuType, u32)>,
}

impl EstimatedThroughputs {
    /// Estimates for the jobs of a workload; every job's kind must have known traits.
    pub fn new(cluster: &Cluster, jobs: &[Job]) -> Result<Self, UnknownTraits> {
        for j in jobs {
            if gavel_job(&j.kind).is_none() {
                return Err(UnknownTraits(j.kind.clone()));
            }
        }
        Ok(EstimatedThroughputs {
            cluster: cluster.clone(),
            catalog: GpuCatalog::default(),
            estimates: HashMap::new(),
            cannot_run: HashSet::new(),
        })
    }

    /// The same, estimating with `catalog` (a site's `[gpu_types]` beside the built-in GPUs).
    pub fn with_catalog(mut self, catalog: GpuCatalog) -> Self {
        self.catalog = catalog;
        self
    }

    fn current(&self, job: JobId) -> ThroughputProfile {
        let Some(est) = self.estimates.get(&job) else {
            return ThroughputProfile::default();
        };
        let p = est.profile();
        let curves = (0..p.type_count())
            .map(|i| {
                let t = GpuType(i as u16);
                RateCurve::new(
                    p.curve(t)
                        .points()
                        .iter()
                        .copied()
                        .filter(|&(g, _)| !self.cannot_run.contains(&(job, t, g))),
                )
            })
            .collect();
        ThroughputProfile::new(curves)
    }
}

impl Beliefs for EstimatedThroughputs {
    fn on_arrival(&mut self, job: &Job) -> ThroughputProfile {
        let prior = gavel_job(&job.kind)
            .map(|t| profile_for(&t, &self.cluster, &self.catalog))
            .unwrap_or_default();
        self.estimates.insert(job.id, OnlineEstimate::new(prior));
        self.current(job.id)
    }

    fn on_measurement(
        &mut self,
        job: JobId,
        t: GpuType,
        gpus: u32,
        rate: f64,
    ) -> ThroughputProfile {
        if rate > 0.0 && rate.is_finite() {
            if let Some(est) = self.estimates.get_mut(&job) {
                // A rate that is positive and finite is always accepted.
                let _ = est.observe(t, gpus, rate);
            }
        } else {
            self.cannot_run.insert((job, t, gpus));
        }
        self.current(job)
    }
}
