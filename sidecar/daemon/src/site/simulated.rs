//! The site's rules where no Slurm answers: `hadar simulate --site` and `hadar dry-run
//! --site`. A site file (what `hadar site capture` writes: Slurm's figures without its
//! jobs) and each simulated job's identity make a [`Site`], and the stages run as the
//! daemon's round runs them ([`crate::decide`]):
//!
//! * [`SiteGate`], around the served passes: each job's weight from the site's multifactor
//!   priority, then the waiting jobs Slurm would keep pending for their partition (`DOWN`
//!   or `INACTIVE`), their reservation or a limit ([`super::blocked`]'s rules), left out
//!   and marked waiting;
//! * [`SitePlan`], inside them, around the round policy: the plan within the limits, time
//!   limits and reservations ([`hadar_core::site::SiteRound::plan`]).
//!
//! What differs from the daemon, because a simulated cluster has nothing else: no job holds
//! GPUs outside the plan (no unmanaged jobs), no user chose nodes, a job's CPUs and memory
//! are not counted, and a running job's time left is its limit less its time run.

use super::Site;
use hadar_core::passes::TargetFacts;
use hadar_core::site::reservations::Chosen;
use hadar_core::site::{SiteRound, SiteWaits};
use hadar_core::{Cluster, Job, JobId, JobState, Policy, RoundInput, RoundPlan, WaitReason};
use hadar_slurm::site::{JobAccount, SiteFigures};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// A site for simulated jobs: the figures with each job's identity, the Unix time of the
/// simulation's second 0 (reservations are judged in Unix time), and how strongly priority
/// weighs (`[hadar] priority_strength`).
#[derive(Clone, Debug)]
pub struct SimulatedSite {
    figures: SiteFigures,
    epoch_unix: f64,
    strength: f64,
}

impl SimulatedSite {
    /// The site of `figures` (their own jobs ignored) with `jobs`' identities, by simulated
    /// job id; second 0 of the simulation is `epoch_unix`.
    pub fn new(
        mut figures: SiteFigures,
        jobs: HashMap<u64, JobAccount>,
        epoch_unix: f64,
        strength: f64,
    ) -> SimulatedSite {
        figures.jobs = jobs;
        SimulatedSite {
            figures,
            epoch_unix,
            strength,
        }
    }

    /// The nodes each forked job of `input` is offered by its reservation, and those that
    /// wait for it, as the daemon's fork pass finds them.
    fn forked_offers(
        &self,
        input: &RoundInput<'_>,
        forked: &BTreeSet<JobId>,
    ) -> (
        HashMap<JobId, hadar_core::site::reservations::Offer>,
        Vec<(JobId, WaitReason)>,
    ) {
        let site = self.at(input.now_s, input.jobs);
        let ids = input
            .jobs
            .iter()
            .map(JobState::id)
            .filter(|j| forked.contains(j));
        site.offers(ids.map(|j| j.0), &no_choices())
    }

    /// How many simulated jobs the site knows.
    pub fn named_jobs(&self) -> usize {
        self.figures.jobs.len()
    }

    /// The site at simulated second `now_s`, each running job's time left its limit less
    /// its time run.
    fn at(&self, now_s: f64, states: &[JobState]) -> Site {
        let mut figures = self.figures.clone();
        for js in states {
            if let Some(j) = figures.jobs.get_mut(&js.id().0) {
                j.time_left_s = j.time_limit_s.map(|l| {
                    if js.placement.is_some() {
                        (l - js.run_s).max(0.0)
                    } else {
                        l
                    }
                });
            }
        }
        Site::new(figures).at(self.epoch_unix + now_s)
    }

    /// `states` weighted by the site's priority at `now_s`.
    fn weigh(
        &self,
        site: &Site,
        states: &[JobState],
        now_s: f64,
        cluster: &Cluster,
    ) -> Vec<JobState> {
        states
            .iter()
            .map(|js| {
                let age = now_s - js.job.arrival_s;
                let weight = site.weight(js.id().0, js.job.workers, age, cluster, self.strength);
                let mut out = js.clone();
                out.job = Arc::new(Job {
                    weight,
                    ..(*js.job).clone()
                });
                out
            })
            .collect()
    }

    /// The site's rules for `states` as the core's stages take them.
    fn round(&self, site: &Site, states: &[JobState]) -> SiteRound {
        let (jobs, time_limits_s) = site.for_jobs(states.iter().map(|j| (j.id().0, j.job.workers)));
        let (offers, _) = site.offers(states.iter().map(|j| j.id().0), &no_choices());
        SiteRound {
            jobs,
            time_limits_s,
            held: Vec::new(),
            running: running(states),
            limits: site.limits().to_vec(),
            offers,
        }
    }
}

fn no_choices() -> HashMap<u64, Chosen> {
    HashMap::new()
}

fn running(states: &[JobState]) -> BTreeSet<JobId> {
    states
        .iter()
        .filter(|j| j.placement.is_some())
        .map(JobState::id)
        .collect()
}

/// The site's gate around a policy (the served passes): weights, then the jobs their
/// reservation or a limit holds back left out and marked waiting, as the daemon's round
/// does before its passes.
pub struct SiteGate {
    site: Arc<SimulatedSite>,
    inner: Box<dyn Policy>,
    /// The jobs the mixed round forks: planned by HadarE outside the site's rules, as the
    /// daemon's fork pass plans them, so the gate leaves them as they are.
    forked: BTreeSet<JobId>,
    /// The round being planned, shared with the [`SitePlan`] inside.
    round: Arc<Mutex<GateRound>>,
    /// The daemon's pre-pass: the waiting jobs that would go over a limit if every job
    /// before them started are left out before the plan ([`SiteRound::limit_waits`]).
    /// Slurm's own scheduler has none: it checks a job's limits as it starts it.
    limits_before_plan: bool,
}

/// What the gate found for the round being planned, for the [`SitePlan`] inside it: the
/// site at the round's time (derived once a round) and the waits to mark.
#[derive(Default)]
struct GateRound {
    site: Option<Site>,
    waits: SiteWaits,
}

impl SiteGate {
    /// The gate of `site` around `inner`, and the plan stage that goes inside `inner`'s
    /// passes (around its round policy) to plan within the site's rules.
    pub fn new(
        site: SimulatedSite,
        forked: BTreeSet<JobId>,
        inner: impl FnOnce(SitePlanStage) -> Box<dyn Policy>,
    ) -> SiteGate {
        let site = Arc::new(site);
        let round = Arc::new(Mutex::new(GateRound::default()));
        let stage = SitePlanStage {
            site: site.clone(),
            round: round.clone(),
        };
        SiteGate {
            site,
            inner: inner(stage),
            forked,
            round,
            limits_before_plan: true,
        }
    }

    /// The gate as Slurm's own scheduler keeps it, for a model of Slurm alone: without the
    /// daemon's limit pre-pass, so a job the limits would let start is not held back for an
    /// earlier one that cannot start for want of nodes.
    pub fn as_slurm_alone(mut self) -> SiteGate {
        self.limits_before_plan = false;
        self
    }

    /// The jobs the policy plans (weighted, without those the site holds back), and the
    /// waits the gate found.
    fn narrow(&self, input: &RoundInput<'_>, site: &Site) -> (Vec<JobState>, SiteWaits) {
        let (forked, plain): (Vec<JobState>, Vec<JobState>) = input
            .jobs
            .iter()
            .cloned()
            .partition(|j| self.forked.contains(&j.id()));
        let mut states = self.site.weigh(site, &plain, input.now_s, input.cluster);
        let mut held = self.closed_partitions(site, &states);
        let waiting = states
            .iter()
            .filter(|j| j.placement.is_none() && !held.iter().any(|(h, _)| *h == j.id()));
        let (_, reserved) = site.offers(waiting.map(|j| j.id().0), &no_choices());
        held.extend(reserved);
        states.retain(|s| !held.iter().any(|(j, _)| *j == s.id()));
        let mut waits = match self.limits_before_plan {
            true => self
                .site
                .round(site, &states)
                .limit_waits(&mut states, input.cluster),
            false => SiteWaits::default(),
        };
        waits.waits.splice(0..0, held);
        states.extend(forked);
        states.sort_by(|a, b| a.job.arrival_order(&b.job));
        (states, waits)
    }

    /// The waiting jobs of `states` in a partition that starts no jobs (`DOWN`, `INACTIVE`),
    /// which Slurm keeps pending, as the daemon's gate does; running ones run on.
    fn closed_partitions(&self, site: &Site, states: &[JobState]) -> Vec<(JobId, WaitReason)> {
        states
            .iter()
            .filter(|j| j.placement.is_none())
            .filter_map(|j| {
                let partitions = &self.site.figures.jobs.get(&j.id().0)?.partition;
                let hold =
                    crate::eligible::closed_partitions(partitions, |p| site.partition_state(p))?;
                Some((j.id(), WaitReason::SlurmHolds { hold }))
            })
            .collect()
    }

    /// Plans the round with `plan` over the narrowed jobs, the site at the round's time
    /// being `site`.
    fn plan_with(
        &mut self,
        input: &RoundInput<'_>,
        site: Site,
        plan: impl FnOnce(&mut dyn Policy, &RoundInput<'_>) -> RoundPlan,
    ) -> RoundPlan {
        let (states, waits) = self.narrow(input, &site);
        *self.round.lock().unwrap_or_else(|e| e.into_inner()) = GateRound {
            site: Some(site),
            waits: waits.clone(),
        };
        let narrowed = RoundInput {
            jobs: &states,
            ..*input
        };
        let mut out = plan(self.inner.as_mut(), &narrowed);
        // The jobs left out never reached the inner plan: they wait for what held them.
        let planned: Vec<JobId> = states.iter().map(JobState::id).collect();
        for (job, reason) in &waits.waits {
            if !planned.contains(job) && !out.waiting.iter().any(|w| w.job == *job) {
                out.waiting.push(hadar_core::Waiting {
                    job: *job,
                    reason: reason.clone(),
                });
            }
        }
        out
    }
}

impl Policy for SiteGate {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let site = self.site.at(input.now_s, input.jobs);
        self.plan_with(input, site, |p, i| p.plan(i))
    }

    fn plan_on(&mut self, input: &RoundInput<'_>, facts: &TargetFacts) -> RoundPlan {
        let site = self.site.at(input.now_s, input.jobs);
        // The daemon leaves the waiting jobs a reservation restricts out of the look-ahead
        // (`super::reservations::leave_out_of_lookahead`); so does the gate.
        let mut facts = facts.clone();
        super::reservations::leave_out_of_lookahead(&site, &no_choices(), &mut facts);
        self.plan_with(input, site, |p, i| p.plan_on(i, &facts))
    }

    fn last_round_stats(&self) -> Option<hadar_core::policies::hadar::RoundStats> {
        self.inner.last_round_stats()
    }
}

/// What [`SiteGate::new`] hands the policy it builds, to make the [`SitePlan`] inside it.
pub struct SitePlanStage {
    site: Arc<SimulatedSite>,
    round: Arc<Mutex<GateRound>>,
}

impl SitePlanStage {
    /// The plan stage around `policy`.
    pub fn around(self, policy: Box<dyn Policy>) -> Box<dyn Policy> {
        Box::new(SitePlan {
            site: self.site,
            round: self.round,
            inner: policy,
        })
    }
}

/// The site's plan stage around a round policy: the plan within the limits, time limits and
/// reservations, the gate's waits marked, as the daemon's [`super::plan`] does.
pub struct SitePlan {
    site: Arc<SimulatedSite>,
    round: Arc<Mutex<GateRound>>,
    inner: Box<dyn Policy>,
}

impl Policy for SitePlan {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let round = self.round.lock().unwrap_or_else(|e| e.into_inner());
        // The gate's site for this round; a plan stage used without its gate derives it.
        let derived;
        let site = match &round.site {
            Some(site) => site,
            None => {
                derived = self.site.at(input.now_s, input.jobs);
                &derived
            }
        };
        let inner = &mut self.inner;
        let mut plan = self
            .site
            .round(site, input.jobs)
            .plan(input, |i| inner.plan(i));
        round.waits.mark(&mut plan, input.jobs);
        plan
    }

    fn last_round_stats(&self) -> Option<hadar_core::policies::hadar::RoundStats> {
        self.inner.last_round_stats()
    }
}

/// Policy `name` with `opts` within `site`'s rules, as `hadar serve` runs it: the site's
/// gate around it and its plan stage around the round policy (inside the served passes for
/// `served`, and the mixed round's forked jobs left to HadarE); `None` for the bounds.
pub fn within(
    name: hadar_core::policies::PolicyName,
    opts: &hadar_core::policies::PolicyOptions,
    site: SimulatedSite,
) -> Option<Box<dyn Policy>> {
    use hadar_core::policies::{self, PolicyName};
    let forked = opts.forked.clone();
    if name != PolicyName::Served {
        let policy = policies::build(name, opts)?;
        return Some(Box::new(SiteGate::new(site, forked, |stage| {
            stage.around(policy)
        })));
    }
    let inner = policies::build_served_inner(opts)?;
    let offers_site = site.clone();
    let offers_of = forked.clone();
    let offers: hadar_core::passes::mixed::ForkedOffers =
        Box::new(move |input| offers_site.forked_offers(input, &offers_of));
    Some(Box::new(SiteGate::new(site, forked, |stage| {
        policies::served_around(opts, stage.around(inner), Some(offers))
    })))
}
