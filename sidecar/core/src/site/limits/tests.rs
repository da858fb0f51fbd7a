use super::*;
use crate::cluster::{Cluster, Node};
use crate::job::Job;
use crate::placement::{Part, Placement};
use crate::plan::Assignment;
use crate::throughput::{RateCurve, ThroughputProfile};
use proptest::prelude::*;
use std::sync::Arc;

fn site_job(id: u64, user: &str, gpus: u32) -> SiteJob {
    SiteJob {
        id: JobId(id),
        user: user.into(),
        account: format!("acct-{user}"),
        qos: "gpu4".into(),
        partition: "gpu".into(),
        gpus,
        time_limit_s: Some(3600.0),
    }
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
    let plan = plan_within(&states, &jobs, &[], &per_user(4), &BTreeSet::new(), fcfs(5));
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
    let plan = plan_within(&states, &jobs, &[], &limits, &BTreeSet::new(), fcfs(8));
    assert_eq!(
        over_limits(&states, &jobs, &[], &limits, &BTreeSet::new()).len(),
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
        let plan = plan_within(&states, &jobs, &[], &per_user(limit), &BTreeSet::new(), fcfs(capacity));
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
