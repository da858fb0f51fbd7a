//! The policy `hadar serve` runs: a round policy (Hadar) between the commitment look-ahead
//! ([`super::lookahead`]) and the target's enforceability rules ([`super::enforce`]).
//!
//! The daemon calls [`decide_with`] with the facts Slurm gives and its site-aware Hadar; the
//! simulator and `hadar dry-run` run the same passes through [`ServedPolicy`], a
//! [`Policy`] over any inner policy, with facts from its cluster model (or from the input
//! alone). Either way a round is: the look-ahead narrows the jobs, the inner policy plans
//! them, the rules judge the plan.

use super::enforce::{self, EnforceRules, Verdict};
use super::lookahead::{self, Commitments};
use super::{TargetFacts, restrict_types};
use crate::cluster::Cluster;
use crate::job::{JobId, JobState};
use crate::placement::{Part, Placement};
use crate::plan::{RoundPlan, WaitReason, Waiting};
use crate::policy::{Policy, RoundInput};

/// How the passes are configured (`[sidecar]` and `[hadar]` of `hadar.toml`).
#[derive(Clone, Debug, PartialEq)]
pub struct ServedConfig {
    /// The commitment look-ahead before the plan (`[sidecar] earliest_finish_types`).
    pub look_ahead: bool,
    /// The target's rules after the plan.
    pub rules: EnforceRules,
}

impl Default for ServedConfig {
    /// As `hadar serve` runs by default: look-ahead on, Slurm's rules (Hadar itself keeps
    /// to its own node limit).
    fn default() -> Self {
        ServedConfig {
            look_ahead: true,
            rules: EnforceRules::default(),
        }
    }
}

/// A round decided by the served policy.
#[derive(Clone, Debug, Default)]
pub struct ServedDecision {
    /// The jobs the inner policy planned: the input's jobs restricted to the types they
    /// are held to, less the jobs the look-ahead leaves for a later round, with the types it
    /// chose.
    pub jobs: Vec<JobState>,
    /// The inner policy's plan for `jobs`.
    pub plan: RoundPlan,
    /// What the look-ahead decided (empty when it is off).
    pub commitments: Commitments,
    /// The rules' verdict on each assignment of `plan`.
    pub verdicts: Vec<(JobId, Verdict)>,
}

impl ServedDecision {
    /// The plan as the target carries it out: assignments the rules refuse become waiting
    /// jobs, a started job that stays keeps the GPUs it holds (when the cluster knows them),
    /// and jobs the look-ahead defers wait.
    pub fn enforced_plan(&self, cluster: &Cluster, facts: &TargetFacts) -> RoundPlan {
        let mut out = RoundPlan {
            assignments: Vec::new(),
            waiting: self.plan.waiting.clone(),
        };
        for (a, (_, verdict)) in self.plan.assignments.iter().zip(&self.verdicts) {
            match verdict {
                Verdict::Enforced => out.assignments.push(a.clone()),
                Verdict::Stays { why } => {
                    let js = self.jobs.iter().find(|j| j.id() == a.job);
                    match (holding(cluster, &facts.job(a.job).holds), js) {
                        (Some(here), Some(js)) => {
                            let mut kept = a.clone();
                            kept.rate = here.rate(&js.job.throughput, js.job.workers);
                            kept.placement = here;
                            kept.payoff = None;
                            out.assignments.push(kept);
                        }
                        _ => out.waiting.push(not_enforceable(a.job, why)),
                    }
                }
                Verdict::Refused { why } => out.waiting.push(not_enforceable(a.job, why)),
            }
        }
        // The look-ahead's deferred jobs: chosen, and not among the jobs planned.
        for job in self.commitments.choices.keys() {
            if !self.jobs.iter().any(|j| j.id() == *job)
                && !out.waiting.iter().any(|w| w.job == *job)
            {
                out.waiting.push(Waiting {
                    job: *job,
                    reason: WaitReason::QueuedBehind { head: None },
                });
            }
        }
        out
    }
}

/// A job whose placement the target's rules refuse waits, and says which rule.
fn not_enforceable(job: JobId, why: &str) -> Waiting {
    Waiting {
        job,
        reason: WaitReason::SlurmRule {
            why: why.to_string(),
        },
    }
}

/// GPUs held in the target's names as a gang placement; `None` when a node or type is not in
/// the cluster.
fn holding(cluster: &Cluster, holds: &[(String, String, u32)]) -> Option<Placement> {
    let mut parts = Vec::new();
    for (n, t, c) in holds {
        parts.push(Part {
            node: cluster.node_by_name(n)?,
            gpu_type: cluster.type_by_name(t)?,
            gpus: *c,
        });
    }
    (!parts.is_empty()).then(|| Placement::gang(parts))
}

/// One round of the served policy with `plan` as the inner policy: jobs held to types are
/// restricted to them, the look-ahead (when on) narrows the jobs, `plan` plans them, and the
/// rules judge the plan. `input.round_s` is the look-ahead's delay before a round notices
/// freed GPUs.
pub fn decide_with(
    config: &ServedConfig,
    input: &RoundInput<'_>,
    facts: &TargetFacts,
    plan: impl FnOnce(&RoundInput<'_>) -> RoundPlan,
) -> ServedDecision {
    let cluster = input.cluster;
    let mut jobs: Vec<JobState> = input.jobs.to_vec();
    for js in jobs.iter_mut() {
        if let Some(held) = facts.jobs.get(&js.id()).and_then(|f| f.held_types.as_ref()) {
            restrict_types(cluster, js, held);
        }
    }
    let commitments = if config.look_ahead {
        lookahead::commit(
            cluster,
            &mut jobs,
            facts,
            input.now_s,
            lookahead::Moves {
                round_s: input.round_s,
                restart_s: input.restart_s,
            },
        )
    } else {
        Commitments::default()
    };
    let plan = plan(&RoundInput {
        jobs: &jobs,
        ..*input
    });
    let verdicts = enforce::judge(cluster, &plan, facts, &config.rules);
    ServedDecision {
        jobs,
        plan,
        commitments,
        verdicts,
    }
}

/// The served policy over an inner round policy, as a [`Policy`]: for the simulator and
/// `hadar dry-run`. Facts come from [`ServedPolicy::with_facts`] when the caller has a
/// cluster model, else from the input alone ([`TargetFacts::from_input`]).
pub struct ServedPolicy {
    config: ServedConfig,
    inner: Box<dyn Policy>,
    facts: Option<TargetFacts>,
    last: Option<ServedDecision>,
}

impl ServedPolicy {
    /// The passes of `config` around `inner`.
    pub fn new(config: ServedConfig, inner: Box<dyn Policy>) -> Self {
        ServedPolicy {
            config,
            inner,
            facts: None,
            last: None,
        }
    }

    /// The facts the next [`Policy::plan`] uses (once; later rounds fall back to the input's).
    pub fn with_facts(&mut self, facts: TargetFacts) -> &mut Self {
        self.facts = Some(facts);
        self
    }

    /// The last round's whole decision (look-ahead and verdicts included).
    pub fn last_decision(&self) -> Option<&ServedDecision> {
        self.last.as_ref()
    }

    /// Its configuration.
    pub fn config(&self) -> &ServedConfig {
        &self.config
    }
}

impl Policy for ServedPolicy {
    fn name(&self) -> &str {
        "served"
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let facts = self
            .facts
            .take()
            .unwrap_or_else(|| TargetFacts::from_input(input.cluster, input.jobs));
        self.plan_on(input, &facts)
    }

    fn plan_on(&mut self, input: &RoundInput<'_>, facts: &TargetFacts) -> RoundPlan {
        let inner = &mut self.inner;
        let decision = decide_with(&self.config, input, facts, |i| inner.plan(i));
        let plan = decision.enforced_plan(input.cluster, facts);
        self.last = Some(decision);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{JobFacts, JobPhase};
    use crate::policies::hadar::{HadarConfig, HadarPolicy};
    use crate::{Job, RateCurve, ThroughputProfile};
    use std::sync::Arc;

    fn job(id: u64, workers: u32, steps: f64) -> JobState {
        let job = Arc::new(Job {
            restart_s: None,
            id: JobId(id),
            kind: String::new(),
            arrival_s: id as f64,
            workers,
            total_steps: steps,
            weight: 1.0,
            throughput: ThroughputProfile::new(vec![
                RateCurve::new([(workers, 10.0)]),
                RateCurve::new([(workers, 2.0)]),
            ]),
        });
        JobState::arrived(job, 2)
    }

    fn input<'a>(cluster: &'a Cluster, jobs: &'a [JobState]) -> RoundInput<'a> {
        RoundInput {
            now_s: 0.0,
            round_s: 3.0,
            restart_s: 10.0,
            cluster,
            jobs,
        }
    }

    fn hadar() -> Box<dyn Policy> {
        Box::new(HadarPolicy::new(HadarConfig {
            max_nodes_per_job: Some(1),
            ..HadarConfig::default()
        }))
    }

    #[test]
    fn the_look_ahead_keeps_queued_jobs_off_slow_gpus_that_plain_hadar_gives_them() {
        // Three 4-GPU jobs of 100 steps: 10 s each on the V100s, 50 s on the K80s. Plain
        // Hadar starts one on each type now; served, the second waits for the V100s
        // (10 + 3 + 10 = 23 s < 50 s), and so does the third (36 s).
        let c = crate::passes::two_node_cluster();
        let jobs: Vec<JobState> = (1..=3).map(|i| job(i, 4, 100.0)).collect();
        let plain = hadar().plan(&input(&c, &jobs));
        let k80 = c.type_by_name("k80").unwrap();
        assert!(
            plain
                .assignments
                .iter()
                .any(|a| a.placement.types() == [k80]),
            "{plain:?}"
        );
        let mut served = ServedPolicy::new(ServedConfig::default(), hadar());
        let plan = served.plan(&input(&c, &jobs));
        assert_eq!(plan.assignments.len(), 1, "{plan:?}");
        assert_ne!(plan.assignments[0].placement.types(), vec![k80]);
        let d = served.last_decision().unwrap();
        assert_eq!(d.commitments.deferred(0.0).count(), 2);
        assert_eq!(plan.waiting.iter().filter(|w| w.job != JobId(1)).count(), 2);
        plan.validate(&c, &jobs).unwrap();
    }

    #[test]
    fn without_the_look_ahead_or_rules_it_is_the_inner_policy() {
        let c = crate::passes::two_node_cluster();
        let jobs: Vec<JobState> = (1..=3).map(|i| job(i, 4, 100.0)).collect();
        let plain = hadar().plan(&input(&c, &jobs));
        let config = ServedConfig {
            look_ahead: false,
            rules: EnforceRules::none(),
        };
        let served = ServedPolicy::new(config, hadar()).plan(&input(&c, &jobs));
        assert_eq!(served, plain);
    }

    #[test]
    fn a_job_held_to_a_type_is_planned_only_there() {
        let c = crate::passes::two_node_cluster();
        let jobs = vec![job(1, 2, 100.0)];
        let mut facts = TargetFacts::from_input(&c, &jobs);
        facts.jobs.insert(
            JobId(1),
            JobFacts {
                held_types: Some(vec!["K80".into()]),
                typed: true,
                ..JobFacts::waiting()
            },
        );
        let d = decide_with(&ServedConfig::default(), &input(&c, &jobs), &facts, |i| {
            hadar().plan(i)
        });
        let k80 = c.type_by_name("k80").unwrap();
        assert_eq!(d.plan.assignments.len(), 1, "{d:?}");
        assert_eq!(d.plan.assignments[0].placement.types(), vec![k80]);
        assert_eq!(d.verdicts, vec![(JobId(1), Verdict::Enforced)]);
    }

    #[test]
    fn a_running_job_the_rules_refuse_to_move_stays_where_it_is() {
        let c = crate::passes::two_node_cluster();
        let mut jobs = vec![job(1, 2, 100.0)];
        let here = holding(&c, &[("n3".into(), "k80".into(), 2)]).unwrap();
        jobs[0].placement = Some(here.clone());
        let mut facts = TargetFacts::from_input(&c, &jobs);
        facts.jobs.get_mut(&JobId(1)).unwrap().phase = JobPhase::Starting;
        let config = ServedConfig {
            look_ahead: false,
            rules: EnforceRules {
                max_nodes_per_job: Some(0),
                ..EnforceRules::default()
            },
        };
        let d = decide_with(&config, &input(&c, &jobs), &facts, |i| hadar().plan(i));
        assert!(matches!(d.verdicts[0].1, Verdict::Stays { .. }), "{d:?}");
        let plan = d.enforced_plan(&c, &facts);
        assert_eq!(plan.assignments[0].placement, here);
    }

    #[test]
    fn a_waiting_job_the_rules_refuse_waits_naming_the_rule() {
        let c = crate::passes::two_node_cluster();
        let jobs = vec![job(1, 2, 100.0)];
        let facts = TargetFacts::from_input(&c, &jobs);
        let config = ServedConfig {
            look_ahead: false,
            rules: EnforceRules {
                max_nodes_per_job: Some(0),
                ..EnforceRules::default()
            },
        };
        let d = decide_with(&config, &input(&c, &jobs), &facts, |i| hadar().plan(i));
        let Verdict::Refused { why } = &d.verdicts[0].1 else {
            panic!("{d:?}");
        };
        let plan = d.enforced_plan(&c, &facts);
        assert!(plan.assignments.is_empty(), "{plan:?}");
        assert_eq!(
            plan.waiting,
            vec![Waiting {
                job: JobId(1),
                reason: WaitReason::SlurmRule { why: why.clone() },
            }]
        );
        assert!(plan.waiting[0].reason.to_string().contains(why.as_str()));
    }
}
