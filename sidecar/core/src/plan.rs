//! A round's decisions, and the independent check that a plan is feasible.

use crate::capacity::FreeCapacity;
use crate::cluster::{Cluster, GpuType, NodeId};
use crate::job::{JobId, JobState};
use crate::placement::{Placement, PlacementKind};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

/// One job placed for the coming round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// The job.
    pub job: JobId,
    /// Where it runs.
    pub placement: Placement,
    /// Its expected steps/s under that placement.
    pub rate: f64,
    /// The policy's score for this choice (Hadar: utility minus price), when it has one.
    pub payoff: Option<f64>,
}

/// Why a job is left waiting this round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum WaitReason {
    /// Not enough free GPUs of any type it can use.
    DoesNotFit,
    /// Its best placement costs more than the utility it would gain.
    PriceAboveUtility {
        /// Utility of its best placement.
        utility: f64,
        /// Price of that placement.
        price: f64,
    },
    /// The free GPUs are all of types it has no throughput on.
    NoThroughputOnFreeTypes,
    /// It can run on no GPU type of this cluster at all.
    CannotRunAnywhere,
    /// Earlier jobs in the queue are served first (FIFO head-of-line, or priority order).
    QueuedBehind {
        /// The job at the head of the queue, if there is a single one.
        head: Option<JobId>,
    },
    /// Time-sharing: it received its share in earlier rounds and yields this one.
    TimeShare,
    /// Non-preemptive policies keep it waiting until GPUs free up.
    WaitingForRelease,
    /// A limit of the site (QOS, association, partition) would keep it pending in Slurm.
    SiteLimit {
        /// The limit in the admin's words: `QOS gpu4 MaxTRESPerUser=gres/gpu=4`.
        limit: String,
    },
    /// Slurm cannot carry out the placement chosen for it (a rule of the target, such as
    /// nodes per job or one node per copy); it waits for the next round.
    SlurmRule {
        /// The rule, in words.
        why: String,
    },
    /// Its time limit is too short to finish on the free types; it waits for a faster one.
    TimeLimit {
        /// Its time limit, seconds.
        limit_s: f64,
        /// The types it would not finish on, by name.
        too_slow: String,
    },
    /// A Slurm reservation keeps it from the free GPUs: it asked for a reservation that is
    /// not active (or not its), or the free GPUs are on nodes a reservation keeps.
    Reservation {
        /// The reservation(s), by name.
        name: String,
        /// Why, in words.
        why: String,
    },
    /// The nodes its user chose for it (`--exclude`, `--constraint`) have too few free GPUs
    /// it can use.
    NodeChoice {
        /// The user's choice as they wrote it: `--exclude=n1,n4`.
        choice: String,
        /// The nodes it allows, in words.
        nodes: String,
    },
    /// Slurm itself would not start it yet, whatever the GPUs: its partition starts no jobs
    /// (`DOWN`, `INACTIVE`), its user held it, a dependency or a begin time.
    SlurmHolds {
        /// What holds it back.
        hold: crate::gate::Hold,
    },
}

impl std::fmt::Display for WaitReason {
    /// The reason in words a user understands.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::DoesNotFit => f.write_str("not enough free GPUs of a type it can use"),
            WaitReason::PriceAboveUtility { utility, price } => {
                write!(
                    f,
                    "its best placement costs {price:.3}, more than its utility {utility:.3}"
                )
            }
            WaitReason::NoThroughputOnFreeTypes => {
                f.write_str("the free GPUs are all of types it cannot use")
            }
            WaitReason::CannotRunAnywhere => {
                f.write_str("it can run on no GPU type of this cluster")
            }
            WaitReason::QueuedBehind { head: Some(h) } => write!(f, "queued behind job {h}"),
            WaitReason::QueuedBehind { head: None } => f.write_str("queued behind earlier jobs"),
            WaitReason::TimeShare => {
                f.write_str("it has had its time share; other jobs run this round")
            }
            WaitReason::WaitingForRelease => {
                f.write_str("waiting for running jobs to release GPUs")
            }
            WaitReason::SiteLimit { limit } => {
                write!(
                    f,
                    "Slurm would keep it pending for the site's limit {limit}"
                )
            }
            WaitReason::SlurmRule { why } => write!(
                f,
                "Slurm cannot carry out the placement chosen for it ({why}); it is planned again next round"
            ),
            WaitReason::TimeLimit { limit_s, too_slow } => write!(
                f,
                "its time limit of {limit_s:.0} s is too short to finish on {too_slow}; it waits for a type fast enough"
            ),
            WaitReason::Reservation { name, why } => write!(f, "reservation {name}: {why}"),
            WaitReason::NodeChoice { choice, nodes } => write!(
                f,
                "its {choice} allows {nodes}, where not enough GPUs it can use are free"
            ),
            WaitReason::SlurmHolds { hold } => write!(f, "Slurm would not start it yet: {hold}"),
        }
    }
}

/// A job left waiting, with the reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The job.
    pub job: JobId,
    /// Why.
    pub reason: WaitReason,
}

/// A round's plan: who runs where, and who waits and why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundPlan {
    /// Jobs that run this round.
    pub assignments: Vec<Assignment>,
    /// Jobs that wait, with reasons. Policies should list every active job that is not
    /// assigned; the simulator does not rely on it.
    pub waiting: Vec<Waiting>,
}

/// A plan that breaks a rule every policy must respect.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanViolation {
    /// A plan names a job that is not active.
    #[error("job {0} is not an active job")]
    UnknownJob(JobId),
    /// A job is placed twice.
    #[error("job {0} is placed twice")]
    DuplicateJob(JobId),
    /// A (node, type) is given out beyond its capacity.
    #[error("node {node:?} type {gpu_type:?} is given {used} GPUs but has {capacity}")]
    OverCapacity {
        /// The node.
        node: NodeId,
        /// The type.
        gpu_type: GpuType,
        /// GPUs given out.
        used: u32,
        /// GPUs it has.
        capacity: u32,
    },
    /// A gang placement with a GPU count different from the job's workers.
    #[error("gang job {job} needs {workers} GPUs but was given {given}")]
    PartialGang {
        /// The job.
        job: JobId,
        /// Its workers.
        workers: u32,
        /// GPUs given.
        given: u32,
    },
    /// Two copies of a forked job on one node.
    #[error("forked job {job} has two copies on node {node:?}")]
    CopiesShareNode {
        /// The job.
        job: JobId,
        /// The node.
        node: NodeId,
    },
    /// A placement that gives the job no progress at all.
    #[error("job {0} is placed where it cannot run")]
    UselessPlacement(JobId),
    /// An empty placement.
    #[error("job {0} has an empty placement")]
    EmptyPlacement(JobId),
}

impl RoundPlan {
    /// The placement given to `job`, if any.
    pub fn placement_of(&self, job: JobId) -> Option<&Placement> {
        self.assignments
            .iter()
            .find(|a| a.job == job)
            .map(|a| &a.placement)
    }

    /// Checks the rules every plan must keep: known jobs placed once, capacity per
    /// (node, type) respected, gang jobs with exactly their workers, forked copies on
    /// distinct nodes, and every placement able to make progress.
    pub fn validate(&self, cluster: &Cluster, jobs: &[JobState]) -> Result<(), PlanViolation> {
        let by_id: HashMap<JobId, &JobState> = jobs.iter().map(|j| (j.id(), j)).collect();
        let mut seen = HashSet::new();
        let mut cap = FreeCapacity::of(cluster);
        for a in &self.assignments {
            let js = by_id.get(&a.job).ok_or(PlanViolation::UnknownJob(a.job))?;
            if !seen.insert(a.job) {
                return Err(PlanViolation::DuplicateJob(a.job));
            }
            if a.placement.is_empty() {
                return Err(PlanViolation::EmptyPlacement(a.job));
            }
            match a.placement.kind() {
                PlacementKind::Gang => {
                    if a.placement.gpus() != js.job.workers {
                        return Err(PlanViolation::PartialGang {
                            job: a.job,
                            workers: js.job.workers,
                            given: a.placement.gpus(),
                        });
                    }
                }
                PlacementKind::Forked => {
                    let mut nodes = HashSet::new();
                    for p in a.placement.parts() {
                        if !nodes.insert(p.node) {
                            return Err(PlanViolation::CopiesShareNode {
                                job: a.job,
                                node: p.node,
                            });
                        }
                    }
                }
            }
            if a.placement.rate(&js.job.throughput, js.job.workers) <= 0.0 {
                return Err(PlanViolation::UselessPlacement(a.job));
            }
            for p in a.placement.parts() {
                if p.node.index() >= cluster.nodes().len()
                    || p.gpu_type.index() >= cluster.type_count()
                {
                    return Err(PlanViolation::OverCapacity {
                        node: p.node,
                        gpu_type: p.gpu_type,
                        used: p.gpus,
                        capacity: 0,
                    });
                }
                if cap.take(*p).is_err() {
                    let capacity = cluster.capacity(p.node, p.gpu_type);
                    let used = capacity - cap.free(p.node, p.gpu_type) + p.gpus;
                    return Err(PlanViolation::OverCapacity {
                        node: p.node,
                        gpu_type: p.gpu_type,
                        used,
                        capacity,
                    });
                }
            }
        }
        Ok(())
    }
}
