//! YARN-CS: Apache YARN's capacity scheduler as the Tiresias, Gavel and Hadar papers use it as
//! a baseline for GPU clusters.
//!
//! * **FIFO, strict head-of-line.** Waiting jobs are served in arrival order; the first one
//!   that cannot be placed blocks everyone behind it, even jobs that would fit.
//! * **Non-preemptive.** A job that started keeps its GPUs until it finishes.
//! * **Heterogeneity-agnostic.** It does not look at throughputs to choose a GPU type: among
//!   the types that can take the job right now it picks one at random (a generator seeded
//!   from [`crate::policies::PolicyOptions::seed`] and owned by the policy, so a run is
//!   reproducible). The only thing it knows about types is that a job cannot be started on a
//!   type where its rate is zero or missing.
//! * **Consolidated all-or-nothing.** All `N` GPUs of a job are of one type, packed on as few
//!   nodes as possible ([`pack_consolidated`]); otherwise the job does not start.
//!
//! A job that could not be consolidated even on the empty cluster (no type it can run on
//! has `N` GPUs) is refused rather than left to block the queue forever, as YARN rejects a
//! request above its maximum allocation; it waits with [`WaitReason::CannotRunAnywhere`].

use crate::capacity::FreeCapacity;
use crate::cluster::GpuType;
use crate::job::JobId;
use crate::placement::Placement;
use crate::plan::{Assignment, RoundPlan, WaitReason, Waiting};
use crate::policies::PolicyName;
use crate::policies::packing::{pack_consolidated, placement_in_cluster, usable_types};
use crate::policy::{Policy, RoundInput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The YARN capacity-scheduler baseline. See the module documentation.
#[derive(Debug)]
pub struct YarnCs {
    rng: SmallRng,
}

impl YarnCs {
    /// A YARN-CS policy whose random type choices are drawn from a generator seeded with
    /// `seed`.
    pub fn new(seed: u64) -> Self {
        YarnCs {
            rng: SmallRng::seed_from_u64(seed),
        }
    }
}

impl Policy for YarnCs {
    fn name(&self) -> &str {
        PolicyName::YarnCs.as_str()
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let cluster = input.cluster;
        let empty = FreeCapacity::of(cluster);
        let mut free = empty.clone();
        let mut plan = RoundPlan::default();

        // Non-preemptive: whoever ran last round keeps exactly its GPUs. A remembered placement
        // that no longer fits (a node left the cluster) sends the job back to the queue.
        let mut queue = Vec::new();
        for js in input.jobs {
            let kept = js.placement.as_ref().filter(|p| {
                placement_in_cluster(p, cluster)
                    && p.rate(&js.job.throughput, js.job.workers) > 0.0
                    && free.take_placement(p).is_ok()
            });
            match kept {
                Some(p) => plan.assignments.push(Assignment {
                    job: js.id(),
                    placement: p.clone(),
                    rate: p.rate(&js.job.throughput, js.job.workers),
                    payoff: None,
                }),
                None => queue.push(js),
            }
        }

        // Strict FIFO over the rest, in arrival order (the order the jobs come in).
        let mut head: Option<JobId> = None;
        for js in queue {
            let job = &js.job;
            // A consolidated placement exists on the empty cluster exactly when the type has
            // `N` GPUs in all (packing never fails for lack of shape, only of GPUs).
            let possible: Vec<GpuType> = usable_types(job, cluster)
                .into_iter()
                .filter(|&t| empty.free_of_type(t) >= job.workers)
                .collect();
            if possible.is_empty() {
                plan.waiting.push(Waiting {
                    job: js.id(),
                    reason: WaitReason::CannotRunAnywhere,
                });
                continue;
            }
            if let Some(h) = head {
                plan.waiting.push(Waiting {
                    job: js.id(),
                    reason: WaitReason::QueuedBehind { head: Some(h) },
                });
                continue;
            }
            let mut feasible: Vec<Placement> = possible
                .iter()
                .filter_map(|&t| pack_consolidated(&free, t, job.workers))
                .collect();
            let chosen = match feasible.len() {
                0 => None,
                1 => feasible.pop(),
                n => Some(feasible.swap_remove(self.rng.random_range(0..n))),
            };
            match chosen {
                Some(p) if free.take_placement(&p).is_ok() => {
                    let rate = p.rate(&job.throughput, job.workers);
                    plan.assignments.push(Assignment {
                        job: js.id(),
                        placement: p,
                        rate,
                        payoff: None,
                    });
                }
                _ => {
                    // The head waits for running jobs to release GPUs; it blocks the rest.
                    head = Some(js.id());
                    plan.waiting.push(Waiting {
                        job: js.id(),
                        reason: WaitReason::WaitingForRelease,
                    });
                }
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, NodeId};
    use crate::job::JobState;
    use crate::placement::Part;
    use crate::policies::fixtures::{fresh, job, running, ty};

    fn input<'a>(cluster: &'a Cluster, jobs: &'a [JobState]) -> RoundInput<'a> {
        RoundInput {
            now_s: 0.0,
            round_s: 360.0,
            restart_s: 0.0,
            cluster,
            jobs,
        }
    }

    fn reason(plan: &RoundPlan, id: u64) -> Option<&WaitReason> {
        plan.waiting
            .iter()
            .find(|w| w.job == JobId(id))
            .map(|w| &w.reason)
    }

    /// Two 4-GPU v100 nodes and one 4-GPU k80 node.
    fn cluster() -> Cluster {
        Cluster::from_type_counts(&[("v100".into(), 8), ("k80".into(), 4)], 4).unwrap()
    }

    #[test]
    fn head_of_line_blocks_later_jobs_that_would_fit() {
        let c = cluster();
        let v = |n: u32| {
            Placement::gang([Part {
                node: NodeId(n),
                gpu_type: ty(0),
                gpus: 4,
            }])
        };
        let k = Placement::gang([Part {
            node: NodeId(2),
            gpu_type: ty(1),
            gpus: 2,
        }]);
        let jobs = vec![
            running(job(1, 0.0, 4, 1e6, &[Some(1.0), Some(1.0)]), 2, v(0), 10.0),
            running(job(2, 1.0, 4, 1e6, &[Some(1.0), Some(1.0)]), 2, v(1), 10.0),
            running(job(3, 2.0, 2, 1e6, &[Some(1.0), Some(1.0)]), 2, k, 10.0),
            // Needs 4 GPUs of one type: only 2 k80 are free.
            fresh(job(4, 3.0, 4, 1e6, &[Some(1.0), Some(1.0)]), 2),
            // Would fit on the 2 free k80, but is behind job 4.
            fresh(job(5, 4.0, 1, 1e6, &[Some(1.0), Some(1.0)]), 2),
        ];
        let plan = YarnCs::new(7).plan(&input(&c, &jobs));
        plan.validate(&c, &jobs).unwrap();
        assert_eq!(plan.assignments.len(), 3);
        assert_eq!(reason(&plan, 4), Some(&WaitReason::WaitingForRelease));
        assert_eq!(
            reason(&plan, 5),
            Some(&WaitReason::QueuedBehind {
                head: Some(JobId(4))
            })
        );
    }

    #[test]
    fn running_jobs_keep_their_gpus() {
        let c = cluster();
        let p = Placement::gang([Part {
            node: NodeId(2),
            gpu_type: ty(1),
            gpus: 4,
        }]);
        // A job far slower on k80 keeps its k80s: YARN-CS does not migrate.
        let jobs = vec![running(
            job(1, 0.0, 4, 1e6, &[Some(10.0), Some(1.0)]),
            2,
            p.clone(),
            100.0,
        )];
        let plan = YarnCs::new(0).plan(&input(&c, &jobs));
        assert_eq!(plan.placement_of(JobId(1)), Some(&p));
        assert!(plan.waiting.is_empty());
    }

    #[test]
    fn consolidates_on_one_type_and_one_node() {
        let c = cluster();
        let jobs = vec![fresh(job(1, 0.0, 3, 1e6, &[Some(1.0), Some(1.0)]), 2)];
        for seed in 0..20 {
            let plan = YarnCs::new(seed).plan(&input(&c, &jobs));
            let p = plan.placement_of(JobId(1)).unwrap();
            assert_eq!(p.types().len(), 1);
            assert_eq!(p.nodes().len(), 1);
            assert_eq!(p.gpus(), 3);
        }
    }

    #[test]
    fn type_choice_ignores_speed_but_not_missing_rates() {
        let c = cluster();
        // 100x faster on v100 than on k80: an agnostic scheduler still lands on k80 sometimes.
        let jobs = vec![fresh(job(1, 0.0, 1, 1e6, &[Some(100.0), Some(1.0)]), 2)];
        let mut seen = [false; 2];
        for seed in 0..64 {
            let plan = YarnCs::new(seed).plan(&input(&c, &jobs));
            seen[plan.placement_of(JobId(1)).unwrap().types()[0].index()] = true;
        }
        assert_eq!(seen, [true, true]);
        // No k80 rate: never on k80.
        let jobs = vec![fresh(job(1, 0.0, 1, 1e6, &[Some(1.0), None]), 2)];
        for seed in 0..64 {
            let plan = YarnCs::new(seed).plan(&input(&c, &jobs));
            assert_eq!(plan.placement_of(JobId(1)).unwrap().types(), vec![ty(0)]);
        }
    }

    #[test]
    fn same_seed_same_plans() {
        let c = cluster();
        let jobs: Vec<JobState> = (0..6)
            .map(|i| {
                fresh(
                    job(
                        i,
                        i as f64,
                        1 + (i as u32 % 2),
                        1e6,
                        &[Some(2.0), Some(1.0)],
                    ),
                    2,
                )
            })
            .collect();
        let a = YarnCs::new(42).plan(&input(&c, &jobs));
        let b = YarnCs::new(42).plan(&input(&c, &jobs));
        assert_eq!(a, b);
    }

    #[test]
    fn impossible_jobs_do_not_block_the_queue() {
        let c = cluster();
        let jobs = vec![
            // 5 k80 do not exist, and it has no v100 rate.
            fresh(job(1, 0.0, 5, 1e6, &[None, Some(1.0)]), 2),
            fresh(job(2, 1.0, 1, 1e6, &[None, None]), 2),
            fresh(job(3, 2.0, 2, 1e6, &[Some(1.0), Some(1.0)]), 2),
        ];
        let plan = YarnCs::new(3).plan(&input(&c, &jobs));
        assert_eq!(reason(&plan, 1), Some(&WaitReason::CannotRunAnywhere));
        assert_eq!(reason(&plan, 2), Some(&WaitReason::CannotRunAnywhere));
        assert!(plan.placement_of(JobId(3)).is_some());
    }
}
