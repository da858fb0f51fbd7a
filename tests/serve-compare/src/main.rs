//! `hadar-serve-compare`: the comparison users care about, on the real Slurm test cluster.
//!
//! One heterogeneous workload (Gavel's job types, some multi-GPU, all submitted at once,
//! time-scaled so that it takes minutes) runs twice on the same four-node cluster:
//! (a) by Slurm alone, each job asking for its fastest GPU type as users do today, and
//! (b) by `hadar serve`, each job asking for a GPU count and letting Hadar choose. Every job
//! runs `hadar emulate`, which trains at the measured rate of the GPUs it was given. The
//! command prints the makespan and the average job completion time of both, from Slurm's
//! own end times and each job's first submission (Slurm moves `SubmitTime` to a job's last
//! requeue, so the harness keeps its own; [`predict::JobTimes::first_submit`]).
//!
//! Usage (`--help` for all options): `hadar-serve-compare --hadar PATH [--jobs N]
//! [--time-scale X] [--seed N] [--format table|json] [--no-lookahead] [--served LIST]`; run
//! it as root on a machine with Slurm installed (`tests/install-deps`), from the repository
//! root. `--served gavel,tiresias,hadar` runs (b) once per policy, `hadar serve` running
//! Gavel's or Tiresias' policy through the same passes and enforcement as Hadar's.
//!
//! With `--policies hadar,hadare --trace FILE` it instead runs the jobs of a Gavel trace
//! (e.g. `tests/data/few-jobs.trace`) twice by `hadar serve`: with `policy = "hadar"` (each
//! job one gang-scheduled Slurm job) and with `policy = "hadare"` (each job `fork=yes`, run
//! as rounds of copies through the fork runner and averaged), and prints makespan, average
//! JCT and GPU utilisation of each (see [`trace_mode`]).
//!
//! With `--predict --seeds 1,2,3,4` it runs each seed's workload three ways (Slurm alone,
//! `hadar serve` with Hadar, with HadarE) and the same workload in the simulator with the
//! test cluster's model, and prints predicted against measured JCT and makespan
//! ([`predict`]).

mod accuracy;
mod daemon_config;
mod model;
mod predict;
mod site_scenario;

use hadar_daemon::config::PolicyChoice;
use hadar_formats::short_name;
use hadar_slurm_testbed::{Options, Testbed};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// One job of the workload.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct WorkJob {
    job_type: String,
    workers: u32,
    steps: u64,
    fastest: String,
}

/// How one run went.
#[derive(Clone, Debug)]
struct RunResult {
    makespan_s: f64,
    avg_jct_s: f64,
    jobs: usize,
    /// Per job, in workload order.
    times: Vec<predict::JobTimes>,
}

#[derive(Debug)]
struct Args {
    hadar: PathBuf,
    trace: Option<PathBuf>,
    policies: bool,
    longest_s: f64,
    round_s: f64,
    jobs: usize,
    time_scale: f64,
    seed: u64,
    json: bool,
    /// `--no-lookahead`: the daemon runs with `[sidecar] earliest_finish_types = false`.
    no_lookahead: bool,
    /// `--served`: the policies `hadar serve` runs the workload with, after Slurm alone.
    served: Vec<PolicyChoice>,
    /// `--predict`: the prediction table (with `--seeds`, `--record`, `--from`, `--model`).
    predict: predict::PredictArgs,
}

/// `hadar-serve-compare`'s command line.
#[derive(clap::Parser, Debug)]
#[command(
    name = "hadar-serve-compare",
    about = "Runs one heterogeneous workload on the Slurm test cluster by Slurm alone and by `hadar serve`, and prints makespan and average JCT",
    long_about = "Runs one heterogeneous workload on the Slurm test cluster by Slurm alone (each job asking for its fastest GPU type) and by `hadar serve` (each job asking for a GPU count), and prints makespan and average JCT of both (with --served gavel,tiresias,hadar: of Slurm alone and of each policy served). Run it as root on a machine with Slurm installed (tests/install-deps), from the repository root, with HADAR_TESTBED_PORT set.\n\nWith --policies hadar,hadare --trace FILE it runs a Gavel trace by `hadar serve` with Hadar and with HadarE. With --predict it runs each seed three ways and compares with the simulator's prediction (docs/prediction.md); --predict --from FILE recomputes that table from a record, without the cluster."
)]
struct Cli {
    /// The `hadar` binary the jobs and the daemon run.
    #[arg(long, value_name = "PATH", default_value = "target/debug/hadar")]
    hadar: PathBuf,
    /// Jobs in the seeded workload.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(usize))]
    jobs: usize,
    /// Time scale of the jobs (`hadar emulate --time-scale`).
    #[arg(long, value_name = "X", default_value_t = 10.0)]
    time_scale: f64,
    /// The workload's seed.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// The daemon runs with `[sidecar] earliest_finish_types = false` (no commitment
    /// look-ahead), in every mode.
    #[arg(long)]
    no_lookahead: bool,
    /// The policies `hadar serve` runs the workload with (`[sidecar] policy`), each after
    /// Slurm alone, e.g. `gavel,tiresias,hadar`.
    #[arg(long, value_name = "LIST", default_value = "hadar")]
    served: String,
    /// A Gavel trace to run with --policies.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// With --trace: run it by `hadar serve` with these policies (only `hadar,hadare`).
    #[arg(long, value_name = "LIST")]
    policies: Option<String>,
    /// With --trace: seconds the trace's longest job runs alone on its fastest type.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0, value_parser = positive_seconds)]
    longest: f64,
    /// With --trace: the daemon's round, seconds (at least 4).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = round_seconds)]
    round: f64,
    /// Predict each run with the simulator and compare (docs/prediction.md).
    #[arg(long)]
    predict: bool,
    /// With --predict: the runs to make, of slurm, hadar, hadare (all by default).
    #[arg(long, value_name = "LIST")]
    schedulers: Option<String>,
    /// With --predict: the seeds, e.g. 1,2,3,4.
    #[arg(long, value_name = "LIST")]
    seeds: Option<String>,
    /// With --predict: append each seed's record (JSON lines) to FILE.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Recompute the prediction table from a record, without the cluster (implies --predict).
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// With --predict, a diagnostic: the daemon's first round sees as many jobs as it started
    /// on the cluster, instead of those submitted within the model's read delay.
    #[arg(long)]
    first_round_as_measured: bool,
    /// With --predict: model figures, KEY=SECONDS,... (docs/prediction.md lists the keys).
    #[arg(long, value_name = "KEY=SECONDS,...")]
    model: Vec<String>,
    /// With --predict: run every seed under a site's rules (a QOS GPU limit, a reservation,
    /// a partition set DOWN), capture them with `hadar site capture`, and predict within
    /// them (docs/prediction.md); only Slurm alone and Hadar.
    #[arg(long)]
    site: bool,
    /// With --predict, a diagnostic: the time limits Slurm alone's model assumes (the test
    /// cluster's jobs have none: `unlimited`, the default).
    #[arg(long, value_enum, value_name = "LIMITS")]
    slurm_limits: Option<SlurmLimits>,
    /// With --predict, a diagnostic: how Slurm alone's model lays a job out on nodes (the
    /// test cluster's `--gres=gpu:TYPE:N` jobs take one node: `one`, the default).
    #[arg(long, value_enum, value_name = "LAYOUT")]
    slurm_nodes: Option<SlurmNodes>,
}

/// `--slurm-limits`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum SlurmLimits {
    /// Every job's limit is its true run time (the simulator's optimistic baseline).
    Exact,
    /// No job has a limit.
    Unlimited,
}

/// `--slurm-nodes`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum SlurmNodes {
    /// As few nodes as possible, best fit by free GPUs (the simulator's baseline).
    Fewest,
    /// One node, the one running the most jobs, ties to the first.
    One,
}

/// `--format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Table,
    Json,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    s.parse()
        .ok()
        .filter(|x: &f64| x.is_finite() && *x > 0.0)
        .ok_or_else(|| format!("{s}: give a positive number of seconds"))
}

fn round_seconds(s: &str) -> Result<f64, String> {
    s.parse()
        .ok()
        .filter(|x: &f64| x.is_finite() && *x >= 4.0)
        .ok_or_else(|| format!("{s}: give at least 4 seconds"))
}

/// `--served`'s policies, each one `hadar serve` can run.
fn served_policies(list: &str) -> Result<Vec<PolicyChoice>, String> {
    let names = hadar_core::policies::PolicyName::parse_list(list)
        .map_err(|e| format!("--served {list}: {e}"))?;
    names
        .into_iter()
        .map(|n| PolicyChoice::new(n).map_err(|e| format!("--served {list}: {e}")))
        .collect()
}

/// The command line as the runs use it, checked.
fn args_of(cli: Cli) -> Result<Args, String> {
    let mut predict = predict::PredictArgs {
        on: cli.predict,
        record: cli.record,
        from: cli.from,
        first_round_as_measured: cli.first_round_as_measured,
        site: cli.site,
        ..predict::PredictArgs::default()
    };
    if let Some(s) = &cli.schedulers {
        predict.schedulers = predict::parse_schedulers(s)?;
    } else if predict.site {
        predict.schedulers = vec![model::Scheduler::Slurm, model::Scheduler::Hadar];
    }
    if predict.site && predict.schedulers.contains(&model::Scheduler::HadarE) {
        return Err("--site: the site scenario runs slurm and hadar, not hadare".into());
    }
    if let Some(s) = &cli.seeds {
        predict.seeds = predict::parse_seeds(s)?;
    }
    for m in &cli.model {
        predict::set_timing(&mut predict.timing, m)?;
    }
    use hadar_core::policies::slurm_backfill::{NodeLayout, TimeLimits};
    match cli.slurm_limits {
        Some(SlurmLimits::Exact) => predict.timing.slurm.time_limits = TimeLimits::Exact,
        Some(SlurmLimits::Unlimited) => predict.timing.slurm.time_limits = TimeLimits::Unlimited,
        None => {}
    }
    match cli.slurm_nodes {
        Some(SlurmNodes::Fewest) => predict.timing.slurm.nodes = NodeLayout::FewestNodes,
        Some(SlurmNodes::One) => predict.timing.slurm.nodes = NodeLayout::OneNode,
        None => {}
    }
    if let Some(p) = &cli.policies
        && p != "hadar,hadare"
    {
        return Err(format!("--policies {p}: only hadar,hadare is supported"));
    }
    let mut a = Args {
        hadar: cli.hadar,
        trace: cli.trace,
        policies: cli.policies.is_some(),
        longest_s: cli.longest,
        round_s: cli.round,
        jobs: cli.jobs,
        time_scale: cli.time_scale,
        seed: cli.seed,
        json: cli.format == Format::Json,
        no_lookahead: cli.no_lookahead,
        served: served_policies(&cli.served)?,
        predict,
    };
    if a.predict.from.is_some() {
        // Recomputing from a record needs no cluster and no binary.
        a.predict.on = true;
        return Ok(a);
    }
    if a.policies != a.trace.is_some() {
        return Err("--policies hadar,hadare and --trace FILE go together".into());
    }
    if a.jobs < 1 || a.time_scale.is_nan() || a.time_scale <= 0.0 {
        return Err("--jobs must be at least 1 and --time-scale positive".into());
    }
    a.hadar = std::fs::canonicalize(&a.hadar)
        .map_err(|e| format!("--hadar {}: {e}", a.hadar.display()))?;
    Ok(a)
}

/// A seeded workload: job types cycle through Gavel's table (types measured with the worker
/// count drawn), 1, 2 or 4 workers (about 60/25/15 %), each lasting 20 to 60 s at its
/// fastest type once time-scaled.
fn workload(n: usize, seed: u64, scale: f64) -> Vec<WorkJob> {
    let table = hadar_formats::embedded::throughputs().expect("embedded table");
    let types: Vec<String> = table.job_types().map(str::to_string).collect();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    while out.len() < n {
        let workers = match next() % 20 {
            0..=11 => 1,
            12..=16 => 2,
            _ => 4,
        };
        let jt = &types[(next() % types.len() as u64) as usize];
        let mut best: Option<(String, f64)> = None;
        for g in ["v100", "p100", "k80"] {
            if let Some(r) = table.rate(jt, g, workers).filter(|r| *r > 0.0)
                && best.as_ref().is_none_or(|(_, b)| r > *b)
            {
                best = Some((g.to_string(), r));
            }
        }
        let Some((fastest, rate)) = best else {
            continue;
        };
        // Every type must be able to run it, so that Hadar has a real choice.
        if ["v100", "p100", "k80"].iter().any(|g| {
            table
                .rate_or_scaled(jt, g, workers)
                .is_none_or(|r| r <= 0.0)
        }) {
            continue;
        }
        let seconds = 20.0 + (next() % 41) as f64;
        let steps = (rate * scale * seconds).round().max(1.0) as u64;
        out.push(WorkJob {
            job_type: short_name(jt),
            workers,
            steps,
            fastest,
        });
    }
    out
}

fn script(hadar: &std::path::Path, j: &WorkJob, scale: f64, managed: bool) -> String {
    let directive = if managed {
        format!("#HADAR type={} steps={}", j.job_type, j.steps)
    } else {
        "#HADAR off".to_string()
    };
    format!(
        "#!/bin/sh\n{directive}\nexec {} emulate --job-type {} --steps {} --time-scale {scale} --report-every 2\n",
        hadar.display(),
        j.job_type,
        j.steps
    )
}

/// Seconds since the epoch, to the microsecond: when a submission returned.
fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs the workload on the cluster: `managed` by a running `hadar serve` (each job asking
/// for a GPU count), else by Slurm alone (each asking for its fastest type); `submit_args`
/// go to every `sbatch`.
fn run(
    bed: &Testbed,
    a: &Args,
    work: &[WorkJob],
    managed: bool,
    submit_args: &[String],
) -> Result<RunResult, String> {
    let mut ids = Vec::new();
    let mut submitted = Vec::new();
    for j in work {
        let gres = if managed {
            format!("--gpus={}", j.workers)
        } else {
            format!("--gres=gpu:{}:{}", j.fastest, j.workers)
        };
        let out = format!("--output={}/cmp-%j.txt", bed.path("jobs").display());
        let mut args = vec![gres.as_str(), out.as_str(), "--job-name=cmp"];
        args.extend(submit_args.iter().map(String::as_str));
        let sub = bed.sbatch(&args, Some(&script(&a.hadar, j, a.time_scale, managed)));
        if !sub.ok {
            return Err(format!("sbatch failed: {}", sub.stderr));
        }
        submitted.push(epoch_now());
        ids.push(sub.job_id.ok_or("sbatch printed no job id")?);
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut times = Vec::new();
    for (id, at) in ids.iter().zip(&submitted) {
        let left = deadline.saturating_duration_since(Instant::now());
        let info = bed
            .wait_job(*id, &["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"], left)
            .map_err(|e| e.to_string())?;
        if info.field("JobState").as_deref() != Some("COMPLETED") {
            return Err(format!("job {id} did not complete: {}", info.0));
        }
        let t = |k: &str| {
            info.field(k)
                .and_then(|v| hadar_slurm::job::parse_time(&v))
                .ok_or(format!("job {id}: no {k}"))
        };
        times.push(predict::JobTimes {
            id: u64::from(*id),
            submit: t("SubmitTime")? as f64,
            start: t("StartTime")? as f64,
            end: t("EndTime")? as f64,
            restarts: info
                .field("Restarts")
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            submitted: Some(*at),
        });
    }
    let (makespan_s, avg_jct_s) = predict::makespan_and_mean_jct(&times);
    Ok(RunResult {
        makespan_s,
        avg_jct_s,
        jobs: ids.len(),
        times,
    })
}

fn start_daemon(bed: &Testbed, a: &Args, policy: PolicyChoice) -> Result<Child, String> {
    let config = bed.path("etc/serve-compare.toml");
    let state = bed.path("state-compare.db");
    let _ = std::fs::remove_file(&state);
    let text = daemon_config::DaemonSettings {
        slurm_conf: &bed.path("etc/slurm.conf"),
        socket: &bed.path("run/hadar.sock"),
        state: &state,
        round_s: 3.0,
        throughput_scale: a.time_scale,
        look_ahead: !a.no_lookahead,
        policy,
        fork: None,
    }
    .render();
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(bed.path("log/hadar-serve-compare.log"))
        .map_err(|e| e.to_string())?;
    Command::new(&a.hadar)
        .args(["serve", "--config"])
        .arg(&config)
        .env("HADAR_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting hadar serve: {e}"))
}

/// The test cluster, with the plugin installed by its install script; `None` (said on
/// stderr) when it cannot start.
fn start_testbed(accounting: bool) -> Option<Testbed> {
    let root = std::env::temp_dir().join(format!(
        "hadar-serve-compare-{}",
        hadar_slurm_testbed::controller_port()
    ));
    // A daemon of an earlier run on this test cluster would act on this run's jobs (one
    // left running requeued the jobs of a measurement every round: docs/prediction.md).
    let left = leftover_daemons(std::path::Path::new("/proc"), &root);
    if !left.is_empty() {
        for (pid, cmd) in &left {
            eprintln!(
                "hadar-serve-compare: a hadar serve daemon of an earlier run on this test cluster ({}) is still running: pid {pid}: {cmd}",
                root.display()
            );
        }
        eprintln!(
            "hadar-serve-compare: refusing to start: stop it first (kill {})",
            left.iter()
                .map(|(p, _)| p.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        return None;
    }
    let mut options = Options::installed(root);
    options.accounting = accounting;
    Testbed::start(options)
        .inspect_err(|e| eprintln!("hadar-serve-compare: cannot start the Slurm test cluster: {e}"))
        .ok()
}

/// True when `args` (a process's command line) is `hadar serve` with a file under `root`,
/// the test cluster's scratch directory (its config, socket or state).
fn is_daemon_of(args: &[String], root: &std::path::Path) -> bool {
    args.iter().any(|a| a == "serve")
        && args
            .iter()
            .any(|a| std::path::Path::new(a).starts_with(root))
}

/// The `hadar serve` processes (pid, command line) running for the test cluster at `root`,
/// from the process table `proc_dir` (`/proc`).
fn leftover_daemons(proc_dir: &std::path::Path, root: &std::path::Path) -> Vec<(u32, String)> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir(proc_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(raw) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if pid != me && is_daemon_of(&args, root) {
            out.push((pid, args.join(" ")));
        }
    }
    out.sort();
    out
}

fn main() -> ExitCode {
    let a = match args_of(<Cli as clap::Parser>::parse()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hadar-serve-compare: {e}");
            return ExitCode::from(2);
        }
    };
    if a.predict.on {
        return predict::predict_mode(&a);
    }
    if a.policies {
        return trace_mode(&a);
    }
    let work = workload(a.jobs, a.seed, a.time_scale);
    let Some(bed) = start_testbed(false) else {
        return ExitCode::FAILURE;
    };
    eprintln!("workload: {} jobs, time scale {}", work.len(), a.time_scale);
    let slurm = match run(&bed, &a, &work, false, &[]) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hadar-serve-compare: Slurm-alone run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut served = Vec::new();
    for &policy in &a.served {
        match run_served(&bed, &a, &work, policy) {
            Ok(r) => served.push((policy, r)),
            Err(e) => {
                eprintln!("hadar-serve-compare: hadar serve with policy {policy}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print_comparison(&a, &work, &slurm, &served);
    ExitCode::SUCCESS
}

/// Runs the workload by `hadar serve` with `policy` (`[sidecar] policy`).
fn run_served(
    bed: &Testbed,
    a: &Args,
    work: &[WorkJob],
    policy: PolicyChoice,
) -> Result<RunResult, String> {
    let mut daemon = start_daemon(bed, a, policy)?;
    let result = run(bed, a, work, true, &[]);
    let _ = daemon.kill();
    let _ = daemon.wait();
    result
}

/// Slurm alone's and each served policy's makespan and average JCT, as a table or JSON.
fn print_comparison(
    a: &Args,
    work: &[WorkJob],
    slurm: &RunResult,
    served: &[(PolicyChoice, RunResult)],
) {
    if a.json {
        let mut v = serde_json::json!({
            "jobs": work.len(), "time_scale": a.time_scale, "seed": a.seed,
            "slurm": {"makespan_s": slurm.makespan_s, "avg_jct_s": slurm.avg_jct_s},
        });
        for (policy, r) in served {
            v[policy.to_string()] =
                serde_json::json!({"makespan_s": r.makespan_s, "avg_jct_s": r.avg_jct_s});
        }
        println!("{v}");
        return;
    }
    let multi = work.iter().filter(|j| j.workers > 1).count();
    println!(
        "{} jobs of Gavel's types ({multi} multi-GPU), time scale {}, seed {}",
        slurm.jobs, a.time_scale, a.seed
    );
    println!(
        "{:<26} {:>12} {:>14} {:>24}",
        "scheduler", "makespan (s)", "avg JCT (s)", "x Slurm (makespan, JCT)"
    );
    println!(
        "{:<26} {:>12.0} {:>14.1} {:>24}",
        "Slurm (fastest type)", slurm.makespan_s, slurm.avg_jct_s, ""
    );
    for (policy, r) in served {
        println!(
            "{:<26} {:>12.0} {:>14.1} {:>24}",
            format!("hadar serve, {policy}"),
            r.makespan_s,
            r.avg_jct_s,
            format!(
                "{:.2}x, {:.2}x",
                r.makespan_s / slurm.makespan_s,
                r.avg_jct_s / slurm.avg_jct_s
            ),
        );
    }
}

// ----- Hadar vs HadarE on a trace -----

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
struct TraceJob {
    job_type: String,
    workers: u32,
    steps: u64,
    /// Seconds alone on its fastest type, unscaled.
    fastest_s: f64,
}

/// The jobs of a Gavel trace on the test cluster's types (arrival times are ignored: every
/// job is submitted at once).
fn trace_jobs(text: &str, origin: &str) -> Result<Vec<TraceJob>, String> {
    let table = hadar_formats::embedded::throughputs().map_err(|e| e.to_string())?;
    let types: Vec<String> = ["v100", "p100", "k80"]
        .iter()
        .map(|t| t.to_string())
        .collect();
    let cluster = hadar_core::Cluster::from_type_counts(
        &types.iter().map(|t| (t.clone(), 4)).collect::<Vec<_>>(),
        4,
    )
    .map_err(|e| e.to_string())?;
    let jobs = hadar_formats::trace::parse_trace(text, origin, &table, &cluster)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for j in jobs {
        let best = types
            .iter()
            .filter_map(|t| table.rate_or_scaled(&j.kind, t, j.workers))
            .fold(0.0f64, f64::max);
        if best <= 0.0 {
            return Err(format!(
                "{origin}: {} cannot run on the test cluster",
                j.kind
            ));
        }
        out.push(TraceJob {
            job_type: short_name(&j.kind),
            workers: j.workers,
            steps: j.total_steps.round() as u64,
            fastest_s: j.total_steps / best,
        });
    }
    Ok(out)
}

/// Makespan, average JCT and GPU utilisation of one run.
#[derive(Clone, Debug)]
struct PolicyResult {
    makespan_s: f64,
    avg_jct_s: f64,
    utilisation: f64,
    /// Per job, in the order submitted.
    times: Vec<predict::JobTimes>,
    /// HadarE's copy jobs, as Slurm last showed them.
    copies: Vec<predict::CopyJob>,
    /// The daemon's config file.
    config: String,
}

/// Runs the trace with `hadar serve` under `policy` and measures it. GPU utilisation is the mean, over
/// one-second samples from the first submission to the last completion, of the GPUs that
/// Slurm shows allocated to running jobs (gang jobs or copies) over all GPUs.
/// How one `hadar serve` run of a trace is made.
struct PolicyRun<'a> {
    /// HadarE, every job `fork=yes`; else Hadar.
    forked: bool,
    /// The daemon's round, seconds.
    round_s: f64,
    /// Names the run's directory.
    seed: u64,
    /// Given to every `sbatch`.
    submit_args: &'a [String],
}

fn run_policy(
    bed: &Testbed,
    a: &Args,
    jobs: &[TraceJob],
    scale: f64,
    run: &PolicyRun<'_>,
) -> Result<PolicyResult, String> {
    use std::os::unix::fs::PermissionsExt;
    let PolicyRun {
        forked,
        round_s,
        seed,
        submit_args,
    } = *run;
    let choice = if forked {
        PolicyChoice::HADARE
    } else {
        PolicyChoice::HADAR
    };
    let policy = choice.to_string();
    // One directory per policy and seed: a run's state database and log stay for `hadar
    // replay` and `hadar explain` after the next seed's run.
    let dir = bed.path(&format!("cmp-{policy}-seed{seed}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| e.to_string())?;
    let runner = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../wrappers/hadar-fork-run");
    let runner =
        std::fs::canonicalize(&runner).map_err(|e| format!("{}: {e}", runner.display()))?;
    let config = bed.path(&format!("etc/compare-{policy}.toml"));
    let state = dir.join("state.db");
    let spool = dir.join("spool");
    let text = daemon_config::DaemonSettings {
        slurm_conf: &bed.path("etc/slurm.conf"),
        socket: &bed.path("run/hadar.sock"),
        state: &state,
        round_s,
        throughput_scale: scale,
        look_ahead: !a.no_lookahead,
        policy: choice,
        fork: forked.then_some(daemon_config::ForkPaths {
            spool: &spool,
            runner: &runner,
        }),
    }
    .render();
    std::fs::write(&config, &text).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("serve.log")).map_err(|e| e.to_string())?;
    let mut daemon = Command::new(&a.hadar)
        .args(["serve", "--config"])
        .arg(&config)
        .env("HADAR_LOG", "info")
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting hadar serve: {e}"))?;
    // The workload arrives at a scheduler already running, as Slurm alone's does: a burst
    // submitted while the daemon starts would race its first round, which reads the queue
    // at once, where a running daemon's round woken by the burst waits for it to settle.
    let result = daemon_up(&dir.join("serve.log"))
        .and_then(|()| {
            let how = Submission {
                scale,
                forked,
                dir: &dir,
                runner: &runner,
                submit_args,
            };
            submit_all(bed, a, jobs, &how)
        })
        .and_then(|(ids, submitted)| measure(bed, &ids, &submitted))
        .map(|r| PolicyResult { config: text, ..r });
    // Whatever happened, no job of this run may outlive it (job processes survive their
    // slurmd on this test cluster and would report into the next run's jobs).
    let _ = bed.cancel_all();
    std::thread::sleep(Duration::from_secs(3));
    let _ = daemon.kill();
    let _ = daemon.wait();
    result
}

/// Waits (up to 30 s) for the daemon's first round, in its log.
fn daemon_up(log: &std::path::Path) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("round done") {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "hadar serve did not finish a round within 30 s; its log {}:\n{text}",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Submits `jobs` (forked through `runner` when `forked`), their output in `dir`; their ids
/// and when each was submitted (Unix seconds).
/// How [`submit_all`] submits a trace's jobs.
struct Submission<'a> {
    scale: f64,
    /// Through `runner`, `fork=yes`.
    forked: bool,
    /// The jobs' output and working directory.
    dir: &'a std::path::Path,
    runner: &'a std::path::Path,
    /// Given to every `sbatch`.
    submit_args: &'a [String],
}

fn submit_all(
    bed: &Testbed,
    a: &Args,
    jobs: &[TraceJob],
    how: &Submission<'_>,
) -> Result<(Vec<u64>, Vec<f64>), String> {
    let Submission {
        scale,
        forked,
        dir,
        runner,
        submit_args,
    } = *how;
    let mut ids = Vec::new();
    let mut submitted = Vec::new();
    for j in jobs {
        let emulate = format!(
            "{} emulate --job-type {} --steps {} --time-scale {scale}",
            a.hadar.display(),
            j.job_type,
            j.steps
        );
        let script = if forked {
            format!(
                "#!/bin/sh\n#HADAR type={} steps={} fork=yes\nexec {} -- {emulate}\n",
                j.job_type,
                j.steps,
                runner.display()
            )
        } else {
            format!(
                "#!/bin/sh\n#HADAR type={} steps={}\nexec {emulate} --report-every 2\n",
                j.job_type, j.steps
            )
        };
        let mut args = vec![
            format!("--gpus={}", j.workers),
            format!("--output={}/out-%j.txt", dir.display()),
            format!("--chdir={}", dir.display()),
            "--job-name=cmp".to_string(),
        ];
        args.extend_from_slice(submit_args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let sub = bed.sbatch(&args, Some(&script));
        if !sub.ok {
            return Err(format!("sbatch failed: {}", sub.stderr));
        }
        submitted.push(epoch_now());
        ids.push(u64::from(sub.job_id.ok_or("sbatch printed no job id")?));
    }
    Ok((ids, submitted))
}

/// Watches the jobs `ids` (submitted at the Unix times `submitted`) to their end: their
/// times, makespan, mean JCT, the cluster's mean use and the copy jobs seen.
fn measure(bed: &Testbed, ids: &[u64], submitted: &[f64]) -> Result<PolicyResult, String> {
    let total_gpus: u32 = {
        let text = bed
            .client("scontrol", &["show", "node"])
            .map_err(|e| e.to_string())?;
        hadar_slurm::node::parse_nodes(&text)
            .map_err(|e| e.to_string())?
            .iter()
            .flat_map(|n| n.gpus.iter().map(|(_, c)| *c))
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(3600);
    let mut samples: Vec<u32> = Vec::new();
    let mut copies: std::collections::BTreeMap<String, predict::CopyJob> = Default::default();
    loop {
        let text = bed
            .client("scontrol", &["-d", "show", "job"])
            .map_err(|e| e.to_string())?;
        let (all, _) = hadar_slurm::job::parse_jobs(&text);
        let busy: u32 = all
            .iter()
            .filter(|j| j.status == hadar_slurm::JobStatus::Running)
            .flat_map(|j| j.gpu_parts())
            .map(|(_, _, c)| c)
            .sum();
        // Slurm still shows the copies of an earlier run on this cluster (`MinJobAge`).
        let ours = |j: &&hadar_slurm::SlurmJob| {
            predict::copy_of(&j.name).is_some_and(|c| ids.contains(&c))
        };
        for j in all.iter().filter(ours) {
            predict::note_copy(&mut copies, j);
        }
        let mut mine: Vec<&hadar_slurm::SlurmJob> =
            all.iter().filter(|j| ids.contains(&j.id)).collect();
        mine.sort_by_key(|j| ids.iter().position(|i| *i == j.id));
        if let Some(bad) = mine
            .iter()
            .find(|j| j.status.is_terminal() && j.status != hadar_slurm::JobStatus::Completed)
        {
            return Err(format!("job {} ended {}", bad.id, bad.status.as_str()));
        }
        let finished = mine.len() == ids.len() && mine.iter().all(|j| j.status.is_terminal());
        if finished {
            let mean_busy =
                samples.iter().map(|b| *b as f64).sum::<f64>() / samples.len().max(1) as f64;
            let times: Vec<predict::JobTimes> = mine
                .iter()
                .zip(submitted)
                .map(|(j, at)| predict::JobTimes {
                    id: j.id,
                    submit: j.submit_time.unwrap_or(0) as f64,
                    start: j.start_time.unwrap_or(0) as f64,
                    end: j.end_time.unwrap_or(0) as f64,
                    restarts: j.restarts,
                    submitted: Some(*at),
                })
                .collect();
            let (makespan_s, avg_jct_s) = predict::makespan_and_mean_jct(&times);
            return Ok(PolicyResult {
                makespan_s,
                avg_jct_s,
                utilisation: mean_busy / total_gpus.max(1) as f64,
                times,
                copies: copies.into_values().collect(),
                config: String::new(),
            });
        }
        samples.push(busy);
        if Instant::now() >= deadline {
            return Err("the workload did not finish within an hour".into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `--policies hadar,hadare --trace FILE`: the trace's jobs (Gavel's job types, worker
/// counts and steps), time-scaled so that the longest job takes `--longest` seconds alone on
/// its fastest type, run by `hadar serve` with Hadar and then with HadarE.
fn trace_mode(a: &Args) -> ExitCode {
    let Some(path) = &a.trace else {
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hadar-serve-compare: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let jobs = match trace_jobs(&text, &path.display().to_string()) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("hadar-serve-compare: {e}");
            return ExitCode::from(2);
        }
    };
    let longest = jobs.iter().map(|j| j.fastest_s).fold(0.0, f64::max);
    let scale = longest / a.longest_s;
    let Some(bed) = start_testbed(false) else {
        return ExitCode::FAILURE;
    };
    eprintln!("{} jobs, time scale {scale:.1}", jobs.len());
    let mut results = Vec::new();
    for forked in [false, true] {
        let run = PolicyRun {
            forked,
            round_s: a.round_s,
            seed: a.seed,
            submit_args: &[],
        };
        match run_policy(&bed, a, &jobs, scale, &run) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!(
                    "hadar-serve-compare: {} run: {e}",
                    if forked { "HadarE" } else { "Hadar" }
                );
                return ExitCode::FAILURE;
            }
        }
    }
    let (h, e) = (&results[0], &results[1]);
    if a.json {
        let v = serde_json::json!({
            "trace": path.display().to_string(), "jobs": jobs.len(), "time_scale": scale,
            "round_s": a.round_s,
            "hadar": {"makespan_s": h.makespan_s, "avg_jct_s": h.avg_jct_s, "gpu_utilisation": h.utilisation},
            "hadare": {"makespan_s": e.makespan_s, "avg_jct_s": e.avg_jct_s, "gpu_utilisation": e.utilisation},
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} jobs ({}), time scale {scale:.1} (longest job {:.0} s alone on its fastest type), rounds of {} s",
            path.display(),
            jobs.len(),
            jobs.iter()
                .map(|j| format!("{} x{}", j.job_type, j.workers))
                .collect::<Vec<_>>()
                .join(", "),
            a.longest_s,
            a.round_s
        );
        println!(
            "{:<22} {:>12} {:>14} {:>16}",
            "hadar serve policy", "makespan (s)", "avg JCT (s)", "GPU utilisation"
        );
        for (name, r) in [("hadar", h), ("hadare (fork=yes)", e)] {
            println!(
                "{name:<22} {:>12.0} {:>14.1} {:>15.0}%",
                r.makespan_s,
                r.avg_jct_s,
                100.0 * r.utilisation
            );
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_seeded_heterogeneous_and_runnable_everywhere() {
        let w = workload(16, 1, 10.0);
        assert_eq!(w.len(), 16);
        assert!(w.iter().any(|j| j.workers > 1));
        let table = hadar_formats::embedded::throughputs().unwrap();
        for j in &w {
            let name = table.resolve_job_type(&j.job_type).unwrap();
            let fast = table.rate(name, &j.fastest, j.workers).unwrap();
            let secs = j.steps as f64 / (fast * 10.0);
            assert!((19.0..=61.0).contains(&secs), "{j:?}: {secs}");
        }
        let again = workload(16, 1, 10.0);
        assert_eq!(format!("{w:?}"), format!("{again:?}"));
    }

    #[test]
    fn a_daemon_of_this_test_cluster_is_told_from_others() {
        let root = std::path::Path::new("/tmp/hadar-serve-compare-17500");
        let args = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert!(is_daemon_of(
            &args(
                "/w/target/debug/hadar serve --config /tmp/hadar-serve-compare-17500/etc/compare-hadare.toml"
            ),
            root
        ));
        // Another port's test cluster, another command, or no file of this one: not ours.
        assert!(!is_daemon_of(
            &args("hadar serve --config /tmp/hadar-serve-compare-17600/etc/compare-hadar.toml"),
            root
        ));
        assert!(!is_daemon_of(
            &args("hadar emulate --steps 5 /tmp/hadar-serve-compare-17500/x"),
            root
        ));
        assert!(!is_daemon_of(
            &args("hadar serve --config /etc/hadar.toml"),
            root
        ));
        // Found in a process table laid out as /proc is (pid/cmdline, NUL-separated).
        let proc_dir =
            std::env::temp_dir().join(format!("serve-compare-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&proc_dir);
        for (pid, cmd) in [
            (
                "41",
                "hadar\0serve\0--config\0/tmp/hadar-serve-compare-17500/etc/c.toml\0",
            ),
            ("42", "hadar\0serve\0--config\0/etc/hadar.toml\0"),
            ("self", "hadar\0serve\0/tmp/hadar-serve-compare-17500/x\0"),
        ] {
            std::fs::create_dir_all(proc_dir.join(pid)).unwrap();
            std::fs::write(proc_dir.join(pid).join("cmdline"), cmd).unwrap();
        }
        let found = leftover_daemons(&proc_dir, root);
        let _ = std::fs::remove_dir_all(&proc_dir);
        assert_eq!(
            found,
            vec![(
                41,
                "hadar serve --config /tmp/hadar-serve-compare-17500/etc/c.toml".to_string()
            )]
        );
    }

    #[test]
    fn the_command_line_has_usage_and_checks_its_values() {
        use clap::Parser;
        let help = Cli::try_parse_from(["hadar-serve-compare", "--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(help.to_string().contains("--predict"));
        let cli = Cli::try_parse_from([
            "hadar-serve-compare",
            "--from",
            "r.jsonl",
            "--seeds",
            "2,3",
            "--schedulers",
            "hadar",
            "--model",
            "hadar_read_s=0.05",
            "--model",
            "submit_spacing_s=0.01",
        ])
        .unwrap();
        let a = args_of(cli).unwrap();
        assert!(a.predict.on);
        assert_eq!(a.predict.seeds, vec![2, 3]);
        assert_eq!(a.predict.schedulers, vec![model::Scheduler::Hadar]);
        assert_eq!(a.predict.timing.hadar_read_s, 0.05);
        assert_eq!(a.predict.timing.submit_spacing_s, 0.01);
        assert_eq!(a.predict.timing.slurm, model::test_cluster_slurm());
        let cli = Cli::try_parse_from([
            "hadar-serve-compare",
            "--from",
            "r.jsonl",
            "--slurm-limits",
            "exact",
            "--slurm-nodes",
            "fewest",
        ])
        .unwrap();
        let a = args_of(cli).unwrap();
        assert_eq!(
            a.predict.timing.slurm,
            hadar_core::policies::slurm_backfill::SlurmOptions::default()
        );
        assert!(Cli::try_parse_from(["hadar-serve-compare", "--slurm-limits", "some"]).is_err());
        let bad = Cli::try_parse_from(["hadar-serve-compare", "--from", "r", "--seeds", "x"]);
        assert!(args_of(bad.unwrap()).unwrap_err().contains("--seeds"));
        assert!(Cli::try_parse_from(["hadar-serve-compare", "--round", "2"]).is_err());
        assert!(Cli::try_parse_from(["hadar-serve-compare", "--bogus"]).is_err());
    }

    #[test]
    fn the_few_jobs_trace_reads_with_its_types_workers_and_steps() {
        let text = include_str!("../../data/few-jobs.trace");
        let jobs = trace_jobs(text, "few-jobs.trace").unwrap();
        assert_eq!(
            jobs.len(),
            text.lines().filter(|l| !l.trim().is_empty()).count()
        );
        assert_eq!(jobs[0].job_type, "resnet50-b64");
        assert_eq!((jobs[0].workers, jobs[0].steps), (4, 68054));
        assert!(jobs.iter().all(|j| j.fastest_s > 0.0));
        assert!(trace_jobs("nonsense", "x").is_err());
    }
}
