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
        Some(rev) => Box::leak(format!("{} (git {rev})", env!("CARGO_PKG_VERSION")).into_boxed_str()),
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
    Simulate(SimulateArgs),
    /// Estimate jobs' throughput from GPU and job traits, or judge the estimator against a
    /// measured table.
    ///
    /// `--evaluate FILE` compares the estimates with a table in Gavel's format (each job type
    /// predicted by constants fitted on the other job types) and replays the online
    /// refinement with simulated noisy measurements. `--job-type NAME` prints one job type's
    /// estimated steps/s on each GPU type.
    Estimate(EstimateArgs),
    /// Measure hadar's speed and print the figures (run a release build: `cargo run --release -- bench ...`).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Schedule a Slurm cluster with Hadar: the daemon (runs until SIGTERM).
    ///
    /// Each round it reads Slurm's nodes and hadar-managed jobs (held by the job_submit/hadar
    /// plugin), plans with the Hadar core, starts, keeps or preempts jobs, and records the
    /// round in its state database.
    Serve(ServeArgs),
    /// Show the daemon's last round: GPUs per type, prices, queue and running placements.
    Status(StatusArgs),
    /// Say why a job runs where it does, or why it waits.
    Explain(ExplainArgs),
    /// An example training job for `hadar serve` (run it inside a Slurm job).
    ///
    /// It trains at the rate Gavel measured for --job-type on the GPU types of its own
    /// allocation (the slowest type's rate across several types), times --time-scale,
    /// reports progress in its Slurm comment, checkpoints on --signal and waits to be
    /// requeued, and resumes from its checkpoint after a restart.
    Emulate(EmulateArgs),
}

/// `hadar serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The configuration file (the same hadar.toml the plugin reads).
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
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `hadar explain` arguments.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The Slurm job id.
    #[arg(value_name = "JOBID")]
    pub job: u64,
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

/// `hadar bench` subcommands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Time whole simulations: every policy over a synthetic multi-GPU trace.
    ///
    /// The trace is generated (seeded) from the throughput table as Gavel's generator does:
    /// job types uniform, 70% one worker, 10% two, 20% four for distributed types, 1-4 h
    /// each alone on a V100, all arriving at t = 0. Prints each policy's wall time.
    Simulate(BenchSimulateArgs),
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

    /// Policies to run, comma-separated (e.g. `gavel,yarn-cs,lower-bound`).
    /// [default: all]
    #[arg(long, value_name = "LIST")]
    pub policy: Option<String>,

    /// Round length in seconds.
    #[arg(long, value_name = "S", default_value_t = 360.0)]
    pub round_s: f64,

    /// Seconds a job loses each time its placement changes (checkpoint and reload).
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub restart_s: f64,

    /// Seed for policies that choose at random; a run is reproducible for a seed.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,

    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Write the output to FILE instead of standard output (written only when every
    /// policy finished).
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
}

/// `hadar estimate` arguments.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["evaluate", "job_type"])))]
pub struct EstimateArgs {
    /// A measured throughput table in Gavel's simulation_throughputs.json format to judge
    /// the estimator against (e.g. ../shared/data/gavel/simulation_throughputs.json).
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
