//! The target's enforceability rules, applied to a plan after it is made.
//!
//! A policy places a job on any GPUs that fit; Slurm gives a job only what one request can
//! ask for. One job has one per-node request, so its GPUs must be the same on every node
//! (Slurm 22.05 also refuses per-job requests of several types); and a job Slurm holds to
//! the types of its first placement stays pending forever on a node without all of them.
//! A placement breaking a rule is not carried out: a started job stays where it is rather
//! than being preempted towards GPUs it would not get, a waiting one waits
//! ([`Verdict`]). Pure.

use super::{JobFacts, TargetFacts};
use crate::cluster::{Cluster, GpuType};
use crate::job::JobId;
use crate::placement::{Placement, PlacementKind};
use crate::plan::RoundPlan;

/// Which rules the target imposes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnforceRules {
    /// One request per job: the same GPUs on every node of a gang (typed request: the same
    /// types and counts; typeless: the same count).
    pub one_request_per_job: bool,
    /// A job held to several types goes only to nodes that have every one of them.
    pub held_types_everywhere: bool,
    /// At most this many nodes per gang job.
    pub max_nodes_per_job: Option<u32>,
}

impl Default for EnforceRules {
    /// Slurm's rules (what `hadar serve` lives with), no node limit.
    fn default() -> Self {
        EnforceRules {
            one_request_per_job: true,
            held_types_everywhere: true,
            max_nodes_per_job: None,
        }
    }
}

impl EnforceRules {
    /// No rules: every placement is carried out (an idealised cluster).
    pub fn none() -> Self {
        EnforceRules {
            one_request_per_job: false,
            held_types_everywhere: false,
            max_nodes_per_job: None,
        }
    }
}

/// What the rules make of one assignment.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Carried out as planned.
    Enforced,
    /// Not carried out; the job is started and stays where it is.
    Stays {
        /// The rule broken, in words.
        why: String,
    },
    /// Not carried out; the job waits.
    Refused {
        /// The rule broken, in words.
        why: String,
    },
}

/// Whether the target can give a job `placement` under `rules` (the rule broken, in words,
/// when not). `facts` says whether its request names types and what it is held to.
pub fn enforceable(
    cluster: &Cluster,
    placement: &Placement,
    facts: &JobFacts,
    node_types: &std::collections::BTreeMap<String, Vec<String>>,
    rules: &EnforceRules,
) -> Result<(), String> {
    if placement.kind() == PlacementKind::Forked {
        // Each copy is its own job on one node: one request each.
        return Ok(());
    }
    // Per node, its (type, count) in the placement's order (by node, then type).
    let mut per_node: Vec<(crate::NodeId, Vec<(GpuType, u32)>)> = Vec::new();
    for p in placement.parts() {
        match per_node.iter_mut().find(|(n, _)| *n == p.node) {
            Some((_, g)) => g.push((p.gpu_type, p.gpus)),
            None => per_node.push((p.node, vec![(p.gpu_type, p.gpus)])),
        }
    }
    if let Some(max) = rules.max_nodes_per_job
        && per_node.len() > max as usize
    {
        return Err(format!(
            "spans {} nodes, more than the {max} a job may have",
            per_node.len()
        ));
    }
    if rules.one_request_per_job {
        let uniform = if facts.typed {
            per_node.windows(2).all(|w| w[0].1 == w[1].1)
        } else {
            let counts: Vec<u32> = per_node
                .iter()
                .map(|(_, g)| g.iter().map(|(_, c)| c).sum())
                .collect();
            counts.windows(2).all(|w| w[0] == w[1])
        };
        if !uniform {
            return Err("gives different GPUs to different nodes, which one Slurm job cannot ask for; [hadar] max_nodes_per_job = 1 keeps jobs on one node".into());
        }
    }
    if rules.held_types_everywhere
        && let Some(held) = facts.held_types.as_ref().filter(|b| b.len() > 1)
    {
        for (n, _) in &per_node {
            let node = &cluster.node(*n).name;
            let has = node_types.get(node).cloned().unwrap_or_default();
            if let Some(t) = held
                .iter()
                .find(|t| !has.iter().any(|u| u.eq_ignore_ascii_case(t)))
            {
                return Err(format!(
                    "is on {node}, which has no {t}; Slurm keeps the GPU types of a job's first placement ({})",
                    held.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// The pass: each assignment of `plan` judged by `rules`, in the plan's order. A running or
/// starting job whose placement breaks a rule stays where it is; any other job waits. A job
/// that stays keeps the GPUs it holds, which the plan may have given to others: an
/// assignment that no longer fits beside the staying jobs is not carried out either (so the
/// placements carried out never exceed the cluster, and a job is never started on GPUs a
/// job that stays still holds).
pub fn judge(
    cluster: &Cluster,
    plan: &RoundPlan,
    facts: &TargetFacts,
    rules: &EnforceRules,
) -> Vec<(JobId, Verdict)> {
    let mut verdicts: Vec<(JobId, Verdict)> = plan
        .assignments
        .iter()
        .map(|a| {
            let f = facts.job(a.job);
            let verdict = match enforceable(cluster, &a.placement, &f, &facts.node_types, rules) {
                Ok(()) => Verdict::Enforced,
                Err(why) => not_carried_out(&f, why),
            };
            (a.job, verdict)
        })
        .collect();
    // Each job made to stay may push out another assignment, whose job may stay in turn:
    // until none changes (verdicts only leave `Enforced`, so this ends).
    loop {
        let mut free: Vec<Vec<u32>> = cluster.nodes().iter().map(|n| n.gpus.clone()).collect();
        for (job, _) in verdicts
            .iter()
            .filter(|(_, v)| matches!(v, Verdict::Stays { .. }))
        {
            for (n, t, c) in &facts.job(*job).holds {
                if let (Some(n), Some(t)) = (cluster.node_by_name(n), cluster.type_by_name(t)) {
                    let left = &mut free[n.index()][t.index()];
                    *left = left.saturating_sub(*c);
                }
            }
        }
        let mut changed = false;
        for (a, (_, verdict)) in plan.assignments.iter().zip(verdicts.iter_mut()) {
            if *verdict != Verdict::Enforced {
                continue;
            }
            let parts = a.placement.parts();
            let fits = parts
                .iter()
                .all(|p| free[p.node.index()][p.gpu_type.index()] >= p.gpus);
            if fits {
                for p in parts {
                    free[p.node.index()][p.gpu_type.index()] -= p.gpus;
                }
            } else {
                let why = "needs GPUs a job that stays where it is still holds".to_string();
                *verdict = not_carried_out(&facts.job(a.job), why);
                changed = true;
            }
        }
        if !changed {
            return verdicts;
        }
    }
}

/// A placement that is not carried out: a running or starting job holding GPUs stays where
/// it is, any other job waits.
fn not_carried_out(f: &JobFacts, why: String) -> Verdict {
    let stays = matches!(
        f.phase,
        super::JobPhase::Running | super::JobPhase::Starting
    ) && !f.holds.is_empty();
    if stays {
        Verdict::Stays { why }
    } else {
        Verdict::Refused { why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::JobPhase;
    use crate::{Node, Part};
    use std::collections::BTreeMap;

    fn cluster() -> Cluster {
        let node = |name: &str, gpus: Vec<u32>| Node {
            name: name.into(),
            gpus,
        };
        Cluster::new(
            vec!["v100".into(), "k80".into()],
            vec![
                node("n1", vec![4, 0]),
                node("n3", vec![0, 4]),
                node("n4", vec![2, 2]),
            ],
        )
        .unwrap()
    }

    fn on(c: &Cluster, parts: &[(&str, &str, u32)]) -> Placement {
        Placement::gang(parts.iter().map(|(n, t, g)| Part {
            node: c.node_by_name(n).unwrap(),
            gpu_type: c.type_by_name(t).unwrap(),
            gpus: *g,
        }))
    }

    fn facts(typed: bool, held: Option<&[&str]>) -> JobFacts {
        JobFacts {
            typed,
            held_types: held.map(|h| h.iter().map(|t| t.to_string()).collect()),
            ..JobFacts::waiting()
        }
    }

    fn node_types() -> BTreeMap<String, Vec<String>> {
        [
            ("n1", vec!["v100"]),
            ("n3", vec!["k80"]),
            ("n4", vec!["v100", "k80"]),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.into_iter().map(String::from).collect()))
        .collect()
    }

    #[test]
    fn only_placements_slurm_can_give_are_enforced() {
        let c = cluster();
        let nt = node_types();
        let r = EnforceRules::default();
        let ok = |p: &Placement, f: &JobFacts| enforceable(&c, p, f, &nt, &r);
        let mixed_n4 = on(&c, &[("n4", "v100", 2), ("n4", "k80", 2)]);
        assert!(ok(&mixed_n4, &facts(false, None)).is_ok());
        assert!(ok(&mixed_n4, &facts(true, None)).is_ok());
        let even = on(&c, &[("n1", "v100", 2), ("n3", "k80", 2)]);
        // Typeless: the same count on each node is one per-node request; typed, it is not.
        assert!(ok(&even, &facts(false, None)).is_ok());
        let e = ok(&even, &facts(true, None)).unwrap_err();
        assert!(e.contains("different GPUs to different nodes"), "{e}");
        let uneven = on(&c, &[("n1", "v100", 3), ("n3", "k80", 1)]);
        assert!(ok(&uneven, &facts(false, None)).is_err());
        let both: &[&str] = &["k80", "v100"];
        let e = ok(&on(&c, &[("n1", "v100", 4)]), &facts(true, Some(both))).unwrap_err();
        assert!(e.contains("n1, which has no k80"), "{e}");
        assert!(ok(&mixed_n4, &facts(true, Some(both))).is_ok());
        assert!(ok(&on(&c, &[("n3", "k80", 2)]), &facts(true, Some(&["k80"]))).is_ok());
        // Without the rules, all of it would be carried out.
        let none = EnforceRules::none();
        assert!(enforceable(&c, &uneven, &facts(false, None), &nt, &none).is_ok());
        // A node limit.
        let one = EnforceRules {
            max_nodes_per_job: Some(1),
            ..EnforceRules::none()
        };
        let e = enforceable(&c, &even, &facts(false, None), &nt, &one).unwrap_err();
        assert!(e.contains("spans 2 nodes"), "{e}");
    }

    #[test]
    fn a_started_job_stays_and_a_waiting_one_waits() {
        let c = cluster();
        let uneven = on(&c, &[("n1", "v100", 3), ("n3", "k80", 1)]);
        let fine = on(&c, &[("n1", "v100", 4)]);
        let assign = |job: u64, placement: &Placement| crate::Assignment {
            job: JobId(job),
            placement: placement.clone(),
            rate: 1.0,
            payoff: None,
        };
        let plan = RoundPlan {
            assignments: vec![
                assign(1, &uneven),
                assign(2, &uneven),
                assign(3, &fine),
                assign(4, &uneven),
            ],
            waiting: vec![],
        };
        let mut f = TargetFacts {
            node_types: node_types(),
            ..TargetFacts::default()
        };
        let holds = vec![("n3".to_string(), "k80".to_string(), 4)];
        f.jobs.insert(
            JobId(1),
            JobFacts {
                phase: JobPhase::Running,
                holds: holds.clone(),
                ..JobFacts::waiting()
            },
        );
        f.jobs.insert(
            JobId(4),
            JobFacts {
                phase: JobPhase::Preempting,
                holds,
                ..JobFacts::waiting()
            },
        );
        let v = judge(&c, &plan, &f, &EnforceRules::default());
        assert!(matches!(v[0].1, Verdict::Stays { .. }), "{v:?}");
        assert!(matches!(v[1].1, Verdict::Refused { .. }), "{v:?}");
        assert_eq!(v[2].1, Verdict::Enforced);
        assert!(
            matches!(v[3].1, Verdict::Refused { .. }),
            "a job being preempted is not kept: {v:?}"
        );
    }

    #[test]
    fn a_job_that_stays_keeps_its_gpus_from_the_jobs_the_plan_gave_them_to() {
        // Job 1 runs on n3's K80s and is planned across two nodes unevenly: it stays, so
        // job 2 cannot have n3's K80s; job 3, planned there from n4's K80s, stays on those,
        // so job 5 cannot have them either. Job 6 is left alone.
        let c = cluster();
        let assign = |job: u64, parts: &[(&str, &str, u32)]| crate::Assignment {
            job: JobId(job),
            placement: on(&c, parts),
            rate: 1.0,
            payoff: None,
        };
        let plan = RoundPlan {
            assignments: vec![
                assign(1, &[("n1", "v100", 3), ("n4", "v100", 1)]),
                assign(2, &[("n3", "k80", 2)]),
                assign(3, &[("n3", "k80", 2)]),
                assign(5, &[("n4", "k80", 2)]),
                assign(6, &[("n4", "v100", 1)]),
            ],
            waiting: vec![],
        };
        let mut f = TargetFacts {
            node_types: node_types(),
            ..TargetFacts::default()
        };
        for (job, holds) in [(1, ("n3", 4)), (3, ("n4", 2))] {
            f.jobs.insert(
                JobId(job),
                JobFacts {
                    phase: JobPhase::Running,
                    holds: vec![(holds.0.to_string(), "k80".to_string(), holds.1)],
                    ..JobFacts::waiting()
                },
            );
        }
        let v = judge(&c, &plan, &f, &EnforceRules::default());
        assert!(matches!(v[0].1, Verdict::Stays { .. }), "{v:?}");
        let Verdict::Refused { why } = &v[1].1 else {
            panic!("{v:?}");
        };
        assert!(why.contains("stays where it is"), "{why}");
        assert!(matches!(v[2].1, Verdict::Stays { .. }), "{v:?}");
        assert!(matches!(v[3].1, Verdict::Refused { .. }), "{v:?}");
        assert_eq!(v[4].1, Verdict::Enforced);
    }
}
