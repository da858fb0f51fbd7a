//! Settling: a job that stays on its GPU types keeps its GPUs.
//!
//! The passes choose each job's GPU types, and with them its rate; which GPUs of a type a
//! job gets is chosen on the way, one job at a time. So a job that changes type (an urgent
//! job, a swap, work conservation) may land on the GPUs of a job that keeps its type, which
//! then moves to other GPUs of that same type and restarts for nothing. Once the plan is
//! made, this pass gives every such job its old GPUs back and finds the jobs that moved
//! anyway GPUs of the same types elsewhere, in the same shape (as many GPUs on each of as
//! many nodes) as they were given. Rates,
//! types and the GPUs used per type are unchanged; only restarts go. When the jobs that
//! move cannot all be placed again, the jobs whose old GPUs nobody else was given still go
//! back, and the rest of the plan stays as the passes made it. Pure: no clock, no IO.

use crate::capacity::FreeCapacity;
use crate::cluster::{Cluster, NodeId};
use crate::placement::{Part, Placement, PlacementKind};
use crate::plan::Assignment;

/// How each assignment stands against the job's placement in the round that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Where it ran: fixed.
    Kept,
    /// Moved to other GPUs of the same types in the same numbers, on no fewer nodes: its
    /// old GPUs would do as well.
    Shifted,
    /// New, resumed, or on other types: its GPUs may be any of those types.
    Moved,
}

/// Gives each shifted job its old GPUs back (see the module docs); `previous[i]` is where
/// the job of `assignments[i]` ran in the round that ended. Returns the assignments it
/// kept in place, by index.
pub(super) fn settle(
    cluster: &Cluster,
    assignments: &mut [Assignment],
    previous: &[Option<&Placement>],
) -> Vec<usize> {
    let standing: Vec<Standing> = assignments
        .iter()
        .zip(previous)
        .map(|(a, prev)| standing_of(&a.placement, *prev))
        .collect();
    if !standing.contains(&Standing::Shifted) {
        return Vec::new();
    }
    if let Some(placements) = all_back(cluster, assignments, previous, &standing) {
        let mut restored = Vec::new();
        for (i, ((a, p), prev)) in assignments
            .iter_mut()
            .zip(placements)
            .zip(previous)
            .enumerate()
        {
            if a.placement != p && Some(&p) == *prev {
                restored.push(i);
            }
            a.placement = p;
        }
        return restored;
    }
    back_where_free(cluster, assignments, previous, &standing)
}

fn standing_of(now: &Placement, previous: Option<&Placement>) -> Standing {
    let Some(prev) = previous else {
        return Standing::Moved;
    };
    if prev == now {
        return Standing::Kept;
    }
    let same_shape = now.kind() == PlacementKind::Gang
        && prev.kind() == PlacementKind::Gang
        && now.same_gpus_per_type(prev)
        && prev.nodes().len() <= now.nodes().len();
    if same_shape {
        Standing::Shifted
    } else {
        Standing::Moved
    }
}

/// Every shifted job on its old GPUs and every moved job placed again; `None` when some
/// moved job no longer fits in the shape it was given.
fn all_back(
    cluster: &Cluster,
    assignments: &[Assignment],
    previous: &[Option<&Placement>],
    standing: &[Standing],
) -> Option<Vec<Placement>> {
    let mut free = FreeCapacity::of(cluster);
    let mut out: Vec<Option<Placement>> = vec![None; assignments.len()];
    for (i, a) in assignments.iter().enumerate() {
        if standing[i] == Standing::Kept {
            free.take_placement(&a.placement).ok()?;
            out[i] = Some(a.placement.clone());
        }
    }
    for (i, prev) in previous.iter().enumerate() {
        if standing[i] == Standing::Shifted {
            let prev = prev.expect("a shifted job ran");
            if free.take_placement(prev).is_ok() {
                out[i] = Some(prev.clone());
            }
        }
    }
    let mut vacated = vec![false; free.node_count()];
    for (i, a) in assignments.iter().enumerate() {
        if standing[i] == Standing::Shifted && out[i].is_some() {
            for n in a.placement.nodes() {
                vacated[n.index()] = true;
            }
        }
    }
    // The rest, largest first: where the passes put them if still free, else elsewhere.
    let mut rest: Vec<usize> = (0..assignments.len())
        .filter(|&i| out[i].is_none())
        .collect();
    rest.sort_by_key(|&i| std::cmp::Reverse(assignments[i].placement.gpus()));
    for i in rest {
        let given = &assignments[i].placement;
        let placed = if free.take_placement(given).is_ok() {
            given.clone()
        } else {
            let again = same_shape_elsewhere(&free, given, &vacated)?;
            free.take_placement(&again).ok()?;
            again
        };
        out[i] = Some(placed);
    }
    out.into_iter().collect()
}

/// The same shape as `given` on other GPUs: for a gang of one type, as many GPUs of it on
/// each of as many nodes (so whatever rule `given` met on how a job spans nodes still
/// holds), taking first the nodes settled jobs left (`vacated`), then the others, each
/// group with the most free GPUs first. `None` for gangs over several types or when none
/// fits.
fn same_shape_elsewhere(
    free: &FreeCapacity,
    given: &Placement,
    vacated: &[bool],
) -> Option<Placement> {
    let [t] = given.types()[..] else {
        return None;
    };
    let mut nodes: Vec<(u32, NodeId)> = (0..free.node_count())
        .map(|n| NodeId(n as u32))
        .map(|n| (free.free(n, t), n))
        .filter(|(f, _)| *f > 0)
        .collect();
    // Nodes the settled jobs left first: where the plan had a job of this type anyway.
    nodes.sort_by(|a, b| {
        let (va, vb) = (vacated[a.1.index()], vacated[b.1.index()]);
        vb.cmp(&va).then(b.0.cmp(&a.0)).then(a.1.cmp(&b.1))
    });
    let mut sizes: Vec<u32> = given.parts().iter().map(|p| p.gpus).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut used = vec![false; nodes.len()];
    let mut parts = Vec::with_capacity(sizes.len());
    for gpus in sizes {
        let k = (0..nodes.len()).find(|&k| !used[k] && nodes[k].0 >= gpus)?;
        used[k] = true;
        parts.push(Part {
            node: nodes[k].1,
            gpu_type: t,
            gpus,
        });
    }
    Some(Placement::gang(parts))
}

/// The safe half: with every other job where the passes put it, each shifted job whose old
/// GPUs are still free goes back to them. Returns those that did, by index.
fn back_where_free(
    cluster: &Cluster,
    assignments: &mut [Assignment],
    previous: &[Option<&Placement>],
    standing: &[Standing],
) -> Vec<usize> {
    let mut free = FreeCapacity::of(cluster);
    for a in assignments.iter() {
        // The plan is valid, so its placements fit together.
        let _ = free.take_placement(&a.placement);
    }
    let mut restored = Vec::new();
    for (i, a) in assignments.iter_mut().enumerate() {
        if standing[i] != Standing::Shifted {
            continue;
        }
        let prev = previous[i].expect("a shifted job ran");
        free.give_placement(&a.placement);
        if free.take_placement(prev).is_ok() {
            a.placement = prev.clone();
            restored.push(i);
        } else {
            let _ = free.take_placement(&a.placement);
        }
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuType;
    use crate::job::JobId;
    use crate::policies::hadar::tests::cluster;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A gang over `(node, type, gpus)` parts.
    fn gang(parts: &[(u32, u16, u32)]) -> Placement {
        Placement::gang(parts.iter().map(|&(n, t, gpus)| Part {
            node: NodeId(n),
            gpu_type: GpuType(t),
            gpus,
        }))
    }

    fn assigned(job: u64, placement: Placement) -> Assignment {
        Assignment {
            job: JobId(job),
            placement,
            rate: 1.0,
            payoff: None,
        }
    }

    #[test]
    fn a_job_moved_within_its_type_gets_its_gpus_back_and_the_mover_takes_the_others() {
        // One GPU of type 0 on n0 and n1, one of type 1 on n2. Job 1 ran on n0; job 2 on
        // n2 changes to type 0 and was given n0, so job 1 was sent to n1.
        let c = cluster(&["a", "b"], &[&[1, 0], &[1, 0], &[0, 1]]);
        let (ran1, ran2) = (gang(&[(0, 0, 1)]), gang(&[(2, 1, 1)]));
        let mut plan = vec![
            assigned(1, gang(&[(1, 0, 1)])),
            assigned(2, gang(&[(0, 0, 1)])),
        ];
        assert_eq!(settle(&c, &mut plan, &[Some(&ran1), Some(&ran2)]), [0]);
        assert_eq!(plan[0].placement, ran1);
        assert_eq!(plan[1].placement, gang(&[(1, 0, 1)]));
    }

    #[test]
    fn a_gang_goes_back_to_its_node_and_a_new_gang_takes_the_node_it_leaves() {
        // Three 4-GPU nodes, two partly used by jobs that stay. Gang 1 ran on n0; the new
        // gang 2 was given n0, and gang 1 n1.
        let c = cluster(&["a"], &[&[4], &[4], &[4]]);
        let ran1 = gang(&[(0, 0, 4)]);
        let mut plan = vec![
            assigned(1, gang(&[(1, 0, 4)])),
            assigned(2, gang(&[(0, 0, 4)])),
        ];
        assert_eq!(settle(&c, &mut plan, &[Some(&ran1), None]), [0]);
        assert_eq!(plan[0].placement, ran1);
        assert_eq!(plan[1].placement, gang(&[(1, 0, 4)]));
    }

    #[test]
    fn where_a_mover_fits_nowhere_else_only_jobs_whose_gpus_are_free_go_back() {
        // n0 has two GPUs, n1-n3 one each. The new 2-worker job 3 was given n0, where job 1
        // ran: with job 1 back on n0 it would need two nodes, so it keeps n0 and job 1
        // stays on n1. Job 2's old GPU on n2 is free, so job 2 goes back there.
        let c = cluster(&["a"], &[&[2], &[1], &[1], &[1]]);
        let (ran1, ran2) = (gang(&[(0, 0, 1)]), gang(&[(2, 0, 1)]));
        let mut plan = vec![
            assigned(1, gang(&[(1, 0, 1)])),
            assigned(2, gang(&[(3, 0, 1)])),
            assigned(3, gang(&[(0, 0, 2)])),
        ];
        assert_eq!(
            settle(&c, &mut plan, &[Some(&ran1), Some(&ran2), None]),
            [1]
        );
        assert_eq!(plan[0].placement, gang(&[(1, 0, 1)]));
        assert_eq!(plan[1].placement, ran2);
        assert_eq!(plan[2].placement, gang(&[(0, 0, 2)]));
    }

    #[test]
    fn only_the_same_types_on_no_more_nodes_count_as_a_shift() {
        let now = gang(&[(0, 0, 2)]);
        assert_eq!(standing_of(&now, None), Standing::Moved);
        assert_eq!(standing_of(&now, Some(&now)), Standing::Kept);
        assert_eq!(
            standing_of(&now, Some(&gang(&[(1, 0, 2)]))),
            Standing::Shifted
        );
        // Another type, or the same GPUs over more nodes than it is given now.
        assert_eq!(
            standing_of(&now, Some(&gang(&[(1, 1, 2)]))),
            Standing::Moved
        );
        let spread = gang(&[(1, 0, 1), (2, 0, 1)]);
        assert_eq!(standing_of(&now, Some(&spread)), Standing::Moved);
        assert_eq!(standing_of(&spread, Some(&now)), Standing::Shifted);
        let forked = Placement::forked([Part {
            node: NodeId(1),
            gpu_type: GpuType(0),
            gpus: 2,
        }]);
        assert_eq!(standing_of(&now, Some(&forked)), Standing::Moved);
    }

    /// Random gangs placed one after another in what `free` has left: each of `jobs` gets a
    /// random type and random nodes, or nothing when it does not fit.
    fn random_layout(
        rng: &mut SmallRng,
        c: &Cluster,
        workers: &[u32],
        keep: &[Option<Placement>],
    ) -> Vec<Option<Placement>> {
        let mut free = FreeCapacity::of(c);
        let mut out = vec![None; workers.len()];
        for (i, k) in keep.iter().enumerate() {
            if let Some(p) = k
                && free.take_placement(p).is_ok()
            {
                out[i] = Some(p.clone());
            }
        }
        for (i, &w) in workers.iter().enumerate() {
            if out[i].is_some() || rng.random_bool(0.2) {
                continue;
            }
            let t = GpuType(rng.random_range(0..c.type_count()) as u16);
            let mut nodes: Vec<usize> = (0..c.nodes().len()).collect();
            nodes.sort_by_key(|_| rng.random::<u32>());
            let mut parts = Vec::new();
            let mut left = w;
            for n in nodes {
                let take = free.free(NodeId(n as u32), t).min(left);
                if take > 0 {
                    parts.push((n as u32, t.0, take));
                    left -= take;
                }
            }
            if left == 0 {
                let p = gang(&parts);
                free.take_placement(&p).unwrap();
                out[i] = Some(p);
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Settling keeps every job on the same GPU counts per type, on no more nodes (and a
        /// job not sent back in its shape), keeps the plan within capacity, and never leaves
        /// fewer jobs where they ran.
        #[test]
        fn settling_keeps_types_and_capacity_and_never_moves_more_jobs(seed in any::<u64>()) {
            let mut rng = SmallRng::seed_from_u64(seed);
            let types = rng.random_range(1..3);
            let mut nodes: Vec<Vec<u32>> = (0..rng.random_range(1..6))
                .map(|_| (0..types).map(|_| rng.random_range(0..5)).collect())
                .collect();
            nodes[0][0] += 1;
            let rows: Vec<&[u32]> = nodes.iter().map(Vec::as_slice).collect();
            let c = cluster(&["a", "b"][..types], &rows);
            let workers: Vec<u32> = (0..rng.random_range(1..10)).map(|_| rng.random_range(1..5)).collect();
            let ran = random_layout(&mut rng, &c, &workers, &vec![None; workers.len()]);
            // The next plan keeps some jobs where they ran and places the rest anew.
            let kept: Vec<Option<Placement>> = ran
                .iter()
                .map(|p| p.clone().filter(|_| rng.random_bool(0.4)))
                .collect();
            let next = random_layout(&mut rng, &c, &workers, &kept);
            let (mut plan, previous): (Vec<Assignment>, Vec<Option<&Placement>>) = next
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.clone().map(|p| (assigned(i as u64, p), ran[i].as_ref())))
                .unzip();
            let before = plan.clone();
            let at_home = |plan: &[Assignment]| {
                plan.iter().zip(&previous).filter(|(a, p)| Some(&a.placement) == **p).count()
            };
            let restored = settle(&c, &mut plan, &previous);
            prop_assert_eq!(at_home(&plan), at_home(&before) + restored.len());
            for &i in &restored {
                prop_assert_eq!(Some(&plan[i].placement), previous[i]);
                prop_assert!(Some(&before[i].placement) != previous[i]);
            }
            let mut free = FreeCapacity::of(&c);
            for (a, b) in plan.iter().zip(&before) {
                prop_assert!(free.take_placement(&a.placement).is_ok(), "{:?}", plan);
                prop_assert_eq!(a.placement.types(), b.placement.types());
                for t in a.placement.types() {
                    prop_assert_eq!(a.placement.gpus_of_type(t), b.placement.gpus_of_type(t));
                }
                prop_assert!(a.placement.nodes().len() <= b.placement.nodes().len());
            }
            // A job not sent back has the shape it was given: as many GPUs on each node.
            let shape = |p: &Placement| {
                let mut v: Vec<u32> = p.parts().iter().map(|q| q.gpus).collect();
                v.sort_unstable();
                v
            };
            for (i, (a, b)) in plan.iter().zip(&before).enumerate() {
                if !restored.contains(&i) {
                    prop_assert_eq!(shape(&a.placement), shape(&b.placement));
                }
            }
        }
    }
}
