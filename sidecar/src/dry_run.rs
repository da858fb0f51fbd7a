//! `hadar dry-run`: the placements the next round would make for a cluster and a job
//! queue, computed by the same core the simulator and the daemon use, touching nothing.

use crate::Failure;
use crate::cli::{DryRunArgs, Format};
use crate::table::Table;
use hadar_core::policies::hadar::{HadarConfig, RoundStats};
use hadar_core::policies::{self, PolicyName, PolicyOptions};
use hadar_core::{Cluster, JobId, JobState, Placement, RoundInput, RoundPlan, WaitReason};
use hadar_formats::jobs::{EXAMPLE_CLUSTER_SPEC, EXAMPLE_GPUS_PER_NODE, EXAMPLE_JOBS_TOML};
use hadar_formats::{
    JobsFile, JobsSyntax, ThroughputTable, embedded, load_cluster, load_jobs, parse_cluster_spec,
    parse_jobs,
};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// What a job does in the planned round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// Not running before, runs now.
    Start,
    /// Runs where it ran.
    Keep,
    /// Runs, somewhere else than before (a restart).
    Move,
    /// Does not run.
    Wait,
}

impl Decision {
    fn as_str(self) -> &'static str {
        match self {
            Decision::Start => "start",
            Decision::Keep => "keep",
            Decision::Move => "move",
            Decision::Wait => "wait",
        }
    }
}

/// Runs the command.
pub fn run(a: DryRunArgs) -> Result<(), Failure> {
    let file = match &a.config {
        Some(path) => {
            let c = hadar_daemon::DaemonConfig::load(path).map_err(Failure::input)?;
            Some(c)
        }
        None => None,
    };
    let default_policy = if file.is_some() { "served" } else { "hadar" };
    let name: PolicyName = a
        .policy
        .as_deref()
        .unwrap_or(default_policy)
        .parse()
        .map_err(|e| Failure::input(anyhow::anyhow!("--policy: {e}")))?;
    if name.is_bound() {
        return Err(Failure::input(anyhow::anyhow!(
            "--policy: `{name}` is a bound computed over a whole workload, not a round policy"
        )));
    }
    let (cluster, cluster_origin) = read_cluster(&a)?;
    let table = match &a.throughputs {
        Some(p) => ThroughputTable::load(p).map_err(Failure::input)?,
        None => embedded::throughputs().map_err(Failure::runtime)?,
    }
    .with_catalog(file.as_ref().map(|c| c.gpu_catalog()).unwrap_or_default());
    let (mut queue, jobs_origin) = read_queue(&a, &table, &cluster)?;
    if let Some(c) = &file {
        // As `hadar serve` would plan: the file's round and restart seconds.
        queue.round_s = c.sidecar.round_seconds;
        queue.restart_s = c.sidecar.restart_seconds;
    }
    let input = RoundInput {
        now_s: queue.now_s,
        round_s: queue.round_s,
        restart_s: queue.restart_s,
        cluster: &cluster,
        jobs: &queue.jobs,
    };
    let hadar_config = match &file {
        Some(c) => c.hadar.clone(),
        None => a.hadar.config(),
    };
    let forked = fork_jobs(&a, file.as_ref(), name, &queue)?;
    let mut p = build_policy(
        &a,
        file.as_ref(),
        name,
        &hadar_config,
        &queue,
        forked.clone(),
    )?;
    let plan = p.plan(&input);
    let stats = (name == PolicyName::Hadar)
        .then(|| p.last_round_stats())
        .flatten();
    plan.validate(&cluster, &queue.jobs).map_err(|e| {
        Failure::runtime(anyhow::anyhow!("policy `{name}` made an invalid plan: {e}"))
    })?;

    let report = Report {
        name,
        cluster: &cluster,
        cluster_origin,
        jobs_origin,
        queue: &queue,
        unmeasured: table.unmeasured_types(&cluster),
        plan: &plan,
        hadar: stats.map(|s| (hadar_config, s)),
        forked,
        site: a.site.as_ref().map(|p| p.display().to_string()),
    };
    let text = match a.format {
        Format::Table => report.table(),
        Format::Json => {
            serde_json::to_string_pretty(&report.json()).map_err(Failure::runtime)? + "\n"
        }
    };
    crate::output::emit(&text)
}

/// The cluster `--cluster` names (or the embedded example), with where it came from.
fn read_cluster(a: &DryRunArgs) -> Result<(Cluster, String), Failure> {
    Ok(match &a.cluster {
        Some(spec) => (
            load_cluster(spec, a.gpus_per_node.unwrap_or(1)).map_err(Failure::input)?,
            spec.clone(),
        ),
        None => {
            let per_node = a.gpus_per_node.unwrap_or(EXAMPLE_GPUS_PER_NODE);
            let c = parse_cluster_spec(EXAMPLE_CLUSTER_SPEC, per_node).map_err(Failure::input)?;
            (
                c,
                format!("embedded example: {EXAMPLE_CLUSTER_SPEC}, {per_node} GPUs per node"),
            )
        }
    })
}

/// The queue `--jobs` names (or the embedded example), with where it came from.
fn read_queue(
    a: &DryRunArgs,
    table: &ThroughputTable,
    cluster: &Cluster,
) -> Result<(JobsFile, String), Failure> {
    Ok(match &a.jobs {
        Some(p) => (
            load_jobs(p, table, cluster).map_err(Failure::input)?,
            p.display().to_string(),
        ),
        None => (
            parse_jobs(
                EXAMPLE_JOBS_TOML,
                "<embedded example jobs>",
                JobsSyntax::Toml,
                table,
                cluster,
            )
            .map_err(Failure::input)?,
            "embedded example queue".to_string(),
        ),
    })
}

/// Policy `name` as the command line and `--config` ask for it, within `--site`'s rules
/// when given.
fn build_policy(
    a: &DryRunArgs,
    file: Option<&hadar_daemon::DaemonConfig>,
    name: PolicyName,
    hadar_config: &HadarConfig,
    queue: &JobsFile,
    forked: Option<BTreeSet<JobId>>,
) -> Result<Box<dyn hadar_core::Policy>, Failure> {
    let base = match file {
        Some(c) => c.policy_options(0),
        None => PolicyOptions {
            hadar: hadar_config.clone(),
            hadare: a.hadar.hadare_config(),
            served: a.hadar.served_config(),
            ..PolicyOptions::default()
        },
    };
    let opts = PolicyOptions {
        tiresias: a.hadar.tiresias_config(),
        forked: forked.unwrap_or_default(),
        ..base
    };
    let built = match &a.site {
        Some(path) => {
            let ids: Vec<u64> = queue.jobs.iter().map(|j| j.id().0).collect();
            let strength = file.map_or(hadar_config.priority_strength, |c| {
                c.hadar.priority_strength
            });
            let site = crate::site::load(path, &ids, strength)?;
            hadar_daemon::site::simulated::within(name, &opts, site)
        }
        None => policies::build(name, &opts),
    };
    built.ok_or_else(|| {
        Failure::input(anyhow::anyhow!(
            "--policy: `{name}` is not available in this build"
        ))
    })
}

/// The jobs `--fork-jobs` names when the file's policy forks them (`hadare`): `served`
/// then runs the mixed round. Under `policy = "hadar"` they are plain jobs (`None`), as on
/// the cluster.
fn fork_jobs(
    a: &DryRunArgs,
    file: Option<&hadar_daemon::DaemonConfig>,
    name: PolicyName,
    queue: &JobsFile,
) -> Result<Option<BTreeSet<JobId>>, Failure> {
    let (Some(list), Some(file)) = (&a.fork_jobs, file) else {
        return Ok(None);
    };
    let known = queue.jobs.iter().map(JobState::id).collect();
    let ids =
        crate::simulate::parse_job_list(list, known, "the queue (its last job id is {last})")?;
    if !file.sidecar.policy.forks() {
        return Ok(None);
    }
    if name != PolicyName::Served {
        return Err(Failure::input(anyhow::anyhow!(
            "--fork-jobs: only the `served` policy runs the mixed round, not `{name}`"
        )));
    }
    Ok(Some(ids))
}

struct Report<'a> {
    name: PolicyName,
    cluster: &'a Cluster,
    cluster_origin: String,
    jobs_origin: String,
    queue: &'a JobsFile,
    /// The cluster's GPU types the throughput table lacks: estimated, unusable.
    unmeasured: (Vec<String>, Vec<String>),
    plan: &'a RoundPlan,
    hadar: Option<(HadarConfig, RoundStats)>,
    /// With --fork-jobs under `policy = "hadare"`: the jobs HadarE plans as copies.
    forked: Option<BTreeSet<JobId>>,
    /// With --site: the site file.
    site: Option<String>,
}

/// One row: a job and what the plan does with it.
struct Row<'a> {
    job: &'a JobState,
    decision: Decision,
    placement: Option<&'a Placement>,
    rate: Option<f64>,
    payoff: Option<f64>,
    wait: Option<&'a WaitReason>,
}

impl<'a> Report<'a> {
    fn rows(&self) -> Vec<Row<'a>> {
        let plan: &'a RoundPlan = self.plan;
        self.queue
            .jobs
            .iter()
            .map(|job| {
                let assignment = plan.assignments.iter().find(|x| x.job == job.id());
                let wait = plan
                    .waiting
                    .iter()
                    .find(|w| w.job == job.id())
                    .map(|w| &w.reason);
                let decision = match (assignment, &job.placement) {
                    (None, _) => Decision::Wait,
                    (Some(_), None) => Decision::Start,
                    (Some(x), Some(old)) if x.placement == *old => Decision::Keep,
                    (Some(_), Some(_)) => Decision::Move,
                };
                Row {
                    job,
                    decision,
                    placement: assignment.map(|x| &x.placement),
                    rate: assignment.map(|x| x.rate),
                    payoff: assignment.and_then(|x| x.payoff),
                    wait,
                }
            })
            .collect()
    }

    fn placement_text(&self, p: &Placement) -> String {
        p.parts()
            .iter()
            .map(|x| {
                format!(
                    "{}:{}x{}",
                    self.cluster.node(x.node).name,
                    self.cluster.type_name(x.gpu_type),
                    x.gpus
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "cluster: {} ({})\n",
            self.cluster, self.cluster_origin
        ));
        out.push_str(&crate::simulate::unmeasured_notes(&self.unmeasured));
        out.push_str(&format!(
            "jobs:    {} ({}); round at {} s, {} s long, restart {} s\n",
            self.queue.jobs.len(),
            self.jobs_origin,
            self.queue.now_s,
            self.queue.round_s,
            self.queue.restart_s
        ));
        if let Some(site) = &self.site {
            out.push_str(&format!(
                "site:    {site}: planned within its rules, as hadar serve plans\n"
            ));
        }
        match &self.hadar {
            Some((cfg, stats)) => {
                out.push_str(&format!("policy:  hadar ({})\n", describe_config(cfg)));
                if let Some(b) = stats.price_bounds {
                    out.push_str(&format!(
                        "prices:  L {} to U {} per GPU-round; {} admitted by price, {} by work conservation, {} kept\n",
                        sig(b.low),
                        sig(b.high),
                        stats.admitted,
                        stats.filled,
                        stats.kept
                    ));
                }
                if let Some(h) = stats.horizon_s {
                    out.push_str(&format!(
                        "guard:   the remaining work can end in {} h at the soonest; {} urgent{}\n",
                        sig(h / 3600.0),
                        stats.urgent,
                        if stats.tail {
                            "; the tail plan chose who runs (all urgent, few jobs)"
                        } else {
                            ""
                        }
                    ));
                }
                if stats.overdue > 0 {
                    out.push_str(&format!(
                        "overdue: {} gang(s) placed after the urgent jobs (overtaken too long)\n",
                        stats.overdue
                    ));
                }
            }
            None => out.push_str(&format!("policy:  {}\n", self.name)),
        }
        out.push('\n');
        let mut t = Table::new(&[
            "job",
            "gpus",
            "decision",
            "placement",
            "rate/s",
            "payoff",
            "why waiting",
        ]);
        for r in self.rows() {
            t.row(vec![
                r.job.id().to_string(),
                r.job.job.workers.to_string(),
                r.decision.as_str().to_string(),
                r.placement.map_or_else(String::new, |p| {
                    let copies = self
                        .forked
                        .as_ref()
                        .is_some_and(|f| f.contains(&r.job.id()));
                    let text = self.placement_text(p);
                    if copies {
                        format!("copies {text}")
                    } else {
                        text
                    }
                }),
                r.rate.map_or_else(|| "-".to_string(), sig),
                r.payoff.map_or_else(|| "-".to_string(), sig),
                r.wait.map_or_else(String::new, describe_wait),
            ]);
        }
        out.push_str(&t.render());
        out
    }

    fn json(&self) -> Value {
        let jobs: Vec<Value> = self
            .rows()
            .into_iter()
            .map(|r| {
                let placement: Vec<Value> = r
                    .placement
                    .map(|p| {
                        p.parts()
                            .iter()
                            .map(|x| {
                                json!({
                                    "node": self.cluster.node(x.node).name,
                                    "type": self.cluster.type_name(x.gpu_type),
                                    "gpus": x.gpus,
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!({
                    "id": r.job.id().0,
                    "kind": r.job.job.kind,
                    "gpus": r.job.job.workers,
                    "decision": r.decision.as_str(),
                    "placement": placement,
                    "rate": r.rate.map(round6),
                    "payoff": r.payoff.map(round6),
                    "wait": r.wait.map(wait_json),
                })
            })
            .collect();
        let hadar = self.hadar.as_ref().map(|(cfg, stats)| {
            json!({
                "objective": cfg.objective.as_str(),
                "order": cfg.order.as_str(),
                "max_nodes_per_job": cfg.max_nodes_per_job,
                "work_conservation": cfg.work_conservation,
                "stickiness": cfg.stickiness,
                "exact": cfg.exact,
                "swap_improvement": cfg.swap_improvement,
                "mixed_types": cfg.mixed_types,
                "per_type_prices": cfg.per_type_prices,
                "criticality": cfg.criticality,
                "type_pressure": cfg.type_pressure,
                "makespan_guard": cfg.makespan_guard,
                "guard_margin_rounds": cfg.guard_margin_rounds,
                "guard_margin_share": cfg.guard_margin_share,
                "guard_quiet_rounds": cfg.guard_quiet_rounds,
                "packing": cfg.packing.as_str(),
                "pace_weight": cfg.pace_weight,
                "pace_min_share": cfg.pace_min_share,
                "tail_jobs": cfg.tail_jobs,
                "overdue_factor": cfg.overdue_factor,
                "guard_type_tolerance": if cfg.guard_type_tolerance.is_finite() { json!(cfg.guard_type_tolerance) } else { json!(null) },
                "horizon_s": stats.horizon_s.map(round6),
                "urgent": stats.urgent,
                "overdue": stats.overdue,
                "tail": stats.tail,
                "price_low": stats.price_bounds.map(|b| round6(b.low)),
                "price_high": stats.price_bounds.map(|b| round6(b.high)),
                "admitted": stats.admitted,
                "filled": stats.filled,
                "kept": stats.kept,
                "total_utility": round6(stats.objective),
            })
        });
        let mut jobs = jobs;
        if let Some(forked) = &self.forked {
            for j in &mut jobs {
                let id = j["id"].as_u64().map(JobId);
                j["forked"] = json!(id.is_some_and(|id| forked.contains(&id)));
            }
        }
        let mut out = json!({
            "cluster": self.cluster.to_string(),
            "cluster_origin": self.cluster_origin,
            "jobs_origin": self.jobs_origin,
            "now_s": self.queue.now_s,
            "round_s": self.queue.round_s,
            "restart_s": self.queue.restart_s,
            "policy": self.name.as_str(),
            "site": self.site,
            "hadar": hadar,
            "jobs": jobs,
        });
        if let Some(forked) = &self.forked {
            out["fork_jobs"] = json!(forked.len());
        }
        out
    }
}

fn describe_config(cfg: &HadarConfig) -> String {
    let mut parts = vec![
        format!("objective {}", cfg.objective.as_str()),
        format!("order {}", cfg.order.as_str()),
    ];
    if let Some(m) = cfg.max_nodes_per_job {
        parts.push(format!("at most {m} nodes per job"));
    }
    parts.push(format!(
        "work conservation {}",
        if cfg.work_conservation { "on" } else { "off" }
    ));
    parts.push(format!(
        "stickiness {}",
        if cfg.stickiness { "on" } else { "off" }
    ));
    parts.push(format!(
        "swaps {}",
        if cfg.swap_improvement { "on" } else { "off" }
    ));
    if !cfg.mixed_types {
        parts.push("single type per job".into());
    }
    if cfg.per_type_prices {
        parts.push("per-type prices".into());
    }
    if cfg.objective == hadar_core::policies::hadar::Objective::AvgJct {
        parts.push(format!("criticality {}", cfg.criticality));
    }
    if cfg.type_pressure > 0.0 {
        parts.push(format!("type pressure {}", cfg.type_pressure));
    }
    if cfg.makespan_guard && !cfg.exact {
        parts.push(format!(
            "makespan guard (margin {} rounds + {} of the horizon, type tolerance {})",
            cfg.guard_margin_rounds, cfg.guard_margin_share, cfg.guard_type_tolerance
        ));
        if cfg.guard_quiet_rounds > 0.0 {
            parts.push(format!(
                "the guard stands aside while jobs arrived at two times in {} rounds",
                cfg.guard_quiet_rounds
            ));
        }
        if cfg.pace_weight > 0.0 {
            parts.push(format!(
                "pace boost {} (jobs from {} of the horizon)",
                cfg.pace_weight, cfg.pace_min_share
            ));
        }
        if cfg.tail_jobs > 0 {
            parts.push(format!("tail plan up to {} jobs", cfg.tail_jobs));
        }
    }
    if !cfg.exact && cfg.overdue_factor > 0.0 {
        parts.push(format!(
            "overdue gangs after {} times their time",
            cfg.overdue_factor
        ));
    }
    if !cfg.exact {
        parts.push(format!("gang packing {}", cfg.packing.as_str()));
    }
    if cfg.exact {
        parts.push("exact".into());
    }
    parts.join(", ")
}

fn describe_wait(w: &WaitReason) -> String {
    match w {
        WaitReason::DoesNotFit => "does not fit in the free GPUs".into(),
        WaitReason::PriceAboveUtility { utility, price } => {
            format!("price {} above utility {}", sig(*price), sig(*utility))
        }
        WaitReason::NoThroughputOnFreeTypes => "no throughput on the free GPU types".into(),
        WaitReason::CannotRunAnywhere => "cannot run on any GPU type of this cluster".into(),
        WaitReason::QueuedBehind { head: Some(h) } => format!("queued behind job {h}"),
        WaitReason::QueuedBehind { head: None } => "queued behind earlier jobs".into(),
        WaitReason::TimeShare => "yields its time share this round".into(),
        WaitReason::WaitingForRelease => "waits for running jobs to release GPUs".into(),
        r @ (WaitReason::SiteLimit { .. }
        | WaitReason::TimeLimit { .. }
        | WaitReason::SlurmRule { .. }
        | WaitReason::Reservation { .. }
        | WaitReason::NodeChoice { .. }
        | WaitReason::SlurmHolds { .. }) => r.to_string(),
    }
}

fn wait_json(w: &WaitReason) -> Value {
    match w {
        WaitReason::PriceAboveUtility { utility, price } => {
            json!({"reason": "price_above_utility", "utility": round6(*utility), "price": round6(*price)})
        }
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

/// Four significant digits, for people.
fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let mag = x.abs().log10().floor() as i32;
    if (-3..5).contains(&mag) {
        format!("{:.*}", (3 - mag).max(0) as usize, x)
    } else {
        format!("{x:.3e}")
    }
}

/// Six significant digits, so JSON output does not depend on the last bits of `powf`.
fn round6(x: f64) -> f64 {
    format!("{x:.5e}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    #[test]
    fn significant_digits() {
        assert_eq!(super::sig(0.012345), "0.01235");
        assert_eq!(super::sig(123.456), "123.5");
        assert_eq!(super::sig(-2.0), "-2.000");
        assert_eq!(super::sig(1.5e-7), "1.500e-7");
        assert_eq!(super::round6(0.1234567891), 0.123457);
    }
}
