//! Command-line definitions (clap). Help texts are written for the person at the terminal.

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Heterogeneity-aware GPU scheduling for Slurm clusters.
#[derive(Parser, Debug)]
#[command(name = "hadar", version = version(), about, long_about = None)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug); HADAR_LOG=<filter> overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

fn version() -> &'static str {
    match option_env!("HADAR_GIT_REVISION") {
        Some(rev) => {
            Box::leak(format!("{} (git {rev})", env!("CARGO_PKG_VERSION")).into_boxed_str())
        }
        None => env!("CARGO_PKG_VERSION"),
    }
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Play a job trace through scheduling policies and compare them.
    ///
    /// With no arguments, runs every policy on an embedded 40-job multi-GPU trace on a
    /// 4 V100 + 4 P100 + 4 K80 cluster (Gavel's measured throughputs).
    Simulate(Box<SimulateArgs>),
    /// Show the placements the next round would make for a cluster and a job queue,
    /// without touching anything.
    ///
    /// Prints per job its decision (start, keep, move or wait), nodes, GPU types and
    /// counts, expected rate and payoff, and for waiting jobs why. With no arguments, runs
    /// on an embedded example queue on v100:8,p100:8,k80:8 with four GPUs per node.
    DryRun(DryRunArgs),
    /// Estimate jobs' throughput from GPU and job traits, or judge the estimator against a
    /// measured table.
    ///
    /// `--evaluate FILE` compares the estimates with a table in Gavel's format (each job type
    /// predicted by constants fitted on the other job types) and replays the online
    /// refinement with simulated noisy measurements. `--job-type NAME` prints one job type's
    /// estimated steps/s on each GPU type.
    Estimate(EstimateArgs),
    /// Average safetensors checkpoints of a forked job's copies, weighted by their steps.
    ///
    /// `hadar average --out merged.safetensors a.safetensors:1200 b.safetensors:800` writes
    /// 0.6 a + 0.4 b. Floating-point tensors (F64, F32, F16, BF16, C64, F8_E4M3, F8_E5M2) are
    /// averaged in f64 and rounded once to their dtype (ties to even); integer, BOOL, F8_E8M0
    /// and packed F4/F6 tensors are not averaged (see --integers). The output has the first
    /// input's header and metadata, and is written atomically (temp file, fsync, rename).
    Average(AverageArgs),
    /// Measure hadar's speed and print the figures (run a release build: `cargo run --release -- bench ...`).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Schedule a Slurm cluster with Hadar: the daemon (runs until SIGTERM).
    ///
    /// Each round it reads Slurm's nodes and hadar-managed jobs (held by the job_submit/hadar
    /// plugin), plans with the Hadar core, starts, keeps or preempts jobs, and records the
    /// round in its state database.
    Serve(ServeArgs),
    /// Show the daemon's last round: GPUs per partition and type (--nodes: per node), prices,
    /// queue and running placements.
    Status(StatusArgs),
    /// Hand the managed jobs hadar holds to Slurm's own scheduling when the daemon is down.
    ///
    /// When no round has completed for `[sidecar] fail_open_after` (read from the heartbeat
    /// file the daemon rewrites each round), every managed job hadar holds gets back the GPU
    /// request its user wrote and is released, marked failed open; unmanaged jobs, running
    /// jobs and holds placed by users are untouched. With a live daemon it does nothing. Run
    /// it from the systemd timer `etc/hadar-fail-open.timer`, or by hand. Safe to repeat and
    /// to run twice at once; the daemon takes the jobs back when it returns.
    FailOpen(FailOpenArgs),
    /// Say why a job runs where it does, or why it waits.
    Explain(ExplainArgs),
    /// Decide a past round again from its kept snapshot and compare with what was recorded.
    ///
    /// Each round the daemon keeps what it read (Slurm's nodes and jobs, its own jobs,
    /// learned rates, the site's rules), the configuration and throughput table it decided
    /// with, and its decision (placements, actions, each job's decision), for as long as
    /// `[sidecar] keep_rounds` and `keep_days` keep the round. Prints `round N: identical`
    /// and exits 0 when the decision comes out the same; prints the first difference (job,
    /// field, recorded and recomputed values) and exits 1 when not; exits 2 when the round
    /// or the database is not there, or was kept by an older hadar without what deciding it
    /// again needs. `fork=yes` jobs' rounds of copies are part of the decision and compared.
    Replay(ReplayArgs),
    /// Check hadar.toml against the live Slurm cluster and this machine.
    ///
    /// Lists every GPU type of the cluster and how hadar rates it (measured, estimated from
    /// a datasheet, or unknown), then each problem with its line in the file: managed and
    /// default partitions that have no node, GPU types no throughput source knows, bad
    /// [gpu_types] entries, and the paths the daemon needs (state folder, socket folder,
    /// Slurm commands, and under policy = "hadare" the fork runner and spool). Exits 1 when
    /// there is a problem (warnings alone do not fail).
    CheckConfig(CheckConfigArgs),
    /// Work with the site's own rules as hadar reads them from Slurm.
    #[command(subcommand)]
    Site(SiteCommand),
    /// An example training job for `hadar serve` (run it inside a Slurm job).
    ///
    /// It trains at the rate Gavel measured for --job-type on the GPU types of its own
    /// allocation (the slowest type's rate across several types), times --time-scale,
    /// reports progress in its Slurm comment, checkpoints on --signal and waits to be
    /// requeued, and resumes from its checkpoint after a restart.
    Emulate(EmulateArgs),
    /// Write the report of a `hadar serve` run from its state database: per-job CSV and SVG
    /// plots, as `hadar simulate --report` writes for a simulation.
    Report(ReportArgs),
    /// Print a shell completion script for hadar.
    ///
    /// bash: `hadar completions bash > /etc/bash_completion.d/hadar`; the Debian package
    /// installs them for bash, zsh and fish.
    Completions(CompletionsArgs),
    /// Write hadar's man pages (hadar.1 and one per subcommand) into a folder; the Debian
    /// package runs it.
    #[command(hide = true)]
    Man(ManArgs),
    /// Consolidate one round of a forked job inside its copy job (run by the copy job's
    /// script on a compute node, as the job's user): read the copies' results, average
    /// their checkpoints, append the round to the job's tracker.jsonl, and print the round's
    /// report for the copy job's Comment.
    #[command(hide = true)]
    ForkConsolidate(ForkConsolidateArgs),
}

/// `hadar site` subcommands.
#[derive(Subcommand, Debug)]
pub enum SiteCommand {
    /// Write the site's rules, read from the live Slurm as the daemon reads them every round
    /// (priority settings, fair-share, QOS, associations and their limits, partitions,
    /// reservations, licenses; not its jobs), to a site file for `hadar simulate --site`
    /// and `hadar dry-run --site`.
    Capture(SiteCaptureArgs),
}

/// `hadar site capture` arguments.
#[derive(Args, Debug)]
pub struct SiteCaptureArgs {
    /// The configuration file, for the Slurm commands it names (`[slurm] slurm_conf`,
    /// `[sidecar] slurm_bin_dir`). [default: /etc/hadar/hadar.toml when it exists]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The site file to write (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// `hadar fork-consolidate` arguments.
#[derive(Args, Debug)]
pub struct ForkConsolidateArgs {
    /// The round's plan, as the daemon wrote it into the copy job's script.
    #[arg(value_name = "ROUND_JSON")]
    pub plan: PathBuf,
}

/// `hadar report` arguments.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The configuration file, to find the state database. [default: /etc/hadar/hadar.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The state database itself (instead of --config).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// The folder to write the report into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// `hadar completions` arguments.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `hadar man` arguments.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// The folder to write the pages into (created if missing).
    #[arg(long)]
    pub out: PathBuf,
}

/// `hadar serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The configuration file (the same hadar.toml the plugin reads).
    #[arg(long, value_name = "FILE", default_value = "/etc/hadar/hadar.toml")]
    pub config: PathBuf,
    /// Shadow mode: read the cluster and queue every round and record what hadar would do,
    /// acting on nothing (Slurm schedules as usual); as `[sidecar] shadow = true`.
    #[arg(long)]
    pub shadow: bool,
}

/// `hadar check-config` arguments.
#[derive(Args, Debug)]
pub struct CheckConfigArgs {
    /// The configuration file (the one the plugin and the daemon read).
    #[arg(long, value_name = "FILE", default_value = "/etc/hadar/hadar.toml")]
    pub config: PathBuf,
}

/// `hadar status` arguments.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The configuration file, to find the state database. [default: /etc/hadar/hadar.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The state database itself (instead of --config).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Also list finished jobs.
    #[arg(long)]
    pub all: bool,
    /// List GPUs node by node instead of per partition and GPU type.
    #[arg(long)]
    pub nodes: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `hadar replay` arguments.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("which").required(true).args(["round", "all"])))]
pub struct ReplayArgs {
    /// The daemon's state database.
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// The round to replay.
    #[arg(long, value_name = "N")]
    pub round: Option<u64>,
    /// Replay every kept round.
    #[arg(long)]
    pub all: bool,
    /// Decide with this hadar.toml instead of the configuration the round was decided with
    /// (to see whether an edit would change the decision).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `hadar fail-open` arguments.
#[derive(Args, Debug)]
pub struct FailOpenArgs {
    /// The configuration file (the same hadar.toml the daemon reads).
    #[arg(long, value_name = "FILE", default_value = "/etc/hadar/hadar.toml")]
    pub config: PathBuf,
    /// Say what would be released, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `hadar explain` arguments.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The Slurm job id, or an array element as Slurm names it (`12_3`).
    #[arg(value_name = "JOBID")]
    pub job: String,
    /// The configuration file, to find the state database. [default: /etc/hadar/hadar.toml]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The state database itself (instead of --config).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `hadar emulate` arguments.
#[derive(Args, Debug)]
pub struct EmulateArgs {
    /// The job type: a name of Gavel's table or its short form (resnet50-b64, lm-b20, a3c).
    #[arg(long, value_name = "NAME")]
    pub job_type: String,
    /// Total training steps.
    #[arg(long, value_name = "N")]
    pub steps: u64,
    /// Run this many times faster than the measured rate.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub time_scale: f64,
    /// The checkpoint file. [default: hadar-checkpoint-$SLURM_JOB_ID in the working folder]
    #[arg(long, value_name = "FILE")]
    pub checkpoint: Option<PathBuf>,
    /// The signal that asks for a checkpoint.
    #[arg(long, value_name = "NAME", default_value = "USR1")]
    pub signal: String,
    /// Seconds between progress reports.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub report_every: f64,
    /// Report progress through the job's Slurm comment (turn off with --report=false).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub report: bool,
    /// Use these GPUs instead of reading the allocation from Slurm (TYPE:N[,TYPE:N...]).
    #[arg(long, value_name = "SPEC")]
    pub gpus: Option<String>,
}

/// Hadar's settings, shared by the commands that run it.
#[derive(Args, Debug, Clone)]
pub struct HadarArgs {
    /// What Hadar's utility rewards.
    #[arg(long, value_enum, default_value_t = ObjectiveArg::AvgJct, help_heading = "Hadar")]
    pub objective: ObjectiveArg,
    /// The order Hadar considers jobs in after the makespan guard's urgent jobs (arrival is
    /// the paper's online algorithm).
    #[arg(long, value_enum, default_value_t = OrderArg::UtilityPerGpu, help_heading = "Hadar")]
    pub order: OrderArg,
    /// The most nodes one job may span (a job too big for that many nodes gets the
    /// fewest that can hold it). [default: no limit]
    #[arg(long, value_name = "N", help_heading = "Hadar")]
    pub max_nodes: Option<u32>,
    /// A job spanning several nodes takes the same number of GPUs on each, as one Slurm
    /// job's one per-node request gives it (the daemon's default; `served` always
    /// plans so).
    #[arg(long, help_heading = "Hadar")]
    pub uniform_gangs: bool,
    /// Leave GPUs idle rather than give them to jobs the prices turned away.
    #[arg(long, help_heading = "Hadar")]
    pub no_work_conservation: bool,
    /// Ignore restart costs: move running jobs whenever another placement pays more.
    #[arg(long, help_heading = "Hadar")]
    pub no_stickiness: bool,
    /// Let jobs considered earlier take a running job's GPUs (displacing it) instead of
    /// holding them for it until its turn.
    #[arg(long, help_heading = "Hadar")]
    pub no_reservations: bool,
    /// Price each GPU type by what jobs gain on it (its own `U` and `L`) instead of one
    /// price range for all types as in the paper.
    #[arg(long, help_heading = "Hadar")]
    pub per_type_prices: bool,
    /// Skip the swap improvement (admitted jobs of equal size exchanging placements while
    /// that raises total utility).
    #[arg(long, help_heading = "Hadar")]
    pub no_swaps: bool,
    /// Run each job on a single GPU type (no mixed placements).
    #[arg(long, help_heading = "Hadar")]
    pub single_type: bool,
    /// Solve each round exactly by branch and bound (small instances only).
    #[arg(long, help_heading = "Hadar")]
    pub exact: bool,
    /// Weight of the makespan-aware factor of the `avg-jct` utility (Hadar and HadarE): each
    /// job's utility is scaled by 1 + X * (its remaining time at its best rate / the
    /// round's largest), so long jobs that would set the makespan are not left to an idle
    /// tail. 0 turns it off.
    #[arg(long, value_name = "X", default_value_t = hadar_core::policies::hadar::DEFAULT_CRITICALITY, value_parser = parse_weight, allow_negative_numbers = true, help_heading = "Hadar")]
    pub criticality: f64,
    /// Weight of a cluster-wide per-type term in Hadar's prices: each price is multiplied
    /// by (U/L)^(X * share of the type's GPUs given out), so a filling type grows dearer
    /// and jobs that gain little on it turn to other types. 0 turns it off. (HadarE uses
    /// its own default, 1.)
    #[arg(long, value_name = "X", default_value_t = hadar_core::policies::hadar::DEFAULT_TYPE_PRESSURE, value_parser = parse_weight, allow_negative_numbers = true, help_heading = "Hadar")]
    pub type_pressure: f64,
    /// Turn off Hadar's makespan guard (start each job by its latest start time for the
    /// fluid bound of the remaining work): the policy as it was before it.
    #[arg(long, help_heading = "Hadar")]
    pub no_makespan_guard: bool,
    /// The makespan guard's margin in rounds: a job whose slack to the fluid bound of the
    /// remaining work is under this many rounds runs this round, on types fast enough.
    #[arg(long, value_name = "ROUNDS", default_value_t = hadar_core::policies::hadar::DEFAULT_GUARD_MARGIN_ROUNDS, value_parser = parse_weight, allow_negative_numbers = true, help_heading = "Hadar")]
    pub guard_margin: f64,
    /// A further margin of the makespan guard, as a share of the fluid bound of the
    /// remaining work: a job is urgent once its slack is under the margin in rounds plus
    /// this share of the bound.
    #[arg(long, value_name = "SHARE", default_value_t = hadar_core::policies::hadar::DEFAULT_GUARD_MARGIN_SHARE, value_parser = parse_share, allow_negative_numbers = true, help_heading = "Hadar")]
    pub guard_margin_share: f64,
    /// The makespan guard acts only in rounds when jobs are not streaming in: fewer than two
    /// distinct arrival times within the last N rounds. 0 (the default here): every round;
    /// the daemon's default is 4.
    #[arg(long, value_name = "N", default_value_t = 0.0, value_parser = parse_weight, allow_negative_numbers = true, help_heading = "Hadar")]
    pub guard_quiet_rounds: f64,
    /// The makespan guard's type tolerance: the priced pass offers a job only the GPU types
    /// whose cost per step, at the fluid bound's shadow prices, is within this share of its
    /// cheapest (work conservation may use the others). `inf` turns it off.
    #[arg(long, value_name = "X", default_value_t = hadar_core::policies::hadar::DEFAULT_GUARD_TYPE_TOLERANCE, value_parser = parse_tolerance, allow_negative_numbers = true, help_heading = "Hadar")]
    pub guard_type_tolerance: f64,
    /// Hadar's gang packing: when GPUs idle because every waiting gang is larger than what
    /// is free, smaller admitted jobs with slack yield this round so one fits (only when a
    /// restart costs under half a round).
    #[arg(long, value_enum, default_value_t = PackingArg::Any, help_heading = "Hadar")]
    pub packing: PackingArg,
    /// Hadar's pace boost: a started job behind an even pace from its first start to the
    /// makespan guard's horizon bids more, by `1 + X x its lag x its share of the horizon`
    /// on its makespan-aware factor. 0 turns it off.
    #[arg(long, value_name = "X", default_value_t = hadar_core::policies::hadar::DEFAULT_PACE_WEIGHT, value_parser = parse_weight, allow_negative_numbers = true, help_heading = "Hadar")]
    pub pace_weight: f64,
    /// The least share of the makespan guard's horizon a job's remaining best time must be
    /// for the pace boost.
    #[arg(long, value_name = "SHARE", default_value_t = hadar_core::policies::hadar::DEFAULT_PACE_MIN_SHARE, value_parser = parse_share, allow_negative_numbers = true, help_heading = "Hadar")]
    pub pace_min_share: f64,
    /// Hadar's tail plan: when at most N jobs can run and the makespan guard finds every one
    /// urgent, a configuration LP that packs whole gangs chooses who runs on which type
    /// (only when a restart costs under half a round and every job may put each worker on
    /// its own node). 0 turns it off; at most 6.
    #[arg(long, value_name = "N", default_value_t = hadar_core::policies::hadar::DEFAULT_TAIL_JOBS, value_parser = parse_tail_jobs, help_heading = "Hadar")]
    pub tail_jobs: usize,
    /// Hadar's overdue gangs: a gang on multi-GPU nodes that jobs ranked after it keep
    /// overtaking is placed after the urgent jobs, taking GPUs only from those jobs, once it
    /// has waited X times its remaining best time. 0 turns it off.
    #[arg(long, value_name = "X", default_value_t = hadar_core::policies::hadar::overdue::DEFAULT_OVERDUE_FACTOR, value_parser = parse_weight, allow_negative_numbers = true, help_heading = "Hadar")]
    pub overdue_factor: f64,
    /// Tiresias' attained-service thresholds in GPU-seconds, ascending and comma-separated
    /// (N thresholds make N+1 queues), or `none` for a single FIFO queue.
    #[arg(long, value_name = "GPU_S,...", default_value = "3250,7200", value_parser = parse_thresholds, allow_negative_numbers = true, help_heading = "Tiresias")]
    pub tiresias_thresholds: Thresholds,
    /// Tiresias' PROMOTEKNOB: a job in a lower queue returns to the top once it has waited K
    /// times as long as it ran since its last promotion; `off` never promotes.
    #[arg(long, value_name = "K", default_value = "8", value_parser = parse_knob, allow_negative_numbers = true, help_heading = "Tiresias")]
    pub tiresias_promote_knob: Knob,
}

/// Tiresias' queue thresholds as given on the command line (checked ascending and positive).
#[derive(Clone, Debug, PartialEq)]
pub struct Thresholds(pub Vec<f64>);

/// Tiresias' promotion knob as given on the command line (`None`: off).
#[derive(Clone, Debug, PartialEq)]
pub struct Knob(pub Option<f64>);

fn parse_thresholds(s: &str) -> Result<Thresholds, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("none") {
        return Ok(Thresholds(Vec::new()));
    }
    let values = s
        .split(',')
        .map(|v| {
            v.trim()
                .parse::<f64>()
                .map_err(|_| format!("`{}` is not a number of GPU-seconds", v.trim()))
        })
        .collect::<Result<Vec<f64>, String>>()?;
    hadar_core::policies::tiresias::TiresiasConfig {
        queue_thresholds_gpu_s: values.clone(),
        promote_knob: None,
    }
    .validate()
    .map_err(|e| e.to_string())?;
    Ok(Thresholds(values))
}

/// A weight or margin: a finite number, zero or more. Mistyped values (negative, `nan`,
/// `inf`) are refused rather than quietly turned into 0, which would switch the feature off.
fn parse_weight(s: &str) -> Result<f64, String> {
    let x = parse_number(s)?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(format!("`{}` must be a finite number, 0 or more", s.trim()))
    }
}

/// The tail plan's most jobs: a whole number from 0 to [`MAX_TAIL_JOBS`].
///
/// [`MAX_TAIL_JOBS`]: hadar_core::policies::hadar::MAX_TAIL_JOBS
fn parse_tail_jobs(s: &str) -> Result<usize, String> {
    let max = hadar_core::policies::hadar::MAX_TAIL_JOBS;
    match s.trim().parse::<usize>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!(
            "`{}` must be a whole number from 0 to {max}",
            s.trim()
        )),
    }
}

/// A share of a whole: a number from 0 to 1.
fn parse_share(s: &str) -> Result<f64, String> {
    let x = parse_number(s)?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("`{}` must be a share from 0 to 1", s.trim()))
    }
}

/// A tolerance: a number, 0 or more, or `inf` for none.
fn parse_tolerance(s: &str) -> Result<f64, String> {
    let x = parse_number(s)?;
    if x >= 0.0 {
        Ok(x)
    } else {
        Err(format!(
            "`{}` must be 0 or more (or `inf` for no limit)",
            s.trim()
        ))
    }
}

fn parse_number(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{}` is not a number", s.trim()))?;
    if x.is_nan() {
        return Err(format!("`{}` is not a number", s.trim()));
    }
    Ok(x)
}

fn parse_knob(s: &str) -> Result<Knob, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("off") {
        return Ok(Knob(None));
    }
    let k: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is neither a number nor `off`"))?;
    hadar_core::policies::tiresias::TiresiasConfig {
        queue_thresholds_gpu_s: Vec::new(),
        promote_knob: Some(k),
    }
    .validate()
    .map_err(|e| e.to_string())?;
    Ok(Knob(Some(k)))
}

impl HadarArgs {
    /// HadarE's settings for these arguments: the makespan-aware factor is shared; the
    /// rest (type pressure included) keep HadarE's defaults.
    pub fn hadare_config(&self) -> hadar_core::policies::hadare::HadarEConfig {
        hadar_core::policies::hadare::HadarEConfig {
            criticality: self.config().criticality,
            ..Default::default()
        }
    }

    /// Tiresias' settings for these arguments (already checked by the parsers).
    pub fn tiresias_config(&self) -> hadar_core::policies::tiresias::TiresiasConfig {
        hadar_core::policies::tiresias::TiresiasConfig {
            queue_thresholds_gpu_s: self.tiresias_thresholds.0.clone(),
            promote_knob: self.tiresias_promote_knob.0,
        }
    }

    /// The served policy's passes for these arguments: the look-ahead, Slurm's rules, and the
    /// node limit `--max-nodes` gives Hadar.
    pub fn served_config(&self) -> hadar_core::passes::served::ServedConfig {
        hadar_core::passes::served::ServedConfig {
            rules: hadar_core::passes::enforce::EnforceRules {
                max_nodes_per_job: self.max_nodes,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The core's settings for these arguments.
    pub fn config(&self) -> hadar_core::policies::hadar::HadarConfig {
        use hadar_core::policies::hadar::{HadarConfig, JobOrder, Objective};
        HadarConfig {
            objective: match self.objective {
                ObjectiveArg::AvgJct => Objective::AvgJct,
                ObjectiveArg::Makespan => Objective::Makespan,
                ObjectiveArg::Fairness => Objective::Fairness,
            },
            order: match self.order {
                OrderArg::Arrival => JobOrder::Arrival,
                OrderArg::UtilityPerGpu => JobOrder::UtilityPerGpu,
                OrderArg::ShortestRemaining => JobOrder::ShortestRemaining,
                OrderArg::CriticalFirst => JobOrder::CriticalFirst,
            },
            max_nodes_per_job: self.max_nodes,
            uniform_gangs: self.uniform_gangs,
            work_conservation: !self.no_work_conservation,
            stickiness: !self.no_stickiness,
            reserve_running: !self.no_reservations,
            per_type_prices: self.per_type_prices,
            mixed_types: !self.single_type,
            swap_improvement: !self.no_swaps,
            exact: self.exact,
            criticality: self.criticality,
            type_pressure: self.type_pressure,
            makespan_guard: !self.no_makespan_guard,
            guard_margin_rounds: self.guard_margin,
            guard_margin_share: self.guard_margin_share,
            guard_quiet_rounds: self.guard_quiet_rounds,
            guard_type_tolerance: self.guard_type_tolerance,
            pace_weight: self.pace_weight,
            pace_min_share: self.pace_min_share,
            tail_jobs: self.tail_jobs,
            overdue_factor: self.overdue_factor,
            packing: match self.packing {
                PackingArg::Off => hadar_core::policies::hadar::Packing::Off,
                PackingArg::Shorter => hadar_core::policies::hadar::Packing::Shorter,
                PackingArg::Any => hadar_core::policies::hadar::Packing::Any,
            },
            ..HadarConfig::default()
        }
    }
}

/// `--objective` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObjectiveArg {
    /// Average job completion time: shortest remaining time ranks first.
    AvgJct,
    /// Makespan: longest remaining time ranks first.
    Makespan,
    /// Finish-time fairness: jobs furthest behind their fair finish rank first.
    Fairness,
}

/// `--order` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OrderArg {
    /// Arrival order, ties by id.
    Arrival,
    /// Highest best utility per GPU first.
    UtilityPerGpu,
    /// Least remaining time at the job's fastest type first.
    ShortestRemaining,
    /// Jobs that would otherwise set the makespan first (longest first), then the rest by
    /// utility per GPU.
    CriticalFirst,
}

/// `--packing` values: whether smaller admitted jobs yield so that a waiting gang fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PackingArg {
    /// Idle GPUs stay idle when no waiting job fits.
    Off,
    /// Jobs yield only to a gang with less remaining time than theirs.
    Shorter,
    /// Jobs with slack yield to any waiting gang.
    Any,
}

/// `hadar dry-run` arguments.
#[derive(Args, Debug)]
pub struct DryRunArgs {
    /// The cluster: a TOML file of nodes, or a short form TYPE:COUNT,... such as
    /// `v100:16,p100:16,k80:16`. [default: v100:8,p100:8,k80:8, four GPUs per node]
    #[arg(long, value_name = "SPEC|FILE")]
    pub cluster: Option<String>,
    /// GPUs per node for the short cluster form. [default: 1, or 4 for the default cluster]
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// The job queue, TOML or JSON (see `hadar_formats::jobs` for the fields).
    /// [default: the embedded example queue]
    #[arg(long, value_name = "FILE")]
    pub jobs: Option<PathBuf>,
    /// A throughput table in Gavel's simulation_throughputs.json format, for jobs given by
    /// `job_type`. [default: embedded, Gavel's measured V100/P100/K80 rates]
    #[arg(long, value_name = "FILE")]
    pub throughputs: Option<PathBuf>,
    /// The policy that plans the round. [default: `served` with --config, else `hadar`]
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,
    /// A hadar.toml: plan as `hadar serve --config FILE` would, with its [sidecar]
    /// (round and restart seconds, the look-ahead), [hadar] and [hadare] tables instead of
    /// the Hadar flags and the queue's round and restart seconds.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// With --config: the queue's jobs that opted into forking (`#HADAR fork=yes`), as job
    /// ids and ranges, e.g. `0,3,10-19`, or `all`. Under the file's `[sidecar] policy =
    /// "hadare"`, `served` plans them by HadarE over the GPUs the other jobs leave (the
    /// mixed round `hadar serve` runs); under `policy = "hadar"` they run as plain jobs.
    #[arg(long, value_name = "LIST", requires = "config")]
    pub fork_jobs: Option<String>,

    /// A site file (`hadar site capture`, with `[[job]]` tables naming the queue's jobs by
    /// position): the round is planned within the site's rules as `hadar serve` plans it
    /// (docs/site-policy.md).
    #[arg(long, value_name = "FILE")]
    pub site: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub hadar: HadarArgs,
}

/// `hadar bench` subcommands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Time whole simulations: every policy over a synthetic multi-GPU trace.
    ///
    /// The trace is generated (seeded) from the throughput table as Gavel's generator does:
    /// job types uniform, 70% one worker, 10% two, 20% four for distributed types, 1-4 h
    /// each alone on a V100, all arriving at t = 0. Prints each policy's wall time.
    Simulate(BenchSimulateArgs),
    /// Time one Hadar round on a seeded synthetic cluster and queue.
    ///
    /// Node i holds GPUs of type i mod TYPES; jobs have 1, 2, 4 or 8 workers, per-type
    /// rates that fall with the type index, and the jobs a first round placed count as
    /// running (so stickiness is weighed). Prints median and max milliseconds.
    Round(BenchRoundArgs),
    /// Time `hadar average` on generated checkpoints and print its throughput in GB/s.
    ///
    /// Writes --copies checkpoints of --size-gb GB each (64 MiB tensors of pseudo-random
    /// values) into a temporary directory under --dir, averages them --repeat times and
    /// prints input bytes read per second. The inputs were just written, so they are read
    /// from the page cache when memory allows.
    Average(BenchAverageArgs),
    /// Time reading a queue as the daemon reads Slurm: JSON (24.11 and later) and text.
    ///
    /// Builds `scontrol -d show job` answers of --jobs jobs from answers captured on the
    /// 26.05 test cluster (each job copied under new ids, in both forms) and times the
    /// daemon's readers on them. Prints the answer sizes and median milliseconds; the time
    /// Slurm takes to write the answer is not included.
    ReadSlurm(BenchReadSlurmArgs),
    /// Measure what keeping a round for `hadar replay` costs: bytes and milliseconds.
    ///
    /// Builds the round a daemon would read with --jobs waiting managed jobs (Slurm's JSON
    /// answers captured on the 26.05 test cluster, each job copied under a new id with a
    /// hadar record) on --nodes copies of the captured nodes, decides it with the default
    /// configuration, keeps it in a temporary state database --repetitions times, and
    /// replays it once. Prints the kept size, the median time to encode and write it, and
    /// the replay's time and verdict.
    Snapshot(BenchSnapshotArgs),
}

/// `hadar bench snapshot` arguments.
#[derive(Args, Debug)]
pub struct BenchSnapshotArgs {
    /// Managed jobs in the queue.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub jobs: u32,
    /// Nodes (copies of the four captured ones).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub nodes: u32,
    /// Timed repetitions (after one untimed warm-up).
    #[arg(long, value_name = "N", default_value_t = 11)]
    pub repetitions: u32,
}

/// `hadar bench read-slurm` arguments.
#[derive(Args, Debug)]
pub struct BenchReadSlurmArgs {
    /// Jobs in the answer.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub jobs: u32,
    /// Timed repetitions (after one untimed warm-up).
    #[arg(long, value_name = "N", default_value_t = 11)]
    pub repetitions: u32,
}

/// `hadar bench round` arguments.
#[derive(Args, Debug)]
pub struct BenchRoundArgs {
    /// Jobs in the queue.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub jobs: u32,
    /// Nodes in the cluster.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub nodes: u32,
    /// GPUs per node.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub gpus_per_node: u32,
    /// GPU types.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub types: u32,
    /// Timed repetitions of the round (after one untimed warm-up).
    #[arg(long, value_name = "N", default_value_t = 21)]
    pub repetitions: u32,
    /// Seed of the synthetic workload.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Which scheduler plans the round: Hadar (gang placements) or HadarE (forked copies;
    /// it takes `--criticality` from the Hadar settings).
    #[arg(long, value_enum, default_value_t = BenchRoundPolicy::Hadar)]
    pub policy: BenchRoundPolicy,
    /// Jobs (the first N of --jobs) that each exclude one node, as `--exclude` does, job i
    /// node i modulo --nodes: the round is planned in pools of jobs offered the same
    /// nodes, as the daemon plans it under reservations and node choices. 0: one pool.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub excluding: u32,
    /// How many consecutive nodes each of the --excluding jobs excludes (job i from node i
    /// modulo --nodes on); the more, the likelier an exclusion binds and the round falls
    /// back to planning pool by pool.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub excluded_nodes: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub hadar: HadarArgs,
}

/// `hadar bench round --policy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchRoundPolicy {
    /// Hadar's task-level primal-dual.
    Hadar,
    /// HadarE: forked copies priced by the same book.
    Hadare,
}

/// `hadar bench simulate` arguments.
#[derive(Args, Debug)]
pub struct BenchSimulateArgs {
    /// Jobs in the synthetic trace.
    #[arg(long, value_name = "N", default_value_t = 300)]
    pub jobs: usize,
    /// The cluster (short form or TOML file). [default: v100:4,p100:4,k80:4, one GPU per node]
    #[arg(long, value_name = "SPEC|FILE")]
    pub cluster: Option<String>,
    /// GPUs per node for the short cluster form.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub gpus_per_node: u32,
    /// Policies to time, comma-separated. [default: all]
    #[arg(long, value_name = "LIST")]
    pub policy: Option<String>,
    /// Seed of the synthetic trace and of the policies.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `hadar bench average` arguments.
#[derive(Args, Debug)]
pub struct BenchAverageArgs {
    /// Size of each generated checkpoint, in GB (10^9 bytes).
    #[arg(long, value_name = "GB", default_value_t = 1.0)]
    pub size_gb: f64,
    /// Checkpoints averaged.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub copies: usize,
    /// Element type of the generated tensors.
    #[arg(long, value_enum, default_value_t = BenchDtype::F32)]
    pub dtype: BenchDtype,
    /// Timed repetitions.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: usize,
    /// Directory for the temporary files. [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Element types `hadar bench average` can generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchDtype {
    /// IEEE single precision.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
}

/// What `hadar average` does with integer, boolean and other non-averaged tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IntegersArg {
    /// They must be identical in every input; otherwise refuse, naming the tensor.
    Identical,
    /// Take the first input's values (e.g. BatchNorm's num_batches_tracked counters).
    First,
}

/// `hadar average` arguments.
#[derive(Args, Debug)]
pub struct AverageArgs {
    /// Where to write the averaged checkpoint (replaced atomically).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,

    /// Checkpoints as FILE:STEPS (the steps that copy did; weights are steps / total). With
    /// --weights-from, plain FILEs in the record's copy order, or none when the record
    /// names each copy's checkpoint.
    #[arg(value_name = "FILE[:STEPS]")]
    pub inputs: Vec<String>,

    /// Take the steps from a Job Tracker file (JSON lines, as written by `hadar simulate
    /// --trace-out` and the daemon): the one forked-job record selected by --job, --round
    /// and --policy.
    #[arg(long, value_name = "FILE")]
    pub weights_from: Option<PathBuf>,

    /// With --weights-from: the job id of the record.
    #[arg(long, value_name = "ID", requires = "weights_from")]
    pub job: Option<u64>,

    /// With --weights-from: the round of the record.
    #[arg(long, value_name = "N", requires = "weights_from")]
    pub round: Option<u64>,

    /// With --weights-from: the policy of the record (simulator output holds several).
    #[arg(long, value_name = "NAME", requires = "weights_from")]
    pub policy: Option<String>,

    /// Integer, BOOL, F8_E8M0 and packed F4/F6 tensors are never averaged: `identical`
    /// requires them equal in every input, `first` takes the first input's.
    #[arg(long, value_enum, default_value_t = IntegersArg::Identical)]
    pub integers: IntegersArg,

    /// How the copies are consolidated: `mean` writes their weighted mean; `nesterov` takes
    /// an outer Nesterov-momentum step from --start along the mean's update:
    /// delta = mean - S, velocity = MU velocity + delta, M = S + LR (MU velocity + delta).
    #[arg(long, value_enum, default_value_t = OuterArg::Mean)]
    pub outer: OuterArg,

    /// With --outer nesterov: the checkpoint every copy of the round started from.
    #[arg(long, value_name = "S.safetensors")]
    pub start: Option<PathBuf>,

    /// With --outer nesterov: the outer learning rate LR (1 with MU 0 is the plain mean).
    #[arg(long, value_name = "LR", default_value_t = 1.0)]
    pub outer_lr: f64,

    /// With --outer nesterov: the outer momentum MU, from 0 up to (not including) 1.
    #[arg(long, value_name = "MU", default_value_t = 0.0)]
    pub outer_momentum: f64,

    /// With --outer nesterov: the velocity's file (safetensors). Read when it exists (zero
    /// velocity when it does not), and replaced with the new velocity, atomically, after the
    /// output. Running the same command again then applies the momentum again: to repeat a
    /// round, read the previous round's state with --momentum-from.
    #[arg(long, value_name = "FILE")]
    pub momentum_state: Option<PathBuf>,

    /// With --momentum-state: read the velocity from this file (which must exist) instead of
    /// from --momentum-state, so that a round's state is derived from the previous round's
    /// and the command can be repeated with the same result.
    #[arg(long, value_name = "FILE", requires = "momentum_state")]
    pub momentum_from: Option<PathBuf>,

    /// With --momentum-state: start from a zero velocity, ignoring the file if it exists
    /// (the first round of a series that must be repeatable, as the daemon runs it).
    #[arg(long, requires = "momentum_state", conflicts_with = "momentum_from")]
    pub momentum_zero: bool,

    /// Output format of the summary.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `--outer` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OuterArg {
    /// The copies' steps-weighted mean.
    Mean,
    /// Outer Nesterov momentum on the mean's update (DiLoCo's outer optimizer).
    Nesterov,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for people.
    Table,
    /// One JSON object for programs; field names are stable.
    Json,
}

/// Where the policies' throughput figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ThroughputSource {
    /// The measured table.
    True,
    /// Estimated from GPU and job traits, refined online.
    Estimated,
}

/// `hadar simulate` arguments.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The cluster: a TOML file of nodes, or a short form TYPE:COUNT,... such as
    /// `v100:16,p100:16,k80:16` (split into nodes of --gpus-per-node GPUs).
    /// [default: the embedded v100:4,p100:4,k80:4, one GPU per node]
    #[arg(long, value_name = "SPEC|FILE")]
    pub cluster: Option<String>,

    /// GPUs per node for the short cluster form.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub gpus_per_node: u32,

    /// A job trace in Gavel's 10-column tab-separated format. [default: embedded 40 jobs]
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// A throughput table in Gavel's simulation_throughputs.json format.
    /// [default: embedded, Gavel's measured V100/P100/K80 rates]
    #[arg(long, value_name = "FILE")]
    pub throughputs: Option<PathBuf>,

    /// Policies to run, comma-separated (e.g. `gavel,yarn-cs,lower-bound`; `served` is
    /// what `hadar serve` runs: Hadar with the look-ahead and Slurm's rules).
    /// [default: all but `served`; with --config, `served`]
    #[arg(long, value_name = "LIST")]
    pub policy: Option<String>,

    /// A hadar.toml: run the policies as `hadar serve --config FILE` would, with its
    /// [sidecar] (round and restart seconds, the look-ahead), [hadar], [hadare] and
    /// [gpu_types] tables instead of --round-s, --restart-s and the Hadar flags.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["round_s", "restart_s", "gpu_types"])]
    pub config: Option<PathBuf>,

    /// With --config: the trace's jobs that opted into forking (`#HADAR fork=yes`), as job
    /// ids (0-based trace order) and ranges, e.g. `0,3,10-19`, or `all`. Under the file's
    /// `[sidecar] policy = "hadare"`, `served` plans them by HadarE over the GPUs the other
    /// jobs leave (the mixed round `hadar serve` runs); under `policy = "hadar"` they run as
    /// plain jobs, as on the cluster.
    #[arg(long, value_name = "LIST", requires = "config")]
    pub fork_jobs: Option<String>,

    /// A workload of Sia's benchmark (`name,time,application,num_replicas,batch_size`, e.g.
    /// Sia's workloads/philly/workload-1.csv): each job runs rigid at its GPU count and batch
    /// size, as Sia's simulator runs its Gavel baseline, at its application's restart cost,
    /// paid at every start (docs/results-sia.md). Needs --sia-profiles.
    #[arg(long, value_name = "FILE", requires = "sia_profiles", conflicts_with_all = ["trace", "throughputs", "cluster", "fork_jobs", "accounts"])]
    pub sia_workload: Option<PathBuf>,

    /// With --sia-workload: Sia's profiles folder (one subfolder per application, with its
    /// placements-*.csv, scalability-*.csv and validation-*.csv).
    #[arg(long, value_name = "DIR", requires = "sia_workload")]
    pub sia_profiles: Option<PathBuf>,

    /// With --sia-workload: the cluster, as nodes of Sia's profiled kinds (aws: 4 T4, rtx: 8
    /// RTX 2080 Ti, dgx-ext or dgx: 8 A100, azure: 8 V100, quad: 4 Quadro RTX 6000).
    #[arg(long, value_name = "KIND:NODES,...", default_value = hadar_formats::sia::apps::DEFAULT_CLUSTER, requires = "sia_workload")]
    pub sia_cluster: String,

    /// Round length in seconds.
    #[arg(long, value_name = "S", default_value_t = 360.0)]
    pub round_s: f64,

    /// Seconds a job loses each time its placement changes (checkpoint and reload).
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub restart_s: f64,

    /// Seconds a job loses each time it starts on GPUs it did not hold (first start, resume
    /// or move): the cluster model's start latency (Slurm's release, prolog and launch).
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub start_latency_s: f64,

    /// Seconds a forked job loses at the start of every round it runs: the cluster model's
    /// copy start-up (its copies are jobs started anew each round).
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub copy_startup_s: f64,

    /// The cluster model keeps a started job on the GPU types of its first placement (as
    /// Slurm 22.05 does for a typed request).
    #[arg(long)]
    pub keeps_types: bool,

    /// The share of a forked job's summed copy steps that counts as progress when it runs as
    /// two or more copies (above 0, at most 1): the cluster model's, and what HadarE plans
    /// with (with --config, HadarE plans with the file's `[hadare] progress_efficiency`).
    /// docs/hadare-quality.md measures the value consolidation is worth.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub fork_efficiency: f64,

    /// The cluster model's rounds on the daemon's clock: each lasts its whole length even
    /// when every job in it stops sooner, a forked job's copies run a whole round whenever
    /// the next comes, and a forked job ends when the round after its last copies counts
    /// them.
    #[arg(long)]
    pub fixed_rounds: bool,

    /// Seed for policies that choose at random; a run is reproducible for a seed.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Write the output to FILE instead of standard output. Written only when every
    /// policy finished; when some fail, the others' comparison goes to standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// What the policies plan with: `true` (the table's measured rates) or `estimated`
    /// (traits-based estimates refined from the rates jobs are measured at as they run;
    /// jobs still advance at their true rates). Bounds always use the true rates.
    #[arg(long, value_enum, default_value_t = ThroughputSource::True)]
    pub throughput_source: ThroughputSource,

    /// Write the Job Tracker to FILE as JSON lines: per policy, round and running job, its
    /// copies (forked) or parts (gang) with node, type and GPUs, the steps each copy did,
    /// the aggregated steps and the consolidation weights.
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<PathBuf>,
    /// A hadar.toml whose [gpu_types] says how to rate the cluster's GPU types that hadar
    /// cannot place by name (internal codes): a known model, a speed relative to one, or
    /// datasheet figures (docs/configuration.md).
    #[arg(long, value_name = "FILE")]
    pub gpu_types: Option<PathBuf>,

    /// Write a report into DIR: jobs.csv (per policy and job: arrival, first start, finish,
    /// JCT, queueing, restarts), jct-cdf.svg (every policy), and per policy busy-POLICY.svg
    /// (GPUs busy per type over time) and timeline-POLICY.svg (each job waiting, then running
    /// on each type).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,

    /// A TOML file of accounts (fair-share shares, past GPU-hours, QOS priority) and the
    /// trace jobs of each (data/site/fairshare-accounts.toml): each job's weight in the
    /// utility becomes the daemon's `exp(priority_strength x priority fraction)`, and the
    /// output gives each account's mean JCT (docs/site-policy.md).
    #[arg(long, value_name = "FILE")]
    pub accounts: Option<PathBuf>,

    /// With --accounts: how strongly priority weighs against throughput (the daemon's
    /// `[hadar] priority_strength`; 0 ignores the accounts' priority).
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub priority_strength: f64,

    /// A site file (`hadar site capture`, with `[[job]]` tables naming the trace's jobs'
    /// users, accounts, QOS, partitions and time limits): every policy plans within the
    /// site's rules as `hadar serve` does (multifactor priority as weights, QOS, association
    /// and partition limits, time limits, reservations; docs/site-policy.md). The weights
    /// weigh by --config's `[hadar] priority_strength`, else --priority-strength.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["accounts", "sia_workload"])]
    pub site: Option<PathBuf>,

    #[command(flatten)]
    pub hadar: HadarArgs,
}

/// `hadar estimate` arguments.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["evaluate", "job_type"])))]
pub struct EstimateArgs {
    /// A measured throughput table in Gavel's simulation_throughputs.json format to judge
    /// the estimator against (e.g. data/gavel/simulation_throughputs.json).
    #[arg(long, value_name = "FILE")]
    pub evaluate: Option<PathBuf>,

    /// Print this job type's estimated steps/s, e.g. `ResNet-50 (batch size 64)` (the job
    /// types of Gavel's table are known).
    #[arg(long, value_name = "NAME")]
    pub job_type: Option<String>,

    /// GPU types for --job-type, comma-separated (names or aliases such as `a100-40gb`).
    /// [default: every GPU in the built-in table]
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,

    /// Relative standard deviation of the simulated measurements in the refinement replay
    /// (0.05: each observed rate is the true rate times 1 + 0.05 z, z standard normal).
    #[arg(long, value_name = "X", default_value_t = 0.05)]
    pub noise: f64,

    /// Seed of the simulated measurement noise.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,

    /// Relative error at which the refinement counts as converged (0.10: within 10%).
    #[arg(long, value_name = "X", default_value_t = 0.10)]
    pub tolerance: f64,

    /// Rounds replayed per job and GPU type.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub rounds: u32,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}
