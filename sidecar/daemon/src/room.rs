//! The GPUs a round's starts may take (pure). A preempted job keeps its GPUs through its
//! grace time, which no round waits out; a job released onto them would sit pending in
//! Slurm's queue until the requeue, where Slurm's scheduler and backfill look at it every
//! pass and the next plan may move it again. So a start waits for a later round unless its
//! GPUs are free now: what each node has, less what the round's read shows jobs holding
//! (but the jobs this round requeued), less what the released jobs not yet started will take.

use hadar_slurm::{JobStatus, NodeInfo, SlurmJob};
use hadar_store::{JobRow, NodeGpus, Phase};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Free GPUs per node and type.
#[derive(Debug, Default)]
pub struct Room(HashMap<(String, String), i64>);

impl Room {
    /// The room left by `slurm_jobs` (the round's read) on `nodes`, with the jobs of
    /// `requeued` gone and every `Starting` job of `rows` (released, not yet started) placed.
    pub fn new(
        nodes: &[NodeInfo],
        slurm_jobs: &[SlurmJob],
        requeued: &HashSet<u64>,
        rows: &BTreeMap<u64, JobRow>,
    ) -> Room {
        let mut room = Room::default();
        for n in nodes {
            for (t, c) in &n.gpus {
                *room.0.entry((n.name.clone(), t.clone())).or_default() += i64::from(*c);
            }
        }
        let holding = slurm_jobs
            .iter()
            .filter(|j| !j.status.is_terminal() && j.status != JobStatus::Pending)
            .filter(|j| !requeued.contains(&j.id));
        for j in holding {
            for a in &j.alloc {
                room.less(&a.node, &a.gpus);
            }
        }
        let released = rows
            .values()
            .filter(|r| r.phase == Phase::Starting)
            .filter_map(|r| r.placement.as_ref());
        for placement in released {
            for (node, gpus) in placement {
                room.less(node, gpus);
            }
        }
        room
    }

    fn less(&mut self, node: &str, gpus: &[(String, u32)]) {
        for (t, c) in gpus {
            *self.0.entry((node.to_string(), t.clone())).or_default() -= i64::from(*c);
        }
    }

    /// Takes `placement`'s GPUs if every one of them is free; otherwise takes none and says so.
    pub fn take(&mut self, placement: &NodeGpus) -> bool {
        let fits = placement.iter().all(|(node, gpus)| {
            gpus.iter().all(|(t, c)| {
                self.0
                    .get(&(node.clone(), t.clone()))
                    .is_some_and(|free| *free >= i64::from(*c))
            })
        });
        if fits {
            for (node, gpus) in placement {
                self.less(node, gpus);
            }
        }
        fits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeAlloc;

    fn node(name: &str, gpus: &[(&str, u32)]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            state: hadar_slurm::NodeState::Idle,
            gpus: gpus.iter().map(|(t, c)| (t.to_string(), *c)).collect(),
            partitions: vec!["gpu".into()],
            features: vec![],
            free: Default::default(),
        }
    }

    fn running(id: u64, node: &str, t: &str, c: u32) -> SlurmJob {
        SlurmJob {
            status: JobStatus::Running,
            alloc: vec![NodeAlloc {
                node: node.into(),
                gpus: vec![(t.into(), c)],
            }],
            ..SlurmJob::held_with_record(id, "hadar:v1 gpus=1")
        }
    }

    fn on(node: &str, t: &str, c: u32) -> NodeGpus {
        vec![(node.to_string(), vec![(t.to_string(), c)])]
    }

    #[test]
    fn a_start_waits_for_gpus_a_job_in_its_grace_time_still_holds() {
        let nodes = [node("n1", &[("v100", 4)]), node("n2", &[("k80", 4)])];
        // Job 1 holds 3 of n1's V100s (being preempted); job 2 held n2's K80s and was
        // requeued this round.
        let jobs = [running(1, "n1", "v100", 3), running(2, "n2", "k80", 4)];
        let requeued: HashSet<u64> = [2].into();
        let mut starting = JobRow::new(9, String::new(), String::new(), 1, 10.0, 0.0);
        starting.phase = Phase::Starting;
        starting.placement = Some(on("n2", "k80", 1));
        let rows: BTreeMap<u64, JobRow> = [(9, starting)].into();
        let mut room = Room::new(&nodes, &jobs, &requeued, &rows);
        assert!(!room.take(&on("n1", "v100", 2)), "only one V100 is free");
        assert!(room.take(&on("n1", "v100", 1)));
        assert!(
            !room.take(&on("n1", "v100", 1)),
            "taken by the start before"
        );
        assert!(
            room.take(&on("n2", "k80", 3)),
            "the requeued job's, less job 9's"
        );
        assert!(!room.take(&on("n2", "k80", 1)));
        assert!(
            !room.take(&on("n3", "k80", 1)),
            "a node Slurm does not list"
        );
        let split = vec![
            ("n1".to_string(), vec![("v100".to_string(), 1)]),
            ("n2".to_string(), vec![("k80".to_string(), 1)]),
        ];
        assert!(!room.take(&split), "all of a placement or none");
    }
}
