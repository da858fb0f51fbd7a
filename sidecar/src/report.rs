//! Turns the simulator's and the daemon's records into `hadar-report` runs.

use hadar_core::Cluster;
use hadar_report::{JobRecord, Run, Segment};
use hadar_sim::{RoundRecord, SimReport};
use hadar_store::{Intent, JobRow, RoundRow, Store, StoreError};
use std::collections::BTreeMap;

/// The stretches a round's runs held GPUs: one per part (node and type) of each placement.
pub fn segments_of(cluster: &Cluster, round: &RoundRecord) -> Vec<Segment> {
    round
        .runs
        .iter()
        .flat_map(|run| {
            run.placement.parts().iter().map(move |part| Segment {
                job: run.job.0,
                start_s: round.start_s,
                end_s: round.start_s + run.seconds,
                node: cluster.node(part.node).name.clone(),
                gpu_type: cluster.type_name(part.gpu_type).to_string(),
                gpus: part.gpus,
            })
        })
        .collect()
}

/// A policy's simulation as a report run.
pub fn run_of(cluster: &Cluster, report: &SimReport, segments: Vec<Segment>) -> Run {
    Run {
        name: report.policy.clone(),
        jobs: report
            .jobs
            .iter()
            .map(|j| JobRecord {
                id: j.id.0,
                kind: j.kind.clone(),
                gpus: j.workers,
                arrival_s: j.arrival_s,
                first_start_s: Some(j.first_start_s),
                finish_s: Some(j.finish_s),
                restarts: j.restarts,
            })
            .collect(),
        segments,
        capacity: cluster
            .types()
            .map(|t| (cluster.type_name(t).to_string(), cluster.total_of_type(t)))
            .collect(),
    }
}

/// A `hadar serve` run from its state: its jobs, where the daemon started them (its start
/// intents that succeeded, until the job's next preemption or hold, or its end), and the
/// last round's GPUs per type. Rounds and intents pruned from the store are not in it.
pub fn serve_run(store: &Store) -> Result<Run, StoreError> {
    let jobs = store.jobs()?;
    let intents = store.all_intents()?;
    let last = store.last_round()?.unwrap_or_default();
    let node_types = node_types(&last);
    let end_of_run = last
        .started_s
        .max(jobs.iter().filter_map(|j| j.finished_s).fold(0.0, f64::max));
    // Each job's intents, in the store's order, gathered in one pass over all of them.
    let mut by_job: BTreeMap<u64, Vec<&Intent>> = BTreeMap::new();
    for i in &intents {
        by_job.entry(i.job).or_default().push(i);
    }
    let mut segments = Vec::new();
    for job in &jobs {
        let own = by_job.get(&job.id).map(Vec::as_slice).unwrap_or(&[]);
        segments.extend(job_segments(job, own, &node_types, end_of_run));
    }
    Ok(Run {
        name: "serve".into(),
        jobs: jobs.iter().map(job_record).collect(),
        segments,
        capacity: last.capacity.clone(),
    })
}

fn job_record(j: &JobRow) -> JobRecord {
    JobRecord {
        id: j.id,
        kind: j.name.clone(),
        gpus: j.workers,
        arrival_s: j.arrival_s,
        first_start_s: j.first_start_s,
        finish_s: j.finished_s,
        restarts: j.preemptions,
    }
}

/// Each node's GPU type when it has one type (for placements Slurm typed by node).
fn node_types(round: &RoundRow) -> BTreeMap<String, String> {
    round
        .nodes
        .iter()
        .filter(|n| n.gpus.len() == 1)
        .filter_map(|n| Some((n.name.clone(), n.gpus.keys().next()?.clone())))
        .collect()
}

/// The stretches one job held GPUs: from each successful start to the next action that
/// took them away (preempt, requeue-hold, hold), the job's end, or the end of the run.
fn job_segments(
    job: &JobRow,
    intents: &[&Intent],
    node_types: &BTreeMap<String, String>,
    end_of_run: f64,
) -> Vec<Segment> {
    let mut out = Vec::new();
    for (k, start) in intents.iter().enumerate() {
        let ok = start.outcome.as_deref() == Some("ok");
        let (true, Some(placement)) = (start.action == "start" && ok, &start.placement) else {
            continue;
        };
        let from = start.done_s.unwrap_or(start.created_s);
        let until = intents[k + 1..]
            .iter()
            .find(|i| matches!(i.action.as_str(), "preempt" | "requeue-hold" | "hold"))
            .map(|i| i.done_s.unwrap_or(i.created_s))
            .or(job.finished_s)
            .unwrap_or(end_of_run);
        if until <= from {
            continue;
        }
        for (node, parts) in placement {
            for (gpu_type, gpus) in parts {
                // A type the plan left unnamed is the node's, when the node has one.
                let gpu_type = match (gpu_type.is_empty(), node_types.get(node)) {
                    (true, Some(t)) => t.clone(),
                    _ => gpu_type.clone(),
                };
                out.push(Segment {
                    job: job.id,
                    start_s: from,
                    end_s: until,
                    node: node.clone(),
                    gpu_type,
                    gpus: *gpus,
                });
            }
        }
    }
    out
}
