//! A site's own rules, as pure passes over a round: the weight a job carries from the site's
//! multifactor priority ([`priority`]), the QOS, association and partition limits a plan
//! must stay within ([`limits`]), the time limits a placement must let a job meet
//! ([`time_limit`]), and the nodes Slurm's reservations keep ([`reservations`]). The daemon
//! reads the site's figures from Slurm and calls these; the simulator can call them on a
//! trace's figures. No IO here.

pub mod limits;
pub mod priority;
pub mod reservations;
pub mod round;
pub mod time_limit;

pub use limits::{Bound, Limit, Scope, SiteJob};
pub use priority::{Factors, PriorityInputs, PriorityWeights};
pub use round::{SiteRound, SiteWaits};

use crate::cluster::Cluster;
use crate::job::{JobId, JobState};
use crate::plan::RoundPlan;
use std::collections::HashMap;

/// A round planned within the site's rules: the time-limit rule first restricts each job to
/// the types it finishes on in time ([`time_limit::restrict`]), then `plan` is run within
/// the limits ([`limits::plan_within`]), and restricted jobs that wait say so.
#[allow(clippy::too_many_arguments)]
pub fn plan_within_site(
    jobs: &[JobState],
    cluster: &Cluster,
    restart_s: f64,
    time_limits_s: &HashMap<JobId, f64>,
    site_jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &std::collections::BTreeSet<JobId>,
    plan: impl FnMut(&[JobState]) -> RoundPlan,
) -> RoundPlan {
    let (jobs, restricted) = time_limit::restrict(jobs, cluster, time_limits_s, restart_s);
    let mut out = limits::plan_within(
        &jobs,
        site_jobs,
        held,
        limits,
        running,
        cluster.type_names(),
        plan,
    );
    time_limit::explain_waits(&mut out, &restricted);
    out
}
