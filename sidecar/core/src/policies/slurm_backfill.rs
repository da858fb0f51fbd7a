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
//! **Time limits are optimistic by default.** Backfill needs each job's time limit to plan
//! reservations. With [`TimeLimits::Exact`] (the default, what `hadar simulate` runs) every
//! job's limit is its true remaining run time on its type, `remaining_steps / rate`, so
//! reservations are exact and backfill is as good as it can be. Real users ask for generous
//! limits and jobs end early, which makes real Slurm backfill less effective than this
//! baseline.
//!
//! **Options for a given cluster** ([`SlurmOptions`], docs/prediction.md): jobs submitted
//! with no time limit to a partition without one ([`TimeLimits::Unlimited`]), and requests
//! of `--gres=gpu:TYPE:N` without a node count, which Slurm places on one node
//! ([`NodeLayout::OneNode`]).

use crate::capacity::FreeCapacity;
use crate::cluster::{Cluster, GpuType, NodeId};
use crate::job::{JobId, JobState};
use crate::placement::{Part, Placement};
use crate::plan::{Assignment, RoundPlan, WaitReason, Waiting};
use crate::policies::PolicyName;
use crate::policies::packing::{pack_consolidated, placement_in_cluster};
use crate::policy::{Policy, RoundInput};

/// What the backfill scheduler knows of how long each job runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeLimits {
    /// Every job's limit is its true remaining run time: reservations are exact.
    #[default]
    Exact,
    /// No job has a limit (no `--time`, a partition with `MaxTime=INFINITE` and no
    /// `DefaultTime`). Slurm then takes every running job to end a year after its start, so
    /// a job that cannot start now has an expected start beyond the backfill window
    /// (`bf_window`, a day by default) and gets no reservation (`_attempt_backfill` in
    /// `sched/backfill`). Nothing protects a blocked job: in priority order, every job that
    /// fits in the GPUs free now starts, and a blocked job starts only when its GPUs happen
    /// to be free together at a pass.
    Unlimited,
}

/// How a job's GPUs are laid out on nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeLayout {
    /// As few nodes as possible, the last one best-fit by free GPUs of the type
    /// ([`pack_consolidated`]).
    #[default]
    FewestNodes,
    /// All of a job's GPUs on one node, as for `--gres=gpu:TYPE:N` without `-N` (a GRES
    /// count is per node and the job asks for one node). Among the nodes that hold them,
    /// the one with the fewest free CPUs, ties to the first node: `select/cons_tres` keeps
    /// the sufficient set of nodes with the fewest available CPUs (`_eval_nodes_consec`).
    /// Each job holds one CPU of each of its nodes and every node is taken to have as many
    /// CPUs as the others, so this is the node running the most jobs.
    OneNode,
}

/// The baseline's settings for a given cluster; the default is the optimistic baseline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlurmOptions {
    pub time_limits: TimeLimits,
    pub nodes: NodeLayout,
}

/// The Slurm baseline: fixed fastest type, FIFO with conservative backfill. See the module
/// documentation.
#[derive(Debug, Default)]
pub struct SlurmBackfill {
    options: SlurmOptions,
}

impl SlurmBackfill {
    /// The optimistic Slurm baseline (exact time limits, fewest nodes); it keeps no state
    /// between rounds.
    pub fn new() -> Self {
        SlurmBackfill::default()
    }

    /// A Slurm baseline with `options`.
    pub fn with_options(options: SlurmOptions) -> Self {
        SlurmBackfill { options }
    }

    /// The options it runs with.
    pub fn options(&self) -> SlurmOptions {
        self.options
    }
}

/// The type a job asks Slurm for, with the rate it gets there: the fastest with all its
/// workers among the types of which the cluster has at least that many GPUs (a user does not
/// ask for a configuration Slurm would reject at submission), ties to the earlier type.
/// `None` when no such type exists.
pub fn requested_type(js: &JobState, cluster: &Cluster) -> Option<(GpuType, f64)> {
    requested_type_in(js, cluster, NodeLayout::FewestNodes)
}

/// [`requested_type`] for a node layout: with [`NodeLayout::OneNode`], only types of which
/// one node has all the job's workers count.
pub fn requested_type_in(
    js: &JobState,
    cluster: &Cluster,
    layout: NodeLayout,
) -> Option<(GpuType, f64)> {
    let holds = |t: GpuType| match layout {
        NodeLayout::FewestNodes => cluster.total_of_type(t) >= js.job.workers,
        NodeLayout::OneNode => cluster.max_per_node(t) >= js.job.workers,
    };
    let mut best: Option<(GpuType, f64)> = None;
    for t in cluster.types().filter(|&t| holds(t)) {
        if let Some(r) = js.job.rate_on(t)
            && best.is_none_or(|(_, b)| r > b)
        {
            best = Some((t, r));
        }
    }
    best
}

/// Where a job of `gpus` GPUs of type `t` goes in `free` under `layout`; `jobs_on[n]` counts
/// the jobs holding GPUs on node `n` (for [`NodeLayout::OneNode`]'s fewest free CPUs).
fn place(
    layout: NodeLayout,
    free: &FreeCapacity,
    t: GpuType,
    gpus: u32,
    jobs_on: &[u32],
) -> Option<Placement> {
    match layout {
        NodeLayout::FewestNodes => pack_consolidated(free, t, gpus),
        NodeLayout::OneNode => (0..free.node_count() as u32)
            .map(NodeId)
            .filter(|&n| gpus > 0 && free.free(n, t) >= gpus)
            // Most jobs first (fewest free CPUs), then the first node.
            .min_by_key(|n| (std::cmp::Reverse(jobs_on[n.index()]), n.0))
            .map(|node| {
                Placement::gang([Part {
                    node,
                    gpu_type: t,
                    gpus,
                }])
            }),
    }
}

/// Counts a job on each node of `p` in `jobs_on`.
fn count_on(jobs_on: &mut [u32], p: &Placement) {
    for n in p.nodes() {
        jobs_on[n.index()] += 1;
    }
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
    /// seconds, with the placement `place` picks in what stays free there. The last segment
    /// has every reservation handed back, so a request the cluster can hold at all always
    /// gets an answer.
    fn earliest(
        &self,
        t: GpuType,
        gpus: u32,
        duration: f64,
        place: impl Fn(&FreeCapacity) -> Option<Placement>,
    ) -> Option<(usize, Placement)> {
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
            if let Some(p) = place(&window) {
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
        let mut jobs_on = vec![0u32; cluster.nodes().len()];
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
                    count_on(&mut jobs_on, p);
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
        let mut queue = Queue {
            layout: self.options.nodes,
            free_now,
            jobs_on,
            plan,
        };
        match self.options.time_limits {
            TimeLimits::Exact => queue.backfill(now, releases, &pending, cluster),
            TimeLimits::Unlimited => queue.start_what_fits(&pending, cluster),
        }
        queue.plan
    }
}

/// A round's pending jobs being scheduled: what is free now and the plan so far.
struct Queue {
    layout: NodeLayout,
    free_now: FreeCapacity,
    jobs_on: Vec<u32>,
    plan: RoundPlan,
}

impl Queue {
    /// Starts `placement` for `js` now.
    fn start(&mut self, js: &JobState, placement: Placement, rate: f64) {
        count_on(&mut self.jobs_on, &placement);
        self.plan.assignments.push(Assignment {
            job: js.id(),
            placement,
            rate,
            payoff: None,
        });
    }

    fn wait(&mut self, js: &JobState, reason: WaitReason) {
        self.plan.waiting.push(Waiting {
            job: js.id(),
            reason,
        });
    }

    /// [`TimeLimits::Exact`]: conservative backfill, every job in order reserved at its
    /// earliest start; those whose earliest start is now start.
    fn backfill(
        &mut self,
        now: f64,
        releases: Vec<(f64, Placement)>,
        pending: &[&JobState],
        cluster: &Cluster,
    ) {
        let mut profile = Profile::new(now, self.free_now.clone(), releases);
        let mut first_waiting: Option<JobId> = None;
        for js in pending {
            let Some((t, rate)) = requested_type_in(js, cluster, self.layout) else {
                self.wait(js, WaitReason::CannotRunAnywhere);
                continue;
            };
            let duration = js.remaining_steps / rate;
            let gpus = js.job.workers;
            let (layout, jobs_on) = (self.layout, &self.jobs_on);
            let Some((first, placement)) = profile.earliest(t, gpus, duration, |free| {
                place(layout, free, t, gpus, jobs_on)
            }) else {
                // Only reachable if the duration is not a finite number.
                self.wait(js, WaitReason::DoesNotFit);
                continue;
            };
            profile.reserve(first, duration, &placement);
            if first == 0 && self.free_now.take_placement(&placement).is_ok() {
                self.start(js, placement, rate);
                continue;
            }
            // It fits in the GPUs free now, but taking them would delay a job ahead of it.
            let fits_now = place(layout, &self.free_now, t, gpus, &self.jobs_on).is_some();
            let reason = match first_waiting {
                Some(head) if fits_now => WaitReason::QueuedBehind { head: Some(head) },
                _ => WaitReason::WaitingForRelease,
            };
            first_waiting.get_or_insert(js.id());
            self.wait(js, reason);
        }
    }

    /// [`TimeLimits::Unlimited`]: no reservations; in order, every job that fits in the GPUs
    /// free now starts, the others wait for releases.
    fn start_what_fits(&mut self, pending: &[&JobState], cluster: &Cluster) {
        for js in pending {
            let Some((t, rate)) = requested_type_in(js, cluster, self.layout) else {
                self.wait(js, WaitReason::CannotRunAnywhere);
                continue;
            };
            match place(
                self.layout,
                &self.free_now,
                t,
                js.job.workers,
                &self.jobs_on,
            ) {
                Some(p) if self.free_now.take_placement(&p).is_ok() => self.start(js, p, rate),
                _ => self.wait(js, WaitReason::WaitingForRelease),
            }
        }
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

    /// Four V100 on one node: job 1 runs on one for 100 s more, job 2 needs all four (from
    /// now + 100 s), job 3 wants one for 500 s: three are free now, but it would run into
    /// job 2's start.
    fn a_head_blocked_until_a_release() -> (Cluster, Vec<JobState>) {
        let c = Cluster::from_type_counts(&[("v100".into(), 4)], 1).unwrap();
        let mut r = running(job(1, 0.0, 1, 1e6, &[Some(1.0)]), 1, one(0, 0, 1), 10.0);
        r.remaining_steps = 100.0;
        let jobs = vec![
            r,
            fresh(job(2, 1.0, 4, 1000.0, &[Some(1.0)]), 1),
            fresh(job(3, 2.0, 1, 500.0, &[Some(1.0)]), 1),
        ];
        (c, jobs)
    }

    #[test]
    fn a_job_that_fits_now_but_would_delay_an_earlier_one_is_queued_behind_it() {
        let (c, jobs) = a_head_blocked_until_a_release();
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

    fn unlimited() -> SlurmBackfill {
        SlurmBackfill::with_options(SlurmOptions {
            time_limits: TimeLimits::Unlimited,
            nodes: NodeLayout::FewestNodes,
        })
    }

    fn one_node(time_limits: TimeLimits) -> SlurmBackfill {
        SlurmBackfill::with_options(SlurmOptions {
            time_limits,
            nodes: NodeLayout::OneNode,
        })
    }

    #[test]
    fn the_default_is_the_optimistic_baseline() {
        assert_eq!(SlurmBackfill::new().options(), SlurmOptions::default());
        assert_eq!(SlurmOptions::default().time_limits, TimeLimits::Exact);
        assert_eq!(SlurmOptions::default().nodes, NodeLayout::FewestNodes);
    }

    #[test]
    fn without_time_limits_a_blocked_job_gets_no_reservation() {
        // Jobs 3 and 4 would run into job 2's start: exact limits hold them back, none do
        // not. Job 5 finds nothing left.
        let (c, mut jobs) = a_head_blocked_until_a_release();
        jobs.push(fresh(job(4, 3.0, 2, 500.0, &[Some(1.0)]), 1));
        jobs.push(fresh(job(5, 4.0, 1, 5.0, &[Some(1.0)]), 1));
        let exact = SlurmBackfill::new().plan(&input(&c, &jobs));
        assert!(exact.placement_of(JobId(3)).is_none());
        assert!(exact.placement_of(JobId(4)).is_none());
        let plan = unlimited().plan(&input(&c, &jobs));
        plan.validate(&c, &jobs).unwrap();
        assert!(plan.placement_of(JobId(3)).is_some());
        assert!(plan.placement_of(JobId(4)).is_some());
        for id in [2, 5] {
            let w = plan.waiting.iter().find(|w| w.job == JobId(id)).unwrap();
            assert_eq!(w.reason, WaitReason::WaitingForRelease, "job {id}");
        }
    }

    #[test]
    fn without_time_limits_the_running_jobs_end_times_do_not_matter() {
        // Two free GPUs; a 3-GPU head waits. Whether the running job ends in 1 s or in a
        // year, the 2-GPU job behind the head starts.
        let c = Cluster::from_type_counts(&[("v100".into(), 3)], 1).unwrap();
        for left in [1.0, 3.0e7] {
            let mut r = running(job(1, 0.0, 1, 1e9, &[Some(1.0)]), 1, one(0, 0, 1), 10.0);
            r.remaining_steps = left;
            let jobs = vec![
                r,
                fresh(job(2, 1.0, 3, 10.0, &[Some(1.0)]), 1),
                fresh(job(3, 2.0, 2, 1e6, &[Some(1.0)]), 1),
            ];
            let plan = unlimited().plan(&input(&c, &jobs));
            assert!(plan.placement_of(JobId(2)).is_none());
            assert!(plan.placement_of(JobId(3)).is_some(), "left {left}");
            // With exact limits it waits for the head, which starts in 1 s.
            let exact = SlurmBackfill::new().plan(&input(&c, &jobs));
            assert_eq!(exact.placement_of(JobId(3)).is_some(), left > 1.0);
        }
    }

    fn two_nodes() -> Cluster {
        // Node 0: 4 v100; node 1: 2 v100 and 2 k80 (the test cluster's n1 and n4).
        Cluster::new(
            vec!["v100".into(), "k80".into()],
            vec![
                crate::cluster::Node {
                    name: "n1".into(),
                    gpus: vec![4, 0],
                },
                crate::cluster::Node {
                    name: "n4".into(),
                    gpus: vec![2, 2],
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn one_node_jobs_are_never_split_over_nodes() {
        let c = two_nodes();
        let rates = [Some(2.0), Some(1.0)];
        let jobs = vec![
            running(job(1, 0.0, 3, 1e6, &rates), 2, one(0, 0, 3), 10.0),
            running(job(2, 0.0, 1, 1e6, &rates), 2, one(1, 0, 1), 10.0),
            // Two v100 are free, one on each node.
            fresh(job(3, 1.0, 2, 1e3, &rates), 2),
        ];
        let split = SlurmBackfill::new().plan(&input(&c, &jobs));
        assert_eq!(
            split.placement_of(JobId(3)).map(|p| p.nodes().len()),
            Some(2)
        );
        for limits in [TimeLimits::Exact, TimeLimits::Unlimited] {
            let plan = one_node(limits).plan(&input(&c, &jobs));
            plan.validate(&c, &jobs).unwrap();
            assert!(plan.placement_of(JobId(3)).is_none(), "{limits:?}");
        }
        // Four v100 on one node exist only on node 0, so a 4-GPU job still asks for v100;
        // five fit only over both nodes, so with one node there is nothing to ask for.
        let four = fresh(job(4, 0.0, 4, 1e3, &[Some(2.0), Some(1.0)]), 2);
        assert_eq!(
            requested_type_in(&four, &c, NodeLayout::OneNode),
            Some((ty(0), 2.0))
        );
        let five = fresh(job(5, 0.0, 5, 1e3, &[Some(2.0), None]), 2);
        assert_eq!(requested_type(&five, &c), Some((ty(0), 2.0)));
        assert_eq!(requested_type_in(&five, &c, NodeLayout::OneNode), None);
    }

    #[test]
    fn one_node_jobs_go_to_the_node_running_the_most_jobs_then_the_first() {
        let c = two_nodes();
        let rates = [Some(2.0), Some(1.0)];
        // Nothing running: a tie, so the first node; best fit by GPUs takes node 1.
        let jobs = vec![fresh(job(1, 0.0, 1, 1e3, &rates), 2)];
        let plan = one_node(TimeLimits::Unlimited).plan(&input(&c, &jobs));
        assert_eq!(plan.placement_of(JobId(1)), Some(&one(0, 0, 1)));
        let fit = SlurmBackfill::new().plan(&input(&c, &jobs));
        assert_eq!(fit.placement_of(JobId(1)), Some(&one(1, 0, 1)));
        // A k80 job on node 1 makes it the busier node, so the next v100 job goes there.
        let jobs = vec![
            running(
                job(1, 0.0, 1, 1e6, &[None, Some(1.0)]),
                2,
                one(1, 1, 1),
                10.0,
            ),
            fresh(job(2, 0.0, 1, 1e3, &rates), 2),
            // Three jobs in this round: the first two share node 1's count.
            fresh(job(3, 0.0, 1, 1e3, &rates), 2),
            fresh(job(4, 0.0, 1, 1e3, &rates), 2),
        ];
        let plan = one_node(TimeLimits::Unlimited).plan(&input(&c, &jobs));
        plan.validate(&c, &jobs).unwrap();
        assert_eq!(plan.placement_of(JobId(2)), Some(&one(1, 0, 1)));
        assert_eq!(plan.placement_of(JobId(3)), Some(&one(1, 0, 1)));
        // Node 1's v100 are taken.
        assert_eq!(plan.placement_of(JobId(4)), Some(&one(0, 0, 1)));
    }
}
