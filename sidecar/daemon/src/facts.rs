//! What Slurm says about the round's jobs and nodes, as the served policy's passes read it
//! ([`hadar_core::passes::TargetFacts`]): each active job's phase, the types Slurm holds it
//! to, whether its request names types, the GPUs it holds and its last reported rate; each
//! node's GPU types. Pure.

use hadar_core::JobId;
use hadar_core::passes::{JobFacts, JobPhase, TargetFacts};
use hadar_slurm::NodeInfo;
use hadar_store::{JobRow, Phase};
use std::collections::{BTreeMap, HashSet};

/// The facts of `rows` (finished jobs left out) and `nodes`; `typed` lists the jobs whose
/// Slurm request names GPU types.
pub fn target(
    rows: &BTreeMap<u64, JobRow>,
    typed: &HashSet<u64>,
    nodes: &[NodeInfo],
) -> TargetFacts {
    let jobs = rows
        .values()
        .filter_map(|r| {
            let phase = match r.phase {
                Phase::Waiting => JobPhase::Waiting,
                Phase::Starting => JobPhase::Starting,
                Phase::Running => JobPhase::Running,
                Phase::Preempting => JobPhase::Preempting,
                Phase::Finished => return None,
            };
            let holds = r
                .placement
                .iter()
                .flatten()
                .flat_map(|(n, g)| g.iter().map(move |(t, c)| (n.clone(), t.clone(), *c)))
                .collect();
            let facts = JobFacts {
                phase,
                held_types: r.bound_types.clone(),
                typed: typed.contains(&r.id),
                holds,
                last_rate: r.last_rate,
            };
            Some((JobId(r.id), facts))
        })
        .collect();
    let node_types = nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                n.gpus.iter().map(|(t, _)| t.clone()).collect(),
            )
        })
        .collect();
    TargetFacts { jobs, node_types }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeState;

    #[test]
    fn phases_holds_and_types_come_from_the_store_and_slurm() {
        let mut rows = BTreeMap::new();
        for (id, phase) in [
            (1, Phase::Running),
            (2, Phase::Waiting),
            (3, Phase::Finished),
        ] {
            let mut r = JobRow::new(id, String::new(), String::new(), 2, 10.0, 0.0);
            r.phase = phase;
            rows.insert(id, r);
        }
        let running = rows.get_mut(&1).unwrap();
        running.placement = Some(vec![(
            "n4".into(),
            vec![("v100".into(), 1), ("k80".into(), 1)],
        )]);
        running.bound_types = Some(vec!["v100".into(), "k80".into()]);
        running.last_rate = Some(3.5);
        let nodes = vec![NodeInfo {
            name: "n4".into(),
            state: NodeState::Idle,
            gpus: vec![("v100".into(), 2), ("k80".into(), 0)],
            partitions: vec![],
            features: Vec::new(),
            free: Default::default(),
        }];
        let f = target(&rows, &[1].into_iter().collect(), &nodes);
        assert_eq!(f.jobs.len(), 2, "finished jobs are left out");
        let one = &f.jobs[&JobId(1)];
        assert_eq!(one.phase, JobPhase::Running);
        assert!(one.typed);
        assert_eq!(one.last_rate, Some(3.5));
        assert_eq!(
            one.holds,
            vec![
                ("n4".to_string(), "v100".to_string(), 1),
                ("n4".to_string(), "k80".to_string(), 1)
            ]
        );
        assert_eq!(f.jobs[&JobId(2)].phase, JobPhase::Waiting);
        assert!(!f.jobs[&JobId(2)].typed);
        assert_eq!(
            f.node_types["n4"],
            vec!["v100".to_string(), "k80".to_string()]
        );
    }
}
