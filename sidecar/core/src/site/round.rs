//! One round of the site's rules in the core's terms: who each planned job is to the limits,
//! its time limit, the GPUs jobs outside the plan hold, the limits and the nodes each job is
//! offered. Whoever knows the site fills a [`SiteRound`] (the daemon from Slurm's records);
//! the round's stages then run on it alike: [`SiteRound::limit_waits`] before the plan,
//! [`SiteRound::plan`] around any round policy.

use super::limits::{self, Limit, SiteJob};
use super::reservations::{Offer, plan_in_pools};
use crate::cluster::Cluster;
use crate::job::{JobId, JobState};
use crate::plan::{RoundPlan, WaitReason, Waiting};
use crate::policy::RoundInput;
use std::collections::{BTreeSet, HashMap};

/// The site's rules for one round's planned jobs.
#[derive(Clone, Debug, Default)]
pub struct SiteRound {
    /// The planned jobs as the limits see them (user, account, QOS, partition, GPUs, CPUs,
    /// memory).
    pub jobs: HashMap<JobId, SiteJob>,
    /// Each planned job's time left, seconds, for those that have a limit.
    pub time_limits_s: HashMap<JobId, f64>,
    /// The jobs holding GPUs outside the plan (not managed, or forked): they count against
    /// the limits.
    pub held: Vec<SiteJob>,
    /// The planned jobs that hold GPUs now.
    pub running: BTreeSet<JobId>,
    /// The QOS, association and partition limits.
    pub limits: Vec<Limit>,
    /// The nodes each job may use, by its reservation and its user's choice (a job not
    /// listed may use any).
    pub offers: HashMap<JobId, Offer>,
}

/// The waiting jobs the limits hold back before the plan ([`SiteRound::limit_waits`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteWaits {
    /// Each job left out of the plan, or kept off a type, with the limit.
    pub waits: Vec<(JobId, WaitReason)>,
    /// The waiting jobs a full limit on one GPU type keeps off that type, in words.
    pub typed_off: Vec<(JobId, String)>,
}

impl SiteWaits {
    /// Marks `plan` (of the jobs `planned`) with the waits: a job left out of the plan waits
    /// for what held it back; a job still planned lost only some types, and waits for the
    /// limit only if it waits (and no other limit is named).
    pub fn mark(&self, plan: &mut RoundPlan, planned: &[JobState]) {
        for (job, reason) in &self.waits {
            if planned.iter().any(|s| s.id() == *job) {
                if let Some(w) = plan.waiting.iter_mut().find(|w| w.job == *job)
                    && !matches!(w.reason, WaitReason::SiteLimit { .. })
                {
                    w.reason = reason.clone();
                }
                continue;
            }
            plan.waiting.push(Waiting {
                job: *job,
                reason: reason.clone(),
            });
        }
    }
}

impl SiteRound {
    /// Plans the round with `plan` within the site's rules: in the pools the offers make
    /// ([`plan_in_pools`]), each within the limits and time limits
    /// ([`super::plan_within_site`]).
    pub fn plan(
        &self,
        input: &RoundInput<'_>,
        mut plan: impl FnMut(&RoundInput<'_>) -> RoundPlan,
    ) -> RoundPlan {
        plan_in_pools(
            input.cluster,
            input.jobs,
            &self.offers,
            &self.running,
            |cluster, jobs| {
                super::plan_within_site(
                    jobs,
                    cluster,
                    input.restart_s,
                    &self.time_limits_s,
                    &self.jobs,
                    &self.held,
                    &self.limits,
                    &self.running,
                    |jobs| {
                        plan(&RoundInput {
                            jobs,
                            cluster,
                            ..*input
                        })
                    },
                )
            },
        )
    }

    /// The waiting jobs of `states` that a limit keeps from starting even if only the jobs
    /// before them (in arrival order) started ([`limits::over_limits`]): taken out of
    /// `states`, to wait for it. A waiting job a full limit on one GPU type keeps from that
    /// type ([`limits::full_types`]) loses the type in `states` (so no later pass commits it
    /// there) and is listed too: if it waits, it waits for that limit.
    pub fn limit_waits(&self, states: &mut Vec<JobState>, cluster: &Cluster) -> SiteWaits {
        let mut out = SiteWaits::default();
        if self.limits.is_empty() {
            return out;
        }
        // Waiting jobs have no GPU types yet, so limits on one type are left to `full_types`
        // and the plan's check: no type names needed here.
        let over = limits::over_limits(
            states,
            &self.jobs,
            &self.held,
            &self.limits,
            &self.running,
            &[],
        );
        states.retain(|s| !over.iter().any(|(j, _)| *j == s.id()));
        out.waits.extend(
            over.into_iter()
                .map(|(j, limit)| (j, WaitReason::SiteLimit { limit })),
        );
        let full = limits::full_types(
            states,
            &self.jobs,
            &self.held,
            &self.limits,
            &self.running,
            cluster.type_names(),
        );
        for (job, types, label) in full {
            if let Some(s) = states.iter_mut().find(|s| s.id() == job) {
                *s = super::time_limit::without_types(s, &types);
            }
            let names: Vec<&str> = types.iter().map(|t| cluster.type_name(*t)).collect();
            out.typed_off
                .push((job, format!("{label} keeps it off {}", names.join(", "))));
            out.waits
                .push((job, WaitReason::SiteLimit { limit: label }));
        }
        out
    }
}
