//! The passes that turn a round policy into the one a real cluster can carry out, and the
//! policy that composes them ([`served::ServedPolicy`], what `hadar serve` runs).
//!
//! A pass is pure: it looks at the round's input, at [`TargetFacts`] (what the target, Slurm
//! or the simulator's cluster model, says about each job: its phase, the GPU types it is held
//! to, the GPUs it holds) and at its own configuration, and it changes the jobs a policy plans
//! or the plan it made. No IO, no clock, no Slurm.
//!
//! * [`lookahead`]: the commitment look-ahead before the plan: the GPU type a waiting job may
//!   start on, the jobs left for a later round, the types a started job keeps.
//! * [`enforce`]: the target's enforceability rules after the plan: placements one Slurm
//!   request can give, types a job held to types keeps.
//! * [`served`]: the composition, behind [`crate::Policy`].
//! * [`mixed`]: the mixed round: plain jobs by one policy, `fork=yes` jobs by HadarE over the
//!   GPUs left.

pub mod enforce;
pub mod lookahead;
pub mod mixed;
pub mod served;

use crate::Cluster;
use crate::job::{Job, JobId, JobState};
use crate::throughput::{RateCurve, ThroughputProfile};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a job stands on the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobPhase {
    /// Not started (pending, held, or requeued and waiting again).
    Waiting,
    /// Given GPUs, not yet seen running.
    Starting,
    /// Running.
    Running,
    /// Being checkpointed and requeued.
    Preempting,
}

impl JobPhase {
    /// Started: it holds GPUs (running, starting or being preempted).
    pub fn is_started(self) -> bool {
        !matches!(self, JobPhase::Waiting)
    }
}

/// What the target says about one job, as the passes need it. Names are the target's
/// (Slurm's node and GPU type names).
#[derive(Clone, Debug, PartialEq)]
pub struct JobFacts {
    /// Its phase.
    pub phase: JobPhase,
    /// The GPU types the target already holds it to (Slurm 22.05 keeps the types of a job's
    /// first typed placement), when it does.
    pub held_types: Option<Vec<String>>,
    /// Whether its request names GPU types (a user's types, or types the target holds).
    pub typed: bool,
    /// The GPUs it holds now: `(node, type, count)`.
    pub holds: Vec<(String, String, u32)>,
    /// Its last reported steps/s, when known.
    pub last_rate: Option<f64>,
}

impl JobFacts {
    /// A waiting job the target holds to nothing.
    pub fn waiting() -> JobFacts {
        JobFacts {
            phase: JobPhase::Waiting,
            held_types: None,
            typed: false,
            holds: Vec::new(),
            last_rate: None,
        }
    }
}

/// What the target says about the round's jobs and nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetFacts {
    /// Per job; a job without facts is treated as waiting and held to nothing.
    pub jobs: BTreeMap<JobId, JobFacts>,
    /// Every node's GPU types as the target knows them, drained or down nodes included.
    pub node_types: BTreeMap<String, Vec<String>>,
}

impl TargetFacts {
    /// The facts the input itself gives, for a target without more to say (the simulator
    /// without a cluster model): a job with a placement is running and holds it, every node
    /// has the types the cluster gives it, no job is held to types.
    pub fn from_input(cluster: &Cluster, jobs: &[JobState]) -> TargetFacts {
        let names = |p: &crate::Placement| {
            p.parts()
                .iter()
                .map(|x| {
                    (
                        cluster.node(x.node).name.clone(),
                        cluster.type_name(x.gpu_type).to_string(),
                        x.gpus,
                    )
                })
                .collect::<Vec<_>>()
        };
        TargetFacts {
            jobs: jobs
                .iter()
                .map(|js| {
                    let facts = match &js.placement {
                        Some(p) => JobFacts {
                            phase: JobPhase::Running,
                            holds: names(p),
                            ..JobFacts::waiting()
                        },
                        None => JobFacts::waiting(),
                    };
                    (js.id(), facts)
                })
                .collect(),
            node_types: cluster
                .nodes()
                .iter()
                .map(|n| {
                    let types = cluster
                        .types()
                        .filter(|t| n.gpus[t.index()] > 0)
                        .map(|t| cluster.type_name(t).to_string())
                        .collect();
                    (n.name.clone(), types)
                })
                .collect(),
        }
    }

    /// The job's facts, or those of a waiting job held to nothing.
    pub fn job(&self, id: JobId) -> JobFacts {
        self.jobs
            .get(&id)
            .cloned()
            .unwrap_or_else(JobFacts::waiting)
    }
}

/// `js` with its throughput limited to the GPU types named in `allowed` (compared without
/// case): a type outside them gets no rate, as a request naming those types would.
pub fn restrict_types(cluster: &Cluster, js: &mut JobState, allowed: &[String]) {
    let curves: Vec<RateCurve> = cluster
        .types()
        .map(|t| {
            let name = cluster.type_name(t);
            if allowed.iter().any(|a| a.eq_ignore_ascii_case(name)) {
                js.job.throughput.curve(t).clone()
            } else {
                RateCurve::default()
            }
        })
        .collect();
    js.job = Arc::new(Job {
        throughput: ThroughputProfile::new(curves),
        ..(*js.job).clone()
    });
}

/// Two nodes for the passes' tests: n1 with 4 V100s, n3 with 4 K80s.
#[cfg(test)]
pub(crate) fn two_node_cluster() -> Cluster {
    use crate::Node;
    Cluster::new(
        vec!["v100".into(), "k80".into()],
        vec![
            Node {
                name: "n1".into(),
                gpus: vec![4, 0],
            },
            Node {
                name: "n3".into(),
                gpus: vec![0, 4],
            },
        ],
    )
    .unwrap()
}
