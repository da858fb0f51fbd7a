//! Placements: where a job's workers run in a round, and how fast that makes it go.
//!
//! A [`Placement`] is a list of [`Part`]s, each "`gpus` GPUs of one type on one node".
//! * A **gang** placement (Hadar and the baselines) runs one synchronous data-parallel job
//!   over all its parts; its GPU count equals the job's workers and it advances at the pace
//!   of its slowest worker: `min over types used of X[type][N]`.
//! * A **forked** placement (HadarE) runs one independent copy per part, each on its own
//!   node; the job advances by the sum of its copies' rates `X[type][gpus]`.

use crate::cluster::{GpuType, NodeId};
use crate::throughput::ThroughputProfile;
use serde::{Deserialize, Serialize};

/// `gpus` GPUs of type `gpu_type` on node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Part {
    /// The node.
    pub node: NodeId,
    /// The GPU type used there.
    pub gpu_type: GpuType,
    /// How many GPUs of that type.
    pub gpus: u32,
}

/// How the parts of a placement cooperate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKind {
    /// One synchronous job over all parts (all workers or none).
    Gang,
    /// Independent copies, one per part, whose progress is summed.
    Forked,
}

/// Where a job runs in a round.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placement {
    kind: PlacementKind,
    parts: Vec<Part>,
}

impl Placement {
    /// A gang placement over `parts`; parts on the same (node, type) are merged and empty
    /// parts dropped, so two placements of the same GPUs compare equal.
    pub fn gang(parts: impl IntoIterator<Item = Part>) -> Self {
        Placement {
            kind: PlacementKind::Gang,
            parts: normalise(parts),
        }
    }

    /// A forked placement: one copy per part (parts on the same node are kept separate so
    /// that a policy bug which puts two copies on one node is visible to validation).
    pub fn forked(parts: impl IntoIterator<Item = Part>) -> Self {
        let mut parts: Vec<Part> = parts.into_iter().filter(|p| p.gpus > 0).collect();
        parts.sort();
        Placement {
            kind: PlacementKind::Forked,
            parts,
        }
    }

    /// Gang or forked.
    pub fn kind(&self) -> PlacementKind {
        self.kind
    }

    /// The parts, sorted by node then type.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Total GPUs used.
    pub fn gpus(&self) -> u32 {
        self.parts.iter().map(|p| p.gpus).sum()
    }

    /// The distinct GPU types used, ascending.
    pub fn types(&self) -> Vec<GpuType> {
        let mut t: Vec<GpuType> = self.parts.iter().map(|p| p.gpu_type).collect();
        t.sort();
        t.dedup();
        t
    }

    /// The distinct nodes used, ascending.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut n: Vec<NodeId> = self.parts.iter().map(|p| p.node).collect();
        n.dedup();
        n
    }

    /// GPUs of type `t` used.
    pub fn gpus_of_type(&self, t: GpuType) -> u32 {
        self.parts
            .iter()
            .filter(|p| p.gpu_type == t)
            .map(|p| p.gpus)
            .sum()
    }

    /// Whether `other` uses the same GPU types, as many of each (wherever they are): for a
    /// gang, the same rate (over as many nodes, where its rates depend on the spread).
    pub fn same_gpus_per_type(&self, other: &Placement) -> bool {
        let types = self.types();
        types == other.types()
            && types
                .iter()
                .all(|t| self.gpus_of_type(*t) == other.gpus_of_type(*t))
    }

    /// True when the placement has no parts.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The job's steps/s under this placement.
    ///
    /// Gang: the job runs `workers` workers in lock-step, each at the per-worker pace of the
    /// slowest type used, so the rate is `min over used types of X[type][workers]`, taken at
    /// the number of nodes the placement spans where the job's rates depend on it
    /// ([`ThroughputProfile::rate_across`]); zero when any used type cannot run the job or
    /// the GPU count differs from `workers`.
    /// Forked: the sum over copies of `X[type][gpus]` (a copy that cannot run adds nothing).
    pub fn rate(&self, profile: &ThroughputProfile, workers: u32) -> f64 {
        match self.kind {
            PlacementKind::Gang => {
                if self.parts.is_empty() || self.gpus() != workers {
                    return 0.0;
                }
                let nodes = self.nodes().len() as u32;
                let mut rate = f64::INFINITY;
                for t in self.types() {
                    match profile.rate_across(t, workers, nodes) {
                        Some(r) => rate = rate.min(r),
                        None => return 0.0,
                    }
                }
                rate
            }
            PlacementKind::Forked => self
                .parts
                .iter()
                .map(|p| profile.rate_or_zero(p.gpu_type, p.gpus))
                .sum(),
        }
    }
}

fn normalise(parts: impl IntoIterator<Item = Part>) -> Vec<Part> {
    let mut parts: Vec<Part> = parts.into_iter().filter(|p| p.gpus > 0).collect();
    parts.sort();
    let mut out: Vec<Part> = Vec::with_capacity(parts.len());
    for p in parts {
        match out.last_mut() {
            Some(last) if last.node == p.node && last.gpu_type == p.gpu_type => last.gpus += p.gpus,
            _ => out.push(p),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::RateCurve;

    fn part(n: u32, t: u16, g: u32) -> Part {
        Part {
            node: NodeId(n),
            gpu_type: GpuType(t),
            gpus: g,
        }
    }

    #[test]
    fn the_same_gpus_per_type_anywhere_count_as_alike() {
        let a = Placement::gang([part(0, 0, 2), part(1, 1, 2)]);
        assert!(a.same_gpus_per_type(&Placement::gang([
            part(2, 0, 1),
            part(3, 0, 1),
            part(3, 1, 2)
        ])));
        assert!(!a.same_gpus_per_type(&Placement::gang([part(0, 0, 3), part(1, 1, 1)])));
        assert!(!a.same_gpus_per_type(&Placement::gang([part(0, 0, 4)])));
    }

    #[test]
    fn gang_rate_is_the_slowest_types() {
        let prof = ThroughputProfile::new(vec![
            RateCurve::new([(4, 40.0)]),
            RateCurve::new([(4, 10.0)]),
        ]);
        let mixed = Placement::gang([part(0, 0, 2), part(1, 1, 2)]);
        assert_eq!(mixed.rate(&prof, 4), 10.0);
        let fast = Placement::gang([part(0, 0, 4)]);
        assert_eq!(fast.rate(&prof, 4), 40.0);
        // Wrong size: no progress.
        assert_eq!(Placement::gang([part(0, 0, 3)]).rate(&prof, 4), 0.0);
    }

    #[test]
    fn gang_parts_merge_and_compare_equal() {
        let a = Placement::gang([part(1, 0, 1), part(0, 0, 1), part(1, 0, 1)]);
        let b = Placement::gang([part(0, 0, 1), part(1, 0, 2)]);
        assert_eq!(a, b);
        assert_eq!(a.gpus(), 3);
    }

    #[test]
    fn forked_rate_sums_copies() {
        let prof = ThroughputProfile::new(vec![
            RateCurve::new([(1, 5.0), (2, 9.0)]),
            RateCurve::new([(1, 2.0)]),
        ]);
        let f = Placement::forked([part(0, 0, 2), part(1, 1, 1), part(2, 1, 2)]);
        assert_eq!(f.rate(&prof, 4), 9.0 + 2.0 + 0.0);
    }
}
