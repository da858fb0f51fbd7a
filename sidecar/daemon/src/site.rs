//! The site's rules in the daemon's round: Slurm's figures ([`hadar_slurm::site`]) turned
//! into the core's priority weights, limits, time limits and reservations
//! ([`hadar_core::site`]).

pub mod file;
pub mod node_choice;
pub mod reservations;
pub mod simulated;

use crate::slurm_api::SlurmApi;
use hadar_core::site::reservations::Chosen;
use hadar_core::site::{
    Factors, Limit, PriorityInputs, PriorityWeights, SiteJob, SiteRound, SiteWaits,
};
use hadar_core::{Cluster, JobId, JobState, Policy, RoundInput, RoundPlan};
use hadar_slurm::site::SiteFigures;
use hadar_slurm::{JobStatus, SlurmJob};
use hadar_store::Decision;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The site's rules as Slurm reports them this round, at `now_unix`, with what the limits
/// need of `jobs` (the round's read of them); none (every job weighs 1, no limits, no
/// reservations) when they cannot be read, with a warning.
pub fn read<S: SlurmApi>(slurm: &S, now_unix: f64, jobs: &[SlurmJob]) -> Site {
    match slurm.site_figures() {
        Ok(mut f) => {
            for (id, account) in hadar_slurm::site::job_accounts(jobs, now_unix) {
                f.jobs.entry(id).or_insert(account);
            }
            Site::new(f).at(now_unix)
        }
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
        .filter_map(|j| {
            let parts = j.gpu_parts();
            let mut sj = site.site_job(j.id, parts.iter().map(|p| p.2).sum())?;
            (sj.cpus, sj.mem_mb) = resources(j, sj.gpus);
            for (_, t, n) in parts {
                match sj.gpu_types.iter_mut().find(|(u, _)| *u == t) {
                    Some(e) => e.1 += n,
                    None => sj.gpu_types.push((t, n)),
                }
            }
            Some(sj)
        })
        .collect()
}

/// The CPUs and memory (MB) job `j` asks for with `gpus` GPUs: per GPU when the plugin
/// recorded `--cpus-per-gpu`/`--mem-per-gpu` (a placement gives them back per GPU), else
/// Slurm's `NumCPUs` and its memory per node times its nodes.
fn resources(j: &SlurmJob, gpus: u32) -> (u32, u64) {
    let (cpg, mpg) = j.recorded_per_gpu();
    let cpus = match cpg {
        Some(c) => u32::try_from(c.saturating_mul(gpus.into())).unwrap_or(u32::MAX),
        None => j.site.cpus.unwrap_or(0),
    };
    let nodes = j.nodes.len().max(1) as u64;
    let mem = match mpg {
        Some(m) => m.saturating_mul(gpus.into()),
        None => j.site.mem_per_node_mb.unwrap_or(0).saturating_mul(nodes),
    };
    (cpus, mem)
}

/// The site's rules for the planned jobs `states` as the core's stages take them: each job
/// as the limits see it (CPUs and memory from Slurm's records) with its time limit, the jobs
/// holding GPUs outside the plan, the planned jobs running in Slurm, the limits, and each
/// job's nodes by its reservation, narrowed to those its user chose (`chosen`).
pub fn round(
    site: &Site,
    chosen: &HashMap<u64, Chosen>,
    states: &[JobState],
    slurm_jobs: &[SlurmJob],
) -> SiteRound {
    let (mut jobs, time_limits_s) = site.for_jobs(states.iter().map(|j| (j.id().0, j.job.workers)));
    for j in slurm_jobs {
        if let Some(sj) = jobs.get_mut(&JobId(j.id)) {
            (sj.cpus, sj.mem_mb) = resources(j, sj.gpus);
        }
    }
    let (offers, _) = site.offers(states.iter().map(|j| j.id().0), chosen);
    SiteRound {
        jobs,
        time_limits_s,
        held: held(site, states, slurm_jobs),
        running: running(states, slurm_jobs),
        limits: site.limits().to_vec(),
        offers,
    }
}

/// The waiting jobs of `states` that wait for their reservation (not active, not known, not
/// theirs: [`Site::offers`]), then those the limits hold back ([`SiteRound::limit_waits`]),
/// with why: they are taken out of `states`, and the daemon leaves them out of the
/// look-ahead and the plan; they wait for it.
pub fn blocked(
    site: &Site,
    chosen: &HashMap<u64, Chosen>,
    states: &mut Vec<JobState>,
    slurm_jobs: &[SlurmJob],
    cluster: &Cluster,
) -> SiteWaits {
    let waiting = states.iter().filter(|j| j.placement.is_none());
    let (_, reserved) = site.offers(waiting.map(|j| j.id().0), chosen);
    states.retain(|s| !reserved.iter().any(|(j, _)| *j == s.id()));
    let mut out = round(site, chosen, states, slurm_jobs).limit_waits(states, cluster);
    out.waits.splice(0..0, reserved);
    out
}

/// Plans the round with `policy` within the site's rules ([`SiteRound::plan`]); the jobs
/// [`blocked`] held back wait for what held them ([`SiteWaits::mark`]).
pub fn plan(
    site: &Site,
    chosen: &HashMap<u64, Chosen>,
    policy: &mut dyn Policy,
    input: &RoundInput<'_>,
    slurm_jobs: &[SlurmJob],
    blocked: &SiteWaits,
) -> RoundPlan {
    let mut plan = round(site, chosen, input.jobs, slurm_jobs).plan(input, |i| policy.plan(i));
    blocked.mark(&mut plan, input.jobs);
    plan
}

/// The site's rules for one round. Kept (in a round's snapshot) as what they are derived
/// from, Slurm's figures and the round's time ([`SiteRecord`]), and derived again on reading.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(from = "SiteRecord", into = "SiteRecord")]
pub struct Site {
    figures: SiteFigures,
    weights: Option<PriorityWeights>,
    limits: Vec<Limit>,
    reservations: Vec<hadar_core::site::reservations::Reservation>,
    /// The round's time, seconds since 1970, at which reservations are judged.
    now_unix: f64,
}

/// What a [`Site`] is derived from, as a round's snapshot keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct SiteRecord {
    figures: SiteFigures,
    now_unix: f64,
}

impl From<SiteRecord> for Site {
    fn from(r: SiteRecord) -> Site {
        Site::new(r.figures).at(r.now_unix)
    }
}

impl From<Site> for SiteRecord {
    fn from(s: Site) -> SiteRecord {
        SiteRecord {
            figures: s.figures,
            now_unix: s.now_unix,
        }
    }
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
        let limits = crate::site_limits::limits_of(&figures);
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

    /// The cluster's licenses, with how many are free.
    pub fn licenses(&self) -> &[hadar_slurm::license::License] {
        &self.figures.licenses
    }

    /// The state of partition `name`, `None` for one Slurm did not list.
    pub fn partition_state(&self, name: &str) -> Option<hadar_slurm::site::PartitionState> {
        self.figures
            .partitions
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.state)
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

    /// Adds each job's priority factors to its decision, and the limits on one GPU type
    /// that keep it off a type, for `hadar explain`.
    pub fn explain(
        &self,
        decisions: &mut [Decision],
        states: &[JobState],
        typed_off: &[(JobId, String)],
        now_s: f64,
        cluster: &Cluster,
        strength: f64,
    ) {
        for (job, words) in typed_off {
            if let Some(d) = decisions.iter_mut().find(|d| d.job == job.0) {
                d.text.push_str(&format!(" Site limit: {words}."));
            }
        }
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
        let mut out = SiteJob::new(JobId(id), &j.user, &j.account, &j.qos, &j.partition, gpus);
        out.time_limit_s = j.time_limit_s;
        out.time_left_s = j.time_left_s;
        out.parents = self.parents(&j.account);
        Some(out)
    }

    /// `account`'s ancestors in the association tree, parent first.
    fn parents(&self, account: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut at = account;
        while let Some(p) = self.figures.parents.get(at) {
            if p == account || out.contains(p) {
                break;
            }
            out.push(p.clone());
            at = p;
        }
        out
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
                time_left_s: Some(60.0),
            },
        );
        f.fairshare.insert(("a".into(), "nobody".into()), 0.5);
        f.parents.insert("a".into(), "dept".into());
        f.parents.insert("dept".into(), "root".into());
        f.qos.push(QosFigures {
            name: "gpu4".into(),
            max_tres_per_user: hadar_slurm::site::parse_tres("gres/gpu=4"),
            ..Default::default()
        });
        let s = Site::new(f.clone());
        let (fac, w) = s.factors(7, 1, 0.0, 16).unwrap();
        assert_eq!(fac.fairshare, 0.5);
        assert_eq!(fac.fraction(w), 0.5);
        assert_eq!(s.limits().len(), 1);
        assert_eq!(
            s.limits()[0].label,
            "QOS gpu4 MaxTRESPerUser=gres/gpu=4 (QOSMaxGRESPerUser)"
        );
        assert_eq!(s.time_limit_s(7), Some(60.0));
        assert_eq!(s.site_job(7, 1).unwrap().parents, vec!["dept", "root"]);
        f.config.enforce_limits = false;
        f.config.multifactor = false;
        let s = Site::new(f);
        assert!(s.limits().is_empty());
        assert!(s.factors(7, 1, 0.0, 16).is_none());
    }
}
