//! The baselines (`yarn-cs`, `tiresias`, `slurm`) played by the real simulator on every Gavel
//! trace in `data/gavel/traces/`, on the cluster of Gavel's reference results (4 V100,
//! 4 P100 and 4 K80, one GPU per node, 360 s rounds): every job completes, and each policy's
//! defining behaviour shows in what actually ran.

use hadar_core::policies::slurm_backfill::requested_type;
use hadar_core::policies::{PolicyName, PolicyOptions, build};
use hadar_core::{JobId, JobState, Placement};
use hadar_formats::{ThroughputTable, load_trace, parse_cluster_spec};
use hadar_sim::{RoundRecord, SimConfig, SimReport, Workload, simulate_observed};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn gavel_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gavel")
}

fn workloads() -> Vec<(String, Workload)> {
    let data = gavel_data();
    let table =
        ThroughputTable::load(&data.join("simulation_throughputs.json")).expect("throughput table");
    let cluster = parse_cluster_spec("v100:4,p100:4,k80:4", 1).expect("cluster");
    let mut traces: Vec<PathBuf> = std::fs::read_dir(data.join("traces"))
        .expect("traces directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "trace"))
        .collect();
    traces.sort();
    assert_eq!(traces.len(), 6, "the six Gavel traces");
    traces
        .into_iter()
        .map(|t| {
            let jobs = load_trace(&t, &table, &cluster).expect("trace");
            let name = t
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            (
                name,
                Workload {
                    cluster: cluster.clone(),
                    jobs,
                },
            )
        })
        .collect()
}

/// Every run of every job, in round order: (round index, placement).
type Runs = HashMap<JobId, Vec<(u64, Placement)>>;

fn play(policy: PolicyName, seed: u64, w: &Workload) -> (SimReport, Runs) {
    let mut p = build(
        policy,
        &PolicyOptions {
            seed,
            ..PolicyOptions::default()
        },
    )
    .expect("a baseline builds");
    let cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    let mut runs: Runs = HashMap::new();
    let mut observe = |r: &RoundRecord| {
        for run in &r.runs {
            runs.entry(run.job)
                .or_default()
                .push((r.index, run.placement.clone()));
        }
    };
    let report =
        simulate_observed(w, p.as_mut(), &cfg, &mut observe).expect("the simulation finishes");
    (report, runs)
}

/// A non-preemptive policy: once started, a job runs every round on the same GPUs until done.
fn assert_never_preempted(policy: PolicyName, trace: &str, runs: &Runs) {
    for (job, r) in runs {
        let (first_round, first_placement) = &r[0];
        for (k, (round, placement)) in r.iter().enumerate() {
            assert_eq!(
                *round,
                first_round + k as u64,
                "{policy} on {trace}: job {job} paused in round {round}"
            );
            assert_eq!(
                placement, first_placement,
                "{policy} on {trace}: job {job} moved in round {round}"
            );
        }
    }
}

#[test]
fn every_job_completes_under_every_baseline() {
    for (trace, w) in workloads() {
        for policy in [PolicyName::YarnCs, PolicyName::Tiresias, PolicyName::Slurm] {
            let (report, runs) = play(policy, 0, &w);
            assert_eq!(
                report.metrics.jobs_completed,
                w.jobs.len(),
                "{policy} on {trace}"
            );
            assert_eq!(
                runs.len(),
                w.jobs.len(),
                "{policy} on {trace}: every job ran"
            );
            assert!(report.metrics.ttd_s > 0.0 && report.metrics.avg_jct_s > 0.0);
        }
    }
}

#[test]
fn yarn_cs_starts_jobs_in_arrival_order_consolidated_and_never_preempts() {
    for (trace, w) in workloads() {
        let (report, runs) = play(PolicyName::YarnCs, 0, &w);
        assert_never_preempted(PolicyName::YarnCs, &trace, &runs);
        for r in runs.values() {
            assert_eq!(
                r[0].1.types().len(),
                1,
                "yarn-cs on {trace}: one GPU type per job"
            );
        }
        // Strict FIFO: in arrival order, start times never go back.
        let mut outcomes = report.jobs.clone();
        outcomes.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.id.cmp(&b.id)));
        for pair in outcomes.windows(2) {
            assert!(
                pair[1].first_start_s >= pair[0].first_start_s,
                "yarn-cs on {trace}: job {} started at {} before earlier job {} at {}",
                pair[1].id,
                pair[1].first_start_s,
                pair[0].id,
                pair[0].first_start_s
            );
        }
    }
}

#[test]
fn slurm_runs_each_job_on_its_fastest_type_and_never_preempts() {
    for (trace, w) in workloads() {
        let (_, runs) = play(PolicyName::Slurm, 0, &w);
        assert_never_preempted(PolicyName::Slurm, &trace, &runs);
        for job in &w.jobs {
            let js = JobState::arrived(Arc::new(job.clone()), w.cluster.type_count());
            let (t, _) = requested_type(&js, &w.cluster).expect("every Gavel job fits some type");
            let r = &runs[&job.id];
            assert_eq!(
                r[0].1.types(),
                vec![t],
                "slurm on {trace}: job {} ran off its requested type",
                job.id
            );
        }
    }
}

#[test]
fn seeded_baselines_are_reproducible() {
    let (trace, w) = workloads().swap_remove(0);
    for policy in [PolicyName::YarnCs, PolicyName::Tiresias] {
        let (a, _) = play(policy, 5, &w);
        let (b, _) = play(policy, 5, &w);
        assert_eq!(a.metrics.ttd_s, b.metrics.ttd_s, "{policy} on {trace}");
        assert_eq!(
            a.metrics.avg_jct_s, b.metrics.avg_jct_s,
            "{policy} on {trace}"
        );
        let starts = |r: &SimReport| {
            r.jobs
                .iter()
                .map(|j| (j.id, j.first_start_s, j.finish_s))
                .collect::<Vec<_>>()
        };
        assert_eq!(starts(&a), starts(&b), "{policy} on {trace}");
    }
}
