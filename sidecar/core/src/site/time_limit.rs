//! Time limits: a job started on a slower GPU type than its fastest may run past its
//! `TimeLimit` and be killed by Slurm. The rule: a job that is about to start (or restart)
//! is offered only the GPU types on which its remaining steps finish within its time limit
//! (`remaining / rate + restart_s <= limit`), as long as at least one type of the cluster
//! lets it finish. A job that can finish on no type is left as it is (Slurm would start it
//! and end it at its limit, as without hadar); a running job keeps its placement (its
//! limit counts from its start, which hadar does not move). Each restart starts a new time
//! limit in Slurm (hadar requeues to preempt), so the whole limit is the budget.

use crate::cluster::{Cluster, GpuType};
use crate::job::{Job, JobState};
use crate::plan::{RoundPlan, WaitReason};
use crate::throughput::{RateCurve, ThroughputProfile};
use std::collections::HashMap;
use std::sync::Arc;

/// The types of `cluster` on which `job` cannot finish its remaining steps within
/// `limit_s` (with `restart_s` to start), when at least one type lets it finish; otherwise
/// (every type is fast enough, or none is) an empty list.
pub fn too_slow(js: &JobState, cluster: &Cluster, limit_s: f64, restart_s: f64) -> Vec<GpuType> {
    if !(limit_s.is_finite() && limit_s > 0.0) || js.placement.is_some() {
        return Vec::new();
    }
    let finishes = |t: GpuType| {
        js.job
            .rate_on(t)
            .filter(|r| *r > 0.0)
            .map(|r| js.remaining_steps / r + restart_s.max(0.0) <= limit_s)
    };
    let verdicts: Vec<(GpuType, Option<bool>)> =
        cluster.types().map(|t| (t, finishes(t))).collect();
    if !verdicts.iter().any(|(_, v)| *v == Some(true)) {
        return Vec::new();
    }
    verdicts
        .into_iter()
        .filter(|(_, v)| *v == Some(false))
        .map(|(t, _)| t)
        .collect()
}

/// `js` with no throughput on `types`, so no policy places it there.
pub fn without_types(js: &JobState, types: &[GpuType]) -> JobState {
    let n = js.job.throughput.type_count();
    let curves: Vec<RateCurve> = (0..n)
        .map(|i| {
            if types.iter().any(|t| t.index() == i) {
                RateCurve::new([])
            } else {
                js.job.throughput.curve(GpuType(i as u16)).clone()
            }
        })
        .collect();
    let mut out = js.clone();
    out.job = Arc::new(Job {
        throughput: ThroughputProfile::new(curves),
        ..(*js.job).clone()
    });
    out
}

/// Applies the rule to every job with a time limit in `limits_s`: returns the jobs as the
/// policy should see them, and for each restricted job the names of the types taken away.
pub fn restrict(
    states: &[JobState],
    cluster: &Cluster,
    limits_s: &HashMap<crate::job::JobId, f64>,
    restart_s: f64,
) -> (Vec<JobState>, HashMap<crate::job::JobId, (f64, String)>) {
    let mut restricted = HashMap::new();
    let jobs = states
        .iter()
        .map(|js| {
            let Some(limit) = limits_s.get(&js.id()).copied() else {
                return js.clone();
            };
            let slow = too_slow(js, cluster, limit, restart_s);
            if slow.is_empty() {
                return js.clone();
            }
            let names: Vec<&str> = slow.iter().map(|t| cluster.type_name(*t)).collect();
            restricted.insert(js.id(), (limit, names.join(", ")));
            without_types(js, &slow)
        })
        .collect();
    (jobs, restricted)
}

/// Names the time limit as the reason a restricted job waits.
pub fn explain_waits(plan: &mut RoundPlan, restricted: &HashMap<crate::job::JobId, (f64, String)>) {
    for w in &mut plan.waiting {
        if let Some((limit_s, names)) = restricted.get(&w.job) {
            w.reason = WaitReason::TimeLimit {
                limit_s: *limit_s,
                too_slow: names.clone(),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Node;
    use crate::job::JobId;
    use crate::placement::Placement;

    fn cluster() -> Cluster {
        Cluster::new(
            vec!["fast".into(), "slow".into()],
            vec![Node {
                name: "n1".into(),
                gpus: vec![1, 1],
            }],
        )
        .unwrap()
    }

    fn job(steps: f64) -> JobState {
        let job = Job {
            restart_s: None,
            id: JobId(1),
            kind: "t".into(),
            arrival_s: 0.0,
            workers: 1,
            total_steps: steps,
            weight: 1.0,
            throughput: ThroughputProfile::new(vec![
                RateCurve::new([(1, 10.0)]),
                RateCurve::new([(1, 1.0)]),
            ]),
        };
        JobState::arrived(Arc::new(job), 2)
    }

    #[test]
    fn a_slow_type_that_misses_the_limit_is_taken_away() {
        let c = cluster();
        // 600 steps: 60 s on fast, 600 s on slow; limit 120 s.
        assert_eq!(too_slow(&job(600.0), &c, 120.0, 0.0), vec![GpuType(1)]);
        // Both finish: nothing taken.
        assert!(too_slow(&job(60.0), &c, 120.0, 0.0).is_empty());
        // Neither finishes: left as Slurm would run it.
        assert!(too_slow(&job(6000.0), &c, 120.0, 0.0).is_empty());
        // The restart counts.
        assert!(!too_slow(&job(100.0), &c, 120.0, 30.0).is_empty());
        let mut running = job(600.0);
        running.placement = Some(Placement::gang([crate::placement::Part {
            node: c.node_ids().next().unwrap(),
            gpu_type: GpuType(1),
            gpus: 1,
        }]));
        assert!(too_slow(&running, &c, 120.0, 0.0).is_empty());
    }

    #[test]
    fn restricted_jobs_lose_the_slow_type_and_say_why_they_wait() {
        let c = cluster();
        let limits = HashMap::from([(JobId(1), 120.0)]);
        let (jobs, restricted) = restrict(&[job(600.0)], &c, &limits, 0.0);
        assert_eq!(jobs[0].job.rate_on(GpuType(1)), None);
        assert_eq!(jobs[0].job.rate_on(GpuType(0)), Some(10.0));
        let mut plan = RoundPlan {
            assignments: vec![],
            waiting: vec![crate::plan::Waiting {
                job: JobId(1),
                reason: WaitReason::DoesNotFit,
            }],
        };
        explain_waits(&mut plan, &restricted);
        assert!(plan.waiting[0].reason.to_string().contains("slow"));
    }
}
