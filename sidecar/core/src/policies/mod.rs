//! The policies, and the registry that maps CLI names to them.
//!
//! Round policies implement [`crate::Policy`]. The fluid lower bounds are not round
//! policies (they see the whole workload at once); they are listed here so that one
//! `--policy` list can name them, and computed by [`crate::bounds`].

pub mod gavel;
pub mod hadar;
pub mod hadare;
pub mod packing;
pub mod slurm_backfill;
pub mod tiresias;
pub mod yarn_cs;

#[cfg(test)]
pub(crate) mod fixtures;

use crate::policy::Policy;
use std::fmt;
use std::str::FromStr;

/// Every name `--policy` accepts ([`PolicyName::NAMED`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyName {
    /// FIFO, non-preemptive, heterogeneity-agnostic, consolidated all-or-nothing.
    YarnCs,
    /// Discretised two-dimensional least-attained-service, preemptive at rounds.
    Tiresias,
    /// Gavel's heterogeneity-aware max-min fairness (`max_min_fairness_perf`).
    Gavel,
    /// Gavel's makespan policy (`min_total_duration_perf`).
    GavelMakespan,
    /// Slurm as used today: each job asks for its fastest type; FIFO with backfill.
    Slurm,
    /// Hadar: task-level heterogeneity-aware online primal-dual scheduling.
    #[default]
    Hadar,
    /// HadarE: Hadar with job forking into copies on separate nodes.
    HadarE,
    /// The fluid lower bound on the makespan of any non-forking schedule.
    LowerBound,
    /// The fluid lower bound when a job may also fork over any number of GPUs.
    LowerBoundFork,
    /// What `hadar serve` runs: Hadar between the commitment look-ahead and the target's
    /// enforceability rules ([`crate::passes::served`]). Named, not in the default list.
    Served,
}

impl PolicyName {
    /// All names, in the order results are reported.
    pub const ALL: &'static [PolicyName] = &[
        PolicyName::YarnCs,
        PolicyName::Tiresias,
        PolicyName::Gavel,
        PolicyName::GavelMakespan,
        PolicyName::Slurm,
        PolicyName::Hadar,
        PolicyName::HadarE,
        PolicyName::LowerBound,
        PolicyName::LowerBoundFork,
    ];

    /// Every name `--policy` accepts: [`PolicyName::ALL`] and the ones run only when named.
    pub const NAMED: &'static [PolicyName] = &[
        PolicyName::YarnCs,
        PolicyName::Tiresias,
        PolicyName::Gavel,
        PolicyName::GavelMakespan,
        PolicyName::Slurm,
        PolicyName::Hadar,
        PolicyName::HadarE,
        PolicyName::LowerBound,
        PolicyName::LowerBoundFork,
        PolicyName::Served,
    ];

    /// The CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::YarnCs => "yarn-cs",
            PolicyName::Tiresias => "tiresias",
            PolicyName::Gavel => "gavel",
            PolicyName::GavelMakespan => "gavel-makespan",
            PolicyName::Slurm => "slurm",
            PolicyName::Hadar => "hadar",
            PolicyName::HadarE => "hadare",
            PolicyName::LowerBound => "lower-bound",
            PolicyName::LowerBoundFork => "lower-bound-fork",
            PolicyName::Served => "served",
        }
    }

    /// True for the fluid bounds, which are computed, not simulated.
    pub fn is_bound(self) -> bool {
        matches!(self, PolicyName::LowerBound | PolicyName::LowerBoundFork)
    }

    /// True for the policies the served passes can run inside (`[sidecar] policy` of
    /// `hadar serve`): every round policy but `served` itself. `hadare` there means Hadar for
    /// plain jobs and HadarE for the jobs that opted into forking.
    pub fn is_servable(self) -> bool {
        !self.is_bound() && self != PolicyName::Served
    }

    /// The policy that plans the plain (not forked) jobs when this one is served: Hadar for
    /// `hadare`, itself otherwise.
    pub fn plain(self) -> PolicyName {
        match self {
            PolicyName::HadarE => PolicyName::Hadar,
            other => other,
        }
    }

    /// The servable policies' names ([`PolicyName::is_servable`]), comma-separated.
    pub fn servable_names() -> String {
        PolicyName::NAMED
            .iter()
            .filter(|p| p.is_servable())
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a comma-separated list such as `gavel,hadar`, keeping order and dropping
    /// repeats.
    pub fn parse_list(s: &str) -> Result<Vec<PolicyName>, UnknownPolicy> {
        let mut out = Vec::new();
        for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let p: PolicyName = item.parse()?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            return Err(UnknownPolicy(s.to_string()));
        }
        Ok(out)
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not known.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown policy `{0}`; known policies: {known}", known = known_names())]
pub struct UnknownPolicy(pub String);

fn known_names() -> String {
    PolicyName::NAMED
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for PolicyName {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyName::NAMED
            .iter()
            .copied()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPolicy(s.trim().to_string()))
    }
}

/// Settings shared by the policies.
#[derive(Clone, Debug, Default)]
pub struct PolicyOptions {
    /// Seed for policies that break ties or choose types at random.
    pub seed: u64,
    /// Hadar's settings.
    pub hadar: hadar::HadarConfig,
    /// HadarE's settings.
    pub hadare: hadare::HadarEConfig,
    /// Tiresias' queue thresholds and promotion knob (checked with
    /// [`tiresias::TiresiasConfig::validate`] by whoever reads them from a user).
    pub tiresias: tiresias::TiresiasConfig,
    /// The served policy's passes (`served`: look-ahead and enforceability rules around
    /// the policy `served_policy` names).
    pub served: crate::passes::served::ServedConfig,
    /// The policy the served passes run inside ([`PolicyName::is_servable`]; `hadare` plans
    /// the plain jobs by Hadar). Default: Hadar.
    pub served_policy: PolicyName,
    /// The jobs that opted into forking (`#HADAR fork=yes`) when they are forked (`hadar
    /// serve` under `[sidecar] policy = "hadare"`): `served` then plans them by HadarE
    /// (`hadare`) over the GPUs its plain jobs leave ([`crate::passes::mixed`]). Empty: no
    /// job forks.
    pub forked: std::collections::BTreeSet<crate::JobId>,
}

/// Builds the round policy for `name`; `None` for the bounds, which are not round policies.
pub fn build(name: PolicyName, opts: &PolicyOptions) -> Option<Box<dyn Policy>> {
    match name {
        PolicyName::YarnCs => Some(Box::new(yarn_cs::YarnCs::new(opts.seed))),
        PolicyName::Tiresias => Some(Box::new(tiresias::Tiresias::with_config_unchecked(
            opts.tiresias.clone(),
            opts.seed,
        ))),
        PolicyName::Gavel => Some(Box::new(gavel::GavelPolicy::max_min_fairness())),
        PolicyName::GavelMakespan => Some(Box::new(gavel::GavelPolicy::min_total_duration())),
        PolicyName::Slurm => Some(Box::new(slurm_backfill::SlurmBackfill::new())),
        PolicyName::Hadar => Some(Box::new(hadar::HadarPolicy::new(opts.hadar.clone()))),
        PolicyName::HadarE => Some(Box::new(hadare::HadarEPolicy::new(opts.hadare.clone()))),
        PolicyName::Served => Some(served_around(opts, build_served_inner(opts)?, None)),
        PolicyName::LowerBound | PolicyName::LowerBoundFork => None,
    }
}

/// The served passes of `opts` around `inner` (the round policy, [`build_served_inner`] or
/// a wrapper of it); with forked jobs, the mixed round over them, each forked job offered
/// the nodes `forked_offers` gives it (all without).
pub fn served_around(
    opts: &PolicyOptions,
    inner: Box<dyn Policy>,
    forked_offers: Option<crate::passes::mixed::ForkedOffers>,
) -> Box<dyn Policy> {
    let served = Box::new(crate::passes::served::ServedPolicy::new(
        opts.served.clone(),
        inner,
    ));
    if opts.forked.is_empty() {
        return served;
    }
    let mixed =
        crate::passes::mixed::MixedPolicy::new(served, opts.hadare.clone(), opts.forked.clone());
    match forked_offers {
        Some(offers) => Box::new(mixed.with_forked_offers(offers)),
        None => Box::new(mixed),
    }
}

/// The round policy the served passes run inside ([`PolicyOptions::served_policy`], its
/// plain side for `hadare`); `None` for a name that cannot be served. Hadar is built to plan
/// only the gangs the target's rules let through.
pub fn build_served_inner(opts: &PolicyOptions) -> Option<Box<dyn Policy>> {
    match opts.served_policy.plain() {
        PolicyName::Hadar => Some(Box::new(hadar::HadarPolicy::new(hadar::HadarConfig {
            uniform_gangs: opts.hadar.uniform_gangs || opts.served.rules.one_request_per_job,
            ..opts.hadar.clone()
        }))),
        name if name.is_servable() => build(name, opts),
        _ => None,
    }
}

/// Computes a bound's makespan (seconds from the first arrival) for a workload; see
/// [`crate::bounds`]. Round policies are not bounds: asking for one is an error.
pub fn bound(
    name: PolicyName,
    cluster: &crate::Cluster,
    jobs: &[crate::Job],
) -> Result<f64, crate::bounds::BoundError> {
    match name {
        PolicyName::LowerBound => crate::bounds::fluid_makespan(cluster, jobs),
        PolicyName::LowerBoundFork => crate::bounds::fluid_makespan_forking(cluster, jobs),
        other => Err(crate::bounds::BoundError::NotABound(other.as_str())),
    }
}
