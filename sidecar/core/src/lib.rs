//! The pure scheduling core of hadar.
//!
//! Everything here is a function of its inputs: a [`Cluster`] snapshot, the jobs waiting or
//! running in it, and the policy's own remembered state go in; a [`RoundPlan`] comes out.
//! There is no IO, no clock and no Slurm in this crate. The daemon decides each round with
//! [`passes::served::decide_with`] (the commitment look-ahead, Hadar, Slurm's enforceability
//! rules) from a snapshot of Slurm's state; the simulator and `hadar dry-run` run the same
//! passes around the same Hadar as the policy `served` ([`passes::served::ServedPolicy`]),
//! configured from the same `hadar.toml` with `--config`. What the daemon still does outside
//! this crate: the site's rules are read from Slurm (and applied by [`site`]'s pure passes
//! only in the daemon). `fork=yes` jobs under `[sidecar] policy = "hadare"` are planned by
//! the mixed round, [`passes::mixed`]: the daemon's fork pass takes its copies from
//! [`passes::mixed::plan_mixed`]'s forked plan over what its plain plan leaves, and the
//! simulator runs the same round as [`passes::mixed::MixedPolicy`] (`hadar simulate --config
//! FILE --fork-jobs LIST`).
//!
//! * [`cluster`]: nodes, GPU types and capacities.
//! * [`throughput`]: how fast a job runs on each GPU type with a given number of workers.
//! * [`estimate`]: estimating throughput from GPU and job traits, refined from measurements.
//! * [`job`]: a job's fixed description and its per-round state.
//! * [`placement`]: where a job's workers (or forked copies) run, and the rate that gives.
//! * [`capacity`]: a ledger of free GPUs per (node, type), used while building a plan.
//! * [`plan`]: a round's decisions, and the check that a plan respects capacity and gangs.
//! * [`policy`]: the one trait every scheduling policy implements.
//! * [`market`]: the utilities and the price book Hadar and HadarE share.
//! * [`policies`]: Hadar, HadarE and the baselines.
//! * [`passes`]: the look-ahead and the target's enforceability rules, composed around Hadar
//!   into the policy `hadar serve` runs; the mixed round of plain and `fork=yes` jobs.
//! * [`tracker`]: the Job Tracker's per-round records of forked copies.
//! * [`site`]: a site's own rules (priority weights, limits, time limits) as pure passes.
//! * [`bounds`]: fluid lower bounds on the makespan.
//! * [`lp`]: the linear-programming layer the LP-based policies and bounds share.

pub mod bounds;
pub mod capacity;
pub mod cluster;
pub mod estimate;
pub mod gate;
pub mod job;
pub mod lp;
pub mod market;
pub mod passes;
pub mod placement;
pub mod plan;
pub mod policies;
pub mod policy;
pub mod site;
pub mod throughput;
pub mod tracker;

pub use capacity::FreeCapacity;
pub use cluster::{Cluster, ClusterError, GpuType, Node, NodeId};
pub use job::{Job, JobId, JobState};
pub use placement::{Part, Placement, PlacementKind};
pub use plan::{Assignment, PlanViolation, RoundPlan, WaitReason, Waiting};
pub use policy::{Policy, RoundInput};
pub use throughput::{RateCurve, ThroughputProfile};
