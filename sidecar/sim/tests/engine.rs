//! The simulator's round semantics, checked on workloads small enough to work out by hand,
//! and its invariants on random workloads.

use hadar_core::{
    Assignment, Cluster, FreeCapacity, GpuType, Job, JobId, NodeId, Part, Placement, Policy,
    RateCurve, RoundInput, RoundPlan, ThroughputProfile, WaitReason, Waiting,
};
use hadar_sim::{SimConfig, SimError, Workload, simulate, simulate_observed};
use proptest::prelude::*;

/// A test fixture policy: jobs in arrival order, each on the first node(s) with enough free
/// GPUs of its fastest type; optionally moves every job to another node each round.
struct Greedy {
    hop: bool,
    round: usize,
}

impl Greedy {
    fn new(hop: bool) -> Self {
        Greedy { hop, round: 0 }
    }
}

impl Policy for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }
    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let mut free = FreeCapacity::of(input.cluster);
        let mut plan = RoundPlan::default();
        let n = input.cluster.nodes().len();
        self.round += 1;
        for js in input.jobs {
            let (t, rate) = js.job.throughput.fastest(js.job.workers).unwrap();
            let mut left = js.job.workers;
            let mut parts = Vec::new();
            for k in 0..n {
                let node = NodeId(((k + if self.hop { self.round } else { 0 }) % n) as u32);
                let take = free.free(node, t).min(left);
                if take > 0 {
                    parts.push(Part {
                        node,
                        gpu_type: t,
                        gpus: take,
                    });
                    left -= take;
                }
            }
            if left == 0 {
                let p = Placement::gang(parts);
                free.take_placement(&p).unwrap();
                plan.assignments.push(Assignment {
                    job: js.id(),
                    placement: p,
                    rate,
                    payoff: None,
                });
            } else {
                plan.waiting.push(Waiting {
                    job: js.id(),
                    reason: WaitReason::DoesNotFit,
                });
            }
        }
        plan
    }
}

fn job(id: u64, arrival: f64, workers: u32, steps: f64, rate: f64) -> Job {
    Job {
        restart_s: None,
        id: JobId(id),
        kind: "t".into(),
        arrival_s: arrival,
        workers,
        total_steps: steps,
        weight: 1.0,
        throughput: ThroughputProfile::new(vec![RateCurve::new([(workers, rate)])]),
    }
}

fn cluster(gpus: u32, per_node: u32) -> Cluster {
    Cluster::from_type_counts(&[("v100".into(), gpus)], per_node).unwrap()
}

#[test]
fn a_lone_job_runs_round_after_round_and_ends_mid_round() {
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![job(0, 0.0, 1, 1000.0, 1.0)],
    };
    let mut rounds = Vec::new();
    let r = simulate_observed(
        &w,
        &mut Greedy::new(false),
        &SimConfig::default(),
        &mut |rec| rounds.push((rec.start_s, rec.end_s)),
    )
    .unwrap();
    assert_eq!(rounds, vec![(0.0, 360.0), (360.0, 720.0), (720.0, 1000.0)]);
    assert_eq!(r.metrics.ttd_s, 1000.0);
    assert_eq!(r.metrics.avg_jct_s, 1000.0);
    assert_eq!(r.metrics.cru, 1.0);
    assert_eq!(r.metrics.restarts, 0);
}

#[test]
fn a_round_ends_when_its_last_job_stops() {
    // Two jobs finish at 100 s and 200 s; the third arrives at 150 s and can only start at
    // the next round boundary, which is 200 s (not 360 s).
    let w = Workload {
        cluster: cluster(2, 1),
        jobs: vec![
            job(0, 0.0, 1, 100.0, 1.0),
            job(1, 0.0, 1, 200.0, 1.0),
            job(2, 150.0, 1, 50.0, 1.0),
        ],
    };
    let r = simulate(&w, &mut Greedy::new(false), &SimConfig::default()).unwrap();
    let finish: Vec<f64> = r.jobs.iter().map(|o| o.finish_s).collect();
    assert_eq!(finish, vec![100.0, 200.0, 250.0]);
    assert_eq!(r.jobs[2].queueing_s(), 50.0);
    assert_eq!(r.metrics.ttd_s, 250.0);
}

#[test]
fn the_clock_jumps_to_the_next_arrival_when_idle() {
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![job(0, 0.0, 1, 10.0, 1.0), job(1, 5000.0, 1, 10.0, 1.0)],
    };
    let r = simulate(&w, &mut Greedy::new(false), &SimConfig::default()).unwrap();
    assert_eq!(r.jobs[1].finish_s, 5010.0);
    assert_eq!(r.metrics.ttd_s, 5010.0);
    assert!((r.metrics.cru - 20.0 / 5010.0).abs() < 1e-12);
}

/// One job of 1000 steps at 1 step/s on a cluster of two one-GPU nodes, for jobs that hop.
fn one_job_on_two_nodes() -> Workload {
    Workload {
        cluster: cluster(2, 1),
        jobs: vec![job(0, 0.0, 1, 1000.0, 1.0)],
    }
}

#[test]
fn changing_placement_costs_the_restart_time() {
    // 2 nodes; the job hops between them every round. 1000 steps at 1 step/s, 360 s rounds,
    // 60 s restart: round 1 runs 360 s (first start is free), rounds 2.. lose 60 s each.
    let w = one_job_on_two_nodes();
    let cfg = SimConfig {
        restart_s: 60.0,
        ..SimConfig::default()
    };
    let r = simulate(&w, &mut Greedy::new(true), &cfg).unwrap();
    // 360 + (300) + (300) = 960 steps after 3 rounds; round 4: 60 s restart + 40 s.
    assert_eq!(r.jobs[0].finish_s, 3.0 * 360.0 + 100.0);
    assert_eq!(r.metrics.restarts, 3);
    let sticky = simulate(&w, &mut Greedy::new(false), &cfg).unwrap();
    assert_eq!(sticky.jobs[0].finish_s, 1000.0);
    assert_eq!(sticky.metrics.restarts, 0);
}

#[test]
fn a_jobs_own_restart_cost_replaces_the_workloads_and_may_be_charged_at_its_first_start() {
    // Two hopping jobs, one with its own 100 s restart, one at the workload's 60 s: each
    // round after the first loses that much (1000 steps at 1 step/s, 360 s rounds).
    let mut own = job(0, 0.0, 1, 1000.0, 1.0);
    own.restart_s = Some(100.0);
    let w = Workload {
        cluster: cluster(2, 1),
        jobs: vec![own.clone(), job(1, 0.0, 1, 1000.0, 1.0)],
    };
    let cfg = SimConfig {
        restart_s: 60.0,
        ..SimConfig::default()
    };
    let r = simulate(&w, &mut Greedy::new(true), &cfg).unwrap();
    // Own: 360 + 260 + 260 = 880 after 3 rounds; round 4: 100 s restart + 120 s of work.
    assert_eq!(r.jobs[0].finish_s, 3.0 * 360.0 + 220.0);
    assert_eq!(r.jobs[1].finish_s, 3.0 * 360.0 + 100.0);
    // Charged at every start, as Sia's simulator does, a kept job pays it once, at its
    // first, even where it is longer than a round (a 500 s restart in 360 s rounds).
    own.restart_s = Some(500.0);
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![own],
    };
    let every_start = SimConfig {
        model: hadar_sim::ClusterModel {
            first_start_restarts: true,
            ..Default::default()
        },
        ..cfg.clone()
    };
    let r = simulate(&w, &mut Greedy::new(false), &every_start).unwrap();
    assert_eq!(r.jobs[0].finish_s, 1500.0);
    assert_eq!(r.metrics.restarts, 0, "a first start is not a restart");
    let r = simulate(&w, &mut Greedy::new(false), &cfg).unwrap();
    assert_eq!(r.jobs[0].finish_s, 1000.0);
    // A negative or non-finite cost is refused.
    let mut bad = w.clone();
    bad.jobs[0].restart_s = Some(-1.0);
    let e = simulate(&bad, &mut Greedy::new(false), &cfg).unwrap_err();
    assert!(
        e.to_string().contains("restart cost must be at least 0"),
        "{e}"
    );
}

#[test]
fn a_job_moved_every_round_with_a_restart_of_a_whole_round_is_reported_not_looped() {
    // The job hops between 2 nodes each round. Its first start is free (360 steps in round
    // 1); from round 2 every round is spent restarting, so it never advances again.
    let w = one_job_on_two_nodes();
    let cfg = SimConfig {
        restart_s: 360.0,
        max_rounds_without_progress: 5,
        ..SimConfig::default()
    };
    let e = simulate(&w, &mut Greedy::new(true), &cfg).unwrap_err();
    let SimError::NoProgress {
        rounds,
        at_s,
        active,
        ..
    } = &e
    else {
        panic!("expected NoProgress, got {e}");
    };
    assert_eq!((*rounds, *at_s, *active), (5, 6.0 * 360.0, 1));
    let text = e.to_string();
    assert!(
        text.contains("`greedy` made no progress for 5 rounds in a row")
            && text.contains("restarting (360 s)"),
        "{text}"
    );
    // The default limit stops it too, long before the round limit.
    let e = simulate(
        &w,
        &mut Greedy::new(true),
        &SimConfig {
            restart_s: 360.0,
            ..SimConfig::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, SimError::NoProgress { rounds: 1000, .. }),
        "{e}"
    );
    // A job kept in place advances whatever the restart cost.
    let kept = simulate(&w, &mut Greedy::new(false), &cfg).unwrap();
    assert_eq!(kept.jobs[0].finish_s, 1000.0);
}

struct Never;
impl Policy for Never {
    fn name(&self) -> &str {
        "never"
    }
    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        RoundPlan {
            assignments: vec![],
            waiting: input
                .jobs
                .iter()
                .map(|j| Waiting {
                    job: j.id(),
                    reason: WaitReason::DoesNotFit,
                })
                .collect(),
        }
    }
}

#[test]
fn a_policy_that_never_runs_anything_is_reported_not_looped() {
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![job(0, 0.0, 1, 10.0, 1.0)],
    };
    let e = simulate(&w, &mut Never, &SimConfig::default()).unwrap_err();
    assert!(matches!(e, SimError::Stuck { waiting: 1, .. }), "{e}");
    assert!(e.to_string().contains("not enough free GPUs"), "{e}");
}

struct Greedier;
impl Policy for Greedier {
    fn name(&self) -> &str {
        "overcommit"
    }
    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let p = Placement::gang([Part {
            node: NodeId(0),
            gpu_type: GpuType(0),
            gpus: 1,
        }]);
        RoundPlan {
            assignments: input
                .jobs
                .iter()
                .map(|j| Assignment {
                    job: j.id(),
                    placement: p.clone(),
                    rate: 1.0,
                    payoff: None,
                })
                .collect(),
            waiting: vec![],
        }
    }
}

#[test]
fn a_plan_over_capacity_is_a_policy_violation() {
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![job(0, 0.0, 1, 10.0, 1.0), job(1, 0.0, 1, 10.0, 1.0)],
    };
    let e = simulate(&w, &mut Greedier, &SimConfig::default()).unwrap_err();
    assert!(matches!(e, SimError::PolicyViolation { .. }), "{e}");
}

#[test]
fn bad_settings_and_unrunnable_jobs_are_errors() {
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![job(0, 0.0, 2, 10.0, 1.0)],
    };
    let cfg = SimConfig::default();
    // A 2-worker job on a 1-GPU cluster can still be described, but its profile has a rate
    // for 2 workers, so it is runnable in principle; the greedy fixture can't place it.
    assert!(matches!(
        simulate(&w, &mut Greedy::new(false), &cfg),
        Err(SimError::Stuck { .. })
    ));
    let mut j = job(0, 0.0, 1, 10.0, 1.0);
    j.throughput = ThroughputProfile::new(vec![RateCurve::default()]);
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![j],
    };
    assert_eq!(
        simulate(&w, &mut Never, &cfg).unwrap_err(),
        SimError::CannotRun(JobId(0))
    );
    let bad = SimConfig {
        restart_s: 400.0,
        ..SimConfig::default()
    };
    assert!(matches!(
        simulate(&w, &mut Never, &bad),
        Err(SimError::InvalidConfig(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Every job of a random workload completes, no earlier than its isolated time allows,
    /// and the cluster is never busier than its capacity.
    #[test]
    fn every_job_completes_and_utilisation_is_bounded(
        specs in prop::collection::vec((0.0f64..5000.0, 1u32..=4, 1.0f64..5000.0, 0.1f64..10.0), 1..25),
        gpus in 4u32..12,
    ) {
        let mut arrivals: Vec<f64> = specs.iter().map(|s| s.0).collect();
        arrivals.sort_by(f64::total_cmp);
        let jobs: Vec<Job> = specs.iter().enumerate()
            .map(|(i, s)| job(i as u64, arrivals[i], s.1, s.2, s.3))
            .collect();
        let w = Workload { cluster: cluster(gpus, 2), jobs: jobs.clone() };
        let r = simulate(&w, &mut Greedy::new(false), &SimConfig::default()).unwrap();
        prop_assert_eq!(r.metrics.jobs_completed, jobs.len());
        prop_assert!(r.metrics.cru <= 1.0 + 1e-9);
        for (o, j) in r.jobs.iter().zip(&jobs) {
            prop_assert!(o.jct_s() + 1e-6 >= j.total_steps / j.throughput.fastest(j.workers).unwrap().1);
        }
    }
}

/// The cluster model: a start costs its latency once (a job kept in place pays nothing more),
/// and a job that keeps its first types is seen by the policy only on them.
#[test]
fn the_cluster_model_charges_start_latency_and_holds_a_started_job_to_its_types() {
    let w = Workload {
        cluster: cluster(1, 1),
        jobs: vec![job(0, 0.0, 1, 1000.0, 1.0)],
    };
    let cfg = SimConfig {
        model: hadar_sim::ClusterModel {
            start_latency_s: 20.0,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let mut greedy = Greedy::new(false);
    let r = simulate(&w, &mut greedy, &cfg).unwrap();
    assert_eq!(
        r.metrics.ttd_s, 1020.0,
        "one start, 20 s before the first step"
    );

    // Two types on one node; round 1 puts the job on the slow K80, later rounds on the
    // fastest type the policy sees.
    struct SlowFirst {
        round: usize,
        seen: Vec<Vec<GpuType>>,
    }
    impl Policy for SlowFirst {
        fn name(&self) -> &str {
            "slow-first"
        }
        fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
            self.round += 1;
            let js = &input.jobs[0];
            let usable: Vec<GpuType> = input
                .cluster
                .types()
                .filter(|t| js.job.throughput.rate(*t, 1).is_some())
                .collect();
            self.seen.push(usable);
            let k80 = input.cluster.type_by_name("k80").unwrap();
            let t = if self.round == 1 {
                k80
            } else {
                js.job.throughput.fastest(1).unwrap().0
            };
            RoundPlan {
                assignments: vec![Assignment {
                    job: js.id(),
                    placement: Placement::gang([Part {
                        node: NodeId(0),
                        gpu_type: t,
                        gpus: 1,
                    }]),
                    rate: js.job.throughput.rate_or_zero(t, 1),
                    payoff: None,
                }],
                waiting: vec![],
            }
        }
    }
    let two = Cluster::new(
        vec!["v100".into(), "k80".into()],
        vec![hadar_core::Node {
            name: "n0".into(),
            gpus: vec![1, 1],
        }],
    )
    .unwrap();
    let mut j = job(0, 0.0, 1, 1000.0, 1.0);
    j.throughput =
        ThroughputProfile::new(vec![RateCurve::new([(1, 1.0)]), RateCurve::new([(1, 0.5)])]);
    let w = Workload {
        cluster: two,
        jobs: vec![j],
    };
    let run = |keeps_types: bool| {
        let mut p = SlowFirst {
            round: 0,
            seen: Vec::new(),
        };
        let cfg = SimConfig {
            model: hadar_sim::ClusterModel {
                keeps_types,
                ..Default::default()
            },
            ..SimConfig::default()
        };
        let r = simulate(&w, &mut p, &cfg).unwrap();
        (r.metrics.ttd_s, p.seen)
    };
    let (free_ttd, free_seen) = run(false);
    let (kept_ttd, kept_seen) = run(true);
    assert_eq!(free_seen[1].len(), 2, "{free_seen:?}");
    assert_eq!(
        kept_seen[1],
        vec![GpuType(1)],
        "only the K80 once started: {kept_seen:?}"
    );
    // 360 s on the K80 (180 steps), then V100 (820 s) or K80 (1640 s).
    assert_eq!(free_ttd, 1180.0);
    assert_eq!(kept_ttd, 2000.0);
}

/// Runs every job on node 0 in its first round and on node 1 after.
struct MoveOnce {
    round: u32,
}

impl Policy for MoveOnce {
    fn name(&self) -> &str {
        "move-once"
    }
    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let node = NodeId(self.round.min(1));
        self.round += 1;
        let mut plan = RoundPlan::default();
        for js in input.jobs {
            plan.assignments.push(Assignment {
                job: js.id(),
                placement: Placement::gang(vec![Part {
                    node,
                    gpu_type: GpuType(0),
                    gpus: 1,
                }]),
                rate: 1.0,
                payoff: None,
            });
        }
        plan
    }
}

#[test]
fn overheads_longer_than_a_round_carry_into_the_next_rounds() {
    // 3 s rounds, a 3 s restart and a 2 s start latency, as the daemon has on the test
    // cluster: the move in round 1 costs 5 s, 3 s in it and 2 s in round 2.
    let cfg = SimConfig {
        round_s: 3.0,
        restart_s: 3.0,
        model: hadar_sim::ClusterModel {
            start_latency_s: 2.0,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let w = Workload {
        cluster: cluster(2, 1),
        jobs: vec![job(0, 0.0, 1, 10.0, 1.0)],
    };
    let mut steps = Vec::new();
    let r = simulate_observed(&w, &mut MoveOnce { round: 0 }, &cfg, &mut |rec| {
        steps.push(rec.runs[0].steps)
    })
    .unwrap();
    assert_eq!(steps, vec![1.0, 0.0, 1.0, 3.0, 3.0, 2.0]);
    assert_eq!(r.jobs[0].finish_s, 17.0);
    assert_eq!(r.jobs[0].restarts, 1);
}

#[test]
fn a_burst_is_seen_in_part_and_the_rest_wakes_the_next_round_after_the_gap() {
    // The daemon's rounds on the test cluster: 3 s, woken by a submission no sooner than
    // 2 s after the last began, reading the queue 0.02 s after the submission that woke it.
    // Three jobs submitted 0.01 s apart: the first round (at 0.02 s) sees two; the third,
    // arriving mid-round, wakes the next at 2.02 s, not at the round's end (3.02 s).
    let cfg = SimConfig {
        round_s: 3.0,
        model: hadar_sim::ClusterModel {
            wake_read_s: 0.02,
            wake_gap_s: 2.0,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let w = Workload {
        cluster: cluster(4, 4),
        jobs: vec![
            job(0, 0.0, 1, 10.0, 1.0),
            job(1, 0.01, 1, 10.0, 1.0),
            job(2, 0.021, 1, 10.0, 1.0),
        ],
    };
    let mut rounds = Vec::new();
    let r = simulate_observed(&w, &mut Greedy::new(false), &cfg, &mut |rec| {
        rounds.push((
            rec.start_s,
            rec.runs.iter().map(|x| x.job.0).collect::<Vec<_>>(),
        ))
    })
    .unwrap();
    assert_eq!(rounds[0], (0.02, vec![0, 1]));
    assert!((rounds[1].0 - 2.02).abs() < 1e-9, "{rounds:?}");
    assert_eq!(rounds[1].1, vec![0, 1, 2]);
    // Jobs 0 and 1 lose nothing to the early round: they end 10 s after their start.
    assert!((r.jobs[0].finish_s - 10.02).abs() < 1e-9, "{:?}", r.jobs[0]);
    assert!((r.jobs[2].finish_s - 12.02).abs() < 1e-9, "{:?}", r.jobs[2]);
    // Off (the default): all three wait for a whole round from the first arrival.
    let mut first = Vec::new();
    simulate_observed(
        &w,
        &mut Greedy::new(false),
        &SimConfig {
            round_s: 3.0,
            ..SimConfig::default()
        },
        &mut |rec| first.push(rec.start_s),
    )
    .unwrap();
    assert_eq!(first[..2], [0.0, 3.0]);
}

/// The first job only: job 0 forked across every node, one GPU each; any other on node 0.
struct ForkFirst;

impl Policy for ForkFirst {
    fn name(&self) -> &str {
        "fork-first"
    }
    fn plan(&mut self, input: &RoundInput<'_>) -> RoundPlan {
        let mut plan = RoundPlan::default();
        let Some(js) = input.jobs.first() else {
            return plan;
        };
        let forked = js.id() == JobId(0);
        let nodes = match forked {
            true => input.cluster.node_ids().collect::<Vec<_>>(),
            false => vec![NodeId(0)],
        };
        let parts = nodes.into_iter().map(|node| Part {
            node,
            gpu_type: GpuType(0),
            gpus: 1,
        });
        plan.assignments.push(Assignment {
            job: js.id(),
            placement: match forked {
                true => Placement::forked(parts),
                false => Placement::gang(parts),
            },
            rate: 1.0,
            payoff: None,
        });
        plan
    }
}

/// Plays a job 0 of 20 steps and a job 1 of 5 arriving at `arrival` with [`ForkFirst`] in
/// 10 s rounds with 2 s of copy start-up (woken rounds no sooner than 2 s apart when `woken`):
/// each round's start and number of runs, and the two jobs' ends.
fn fork_first(arrival: f64, woken: bool, fixed_rounds: bool) -> (Vec<(f64, usize)>, f64, f64) {
    let w = Workload {
        cluster: cluster(2, 1),
        jobs: vec![job(0, 0.0, 1, 20.0, 1.0), job(1, arrival, 1, 5.0, 1.0)],
    };
    let cfg = SimConfig {
        round_s: 10.0,
        model: hadar_sim::ClusterModel {
            copy_startup_s: 2.0,
            wake_gap_s: if woken { 2.0 } else { 0.0 },
            fixed_rounds,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let mut rounds = Vec::new();
    let r = simulate_observed(&w, &mut ForkFirst, &cfg, &mut |rec| {
        rounds.push((rec.start_s, rec.runs.len()))
    })
    .unwrap();
    (rounds, r.jobs[0].finish_s, r.jobs[1].finish_s)
}

#[test]
fn on_the_daemons_clock_rounds_last_their_length_and_a_forked_job_ends_at_its_rounds_end() {
    // Job 0's two copies train 16 steps in its first round and its last 4 in 2 s of the
    // second (after the start-up). Job 1 arrives at 15 s.
    // Off: the second round ends when the copies stop (14 s), the job ends then, and job 1
    // starts on its arrival.
    assert_eq!(
        fork_first(15.0, false, false),
        (vec![(0.0, 1), (10.0, 1), (15.0, 1)], 14.0, 20.0)
    );
    // On: the second round lasts until 20 s, when the daemon's next round counts the
    // copies' steps and ends the job; job 1, arriving mid-round, waits for that round.
    assert_eq!(
        fork_first(15.0, false, true),
        (vec![(0.0, 1), (10.0, 1), (20.0, 1)], 20.0, 25.0)
    );
}

#[test]
fn on_the_daemons_clock_copies_outlast_a_woken_round_and_hold_their_gpus() {
    // Job 1's arrival at 1 s wakes a round at 2 s. On the daemon's clock job 0's copies,
    // started at 0 s, run their whole 10 s round (16 steps) and hold both GPUs, so the woken
    // round plans nothing; job 0 ends at 22 s (its last 4 steps in the round from 12 s) and
    // job 1 starts after it. Without it the woken round cuts job 0's copies at 2 s, before
    // their start-up is over, and plans job 0 anew.
    assert_eq!(
        fork_first(1.0, true, true),
        (vec![(0.0, 1), (2.0, 0), (12.0, 1), (22.0, 1)], 22.0, 27.0)
    );
    assert_eq!(
        fork_first(1.0, true, false),
        (vec![(0.0, 1), (2.0, 1), (12.0, 1), (16.0, 1)], 16.0, 21.0)
    );
}

#[test]
fn a_forked_jobs_copies_count_at_the_fork_efficiency() {
    // Job 0 (20 steps at 1 step/s per GPU) forked over two one-GPU nodes: 2 steps/s summed.
    // At efficiency 0.5 they count 1 step/s, so it takes 20 s instead of 10 s; a job on one
    // GPU (job 1, after it) is not forked and counts whole.
    let w = Workload {
        cluster: cluster(2, 1),
        jobs: vec![job(0, 0.0, 1, 20.0, 1.0), job(1, 0.0, 1, 5.0, 1.0)],
    };
    let at = |efficiency: f64| {
        let cfg = SimConfig {
            round_s: 100.0,
            model: hadar_sim::ClusterModel {
                fork_efficiency: efficiency,
                ..Default::default()
            },
            ..SimConfig::default()
        };
        let mut copies = Vec::new();
        let r = simulate_observed(&w, &mut ForkFirst, &cfg, &mut |rec| {
            copies.extend(rec.runs.iter().map(|run| run.copy_steps.clone()))
        })
        .unwrap();
        (r.jobs[0].finish_s, r.jobs[1].finish_s, copies)
    };
    let (whole, one, copies) = at(1.0);
    assert_eq!((whole, one), (10.0, 15.0));
    assert_eq!(copies[0], vec![10.0, 10.0]);
    let (half, one, copies) = at(0.5);
    assert_eq!((half, one), (20.0, 25.0));
    // The copies' steps still sum to the job's progress.
    assert_eq!(copies[0], vec![10.0, 10.0]);
    let bad = SimConfig {
        model: hadar_sim::ClusterModel {
            fork_efficiency: 0.0,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let e = simulate(&w, &mut ForkFirst, &bad).unwrap_err();
    assert!(
        e.to_string().contains("fork efficiency must be above 0"),
        "{e}"
    );
}
