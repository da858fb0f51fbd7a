//! `hadar simulate`: read the inputs, play every requested policy, print the comparison.

use crate::Failure;
use crate::cli::{Format, SimulateArgs, ThroughputSource};
use crate::table::Table;
use anyhow::Context;
use hadar_core::estimate::GpuCatalog;
use hadar_core::policies::{self, PolicyName, PolicyOptions};
use hadar_core::tracker::TrackerRecord;
use hadar_core::{Cluster, Job, JobId};
use hadar_daemon::config::PolicyChoice;
use hadar_formats::{ThroughputTable, embedded, load_cluster, load_trace};
use hadar_sim::{Beliefs, EstimatedThroughputs, SimConfig, SimReport, Workload, simulate_with};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The workload a simulation runs on, with where each part came from.
pub struct Inputs {
    pub cluster: Cluster,
    pub jobs: Vec<Job>,
    pub cluster_origin: String,
    pub trace_origin: String,
    pub throughput_source: &'static str,
    /// The cluster's GPU types the throughput table has no column for, whose rates are
    /// estimated (see `ThroughputTable::estimated_rate`), and those the estimator does not
    /// know either (no job can use them).
    pub unmeasured_types: (Vec<String>, Vec<String>),
    /// With --accounts: the account names and each job's account (by job index).
    pub accounts: Option<(Vec<String>, Vec<Option<usize>>)>,
    /// With --fork-jobs: the jobs that opted into forking.
    pub fork: Option<ForkJobs>,
    /// With --site: the site file and how many jobs its `[[job]]` tables name.
    pub site: Option<(String, usize)>,
}

/// The jobs `--fork-jobs` names, and what the configuration does with them.
pub struct ForkJobs {
    /// How many jobs opted into forking.
    pub jobs: usize,
    /// True under `[sidecar] policy = "hadare"` (HadarE forks them); false under
    /// `"hadar"` (they run as plain jobs).
    pub forked: bool,
}

/// Reads cluster, throughputs and trace (or their embedded defaults); the throughputs rate
/// the types they have no column for with `catalog`.
pub fn load_inputs(
    cluster: Option<&str>,
    gpus_per_node: u32,
    throughputs: Option<&std::path::Path>,
    trace: Option<&std::path::Path>,
    catalog: &GpuCatalog,
) -> Result<Inputs, Failure> {
    let (cluster, cluster_origin) = match cluster {
        Some(spec) => (
            load_cluster(spec, gpus_per_node).map_err(Failure::input)?,
            spec.to_string(),
        ),
        None => (
            embedded::cluster().map_err(Failure::runtime)?,
            format!("{} (embedded default)", embedded::CLUSTER_SPEC),
        ),
    };
    let table = match throughputs {
        Some(p) => ThroughputTable::load(p).map_err(Failure::input)?,
        None => embedded::throughputs().map_err(Failure::runtime)?,
    }
    .with_catalog(catalog.clone());
    let (jobs, trace_origin) = match trace {
        Some(p) => (
            load_trace(p, &table, &cluster).map_err(Failure::input)?,
            p.display().to_string(),
        ),
        None => (
            embedded::trace(&table, &cluster).map_err(Failure::input)?,
            "embedded 40-job multi-GPU trace".to_string(),
        ),
    };
    Ok(Inputs {
        unmeasured_types: table.unmeasured_types(&cluster),
        cluster,
        jobs,
        cluster_origin,
        trace_origin,
        throughput_source: "true",
        accounts: None,
        site: None,
        fork: None,
    })
}

/// Reads a workload of Sia's benchmark with its profiles, on a cluster of Sia's kinds; says
/// on standard error which job kinds cannot use which types.
pub fn load_sia_inputs(
    workload: &std::path::Path,
    profiles: &std::path::Path,
    cluster: &str,
) -> Result<Inputs, Failure> {
    if !profiles.is_dir() {
        return Err(Failure::input(anyhow::anyhow!(
            "--sia-profiles: {} is not a folder (Sia's profiles: one subfolder per application)",
            profiles.display()
        )));
    }
    let spec = hadar_formats::SiaCluster::parse(cluster).map_err(Failure::input)?;
    let sia = hadar_formats::load_sia(workload, profiles, &spec).map_err(Failure::input)?;
    for note in &sia.notes {
        eprintln!("note: {note}");
    }
    let shape: Vec<String> = spec
        .nodes
        .iter()
        .map(|(k, n)| format!("{n} x {} {}", k.gpus_per_node, k.gpu_type))
        .collect();
    Ok(Inputs {
        cluster: sia.cluster,
        jobs: sia.jobs,
        cluster_origin: format!("Sia's {cluster}: {}", shape.join(", ")),
        trace_origin: format!("{}, rigid jobs of Sia's model", workload.display()),
        throughput_source: "true",
        unmeasured_types: (Vec::new(), Vec::new()),
        accounts: None,
        site: None,
        fork: None,
    })
}

/// Sets each job's weight from its account's priority factors, through the same pure code
/// as the daemon ([`hadar_core::site::priority`]).
fn apply_accounts(
    inputs: &mut Inputs,
    path: &std::path::Path,
    strength: f64,
) -> Result<(), Failure> {
    if !(strength.is_finite() && strength >= 0.0) {
        return Err(Failure::input(anyhow::anyhow!(
            "--priority-strength: must be a non-negative number, got {strength}"
        )));
    }
    let file = hadar_formats::load_accounts(path).map_err(Failure::input)?;
    let of = file.assign(inputs.jobs.len()).map_err(Failure::input)?;
    for (job, a) in inputs.jobs.iter_mut().zip(&of) {
        job.weight = file.factors(*a).weight(&file.weights, strength);
    }
    let names = file.accounts.iter().map(|a| a.name.clone()).collect();
    inputs.accounts = Some((names, of));
    Ok(())
}

/// Per account (and `(none)` for jobs in no account): its name, jobs and mean JCT in seconds.
fn account_jct(inputs: &Inputs, r: &SimReport) -> Vec<(String, usize, f64)> {
    let Some((names, of)) = &inputs.accounts else {
        return Vec::new();
    };
    let index: std::collections::HashMap<_, _> = inputs
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.id, i))
        .collect();
    let mut sums = vec![(0usize, 0.0f64); names.len() + 1];
    for o in &r.jobs {
        let slot = index.get(&o.id).and_then(|&i| of[i]).unwrap_or(names.len());
        sums[slot].0 += 1;
        sums[slot].1 += o.jct_s();
    }
    names
        .iter()
        .cloned()
        .chain(std::iter::once("(none)".to_string()))
        .zip(sums)
        .filter(|(_, (n, _))| *n > 0)
        .map(|(name, (n, s))| (name, n, s / n as f64))
        .collect()
}

/// One row of the comparison: a simulated policy or a computed bound.
enum Outcome {
    Simulated(SimReport),
    Bound { name: PolicyName, ttd_s: f64 },
}

/// Runs the command: settings, then each policy, then the outputs.
pub fn run(args: SimulateArgs) -> Result<(), Failure> {
    let mut settings = Settings::from_args(&args)?;
    let mut inputs = match (&args.sia_workload, &args.sia_profiles) {
        (Some(workload), Some(profiles)) => load_sia_inputs(workload, profiles, &args.sia_cluster)?,
        _ => load_inputs(
            args.cluster.as_deref(),
            args.gpus_per_node,
            args.throughputs.as_deref(),
            args.trace.as_deref(),
            &settings.catalog,
        )?,
    };
    if args.throughput_source == ThroughputSource::Estimated {
        inputs.throughput_source = "estimated";
    }
    if let Some(path) = &args.accounts {
        apply_accounts(&mut inputs, path, args.priority_strength)?;
    }
    if let Some(path) = &args.site {
        let strength = settings.file_strength.unwrap_or(args.priority_strength);
        let ids: Vec<u64> = inputs.jobs.iter().map(|j| j.id.0).collect();
        let site = crate::site::load(path, &ids, strength)?;
        inputs.site = Some((path.display().to_string(), site.named_jobs()));
        settings.site = Some(site);
    }
    if let Some(list) = &args.fork_jobs {
        let ids = parse_fork_jobs(list, &inputs.jobs)?;
        let forked = settings.fork_policy.is_some_and(PolicyChoice::forks);
        inputs.fork = Some(ForkJobs {
            jobs: ids.len(),
            forked,
        });
        if forked {
            settings.opts.forked = ids;
        }
    }
    let workload = Workload {
        cluster: inputs.cluster.clone(),
        jobs: inputs.jobs.clone(),
    };
    let mut runs = Runs::default();
    let mut failed: Vec<(PolicyName, Failure)> = Vec::new();
    for name in &settings.names {
        match play(*name, &args, &settings, &workload, &mut runs) {
            Ok(()) => {}
            // Bad input concerns the whole command: nothing more is played.
            Err(e) if e.is_input() => return Err(e),
            Err(e) => failed.push((*name, e)),
        }
    }
    if failed.is_empty() {
        return write_outputs(&args, &inputs, &settings.cfg, runs);
    }
    report_failures(&args, &inputs, &settings.cfg, &runs, failed)
}

/// Some policies failed while playing: the others' comparison is still printed (on
/// standard output, whatever `--out` says), each failure is reported, and no output file is
/// written, since each would lack a policy asked for. A run of one policy that failed ends
/// with that policy's error alone.
fn report_failures(
    args: &SimulateArgs,
    inputs: &Inputs,
    cfg: &SimConfig,
    runs: &Runs,
    mut failed: Vec<(PolicyName, Failure)>,
) -> Result<(), Failure> {
    if runs.outcomes.is_empty() && failed.len() == 1 {
        return Err(failed.remove(0).1);
    }
    if !runs.outcomes.is_empty() {
        print!("{}", render(args.format, inputs, cfg, &runs.outcomes)?);
    }
    for (_, f) in &failed {
        eprintln!("hadar: error: {:#}", f.error);
    }
    let names: Vec<String> = failed.iter().map(|(n, _)| format!("`{n}`")).collect();
    let files: Vec<&str> = [
        args.out.as_ref().map(|_| "--out"),
        args.trace_out.as_ref().map(|_| "--trace-out"),
        args.report.as_ref().map(|_| "--report"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let shown = if runs.outcomes.is_empty() {
        String::new()
    } else {
        "; the comparison above shows the others".to_string()
    };
    let unwritten = if files.is_empty() {
        String::new()
    } else {
        format!("; {} not written", files.join(", "))
    };
    Err(Failure::runtime(anyhow::anyhow!(
        "{} of {} policies did not finish ({}){shown}{unwritten}",
        failed.len(),
        failed.len() + runs.outcomes.len(),
        names.join(", ")
    )))
}

/// The job ids `--fork-jobs` names: `all`, or ids and ranges `A-B` separated by commas,
/// each a job of the trace.
fn parse_fork_jobs(list: &str, jobs: &[Job]) -> Result<BTreeSet<JobId>, Failure> {
    let known: BTreeSet<JobId> = jobs.iter().map(|j| j.id).collect();
    parse_job_list(
        list,
        known,
        "the trace (its job ids are 0 to {last}, in trace order)",
    )
}

/// The job ids `--fork-jobs` names, each one of `known`; `source` says where the ids come
/// from in the error, `{last}` standing for the last id.
pub(crate) fn parse_job_list(
    list: &str,
    known: BTreeSet<JobId>,
    source: &str,
) -> Result<BTreeSet<JobId>, Failure> {
    if list.trim().eq_ignore_ascii_case("all") {
        return Ok(known);
    }
    let bad = |what: String| Failure::input(anyhow::anyhow!("--fork-jobs: {what}"));
    let last = known.last().map_or(0, |j| j.0);
    let mut out = BTreeSet::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let num = |x: &str| {
            x.trim().parse::<u64>().map_err(|_| {
                bad(format!(
                    "`{item}` is neither a job id nor a range A-B of job ids (or `all`)"
                ))
            })
        };
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(bad(format!("`{item}`: the range ends before it starts")));
        }
        // Past the last job, the first id looked at is one the trace lacks.
        for id in a..=b.min(last.saturating_add(1)).max(a) {
            if !known.contains(&JobId(id)) {
                let source = source.replace("{last}", &last.to_string());
                return Err(bad(format!("job {id} is not in {source}")));
            }
            out.insert(JobId(id));
        }
    }
    if out.is_empty() {
        return Err(bad(format!("`{list}` names no job")));
    }
    Ok(out)
}

/// What the command line (and `--config`) ask for: the policies, the simulator's settings
/// and the policies' options.
struct Settings {
    names: Vec<PolicyName>,
    cfg: SimConfig,
    opts: PolicyOptions,
    /// With --config: the file's `[sidecar] policy` (what `fork=yes` jobs get).
    fork_policy: Option<PolicyChoice>,
    /// With --site: the site's rules every policy plans within.
    site: Option<hadar_daemon::site::simulated::SimulatedSite>,
    /// With --config: the file's `[hadar] priority_strength`.
    file_strength: Option<f64>,
    /// The GPUs the estimator knows: the built-in ones, and with --config or --gpu-types the
    /// file's `[gpu_types]`.
    catalog: GpuCatalog,
}

impl Settings {
    fn from_args(args: &SimulateArgs) -> Result<Settings, Failure> {
        if !(args.fork_efficiency > 0.0 && args.fork_efficiency <= 1.0) {
            return Err(Failure::input(anyhow::anyhow!(
                "--fork-efficiency: must be above 0 and at most 1, got {}",
                args.fork_efficiency
            )));
        }
        let file = match args.config.as_ref().or(args.gpu_types.as_ref()) {
            Some(path) => Some(hadar_daemon::DaemonConfig::load(path).map_err(Failure::input)?),
            None => None,
        };
        // With --config, the file says what `hadar serve` would run; --gpu-types only names
        // types.
        let serve = file.as_ref().filter(|_| args.config.is_some());
        let names = match (&args.policy, serve) {
            (Some(list), _) => PolicyName::parse_list(list)
                .map_err(|e| Failure::input(anyhow::anyhow!("--policy: {e}")))?,
            (None, Some(_)) => vec![PolicyName::Served],
            (None, None) => PolicyName::ALL.to_vec(),
        };
        let cfg = SimConfig {
            round_s: serve.map_or(args.round_s, |c| c.sidecar.round_seconds),
            restart_s: serve.map_or(args.restart_s, |c| c.sidecar.restart_seconds),
            seed: args.seed,
            model: hadar_sim::ClusterModel {
                start_latency_s: args.start_latency_s,
                copy_startup_s: args.copy_startup_s,
                keeps_types: args.keeps_types,
                fixed_rounds: args.fixed_rounds,
                // Sia's simulator charges a job's restart at every start, its first too.
                first_start_restarts: args.sia_workload.is_some(),
                fork_efficiency: args.fork_efficiency,
                ..hadar_sim::ClusterModel::default()
            },
            ..SimConfig::default()
        };
        check_timing(&cfg, serve.and(args.config.as_deref()))?;
        let opts = match serve {
            Some(c) => PolicyOptions {
                tiresias: args.hadar.tiresias_config(),
                ..c.policy_options(args.seed)
            },
            None => PolicyOptions {
                seed: args.seed,
                hadar: args.hadar.config(),
                hadare: hadar_core::policies::hadare::HadarEConfig {
                    progress_efficiency: args.fork_efficiency,
                    ..args.hadar.hadare_config()
                },
                tiresias: args.hadar.tiresias_config(),
                served: args.hadar.served_config(),
                served_policy: PolicyName::Hadar,
                forked: BTreeSet::new(),
            },
        };
        Ok(Settings {
            names,
            cfg,
            opts,
            fork_policy: serve.map(|c| c.sidecar.policy),
            site: None,
            file_strength: serve.map(|c| c.hadar.priority_strength),
            catalog: file.as_ref().map(|c| c.gpu_catalog()).unwrap_or_default(),
        })
    }
}

/// The round, the restart cost and the cluster model make sense together. `config` is the
/// file the round and restart came from (`--config`), so an error names its keys rather than
/// flags the user did not give.
fn check_timing(cfg: &SimConfig, config: Option<&std::path::Path>) -> Result<(), Failure> {
    let (round, restart) = match config {
        Some(path) => (
            format!("{}: sidecar.round_seconds", path.display()),
            format!("{}: sidecar.restart_seconds", path.display()),
        ),
        None => ("--round-s".to_string(), "--restart-s".to_string()),
    };
    if !(cfg.round_s.is_finite() && cfg.round_s > 0.0) {
        return Err(Failure::input(anyhow::anyhow!(
            "{round}: must be a positive number of seconds, got {}",
            cfg.round_s
        )));
    }
    // A restart of a whole round is a moved job that does no work that round; the simulator
    // charges a restart within the round it happens in, so it cannot play a longer one.
    if !(cfg.restart_s.is_finite() && cfg.restart_s >= 0.0 && cfg.restart_s <= cfg.round_s) {
        return Err(Failure::input(anyhow::anyhow!(
            "{restart}: must be at least 0 and at most the round length ({} s), got {}",
            cfg.round_s,
            cfg.restart_s
        )));
    }
    cfg.model
        .validate(cfg.round_s, cfg.restart_s)
        .map_err(|e| Failure::input(anyhow::anyhow!("cluster model: {e}")))
}

/// What the policies played give the outputs.
#[derive(Default)]
struct Runs {
    outcomes: Vec<Outcome>,
    tracker_lines: String,
    report_runs: Vec<hadar_report::Run>,
}

/// Plays one policy (or computes one bound) on the workload.
fn play(
    name: PolicyName,
    args: &SimulateArgs,
    settings: &Settings,
    workload: &Workload,
    runs: &mut Runs,
) -> Result<(), Failure> {
    if name.is_bound() {
        let ttd_s = policies::bound(name, &workload.cluster, &workload.jobs)
            .map_err(|e| Failure::runtime(anyhow::anyhow!("computing `{name}`: {e}")))?;
        runs.outcomes.push(Outcome::Bound { name, ttd_s });
        return Ok(());
    }
    let built = match &settings.site {
        Some(site) => hadar_daemon::site::simulated::within(name, &settings.opts, site.clone()),
        None => policies::build(name, &settings.opts),
    };
    let mut policy = built.ok_or_else(|| {
        Failure::input(anyhow::anyhow!(
            "--policy: `{name}` is not available in this build"
        ))
    })?;
    tracing::info!(policy = %name, "simulating");
    let want_trace = args.trace_out.is_some();
    let want_report = args.report.is_some();
    let cluster = &workload.cluster;
    let mut estimated = match args.throughput_source {
        ThroughputSource::True => None,
        ThroughputSource::Estimated => Some(
            EstimatedThroughputs::new(&workload.cluster, &workload.jobs)
                .map(|b| b.with_catalog(settings.catalog.clone()))
                .map_err(|e| {
                    Failure::input(anyhow::anyhow!("--throughput-source estimated: {e}"))
                })?,
        ),
    };
    let beliefs = estimated.as_mut().map(|b| b as &mut dyn Beliefs);
    let mut segments = Vec::new();
    let tracker_lines = &mut runs.tracker_lines;
    let report = simulate_with(
        workload,
        policy.as_mut(),
        &settings.cfg,
        beliefs,
        &mut |round| {
            if want_report {
                segments.extend(crate::report::segments_of(cluster, round));
            }
            if want_trace {
                tracker_lines.push_str(&tracker_lines_of(cluster, name, round));
            }
        },
    )
    .with_context(|| format!("simulating `{name}`"))
    .map_err(Failure::runtime)?;
    if want_report {
        runs.report_runs
            .push(crate::report::run_of(cluster, &report, segments));
    }
    runs.outcomes.push(Outcome::Simulated(report));
    Ok(())
}

/// One round's job-tracker lines (one JSON object per job run, named by policy).
fn tracker_lines_of(cluster: &Cluster, name: PolicyName, round: &hadar_sim::RoundRecord) -> String {
    let mut lines = String::new();
    for run in &round.runs {
        let record = TrackerRecord::new(
            cluster,
            round.index,
            run.job,
            round.start_s,
            round.start_s + run.seconds,
            &run.placement,
            run.steps,
            &run.copy_steps,
            run.remaining_steps,
        );
        let mut line = serde_json::to_value(&record).unwrap_or_default();
        line["policy"] = json!(name.as_str());
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    lines
}

/// Prints (or writes) the comparison, and writes the report and tracker files asked for.
fn write_outputs(
    args: &SimulateArgs,
    inputs: &Inputs,
    cfg: &SimConfig,
    runs: Runs,
) -> Result<(), Failure> {
    let text = render(args.format, inputs, cfg, &runs.outcomes)?;
    if let Some(dir) = &args.report {
        hadar_report::write_report(dir, &runs.report_runs)
            .context("--report")
            .map_err(Failure::runtime)?;
    }
    if let Some(path) = &args.trace_out {
        write_atomically(path, &runs.tracker_lines)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::runtime)?;
    }
    match &args.out {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(path) => write_atomically(path, &text)
            .with_context(|| format!("writing {}", path.display()))
            .map_err(Failure::runtime),
    }
}

/// The comparison of `outcomes` in the format asked for.
fn render(
    format: Format,
    inputs: &Inputs,
    cfg: &SimConfig,
    outcomes: &[Outcome],
) -> Result<String, Failure> {
    Ok(match format {
        Format::Table => render_table(inputs, cfg, outcomes),
        Format::Json => {
            serde_json::to_string_pretty(&render_json(inputs, cfg, outcomes))
                .map_err(Failure::runtime)?
                + "\n"
        }
    })
}

fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|f| f.to_str()).unwrap_or("out"),
        std::process::id()
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

fn lower_bound_ttd(outcomes: &[Outcome]) -> Option<f64> {
    outcomes.iter().find_map(|o| match o {
        Outcome::Bound {
            name: PolicyName::LowerBound,
            ttd_s,
        } => Some(*ttd_s),
        _ => None,
    })
}

/// Header lines about the cluster's GPU types the throughput table lacks (see
/// `ThroughputTable::unmeasured_types`), one per kind; empty when it measured them all.
pub fn unmeasured_notes((estimated, unknown): &(Vec<String>, Vec<String>)) -> String {
    let mut notes = String::new();
    if !estimated.is_empty() {
        notes += &format!(
            "note:    {} not in the throughput table: rates there are estimated from job traits and GPU datasheets, calibrated on the measured types\n",
            estimated.join(", ")
        );
    }
    if !unknown.is_empty() {
        notes += &format!(
            "note:    {} in neither the throughput table nor the GPU datasheets: no job of the table can use it\n",
            unknown.join(", ")
        );
    }
    notes
}

fn hours(s: f64) -> String {
    format!("{:.2}", s / 3600.0)
}

/// The lines above the table: the cluster, the trace, the rounds, and what else shapes the
/// run (estimated types, forked jobs, the site).
fn workload_header(inputs: &Inputs, cfg: &SimConfig) -> String {
    let mut out = format!(
        "cluster: {} ({})\ntrace:   {} jobs ({})\nrounds:  {} s, restart cost {} s, seed {}, policies plan with {} throughputs\n\n",
        inputs.cluster,
        inputs.cluster_origin,
        inputs.jobs.len(),
        inputs.trace_origin,
        cfg.round_s,
        cfg.restart_s,
        cfg.seed,
        inputs.throughput_source
    );
    out.insert_str(out.len() - 1, &unmeasured_notes(&inputs.unmeasured_types));
    if let Some(f) = &inputs.fork {
        let what = if f.forked {
            "`served` forks them by HadarE over the GPUs the other jobs leave ([sidecar] policy = \"hadare\")"
        } else {
            "they run as plain jobs ([sidecar] policy = \"hadar\")"
        };
        out.insert_str(
            out.len() - 1,
            &format!("fork:    {} jobs opted into forking; {what}\n", f.jobs),
        );
    }
    if let Some((file, named)) = &inputs.site {
        out.insert_str(
            out.len() - 1,
            &format!(
                "site:    {file}: every policy plans within its rules; {named} jobs named in it\n"
            ),
        );
    }
    out
}

fn render_table(inputs: &Inputs, cfg: &SimConfig, outcomes: &[Outcome]) -> String {
    let mut out = workload_header(inputs, cfg);
    let lb = lower_bound_ttd(outcomes);
    let mut t = Table::new(&[
        "policy",
        "TTD h",
        "TTD/LB",
        "avg JCT h",
        "p50 JCT h",
        "p95 JCT h",
        "CRU",
        "queue h",
        "restarts",
        "FTF max",
        "decide ms",
        "max ms",
    ]);
    for o in outcomes {
        match o {
            Outcome::Simulated(r) => {
                let m = &r.metrics;
                t.row(vec![
                    r.policy.clone(),
                    hours(m.ttd_s),
                    lb.map(|lb| format!("{:.3}", m.ttd_s / lb))
                        .unwrap_or_default(),
                    hours(m.avg_jct_s),
                    hours(m.p50_jct_s),
                    hours(m.p95_jct_s),
                    format!("{:.3}", m.cru),
                    hours(m.avg_queueing_s),
                    m.restarts.to_string(),
                    format!("{:.2}", m.ftf_max),
                    format!("{:.2}", m.decision_ms_mean),
                    format!("{:.2}", m.decision_ms_max),
                ]);
            }
            Outcome::Bound { name, ttd_s } => {
                t.row(vec![
                    name.to_string(),
                    hours(*ttd_s),
                    format!("{:.3}", 1.0f64.min(lb.map(|lb| ttd_s / lb).unwrap_or(1.0))),
                ]);
            }
        }
    }
    out.push_str(&t.render());
    let util: Vec<String> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Simulated(r) => Some(format!(
                "  {:<16}{}",
                r.policy,
                r.metrics
                    .utilisation_by_type
                    .iter()
                    .map(|u| format!("{} {:.3}", u.gpu_type, u.utilisation))
                    .collect::<Vec<_>>()
                    .join("  ")
            )),
            Outcome::Bound { .. } => None,
        })
        .collect();
    if !util.is_empty() {
        out.push_str("\nutilisation by GPU type:\n");
        out.push_str(&util.join("\n"));
        out.push('\n');
    }
    if inputs.accounts.is_some() {
        out.push_str("\nmean JCT by account (h):\n");
        for o in outcomes {
            if let Outcome::Simulated(r) = o {
                let parts: Vec<String> = account_jct(inputs, r)
                    .iter()
                    .map(|(a, n, s)| format!("{a} {} ({n} jobs)", hours(*s)))
                    .collect();
                out.push_str(&format!("  {:<16}{}\n", r.policy, parts.join("  ")));
            }
        }
    }
    out
}

fn render_json(inputs: &Inputs, cfg: &SimConfig, outcomes: &[Outcome]) -> Value {
    let lb = lower_bound_ttd(outcomes);
    let results: Vec<Value> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Simulated(r) => {
                let m = &r.metrics;
                let by_account: serde_json::Map<String, Value> = account_jct(inputs, r)
                    .into_iter()
                    .map(|(a, n, s)| (a, json!({ "jobs": n, "mean_jct_s": s })))
                    .collect();
                json!({
                    "policy": r.policy,
                    "accounts": (!by_account.is_empty()).then_some(by_account),
                    "ttd_s": m.ttd_s,
                    "avg_jct_s": m.avg_jct_s,
                    "p50_jct_s": m.p50_jct_s,
                    "p95_jct_s": m.p95_jct_s,
                    "cru": m.cru,
                    "utilisation_by_type": m.utilisation_by_type.iter().map(|u| (u.gpu_type.clone(), json!(u.utilisation))).collect::<serde_json::Map<_, _>>(),
                    "avg_queueing_s": m.avg_queueing_s,
                    "restarts": m.restarts,
                    "ftf_mean": m.ftf_mean,
                    "ftf_max": m.ftf_max,
                    "decision_ms_mean": m.decision_ms_mean,
                    "decision_ms_max": m.decision_ms_max,
                    "rounds": m.rounds,
                    "jobs": m.jobs,
                    "jobs_completed": m.jobs_completed,
                    "ttd_over_lower_bound": lb.map(|lb| m.ttd_s / lb),
                })
            }
            Outcome::Bound { name, ttd_s } => json!({ "policy": name.as_str(), "ttd_s": ttd_s, "jobs": inputs.jobs.len() }),
        })
        .collect();
    json!({
        "workload": {
            "cluster": inputs.cluster_origin,
            "gpus": inputs.cluster.total_gpus(),
            "nodes": inputs.cluster.nodes().len(),
            "trace": inputs.trace_origin,
            "jobs": inputs.jobs.len(),
            "round_s": cfg.round_s,
            "restart_s": cfg.restart_s,
            "seed": cfg.seed,
            "throughput_source": inputs.throughput_source,
            "estimated_gpu_types": inputs.unmeasured_types.0,
            "unusable_gpu_types": inputs.unmeasured_types.1,
            "fork_jobs": inputs.fork.as_ref().map(|f| f.jobs),
            "forked_by_hadare": inputs.fork.as_ref().map(|f| f.forked),
            "site": inputs.site.as_ref().map(|(f, _)| f),
            "site_jobs": inputs.site.as_ref().map(|(_, n)| n),
        },
        "results": results,
    })
}
