use super::*;
use crate::cluster::{Cluster, Node};
use crate::job::Job;
use crate::placement::{Part, Placement};
use crate::plan::Assignment;
use crate::throughput::{RateCurve, ThroughputProfile};
use proptest::prelude::*;
use std::sync::Arc;

fn site_job(id: u64, user: &str, gpus: u32) -> SiteJob {
    let mut j = SiteJob::new(
        JobId(id),
        user,
        &format!("acct-{user}"),
        "gpu4",
        "gpu",
        gpus,
    );
    j.time_limit_s = Some(3600.0);
    j
}

fn names() -> Vec<String> {
    vec!["v100".into()]
}

fn per_user(n: u32) -> Vec<Limit> {
    vec![Limit {
        scope: Scope::QosPerUser("gpu4".into()),
        bound: Bound::Gpus(n),
        label: format!("QOS gpu4 MaxTRESPerUser=gres/gpu={n}"),
    }]
}

fn cluster(gpus: u32) -> Cluster {
    Cluster::new(
        vec!["v100".into()],
        vec![Node {
            name: "n1".into(),
            gpus: vec![gpus],
        }],
    )
    .unwrap()
}

fn state(id: u64, workers: u32) -> JobState {
    let job = Job {
        restart_s: None,
        id: JobId(id),
        kind: "t".into(),
        arrival_s: id as f64,
        workers,
        total_steps: 100.0,
        weight: 1.0,
        throughput: ThroughputProfile::new(vec![RateCurve::new([(workers, 1.0)])]),
    };
    JobState::arrived(Arc::new(job), 1)
}

/// A stand-in policy: first come, first served on one node.
fn fcfs(capacity: u32) -> impl FnMut(&[JobState]) -> RoundPlan {
    move |jobs: &[JobState]| {
        let mut free = capacity;
        let mut plan = RoundPlan::default();
        for j in jobs {
            if j.job.workers <= free {
                free -= j.job.workers;
                plan.assignments.push(Assignment {
                    job: j.id(),
                    placement: Placement::gang([Part {
                        node: crate::cluster::NodeId(0),
                        gpu_type: crate::cluster::GpuType(0),
                        gpus: j.job.workers,
                    }]),
                    rate: 1.0,
                    payoff: None,
                });
            } else {
                plan.waiting.push(Waiting {
                    job: j.id(),
                    reason: WaitReason::DoesNotFit,
                });
            }
        }
        plan
    }
}

#[test]
fn a_users_fifth_gpu_is_never_planned_and_goes_to_another_user() {
    let _ = cluster(8);
    // alice: five 1-GPU jobs; bob: one 1-GPU job, last in line; 6 GPUs.
    let mut jobs: HashMap<JobId, SiteJob> = (1..=5)
        .map(|i| (JobId(i), site_job(i, "alice", 1)))
        .collect();
    jobs.insert(JobId(6), site_job(6, "bob", 1));
    let states: Vec<JobState> = (1..=6).map(|i| state(i, 1)).collect();
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &per_user(4),
        &BTreeSet::new(),
        &names(),
        fcfs(5),
    );
    let placed: Vec<u64> = plan.assignments.iter().map(|a| a.job.0).collect();
    assert_eq!(placed, vec![1, 2, 3, 4, 6]);
    let w = plan.waiting.iter().find(|w| w.job == JobId(5)).unwrap();
    assert_eq!(
        w.reason,
        WaitReason::SiteLimit {
            limit: "QOS gpu4 MaxTRESPerUser=gres/gpu=4".into()
        }
    );
    assert!(w.reason.to_string().contains("MaxTRESPerUser=gres/gpu=4"));
}

#[test]
fn gpus_held_outside_the_plan_count() {
    let jobs = HashMap::from([(JobId(1), site_job(1, "alice", 2))]);
    let held = vec![site_job(9, "alice", 3)];
    let plan = plan_within(
        &[state(1, 2)],
        &jobs,
        &held,
        &per_user(4),
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert!(plan.assignments.is_empty());
    assert_eq!(plan.waiting.len(), 1);
}

#[test]
fn running_jobs_are_never_taken_out_and_wall_limits_forbid() {
    let mut running = state(1, 4);
    running.placement = Some(Placement::gang([Part {
        node: crate::cluster::NodeId(0),
        gpu_type: crate::cluster::GpuType(0),
        gpus: 4,
    }]));
    let mut long = site_job(2, "bob", 1);
    long.time_limit_s = Some(7200.0);
    let jobs = HashMap::from([(JobId(1), site_job(1, "alice", 4)), (JobId(2), long)]);
    let mut limits = per_user(2);
    limits.push(Limit {
        scope: Scope::Partition("gpu".into()),
        bound: Bound::WallSeconds(3600.0),
        label: "partition gpu MaxTime=01:00:00".into(),
    });
    let plan = plan_within(
        &[running, state(2, 1)],
        &jobs,
        &[],
        &limits,
        &BTreeSet::from([JobId(1)]),
        &names(),
        fcfs(8),
    );
    assert_eq!(plan.assignments.len(), 1);
    assert_eq!(plan.assignments[0].job, JobId(1));
    assert!(
        matches!(&plan.waiting[0].reason, WaitReason::SiteLimit { limit } if limit.contains("MaxTime"))
    );
}

#[test]
fn job_count_and_group_limits() {
    let jobs: HashMap<JobId, SiteJob> = (1..=3)
        .map(|i| (JobId(i), site_job(i, "alice", 1)))
        .collect();
    let limits = vec![
        Limit {
            scope: Scope::User {
                account: "acct-alice".into(),
                user: "alice".into(),
            },
            bound: Bound::Jobs(2),
            label: "MaxJobs=2".into(),
        },
        Limit {
            scope: Scope::Qos("gpu4".into()),
            bound: Bound::Gpus(8),
            label: "GrpTRES".into(),
        },
    ];
    let states: Vec<JobState> = (1..=3).map(|i| state(i, 1)).collect();
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &limits,
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert_eq!(
        over_limits(&states, &jobs, &[], &limits, &BTreeSet::new(), &names()).len(),
        1
    );
    assert_eq!(plan.assignments.len(), 2);
}

proptest! {
    /// Whatever the jobs and the limit, no user ends up over it with the plan's jobs, and
    /// every job is either placed or waiting.
    #[test]
    fn no_user_goes_over_the_limit(
        sizes in proptest::collection::vec((0usize..3, 1u32..4), 1..12),
        limit in 1u32..6,
        capacity in 1u32..16,
    ) {
        let users = ["a", "b", "c"];
        let jobs: HashMap<JobId, SiteJob> = sizes.iter().enumerate()
            .map(|(i, (u, g))| (JobId(i as u64), site_job(i as u64, users[*u], *g)))
            .collect();
        let states: Vec<JobState> = sizes.iter().enumerate().map(|(i, (_, g))| state(i as u64, *g)).collect();
        let plan = plan_within(&states, &jobs, &[], &per_user(limit), &BTreeSet::new(), &names(), fcfs(capacity));
        for u in users {
            let used: u32 = plan.assignments.iter().filter(|a| jobs[&a.job].user == u).map(|a| jobs[&a.job].gpus).sum();
            prop_assert!(used <= limit);
        }
        prop_assert_eq!(plan.assignments.len() + plan.waiting.len(), states.len());
        // Work conservation within the limit: a waiting job that fits the free GPUs waits for its limit.
        let used: u32 = plan.assignments.iter().map(|a| jobs[&a.job].gpus).sum();
        for w in &plan.waiting {
            if jobs[&w.job].gpus + used <= capacity {
                let blocked_by_limit = matches!(w.reason, WaitReason::SiteLimit { .. });
                let earlier_waiter = plan.waiting.iter().any(|o| o.job < w.job && !matches!(o.reason, WaitReason::SiteLimit { .. }));
                prop_assert!(blocked_by_limit || earlier_waiter);
            }
        }
    }
}

fn two_types() -> Vec<String> {
    vec!["v100".into(), "k80".into()]
}

/// A 1-GPU job that runs on both types (v100 first).
fn state2(id: u64) -> JobState {
    let job = Job {
        restart_s: None,
        id: JobId(id),
        kind: "t".into(),
        arrival_s: id as f64,
        workers: 1,
        total_steps: 100.0,
        weight: 1.0,
        throughput: ThroughputProfile::new(vec![
            RateCurve::new([(1, 2.0)]),
            RateCurve::new([(1, 1.0)]),
        ]),
    };
    JobState::arrived(Arc::new(job), 2)
}

/// First come, first served over two types, each job on the first type it has a rate on
/// with a free GPU.
fn fcfs2(caps: [u32; 2]) -> impl FnMut(&[JobState]) -> RoundPlan {
    move |jobs: &[JobState]| {
        let mut free = caps;
        let mut plan = RoundPlan::default();
        for j in jobs {
            let t = (0..2).find(|t| {
                j.job.rate_on(crate::cluster::GpuType(*t as u16)).is_some()
                    && free[*t] >= j.job.workers
            });
            match t {
                Some(t) => {
                    free[t] -= j.job.workers;
                    plan.assignments.push(Assignment {
                        job: j.id(),
                        placement: Placement::gang([Part {
                            node: crate::cluster::NodeId(0),
                            gpu_type: crate::cluster::GpuType(t as u16),
                            gpus: j.job.workers,
                        }]),
                        rate: 1.0,
                        payoff: None,
                    });
                }
                None => plan.waiting.push(Waiting {
                    job: j.id(),
                    reason: WaitReason::DoesNotFit,
                }),
            }
        }
        plan
    }
}

fn limit(scope: Scope, bound: Bound, label: &str) -> Vec<Limit> {
    vec![Limit {
        scope,
        bound,
        label: label.into(),
    }]
}

#[test]
fn a_typed_gpu_limit_counts_only_that_type_and_sends_the_rest_elsewhere() {
    // alice: four 1-GPU jobs; at most 2 v100s; 4 v100s and 1 k80 free.
    let jobs: HashMap<JobId, SiteJob> = (1..=4)
        .map(|i| (JobId(i), site_job(i, "alice", 1)))
        .collect();
    let states: Vec<JobState> = (1..=4).map(state2).collect();
    let limits = limit(
        Scope::QosPerUser("gpu4".into()),
        Bound::TypedGpus("v100".into(), 2),
        "QOSMaxGRESPerUser: QOS gpu4 MaxTRESPerUser=gres/gpu:v100=2",
    );
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &limits,
        &BTreeSet::new(),
        &two_types(),
        fcfs2([4, 1]),
    );
    let on = |t: u16| {
        plan.assignments
            .iter()
            .filter(|a| a.placement.types() == vec![crate::cluster::GpuType(t)])
            .count()
    };
    assert_eq!((on(0), on(1)), (2, 1), "{plan:?}");
    assert_eq!(plan.waiting.len(), 1);
    assert!(
        matches!(&plan.waiting[0].reason, WaitReason::SiteLimit { limit } if limit.contains("gres/gpu:v100=2"))
    );
    // Held typed GPUs count, untyped ones do not: alice holds 2 k80s elsewhere.
    let mut held = site_job(9, "alice", 2);
    held.gpu_types = vec![("k80".into(), 2)];
    let plan = plan_within(
        &states[..2],
        &jobs,
        &[held.clone()],
        &limits,
        &BTreeSet::new(),
        &two_types(),
        fcfs2([4, 0]),
    );
    assert_eq!(plan.assignments.len(), 2);
    held.gpu_types = vec![("v100".into(), 2)];
    let plan = plan_within(
        &states[..2],
        &jobs,
        &[held],
        &limits,
        &BTreeSet::new(),
        &two_types(),
        fcfs2([4, 0]),
    );
    assert!(plan.assignments.is_empty());
    // An untyped limit still counts every type.
    let untyped = per_user(3);
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &untyped,
        &BTreeSet::new(),
        &two_types(),
        fcfs2([2, 2]),
    );
    assert_eq!(plan.assignments.len(), 3);
}

#[test]
fn cpus_and_memory_count_against_their_limits() {
    let mut jobs: HashMap<JobId, SiteJob> = HashMap::new();
    for i in 1..=3 {
        let mut j = site_job(i, "alice", 1);
        j.cpus = 4;
        j.mem_mb = 1000;
        jobs.insert(JobId(i), j);
    }
    let states: Vec<JobState> = (1..=3).map(|i| state(i, 1)).collect();
    let run = |limits: &[Limit]| {
        plan_within(
            &states,
            &jobs,
            &[],
            limits,
            &BTreeSet::new(),
            &names(),
            fcfs(8),
        )
    };
    let cpus = limit(
        Scope::Account("acct-alice".into()),
        Bound::Cpus(8),
        "AssocGrpCpuLimit",
    );
    assert_eq!(run(&cpus).assignments.len(), 2);
    let mem = limit(
        Scope::QosPerUser("gpu4".into()),
        Bound::MemMb(2999),
        "QOSMaxMemoryPerUser",
    );
    let p = run(&mem);
    assert_eq!(p.assignments.len(), 2);
    assert!(
        p.waiting[0]
            .reason
            .to_string()
            .contains("QOSMaxMemoryPerUser")
    );
    let per_job = limit(
        Scope::Qos("gpu4".into()),
        Bound::CpusPerJob(3),
        "QOSMaxCpuPerJobLimit",
    );
    assert!(run(&per_job).assignments.is_empty());
    let enough = limit(
        Scope::Qos("gpu4".into()),
        Bound::MemMb(3000),
        "QOSGrpMemLimit",
    );
    assert_eq!(run(&enough).assignments.len(), 3);
}

#[test]
fn a_parent_accounts_group_limit_covers_its_children() {
    // Two child accounts under `dept`, GrpTRES=gres/gpu=3 on dept.
    let mut jobs: HashMap<JobId, SiteJob> = HashMap::new();
    for (i, acct) in [(1, "c1"), (2, "c1"), (3, "c2"), (4, "c2"), (5, "other")] {
        let mut j = SiteJob::new(JobId(i), "alice", acct, "normal", "gpu", 1);
        if acct != "other" {
            j.parents = vec!["dept".into(), "root".into()];
        }
        jobs.insert(JobId(i), j);
    }
    let states: Vec<JobState> = (1..=5).map(|i| state(i, 1)).collect();
    let limits = limit(
        Scope::AccountTree("dept".into()),
        Bound::Gpus(3),
        "AssocGrpGRES: account dept GrpTRES=gres/gpu=3",
    );
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &limits,
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    let placed: Vec<u64> = plan.assignments.iter().map(|a| a.job.0).collect();
    assert_eq!(placed, vec![1, 2, 3, 5]);
    assert_eq!(plan.waiting[0].job, JobId(4));
    // The account's own scope (Max limits) does not cover its children.
    let own = limit(Scope::Account("dept".into()), Bound::Gpus(0), "own");
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &own,
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert_eq!(plan.assignments.len(), 5);
}

#[test]
fn gpu_minutes_running_and_used() {
    // 1-GPU jobs of 60 min; GrpTRESRunMins=gres/gpu=150: a running job with 40 min left
    // (40) and two new ones (60 each) is 160: the second waits.
    let mut jobs: HashMap<JobId, SiteJob> = HashMap::new();
    for i in 1..=3 {
        let mut j = site_job(i, "alice", 1);
        j.time_limit_s = Some(3600.0);
        jobs.insert(JobId(i), j);
    }
    let mut running = site_job(9, "alice", 1);
    running.time_left_s = Some(40.0 * 60.0);
    let states: Vec<JobState> = (1..=2).map(|i| state(i, 1)).collect();
    let run_mins = limit(
        Scope::AccountTree("acct-alice".into()),
        Bound::GpuRunMinutes(150),
        "AssocGrpGRESRunMinutes",
    );
    let plan = plan_within(
        &states,
        &jobs,
        &[running.clone()],
        &run_mins,
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert_eq!(plan.assignments.len(), 1);
    assert!(
        plan.waiting[0]
            .reason
            .to_string()
            .contains("AssocGrpGRESRunMinutes")
    );
    // Without the running job both fit (120).
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &run_mins,
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert_eq!(plan.assignments.len(), 2);
    // A job without a time limit never fits a run-minutes limit.
    let mut unlimited = jobs.clone();
    unlimited.get_mut(&JobId(1)).unwrap().time_limit_s = None;
    let plan = plan_within(
        &states[..1],
        &unlimited,
        &[],
        &run_mins,
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert!(plan.assignments.is_empty());
    // Accumulated usage: under the limit every job may start; at it none.
    let mins = |used| {
        limit(
            Scope::AccountTree("acct-alice".into()),
            Bound::GpuMinutes { limit: 100, used },
            "AssocGrpGRESMinutes",
        )
    };
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &mins(99),
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert_eq!(plan.assignments.len(), 2);
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &mins(100),
        &BTreeSet::new(),
        &names(),
        fcfs(8),
    );
    assert!(plan.assignments.is_empty());
    assert!(
        plan.waiting
            .iter()
            .all(|w| w.reason.to_string().contains("AssocGrpGRESMinutes"))
    );
}

#[test]
fn a_running_job_is_not_moved_onto_a_type_over_its_limit() {
    // alice runs two jobs on v100s (her limit) and one on a k80; the policy would move the
    // k80 job to a free v100: it stays on the k80.
    let jobs: HashMap<JobId, SiteJob> = (1..=3)
        .map(|i| (JobId(i), site_job(i, "alice", 1)))
        .collect();
    let on = |id: u64, t: u16| {
        let mut s = state2(id);
        s.placement = Some(Placement::gang([Part {
            node: crate::cluster::NodeId(0),
            gpu_type: crate::cluster::GpuType(t),
            gpus: 1,
        }]));
        s
    };
    let states = vec![on(1, 0), on(2, 0), on(3, 1)];
    let limits = limit(
        Scope::QosPerUser("gpu4".into()),
        Bound::TypedGpus("v100".into(), 2),
        "v100=2",
    );
    let plan = plan_within(
        &states,
        &jobs,
        &[],
        &limits,
        &BTreeSet::from([JobId(1), JobId(2), JobId(3)]),
        &two_types(),
        fcfs2([4, 1]),
    );
    assert_eq!(plan.assignments.len(), 3);
    let third = plan.assignments.iter().find(|a| a.job == JobId(3)).unwrap();
    assert_eq!(third.placement.types(), vec![crate::cluster::GpuType(1)]);
}

#[test]
fn a_full_typed_limit_is_known_before_the_plan() {
    // alice holds two v100s (her limit): her waiting job may not have a v100, bob's may.
    let mut held = site_job(9, "alice", 2);
    held.gpu_types = vec![("v100".into(), 2)];
    let jobs = HashMap::from([
        (JobId(1), site_job(1, "alice", 1)),
        (JobId(2), site_job(2, "bob", 1)),
    ]);
    let limits = limit(
        Scope::QosPerUser("gpu4".into()),
        Bound::TypedGpus("v100".into(), 2),
        "v100=2",
    );
    let full = full_types(
        &[state2(1), state2(2)],
        &jobs,
        &[held],
        &limits,
        &BTreeSet::new(),
        &two_types(),
    );
    assert_eq!(
        full,
        vec![(
            JobId(1),
            vec![crate::cluster::GpuType(0)],
            "v100=2".to_string()
        )]
    );
}
