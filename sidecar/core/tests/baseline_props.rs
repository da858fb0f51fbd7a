//! Property tests for the baseline policies (`yarn-cs`, `tiresias`, `slurm`): random small
//! clusters and workloads are played round by round with a minimal stepper that follows the
//! simulator's rules, and every plan is checked against the invariants each policy promises.

use hadar_core::policies::packing::{pack_any_types, pack_consolidated, usable_types};
use hadar_core::policies::slurm_backfill::requested_type;
use hadar_core::policies::{PolicyName, PolicyOptions, build};
use hadar_core::{
    Cluster, FreeCapacity, Job, JobId, JobState, Node, RateCurve, RoundInput, RoundPlan,
    ThroughputProfile, WaitReason,
};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

const ROUND_S: f64 = 360.0;
const MAX_ROUNDS: usize = 3000;

/// A random cluster: 1-3 types, 1-5 nodes, 0-4 GPUs of each type per node, at least one GPU.
fn cluster() -> impl Strategy<Value = Cluster> {
    (1usize..=3, 1usize..=5).prop_flat_map(|(types, nodes)| {
        proptest::collection::vec(proptest::collection::vec(0u32..=4, types), nodes).prop_map(
            move |mut gpus| {
                if gpus.iter().flatten().all(|&g| g == 0) {
                    gpus[0][0] = 1;
                }
                let names = (0..types).map(|t| format!("t{t}")).collect();
                let nodes = gpus
                    .into_iter()
                    .enumerate()
                    .map(|(i, gpus)| Node {
                        name: format!("n{i}"),
                        gpus,
                    })
                    .collect();
                Cluster::new(names, nodes).expect("a generated cluster is valid")
            },
        )
    })
}

/// A job description before it is bound to a cluster: arrival, workers, steps, and per type
/// an optional rate (missing about a fifth of the time).
type RawJob = (f64, u32, f64, Vec<Option<f64>>);

fn raw_jobs() -> impl Strategy<Value = Vec<RawJob>> {
    let rate = prop_oneof![1 => Just(None), 4 => (0.5f64..10.0).prop_map(Some)];
    let job = (
        0.0f64..3000.0,
        prop_oneof![4 => 1u32..=2, 2 => 3u32..=4, 1 => Just(8u32)],
        100.0f64..20_000.0,
        proptest::collection::vec(rate, 3),
    );
    proptest::collection::vec(job, 1..=12)
}

fn bind(raw: &[RawJob], cluster: &Cluster) -> Vec<Arc<Job>> {
    let mut jobs: Vec<Arc<Job>> = raw
        .iter()
        .enumerate()
        .map(|(i, (arrival_s, workers, steps, rates))| {
            let curves = (0..cluster.type_count())
                .map(|t| match rates[t] {
                    Some(r) => RateCurve::new([(*workers, r)]),
                    None => RateCurve::default(),
                })
                .collect();
            Arc::new(Job {
                restart_s: None,
                id: JobId(i as u64),
                kind: format!("job {i}"),
                arrival_s: *arrival_s,
                workers: *workers,
                total_steps: *steps,
                weight: 1.0,
                throughput: ThroughputProfile::new(curves),
            })
        })
        .collect();
    jobs.sort_by(|a, b| a.arrival_order(b));
    jobs
}

/// True when `policy` can ever run `job` on `cluster` (its own notion of feasibility).
fn can_ever_run(policy: PolicyName, job: &Job, cluster: &Cluster) -> bool {
    let empty = FreeCapacity::of(cluster);
    let usable = usable_types(job, cluster);
    match policy {
        PolicyName::YarnCs => usable
            .iter()
            .any(|&t| pack_consolidated(&empty, t, job.workers).is_some()),
        PolicyName::Tiresias => {
            usable
                .iter()
                .map(|&t| cluster.total_of_type(t))
                .sum::<u32>()
                >= job.workers
        }
        PolicyName::Slurm => requested_type(
            &JobState::arrived(Arc::new(job.clone()), cluster.type_count()),
            cluster,
        )
        .is_some(),
        _ => unreachable!("only the baselines are tested here"),
    }
}

/// Every check a round's plan must pass for `policy`. `jobs` are the active jobs as the plan
/// saw them.
fn check_plan(
    policy: PolicyName,
    cluster: &Cluster,
    jobs: &[JobState],
    plan: &RoundPlan,
) -> Result<(), TestCaseError> {
    // Capacity, gangs all-or-nothing, known jobs, useful placements.
    if let Err(e) = plan.validate(cluster, jobs) {
        return Err(TestCaseError::fail(format!("{policy}: invalid plan: {e}")));
    }
    check_every_job_listed_once(policy, cluster, jobs, plan)?;
    let mut left = FreeCapacity::of(cluster);
    for a in &plan.assignments {
        left.take_placement(&a.placement)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let non_preemptive = matches!(policy, PolicyName::YarnCs | PolicyName::Slurm);
    if non_preemptive {
        for js in jobs {
            if let Some(p) = &js.placement {
                prop_assert_eq!(
                    plan.placement_of(js.id()),
                    Some(p),
                    "{}: running job {} was moved",
                    policy,
                    js.id()
                );
            }
        }
    }
    match policy {
        PolicyName::YarnCs => check_yarn_cs(cluster, jobs, plan, &left),
        PolicyName::Slurm => check_slurm(cluster, jobs, plan, &left),
        PolicyName::Tiresias => check_tiresias(cluster, jobs, plan, &left),
        _ => Ok(()),
    }
}

/// The reason `plan` gives for job `id`'s wait, if it waits.
fn reason(plan: &RoundPlan, id: JobId) -> Option<&WaitReason> {
    plan.waiting.iter().find(|w| w.job == id).map(|w| &w.reason)
}

/// Pending jobs (not running last round), in arrival order.
fn pending(jobs: &[JobState]) -> Vec<&JobState> {
    jobs.iter().filter(|js| js.placement.is_none()).collect()
}

/// Every active job is either assigned or waiting with a reason, exactly once; a job that can
/// never run waits for that reason.
fn check_every_job_listed_once(
    policy: PolicyName,
    cluster: &Cluster,
    jobs: &[JobState],
    plan: &RoundPlan,
) -> Result<(), TestCaseError> {
    let mut seen: HashMap<JobId, usize> = HashMap::new();
    for id in plan
        .assignments
        .iter()
        .map(|a| a.job)
        .chain(plan.waiting.iter().map(|w| w.job))
    {
        *seen.entry(id).or_default() += 1;
    }
    prop_assert_eq!(
        seen.len(),
        jobs.len(),
        "{}: some job is neither assigned nor waiting",
        policy
    );
    prop_assert!(
        seen.values().all(|&n| n == 1),
        "{}: a job is listed twice",
        policy
    );
    for js in jobs {
        if !can_ever_run(policy, &js.job, cluster) {
            prop_assert_eq!(
                reason(plan, js.id()),
                Some(&WaitReason::CannotRunAnywhere),
                "{}: job {}",
                policy,
                js.id()
            );
        }
    }
    Ok(())
}

/// YARN's capacity scheduler: FIFO, the head waits only if it cannot be consolidated in what
/// is `left`, one type per job.
fn check_yarn_cs(
    cluster: &Cluster,
    jobs: &[JobState],
    plan: &RoundPlan,
    left: &FreeCapacity,
) -> Result<(), TestCaseError> {
    let pending = pending(jobs);
    // FIFO: a started job has no earlier pending job left waiting, unless that one can
    // never run at all.
    for (k, later) in pending.iter().enumerate() {
        if plan.placement_of(later.id()).is_none() {
            continue;
        }
        for earlier in &pending[..k] {
            prop_assert!(
                plan.placement_of(earlier.id()).is_some()
                    || reason(plan, earlier.id()) == Some(&WaitReason::CannotRunAnywhere),
                "yarn-cs started job {} while earlier job {} waits",
                later.id(),
                earlier.id()
            );
        }
    }
    if let Some(head) = pending.iter().find(|js| {
        plan.placement_of(js.id()).is_none()
            && reason(plan, js.id()) != Some(&WaitReason::CannotRunAnywhere)
    }) {
        let fits = usable_types(&head.job, cluster)
            .iter()
            .any(|&t| pack_consolidated(left, t, head.job.workers).is_some());
        prop_assert!(
            !fits,
            "yarn-cs left head job {} waiting although it fits",
            head.id()
        );
    }
    for a in &plan.assignments {
        prop_assert_eq!(
            a.placement.types().len(),
            1,
            "yarn-cs mixed types for job {}",
            a.job
        );
    }
    Ok(())
}

/// Slurm: every job on its requested type; the first pending job that can run starts
/// whenever its type has room in what is `left`.
fn check_slurm(
    cluster: &Cluster,
    jobs: &[JobState],
    plan: &RoundPlan,
    left: &FreeCapacity,
) -> Result<(), TestCaseError> {
    let by_id: HashMap<JobId, &JobState> = jobs.iter().map(|js| (js.id(), js)).collect();
    for a in &plan.assignments {
        let (t, _) =
            requested_type(by_id[&a.job], cluster).expect("a started job has a requested type");
        prop_assert_eq!(
            a.placement.types(),
            vec![t],
            "slurm ran job {} off its requested type",
            a.job
        );
    }
    if let Some(head) = pending(jobs)
        .into_iter()
        .find(|js| requested_type(js, cluster).is_some())
        && plan.placement_of(head.id()).is_none()
    {
        let (t, _) = requested_type(head, cluster).expect("checked above");
        prop_assert!(
            pack_consolidated(left, t, head.job.workers).is_none(),
            "slurm left its highest-priority job {} waiting although it fits",
            head.id()
        );
    }
    Ok(())
}

/// Tiresias is not blocking: a job left waiting could not have taken any GPUs `left` over.
fn check_tiresias(
    cluster: &Cluster,
    jobs: &[JobState],
    plan: &RoundPlan,
    left: &FreeCapacity,
) -> Result<(), TestCaseError> {
    for w in &plan.waiting {
        let js = jobs
            .iter()
            .find(|js| js.id() == w.job)
            .expect("validated above");
        let usable = usable_types(&js.job, cluster);
        prop_assert!(
            pack_any_types(left, &usable, js.job.workers).is_none(),
            "tiresias left job {} waiting although {} usable GPUs are free",
            w.job,
            js.job.workers
        );
    }
    Ok(())
}

/// Plays `raw` on `cluster` under `policy` until every job that can run has finished, checking
/// each plan; fails if that takes more than `MAX_ROUNDS` rounds.
fn play(
    policy: PolicyName,
    seed: u64,
    cluster: &Cluster,
    raw: &[RawJob],
) -> Result<(), TestCaseError> {
    let jobs = bind(raw, cluster);
    let mut policy_impl = build(
        policy,
        &PolicyOptions {
            seed,
            ..PolicyOptions::default()
        },
    )
    .expect("a baseline builds");
    let types = cluster.type_count();
    let mut active: Vec<JobState> = Vec::new();
    let mut next = 0;
    let mut now = 0.0;
    for _ in 0..MAX_ROUNDS {
        while next < jobs.len() && jobs[next].arrival_s <= now {
            active.push(JobState::arrived(jobs[next].clone(), types));
            next += 1;
        }
        let runnable_left = active
            .iter()
            .any(|js| can_ever_run(policy, &js.job, cluster));
        if !runnable_left && next == jobs.len() {
            return Ok(());
        }
        let input = RoundInput {
            now_s: now,
            round_s: ROUND_S,
            restart_s: 0.0,
            cluster,
            jobs: &active,
        };
        let plan = policy_impl.plan(&input);
        check_plan(policy, cluster, &active, &plan)?;

        // Advance as the simulator does: each assigned job runs min(round, time to finish);
        // the round ends at the latest finish, or jumps to the next arrival if nothing runs.
        let mut longest: f64 = 0.0;
        for js in &mut active {
            match plan.placement_of(js.id()) {
                Some(p) => {
                    let rate = p.rate(&js.job.throughput, js.job.workers);
                    let to_finish = js.remaining_steps / rate;
                    let dt = if to_finish <= ROUND_S {
                        js.remaining_steps = 0.0;
                        to_finish
                    } else {
                        js.remaining_steps -= rate * ROUND_S;
                        ROUND_S
                    };
                    js.run_s += dt;
                    for t in p.types() {
                        js.run_s_by_type[t.index()] += dt;
                    }
                    js.attained_gpu_s += f64::from(js.job.workers) * dt;
                    js.rounds_run += 1;
                    js.first_start_s.get_or_insert(now);
                    js.placement = Some(p.clone());
                    longest = longest.max(dt);
                }
                None => js.placement = None,
            }
        }
        if longest > 0.0 {
            now += longest;
        } else if next < jobs.len() {
            now = jobs[next].arrival_s;
        } else {
            return Err(TestCaseError::fail(format!(
                "{policy}: nothing runs and nothing arrives, but jobs remain"
            )));
        }
        active.retain(|js| js.remaining_steps > 0.0);
    }
    Err(TestCaseError::fail(format!(
        "{policy}: jobs still unfinished after {MAX_ROUNDS} rounds"
    )))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn yarn_cs_plans_keep_every_invariant(c in cluster(), raw in raw_jobs(), seed in any::<u64>()) {
        play(PolicyName::YarnCs, seed, &c, &raw)?;
    }

    #[test]
    fn tiresias_plans_keep_every_invariant(c in cluster(), raw in raw_jobs(), seed in any::<u64>()) {
        play(PolicyName::Tiresias, seed, &c, &raw)?;
    }

    #[test]
    fn slurm_plans_keep_every_invariant(c in cluster(), raw in raw_jobs(), seed in any::<u64>()) {
        play(PolicyName::Slurm, seed, &c, &raw)?;
    }
}
