//! Turns the simulator's and the daemon's records into `hadar-report` runs.

use hadar_core::Cluster;
use hadar_report::{JobRecord, Run, Segment};
use hadar_sim::{RoundRecord, SimReport};
use hadar_store::{Intent, IntentKind, JobRow, Outcome, RoundRow, Store, StoreError};
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
        let ok = start.outcome == Some(Outcome::Ok);
        let (true, Some(placement)) = (start.action == IntentKind::Start && ok, &start.placement)
        else {
            continue;
        };
        let from = start.done_s.unwrap_or(start.created_s);
        let until = intents[k + 1..]
            .iter()
            .find(|i| i.action.requeues_or_holds())
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

/// A shadow-mode serve run (see `hadar_ops::shadow`) compared with Hadar's prediction:
/// the run Slurm made (`slurm`), the same jobs played through the simulator under Hadar on
/// the last round's cluster (`hadar-predicted`), and the per-job comparison.
///
/// Each job's amount of work is derived from what Slurm measured: its runtime on the GPU type
/// it ran on times its rate there (steps/s), the rate coming from the throughput table for
/// the job type its Slurm job name names (`resnet50`, `transformer-b128`, ...) and being the
/// default rate, equal on every type, for any other job (whose predicted JCT then differs
/// from Slurm's by queueing only). A gang over several types is taken to run at its slowest
/// type's rate. The simulator then runs that work at the table's rates on every type.
pub fn shadow_comparison(
    store: &Store,
) -> anyhow::Result<(Run, Run, hadar_report::ShadowComparison)> {
    use anyhow::Context;
    let catalog = kept_config(store)?
        .map(|c| c.gpu_catalog())
        .unwrap_or_default();
    let table = hadar_formats::embedded::throughputs()?.with_catalog(catalog);
    let last = store.last_round()?.unwrap_or_default();
    let node_types = node_types(&last);
    let cluster = last_cluster(&last).context("the last shadow round recorded no GPU node")?;
    let types: Vec<String> = cluster
        .types()
        .map(|t| cluster.type_name(t).to_string())
        .collect();
    let priors = hadar_daemon::spec::Priors {
        default_rate_per_gpu: 1.0,
        throughput_scale: 1.0,
    };
    let rows: Vec<JobRow> = store
        .jobs()?
        .into_iter()
        .filter(|j| j.finished_s.is_some() && j.first_start_s.is_some())
        .collect();
    let mut jobs = Vec::new();
    let mut ran_on = BTreeMap::new();
    let mut runtime = BTreeMap::new();
    let mut segments = Vec::new();
    for r in &rows {
        let (Some(start), Some(end), Some(placement)) =
            (r.first_start_s, r.finished_s, r.placement.as_ref())
        else {
            continue;
        };
        let spec = hadar_ops::shadow::spec_of(r, &table);
        let (throughput, origins) =
            hadar_daemon::spec::profile(&spec, &types, &[], &table, &priors);
        let mut ran: Vec<String> = Vec::new();
        for (node, parts) in placement {
            for (t, gpus) in parts {
                let t = match (t.is_empty(), node_types.get(node)) {
                    (true, Some(nt)) => nt.clone(),
                    _ => t.clone(),
                };
                if !ran.contains(&t) {
                    ran.push(t.clone());
                }
                segments.push(Segment {
                    job: r.id,
                    start_s: start,
                    end_s: end,
                    node: node.clone(),
                    gpu_type: t,
                    gpus: *gpus,
                });
            }
        }
        let rate = ran
            .iter()
            .filter_map(|t| {
                origins
                    .iter()
                    .find(|(u, _, _)| u.eq_ignore_ascii_case(t))
                    .and_then(|(_, r, _)| *r)
            })
            .reduce(f64::min)
            .unwrap_or(priors.default_rate_per_gpu * r.workers as f64);
        let seconds = (end - start).max(0.0);
        jobs.push(hadar_core::Job {
            restart_s: None,
            id: hadar_core::JobId(r.id),
            kind: r.name.clone(),
            arrival_s: r.arrival_s,
            workers: r.workers,
            total_steps: (seconds * rate).max(1e-6),
            weight: 1.0,
            throughput,
        });
        ran_on.insert(r.id, ran.join("+"));
        runtime.insert(r.id, seconds);
    }
    if jobs.is_empty() {
        anyhow::bail!("no shadowed job has run to its end yet: nothing to compare");
    }
    let slurm = Run {
        name: "slurm".into(),
        jobs: rows
            .iter()
            .filter(|r| ran_on.contains_key(&r.id))
            .map(job_record)
            .collect(),
        segments,
        capacity: last.capacity.clone(),
    };
    let hadar = predicted_run(store, &cluster, jobs)?;
    let comparison = hadar_report::ShadowComparison::new(&slurm, &hadar, &ran_on, &runtime);
    Ok((slurm, hadar, comparison))
}

/// The shadowed jobs (`jobs`, as observed) played by the simulator on `cluster` under the
/// policy the shadow decided with ([`shadow_policy`]), with the round and restart seconds the
/// shadow recorded.
fn predicted_run(
    store: &Store,
    cluster: &Cluster,
    jobs: Vec<hadar_core::Job>,
) -> anyhow::Result<Run> {
    use anyhow::Context;
    let meta = |k: &str, d: f64| {
        store
            .meta(k)
            .ok()
            .flatten()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(d)
    };
    let round_s = meta(hadar_ops::shadow::ROUND_SECONDS_KEY, 360.0);
    let cfg = hadar_sim::SimConfig {
        round_s,
        restart_s: meta(hadar_ops::shadow::RESTART_SECONDS_KEY, 0.0).min(round_s / 2.0),
        ..Default::default()
    };
    let mut policy = shadow_policy(store)?;
    let workload = hadar_sim::Workload {
        cluster: cluster.clone(),
        jobs,
    };
    let mut sim_segments = Vec::new();
    let report = hadar_sim::simulate_observed(&workload, policy.as_mut(), &cfg, &mut |round| {
        sim_segments.extend(segments_of(cluster, round))
    })
    .context("simulating the shadowed jobs under Hadar")?;
    let mut hadar = run_of(cluster, &report, sim_segments);
    hadar.name = "hadar-predicted".into();
    Ok(hadar)
}

/// The policy a shadow run decided with, as the simulator runs it: `served` at the shadow's
/// configuration (its `[sidecar] policy`, `[hadar]` and passes), kept in the store
/// ([`hadar_ops::shadow::CONFIG_KEY`]); Hadar with its defaults for a store a hadar before
/// that kept none.
fn shadow_policy(store: &Store) -> anyhow::Result<Box<dyn hadar_core::Policy>> {
    use anyhow::Context;
    use hadar_core::policies::{PolicyName, PolicyOptions, build};
    let (name, opts) = match kept_config(store)? {
        Some(config) => (PolicyName::Served, config.policy_options(0)),
        None => (PolicyName::Hadar, PolicyOptions::default()),
    };
    build(name, &opts).with_context(|| format!("the policy `{name}` is not a round policy"))
}

/// The configuration a shadow daemon kept in its store ([`hadar_ops::shadow::CONFIG_KEY`]);
/// `None` for a store a hadar before that kept none.
fn kept_config(store: &Store) -> anyhow::Result<Option<hadar_daemon::DaemonConfig>> {
    use anyhow::Context;
    store
        .meta(hadar_ops::shadow::CONFIG_KEY)?
        .map(|text| {
            serde_json::from_str(&text)
                .context("the shadow's kept configuration (meta shadow_config)")
        })
        .transpose()
}

/// The cluster of the last round's nodes (every node with GPUs, usable or not).
fn last_cluster(round: &RoundRow) -> Option<Cluster> {
    let mut types: Vec<String> = Vec::new();
    for n in &round.nodes {
        for t in n.gpus.keys() {
            if !types.contains(t) {
                types.push(t.clone());
            }
        }
    }
    let nodes = round
        .nodes
        .iter()
        .map(|n| hadar_core::Node {
            name: n.name.clone(),
            gpus: types
                .iter()
                .map(|t| n.gpus.get(t).copied().unwrap_or(0))
                .collect(),
        })
        .collect();
    Cluster::new(types, nodes).ok()
}
