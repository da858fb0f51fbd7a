//! hadar's trace-driven simulator.
//!
//! The simulator plays a workload (a cluster and jobs with arrival times) through a policy,
//! round by round, the way Gavel's simulator does, so results can be compared with Gavel's:
//!
//! * At each round boundary the jobs that have arrived are added, and the policy plans the
//!   round from an immutable snapshot ([`hadar_core::RoundInput`]).
//! * Every assigned job runs for the round (`round_s`), or until it finishes if that is
//!   sooner: a job that finishes mid-round ends mid-round. The round ends when its last job
//!   stops, so a round in which every job finishes early is short. When nothing can run, the
//!   clock jumps to the next arrival.
//! * A job whose placement differs from the one it had in the previous round (including a
//!   job resuming after a pause) pays the restart cost (`restart_s`, checkpoint and reload,
//!   default 0 as in Gavel) at the start of its round, and counts one restart.
//! * A [`ClusterModel`] adds the constraints a real cluster has (all off by default): a start
//!   latency each time a job starts on GPUs it did not hold, a forked job's copies starting
//!   anew each round, the GPU types a started job keeps, and rounds woken by arrivals (a
//!   round sees only the jobs submitted before it read the queue; a later arrival wakes
//!   the next round, no sooner than a gap after this one began).
//! * The plan is checked against capacity and gang rules every round; a policy that breaks
//!   them is a bug, reported as [`SimError::PolicyViolation`].
//!
//! * Policies plan with the jobs' true throughputs, or, with [`Beliefs`] such as
//!   [`EstimatedThroughputs`], with estimates refined from the rates jobs are measured at,
//!   while every job still advances at its true rate.
//!
//! The simulator is deterministic for a given workload, policy and seed; only the measured
//! decision times vary between runs.

mod beliefs;
mod engine;
mod metrics;
mod model;

pub use beliefs::{Beliefs, EstimatedThroughputs, UnknownTraits};
pub use engine::{
    RoundRecord, RoundRun, SimConfig, SimError, Workload, simulate, simulate_observed,
    simulate_with,
};
pub use metrics::{JobOutcome, Metrics, SimReport, TypeUtilisation};
pub use model::ClusterModel;
