//! The mixed round: jobs that did not opt into forking are planned first, by the plain
//! policy (Hadar, or Hadar inside the served passes, [`super::served`]), over the whole
//! cluster; `fork=yes` jobs are then planned by HadarE over the GPUs left ([`left_over`]).
//!
//! What is left is what the target can give forked copies this round: a plain job that was
//! started keeps holding its GPUs (where it runs now, whether the plan keeps it there or
//! moves or preempts it: on Slurm a preempted job frees its GPUs only once it has been
//! checkpointed and requeued), a job the plan moves holds its new GPUs too (it starts there
//! this round, before the copies), and a waiting plain job the plan starts holds the GPUs
//! the plan gives it. A forked job's previous copies hold nothing: its copy job ends before the
//! next round, so both policies see the whole cluster again every round. The caller leaves
//! out of `input` what neither policy may give (GPUs of jobs hadar does not manage, forked
//! jobs whose round is still open).
//!
//! The daemon's fork pass takes its copies from [`plan_mixed`]'s forked plan; the simulator
//! and `hadar dry-run` run the same round through [`MixedPolicy`], a [`Policy`] over the
//! plain policy (the served one under `hadar simulate --config FILE` with `[sidecar] policy
//! = "hadare"`).

use crate::cluster::{Cluster, Node, NodeId};
use crate::job::{JobId, JobState};
use crate::passes::TargetFacts;
use crate::plan::{RoundPlan, WaitReason, Waiting};
use crate::policies::hadare::{HadarEConfig, plan_round};
use crate::policy::{Policy, RoundInput};
use std::collections::BTreeSet;

/// A mixed round's two plans. Together they fit the input's cluster: the forked plan's
/// placements use only GPUs of [`MixedPlan::left`], which has the same nodes (and node
/// ids) as the input's cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct MixedPlan {
    /// The plain jobs' plan, over the whole cluster.
    pub plain: RoundPlan,
    /// The forked jobs' plan, over the GPUs left.
    pub forked: RoundPlan,
    /// The GPUs left for forked jobs; `None` when the plain jobs hold every GPU.
    pub left: Option<Cluster>,
}

/// Plans a mixed round: the jobs of `input` not in `forked` with `plan_plain`, then those in
/// `forked` with HadarE (`hadare`) over what is left. Forked jobs keep the input's order
/// (arrival order). With no GPU left, every forked job waits ([`WaitReason::DoesNotFit`]).
pub fn plan_mixed(
    input: &RoundInput<'_>,
    forked: &BTreeSet<JobId>,
    hadare: &HadarEConfig,
    plan_plain: impl FnOnce(&RoundInput<'_>) -> RoundPlan,
) -> MixedPlan {
    plan_mixed_with(input, forked, plan_plain, |i| plan_round(hadare, i))
}

/// [`plan_mixed`] with the forked jobs planned by `plan_forked` over the GPUs left (its
/// input's cluster).
pub fn plan_mixed_with(
    input: &RoundInput<'_>,
    forked: &BTreeSet<JobId>,
    plan_plain: impl FnOnce(&RoundInput<'_>) -> RoundPlan,
    plan_forked: impl FnOnce(&RoundInput<'_>) -> RoundPlan,
) -> MixedPlan {
    let (fork_jobs, plain_jobs): (Vec<JobState>, Vec<JobState>) = input
        .jobs
        .iter()
        .cloned()
        .partition(|j| forked.contains(&j.id()));
    let plain = plan_plain(&RoundInput {
        jobs: &plain_jobs,
        ..*input
    });
    let left = left_over(input.cluster, &plain_jobs, &plain);
    let forked = match &left {
        _ if fork_jobs.is_empty() => RoundPlan::default(),
        Some(cluster) => plan_forked(&RoundInput {
            cluster,
            jobs: &fork_jobs,
            ..*input
        }),
        None => RoundPlan {
            assignments: Vec::new(),
            waiting: fork_jobs
                .iter()
                .map(|j| Waiting {
                    job: j.id(),
                    reason: WaitReason::DoesNotFit,
                })
                .collect(),
        },
    };
    MixedPlan {
        plain,
        forked,
        left,
    }
}

/// Where each forked job may run this round, for a mixed round within a site's reservations:
/// the nodes each is offered, and the jobs that wait for their reservation (not forked this
/// round), as the daemon's fork pass finds them.
pub type ForkedOffers = Box<
    dyn FnMut(
            &RoundInput<'_>,
        ) -> (
            std::collections::HashMap<JobId, crate::site::reservations::Offer>,
            Vec<(JobId, WaitReason)>,
        ) + Send,
>;

impl MixedPlan {
    /// Both plans as one: the plain jobs' assignments, then the forked jobs' copies; the
    /// waiting jobs of both.
    pub fn combined(self) -> RoundPlan {
        let mut plan = self.plain;
        plan.assignments.extend(self.forked.assignments);
        plan.waiting.extend(self.forked.waiting);
        plan
    }
}

/// The mixed round as a [`Policy`]: the jobs of `forked` (those that opted into forking)
/// by HadarE over what `plain`'s plan leaves, every other job by `plain`. Named as `plain`
/// is: it is the policy `hadar serve` runs under `[sidecar] policy = "hadare"`.
pub struct MixedPolicy {
    plain: Box<dyn Policy>,
    hadare: HadarEConfig,
    forked: BTreeSet<JobId>,
    offers: Option<ForkedOffers>,
    last: Option<MixedPlan>,
}

impl MixedPolicy {
    /// `plain` for the jobs not in `forked`, HadarE with `hadare` for those in it.
    pub fn new(plain: Box<dyn Policy>, hadare: HadarEConfig, forked: BTreeSet<JobId>) -> Self {
        MixedPolicy {
            plain,
            hadare,
            forked,
            offers: None,
            last: None,
        }
    }

    /// The same, the forked jobs offered only the nodes `offers` gives them (a site's
    /// reservations): HadarE plans them in the pools the offers make
    /// ([`crate::site::reservations::plan_in_pools`]), and a job that waits for its
    /// reservation waits.
    pub fn with_forked_offers(mut self, offers: ForkedOffers) -> Self {
        self.offers = Some(offers);
        self
    }

    /// The jobs planned by HadarE.
    pub fn forked(&self) -> &BTreeSet<JobId> {
        &self.forked
    }

    /// The last round's two plans (and the GPUs left for forked jobs).
    pub fn last_plan(&self) -> Option<&MixedPlan> {
        self.last.as_ref()
    }
}

impl Policy for MixedPolicy {
    fn name(&self) -> &str {
        self.plain.name()
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        self.plan_with(input, |p, i| p.plan(i))
    }

    /// The plain jobs are planned knowing the target's facts (the simulator's cluster
    /// model's, as the daemon's served pass knows Slurm's); HadarE reads none.
    fn plan_on(&mut self, input: &RoundInput<'_>, facts: &TargetFacts) -> RoundPlan {
        self.plan_with(input, |p, i| p.plan_on(i, facts))
    }
}

impl MixedPolicy {
    fn plan_with(
        &mut self,
        input: &RoundInput<'_>,
        plan_plain: impl FnOnce(&mut dyn Policy, &RoundInput<'_>) -> RoundPlan,
    ) -> RoundPlan {
        let (offers, waits) = match self.offers.as_mut() {
            Some(offers_of) => offers_of(input),
            None => Default::default(),
        };
        // A forked job that waits for its reservation is not planned this round.
        let jobs: Vec<JobState> = input
            .jobs
            .iter()
            .filter(|j| !waits.iter().any(|(w, _)| *w == j.id()))
            .cloned()
            .collect();
        let narrowed = RoundInput {
            jobs: &jobs,
            ..*input
        };
        let hadare = &self.hadare;
        let restricted = offers
            .values()
            .any(|o| o.nodes != crate::site::reservations::Nodes::All);
        let plain = self.plain.as_mut();
        let m = plan_mixed_with(
            &narrowed,
            &self.forked,
            |i| plan_plain(plain, i),
            |i| match restricted {
                true => crate::site::reservations::plan_in_pools(
                    i.cluster,
                    i.jobs,
                    &offers,
                    &BTreeSet::new(),
                    |c, js| {
                        plan_round(
                            hadare,
                            &RoundInput {
                                cluster: c,
                                jobs: js,
                                ..*i
                            },
                        )
                    },
                ),
                false => plan_round(hadare, i),
            },
        );
        self.last = Some(m.clone());
        let mut plan = m.combined();
        plan.waiting.extend(
            waits
                .into_iter()
                .map(|(job, reason)| Waiting { job, reason }),
        );
        plan
    }
}

/// The GPUs `plan` leaves free of `cluster` this round: a started job (one with a
/// placement) holds where it runs now, and every job the plan places holds what it is given
/// (a moved job both).
/// Every node is kept (with what is left of it), so node and type ids stay those of
/// `cluster`; `None` when no GPU is left.
pub fn left_over(cluster: &Cluster, jobs: &[JobState], plan: &RoundPlan) -> Option<Cluster> {
    let types = cluster.type_count();
    let mut free: Vec<u32> = cluster
        .nodes()
        .iter()
        .flat_map(|n| n.gpus.iter().copied())
        .collect();
    for j in jobs {
        let given = plan
            .assignments
            .iter()
            .find(|a| a.job == j.id())
            .map(|a| &a.placement);
        let now = j.placement.as_ref();
        let held = now.into_iter().chain(given.filter(|g| Some(*g) != now));
        for p in held.flat_map(|h| h.parts()) {
            if p.node.index() < cluster.nodes().len() && p.gpu_type.index() < types {
                let f = &mut free[p.node.index() * types + p.gpu_type.index()];
                *f = f.saturating_sub(p.gpus);
            }
        }
    }
    let nodes = cluster
        .node_ids()
        .map(|n: NodeId| Node {
            name: cluster.node(n).name.clone(),
            gpus: free[n.index() * types..(n.index() + 1) * types].to_vec(),
        })
        .collect();
    Cluster::new(cluster.type_names().to_vec(), nodes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuType;
    use crate::placement::{Part, Placement};
    use crate::policies::hadar::{HadarConfig, HadarPolicy};
    use crate::policy::Policy;
    use crate::{Job, RateCurve, ThroughputProfile};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A job of `workers` GPUs, 10 steps/s on a V100 and 2 on a K80, at every size up to
    /// its workers (so HadarE may fork it into copies of any size).
    fn job(id: u64, workers: u32, steps: f64) -> JobState {
        let curve = |r: f64| RateCurve::new((1..=workers).map(|g| (g, r * g as f64)));
        let job = Arc::new(Job {
            restart_s: None,
            id: JobId(id),
            kind: String::new(),
            arrival_s: id as f64,
            workers,
            total_steps: steps,
            weight: 1.0,
            throughput: ThroughputProfile::new(vec![curve(10.0), curve(2.0)]),
        });
        JobState::arrived(job, 2)
    }

    fn input<'a>(cluster: &'a Cluster, jobs: &'a [JobState]) -> RoundInput<'a> {
        RoundInput {
            now_s: 0.0,
            round_s: 60.0,
            restart_s: 10.0,
            cluster,
            jobs,
        }
    }

    fn hadar(i: &RoundInput<'_>) -> RoundPlan {
        HadarPolicy::new(HadarConfig::default()).plan(i)
    }

    fn gpus_on(plan: &RoundPlan, t: GpuType) -> u32 {
        plan.assignments
            .iter()
            .flat_map(|a| a.placement.parts())
            .filter(|p| p.gpu_type == t)
            .map(|p| p.gpus)
            .sum()
    }

    /// A 4-GPU plain job takes the V100 node; the forked job gets the K80s, as copies.
    #[test]
    fn plain_jobs_go_first_and_forked_jobs_get_what_is_left() {
        let c = crate::passes::two_node_cluster();
        let jobs = vec![job(1, 4, 10_000.0), job(2, 4, 10_000.0)];
        let forked = BTreeSet::from([JobId(2)]);
        let m = plan_mixed(&input(&c, &jobs), &forked, &HadarEConfig::default(), hadar);
        let v100 = c.type_by_name("v100").unwrap();
        let k80 = c.type_by_name("k80").unwrap();
        assert_eq!(m.plain.assignments.len(), 1);
        assert_eq!(m.plain.assignments[0].job, JobId(1));
        assert_eq!(gpus_on(&m.plain, v100), 4);
        assert_eq!(m.forked.assignments.len(), 1);
        assert_eq!(m.forked.assignments[0].job, JobId(2));
        assert_eq!(gpus_on(&m.forked, v100), 0);
        assert_eq!(gpus_on(&m.forked, k80), 4);
        let left = m.left.unwrap();
        assert_eq!(left.total_of_type(v100), 0);
        assert_eq!(left.total_of_type(k80), 4);
        assert_eq!(left.nodes().len(), c.nodes().len(), "node ids kept");
    }

    /// Without plain jobs HadarE sees the whole cluster: the same plan as HadarE alone.
    #[test]
    fn with_only_forked_jobs_it_is_hadare() {
        let c = crate::passes::two_node_cluster();
        let jobs = vec![job(1, 4, 10_000.0), job(2, 2, 500.0)];
        let forked = BTreeSet::from([JobId(1), JobId(2)]);
        let cfg = HadarEConfig::default();
        let m = plan_mixed(&input(&c, &jobs), &forked, &cfg, hadar);
        assert!(m.plain.assignments.is_empty());
        assert_eq!(m.forked, plan_round(&cfg, &input(&c, &jobs)));
        assert_eq!(m.left.as_ref(), Some(&c));
    }

    /// A running plain job the plan preempts still holds its GPUs this round: no copy goes
    /// there; with every GPU held, forked jobs wait.
    #[test]
    fn a_preempted_plain_job_still_holds_its_gpus() {
        let c = crate::passes::two_node_cluster();
        let mut running = job(1, 4, 10_000.0);
        running.placement = Some(Placement::gang([Part {
            node: NodeId(1),
            gpu_type: GpuType(1),
            gpus: 4,
        }]));
        let jobs = vec![running, job(2, 4, 10_000.0), job(3, 1, 100.0)];
        let forked = BTreeSet::from([JobId(3)]);
        let nothing = |_: &RoundInput<'_>| RoundPlan::default();
        let m = plan_mixed(
            &input(&c, &jobs),
            &forked,
            &HadarEConfig::default(),
            nothing,
        );
        let left = m.left.unwrap();
        assert_eq!(left.total_of_type(GpuType(1)), 0, "preempted job's K80s");
        assert_eq!(left.total_of_type(GpuType(0)), 4);
        let taken = |_: &RoundInput<'_>| RoundPlan {
            assignments: vec![crate::plan::Assignment {
                job: JobId(2),
                placement: Placement::gang([Part {
                    node: NodeId(0),
                    gpu_type: GpuType(0),
                    gpus: 4,
                }]),
                rate: 40.0,
                payoff: None,
            }],
            waiting: Vec::new(),
        };
        let m = plan_mixed(&input(&c, &jobs), &forked, &HadarEConfig::default(), taken);
        assert_eq!(m.left, None);
        assert!(m.forked.assignments.is_empty());
        assert_eq!(
            m.forked.waiting,
            vec![Waiting {
                job: JobId(3),
                reason: WaitReason::DoesNotFit
            }]
        );
    }

    /// The policy is the two plans together, named as its plain policy; the forked job runs
    /// as copies, the plain one as a gang, and the whole fits the cluster.
    #[test]
    fn the_policy_is_the_two_plans_together() {
        let c = crate::passes::two_node_cluster();
        let jobs = vec![job(1, 4, 10_000.0), job(2, 4, 10_000.0), job(3, 2, 800.0)];
        let forked = BTreeSet::from([JobId(2), JobId(3)]);
        let cfg = HadarEConfig::default();
        let mut p = MixedPolicy::new(
            Box::new(HadarPolicy::new(HadarConfig::default())),
            cfg.clone(),
            forked.clone(),
        );
        assert_eq!(p.name(), "hadar");
        let plan = p.plan(&input(&c, &jobs));
        let m = plan_mixed(&input(&c, &jobs), &forked, &cfg, hadar);
        assert_eq!(p.last_plan(), Some(&m));
        assert_eq!(plan, m.combined());
        assert!(plan.validate(&c, &jobs).is_ok());
        for a in &plan.assignments {
            let kind = if forked.contains(&a.job) {
                crate::PlacementKind::Forked
            } else {
                crate::PlacementKind::Gang
            };
            assert_eq!(a.placement.kind(), kind, "job {:?}", a.job);
        }
        assert!(plan.assignments.iter().any(|a| a.job == JobId(1)));
        assert!(plan.assignments.iter().any(|a| forked.contains(&a.job)));
    }

    proptest! {
        /// Whatever the mix, the two plans together fit the cluster, each plan names only
        /// its own jobs, and a forked job's copies never use GPUs a plain job holds.
        #[test]
        fn the_two_plans_together_fit_the_cluster(
            sizes in prop::collection::vec((1u32..=4, 100.0f64..50_000.0, any::<bool>(), 0u8..3), 1..8),
        ) {
            let c = Cluster::new(
                vec!["v100".into(), "k80".into()],
                vec![
                    Node { name: "a".into(), gpus: vec![4, 0] },
                    Node { name: "b".into(), gpus: vec![2, 2] },
                    Node { name: "c".into(), gpus: vec![0, 4] },
                ],
            )
            .unwrap();
            let mut jobs = Vec::new();
            let mut forked = BTreeSet::new();
            let mut holds = crate::FreeCapacity::of(&c);
            for (i, (w, steps, fork, at)) in sizes.iter().enumerate() {
                let mut j = job(i as u64 + 1, *w, *steps);
                if *fork {
                    forked.insert(j.id());
                } else if *at < 2 {
                    // Some plain jobs already run where there is room.
                    let node = NodeId(u32::from(*at) * 2);
                    let t = GpuType(u16::from(*at));
                    let p = Placement::gang([Part { node, gpu_type: t, gpus: *w }]);
                    if holds.take_placement(&p).is_ok() {
                        j.placement = Some(p);
                    }
                }
                jobs.push(j);
            }
            let m = plan_mixed(&input(&c, &jobs), &forked, &HadarEConfig::default(), hadar);
            let (fj, pj): (Vec<JobState>, Vec<JobState>) =
                jobs.iter().cloned().partition(|j| forked.contains(&j.id()));
            prop_assert!(m.plain.validate(&c, &pj).is_ok());
            prop_assert!(m.plain.assignments.iter().all(|a| !forked.contains(&a.job)));
            prop_assert!(m.forked.assignments.iter().all(|a| forked.contains(&a.job)));
            // Per (node, type): what plain jobs hold this round (a started one where it runs
            // now, any job where the plan places it; Hadar may plan a job onto GPUs a job it
            // preempts still holds, so these may add up past the capacity), then the forked
            // copies must fit in what remains.
            let types = c.type_count();
            let mut plain_use = vec![0u32; c.nodes().len() * types];
            for j in &pj {
                let given = m.plain.assignments.iter().find(|a| a.job == j.id());
                let now = j.placement.as_ref();
                let moved = given.map(|a| &a.placement).filter(|g| Some(*g) != now);
                for p in now.into_iter().chain(moved).flat_map(|h| h.parts()) {
                    plain_use[p.node.index() * types + p.gpu_type.index()] += p.gpus;
                }
            }
            let mut fork_use = vec![0u32; c.nodes().len() * types];
            for p in m.forked.assignments.iter().flat_map(|a| a.placement.parts()) {
                fork_use[p.node.index() * types + p.gpu_type.index()] += p.gpus;
            }
            for n in c.node_ids() {
                for t in c.types() {
                    let k = n.index() * types + t.index();
                    let cap = c.capacity(n, t);
                    prop_assert!(
                        fork_use[k] + plain_use[k].min(cap) <= cap,
                        "node {n:?} type {t:?}: copies {} + plain {} > {cap}", fork_use[k], plain_use[k]
                    );
                }
            }
            if let Some(left) = &m.left {
                prop_assert!(m.forked.validate(left, &fj).is_ok());
                // Work conservation: a GPU left and a forked job (every job here can run
                // one-GPU copies on both types) means some copy runs.
                prop_assert!(fj.is_empty() || !m.forked.assignments.is_empty());
            }
        }
    }
}
