//! The test cluster's nodes: the four-node cluster every scenario runs on ([`crate::NODES`]),
//! or a large one of a given size for the scale benchmark and the playground
//! (`HADAR_TESTBED_NODES`), each node one `slurmd` on this machine (Slurm's
//! `--enable-multiple-slurmd`).

/// One node: its name, its GPUs by type and its features (`Features=`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub gpus: Vec<(String, u32)>,
    pub features: String,
}

impl NodeSpec {
    /// Its GPUs of every type.
    pub fn gpu_count(&self) -> u32 {
        self.gpus.iter().map(|(_, n)| n).sum()
    }
}

/// The most nodes a test cluster may have: slurmd `nK` listens on the controller's port plus
/// `K`, and 256 nodes take about 2 GiB of memory (docs/SLURM-TESTBED.md).
pub const MAX_NODES: usize = 256;

/// The four-node cluster ([`crate::NODES`] with [`crate::NODE_FEATURES`]).
pub fn default_nodes() -> Vec<NodeSpec> {
    crate::NODES
        .iter()
        .zip(crate::NODE_FEATURES)
        .map(|((name, gpus), features)| NodeSpec {
            name: name.to_string(),
            gpus: gpus.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            features: features.to_string(),
        })
        .collect()
}

/// A cluster of `count` nodes (1 to [`MAX_NODES`]) of 8 GPUs each, in a repeating pattern
/// of four shapes: 8 V100, 8 P100, 8 K80, and 4 V100 + 4 K80 (two types on one node, as n4
/// of the small cluster). 256 nodes hold 2,048 GPUs.
pub fn sized(count: usize) -> Result<Vec<NodeSpec>, String> {
    if !(1..=MAX_NODES).contains(&count) {
        return Err(format!(
            "a test cluster has 1 to {MAX_NODES} nodes, not {count}"
        ));
    }
    let shapes: [&[(&str, u32)]; 4] = [
        &[("v100", 8)],
        &[("p100", 8)],
        &[("k80", 8)],
        &[("v100", 4), ("k80", 4)],
    ];
    Ok((0..count)
        .map(|i| {
            let gpus: Vec<(String, u32)> = shapes[i % shapes.len()]
                .iter()
                .map(|(t, n)| (t.to_string(), *n))
                .collect();
            let features = gpus
                .iter()
                .map(|(t, _)| t.as_str())
                .collect::<Vec<_>>()
                .join(",");
            NodeSpec {
                name: format!("n{}", i + 1),
                gpus,
                features,
            }
        })
        .collect())
}

/// The cluster `HADAR_TESTBED_NODES` asks for (a node count), or the four-node one when it
/// is unset or empty.
pub fn from_env() -> Result<Vec<NodeSpec>, String> {
    match std::env::var("HADAR_TESTBED_NODES") {
        Ok(v) if !v.trim().is_empty() => {
            let count: usize = v.trim().parse().map_err(|_| {
                format!("HADAR_TESTBED_NODES={v}: give a whole number of nodes, 1 to {MAX_NODES}")
            })?;
            sized(count).map_err(|e| format!("HADAR_TESTBED_NODES={v}: {e}"))
        }
        _ => Ok(default_nodes()),
    }
}

/// The GPU types of `nodes`, each once, in the order they first appear.
pub fn gpu_types(nodes: &[NodeSpec]) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    for (t, _) in nodes.iter().flat_map(|n| &n.gpus) {
        if !types.contains(t) {
            types.push(t.clone());
        }
    }
    types
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cluster_is_the_four_nodes() {
        let n = default_nodes();
        assert_eq!(n.len(), 4);
        assert_eq!(n[3].gpus, vec![("v100".into(), 2), ("k80".into(), 2)]);
        assert_eq!(n[0].features, "v100,nvlink");
        assert_eq!(gpu_types(&n), ["v100", "p100", "k80"]);
    }

    #[test]
    fn a_sized_cluster_has_eight_gpus_a_node_in_four_shapes() {
        let n = sized(256).unwrap();
        assert_eq!(n.len(), 256);
        assert_eq!(n.iter().map(NodeSpec::gpu_count).sum::<u32>(), 2048);
        assert_eq!(n[255].name, "n256");
        assert_eq!(n[3].features, "v100,k80");
        assert!(sized(0).is_err() && sized(257).is_err());
    }
}
