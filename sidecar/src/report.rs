//! Turns the simulator's and the daemon's records into `hadar-report` runs.

use hadar_core::Cluster;
use hadar_report::{JobRecord, Run, Segment};
use hadar_sim::{RoundRecord, SimReport};

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
