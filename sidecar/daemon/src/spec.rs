//! What the daemon knows about a managed job before it runs: its size, its length and its
//! throughput on each GPU type.
//!
//! Throughput comes, per GPU type and in this order, from: the rate learned from the job's own
//! progress reports on that type; the job's `throughput=` hint (steps/s on one GPU of the
//! type, scaled linearly with the worker count); Gavel's measured table for the job's
//! `type=` (see [`ThroughputTable::resolve_job_type`]), or, on a GPU type the table has no column for (an A100,
//! an H100), the estimator's rate for that job type from its traits and the GPU's datasheet,
//! calibrated on the types the table measured (see
//! [`ThroughputTable::prior`]); then, for a job that describes its model
//! (`model=params:...,gflops:...,batch:...`), the estimator's rate from those traits and the
//! GPU's datasheet; and last a default rate per GPU, the same on every
//! type (so an unknown job is scheduled heterogeneity-blind until it reports). Prior rates
//! (hints, table, default) are multiplied by the configured `throughput_scale`, which lets
//! time-scaled emulated jobs be scheduled with rates in their own time.

use hadar_core::estimate::JobTraits;
use hadar_core::{RateCurve, ThroughputProfile};
use hadar_formats::{TableRate, ThroughputTable};
use hadar_request::{Record, Scope};
use hadar_store::LearnedRate;
use serde::{Deserialize, Serialize};

/// A managed job's request, as the daemon uses it (decoded from the plugin's record).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// GPUs (workers) it trains with.
    pub workers: u32,
    /// Steps to run, when the job said.
    pub steps: Option<u64>,
    /// Its job type (model), when it said.
    pub job_type: Option<String>,
    /// Per-type hints: steps/s on one GPU of the type.
    pub hints: Vec<(String, f64)>,
    /// The only GPU types it may use, when it restricted them.
    pub gpu_types: Option<Vec<String>>,
    /// True when it opted into forking (`fork=yes`): under `policy = "hadare"` it runs as
    /// copies, otherwise as one job.
    pub fork: bool,
    /// Its model's traits (`model=`), from which its rate on a GPU type is estimated before
    /// it has run there.
    pub model: Option<JobTraits>,
    /// How its copies are consolidated when forked (`outer=`); `None`: `[fork] outer`.
    pub outer: Option<hadar_request::Outer>,
    /// Seconds it loses when moved or resumed (`restart=`); `None`: `[sidecar]
    /// restart_seconds`.
    pub restart_s: Option<f64>,
}

impl JobSpec {
    /// The spec of a job from its plugin record: workers are the GPUs it asked for (per job,
    /// or per node times its node count), steps its `steps=` (or `epochs=`, counted in the
    /// same units the job reports). The GPU types in the request do not bind Hadar, which
    /// chooses types itself; `gpu-types=` does. Components of heterogeneous jobs are refused.
    pub fn from_record(text: &str) -> Result<JobSpec, String> {
        let rec = Record::decode(text).map_err(|e| e.to_string())?;
        if let Some(h) = rec.het_offset {
            return Err(format!(
                "component {h} of a heterogeneous job; hadar serve schedules single jobs"
            ));
        }
        let per = rec.gpus.total();
        let workers = match rec.gpus.scope {
            Scope::PerJob => per,
            Scope::PerNode => per * u64::from(rec.nodes.unwrap_or(1)),
        };
        let workers = u32::try_from(workers)
            .ok()
            .filter(|w| *w > 0)
            .ok_or_else(|| format!("asks for {workers} GPUs"))?;
        let d = rec.directives;
        let model = match d.model {
            Some(m) => {
                let traits = JobTraits {
                    name: d.job_type.clone().unwrap_or_else(|| "model=".into()),
                    params: m.params,
                    forward_gflops_per_sample: m.forward_gflops_per_sample,
                    batch_size: m.batch_size,
                    input_bytes_per_sample: m.input_bytes_per_sample,
                    layers_per_step: m.layers_per_step,
                    mixed_precision: m.mixed_precision,
                };
                traits.validate().map_err(|e| e.to_string())?;
                Some(traits)
            }
            None => None,
        };
        Ok(JobSpec {
            workers,
            steps: d.steps.or(d.epochs),
            job_type: d.job_type,
            hints: d
                .throughput
                .into_iter()
                .map(|h| (h.gpu_type, h.rate))
                .collect(),
            gpu_types: d.gpu_types,
            fork: d.may_fork.unwrap_or(false),
            model,
            outer: d.outer,
            restart_s: d.restart_s.map(f64::from),
        })
    }
}

/// Per GPU type of a profile, in its order: the type, its rate (`None`: cannot run there) and
/// where the rate came from.
pub type RateOrigins = Vec<(String, Option<f64>, RateSource)>;

/// Where a rate came from, for `hadar explain`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "source")]
pub enum RateSource {
    /// Learned from the job's progress reports.
    Learned {
        /// Reports folded in.
        samples: u32,
    },
    /// The job's own `throughput=` hint.
    Hint,
    /// Gavel's table, for this job type.
    Table {
        /// The table's job type.
        job_type: String,
    },
    /// The estimator's rate for the table's job type on a GPU type the table did not
    /// measure (its traits and the GPU's datasheet, calibrated on the measured types).
    Estimated {
        /// The table's job type.
        job_type: String,
    },
    /// The estimator's rate from the job's own `model=` traits and the GPU's datasheet.
    Model,
    /// The configured default rate.
    Default,
    /// The job's own `gpu-types=` leaves this type out.
    NotRequested,
    /// Nothing says this job type runs on this GPU type: Gavel's measurements exclude it
    /// (it does not fit), or neither they nor the datasheets know the GPU.
    CannotRun,
    /// Slurm holds the started job to the other types of its typed request.
    Bound,
    /// This round the look-ahead keeps the job on the types it runs on or waits for.
    Kept,
}

/// `origins`, the rates of a job limited to fewer types than `usable`'s, with the reason
/// for each type it lost: `why` where `usable` had a rate, `usable`'s own where it had none.
pub fn withheld(usable: &RateOrigins, mut origins: RateOrigins, why: RateSource) -> RateOrigins {
    for ((_, rate, source), (_, before, before_source)) in origins.iter_mut().zip(usable) {
        if rate.is_none() {
            *source = match before {
                Some(_) => why.clone(),
                None => before_source.clone(),
            };
        }
    }
    origins
}

/// Settings for priors.
#[derive(Clone, Debug, PartialEq)]
pub struct Priors {
    /// Steps/s per GPU assumed when nothing else is known.
    pub default_rate_per_gpu: f64,
    /// Multiplies every prior rate.
    pub throughput_scale: f64,
}

/// The rate of a table job type with `workers` workers of `gpu_type` (fork.rs's tests still
/// call it; the lookup is [`ThroughputTable::rate_or_scaled`]).
#[cfg(test)]
pub(crate) fn table_rate(
    table: &ThroughputTable,
    job_type: &str,
    gpu_type: &str,
    workers: u32,
) -> Option<f64> {
    table.rate_or_scaled(job_type, gpu_type, workers)
}

/// The estimator's steps/s for a job of these traits with `workers` workers of `gpu_type`
/// (default constants, the table's GPU catalog); `None` for a GPU the catalog does not
/// know, or one whose memory the model does not fit.
fn model_rate(
    traits: &JobTraits,
    gpu_type: &str,
    workers: u32,
    table: &ThroughputTable,
) -> Option<f64> {
    use hadar_core::estimate::{ModelConstants, estimate_rate};
    let spec = table.catalog().lookup(gpu_type)?;
    estimate_rate(traits, spec, workers, &ModelConstants::default())
}

/// The job's throughput profile on the cluster's types (`type_names`, in the cluster's
/// order), with where each rate came from.
pub fn profile(
    spec: &JobSpec,
    type_names: &[String],
    learned: &[LearnedRate],
    table: &ThroughputTable,
    priors: &Priors,
) -> (ThroughputProfile, RateOrigins) {
    let n = spec.workers;
    let table_type = spec
        .job_type
        .as_deref()
        .and_then(|t| table.resolve_job_type(t));
    let mut curves = Vec::with_capacity(type_names.len());
    let mut origins = Vec::with_capacity(type_names.len());
    for t in type_names {
        let allowed = spec
            .gpu_types
            .as_ref()
            .is_none_or(|l| l.iter().any(|u| u.eq_ignore_ascii_case(t)));
        let (rate, source) = if !allowed {
            (None, RateSource::NotRequested)
        } else if let Some(l) = learned
            .iter()
            .find(|l| l.gpu_type.eq_ignore_ascii_case(t) && l.workers == n)
        {
            (Some(l.rate), RateSource::Learned { samples: l.samples })
        } else if let Some((_, h)) = spec.hints.iter().find(|(u, _)| u.eq_ignore_ascii_case(t)) {
            (
                Some(h * n as f64 * priors.throughput_scale),
                RateSource::Hint,
            )
        } else if let Some(jt) = table_type {
            let job_type = jt.to_string();
            match table.prior(jt, t, n) {
                TableRate::Measured(r) => (
                    Some(r * priors.throughput_scale),
                    RateSource::Table { job_type },
                ),
                TableRate::Estimated(r) => (
                    Some(r * priors.throughput_scale),
                    RateSource::Estimated { job_type },
                ),
                TableRate::CannotRun => (None, RateSource::CannotRun),
            }
        } else if let Some(r) = spec.model.as_ref().and_then(|m| model_rate(m, t, n, table)) {
            (Some(r * priors.throughput_scale), RateSource::Model)
        } else {
            (
                Some(priors.default_rate_per_gpu * n as f64 * priors.throughput_scale),
                RateSource::Default,
            )
        };
        curves.push(match rate {
            Some(r) => RateCurve::new([(n, r)]),
            None => RateCurve::default(),
        });
        origins.push((t.clone(), rate, source));
    }
    (ThroughputProfile::new(curves), origins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_core::GpuType;

    fn table() -> ThroughputTable {
        hadar_formats::embedded::throughputs().unwrap()
    }

    fn types() -> Vec<String> {
        ["v100", "p100", "k80"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// A job of a table type, nothing else said.
    fn typed_job(workers: u32, job_type: &str) -> JobSpec {
        JobSpec {
            restart_s: None,
            workers,
            steps: None,
            job_type: Some(job_type.into()),
            hints: vec![],
            gpu_types: None,
            fork: false,
            model: None,
            outer: None,
        }
    }

    const PRIORS: Priors = Priors {
        default_rate_per_gpu: 1.0,
        throughput_scale: 1.0,
    };

    #[test]
    fn a_records_restart_is_the_jobs_own_cost() {
        let s = JobSpec::from_record("hadar:v1 gpus=2 restart=90").unwrap();
        assert_eq!(s.restart_s, Some(90.0));
        let s = JobSpec::from_record("hadar:v1 gpus=2").unwrap();
        assert_eq!(s.restart_s, None);
    }

    #[test]
    fn records_give_workers_steps_and_limits() {
        let s = JobSpec::from_record(
            "hadar:v1 gpus-per-node=v100:2 nodes=2 type=resnet50 steps=1000 gpu-types=v100,k80",
        )
        .unwrap();
        assert_eq!(
            (s.workers, s.steps, s.job_type.as_deref()),
            (4, Some(1000), Some("resnet50"))
        );
        assert_eq!(
            s.gpu_types,
            Some(vec!["v100".to_string(), "k80".to_string()])
        );
        let s =
            JobSpec::from_record("hadar:v1 gpus=v100:3,k80:1 epochs=7 throughput=k80:2.5").unwrap();
        assert_eq!((s.workers, s.steps), (4, Some(7)));
        assert_eq!(s.hints, vec![("k80".to_string(), 2.5)]);
        assert!(
            JobSpec::from_record("hadar:v1 gpus=2 het=1")
                .unwrap_err()
                .contains("heterogeneous")
        );
        assert!(JobSpec::from_record("hadar:v2 gpus=2").is_err());
    }

    #[test]
    fn table_rates_scale_and_respect_type_limits() {
        let t = table();
        let spec = JobSpec {
            steps: Some(10),
            ..typed_job(2, "resnet18-b64")
        };
        let (p, origins) = profile(
            &spec,
            &types(),
            &[],
            &t,
            &Priors {
                throughput_scale: 10.0,
                ..PRIORS
            },
        );
        let v100 = t.rate("ResNet-18 (batch size 64)", "v100", 2).unwrap();
        assert_eq!(p.rate(GpuType(0), 2), Some(v100 * 10.0));
        assert!(matches!(origins[0].2, RateSource::Table { .. }));
        let spec = JobSpec {
            gpu_types: Some(vec!["k80".into()]),
            ..spec
        };
        let (p, origins) = profile(&spec, &types(), &[], &t, &PRIORS);
        assert_eq!(p.rate(GpuType(0), 2), None);
        assert_eq!(origins[0].2, RateSource::NotRequested);
        assert!(p.rate(GpuType(2), 2).is_some());
    }

    #[test]
    fn withheld_types_say_why_the_job_may_not_use_them() {
        let t = table();
        let spec = typed_job(2, "resnet18-b64");
        let usable = JobSpec {
            gpu_types: Some(vec!["v100".into(), "p100".into()]),
            ..spec.clone()
        };
        let (_, usable) = profile(&usable, &types(), &[], &t, &PRIORS);
        let bound = JobSpec {
            gpu_types: Some(vec!["v100".into()]),
            ..spec
        };
        let (_, bound) = profile(&bound, &types(), &[], &t, &PRIORS);
        let o = withheld(&usable, bound, RateSource::Bound);
        assert!(matches!(o[0].2, RateSource::Table { .. }), "{o:?}");
        assert_eq!(o[1].2, RateSource::Bound, "{o:?}");
        assert_eq!(o[2].2, RateSource::NotRequested, "{o:?}");
    }

    /// A cluster of newer GPUs than Gavel measured: a job of a table type gets the
    /// estimator's calibrated rate there (faster on an H100 than on a V100), not an
    /// exclusion; a GPU neither the table nor the datasheets know stays excluded.
    #[test]
    fn unmeasured_gpu_types_get_calibrated_estimates() {
        let t = table();
        let spec = typed_job(1, "resnet50-b64");
        let names: Vec<String> = ["v100", "a100", "h100", "rtx-9090"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (p, origins) = profile(&spec, &names, &[], &t, &PRIORS);
        let v100 = p.rate(GpuType(0), 1).unwrap();
        let a100 = p.rate(GpuType(1), 1).unwrap();
        let h100 = p.rate(GpuType(2), 1).unwrap();
        assert!(v100 < a100 && a100 < h100, "{v100} {a100} {h100}");
        assert!(matches!(origins[0].2, RateSource::Table { .. }));
        assert!(matches!(origins[1].2, RateSource::Estimated { .. }));
        assert_eq!(origins[3].2, RateSource::CannotRun);
        assert_eq!(p.rate(GpuType(3), 1), None);
        // Calibration: the estimate on a measured type reproduces the table there.
        let jt = "ResNet-50 (batch size 64)";
        let on_v100 = t.estimated_rate(jt, "v100", 1).unwrap();
        let measured = t.rate(jt, "v100", 1).unwrap();
        assert!(
            (on_v100 / measured - 1.0).abs() < 0.5,
            "{on_v100} vs measured {measured}"
        );
    }

    /// A job Gavel never measured that describes its model: estimated per type from the
    /// traits (faster on newer GPUs), the default rate only where no datasheet is known.
    #[test]
    fn model_traits_give_per_type_estimates_before_any_report() {
        let spec = JobSpec::from_record(
            "hadar:v1 gpus=2 steps=1000 model=params:25.6M,gflops:4.1,batch:64,input:150K,layers:160",
        )
        .unwrap();
        let names: Vec<String> = ["k80", "v100", "a100", "x100"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (p, origins) = profile(&spec, &names, &[], &table(), &PRIORS);
        let rate = |i: u16| p.rate(GpuType(i), 2).unwrap();
        assert!(rate(0) < rate(1) && rate(1) < rate(2), "{origins:?}");
        assert_eq!(
            origins.iter().map(|o| o.2.clone()).collect::<Vec<_>>(),
            [
                RateSource::Model,
                RateSource::Model,
                RateSource::Model,
                RateSource::Default
            ]
        );
        assert_eq!(rate(3), 2.0 * PRIORS.default_rate_per_gpu);
        // A learned rate still wins.
        let learned = vec![LearnedRate {
            job: 1,
            gpu_type: "k80".into(),
            workers: 2,
            rate: 99.0,
            samples: 1,
        }];
        let (p, _) = profile(&spec, &names, &learned, &table(), &PRIORS);
        assert_eq!(p.rate(GpuType(0), 2), Some(99.0));
    }

    #[test]
    fn unmeasured_worker_counts_scale_from_below() {
        let t = table();
        let spec = typed_job(3, "resnet18-b64");
        let (p, _) = profile(&spec, &types(), &[], &t, &PRIORS);
        let two = t.rate("ResNet-18 (batch size 64)", "v100", 2).unwrap();
        assert!((p.rate(GpuType(0), 3).unwrap() - two * 1.5).abs() < 1e-9);
    }

    #[test]
    fn learned_beats_hint_beats_table_beats_default() {
        let t = table();
        let spec = JobSpec {
            restart_s: None,
            workers: 1,
            steps: None,
            job_type: Some("a3c".into()),
            hints: vec![("p100".into(), 7.0)],
            gpu_types: None,
            fork: false,
            model: None,
            outer: None,
        };
        let learned = vec![LearnedRate {
            job: 1,
            gpu_type: "v100".into(),
            workers: 1,
            rate: 42.0,
            samples: 3,
        }];
        let (p, origins) = profile(&spec, &types(), &learned, &t, &PRIORS);
        assert_eq!(p.rate(GpuType(0), 1), Some(42.0));
        assert_eq!(p.rate(GpuType(1), 1), Some(7.0));
        assert_eq!(p.rate(GpuType(2), 1), t.rate("A3C", "k80", 1));
        assert_eq!(origins[0].2, RateSource::Learned { samples: 3 });
        let blank = JobSpec {
            restart_s: None,
            workers: 4,
            steps: None,
            job_type: None,
            hints: vec![],
            gpu_types: None,
            fork: false,
            model: None,
            outer: None,
        };
        let (p, origins) = profile(&blank, &types(), &[], &t, &PRIORS);
        assert_eq!(p.rate(GpuType(1), 4), Some(4.0));
        assert_eq!(origins[2].2, RateSource::Default);
    }
}
