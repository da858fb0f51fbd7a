//! The cluster as the policy sees it, built from Slurm's nodes: only usable nodes (not
//! drained, draining or down) of the managed partitions, with the GPUs that jobs hadar does
//! not manage hold taken out. Also the translation between the core's placements (node and
//! type indices) and Slurm's names, and the per-node GPU use a round records for `status`.

use hadar_core::{Cluster, GpuType, Node, NodeId, Part, Placement};
use hadar_slurm::NodeInfo;
use hadar_store::{NodeGpus, NodeRow};
use std::collections::BTreeMap;

/// The policy's view of the cluster for one round.
#[derive(Clone, Debug)]
pub struct ClusterView {
    /// The usable capacity; `None` when no usable node has a GPU.
    pub cluster: Option<Cluster>,
    /// Every GPU type of the managed partitions, in the cluster's order.
    pub types: Vec<String>,
    /// Nodes left out, with their state.
    pub unusable: Vec<(String, String)>,
    /// GPUs per type held by jobs hadar does not manage, on usable nodes.
    pub foreign: BTreeMap<String, u32>,
}

/// Builds the view. `partitions` empty means every node; `foreign` lists `(node, type,
/// count)` held by unmanaged jobs.
pub fn build(
    nodes: &[NodeInfo],
    partitions: &[String],
    foreign: &[(String, String, u32)],
) -> ClusterView {
    let in_scope: Vec<&NodeInfo> = nodes
        .iter()
        .filter(|n| partitions.is_empty() || n.partitions.iter().any(|p| partitions.contains(p)))
        .filter(|n| !n.gpus.is_empty())
        .collect();
    let mut types: Vec<String> = Vec::new();
    for n in &in_scope {
        for (t, _) in &n.gpus {
            if !types.iter().any(|u| u.eq_ignore_ascii_case(t)) {
                types.push(t.clone());
            }
        }
    }
    let mut unusable = Vec::new();
    let mut core_nodes = Vec::new();
    let mut foreign_by_type: BTreeMap<String, u32> = BTreeMap::new();
    for n in &in_scope {
        if !n.state.usable() {
            unusable.push((n.name.clone(), n.state.as_str().to_string()));
            continue;
        }
        let mut gpus = vec![0u32; types.len()];
        for (t, c) in &n.gpus {
            if let Some(i) = types.iter().position(|u| u.eq_ignore_ascii_case(t)) {
                gpus[i] += c;
            }
        }
        for (_, t, c) in foreign.iter().filter(|(node, _, _)| *node == n.name) {
            if let Some(i) = types.iter().position(|u| u.eq_ignore_ascii_case(t)) {
                let taken = (*c).min(gpus[i]);
                gpus[i] -= taken;
                *foreign_by_type.entry(types[i].clone()).or_default() += taken;
            }
        }
        core_nodes.push(Node {
            name: n.name.clone(),
            gpus,
        });
    }
    let cluster = if types.is_empty() {
        None
    } else {
        Cluster::new(types.clone(), core_nodes).ok()
    };
    ClusterView {
        cluster,
        types,
        unusable,
        foreign: foreign_by_type,
    }
}

/// A core placement in Slurm's names, nodes and types in the cluster's order.
pub fn to_node_gpus(cluster: &Cluster, placement: &Placement) -> NodeGpus {
    let mut out: NodeGpus = Vec::new();
    for p in placement.parts() {
        let node = cluster.node(p.node).name.clone();
        let t = cluster.type_name(p.gpu_type).to_string();
        match out.iter_mut().find(|(n, _)| *n == node) {
            Some((_, g)) => g.push((t, p.gpus)),
            None => out.push((node, vec![(t, p.gpus)])),
        }
    }
    out
}

/// A placement in Slurm's names as a core gang placement; `None` when it uses a node or type
/// the cluster view lacks (a drained or down node).
pub fn to_placement(cluster: &Cluster, gpus: &NodeGpus) -> Option<Placement> {
    let mut parts = Vec::new();
    for (node, per_type) in gpus {
        let n: NodeId = cluster.node_by_name(node)?;
        for (t, c) in per_type {
            let gt: GpuType = cluster.type_by_name(t)?;
            parts.push(Part {
                node: n,
                gpu_type: gt,
                gpus: *c,
            });
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(Placement::gang(parts))
}

/// `cluster` without the GPUs `held` lists (`(node, type, count)` in Slurm's names): the same
/// nodes and types, so placements keep their ids; `None` when no GPU is left.
pub fn less(cluster: &Cluster, held: &[(String, String, u32)]) -> Option<Cluster> {
    let names = cluster.type_names();
    let nodes = cluster
        .nodes()
        .iter()
        .map(|n| {
            let mut gpus = n.gpus.clone();
            for (_, t, c) in held.iter().filter(|(node, _, _)| *node == n.name) {
                if let Some(i) = names.iter().position(|u| u.eq_ignore_ascii_case(t)) {
                    gpus[i] = gpus[i].saturating_sub(*c);
                }
            }
            Node {
                name: n.name.clone(),
                gpus,
            }
        })
        .collect();
    Cluster::new(names.to_vec(), nodes).ok()
}

/// GPUs per type of a placement in Slurm's names.
pub fn per_type(gpus: &NodeGpus) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for (_, g) in gpus {
        for (t, c) in g {
            *out.entry(t.clone()).or_default() += c;
        }
    }
    out
}

/// Two placements in Slurm's names are the same GPUs (order of nodes and types aside).
pub fn same_gpus(a: &NodeGpus, b: &NodeGpus) -> bool {
    let norm = |x: &NodeGpus| {
        let mut v: Vec<(String, String, u32)> = x
            .iter()
            .flat_map(|(n, g)| {
                g.iter()
                    .map(move |(t, c)| (n.clone(), t.to_ascii_lowercase(), *c))
            })
            .collect();
        v.sort();
        v
    };
    norm(a) == norm(b)
}

/// Whether a typeless request for `placement` would leave the GPU type to Slurm: it takes
/// only some of the GPUs of a node that has several types (on n4 with 2 V100 and 2 K80, a
/// typeless `Gres=gpu:1` gets whichever GPU Slurm's scheduler picks first, not the planned
/// one). Only a typed request gives such a placement exactly.
pub fn leaves_the_type_to_slurm(nodes: &[NodeInfo], placement: &NodeGpus) -> bool {
    placement.iter().any(|(name, gpus)| {
        nodes.iter().find(|n| &n.name == name).is_some_and(|n| {
            let total: u32 = n.gpus.iter().map(|(_, c)| c).sum();
            let taken: u32 = gpus.iter().map(|(_, c)| c).sum();
            n.gpus.len() > 1 && taken < total
        })
    })
}

/// Whether two placements give the same number of GPUs on each node (whatever the types):
/// the same typeless Slurm request.
pub fn same_counts(a: &NodeGpus, b: &NodeGpus) -> bool {
    let norm = |x: &NodeGpus| {
        let mut v: Vec<(String, u32)> = x
            .iter()
            .map(|(n, g)| (n.clone(), g.iter().map(|(_, c)| *c).sum()))
            .collect();
        v.sort();
        v
    };
    norm(a) == norm(b)
}

/// Each in-scope node with GPUs for the round record: its managed partitions, and per type
/// its GPUs, those held by running jobs (`busy`: node, type, count) and those `planned`
/// (the plan's placements).
pub fn node_rows<'a>(
    nodes: &[NodeInfo],
    partitions: &[String],
    planned: impl IntoIterator<Item = &'a NodeGpus>,
    busy: &[(String, String, u32)],
) -> Vec<NodeRow> {
    let mut rows: Vec<NodeRow> = nodes
        .iter()
        .filter(|n| !n.gpus.is_empty())
        .map(|n| NodeRow {
            name: n.name.clone(),
            partitions: n
                .partitions
                .iter()
                .filter(|p| partitions.is_empty() || partitions.contains(p))
                .cloned()
                .collect(),
            unusable: (!n.state.usable()).then(|| n.state.as_str().to_string()),
            gpus: n.gpus.iter().cloned().collect(),
            ..NodeRow::default()
        })
        .filter(|r| partitions.is_empty() || !r.partitions.is_empty())
        .collect();
    let mut add = |node: &str, t: &str, c: u32, planned: bool| {
        if let Some(r) = rows.iter_mut().find(|r| r.name == node) {
            let map = if planned { &mut r.planned } else { &mut r.busy };
            *map.entry(t.to_string()).or_default() += c;
        }
    };
    for (node, t, c) in busy {
        add(node, t, *c, false);
    }
    for gpus in planned {
        for (node, per_type) in gpus {
            for (t, c) in per_type {
                add(node, t, *c, true);
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeState;

    fn node(name: &str, state: NodeState, gpus: &[(&str, u32)]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            state,
            gpus: gpus.iter().map(|(t, c)| (t.to_string(), *c)).collect(),
            partitions: vec!["gpu".into()],
            features: Vec::new(),
            free: Default::default(),
        }
    }

    fn testbed(n3: NodeState) -> Vec<NodeInfo> {
        vec![
            node("n1", NodeState::Idle, &[("v100", 4)]),
            node("n2", NodeState::Mixed, &[("p100", 4)]),
            node("n3", n3, &[("k80", 4)]),
            node("n4", NodeState::Idle, &[("v100", 2), ("k80", 2)]),
        ]
    }

    #[test]
    fn part_of_a_node_with_two_types_leaves_the_type_to_slurm() {
        let nodes = testbed(NodeState::Idle);
        let on = |parts: &[(&str, &[(&str, u32)])]| -> NodeGpus {
            parts
                .iter()
                .map(|(n, g)| {
                    let g = g.iter().map(|(t, c)| (t.to_string(), *c)).collect();
                    (n.to_string(), g)
                })
                .collect()
        };
        assert!(leaves_the_type_to_slurm(
            &nodes,
            &on(&[("n4", &[("v100", 1)])])
        ));
        assert!(leaves_the_type_to_slurm(
            &nodes,
            &on(&[("n1", &[("v100", 2)]), ("n4", &[("v100", 2)])])
        ));
        // All of n4, or part of a node with one type: the node list decides the types.
        assert!(!leaves_the_type_to_slurm(
            &nodes,
            &on(&[("n4", &[("v100", 2), ("k80", 2)])])
        ));
        assert!(!leaves_the_type_to_slurm(
            &nodes,
            &on(&[("n1", &[("v100", 1)])])
        ));
    }

    #[test]
    fn drained_nodes_leave_and_foreign_gpus_are_taken_out() {
        let foreign = vec![("n2".to_string(), "p100".to_string(), 3)];
        let v = build(&testbed(NodeState::Drained), &["gpu".into()], &foreign);
        let c = v.cluster.unwrap();
        assert_eq!(v.types, ["v100", "p100", "k80"]);
        assert_eq!(c.nodes().len(), 3);
        assert_eq!(c.node_by_name("n3"), None);
        assert_eq!(c.total_of_type(GpuType(1)), 1);
        assert_eq!(c.total_of_type(GpuType(2)), 2);
        assert_eq!(v.unusable, vec![("n3".to_string(), "drained".to_string())]);
        assert_eq!(v.foreign.get("p100"), Some(&3));
    }

    #[test]
    fn less_keeps_every_node_and_type_and_takes_out_what_is_held() {
        let c = build(&testbed(NodeState::Idle), &[], &[]).cluster.unwrap();
        let held = vec![
            ("n4".to_string(), "K80".to_string(), 2),
            ("n1".to_string(), "v100".to_string(), 5),
            ("elsewhere".to_string(), "v100".to_string(), 1),
        ];
        let l = less(&c, &held).unwrap();
        assert_eq!(l.type_names(), c.type_names());
        assert_eq!(l.nodes().len(), c.nodes().len());
        assert_eq!(l.node_by_name("n4"), c.node_by_name("n4"));
        assert_eq!(l.node(l.node_by_name("n1").unwrap()).gpus, vec![0, 0, 0]);
        assert_eq!(l.node(l.node_by_name("n4").unwrap()).gpus, vec![2, 0, 0]);
        assert_eq!(l.total_gpus(), c.total_gpus() - 6);
        let all: Vec<_> = c
            .nodes()
            .iter()
            .flat_map(|n| {
                c.type_names()
                    .iter()
                    .map(|t| (n.name.clone(), t.clone(), 9))
            })
            .collect();
        assert_eq!(less(&c, &all), None);
    }

    #[test]
    fn placements_translate_both_ways() {
        let v = build(&testbed(NodeState::Idle), &[], &[]);
        let c = v.cluster.unwrap();
        let gpus: NodeGpus = vec![("n4".into(), vec![("v100".into(), 2), ("k80".into(), 2)])];
        let p = to_placement(&c, &gpus).unwrap();
        assert_eq!(p.gpus(), 4);
        assert_eq!(p.types().len(), 2);
        assert!(same_gpus(&to_node_gpus(&c, &p), &gpus));
        let down = build(&testbed(NodeState::Down), &[], &[]).cluster.unwrap();
        let on_n3: NodeGpus = vec![("n3".into(), vec![("k80".into(), 1)])];
        assert_eq!(to_placement(&down, &on_n3), None);
    }

    #[test]
    fn no_usable_gpu_gives_no_cluster() {
        let nodes = vec![node("n1", NodeState::Down, &[("v100", 4)])];
        let v = build(&nodes, &[], &[]);
        assert!(v.cluster.is_none());
        assert_eq!(v.unusable.len(), 1);
    }

    #[test]
    fn node_rows_keep_managed_partitions_and_add_busy_and_planned_gpus() {
        use hadar_slurm::NodeState;
        let node = |name: &str, state: &str, parts: &[&str]| NodeInfo {
            name: name.into(),
            state: NodeState::parse(state),
            gpus: vec![("v100".into(), 4)],
            partitions: parts.iter().map(|p| p.to_string()).collect(),
            features: Vec::new(),
            free: Default::default(),
        };
        let nodes = [
            node("n1", "IDLE", &["gpu", "cpu"]),
            node("n2", "DOWN", &["gpu"]),
            node("n3", "IDLE", &["cpu"]),
        ];
        let planned: NodeGpus = vec![("n1".into(), vec![("v100".into(), 2)])];
        let busy = [("n1".to_string(), "v100".to_string(), 1)];
        let rows = node_rows(&nodes, &["gpu".into()], [&planned], &busy);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["n1", "n2"], "n3 is in no managed partition");
        assert_eq!(rows[0].partitions, ["gpu"]);
        assert_eq!((rows[0].busy["v100"], rows[0].planned["v100"]), (1, 2));
        assert_eq!(
            rows[1].unusable.as_deref(),
            Some(NodeState::parse("DOWN").as_str())
        );
        assert_eq!(node_rows(&nodes, &[], [&planned], &busy).len(), 3);
    }
}
