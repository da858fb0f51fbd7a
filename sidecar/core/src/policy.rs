//! The one interface every scheduling policy implements.
//!
//! A policy is called once per round with an immutable snapshot ([`RoundInput`]) and returns
//! a [`RoundPlan`]. It may keep state between rounds in `self` (Gavel remembers its LP
//! allocation, for instance), but it never performs IO, reads a clock or draws randomness
//! from outside: anything random comes from a seeded generator it owns, so a simulation is
//! reproducible from its inputs and seed.

use crate::cluster::Cluster;
use crate::job::JobState;
use crate::passes::TargetFacts;
use crate::plan::RoundPlan;

/// Everything a policy may look at when planning a round.
#[derive(Clone, Copy, Debug)]
pub struct RoundInput<'a> {
    /// The time at the round boundary, in seconds since the workload started.
    pub now_s: f64,
    /// The nominal round length in seconds.
    pub round_s: f64,
    /// Seconds a job loses when its placement changes (checkpoint and reload), for jobs
    /// without a cost of their own ([`RoundInput::restart_of`]).
    pub restart_s: f64,
    /// The cluster's machines (only usable nodes: drained or down ones are left out).
    pub cluster: &'a Cluster,
    /// The active jobs (arrived, unfinished), in arrival order, ties by id.
    pub jobs: &'a [JobState],
}

impl RoundInput<'_> {
    /// Seconds `job` loses when its placement changes: its own cost
    /// ([`crate::Job::restart_s`]) or the round's.
    pub fn restart_of(&self, job: &JobState) -> f64 {
        job.job.restart_or(self.restart_s)
    }

    /// The largest restart cost of any job this round (the round's when no job has its
    /// own): what a decision about the round as a whole must allow for.
    pub fn max_restart_s(&self) -> f64 {
        self.jobs
            .iter()
            .map(|js| self.restart_of(js))
            .reduce(f64::max)
            .unwrap_or(self.restart_s)
    }
}

/// A scheduling policy: Hadar, HadarE or a baseline.
pub trait Policy: Send {
    /// The policy's name as the CLI spells it (`gavel`, `hadar`, ...).
    fn name(&self) -> &str;

    /// Plans the coming round. Every assignment must respect capacity and gang semantics
    /// (see [`RoundPlan::validate`]); jobs not assigned should be listed as waiting with a
    /// reason.
    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan;

    /// Plans the coming round knowing what the target says about the jobs (their phases,
    /// the GPU types it holds each to, the GPUs each holds): the simulator passes its cluster
    /// model's facts here, the daemon Slurm's. Only a policy that applies the target's rules
    /// ([`crate::passes::served::ServedPolicy`]) reads them; the others plan as
    /// [`Policy::plan`].
    fn plan_on(&mut self, input: &RoundInput<'_>, facts: &TargetFacts) -> RoundPlan {
        let _ = facts;
        self.plan(input)
    }

    /// The pricing statistics of the last round planned, for a policy that prices GPUs
    /// (Hadar: its price bounds, what it admitted and kept); `None` for the others.
    fn last_round_stats(&self) -> Option<crate::market::RoundStats> {
        None
    }
}
