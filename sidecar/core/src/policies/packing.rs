//! Placement helpers the policies share: packing a gang onto free GPUs, the types a job can
//! use, and why a job that found no GPUs is left waiting.
//!
//! All functions only read a [`FreeCapacity`]; the caller takes the returned placement from
//! its ledger, so a policy decides itself what is free (for example, "free and not held by a
//! running job of lower priority").

use crate::capacity::FreeCapacity;
use crate::cluster::{Cluster, GpuType, NodeId};
use crate::job::Job;
use crate::placement::{Part, Placement};
use crate::plan::WaitReason;

/// Picks nodes for `gpus` GPUs from `(node, available)` pairs: as few nodes as possible, and
/// the last node chosen best-fit.
///
/// The `k` nodes with the most available GPUs are the fewest that can hold the request, so the
/// first `k - 1` are taken whole from the top of that order; the remainder then goes to the
/// node with the *fewest* available GPUs that still holds it (best fit), which keeps larger
/// holes free for later multi-GPU jobs. With a single-node fit this is plain best fit: the
/// smallest node that holds the whole request. Ties go to the lower node id, so the result is
/// deterministic. Returns `(node, gpus taken)` or `None` when the nodes hold fewer than
/// `gpus` in total.
fn fewest_nodes_best_fit(mut avail: Vec<(NodeId, u32)>, gpus: u32) -> Option<Vec<(NodeId, u32)>> {
    avail.retain(|&(_, a)| a > 0);
    let total: u64 = avail.iter().map(|&(_, a)| u64::from(a)).sum();
    if gpus == 0 || total < u64::from(gpus) {
        return None;
    }
    // Most available first, ties by node id.
    avail.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen = Vec::new();
    let mut left = gpus;
    let mut i = 0;
    // Take whole nodes while the next one cannot finish the request by itself.
    while i < avail.len() && avail[i].1 < left {
        chosen.push(avail[i]);
        left -= avail[i].1;
        i += 1;
    }
    // Some node at index >= i holds `left`; pick the tightest, lowest id on ties.
    let last = avail[i..]
        .iter()
        .filter(|&&(_, a)| a >= left)
        .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        .copied()?;
    chosen.push((last.0, left));
    Some(chosen)
}

/// A consolidated gang placement: `gpus` GPUs, all of type `gpu_type`, on as few nodes as
/// possible, the last node chosen best-fit (the node with the fewest free GPUs of that type
/// that holds the remainder), as Slurm's `cons_tres` and YARN's capacity scheduler tend to
/// place. `None` when fewer than `gpus` GPUs of that type are free.
pub fn pack_consolidated(free: &FreeCapacity, gpu_type: GpuType, gpus: u32) -> Option<Placement> {
    if free.free_of_type(gpu_type) < gpus {
        return None;
    }
    let avail = (0..free.node_count() as u32)
        .map(NodeId)
        .map(|n| (n, free.free(n, gpu_type)))
        .collect();
    let nodes = fewest_nodes_best_fit(avail, gpus)?;
    Some(Placement::gang(nodes.into_iter().map(|(node, gpus)| {
        Part {
            node,
            gpu_type,
            gpus,
        }
    })))
}

/// A gang placement of `gpus` GPUs drawn from any of `types`, mixing types if need be, on as
/// few nodes as possible (last node best-fit). This is how a heterogeneity-agnostic scheduler
/// sees the cluster when it cannot consolidate on one type: GPUs are GPUs. Within a node,
/// types are taken in the order given. `None` when fewer than `gpus` such GPUs are free.
///
/// The caller passes only types the job can run on: a gang advances at the pace of its
/// slowest type, and a type without throughput would stop it entirely.
pub fn pack_any_types(free: &FreeCapacity, types: &[GpuType], gpus: u32) -> Option<Placement> {
    let avail = (0..free.node_count() as u32)
        .map(NodeId)
        .map(|n| (n, types.iter().map(|&t| free.free(n, t)).sum()))
        .collect();
    let nodes = fewest_nodes_best_fit(avail, gpus)?;
    let mut parts = Vec::new();
    for (node, mut left) in nodes {
        for &t in types {
            let here = free.free(node, t).min(left);
            if here > 0 {
                parts.push(Part {
                    node,
                    gpu_type: t,
                    gpus: here,
                });
                left -= here;
            }
        }
    }
    Some(Placement::gang(parts))
}

/// The types on which `job` can run with all its workers (a positive rate for `workers`
/// GPUs of that type), in the cluster's declaration order.
pub fn usable_types(job: &Job, cluster: &Cluster) -> Vec<GpuType> {
    cluster
        .types()
        .filter(|&t| job.rate_on(t).is_some())
        .collect()
}

/// Free GPUs, summed over `types`.
pub fn free_of_types(free: &FreeCapacity, types: &[GpuType]) -> u32 {
    types.iter().map(|&t| free.free_of_type(t)).sum()
}

/// Why `job` found no placement in `free`: it can run on no type of the cluster at all; the
/// free GPUs would be enough but are of types it cannot use; or there are simply not enough
/// free GPUs (or not in a shape the policy accepts).
pub fn unplaced_reason(job: &Job, cluster: &Cluster, free: &FreeCapacity) -> WaitReason {
    let usable = usable_types(job, cluster);
    if usable.is_empty() {
        WaitReason::CannotRunAnywhere
    } else if free_of_types(free, &usable) < job.workers && free.free_total() >= job.workers {
        WaitReason::NoThroughputOnFreeTypes
    } else {
        WaitReason::DoesNotFit
    }
}

/// True when every part of `placement` lies inside the cluster (node and type indices exist);
/// a placement remembered from an earlier round may not, if nodes were drained since.
pub fn placement_in_cluster(placement: &Placement, cluster: &Cluster) -> bool {
    placement.parts().iter().all(|p| {
        p.node.index() < cluster.nodes().len() && p.gpu_type.index() < cluster.type_count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Node;
    use crate::policies::fixtures::job;

    fn part(n: u32, t: u16, g: u32) -> Part {
        Part {
            node: NodeId(n),
            gpu_type: GpuType(t),
            gpus: g,
        }
    }

    /// Nodes with 4, 2, 3 and 1 GPUs of one type.
    fn uneven() -> Cluster {
        let n = |name: &str, g: u32| Node {
            name: name.into(),
            gpus: vec![g],
        };
        Cluster::new(
            vec!["v100".into()],
            vec![n("a", 4), n("b", 2), n("c", 3), n("d", 1)],
        )
        .unwrap()
    }

    #[test]
    fn single_node_fit_is_best_fit() {
        let free = FreeCapacity::of(&uneven());
        // 2 GPUs fit on a (4), b (2) and c (3): the tightest is b.
        assert_eq!(
            pack_consolidated(&free, GpuType(0), 2),
            Some(Placement::gang([part(1, 0, 2)]))
        );
        // 3 GPUs: a or c; c is tighter.
        assert_eq!(
            pack_consolidated(&free, GpuType(0), 3),
            Some(Placement::gang([part(2, 0, 3)]))
        );
        // 1 GPU: d.
        assert_eq!(
            pack_consolidated(&free, GpuType(0), 1),
            Some(Placement::gang([part(3, 0, 1)]))
        );
    }

    #[test]
    fn multi_node_uses_fewest_nodes_then_best_fit() {
        let free = FreeCapacity::of(&uneven());
        // 6 GPUs: a (4) then 2 more; b (2) is the tightest node that holds 2.
        let p = pack_consolidated(&free, GpuType(0), 6).unwrap();
        assert_eq!(p, Placement::gang([part(0, 0, 4), part(1, 0, 2)]));
        // 8 GPUs need a, c and one more: the last 1 goes to d (tightest).
        let p = pack_consolidated(&free, GpuType(0), 8).unwrap();
        assert_eq!(
            p,
            Placement::gang([part(0, 0, 4), part(2, 0, 3), part(3, 0, 1)])
        );
        assert_eq!(p.nodes().len(), 3);
        // 11 is more than exist.
        assert_eq!(pack_consolidated(&free, GpuType(0), 11), None);
        assert_eq!(
            pack_consolidated(&free, GpuType(0), 10).map(|p| p.gpus()),
            Some(10)
        );
    }

    #[test]
    fn consolidated_respects_what_is_taken() {
        let c = uneven();
        let mut free = FreeCapacity::of(&c);
        free.take(part(0, 0, 3)).unwrap();
        free.take(part(2, 0, 3)).unwrap();
        // Left: a 1, b 2, c 0, d 1 -> 4 GPUs on three nodes.
        let p = pack_consolidated(&free, GpuType(0), 4).unwrap();
        assert_eq!(p.gpus(), 4);
        assert!(free.fits(&p));
        assert_eq!(pack_consolidated(&free, GpuType(0), 5), None);
    }

    #[test]
    fn any_types_mixes_only_the_given_types() {
        let c = Cluster::new(
            vec!["v100".into(), "k80".into(), "p100".into()],
            vec![
                Node {
                    name: "x".into(),
                    gpus: vec![1, 1, 4],
                },
                Node {
                    name: "y".into(),
                    gpus: vec![0, 2, 0],
                },
            ],
        )
        .unwrap();
        let free = FreeCapacity::of(&c);
        // v100 + k80 only: x has 2, y has 2; 3 GPUs need both nodes.
        let p = pack_any_types(&free, &[GpuType(0), GpuType(1)], 3).unwrap();
        assert_eq!(p.gpus(), 3);
        assert_eq!(p.gpus_of_type(GpuType(2)), 0);
        assert!(free.fits(&p));
        assert_eq!(pack_any_types(&free, &[GpuType(0), GpuType(1)], 5), None);
    }

    #[test]
    fn reasons_distinguish_types_from_shortage() {
        let c = Cluster::from_type_counts(&[("v100".into(), 2), ("k80".into(), 2)], 1).unwrap();
        let mut free = FreeCapacity::of(&c);
        let v100_only = job(1, 0.0, 2, 100.0, &[Some(1.0), None]);
        let nowhere = job(2, 0.0, 2, 100.0, &[None, None]);
        assert_eq!(
            unplaced_reason(&nowhere, &c, &free),
            WaitReason::CannotRunAnywhere
        );
        free.take(part(0, 0, 1)).unwrap();
        // One v100 and two k80 free: enough GPUs, but not of a type the job can use.
        assert_eq!(
            unplaced_reason(&v100_only, &c, &free),
            WaitReason::NoThroughputOnFreeTypes
        );
        free.take(part(2, 1, 1)).unwrap();
        free.take(part(3, 1, 1)).unwrap();
        // One GPU left in all: a plain shortage.
        assert_eq!(
            unplaced_reason(&v100_only, &c, &free),
            WaitReason::DoesNotFit
        );
        assert_eq!(usable_types(&v100_only, &c), vec![GpuType(0)]);
    }
}
