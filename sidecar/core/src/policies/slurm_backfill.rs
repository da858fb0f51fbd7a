//! `slurm`: a GPU cluster run by Slurm as it is used today, the baseline Hadar must beat on
//! the clusters it targets.
//!
//! * **Fixed type per job.** Each job asks for one GPU type, the one it runs fastest on with
//!   its `N` workers (the highest `X[type][N]`), as a user who knows their model would write
//!   `--gres=gpu:v100:N`. It never runs on another type, even when that type sits idle.
//! * **FIFO priority with conservative backfill** (Slurm's `sched/backfill`): jobs are taken in
//!   arrival order, and each gets the earliest start at which its GPUs are free for its whole
//!   run without touching any GPU held by a running job or reserved for a job ahead of it.
//!   A job whose earliest start is now starts now; so a later job starts before an earlier
//!   one only when it does not delay the earlier one's reserved start.
//! * **Non-preemptive.** A started job keeps its GPUs until it finishes.
//! * **Best-fit nodes.** Among the nodes that can take it, a job goes to the one with the
//!   fewest free GPUs of its type that still hold it; a job larger than any node uses as few
//!   nodes as possible ([`pack_consolidated`]), as `select/cons_tres` tends to.
//!
//! **Time limits are optimistic.** Backfill needs each job's time limit to plan reservations.
//! Here every job's limit is its true remaining run time on its type, `remaining_steps /
//! rate`, so reservations are exact and backfill is as good as it can be. Real users ask for
//! generous limits and jobs end early, which makes real Slurm backfill less effective than
//! this baseline.

use crate::capacity::FreeCapacity;
use crate::cluster::{Cluster, GpuType, NodeId};
use crate::job::{JobId, JobState};
use crate::placement::{Part, Placement};
use crate::plan::{Assignment, RoundPlan, WaitReason, Waiting};
use crate::policies::PolicyName;
use crate::policies::packing::{pack_consolidated, placement_in_cluster};
use crate::policy::{Policy, RoundInput};

/// The Slurm baseline: fixed fastest type, FIFO with conservative backfill. See the module
/// documentation.
#[derive(Debug, Default)]
pub struct SlurmBackfill;

impl SlurmBackfill {
    /// A Slurm baseline policy (it keeps no state between rounds).
    pub fn new() -> Self {
        SlurmBackfill
    }
}

/// The type a job asks Slurm for, with the rate it gets there: the fastest with all its
/// workers among the types of which the cluster has at least that many GPUs (a user does not
/// ask for a configuration Slurm would reject at submission), ties to the earlier type.
/// `None` when no such type exists.
pub fn requested_type(js: &JobState, cluster: &Cluster) -> Option<(GpuType, f64)> {
    let mut best: Option<(GpuType, f64)> = None;
    for t in cluster
        .types()
        .filter(|&t| cluster.total_of_type(t) >= js.job.workers)
    {
        if let Some(r) = js.job.rate_on(t)
            && best.is_none_or(|(_, b)| r > b)
        {
            best = Some((t, r));
        }
    }
    best
}

/// Free GPUs over time: segment `i` holds what is free from `starts[i]` until `starts[i + 1]`
/// (the last one forever).
struct Profile {
    starts: Vec<f64>,
    free: Vec<FreeCapacity>,
}

impl Profile {
    /// The profile from `now`: `free_now` free at once, and each `(end, placement)` handed back
    /// at `end`.
    fn new(now: f64, free_now: FreeCapacity, mut releases: Vec<(f64, Placement)>) -> Self {
        releases.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut profile = Profile {
            starts: vec![now],
            free: vec![free_now],
        };
        for (end, p) in releases {
            let mut next = profile.free[profile.free.len() - 1].clone();
            next.give_placement(&p);
            if end <= profile.starts[profile.starts.len() - 1] {
                let last = profile.free.len() - 1;
                profile.free[last] = next;
            } else {
                profile.starts.push(end);
                profile.free.push(next);
            }
        }
        profile
    }

    /// Makes `t` a segment boundary (if it is after the first start) and returns the index of
    /// the segment starting at `t`.
    fn split_at(&mut self, t: f64) -> usize {
        let i = self.starts.partition_point(|&s| s <= t) - 1;
        if self.starts[i] == t {
            return i;
        }
        self.starts.insert(i + 1, t);
        let copy = self.free[i].clone();
        self.free.insert(i + 1, copy);
        i + 1
    }

    /// The segments that overlap `[self.starts[first], end)`: at least `first` itself.
    fn window_end(&self, first: usize, end: f64) -> usize {
        let mut last = first;
        while last + 1 < self.starts.len() && self.starts[last + 1] < end {
            last += 1;
        }
        last
    }

    /// The earliest segment start at which `gpus` GPUs of type `t` stay free for `duration`
    /// seconds, with the best-fit placement there. The last segment has every reservation
    /// handed back, so a request the cluster can hold at all always gets an answer.
    fn earliest(&self, t: GpuType, gpus: u32, duration: f64) -> Option<(usize, Placement)> {
        let mut first = 0;
        while first < self.starts.len() {
            if self.free[first].free_of_type(t) < gpus {
                first += 1;
                continue;
            }
            // Walk the window; a segment short of GPUs of type t also blocks every start
            // before it whose window reaches it, so the search resumes right after it.
            let end = self.starts[first] + duration;
            let mut last = first;
            let mut blocked = None;
            while last + 1 < self.starts.len() && self.starts[last + 1] < end {
                last += 1;
                if self.free[last].free_of_type(t) < gpus {
                    blocked = Some(last);
                    break;
                }
            }
            if let Some(b) = blocked {
                first = b + 1;
                continue;
            }
            // What stays free of type t on each node through the whole window.
            let mut window = self.free[first].clone();
            for seg in &self.free[first + 1..=last] {
                for n in 0..window.node_count() as u32 {
                    let node = NodeId(n);
                    let (w, s) = (window.free(node, t), seg.free(node, t));
                    if s < w {
                        // Cannot fail: it takes less than is free.
                        let _ = window.take(Part {
                            node,
                            gpu_type: t,
                            gpus: w - s,
                        });
                    }
                }
            }
            if let Some(p) = pack_consolidated(&window, t, gpus) {
                return Some((first, p));
            }
            first += 1;
        }
        None
    }

    /// Holds `placement` from `starts[first]` for `duration` seconds.
    fn reserve(&mut self, first: usize, duration: f64, placement: &Placement) {
        let start = self.starts[first];
        let end = start + duration;
        if end > start {
            self.split_at(end);
        }
        let last = self.window_end(first, end);
        for seg in &mut self.free[first..=last] {
            // `earliest` checked the whole window, so this fits.
            let _ = seg.take_placement(placement);
        }
    }
}

impl Policy for SlurmBackfill {
    fn name(&self) -> &str {
        PolicyName::Slurm.as_str()
    }

    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let cluster = input.cluster;
        let now = input.now_s;
        let mut free_now = FreeCapacity::of(cluster);
        let mut plan = RoundPlan::default();

        // Non-preemptive: running jobs keep their GPUs and hand them back when they finish.
        let mut releases = Vec::new();
        let mut pending = Vec::new();
        for js in input.jobs {
            let rate = js
                .placement
                .as_ref()
                .map_or(0.0, |p| p.rate(&js.job.throughput, js.job.workers));
            match &js.placement {
                Some(p)
                    if rate > 0.0
                        && placement_in_cluster(p, cluster)
                        && free_now.take_placement(p).is_ok() =>
                {
                    releases.push((now + js.remaining_steps / rate, p.clone()));
                    plan.assignments.push(Assignment {
                        job: js.id(),
                        placement: p.clone(),
                        rate,
                        payoff: None,
                    });
                }
                _ => pending.push(js),
            }
        }

        let mut profile = Profile::new(now, free_now.clone(), releases);
        let mut first_waiting: Option<JobId> = None;
        for js in pending {
            let Some((t, rate)) = requested_type(js, cluster) else {
                plan.waiting.push(Waiting {
                    job: js.id(),
                    reason: WaitReason::CannotRunAnywhere,
                });
                continue;
            };
            let duration = js.remaining_steps / rate;
            let Some((first, placement)) = profile.earliest(t, js.job.workers, duration) else {
                // Only reachable if the duration is not a finite number.
                plan.waiting.push(Waiting {
                    job: js.id(),
                    reason: WaitReason::DoesNotFit,
                });
                continue;
            };
            profile.reserve(first, duration, &placement);
            if first == 0 && free_now.take_placement(&placement).is_ok() {
                plan.assignments.push(Assignment {
                    job: js.id(),
                    placement,
                    rate,
                    payoff: None,
                });
                continue;
            }
            // It fits in the GPUs free now, but taking them would delay a job ahead of it.
            let reason = match first_waiting {
                Some(head) if pack_consolidated(&free_now, t, js.job.workers).is_some() => {
                    WaitReason::QueuedBehind { head: Some(head) }
                }
                _ => WaitReason::WaitingForRelease,
            };
            first_waiting.get_or_insert(js.id());
            plan.waiting.push(Waiting {
                job: js.id(),
                reason,
            });
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::fixtures::{fresh, job, running, ty};

    fn input<'a>(cluster: &'a Cluster, jobs: &'a [JobState]) -> RoundInput<'a> {
        RoundInput {
            now_s: 1000.0,
            round_s: 360.0,
            restart_s: 0.0,
            cluster,
            jobs,
        }
    }

    fn one(node: u32, t: u16, gpus: u32) -> Placement {
        Placement::gang([Part {
            node: NodeId(node),
            gpu_type: ty(t),
            gpus,
        }])
    }

    #[test]
    fn asks_for_the_fastest_type_only() {
        // One v100 (busy) and four idle k80 nodes; the job is fastest on v100.
        let c = Cluster::from_type_counts(&[("v100".into(), 1), ("k80".into(), 4)], 1).unwrap();
        let jobs = vec![
            running(
                job(1, 0.0, 1, 1000.0, &[Some(1.0), Some(1.0)]),
                2,
                one(0, 0, 1),
                100.0,
            ),
            fresh(job(2, 1.0, 1, 1000.0, &[Some(3.0), Some(1.0)]), 2),
        ];
        let plan = SlurmBackfill::new().plan(&input(&c, &jobs));
        plan.validate(&c, &jobs).unwrap();
        assert!(plan.placement_of(JobId(2)).is_none());
        assert_eq!(
            plan.waiting,
            vec![Waiting {
                job: JobId(2),
                reason: WaitReason::WaitingForRelease
            }]
        );
        assert_eq!(requested_type(&jobs[1], &c), Some((ty(0), 3.0)));
    }

    #[test]
    fn backfills_a_short_job_that_ends_before_the_reservation() {
        // Four 1-GPU v100 nodes; job 1 holds two of them for 100 s.
        let c = Cluster::from_type_counts(&[("v100".into(), 4)], 1).unwrap();
        let held = Placement::gang([
            Part {
                node: NodeId(0),
                gpu_type: ty(0),
                gpus: 1,
            },
            Part {
                node: NodeId(1),
                gpu_type: ty(0),
                gpus: 1,
            },
        ]);
        let mut r = running(job(1, 0.0, 2, 1e6, &[Some(1.0)]), 1, held, 10.0);
        r.remaining_steps = 100.0;
        let jobs = vec![
            r,
            // Needs all four: reserved at t = now + 100.
            fresh(job(2, 1.0, 4, 1000.0, &[Some(1.0)]), 1),
            // Two GPUs for 50 s: ends before job 2's reservation, so it backfills.
            fresh(job(3, 2.0, 2, 50.0, &[Some(1.0)]), 1),
            // Two GPUs for 500 s: would delay job 2, so it waits although GPUs are free.
            fresh(job(4, 3.0, 2, 500.0, &[Some(1.0)]), 1),
        ];
        let plan = SlurmBackfill::new().plan(&input(&c, &jobs));
        plan.validate(&c, &jobs).unwrap();
        assert!(plan.placement_of(JobId(3)).is_some());
        assert!(plan.placement_of(JobId(2)).is_none());
        assert!(plan.placement_of(JobId(4)).is_none());
        let reason = |id| {
            plan.waiting
                .iter()
                .find(|w| w.job == JobId(id))
                .map(|w| w.reason.clone())
        };
        assert_eq!(reason(2), Some(WaitReason::WaitingForRelease));
        // Job 3 took the two free GPUs, so job 4 does not fit now at all.
        assert_eq!(reason(4), Some(WaitReason::WaitingForRelease));
    }

    #[test]
    fn a_job_that_fits_now_but_would_delay_an_earlier_one_is_queued_behind_it() {
        let c = Cluster::from_type_counts(&[("v100".into(), 4)], 1).unwrap();
        let mut r = running(job(1, 0.0, 1, 1e6, &[Some(1.0)]), 1, one(0, 0, 1), 10.0);
        r.remaining_steps = 100.0;
        let jobs = vec![
            r,
            // All four GPUs, from now + 100.
            fresh(job(2, 1.0, 4, 1000.0, &[Some(1.0)]), 1),
            // One GPU for 500 s: three are free now, but it would run into job 2's start.
            fresh(job(3, 2.0, 1, 500.0, &[Some(1.0)]), 1),
        ];
        let plan = SlurmBackfill::new().plan(&input(&c, &jobs));
        assert_eq!(plan.assignments.len(), 1);
        let w3 = plan.waiting.iter().find(|w| w.job == JobId(3)).unwrap();
        assert_eq!(
            w3.reason,
            WaitReason::QueuedBehind {
                head: Some(JobId(2))
            }
        );
    }

    #[test]
    fn picks_the_best_fit_node() {
        // Nodes with 4, 2 and 3 free v100; a 2-GPU job goes to the 2-GPU node.
        let c = Cluster::new(
            vec!["v100".into()],
            vec![
                crate::cluster::Node {
                    name: "a".into(),
                    gpus: vec![4],
                },
                crate::cluster::Node {
                    name: "b".into(),
                    gpus: vec![2],
                },
                crate::cluster::Node {
                    name: "c".into(),
                    gpus: vec![3],
                },
            ],
        )
        .unwrap();
        let jobs = vec![fresh(job(1, 0.0, 2, 100.0, &[Some(1.0)]), 1)];
        let plan = SlurmBackfill::new().plan(&input(&c, &jobs));
        assert_eq!(plan.placement_of(JobId(1)), Some(&one(1, 0, 2)));
    }

    #[test]
    fn running_jobs_are_never_moved_and_impossible_jobs_are_refused() {
        // Nodes: v100-0, k80-0, k80-1.
        let c = Cluster::from_type_counts(&[("v100".into(), 1), ("k80".into(), 2)], 1).unwrap();
        let on_k80 = one(1, 1, 1);
        let jobs = vec![
            running(
                job(1, 0.0, 1, 1e6, &[Some(5.0), Some(1.0)]),
                2,
                on_k80.clone(),
                10.0,
            ),
            // Three GPUs of one type: the cluster has at most two of any type.
            fresh(job(2, 1.0, 3, 1e6, &[Some(5.0), Some(1.0)]), 2),
            // Fastest on v100, but there is one v100 for its two workers: it asks for k80.
            fresh(job(3, 2.0, 2, 1e6, &[Some(5.0), Some(1.0)]), 2),
        ];
        let plan = SlurmBackfill::new().plan(&input(&c, &jobs));
        assert_eq!(plan.placement_of(JobId(1)), Some(&on_k80));
        assert_eq!(
            plan.waiting[0],
            Waiting {
                job: JobId(2),
                reason: WaitReason::CannotRunAnywhere
            }
        );
        // Job 3 asked for k80 and must wait for job 1's k80 to be released.
        assert_eq!(requested_type(&jobs[2], &c), Some((ty(1), 1.0)));
        assert_eq!(
            plan.waiting[1],
            Waiting {
                job: JobId(3),
                reason: WaitReason::WaitingForRelease
            }
        );
    }
}
