//! Unit tests of Gavel's round mechanism, driven by a minimal round loop with the
//! simulator's semantics (each assigned job runs `min(round, remaining / rate)` seconds; the
//! round lasts until the last of them stops).

use super::*;
use crate::job::Job;
use crate::throughput::{RateCurve, ThroughputProfile};
use proptest::prelude::*;
use std::sync::Arc;

fn cluster(counts: &[(&str, u32)]) -> Cluster {
    let c: Vec<(String, u32)> = counts.iter().map(|(n, c)| (n.to_string(), *c)).collect();
    Cluster::from_type_counts(&c, 1).unwrap()
}

/// A job with `workers` workers and the given rate on each type (0 = cannot run).
fn job(id: u64, arrival_s: f64, workers: u32, steps: f64, rates: &[f64]) -> Arc<Job> {
    let per_type = rates
        .iter()
        .map(|&r| RateCurve::new([(workers, r)]))
        .collect();
    Arc::new(Job {
        restart_s: None,
        id: JobId(id),
        kind: format!("job-{id}"),
        arrival_s,
        workers,
        total_steps: steps,
        weight: 1.0,
        throughput: ThroughputProfile::new(per_type),
    })
}

/// What a round did.
struct Round {
    now_s: f64,
    plan: RoundPlan,
}

/// Runs rounds until every job finished or `max_rounds` passed; returns the rounds and the
/// finish time of each job.
fn drive(
    policy: &mut GavelPolicy,
    cluster: &Cluster,
    jobs: &[Arc<Job>],
    max_rounds: usize,
) -> (Vec<Round>, HashMap<JobId, f64>) {
    let round_s = 360.0;
    let types = cluster.type_count();
    let mut pending: Vec<Arc<Job>> = jobs.to_vec();
    let mut active: Vec<JobState> = Vec::new();
    let mut finished = HashMap::new();
    let mut rounds = Vec::new();
    let mut now = 0.0;
    for _ in 0..max_rounds {
        pending.retain(|j| {
            if j.arrival_s <= now {
                active.push(JobState::arrived(j.clone(), types));
                false
            } else {
                true
            }
        });
        if active.is_empty() && pending.is_empty() {
            break;
        }
        let input = RoundInput {
            now_s: now,
            round_s,
            restart_s: 0.0,
            cluster,
            jobs: &active,
        };
        let plan = policy.plan(&input);
        plan.validate(cluster, &active).unwrap();
        let mut round_len: f64 = 0.0;
        for js in &mut active {
            match plan.placement_of(js.id()) {
                Some(p) => {
                    let rate = p.rate(&js.job.throughput, js.job.workers);
                    let run = (js.remaining_steps / rate).min(round_s);
                    js.remaining_steps -= run * rate;
                    if js.remaining_steps <= 1e-9 * js.job.total_steps {
                        js.remaining_steps = 0.0;
                        finished.insert(js.id(), now + run);
                    }
                    for t in p.types() {
                        js.run_s_by_type[t.index()] += run;
                    }
                    js.run_s += run;
                    js.rounds_run += 1;
                    js.placement = Some(p.clone());
                    round_len = round_len.max(run);
                }
                None => js.placement = None,
            }
        }
        active.retain(|j| j.remaining_steps > 0.0);
        rounds.push(Round { now_s: now, plan });
        if round_len > 0.0 {
            now += round_len;
        } else if let Some(next) = pending.iter().map(|j| j.arrival_s).reduce(f64::min) {
            now = next;
        } else {
            break;
        }
    }
    (rounds, finished)
}

#[test]
fn two_jobs_on_one_gpu_take_turns() {
    let c = cluster(&[("v100", 1)]);
    let jobs = [
        job(0, 0.0, 1, 3600.0, &[1.0]),
        job(1, 0.0, 1, 3600.0, &[1.0]),
    ];
    let mut p = GavelPolicy::max_min_fairness();
    let (rounds, finished) = drive(&mut p, &c, &jobs, 100);
    // Each gets half the GPU: over the first 8 rounds each runs 4 of them.
    let runs = |id| {
        rounds[..8]
            .iter()
            .filter(|r| r.plan.placement_of(JobId(id)).is_some())
            .count()
    };
    assert_eq!(runs(0), 4);
    assert_eq!(runs(1), 4);
    // After the first finish the allocation was re-solved for the survivor alone.
    let survivors: Vec<_> = (0..2).filter_map(|i| p.allocation_of(JobId(i))).collect();
    assert_eq!(survivors.len(), 1);
    assert!((survivors[0][0] - 1.0).abs() < 1e-4, "{survivors:?}");
    assert_eq!(finished.len(), 2);
    // Work-conserving: two hours of work on one GPU end at 7,200 s.
    let last = finished.values().copied().fold(0.0, f64::max);
    assert!((last - 7200.0).abs() < 1e-6, "{last}");
}

#[test]
fn a_gang_runs_on_one_type_with_all_its_workers() {
    let c = cluster(&[("v100", 2), ("k80", 2)]);
    let jobs = [
        job(0, 0.0, 2, 36_000.0, &[10.0, 5.0]),
        job(1, 0.0, 2, 36_000.0, &[10.0, 5.0]),
        job(2, 0.0, 1, 10_000.0, &[2.0, 1.0]),
    ];
    let mut p = GavelPolicy::max_min_fairness();
    let (rounds, finished) = drive(&mut p, &c, &jobs, 500);
    assert_eq!(finished.len(), 3);
    for r in &rounds {
        for a in &r.plan.assignments {
            assert_eq!(
                a.placement.types().len(),
                1,
                "round at {}: {:?}",
                r.now_s,
                a
            );
        }
    }
}

#[test]
fn jobs_keep_their_gpus_across_rounds() {
    // Four 1-GPU jobs on four GPUs: each runs every round on the same GPU.
    let c = cluster(&[("v100", 4)]);
    let jobs: Vec<_> = (0..4)
        .map(|i| job(i, 0.0, 1, 3600.0 + 360.0 * i as f64, &[1.0]))
        .collect();
    let mut p = GavelPolicy::max_min_fairness();
    let (rounds, _) = drive(&mut p, &c, &jobs, 5);
    for id in 0..4 {
        let places: Vec<_> = rounds
            .iter()
            .filter_map(|r| r.plan.placement_of(JobId(id)).cloned())
            .collect();
        assert_eq!(places.len(), 5);
        assert!(
            places.windows(2).all(|w| w[0] == w[1]),
            "job {id} moved: {places:?}"
        );
    }
}

#[test]
fn a_late_job_waits_for_the_next_reset() {
    // Jobs 0 and 1 start at 0 s, one per GPU. The reset at 0 s leaves "last reset" at
    // zero, which Gavel treats as "never reset", so job 2 (arriving at 400 s) gets an
    // allocation at the next round boundary (720 s). Job 3 arrives at 800 s and must wait
    // until 1,920 s have passed since that reset.
    let c = cluster(&[("v100", 1), ("k80", 1)]);
    let jobs = [
        job(0, 0.0, 1, 36_000.0, &[1.0, 1.0]),
        job(1, 0.0, 1, 36_000.0, &[1.0, 1.0]),
        job(2, 400.0, 1, 36_000.0, &[1.0, 1.0]),
        job(3, 800.0, 1, 36_000.0, &[1.0, 1.0]),
    ];
    let mut p = GavelPolicy::max_min_fairness();
    let (rounds, _) = drive(&mut p, &c, &jobs, 40);
    let first_run = |id| {
        rounds
            .iter()
            .find(|r| r.plan.placement_of(JobId(id)).is_some())
            .map(|r| r.now_s)
    };
    let reset_at_400 = rounds.iter().find(|r| r.now_s >= 400.0).unwrap().now_s;
    assert!(first_run(2).unwrap() >= reset_at_400);
    let job3 = first_run(3).unwrap();
    assert!(
        job3 >= reset_at_400 + 1920.0,
        "job 3 ran at {job3}, reset was at {reset_at_400}"
    );
    // While it waits it is listed with a reason.
    let waiting = rounds.iter().find(|r| r.now_s >= 800.0).unwrap();
    assert!(
        waiting
            .plan
            .waiting
            .iter()
            .any(|w| w.job == JobId(3) && w.reason == WaitReason::QueuedBehind { head: None })
    );
}

#[test]
fn when_only_unallocated_jobs_remain_the_allocation_is_recomputed_at_once() {
    // One GPU. A (1000 s) at 0 s, B (360 s) at 10 s: both get an allocation at 360 s (the
    // reset at 0 s counts as none). C (100 s) arrives at 400 s, within 1,920 s of that
    // reset, so it has no allocation while A and B run. Once they are done (about 1,360 s),
    // only C is left: rather than idling until 2,280 s, the allocation is re-solved.
    let c = cluster(&[("v100", 1)]);
    let jobs = [
        job(0, 0.0, 1, 1000.0, &[1.0]),
        job(1, 10.0, 1, 360.0, &[1.0]),
        job(2, 400.0, 1, 100.0, &[1.0]),
    ];
    let mut p = GavelPolicy::max_min_fairness();
    let (rounds, finished) = drive(&mut p, &c, &jobs, 100);
    assert_eq!(finished.len(), 3);
    let c_start = rounds
        .iter()
        .find(|r| r.plan.placement_of(JobId(2)).is_some())
        .unwrap()
        .now_s;
    assert!(c_start < 360.0 + 1920.0, "C started at {c_start}");
    assert_eq!(p.stats().early_resets, 1);
    // No round idled: the GPU was busy from 0 s to the end.
    let last = finished.values().copied().fold(0.0, f64::max);
    assert!((last - 1460.0).abs() < 1e-6, "{last}");
}

#[test]
fn makespan_policy_finishes_everything_near_the_optimum() {
    // Job 0 is 3x faster on v100, job 1 equally fast on both: the makespan LP puts job 0 on
    // the v100. Fluid optimum: job 0 alone on v100 needs 3600 / 3 = 1200 s, job 1 on the
    // k80 3600 s; the round mechanism lands within a few rounds of 3600 s.
    let c = cluster(&[("v100", 1), ("k80", 1)]);
    let jobs = [
        job(0, 0.0, 1, 3600.0, &[3.0, 1.0]),
        job(1, 0.0, 1, 3600.0, &[1.0, 1.0]),
    ];
    let mut p = GavelPolicy::min_total_duration();
    let (_, finished) = drive(&mut p, &c, &jobs, 200);
    assert_eq!(finished.len(), 2);
    let last = finished.values().copied().fold(0.0, f64::max);
    assert!(last < 3600.0 * 1.25, "makespan {last}");
    assert!(
        last >= 2400.0 - 1e-6,
        "makespan {last} beats the fluid bound"
    );
    assert!(p.stats().allocations >= 1 && p.stats().lp_failures == 0);
}

#[test]
fn jobs_that_cannot_run_are_left_waiting_with_a_reason() {
    let c = cluster(&[("v100", 2)]);
    let jobs = [
        job(0, 0.0, 1, 100.0, &[0.0]),
        job(1, 0.0, 4, 100.0, &[5.0]),
        job(2, 0.0, 1, 100.0, &[1.0]),
    ];
    let mut p = GavelPolicy::max_min_fairness();
    let types = c.type_count();
    let states: Vec<JobState> = jobs
        .iter()
        .map(|j| JobState::arrived(j.clone(), types))
        .collect();
    let plan = p.plan(&RoundInput {
        now_s: 0.0,
        round_s: 360.0,
        restart_s: 0.0,
        cluster: &c,
        jobs: &states,
    });
    assert_eq!(plan.assignments.len(), 1);
    assert_eq!(plan.assignments[0].job, JobId(2));
    let reason = |id| {
        plan.waiting
            .iter()
            .find(|w| w.job == JobId(id))
            .map(|w| w.reason.clone())
    };
    assert_eq!(reason(0), Some(WaitReason::CannotRunAnywhere));
    assert_eq!(reason(1), Some(WaitReason::DoesNotFit));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Every plan respects capacity and gangs (checked by `drive` through
    /// `RoundPlan::validate`), each job runs on one type, and every job completes.
    #[test]
    fn plans_are_valid_and_every_job_completes(
        specs in prop::collection::vec((0u32..3, 1u64..20, 0.0f64..2000.0, 0.5f64..4.0, 0.0f64..4.0), 1..10),
        makespan in any::<bool>(),
    ) {
        let c = cluster(&[("v100", 4), ("k80", 2)]);
        let jobs: Vec<Arc<Job>> = specs
            .iter()
            .enumerate()
            .map(|(i, &(w, minutes, arrival, fast, slow))| {
                let workers = 1u32 << w;
                let steps = 60.0 * minutes as f64 * fast;
                job(i as u64, arrival.floor(), workers, steps, &[fast, if slow < 1.0 { 0.0 } else { slow }])
            })
            .collect();
        let mut sorted = jobs.clone();
        sorted.sort_by(|a, b| a.arrival_order(b));
        let mut p = if makespan { GavelPolicy::min_total_duration() } else { GavelPolicy::max_min_fairness() };
        let (rounds, finished) = drive(&mut p, &c, &sorted, 5000);
        prop_assert_eq!(finished.len(), jobs.len());
        // The fluid bounds stay below what the schedule achieved, the forking one lowest.
        let plain: Vec<Job> = sorted.iter().map(|j| (**j).clone()).collect();
        let first = plain.iter().map(|j| j.arrival_s).fold(f64::INFINITY, f64::min);
        let ttd = finished.values().copied().fold(first, f64::max) - first;
        let lb = crate::bounds::fluid_makespan(&c, &plain).unwrap();
        let fork = crate::bounds::fluid_makespan_forking(&c, &plain).unwrap();
        prop_assert!(lb <= ttd * (1.0 + 1e-6), "bound {} above makespan {}", lb, ttd);
        prop_assert!(fork <= lb * (1.0 + 1e-6), "forking bound {} above plain bound {}", fork, lb);
        for r in &rounds {
            for a in &r.plan.assignments {
                prop_assert_eq!(a.placement.types().len(), 1);
            }
        }
    }
}
