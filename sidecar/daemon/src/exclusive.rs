//! `--exclusive` jobs take whole nodes, as Slurm gives them: hadar plans one only onto nodes
//! with no other job running or placed, and plans no other job onto its nodes while it runs.
//! The scheduling core knows nothing of this: the daemon fences a running exclusive job's
//! nodes off in the capacity view ([`fenced`]), and drops a new placement that would share
//! a node with an exclusive job before it is enforced ([`conflicts`]); the job waits for
//! another round. Pure.

use hadar_slurm::NodeInfo;
use hadar_store::{JobRow, NodeGpus, Phase};
use std::collections::{BTreeMap, BTreeSet};

/// The exclusive jobs among `rows` (returned), with the GPUs no other job may be planned
/// onto added to `taken` (the GPUs the capacity view leaves out, as (node, type, count)):
/// the rest of a running exclusive job's nodes ([`fenced`]), and, while an exclusive job
/// waits, the free GPUs of partly used nodes when an idle node fits it
/// ([`fence_used_nodes`]).
pub fn fence_off(
    rows: &BTreeMap<u64, JobRow>,
    nodes: &[NodeInfo],
    taken: &mut Vec<(String, String, u32)>,
) -> BTreeSet<u64> {
    let exclusive_ids: BTreeSet<u64> = rows
        .values()
        .filter(|r| r.phase != Phase::Finished && is_exclusive(&r.record))
        .map(|r| r.id)
        .collect();
    let exclusive_running: Vec<&NodeGpus> = rows
        .values()
        .filter(|r| exclusive_ids.contains(&r.id))
        .filter(|r| matches!(r.phase, Phase::Running | Phase::Starting))
        .filter_map(|r| r.placement.as_ref())
        .collect();
    taken.extend(fenced(nodes, &exclusive_running));
    let managed_running: Vec<&NodeGpus> = rows
        .values()
        .filter(|r| {
            matches!(
                r.phase,
                Phase::Running | Phase::Starting | Phase::Preempting
            )
        })
        .filter_map(|r| r.placement.as_ref())
        .collect();
    let exclusive_waiting: Vec<u32> = rows
        .values()
        .filter(|r| exclusive_ids.contains(&r.id) && r.phase == Phase::Waiting)
        .map(|r| r.workers)
        .collect();
    let fence = fence_used_nodes(nodes, taken, &managed_running, &exclusive_waiting);
    taken.extend(fence);
    exclusive_ids
}

/// Whether a hadar record asks for whole nodes (`exclusive=yes`).
pub fn is_exclusive(record: &str) -> bool {
    record.split_whitespace().any(|w| w == "exclusive=yes")
}

/// Whether `alloc` (what Slurm gave a job) holds at least the GPUs of `placed` (what hadar
/// placed it on), node by node and type by type, and more: an exclusive job's whole nodes.
pub fn covers(alloc: &NodeGpus, placed: &NodeGpus) -> bool {
    let count = |p: &NodeGpus, node: &str, t: &str| -> u32 {
        p.iter()
            .filter(|(n, _)| n == node)
            .flat_map(|(_, g)| g.iter())
            .filter(|(u, _)| u.eq_ignore_ascii_case(t))
            .map(|(_, c)| c)
            .sum()
    };
    !placed.is_empty()
        && placed
            .iter()
            .all(|(node, gpus)| gpus.iter().all(|(t, c)| count(alloc, node, t) >= *c))
}

/// The GPUs of the nodes of running exclusive jobs that those jobs do not hold, as
/// `(node, type, count)` taken by no one else: no other job may use them meanwhile.
pub fn fenced(nodes: &[NodeInfo], running: &[&NodeGpus]) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    for placement in running {
        for (node, own) in placement.iter() {
            let Some(info) = nodes.iter().find(|n| n.name == *node) else {
                continue;
            };
            for (t, total) in &info.gpus {
                let held: u32 = own
                    .iter()
                    .filter(|(u, _)| u.eq_ignore_ascii_case(t))
                    .map(|(_, c)| *c)
                    .sum();
                if *total > held {
                    out.push((node.clone(), t.clone(), total - held));
                }
            }
        }
    }
    out
}

/// While an exclusive job waits and some wholly idle node has GPUs enough for it
/// (`waiting`: each waiting exclusive job's GPU count), the free GPUs of every node already
/// in use (by jobs hadar does not manage, `foreign`, or by its own running jobs, `running`),
/// as `(node, type, count)` taken for this round: the planner then places the exclusive job
/// on an idle node rather than beside another job, where Slurm would not start it. Other
/// jobs lose those free GPUs for the rounds until it starts; with no idle node big enough,
/// nothing is fenced and the exclusive job waits.
pub fn fence_used_nodes(
    nodes: &[NodeInfo],
    foreign: &[(String, String, u32)],
    running: &[&NodeGpus],
    waiting: &[u32],
) -> Vec<(String, String, u32)> {
    let used = |name: &str| {
        foreign.iter().any(|(n, _, c)| n == name && *c > 0)
            || running.iter().any(|p| p.iter().any(|(n, _)| n == name))
    };
    let usable = |n: &&NodeInfo| n.state.usable() && !n.gpus.is_empty();
    let fits = nodes
        .iter()
        .filter(usable)
        .filter(|n| !used(&n.name))
        .any(|n| {
            let total: u32 = n.gpus.iter().map(|(_, c)| c).sum();
            waiting.iter().any(|w| *w <= total)
        });
    if !fits {
        return Vec::new();
    }
    let mut out = Vec::new();
    for n in nodes.iter().filter(usable).filter(|n| used(&n.name)) {
        for (t, total) in &n.gpus {
            let same = |u: &String| u.eq_ignore_ascii_case(t);
            let taken: u32 = foreign
                .iter()
                .filter(|(m, u, _)| *m == n.name && same(u))
                .map(|(_, _, c)| c)
                .sum::<u32>()
                + running
                    .iter()
                    .flat_map(|p| p.iter().filter(|(m, _)| *m == n.name))
                    .flat_map(|(_, g)| g.iter().filter(|(u, _)| same(u)))
                    .map(|(_, c)| c)
                    .sum::<u32>();
            if *total > taken {
                out.push((n.name.clone(), t.clone(), total - taken));
            }
        }
    }
    out
}

/// The planned jobs that must wait this round, with why: a new placement of an exclusive job
/// onto a node where another job runs (`busy`: nodes with jobs hadar does not manage) or is
/// planned, and a new placement of any job onto a node of an exclusive job already there.
/// `is_new(id)`: the job is not yet running or starting where it is planned.
pub fn conflicts(
    planned: &BTreeMap<u64, NodeGpus>,
    exclusive: &BTreeSet<u64>,
    is_new: &dyn Fn(u64) -> bool,
    busy: &BTreeSet<String>,
) -> Vec<(u64, String)> {
    let mut on_node: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (id, gpus) in planned {
        for (node, _) in gpus {
            on_node.entry(node.as_str()).or_default().insert(*id);
        }
    }
    let mut dropped: Vec<(u64, String)> = Vec::new();
    // Exclusive jobs already running keep their nodes: new jobs there wait.
    for id in exclusive
        .iter()
        .filter(|id| planned.contains_key(id) && !is_new(**id))
    {
        for (node, _) in &planned[id] {
            for other in on_node[node.as_str()].clone() {
                if other != *id && is_new(other) {
                    on_node.values_mut().for_each(|s| {
                        s.remove(&other);
                    });
                    dropped.push((other, format!("would share {node} with an --exclusive job")));
                }
            }
        }
    }
    // New exclusive placements only onto nodes of their own.
    for id in exclusive
        .iter()
        .filter(|id| planned.contains_key(id) && is_new(**id))
    {
        if dropped.iter().any(|(d, _)| d == id) {
            continue;
        }
        let shared = planned[id].iter().find(|(node, _)| {
            busy.contains(node) || on_node[node.as_str()].iter().any(|o| o != id)
        });
        if let Some((node, _)) = shared {
            on_node.values_mut().for_each(|s| {
                s.remove(id);
            });
            dropped.push((
                *id,
                format!("is --exclusive, and {node} has other jobs; it waits for a whole node"),
            ));
        }
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeState;

    fn on(node: &str, t: &str, n: u32) -> NodeGpus {
        vec![(node.to_string(), vec![(t.to_string(), n)])]
    }

    #[test]
    fn a_running_exclusive_job_fences_the_rest_of_its_node() {
        let nodes = vec![NodeInfo {
            name: "n4".into(),
            state: NodeState::Idle,
            gpus: vec![("v100".into(), 2), ("k80".into(), 2)],
            partitions: vec![],
            features: Vec::new(),
            free: Default::default(),
        }];
        let p = on("n4", "v100", 1);
        assert_eq!(
            fenced(&nodes, &[&p]),
            vec![
                ("n4".into(), "v100".into(), 1),
                ("n4".into(), "k80".into(), 2)
            ]
        );
        let whole = vec![(
            "n4".to_string(),
            vec![("v100".to_string(), 2), ("k80".to_string(), 2)],
        )];
        assert!(covers(&whole, &p) && !covers(&p, &whole) && !covers(&whole, &vec![]));
        assert!(is_exclusive("hadar:v1 gpus=1 exclusive=yes"));
        assert!(!is_exclusive("hadar:v1 gpus=1"));
    }

    #[test]
    fn a_waiting_exclusive_job_fences_used_nodes_only_when_an_idle_node_fits_it() {
        let node = |name: &str, gpus: u32| NodeInfo {
            name: name.into(),
            state: NodeState::Idle,
            gpus: vec![("v100".into(), gpus)],
            partitions: vec![],
            features: Vec::new(),
            free: Default::default(),
        };
        let nodes = vec![node("n1", 4), node("n2", 2)];
        let foreign = vec![("n1".to_string(), "v100".to_string(), 3)];
        let ours = on("n2", "v100", 1);
        // n1 is partly used and n2 idle: n1's last GPU is fenced.
        assert_eq!(
            fence_used_nodes(&nodes, &foreign, &[], &[2]),
            vec![("n1".into(), "v100".into(), 1)]
        );
        // No idle node has 3 GPUs: nothing is fenced.
        assert!(fence_used_nodes(&nodes, &foreign, &[], &[3]).is_empty());
        // Both nodes used: no idle node at all.
        assert!(fence_used_nodes(&nodes, &foreign, &[&ours], &[1]).is_empty());
        assert!(fence_used_nodes(&nodes, &foreign, &[], &[]).is_empty());
    }

    #[test]
    fn new_exclusive_jobs_wait_for_a_node_of_their_own() {
        let planned: BTreeMap<u64, NodeGpus> = [
            (1, on("n1", "v100", 2)),
            (2, on("n1", "v100", 1)),
            (3, on("n2", "p100", 1)),
            (4, on("n3", "k80", 1)),
        ]
        .into_iter()
        .collect();
        let exclusive: BTreeSet<u64> = [2, 3, 4].into_iter().collect();
        let busy: BTreeSet<String> = ["n3".to_string()].into_iter().collect();
        let all_new = |_: u64| true;
        let dropped: Vec<u64> = conflicts(&planned, &exclusive, &all_new, &busy)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        // 2 shares n1 with 1; 3 has n2 alone; 4 is on a node an unmanaged job uses.
        assert_eq!(dropped, vec![2, 4]);
        // Job 2 already runs on n1 exclusively: the new job 1 waits instead.
        let two_runs = |id: u64| id != 2;
        let dropped = conflicts(&planned, &exclusive, &two_runs, &busy);
        assert_eq!(dropped[0].0, 1);
        assert!(dropped[0].1.contains("--exclusive"));
    }
}
