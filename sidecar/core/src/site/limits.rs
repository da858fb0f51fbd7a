//! QOS, association and partition limits as a feasibility pass over a round's plan: a job
//! Slurm would keep pending for a limit (`QOSMaxGRESPerUser`, `AssocGrpGRES`,
//! `QOSMaxJobsPerUserLimit`, `PartitionTimeLimit`, ...) is never given GPUs, and the reason
//! it waits names the limit.
//!
//! Usage counts as Slurm counts it: the jobs holding GPUs outside the plan (jobs hadar does
//! not manage, managed jobs the plan preempts, until they end), then the plan's running jobs
//! that stay (Slurm never stops a running job for a limit), then the plan's other jobs in the
//! plan's order. A job that would go over a limit is taken out, and [`plan_within`] plans
//! the round again without it, so its GPUs go to other jobs.

use crate::job::{JobId, JobState};
use crate::plan::{RoundPlan, WaitReason, Waiting};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

/// What a limit needs to know of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteJob {
    /// The job.
    pub id: JobId,
    /// Its user name.
    pub user: String,
    /// Its account.
    pub account: String,
    /// Its QOS.
    pub qos: String,
    /// Its partition.
    pub partition: String,
    /// GPUs it asks for (or holds).
    pub gpus: u32,
    /// Its time limit in seconds; `None`: unlimited.
    pub time_limit_s: Option<f64>,
}

/// Whose usage a limit counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Each user's jobs in a QOS (`MaxTRESPerUser`, `MaxJobsPerUser`).
    QosPerUser(String),
    /// Each account's jobs in a QOS (`MaxTRESPerAccount`, `MaxJobsPerAccount`).
    QosPerAccount(String),
    /// Every job in a QOS (`GrpTRES`, `GrpJobs`); per job for `MaxWall` and `MaxTRES`.
    Qos(String),
    /// Every job of an account (its association's `GrpTRES`, `GrpJobs`, `MaxWall`).
    Account(String),
    /// A user's jobs in an account (the user association's `GrpTRES`, `MaxJobs`, ...).
    User {
        /// The account.
        account: String,
        /// The user.
        user: String,
    },
    /// Every job in a partition (per job: `MaxTime`).
    Partition(String),
}

impl Scope {
    /// The usage bucket `job` counts in under this scope, if the scope covers it.
    fn bucket(&self, job: &SiteJob) -> Option<String> {
        match self {
            Scope::QosPerUser(q) if *q == job.qos => Some(job.user.clone()),
            Scope::QosPerAccount(q) if *q == job.qos => Some(job.account.clone()),
            Scope::Qos(q) if *q == job.qos => Some(String::new()),
            Scope::Account(a) if *a == job.account => Some(String::new()),
            Scope::User { account, user } if *account == job.account && *user == job.user => {
                Some(String::new())
            }
            Scope::Partition(p) if *p == job.partition => Some(String::new()),
            _ => None,
        }
    }
}

/// What a limit bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Bound {
    /// GPUs held at once by the scope's jobs (`gres/gpu` in a `*TRES*` limit).
    Gpus(u32),
    /// GPUs one job may ask for (`MaxTRESPerJob`, `MaxTRES`).
    GpusPerJob(u32),
    /// Running jobs at once (`MaxJobs*`, `GrpJobs`).
    Jobs(u32),
    /// A job's time limit (`MaxWall`, a partition's `MaxTime`), seconds.
    WallSeconds(f64),
}

/// One limit of the site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// Whose usage it counts.
    pub scope: Scope,
    /// What it bounds.
    pub bound: Bound,
    /// The limit in the admin's words: `QOS gpu4 MaxTRESPerUser=gres/gpu=4`.
    pub label: String,
}

impl Limit {
    /// True when `job` can never run under this limit, whatever else runs.
    fn forbids(&self, job: &SiteJob) -> bool {
        if self.scope.bucket(job).is_none() {
            return false;
        }
        match self.bound {
            Bound::Gpus(n) | Bound::GpusPerJob(n) => job.gpus > n,
            Bound::Jobs(n) => n == 0,
            Bound::WallSeconds(s) => job.time_limit_s.is_none_or(|t| t > s),
        }
    }
}

/// GPUs and jobs counted per (limit, bucket).
#[derive(Default)]
struct Ledger {
    used: HashMap<(usize, String), (u32, u32)>,
}

impl Ledger {
    fn charge(&mut self, limits: &[Limit], job: &SiteJob) {
        for (i, l) in limits.iter().enumerate() {
            if let Some(b) = l.scope.bucket(job) {
                let u = self.used.entry((i, b)).or_default();
                u.0 += job.gpus;
                u.1 += 1;
            }
        }
    }

    /// The first limit adding `job` would break.
    fn blocking<'a>(&self, limits: &'a [Limit], job: &SiteJob) -> Option<&'a Limit> {
        limits.iter().enumerate().find_map(|(i, l)| {
            let b = l.scope.bucket(job)?;
            let (gpus, jobs) = self.used.get(&(i, b)).copied().unwrap_or_default();
            let over = match l.bound {
                Bound::Gpus(n) => gpus + job.gpus > n,
                Bound::Jobs(n) => jobs + 1 > n,
                Bound::GpusPerJob(_) | Bound::WallSeconds(_) => l.forbids(job),
            };
            over.then_some(l)
        })
    }
}

/// The limit that keeps `job` from ever running, if one does.
pub fn never_runs<'a>(limits: &'a [Limit], job: &SiteJob) -> Option<&'a Limit> {
    limits.iter().find(|l| l.forbids(job))
}

/// Takes the plan's jobs that would break a limit out of it: they wait, with
/// [`WaitReason::SiteLimit`] naming the limit. `held` are the jobs holding GPUs outside the
/// plan; `running` the plan's jobs that keep running where they are (never taken out). Jobs
/// without an entry in `jobs` are not limited.
pub fn filter(
    plan: RoundPlan,
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
) -> RoundPlan {
    let mut ledger = Ledger::default();
    for j in held {
        ledger.charge(limits, j);
    }
    let (stay, new): (Vec<_>, Vec<_>) = plan
        .assignments
        .into_iter()
        .partition(|a| running.contains(&a.job));
    let mut out = RoundPlan {
        assignments: Vec::new(),
        waiting: plan.waiting,
    };
    for a in stay {
        if let Some(j) = jobs.get(&a.job) {
            ledger.charge(limits, j);
        }
        out.assignments.push(a);
    }
    for a in new {
        let Some(j) = jobs.get(&a.job) else {
            out.assignments.push(a);
            continue;
        };
        match ledger.blocking(limits, j) {
            Some(l) => out.waiting.push(Waiting {
                job: a.job,
                reason: WaitReason::SiteLimit {
                    limit: l.label.clone(),
                },
            }),
            None => {
                ledger.charge(limits, j);
                out.assignments.push(a);
            }
        }
    }
    out
}

/// The jobs of `states` (in their order) that would go over a limit if every job before
/// them started too: the `running` ones and `held` count first. A pre-pass for look-aheads
/// that do not know the limits (so they do not keep GPUs for a job Slurm would not start).
pub fn over_limits(
    states: &[JobState],
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
) -> Vec<(JobId, String)> {
    let mut ledger = Ledger::default();
    for j in held {
        ledger.charge(limits, j);
    }
    let site = |s: &JobState| jobs.get(&s.id());
    for j in states
        .iter()
        .filter(|s| running.contains(&s.id()))
        .filter_map(site)
    {
        ledger.charge(limits, j);
    }
    let mut out = Vec::new();
    for j in states
        .iter()
        .filter(|s| !running.contains(&s.id()))
        .filter_map(site)
    {
        match ledger.blocking(limits, j) {
            Some(l) => out.push((j.id, l.label.clone())),
            None => ledger.charge(limits, j),
        }
    }
    out
}

/// Plans the round with `plan` over `states`, within the limits: jobs no plan can run
/// ([`never_runs`]) are left out first; then each plan is [`filter`]ed and, while that
/// takes jobs out, the round is planned again without them, so the GPUs they would have had
/// go to other jobs. `running` jobs (running in Slurm) are never left out. Returns the last
/// plan, with every job left out waiting for its limit.
pub fn plan_within(
    states: &[JobState],
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
    mut plan: impl FnMut(&[JobState]) -> RoundPlan,
) -> RoundPlan {
    let mut out: HashMap<JobId, String> = states
        .iter()
        .filter(|s| !running.contains(&s.id()))
        .filter_map(|s| {
            Some((
                s.id(),
                never_runs(limits, jobs.get(&s.id())?)?.label.clone(),
            ))
        })
        .collect();
    loop {
        let left: Vec<JobState> = states
            .iter()
            .filter(|s| !out.contains_key(&s.id()))
            .cloned()
            .collect();
        let mut p = filter(plan(&left), jobs, held, limits, running);
        let taken: Vec<(JobId, String)> = p
            .waiting
            .iter()
            .filter_map(|w| match &w.reason {
                WaitReason::SiteLimit { limit } if !out.contains_key(&w.job) => {
                    Some((w.job, limit.clone()))
                }
                _ => None,
            })
            .collect();
        if taken.is_empty() || left.is_empty() {
            p.waiting.retain(|w| !out.contains_key(&w.job));
            let mut ids: Vec<_> = out.into_iter().collect();
            ids.sort();
            p.waiting
                .extend(ids.into_iter().map(|(job, limit)| Waiting {
                    job,
                    reason: WaitReason::SiteLimit { limit },
                }));
            return p;
        }
        out.extend(taken);
    }
}

#[cfg(test)]
mod tests;
