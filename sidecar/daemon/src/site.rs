//! The site's rules in the daemon's round: Slurm's figures ([`hadar_slurm::site`]) turned
//! into the core's priority weights, limits, time limits and reservations
//! ([`hadar_core::site`]).

pub mod reservations;

use crate::daemon::SlurmApi;
use hadar_core::policies::hadar::{HadarConfig, RoundStats, plan_round};
use hadar_core::site::{Bound, Factors, Limit, PriorityInputs, PriorityWeights, Scope, SiteJob};
use hadar_core::{Cluster, JobId, JobState, RoundInput, RoundPlan, WaitReason};
use hadar_slurm::site::SiteFigures;
use hadar_slurm::{JobStatus, SlurmJob};
use hadar_store::Decision;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The site's rules as Slurm reports them this round, at `now_unix`; none (every job weighs
/// 1, no limits, no reservations) when they cannot be read, with a warning.
pub fn read<S: SlurmApi>(slurm: &S, now_unix: f64) -> Site {
    match slurm.site_figures() {
        Ok(f) => Site::new(f).at(now_unix),
        Err(e) => {
            tracing::warn!(
                "cannot read the site's priority settings and limits from Slurm; planning without them this round: {e}"
            );
            Site::default()
        }
    }
}

fn total_gpus(cluster: &Cluster) -> u32 {
    cluster.types().map(|t| cluster.total_of_type(t)).sum()
}

fn holds_gpus(j: &SlurmJob) -> bool {
    matches!(
        j.status,
        JobStatus::Running | JobStatus::Completing | JobStatus::Suspended
    )
}

/// The jobs of `states` running in Slurm.
fn running(states: &[JobState], slurm_jobs: &[SlurmJob]) -> BTreeSet<JobId> {
    let ids: HashSet<u64> = states.iter().map(|j| j.id().0).collect();
    slurm_jobs
        .iter()
        .filter(|j| ids.contains(&j.id) && holds_gpus(j))
        .map(|j| JobId(j.id))
        .collect()
}

/// The jobs holding GPUs outside `states` (not managed, or forked), as the limits see them.
fn held(site: &Site, states: &[JobState], slurm_jobs: &[SlurmJob]) -> Vec<SiteJob> {
    let planned: HashSet<u64> = states.iter().map(|j| j.id().0).collect();
    slurm_jobs
        .iter()
        .filter(|j| !planned.contains(&j.id) && holds_gpus(j))
        .filter_map(|j| site.site_job(j.id, j.gpu_parts().iter().map(|p| p.2).sum()))
        .collect()
}

/// The waiting jobs of `states` that wait for their reservation (not active, not known, not
/// theirs: [`Site::offers`]), then those (in arrival order) that a limit keeps from starting
/// even if only the jobs before them started
/// ([`hadar_core::site::limits::over_limits`]), with why. The daemon leaves them out of the
/// look-ahead and the plan, and they wait for it.
pub fn blocked(
    site: &Site,
    states: &[JobState],
    slurm_jobs: &[SlurmJob],
) -> Vec<(JobId, WaitReason)> {
    let waiting = states.iter().filter(|j| j.placement.is_none());
    let (_, mut out) = site.offers(waiting.map(|j| j.id().0));
    if site.limits().is_empty() {
        return out;
    }
    let states: Vec<JobState> = states
        .iter()
        .filter(|s| !out.iter().any(|(j, _)| *j == s.id()))
        .cloned()
        .collect();
    let (site_jobs, _) = site.for_jobs(states.iter().map(|j| (j.id().0, j.job.workers)));
    let over = hadar_core::site::limits::over_limits(
        &states,
        &site_jobs,
        &held(site, &states, slurm_jobs),
        site.limits(),
        &running(&states, slurm_jobs),
    );
    out.extend(
        over.into_iter()
            .map(|(j, limit)| (j, WaitReason::SiteLimit { limit })),
    );
    out
}

/// Plans the round with Hadar within the site's limits and time limits
/// ([`hadar_core::site::plan_within_site`]), each job on the nodes the reservations offer
/// it ([`hadar_core::site::reservations::plan_in_pools`]). The jobs holding GPUs outside the
/// plan (not managed, or forked) count against the limits.
pub fn plan(
    site: &Site,
    config: &HadarConfig,
    input: &RoundInput<'_>,
    slurm_jobs: &[SlurmJob],
    blocked: &[(JobId, WaitReason)],
) -> (RoundPlan, RoundStats) {
    let held = held(site, input.jobs, slurm_jobs);
    let running = running(input.jobs, slurm_jobs);
    let (site_jobs, time_limits) =
        site.for_jobs(input.jobs.iter().map(|j| (j.id().0, j.job.workers)));
    let mut stats = RoundStats::default();
    let (offers, _) = site.offers(input.jobs.iter().map(|j| j.id().0));
    let mut plan = hadar_core::site::reservations::plan_in_pools(
        input.cluster,
        input.jobs,
        &offers,
        &running,
        |cluster, jobs| {
            hadar_core::site::plan_within_site(
                jobs,
                cluster,
                input.restart_s,
                &time_limits,
                &site_jobs,
                &held,
                site.limits(),
                &running,
                |jobs| {
                    let (p, s) = plan_round(
                        config,
                        &RoundInput {
                            jobs,
                            cluster,
                            ..*input
                        },
                    );
                    stats = s;
                    p
                },
            )
        },
    );
    plan.waiting
        .extend(blocked.iter().map(|(job, reason)| hadar_core::Waiting {
            job: *job,
            reason: reason.clone(),
        }));
    (plan, stats)
}

/// The site's rules for one round.
#[derive(Clone, Debug, Default)]
pub struct Site {
    figures: SiteFigures,
    weights: Option<PriorityWeights>,
    limits: Vec<Limit>,
    reservations: Vec<hadar_core::site::reservations::Reservation>,
    /// The round's time, seconds since 1970, at which reservations are judged.
    now_unix: f64,
}

impl Site {
    /// The rules of these figures.
    pub fn new(figures: SiteFigures) -> Site {
        let c = &figures.config;
        let weights = c.multifactor.then_some(PriorityWeights {
            fairshare: c.weight_fairshare,
            qos: c.weight_qos,
            age: c.weight_age,
            partition: c.weight_partition,
            job_size: c.weight_job_size,
            max_age_s: c.max_age_s,
            favor_small: c.favor_small,
        });
        let limits = limits_of(&figures);
        Site {
            reservations: reservations::of(&figures.reservations),
            figures,
            weights,
            limits,
            now_unix: 0.0,
        }
    }

    /// The rules judged at `now_unix` (seconds since 1970): which reservations are active.
    pub fn at(mut self, now_unix: f64) -> Site {
        self.now_unix = now_unix;
        self
    }

    /// The limits Slurm enforces.
    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// Job `id`'s priority factors (`None` without `priority/multifactor` or for a job
    /// Slurm did not list), with the weights they are weighed by.
    pub fn factors(
        &self,
        id: u64,
        gpus: u32,
        age_s: f64,
        total_gpus: u32,
    ) -> Option<(Factors, &PriorityWeights)> {
        let w = self.weights.as_ref()?;
        let j = self.figures.jobs.get(&id)?;
        let fs = &self.figures.fairshare;
        let fairshare = fs
            .get(&(j.account.clone(), j.user.clone()))
            .or_else(|| fs.get(&(j.account.clone(), String::new())))
            .copied()
            .unwrap_or(0.0);
        let qos_of = |name: &str| {
            self.figures
                .qos
                .iter()
                .find(|q| q.name == name)
                .map_or(0.0, |q| q.priority)
        };
        let max_qos = self
            .figures
            .qos
            .iter()
            .map(|q| q.priority)
            .fold(0.0, f64::max);
        let part_of = |name: &str| {
            self.figures
                .partitions
                .iter()
                .find(|p| p.name == name)
                .map_or(0.0, |p| p.priority_job_factor)
        };
        let max_part = self
            .figures
            .partitions
            .iter()
            .map(|p| p.priority_job_factor)
            .fold(0.0, f64::max);
        let inputs = PriorityInputs {
            fairshare,
            qos_priority: qos_of(&j.qos),
            max_qos_priority: max_qos,
            age_s,
            partition_factor: part_of(&j.partition),
            max_partition_factor: max_part,
            gpus,
            total_gpus,
        };
        Some((Factors::from_inputs(w, &inputs), w))
    }

    /// Job `id`'s weight in the utility: `exp(strength × priority fraction)`, 1 without
    /// multifactor priority.
    pub fn weight(&self, id: u64, gpus: u32, age_s: f64, cluster: &Cluster, strength: f64) -> f64 {
        self.factors(id, gpus, age_s, total_gpus(cluster))
            .map_or(1.0, |(f, w)| f.weight(w, strength))
    }

    /// Adds each job's priority factors to its decision, for `hadar explain`.
    pub fn explain(
        &self,
        decisions: &mut [Decision],
        states: &[JobState],
        now_s: f64,
        cluster: &Cluster,
        strength: f64,
    ) {
        for js in states {
            let age = now_s - js.job.arrival_s;
            let Some((f, w)) = self.factors(js.id().0, js.job.workers, age, total_gpus(cluster))
            else {
                continue;
            };
            if let Some(d) = decisions.iter_mut().find(|d| d.job == js.id().0) {
                d.text
                    .push_str(&format!(" Priority: {}.", f.describe(w, strength)));
            }
        }
    }

    /// What the limits need to know of job `id`, asking for or holding `gpus` GPUs.
    pub fn site_job(&self, id: u64, gpus: u32) -> Option<SiteJob> {
        let j = self.figures.jobs.get(&id)?;
        Some(SiteJob {
            id: JobId(id),
            user: j.user.clone(),
            account: j.account.clone(),
            qos: j.qos.clone(),
            partition: j.partition.clone(),
            gpus,
            time_limit_s: j.time_limit_s,
        })
    }

    /// Job `id`'s time limit, seconds.
    pub fn time_limit_s(&self, id: u64) -> Option<f64> {
        self.figures.jobs.get(&id)?.time_limit_s
    }

    /// The site jobs of every job in `ids`, and their time limits.
    pub fn for_jobs(
        &self,
        ids: impl IntoIterator<Item = (u64, u32)>,
    ) -> (HashMap<JobId, SiteJob>, HashMap<JobId, f64>) {
        let mut jobs = HashMap::new();
        let mut limits = HashMap::new();
        for (id, gpus) in ids {
            if let Some(j) = self.site_job(id, gpus) {
                if let Some(t) = j.time_limit_s {
                    limits.insert(JobId(id), t);
                }
                jobs.insert(JobId(id), j);
            }
        }
        (jobs, limits)
    }
}

fn gpus(label: String, scope: Scope, n: Option<u32>, per_job: bool) -> Option<Limit> {
    let n = n?;
    Some(Limit {
        scope,
        bound: if per_job {
            Bound::GpusPerJob(n)
        } else {
            Bound::Gpus(n)
        },
        label,
    })
}

/// The limits of `figures` as Slurm enforces them: QOS and association limits only when
/// `AccountingStorageEnforce` has `limits`; partition time limits always.
fn limits_of(f: &SiteFigures) -> Vec<Limit> {
    let mut out: Vec<Limit> = f
        .partitions
        .iter()
        .filter_map(|p| {
            Some(Limit {
                scope: Scope::Partition(p.name.clone()),
                bound: Bound::WallSeconds(p.max_time_s?),
                label: format!("partition {} MaxTime ({} s)", p.name, p.max_time_s?),
            })
        })
        .collect();
    if !f.config.enforce_limits {
        return out;
    }
    for q in &f.qos {
        let n = &q.name;
        out.extend(gpus(
            format!(
                "QOS {n} MaxTRESPerUser=gres/gpu={}",
                q.max_gpus_per_user.unwrap_or(0)
            ),
            Scope::QosPerUser(n.clone()),
            q.max_gpus_per_user,
            false,
        ));
        out.extend(gpus(
            format!(
                "QOS {n} MaxTRESPerAccount=gres/gpu={}",
                q.max_gpus_per_account.unwrap_or(0)
            ),
            Scope::QosPerAccount(n.clone()),
            q.max_gpus_per_account,
            false,
        ));
        out.extend(gpus(
            format!("QOS {n} GrpTRES=gres/gpu={}", q.grp_gpus.unwrap_or(0)),
            Scope::Qos(n.clone()),
            q.grp_gpus,
            false,
        ));
        out.extend(gpus(
            format!(
                "QOS {n} MaxTRESPerJob=gres/gpu={}",
                q.max_gpus_per_job.unwrap_or(0)
            ),
            Scope::Qos(n.clone()),
            q.max_gpus_per_job,
            true,
        ));
        if let Some(m) = q.max_jobs_per_user {
            out.push(Limit {
                scope: Scope::QosPerUser(n.clone()),
                bound: Bound::Jobs(m),
                label: format!("QOS {n} MaxJobsPerUser={m}"),
            });
        }
        if let Some(s) = q.max_wall_s {
            out.push(Limit {
                scope: Scope::Qos(n.clone()),
                bound: Bound::WallSeconds(s),
                label: format!("QOS {n} MaxWall ({s} s)"),
            });
        }
    }
    for a in &f.assocs {
        let (scope, who) = match &a.user {
            Some(u) => (
                Scope::User {
                    account: a.account.clone(),
                    user: u.clone(),
                },
                format!("association {}/{u}", a.account),
            ),
            None => (
                Scope::Account(a.account.clone()),
                format!("account {}", a.account),
            ),
        };
        out.extend(gpus(
            format!("{who} GrpTRES=gres/gpu={}", a.grp_gpus.unwrap_or(0)),
            scope.clone(),
            a.grp_gpus,
            false,
        ));
        out.extend(gpus(
            format!("{who} MaxTRES=gres/gpu={}", a.max_gpus_per_job.unwrap_or(0)),
            scope.clone(),
            a.max_gpus_per_job,
            true,
        ));
        for (key, m) in [("GrpJobs", a.grp_jobs), ("MaxJobs", a.max_jobs)] {
            if let Some(m) = m {
                out.push(Limit {
                    scope: scope.clone(),
                    bound: Bound::Jobs(m),
                    label: format!("{who} {key}={m}"),
                });
            }
        }
        if let Some(s) = a.max_wall_s {
            out.push(Limit {
                scope: scope.clone(),
                bound: Bound::WallSeconds(s),
                label: format!("{who} MaxWall ({s} s)"),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::site::{JobAccount, QosFigures, SiteConfig};

    #[test]
    fn figures_become_weights_and_limits() {
        let mut f = SiteFigures {
            config: SiteConfig {
                multifactor: true,
                weight_fairshare: 10000.0,
                enforce_limits: true,
                ..Default::default()
            },
            ..Default::default()
        };
        f.jobs.insert(
            7,
            JobAccount {
                user: "nobody".into(),
                account: "a".into(),
                qos: "gpu4".into(),
                partition: "gpu".into(),
                time_limit_s: Some(60.0),
                reservation: None,
            },
        );
        f.fairshare.insert(("a".into(), "nobody".into()), 0.5);
        f.qos.push(QosFigures {
            name: "gpu4".into(),
            max_gpus_per_user: Some(4),
            ..Default::default()
        });
        let s = Site::new(f.clone());
        let (fac, w) = s.factors(7, 1, 0.0, 16).unwrap();
        assert_eq!(fac.fairshare, 0.5);
        assert_eq!(fac.fraction(w), 0.5);
        assert_eq!(s.limits().len(), 1);
        assert_eq!(s.limits()[0].label, "QOS gpu4 MaxTRESPerUser=gres/gpu=4");
        assert_eq!(s.time_limit_s(7), Some(60.0));
        f.config.enforce_limits = false;
        f.config.multifactor = false;
        let s = Site::new(f);
        assert!(s.limits().is_empty());
        assert!(s.factors(7, 1, 0.0, 16).is_none());
    }
}
