//! QOS, association and partition limits as a feasibility pass over a round's plan: a job
//! Slurm would keep pending for a limit (`QOSMaxGRESPerUser`, `AssocGrpGRES`,
//! `QOSMaxJobsPerUserLimit`, `PartitionTimeLimit`, ...) is never given GPUs, and the reason
//! it waits names the limit.
//!
//! Usage counts as Slurm counts it: the jobs holding GPUs outside the plan (jobs hadar does
//! not manage, managed jobs the plan preempts, until they end), then the plan's running jobs
//! that stay (Slurm never stops a running job for a limit), then the plan's other jobs in the
//! plan's order. A job that would go over a limit is taken out, and [`plan_within`] plans
//! the round again without it, so its GPUs go to other jobs. A limit on one GPU type
//! (`gres/gpu:v100=2`) counts the GPUs of that type the plan gives a job: a job it blocks
//! is offered the other types instead ([`plan_within`]), and waits only if none is free.
//! What each limit bounds, and how much of it a job uses, is in [`bound`].

pub mod bound;

pub use bound::Bound;

use crate::cluster::GpuType;
use crate::job::{JobId, JobState};
use crate::placement::Placement;
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
    /// CPUs it asks for (or holds).
    #[serde(default)]
    pub cpus: u32,
    /// Memory it asks for (or holds), MB.
    #[serde(default)]
    pub mem_mb: u64,
    /// GPUs per type name it holds, or the plan gives it; empty while unknown (a waiting
    /// job before the plan places it).
    #[serde(default)]
    pub gpu_types: Vec<(String, u32)>,
    /// The account's ancestors in the association tree, parent first (without `root`'s
    /// own limits being special: `root` is listed like any parent).
    #[serde(default)]
    pub parents: Vec<String>,
    /// For a running job, the time it has left in seconds (`squeue %L`); `None`: its whole
    /// time limit.
    #[serde(default)]
    pub time_left_s: Option<f64>,
}

impl SiteJob {
    /// A job of `user` in `account`/`qos`/`partition` asking for `gpus` GPUs; no CPUs,
    /// memory, types, parents or time limit yet.
    pub fn new(
        id: JobId,
        user: &str,
        account: &str,
        qos: &str,
        partition: &str,
        gpus: u32,
    ) -> SiteJob {
        SiteJob {
            id,
            user: user.into(),
            account: account.into(),
            qos: qos.into(),
            partition: partition.into(),
            gpus,
            time_limit_s: None,
            cpus: 0,
            mem_mb: 0,
            gpu_types: Vec::new(),
            parents: Vec::new(),
            time_left_s: None,
        }
    }

    /// GPUs of type `name` it holds or is planned.
    pub fn gpus_of(&self, name: &str) -> u32 {
        self.gpu_types
            .iter()
            .filter(|(t, _)| t == name)
            .map(|(_, n)| n)
            .sum()
    }

    /// The job as placed on `p` (its GPUs per type, by the cluster's `type_names`).
    pub fn placed(&self, p: &Placement, type_names: &[String]) -> SiteJob {
        let mut out = self.clone();
        out.gpu_types = Vec::new();
        for part in p.parts() {
            let Some(name) = type_names.get(part.gpu_type.index()) else {
                continue;
            };
            match out.gpu_types.iter_mut().find(|(t, _)| t == name) {
                Some(e) => e.1 += part.gpus,
                None => out.gpu_types.push((name.clone(), part.gpus)),
            }
        }
        out
    }
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
    /// Every job of an account (its association's `MaxTRES`, `MaxJobs`, `MaxWall`).
    Account(String),
    /// Every job of an account and of the accounts below it in the association tree (the
    /// account association's `Grp*` limits, which Slurm checks up the tree).
    AccountTree(String),
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
            Scope::AccountTree(a) if *a == job.account || job.parents.contains(a) => {
                Some(String::new())
            }
            Scope::User { account, user } if *account == job.account && *user == job.user => {
                Some(String::new())
            }
            Scope::Partition(p) if *p == job.partition => Some(String::new()),
            _ => None,
        }
    }
}

/// One limit of the site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limit {
    /// Whose usage it counts.
    pub scope: Scope,
    /// What it bounds.
    pub bound: Bound,
    /// The limit in Slurm's and the admin's words:
    /// `QOSMaxGRESPerUser: QOS gpu4 MaxTRESPerUser=gres/gpu=4`.
    pub label: String,
}

impl Limit {
    /// True when `job` can never run under this limit, whatever else runs.
    fn forbids(&self, job: &SiteJob) -> bool {
        self.scope.bucket(job).is_some() && self.bound.forbids(job)
    }
}

/// The amount of each limit's bound used per (limit, bucket).
#[derive(Default)]
struct Ledger {
    used: HashMap<(usize, String), u64>,
}

impl Ledger {
    fn charge(&mut self, limits: &[Limit], job: &SiteJob) {
        for (i, l) in limits.iter().enumerate() {
            if let Some(b) = l.scope.bucket(job) {
                let u = self.used.entry((i, b)).or_default();
                *u = u.saturating_add(l.bound.amount(job));
            }
        }
    }

    /// The first limit adding `job` would break.
    fn blocking<'a>(&self, limits: &'a [Limit], job: &SiteJob) -> Option<&'a Limit> {
        limits.iter().enumerate().find_map(|(i, l)| {
            let b = l.scope.bucket(job)?;
            let used = self.used.get(&(i, b)).copied().unwrap_or_default();
            l.bound.over(used, job).then_some(l)
        })
    }
}

/// The limit that keeps `job` from ever running, if one does.
pub fn never_runs<'a>(limits: &'a [Limit], job: &SiteJob) -> Option<&'a Limit> {
    limits.iter().find(|l| l.forbids(job))
}

/// The site job of `a`'s job as the assignment places it.
fn as_placed(
    jobs: &HashMap<JobId, SiteJob>,
    job: JobId,
    p: &Placement,
    names: &[String],
) -> Option<SiteJob> {
    jobs.get(&job).map(|j| j.placed(p, names))
}

/// The cluster type a limit on one GPU type names.
fn limit_type(l: &Limit, type_names: &[String]) -> Option<(GpuType, String)> {
    let t = l.bound.gpu_type()?;
    let i = type_names.iter().position(|n| n == t)?;
    Some((GpuType(i as u16), l.label.clone()))
}

/// Jobs refused a GPU type by a limit on that type: (job, (type, the limit's label)).
type Refusals = Vec<(JobId, (GpuType, String))>;

/// [`filter`], also returning the (job, (type, limit)) pairs a limit on one GPU type
/// refuses: each job it takes out for such a limit, and each `moved` running job (running
/// in Slurm, the plan moves it: a new start for Slurm) the plan puts over one. A moved job
/// stays in the plan; [`plan_within`] plans it again without that type.
fn filter_typed(
    plan: RoundPlan,
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
    moved: &BTreeSet<JobId>,
    type_names: &[String],
) -> (RoundPlan, Refusals) {
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
    let mut typed = Vec::new();
    for a in stay {
        if let Some(j) = as_placed(jobs, a.job, &a.placement, type_names) {
            if moved.contains(&a.job) {
                let t = ledger
                    .blocking(limits, &j)
                    .and_then(|l| limit_type(l, type_names));
                typed.extend(t.map(|t| (a.job, t)));
            }
            ledger.charge(limits, &j);
        }
        out.assignments.push(a);
    }
    for a in new {
        let Some(j) = as_placed(jobs, a.job, &a.placement, type_names) else {
            out.assignments.push(a);
            continue;
        };
        match ledger.blocking(limits, &j) {
            Some(l) => {
                typed.extend(limit_type(l, type_names).map(|t| (a.job, t)));
                out.waiting.push(Waiting {
                    job: a.job,
                    reason: WaitReason::SiteLimit {
                        limit: l.label.clone(),
                    },
                })
            }
            None => {
                ledger.charge(limits, &j);
                out.assignments.push(a);
            }
        }
    }
    (out, typed)
}

/// Takes the plan's jobs that would break a limit out of it: they wait, with
/// [`WaitReason::SiteLimit`] naming the limit. `held` are the jobs holding GPUs outside the
/// plan; `running` the plan's jobs that keep running where they are (never taken out). Jobs
/// without an entry in `jobs` are not limited. `type_names` name the cluster's GPU types
/// (by [`GpuType`] index), for limits on one type.
pub fn filter(
    plan: RoundPlan,
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
    type_names: &[String],
) -> RoundPlan {
    filter_typed(
        plan,
        jobs,
        held,
        limits,
        running,
        &BTreeSet::new(),
        type_names,
    )
    .0
}

/// The jobs of `states` (in their order) that would go over a limit if every job before
/// them started too: the `running` ones (where they run) and `held` count first. A
/// pre-pass for look-aheads that do not know the limits (so they do not keep GPUs for a
/// job Slurm would not start). A waiting job's GPU types are not known yet, so limits on
/// one type do not leave it out here.
pub fn over_limits(
    states: &[JobState],
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
    type_names: &[String],
) -> Vec<(JobId, String)> {
    let mut ledger = Ledger::default();
    for j in held {
        ledger.charge(limits, j);
    }
    for s in states.iter().filter(|s| running.contains(&s.id())) {
        let Some(j) = jobs.get(&s.id()) else { continue };
        match &s.placement {
            Some(p) => ledger.charge(limits, &j.placed(p, type_names)),
            None => ledger.charge(limits, j),
        }
    }
    let mut out = Vec::new();
    for j in states
        .iter()
        .filter(|s| !running.contains(&s.id()))
        .filter_map(|s| jobs.get(&s.id()))
    {
        match ledger.blocking(limits, j) {
            Some(l) => out.push((j.id, l.label.clone())),
            None => ledger.charge(limits, j),
        }
    }
    out
}

/// For each waiting job of `states`, the GPU types a limit on one type keeps it from even if
/// only the `running` jobs and `held` ones count (that limit is full for it), with the
/// limit. A pre-pass for look-aheads that do not know the limits: they would otherwise
/// commit the job to a type it cannot get.
pub fn full_types(
    states: &[JobState],
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
    type_names: &[String],
) -> Vec<(JobId, Vec<GpuType>, String)> {
    let mut ledger = Ledger::default();
    for j in held {
        ledger.charge(limits, j);
    }
    for s in states.iter().filter(|s| running.contains(&s.id())) {
        if let (Some(j), Some(p)) = (jobs.get(&s.id()), &s.placement) {
            ledger.charge(limits, &j.placed(p, type_names));
        }
    }
    let mut out = Vec::new();
    for s in states.iter().filter(|s| !running.contains(&s.id())) {
        let Some(j) = jobs.get(&s.id()) else { continue };
        let mut types = Vec::new();
        let mut label = String::new();
        for (i, name) in type_names.iter().enumerate() {
            let mut on = j.clone();
            on.gpu_types = vec![(name.clone(), j.gpus)];
            let typed = limits.iter().enumerate().find(|(k, l)| {
                l.bound.gpu_type() == Some(name.as_str())
                    && l.scope.bucket(&on).is_some_and(|b| {
                        let used = ledger.used.get(&(*k, b)).copied().unwrap_or_default();
                        l.bound.over(used, &on)
                    })
            });
            if let Some((_, l)) = typed {
                types.push(GpuType(i as u16));
                label = l.label.clone();
            }
        }
        if !types.is_empty() {
            out.push((s.id(), types, label));
        }
    }
    out
}

/// Plans the round with `plan` over `states`, within the limits: jobs no plan can run
/// ([`never_runs`]) are left out first; then each plan is [`filter`]ed and, while that
/// takes jobs out, the round is planned again without them, so the GPUs they would have had
/// go to other jobs. A job a limit on one GPU type takes out is planned again without that
/// type (it may run on another) rather than left out. `running` jobs (running in Slurm) are
/// never left out. Returns the last plan, with every job left out waiting for its limit.
pub fn plan_within(
    states: &[JobState],
    jobs: &HashMap<JobId, SiteJob>,
    held: &[SiteJob],
    limits: &[Limit],
    running: &BTreeSet<JobId>,
    type_names: &[String],
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
    // Types a limit on one type took from a job, and that limit.
    let mut banned: HashMap<JobId, (Vec<GpuType>, String)> = HashMap::new();
    loop {
        let left: Vec<JobState> = states
            .iter()
            .filter(|s| !out.contains_key(&s.id()))
            .map(|s| match banned.get(&s.id()) {
                Some((types, _)) => crate::site::time_limit::without_types(s, types),
                None => s.clone(),
            })
            .collect();
        let raw = plan(&left);
        let moved: BTreeSet<JobId> = raw
            .assignments
            .iter()
            .filter(|a| running.contains(&a.job))
            .filter(|a| {
                let now = states.iter().find(|s| s.id() == a.job);
                now.is_some_and(|s| s.placement.as_ref() != Some(&a.placement))
            })
            .map(|a| a.job)
            .collect();
        let (mut p, typed) = filter_typed(raw, jobs, held, limits, running, &moved, type_names);
        let mut changed = false;
        let typed_now: BTreeSet<JobId> = typed.iter().map(|(j, _)| *j).collect();
        for (job, (t, label)) in typed {
            let e = banned.entry(job).or_insert_with(|| (Vec::new(), label));
            if !e.0.contains(&t) {
                e.0.push(t);
                changed = true;
            }
        }
        let taken: Vec<(JobId, String)> = p
            .waiting
            .iter()
            .filter(|w| !typed_now.contains(&w.job))
            .filter_map(|w| match &w.reason {
                WaitReason::SiteLimit { limit } if !out.contains_key(&w.job) => {
                    Some((w.job, limit.clone()))
                }
                _ => None,
            })
            .collect();
        if (taken.is_empty() && !changed) || left.is_empty() {
            p.waiting.retain(|w| !out.contains_key(&w.job));
            for w in &mut p.waiting {
                if let Some((_, label)) = banned.get(&w.job) {
                    w.reason = WaitReason::SiteLimit {
                        limit: label.clone(),
                    };
                }
            }
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
