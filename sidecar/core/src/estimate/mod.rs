//! The throughput estimator: steps/s of a job on each GPU type before it has been profiled,
//! from GPU traits and job traits, refined online from measured step rates.
//!
//! * [`gpu`]: the GPU traits table (datasheet figures) and name lookup.
//! * [`site`]: a site's own GPU type names (`[gpu_types]` of hadar.toml) as catalog entries.
//! * [`job`]: job traits, and the traits of Gavel's 26 job types.
//! * [`model`]: the roofline-style step-time model and its four fitted constants.
//! * [`fit`]: fitting those constants to measured rates.
//! * [`online`]: per-job refinement from measurements ([`OnlineEstimate`]).
//! * [`evaluate`]: judging the estimator against a measured table (leave-one-job-out).
//!
//! The simple entry point is [`profile_for`]: a job's estimated [`ThroughputProfile`] on a
//! cluster's GPU types, for 1, 2, 4 and 8 workers.

pub mod evaluate;
pub mod fit;
pub mod gpu;
pub mod job;
pub mod model;
pub mod online;
pub mod site;

pub use gpu::{Arch, GpuCatalog, GpuSpec, SiteName, builtin_gpus, gpu_spec};
pub use job::{JobTraits, TraitsError, gavel_job, gavel_job_traits};
pub use model::{ModelConstants, StepTime, estimate_rate, step_time};
pub use online::{OnlineEstimate, RefineError, RefineSettings};
pub use site::{SiteGpu, SiteGpuError, SiteGpuKind};

use crate::cluster::Cluster;
use crate::throughput::{RateCurve, ThroughputProfile};

/// The worker counts an estimated profile lists.
pub const WORKER_COUNTS: [u32; 4] = [1, 2, 4, 8];

/// The job's estimated profile on the cluster's GPU types, with `catalog` (the built-in GPU
/// table, plus a site's `[gpu_types]`) and the default constants. A type the catalog does
/// not know gets an empty curve (the job is treated as unable to run there until measured).
pub fn profile_for(job: &JobTraits, cluster: &Cluster, catalog: &GpuCatalog) -> ThroughputProfile {
    profile_for_types(
        job,
        cluster.type_names(),
        catalog,
        &ModelConstants::default(),
    )
}

/// The job's estimated profile on the named GPU types, with a chosen catalog and constants.
pub fn profile_for_types(
    job: &JobTraits,
    type_names: &[String],
    catalog: &GpuCatalog,
    constants: &ModelConstants,
) -> ThroughputProfile {
    let curves = type_names
        .iter()
        .map(|name| match catalog.lookup(name) {
            Some(gpu) => RateCurve::new(
                WORKER_COUNTS
                    .iter()
                    .filter_map(|&n| estimate_rate(job, gpu, n, constants).map(|r| (n, r))),
            ),
            None => RateCurve::default(),
        })
        .collect();
    ThroughputProfile::new(curves)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuType;

    #[test]
    fn profile_follows_cluster_type_order_and_skips_unknown_types() {
        let cluster = Cluster::from_type_counts(
            &[("K80".into(), 2), ("mystery".into(), 1), ("v100".into(), 2)],
            2,
        )
        .unwrap();
        let job = gavel_job("ResNet-50 (batch size 64)").unwrap();
        let p = profile_for(&job, &cluster, GpuCatalog::shared_builtin());
        assert_eq!(p.type_count(), 3);
        assert!(p.curve(GpuType(1)).is_empty());
        let (k80, v100) = (
            p.rate(GpuType(0), 1).unwrap(),
            p.rate(GpuType(2), 1).unwrap(),
        );
        assert!(v100 > k80);
        assert_eq!(
            p.curve(GpuType(2))
                .points()
                .iter()
                .map(|&(n, _)| n)
                .collect::<Vec<_>>(),
            WORKER_COUNTS.to_vec()
        );
    }
}
