//! A ledger of free GPUs per (node, type), which policies draw from while building a plan.
//!
//! Every policy builds its plan by taking parts from a `FreeCapacity` that starts as the
//! cluster's capacity, so "no placement exceeds capacity" holds by construction;
//! [`crate::plan::RoundPlan::validate`] checks it again independently.

use crate::cluster::{Cluster, GpuType, NodeId};
use crate::placement::{Part, Placement};

/// Free GPUs per (node, type) and per type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeCapacity {
    types: usize,
    free: Vec<u32>,
    free_by_type: Vec<u32>,
}

/// A request for more GPUs than are free.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("node {node:?} has {free} free GPUs of type {gpu_type:?}, {wanted} were asked for")]
pub struct Overcommit {
    /// The node.
    pub node: NodeId,
    /// The type.
    pub gpu_type: GpuType,
    /// GPUs asked for.
    pub wanted: u32,
    /// GPUs free.
    pub free: u32,
}

impl FreeCapacity {
    /// Everything free.
    pub fn of(cluster: &Cluster) -> Self {
        let types = cluster.type_count();
        let mut free = Vec::with_capacity(cluster.nodes().len() * types);
        for n in cluster.nodes() {
            free.extend_from_slice(&n.gpus);
        }
        let free_by_type = cluster.gpus_by_type();
        FreeCapacity {
            types,
            free,
            free_by_type,
        }
    }

    /// Free GPUs of type `t` on node `n`.
    pub fn free(&self, n: NodeId, t: GpuType) -> u32 {
        self.free[n.index() * self.types + t.index()]
    }

    /// Free GPUs of type `t` in the cluster.
    pub fn free_of_type(&self, t: GpuType) -> u32 {
        self.free_by_type[t.index()]
    }

    /// Free GPUs of all types.
    pub fn free_total(&self) -> u32 {
        self.free_by_type.iter().sum()
    }

    /// Free GPUs on node `n`, all types.
    pub fn free_on_node(&self, n: NodeId) -> u32 {
        let i = n.index() * self.types;
        self.free[i..i + self.types].iter().sum()
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.free.len().checked_div(self.types).unwrap_or(0)
    }

    /// Takes one part, or fails without changing anything.
    pub fn take(&mut self, p: Part) -> Result<(), Overcommit> {
        let i = p.node.index() * self.types + p.gpu_type.index();
        let free = self.free.get(i).copied().unwrap_or(0);
        if p.gpus > free {
            return Err(Overcommit {
                node: p.node,
                gpu_type: p.gpu_type,
                wanted: p.gpus,
                free,
            });
        }
        self.free[i] -= p.gpus;
        self.free_by_type[p.gpu_type.index()] -= p.gpus;
        Ok(())
    }

    /// Takes every part of a placement, or nothing at all.
    pub fn take_placement(&mut self, placement: &Placement) -> Result<(), Overcommit> {
        for (k, p) in placement.parts().iter().enumerate() {
            if let Err(e) = self.take(*p) {
                for q in &placement.parts()[..k] {
                    self.give(*q);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// True when every part of `placement` is free right now.
    pub fn fits(&self, placement: &Placement) -> bool {
        let mut probe = self.clone();
        probe.take_placement(placement).is_ok()
    }

    /// Returns a part to the ledger.
    pub fn give(&mut self, p: Part) {
        let i = p.node.index() * self.types + p.gpu_type.index();
        self.free[i] += p.gpus;
        self.free_by_type[p.gpu_type.index()] += p.gpus;
    }

    /// Returns every part of a placement.
    pub fn give_placement(&mut self, placement: &Placement) {
        for p in placement.parts() {
            self.give(*p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_is_all_or_nothing() {
        let c = Cluster::from_type_counts(&[("v100".into(), 2), ("k80".into(), 2)], 2).unwrap();
        let mut cap = FreeCapacity::of(&c);
        let too_big = Placement::gang([
            Part {
                node: NodeId(0),
                gpu_type: GpuType(0),
                gpus: 2,
            },
            Part {
                node: NodeId(1),
                gpu_type: GpuType(1),
                gpus: 3,
            },
        ]);
        assert!(cap.take_placement(&too_big).is_err());
        assert_eq!(cap.free_total(), 4);
        let ok = Placement::gang([Part {
            node: NodeId(1),
            gpu_type: GpuType(1),
            gpus: 2,
        }]);
        cap.take_placement(&ok).unwrap();
        assert_eq!(cap.free_of_type(GpuType(1)), 0);
        assert_eq!(cap.free(NodeId(0), GpuType(0)), 2);
    }
}
