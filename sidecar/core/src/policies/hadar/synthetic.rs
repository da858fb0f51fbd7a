//! A seeded synthetic cluster and job queue, the workload of `hadar bench round`.
//!
//! The cluster has `nodes` nodes of `gpus_per_node` GPUs; node `i` holds type `i % types`,
//! so each type has the same share. Type `k` runs jobs at `0.6^k` of the fastest type's
//! speed, scaled per job by a random factor so jobs disagree on how much they gain from
//! fast GPUs, and each job lacks throughput on a type with probability 1/10 (never on all).
//! Workers are 1, 2, 4 or 8 with probabilities 0.6, 0.2, 0.15, 0.05, as in Gavel's traces.
//! Remaining work is log-uniform between 10 minutes and 10 hours at the fastest type.
//! To measure a steady-state round, the queue is first planned once and the jobs placed
//! then are marked as running there, so the timed round weighs stickiness as it would in
//! a live cluster.

use super::{HadarConfig, plan_round};
use crate::cluster::{Cluster, Node};
use crate::job::{Job, JobId, JobState};
use crate::policy::RoundInput;
use crate::throughput::{RateCurve, ThroughputProfile};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// The shape of a synthetic workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntheticSpec {
    /// Jobs in the queue.
    pub jobs: u32,
    /// Nodes in the cluster.
    pub nodes: u32,
    /// GPUs on each node.
    pub gpus_per_node: u32,
    /// GPU types (at least 1).
    pub types: u32,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            jobs: 2000,
            nodes: 256,
            gpus_per_node: 8,
            types: 4,
            seed: 1,
        }
    }
}

/// Why a synthetic workload could not be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SyntheticError {
    /// A size was zero.
    #[error("{0}: must be at least 1")]
    Zero(&'static str),
}

/// A synthetic cluster and the active jobs of one round.
#[derive(Clone, Debug)]
pub struct SyntheticWorkload {
    /// The cluster.
    pub cluster: Cluster,
    /// The active jobs, in arrival order.
    pub jobs: Vec<JobState>,
}

impl SyntheticWorkload {
    /// The round input for this workload at its clock (one hour in, rounds of 360 s, 30 s
    /// restarts).
    pub fn input(&self) -> RoundInput<'_> {
        RoundInput {
            now_s: 3600.0,
            round_s: 360.0,
            restart_s: 30.0,
            cluster: &self.cluster,
            jobs: &self.jobs,
        }
    }
}

/// Builds the workload described by `spec`.
pub fn generate(spec: &SyntheticSpec) -> Result<SyntheticWorkload, SyntheticError> {
    for (v, name) in [
        (spec.jobs, "jobs"),
        (spec.nodes, "nodes"),
        (spec.gpus_per_node, "gpus-per-node"),
        (spec.types, "types"),
    ] {
        if v == 0 {
            return Err(SyntheticError::Zero(name));
        }
    }
    let types = spec.types as usize;
    let mut rng = SmallRng::seed_from_u64(spec.seed);
    let type_names: Vec<String> = (0..types).map(|t| format!("gpu{t}")).collect();
    let nodes: Vec<Node> = (0..spec.nodes as usize)
        .map(|i| {
            let mut gpus = vec![0; types];
            gpus[i % types] = spec.gpus_per_node;
            Node {
                name: format!("node{i:04}"),
                gpus,
            }
        })
        .collect();
    let cluster = Cluster::new(type_names, nodes).map_err(|_| SyntheticError::Zero("nodes"))?;
    let mut jobs = Vec::with_capacity(spec.jobs as usize);
    for id in 0..spec.jobs as u64 {
        let workers = match rng.random_range(0..100) {
            0..60 => 1,
            60..80 => 2,
            80..95 => 4,
            _ => 8,
        };
        let base = rng.random_range(1.0..20.0) * workers as f64 * 0.9;
        let sensitivity = rng.random_range(0.5..1.5);
        let missing = if types > 1 && rng.random_bool(0.1) {
            Some(rng.random_range(0..types))
        } else {
            None
        };
        let curves: Vec<RateCurve> = (0..types)
            .map(|t| {
                if Some(t) == missing {
                    RateCurve::default()
                } else {
                    RateCurve::new([(workers, base * 0.6f64.powf(t as f64 * sensitivity))])
                }
            })
            .collect();
        let hours = 10f64.powf(rng.random_range(-0.78..1.0));
        let steps = base * hours * 3600.0;
        let job = Job {
            restart_s: None,
            id: JobId(id),
            kind: "synthetic".into(),
            arrival_s: rng.random_range(0.0..3600.0),
            workers,
            total_steps: steps,
            weight: 1.0,
            throughput: ThroughputProfile::new(curves),
        };
        let mut state = JobState::arrived(Arc::new(job), types);
        state.remaining_steps = steps * rng.random_range(0.2..1.0);
        jobs.push(state);
    }
    jobs.sort_by(|a, b| a.job.arrival_order(&b.job));
    let mut workload = SyntheticWorkload { cluster, jobs };
    let (earlier, _) = plan_round(&HadarConfig::default(), &workload.input());
    let placements: std::collections::HashMap<JobId, _> = earlier
        .assignments
        .into_iter()
        .map(|a| (a.job, a.placement))
        .collect();
    for j in &mut workload.jobs {
        j.placement = placements.get(&j.id()).cloned();
    }
    Ok(workload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_has_the_requested_shape_and_is_reproducible() {
        let spec = SyntheticSpec {
            jobs: 50,
            nodes: 8,
            gpus_per_node: 4,
            types: 2,
            seed: 3,
        };
        let a = generate(&spec).unwrap();
        let b = generate(&spec).unwrap();
        assert_eq!(a.cluster.total_gpus(), 32);
        assert_eq!(a.jobs.len(), 50);
        assert!(a.jobs.iter().any(|j| j.placement.is_some()));
        let ids = |w: &SyntheticWorkload| {
            w.jobs
                .iter()
                .map(|j| (j.id(), j.placement.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&a), ids(&b));
        assert_eq!(
            generate(&SyntheticSpec { jobs: 0, ..spec }).unwrap_err(),
            SyntheticError::Zero("jobs")
        );
    }
}
