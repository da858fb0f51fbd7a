//! The cluster model: nodes holding GPUs of one or more types.
//!
//! GPU types are interned as small indices ([`GpuType`]) into the cluster's type list, so that
//! per-type tables are plain vectors. The order of types is the order in which they were
//! declared; nothing in the core depends on it except output order.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A GPU type, as an index into [`Cluster::type_names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuType(pub u16);

impl GpuType {
    /// The index of this type in per-type vectors.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A node, as an index into [`Cluster::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index of this node in [`Cluster::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One machine: a name and how many GPUs of each type it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The node's name (Slurm's `NodeName`).
    pub name: String,
    /// GPUs per type, indexed by [`GpuType::index`]; as long as the cluster's type list.
    pub gpus: Vec<u32>,
}

/// Why a cluster description was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClusterError {
    /// The cluster has no GPU at all.
    #[error("the cluster has no GPUs")]
    NoGpus,
    /// The cluster has no GPU type.
    #[error("the cluster declares no GPU type")]
    NoTypes,
    /// Two nodes share a name.
    #[error("node name `{0}` appears more than once")]
    DuplicateNode(String),
    /// Two types share a name.
    #[error("GPU type `{0}` appears more than once")]
    DuplicateType(String),
    /// A node's per-type vector does not match the type list.
    #[error("node `{node}` lists {got} GPU counts but the cluster has {expected} types")]
    TypeCountMismatch {
        /// The node's name.
        node: String,
        /// Number of counts the node gave.
        got: usize,
        /// Number of types in the cluster.
        expected: usize,
    },
    /// More types than the index can hold.
    #[error("too many GPU types ({0}); at most 65535 are supported")]
    TooManyTypes(usize),
}

/// An immutable snapshot of the cluster's machines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    type_names: Vec<String>,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Builds a cluster, checking that names are unique, every node lists a count per type,
    /// and that there is at least one GPU. Nodes with no GPUs are kept (a drained node is
    /// still a node) but the cluster as a whole must have GPUs.
    pub fn new(type_names: Vec<String>, nodes: Vec<Node>) -> Result<Self, ClusterError> {
        if type_names.is_empty() {
            return Err(ClusterError::NoTypes);
        }
        if type_names.len() > u16::MAX as usize {
            return Err(ClusterError::TooManyTypes(type_names.len()));
        }
        let mut seen = std::collections::HashSet::new();
        for t in &type_names {
            if !seen.insert(t.as_str()) {
                return Err(ClusterError::DuplicateType(t.clone()));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for n in &nodes {
            if !seen.insert(n.name.as_str()) {
                return Err(ClusterError::DuplicateNode(n.name.clone()));
            }
            if n.gpus.len() != type_names.len() {
                return Err(ClusterError::TypeCountMismatch {
                    node: n.name.clone(),
                    got: n.gpus.len(),
                    expected: type_names.len(),
                });
            }
        }
        let cluster = Cluster { type_names, nodes };
        if cluster.total_gpus() == 0 {
            return Err(ClusterError::NoGpus);
        }
        Ok(cluster)
    }

    /// Builds the common homogeneous-node layout: for each `(type, count)`, `count / per_node`
    /// nodes of `per_node` GPUs (plus one smaller node for a remainder), named `<type>-<i>`.
    pub fn from_type_counts(counts: &[(String, u32)], per_node: u32) -> Result<Self, ClusterError> {
        let per_node = per_node.max(1);
        let type_names: Vec<String> = counts.iter().map(|(t, _)| t.clone()).collect();
        let mut nodes = Vec::new();
        for (ti, (name, count)) in counts.iter().enumerate() {
            let mut left = *count;
            let mut i = 0;
            while left > 0 {
                let here = left.min(per_node);
                let mut gpus = vec![0; counts.len()];
                gpus[ti] = here;
                nodes.push(Node {
                    name: format!("{name}-{i}"),
                    gpus,
                });
                left -= here;
                i += 1;
            }
        }
        Cluster::new(type_names, nodes)
    }

    /// The GPU type names, indexed by [`GpuType::index`].
    pub fn type_names(&self) -> &[String] {
        &self.type_names
    }

    /// The name of one GPU type.
    pub fn type_name(&self, t: GpuType) -> &str {
        &self.type_names[t.index()]
    }

    /// Looks a GPU type up by name (case-insensitive, as Slurm GRES types are matched).
    pub fn type_by_name(&self, name: &str) -> Option<GpuType> {
        self.type_names
            .iter()
            .position(|t| t.eq_ignore_ascii_case(name))
            .map(|i| GpuType(i as u16))
    }

    /// All GPU types, in declaration order.
    pub fn types(&self) -> impl ExactSizeIterator<Item = GpuType> + Clone + use<> {
        (0..self.type_names.len() as u16).map(GpuType)
    }

    /// Number of GPU types.
    pub fn type_count(&self) -> usize {
        self.type_names.len()
    }

    /// The nodes, indexed by [`NodeId::index`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// All node ids, in order.
    pub fn node_ids(&self) -> impl ExactSizeIterator<Item = NodeId> + Clone + use<> {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// Looks a node up by name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .map(|i| NodeId(i as u32))
    }

    /// GPUs of type `t` on node `n`.
    pub fn capacity(&self, n: NodeId, t: GpuType) -> u32 {
        self.nodes[n.index()].gpus[t.index()]
    }

    /// GPUs of type `t` in the whole cluster.
    pub fn total_of_type(&self, t: GpuType) -> u32 {
        self.nodes.iter().map(|n| n.gpus[t.index()]).sum()
    }

    /// GPUs of each type in the whole cluster, indexed by type.
    pub fn gpus_by_type(&self) -> Vec<u32> {
        self.types().map(|t| self.total_of_type(t)).collect()
    }

    /// All GPUs in the cluster.
    pub fn total_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus.iter().sum::<u32>()).sum()
    }

    /// The largest number of GPUs of type `t` on any single node.
    pub fn max_per_node(&self, t: GpuType) -> u32 {
        self.nodes
            .iter()
            .map(|n| n.gpus[t.index()])
            .max()
            .unwrap_or(0)
    }
}

impl fmt::Display for Cluster {
    /// A one-line summary such as `3 nodes: v100:4 p100:4 k80:4`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} nodes:", self.nodes.len())?;
        for t in self.types() {
            write!(f, " {}:{}", self.type_name(t), self.total_of_type(t))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_counts_split_into_nodes() {
        let c = Cluster::from_type_counts(&[("v100".into(), 6), ("k80".into(), 4)], 4).unwrap();
        assert_eq!(c.nodes().len(), 3);
        assert_eq!(c.total_of_type(GpuType(0)), 6);
        assert_eq!(c.total_of_type(GpuType(1)), 4);
        assert_eq!(c.node(NodeId(1)).gpus, vec![2, 0]);
        assert_eq!(c.type_by_name("V100"), Some(GpuType(0)));
    }

    #[test]
    fn empty_cluster_is_refused() {
        assert_eq!(
            Cluster::from_type_counts(&[("v100".into(), 0)], 4),
            Err(ClusterError::NoGpus)
        );
        assert_eq!(Cluster::new(vec![], vec![]), Err(ClusterError::NoTypes));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let n = |name: &str| Node {
            name: name.into(),
            gpus: vec![1],
        };
        assert_eq!(
            Cluster::new(vec!["a".into()], vec![n("x"), n("x")]),
            Err(ClusterError::DuplicateNode("x".into()))
        );
    }
}
