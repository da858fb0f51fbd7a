//! Small builders for the policies' unit tests: jobs with hand-written rates and job states
//! that are running somewhere.

use crate::cluster::GpuType;
use crate::job::{Job, JobId, JobState};
use crate::placement::Placement;
use crate::throughput::{RateCurve, ThroughputProfile};
use std::sync::Arc;

/// A job with id `id` arriving at `arrival_s`, `workers` workers, `steps` steps, and on type
/// `i` the rate `rates[i]` with `workers` workers (`None`: it cannot run there).
pub(crate) fn job(id: u64, arrival_s: f64, workers: u32, steps: f64, rates: &[Option<f64>]) -> Job {
    let curves = rates
        .iter()
        .map(|r| match r {
            Some(r) => RateCurve::new([(workers, *r)]),
            None => RateCurve::default(),
        })
        .collect();
    Job {
        restart_s: None,
        id: JobId(id),
        kind: format!("test job {id}"),
        arrival_s,
        workers,
        total_steps: steps,
        weight: 1.0,
        throughput: ThroughputProfile::new(curves),
    }
}

/// A job that has just arrived, in a cluster of `types` types.
pub(crate) fn fresh(job: Job, types: usize) -> JobState {
    JobState::arrived(Arc::new(job), types)
}

/// A job that ran last round on `placement` for `run_s` seconds in all, at its rate there.
pub(crate) fn running(job: Job, types: usize, placement: Placement, run_s: f64) -> JobState {
    let mut js = JobState::arrived(Arc::new(job), types);
    let rate = placement.rate(&js.job.throughput, js.job.workers);
    js.remaining_steps = (js.job.total_steps - rate * run_s).max(1.0);
    js.run_s = run_s;
    for t in placement.types() {
        js.run_s_by_type[t.index()] = run_s;
    }
    js.attained_gpu_s = f64::from(js.job.workers) * run_s;
    js.rounds_run = 1;
    js.first_start_s = Some(js.job.arrival_s);
    js.placement = Some(placement);
    js
}

/// Shorthand for a type index.
pub(crate) fn ty(i: u16) -> GpuType {
    GpuType(i)
}
