//! The daemon's configuration: the `[sidecar]` and `[hadar]` tables of the shared
//! `hadar.toml` (the `[slurm]` and `[plugin]` tables are the plugin's and are read by the
//! shared request crate's reader, so both programs accept exactly the same file). Unknown
//! keys and tables are refused, naming the file and line. `[gpu_types]` (a site's GPU type
//! names, see `hadar_core::estimate::site`) is read here too. The annotated reference is
//! `etc/hadar.toml`.

use hadar_core::estimate::{GpuCatalog, SiteGpu};
use hadar_core::policies::hadar::{HadarConfig, JobOrder};
use hadar_core::policies::hadare::HadarEConfig;
use hadar_core::policies::{PolicyName, PolicyOptions};
use hadar_request::Outer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything `hadar serve` reads from `hadar.toml`.
///
/// Serialized as the daemon used it (parsed, defaults filled in) into each kept round's
/// inputs, so `hadar replay` decides with it after the file changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DaemonConfig {
    /// `[sidecar]`.
    pub sidecar: SidecarConfig,
    /// `[hadar]`: the Hadar policy's settings (as in `hadar simulate`).
    pub hadar: HadarConfig,
    /// `[hadare]`: the HadarE policy's settings, used for `fork=yes` jobs under
    /// `policy = "hadare"`.
    pub hadare: HadarEConfig,
    /// `[fork]`: how forked jobs run on Slurm.
    pub fork: ForkConfig,
    /// `[slurm].managed_partitions`: the partitions whose nodes hadar schedules (empty: all).
    pub partitions: Vec<String>,
    /// `[slurm].slurm_conf`: the slurm.conf the client commands use (`SLURM_CONF`).
    pub slurm_conf: Option<PathBuf>,
    /// `[gpu_types]`: the site's GRES type names the built-in GPU table cannot place.
    pub gpu_types: BTreeMap<String, SiteGpu>,
}

/// `[gpu_types]` as written: each value a model name or a table.
#[derive(Default)]
struct GpuTypes(BTreeMap<String, SiteGpu>);

impl<'de> Deserialize<'de> for GpuTypes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Entry(
            #[serde(deserialize_with = "hadar_core::estimate::site::deserialize_entry")] SiteGpu,
        );
        let map = BTreeMap::<String, Entry>::deserialize(d)?;
        Ok(GpuTypes(
            map.into_iter().map(|(k, Entry(v))| (k, v)).collect(),
        ))
    }
}

impl DaemonConfig {
    /// The served policy's passes these settings configure, as `hadar serve` runs them:
    /// the look-ahead when `[sidecar] earliest_finish_types`, Slurm's rules (Hadar keeps to
    /// `[hadar] max_nodes_per_job` itself, and a started job it keeps where it is may span
    /// more nodes, so no node limit on top).
    pub fn served(&self) -> hadar_core::passes::served::ServedConfig {
        hadar_core::passes::served::ServedConfig {
            look_ahead: self.sidecar.earliest_finish_types && self.sidecar.policy.is_hadar(),
            rules: hadar_core::passes::enforce::EnforceRules::default(),
        }
    }

    /// The policies' options as `hadar serve` runs them under these settings (`[hadar]`,
    /// `[hadare]`, the passes, `[sidecar] policy`; Tiresias with its defaults), for the
    /// daemon, `hadar simulate --config` and `hadar dry-run --config` alike. No job forks
    /// ([`PolicyOptions::forked`] is the caller's).
    pub fn policy_options(&self, seed: u64) -> PolicyOptions {
        PolicyOptions {
            seed,
            hadar: self.hadar.clone(),
            hadare: self.hadare.clone(),
            tiresias: Default::default(),
            served: self.served(),
            served_policy: self.sidecar.policy.name(),
            forked: Default::default(),
        }
    }

    /// The round policy the daemon plans its plain jobs with (`[sidecar] policy`, Hadar for
    /// `hadare`), built as the served passes run it.
    pub fn round_policy(&self) -> Box<dyn hadar_core::Policy> {
        hadar_core::policies::build_served_inner(&self.policy_options(0))
            .expect("a parsed [sidecar] policy is servable")
    }

    /// The GPU catalog this configuration describes: the built-in table and `[gpu_types]`
    /// (checked when the file was read, so this does not fail on a parsed config).
    pub fn gpu_catalog(&self) -> GpuCatalog {
        GpuCatalog::with_site(&self.gpu_types).unwrap_or_default()
    }
}

/// `[sidecar] policy`: the round policy `hadar serve` runs inside its passes, any the
/// simulator has but the bounds and `served` itself ([`PolicyName::is_servable`]). Written as
/// the policy's `--policy` name; `hadare` is Hadar for plain jobs and HadarE for the jobs that
/// opted into forking (`#HADAR fork=yes`), which under any other policy are plain jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyChoice(PolicyName);

impl PolicyChoice {
    /// Hadar for every job (the default).
    pub const HADAR: PolicyChoice = PolicyChoice(PolicyName::Hadar);
    /// Hadar for plain jobs, HadarE for `fork=yes` jobs.
    pub const HADARE: PolicyChoice = PolicyChoice(PolicyName::HadarE);

    /// The choice for `name`, when it can be served.
    pub fn new(name: PolicyName) -> Result<PolicyChoice, String> {
        if name.is_servable() {
            Ok(PolicyChoice(name))
        } else {
            Err(format!(
                "`{name}` cannot be served; policies `hadar serve` runs: {}",
                PolicyName::servable_names()
            ))
        }
    }

    /// The policy's name.
    pub fn name(self) -> PolicyName {
        self.0
    }

    /// Whether `fork=yes` jobs are forked (HadarE).
    pub fn forks(self) -> bool {
        self.0 == PolicyName::HadarE
    }

    /// Whether the plain jobs are planned by Hadar (`hadar` and `hadare`): the passes made
    /// for Hadar (the commitment look-ahead) apply only then.
    pub fn is_hadar(self) -> bool {
        self.0.plain() == PolicyName::Hadar
    }
}

impl std::fmt::Display for PolicyChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl Serialize for PolicyChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for PolicyChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let name: PolicyName = text.parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown policy `{}`; policies `hadar serve` runs: {}",
                text.trim(),
                PolicyName::servable_names()
            ))
        })?;
        PolicyChoice::new(name).map_err(serde::de::Error::custom)
    }
}

/// `[fork]`: how forked (HadarE) jobs run on Slurm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForkConfig {
    /// The folder where each forked job gets its own folder (owned by the job's user) for
    /// its script, copies' checkpoints and results and consolidated checkpoints. Must be on
    /// a file system every node sees at the same path.
    pub spool: PathBuf,
    /// The fork runner (`wrappers/hadar-fork-run`) as installed on every node.
    pub runner: PathBuf,
    /// The `hadar` binary run (as the job's user) to average copies; unset: the daemon's own.
    pub hadar_bin: Option<PathBuf>,
    /// Seconds before the next round at which copies must have written their checkpoints
    /// and exited (their deadline is round start + round_seconds - this).
    pub deadline_margin_seconds: f64,
    /// Rounds in a row with no successful copy after which the forked job fails.
    pub max_failed_rounds: u32,
    /// How copies are consolidated when a job does not say (`#HADAR outer=`): `mean`,
    /// `nesterov` or `nesterov:LR:MU` (checked when the file is read).
    pub outer: String,
}

impl ForkConfig {
    /// The consolidation of jobs that do not choose one.
    pub fn default_outer(&self) -> Outer {
        Outer::parse(&self.outer).unwrap_or(hadar_request::directive::DEFAULT_NESTEROV)
    }
}

impl Default for ForkConfig {
    fn default() -> Self {
        ForkConfig {
            spool: PathBuf::from("/var/spool/hadar/fork"),
            runner: PathBuf::from("/usr/libexec/hadar/hadar-fork-run"),
            hadar_bin: None,
            deadline_margin_seconds: 30.0,
            max_failed_rounds: 2,
            outer: hadar_request::directive::DEFAULT_NESTEROV.to_string(),
        }
    }
}

/// `[sidecar]`: the daemon's own settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SidecarConfig {
    /// The Unix socket the plugin notifies of new jobs (a notice starts a round early).
    pub socket: PathBuf,
    /// The SQLite state database.
    pub state: PathBuf,
    /// Seconds between rounds.
    pub round_seconds: f64,
    /// Seconds a round woken by a notice waits after the first notice before it reads the
    /// queue, so that a burst of submissions is planned as one.
    pub wake_settle_seconds: f64,
    /// Seconds a preempted job gets between its checkpoint signal and its requeue.
    pub preempt_grace_seconds: f64,
    /// The signal that asks a job to checkpoint (a name `scancel --signal` accepts).
    pub preempt_signal: String,
    /// Seconds a job loses when it is moved (checkpoint and reload), as Hadar weighs it.
    pub restart_seconds: f64,
    /// The most seconds one Slurm command may take.
    pub command_timeout_seconds: f64,
    /// Seconds between full reads of every job; between them a round reads in full only
    /// the jobs that changed. 0: every round reads every job in full.
    pub full_read_seconds: f64,
    /// Seconds the site's rules (partitions, reservations, QOS, associations, fair-share,
    /// priority settings) are kept before they are read again. 0: every round reads them.
    pub site_read_seconds: f64,
    /// The folder holding scontrol and scancel; unset: found on PATH.
    pub slurm_bin_dir: Option<PathBuf>,
    /// Steps assumed for a job that gives neither steps= nor epochs=.
    pub default_steps: u64,
    /// Steps/s per GPU assumed for a job with no type, hint or report yet.
    pub default_rate_per_gpu: f64,
    /// Multiplies every prior throughput (1 on a real cluster; the time scale of emulated jobs).
    pub throughput_scale: f64,
    /// Weight of a new progress report in the learned rate (exponential moving average).
    pub rate_learning_weight: f64,
    /// Start a waiting job only on the GPU type where its remaining work ends first, by a
    /// look-ahead over the queue ([`hadar_core::passes::lookahead`]); moving it later costs a restart.
    pub earliest_finish_types: bool,
    /// The round policy (`hadar`, `hadare`, `gavel`, `tiresias`, ...; see [`PolicyChoice`]).
    pub policy: PolicyChoice,
    /// `HOST:PORT` on which to serve Prometheus metrics at `/metrics`; unset: not served.
    pub metrics_listen: Option<String>,
    /// A node_exporter textfile the metrics are written to after each round; unset: none.
    pub metrics_textfile: Option<PathBuf>,
    /// Days of history (rounds, closed actions, finished jobs) the state database keeps.
    pub keep_days: f64,
    /// Rounds of history (rounds and their actions) the state database keeps; whichever of
    /// this and `keep_days` passes them first deletes them.
    pub keep_rounds: u64,
    /// Rounds whose snapshots (`hadar replay`) the state database keeps, within
    /// `keep_rounds` and `keep_days`: a snapshot is larger than a round's summary.
    pub keep_snapshot_rounds: u64,
    /// Seconds without a completed round after which `hadar fail-open` hands the managed
    /// jobs hadar holds back to Slurm's own scheduling.
    pub fail_open_after: f64,
    /// The heartbeat file the daemon rewrites after every completed round; unset: the state
    /// database's path with `.heartbeat` appended.
    pub heartbeat: Option<PathBuf>,
    /// Seconds a leader's lease lasts after its last renewal (renewed every round, before
    /// every action, and while it waits between rounds); a standby takes over after it.
    pub lease_seconds: f64,
    /// The largest difference allowed between the clocks of two daemons' hosts.
    pub max_clock_skew_seconds: f64,
    /// Shadow mode: read the cluster and queue every round and record what hadar would do,
    /// acting on nothing (`hadar_ops::shadow`); `hadar serve --shadow` sets it too.
    pub shadow: bool,
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            socket: PathBuf::from("/run/hadar/hadar.sock"),
            state: PathBuf::from("/var/lib/hadar/state.db"),
            round_seconds: 360.0,
            wake_settle_seconds: 0.5,
            preempt_grace_seconds: 30.0,
            preempt_signal: "USR1".into(),
            restart_seconds: 60.0,
            command_timeout_seconds: 20.0,
            full_read_seconds: 600.0,
            site_read_seconds: 60.0,
            slurm_bin_dir: None,
            default_steps: 10_000,
            default_rate_per_gpu: 1.0,
            throughput_scale: 1.0,
            rate_learning_weight: 0.3,
            earliest_finish_types: true,
            policy: PolicyChoice::HADAR,
            metrics_listen: None,
            metrics_textfile: None,
            keep_days: 30.0,
            keep_rounds: 10_000,
            keep_snapshot_rounds: 240,
            fail_open_after: 900.0,
            heartbeat: None,
            lease_seconds: 90.0,
            max_clock_skew_seconds: 5.0,
            shadow: false,
        }
    }
}

impl SidecarConfig {
    /// The round length.
    pub fn round(&self) -> Duration {
        Duration::from_secs_f64(self.round_seconds)
    }

    /// How long a woken round waits after the first notice ([`SidecarConfig::wake_settle_seconds`]).
    pub fn wake_settle(&self) -> Duration {
        Duration::from_secs_f64(self.wake_settle_seconds)
    }

    /// The heartbeat file: `heartbeat`, or the state database's path plus `.heartbeat`
    /// (beside the database, but a plain file: it can be read when the database cannot).
    pub fn heartbeat_path(&self) -> PathBuf {
        self.heartbeat.clone().unwrap_or_else(|| {
            let mut p = self.state.clone().into_os_string();
            p.push(".heartbeat");
            PathBuf::from(p)
        })
    }
}

/// The daemon's `[hadar] guard_quiet_rounds`: a site's jobs arrive as a stream, not as one
/// batch, and the makespan guard's target moves with every arrival (measured in
/// docs/algorithms.md, "The guard in a stream of jobs").
pub const DAEMON_GUARD_QUIET_ROUNDS: f64 = 4.0;

/// The daemon's `[hadar] order`: shortest remaining time first, which with the guard
/// standing aside in a stream and overdue gangs gave the lowest average JCT on Sia's
/// workloads and on Gavel's traces (docs/algorithms.md, "Shortest remaining first").
pub const DAEMON_ORDER: JobOrder = JobOrder::ShortestRemaining;

/// Whether `[hadar]` sets `key`. Where the daemon's default differs from the simulator's,
/// it applies only when the file leaves the key out: `max_nodes_per_job` (1, not "no
/// limit") and `uniform_gangs` (true): one Slurm job gets the same GPUs on every node, so a
/// placement spanning nodes is only enforceable when it is uniform, and on one node any mix
/// of types is; `guard_quiet_rounds` ([`DAEMON_GUARD_QUIET_ROUNDS`]) and `order`
/// ([`DAEMON_ORDER`]).
fn text_sets_hadar_key(text: &str, key: &str) -> bool {
    toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|t| {
            t.get("hadar")
                .and_then(|h| h.as_table())
                .map(|h| h.contains_key(key))
        })
        .unwrap_or(false)
}

/// Why the configuration was refused: the same errors as the plugin's reader gives for the
/// tables it shares with the daemon (unreadable file, malformed TOML or unknown key, a value
/// out of range), so both programs word a bad `hadar.toml` alike.
pub use hadar_request::ConfigError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    slurm: Option<toml::Value>,
    #[serde(default)]
    plugin: Option<toml::Value>,
    #[serde(default)]
    sidecar: SidecarConfig,
    #[serde(default)]
    hadar: HadarConfig,
    #[serde(default)]
    hadare: HadarEConfig,
    #[serde(default)]
    fork: ForkConfig,
    #[serde(default)]
    gpu_types: GpuTypes,
}

impl DaemonConfig {
    /// Parses configuration text; `path` is for messages.
    pub fn parse(path: &str, text: &str) -> Result<DaemonConfig, ConfigError> {
        let shared = crate::shared::SlurmTables::parse(path, text)?;
        let file: File = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            reason: hadar_request::config::one_line(&e.to_string()),
        })?;
        let _ = (&file.slurm, &file.plugin);
        check_sidecar(path, &file.sidecar)?;
        check_fork_and_hadar(path, &file)?;
        check_gpu_types(path, text, &file)?;
        let mut hadar = file.hadar;
        if !text_sets_hadar_key(text, "max_nodes_per_job") {
            hadar.max_nodes_per_job = Some(1);
        }
        if !text_sets_hadar_key(text, "uniform_gangs") {
            hadar.uniform_gangs = true;
        }
        if !text_sets_hadar_key(text, "guard_quiet_rounds") {
            hadar.guard_quiet_rounds = DAEMON_GUARD_QUIET_ROUNDS;
        }
        if !text_sets_hadar_key(text, "order") {
            hadar.order = DAEMON_ORDER;
        }
        Ok(DaemonConfig {
            sidecar: file.sidecar,
            hadar,
            hadare: file.hadare,
            fork: file.fork,
            partitions: shared.managed_partitions,
            slurm_conf: shared.slurm_conf,
            gpu_types: file.gpu_types.0,
        })
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<DaemonConfig, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        DaemonConfig::parse(&shown, &text)
    }
}

/// [`range`] for a weight or factor: a finite number, 0 or more.
fn non_negative(path: &str, key: &'static str, value: f64) -> Result<(), ConfigError> {
    range(
        path,
        key,
        value,
        value.is_finite() && value >= 0.0,
        "give 0 or more",
    )
}

/// A key's value is in its range, or the error naming the key, the value and what to give.
fn range(
    path: &str,
    key: &'static str,
    value: f64,
    ok: bool,
    expected: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Range {
            path: path.to_string(),
            key,
            value: value.to_string(),
            expected,
        })
    }
}

/// The `[sidecar]` table's ranges, and the relations between its keys.
fn check_sidecar(path: &str, s: &SidecarConfig) -> Result<(), ConfigError> {
    for (key, value, ok, expected) in timing_checks(s).into_iter().chain(sidecar_checks(s)) {
        range(path, key, value, ok, expected)?;
    }
    if s.preempt_signal.is_empty() || !s.preempt_signal.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ConfigError::Range {
            path: path.to_string(),
            key: "sidecar.preempt_signal",
            value: s.preempt_signal.clone(),
            expected: "give a signal name such as USR1",
        });
    }
    Ok(())
}

/// One numeric check: (key, its value, whether it is in range, what to give instead).
type Check = (&'static str, f64, bool, &'static str);

/// The `[sidecar]` table's checks of its rounds' timing and reading, in the order they are
/// checked.
fn timing_checks(s: &SidecarConfig) -> [Check; 7] {
    [
        (
            "sidecar.round_seconds",
            s.round_seconds,
            s.round_seconds.is_finite() && s.round_seconds >= 0.5,
            "give at least 0.5",
        ),
        (
            "sidecar.wake_settle_seconds",
            s.wake_settle_seconds,
            s.wake_settle_seconds.is_finite()
                && s.wake_settle_seconds >= 0.0
                && s.wake_settle_seconds <= s.round_seconds,
            "give 0 or more, at most round_seconds",
        ),
        (
            "sidecar.preempt_grace_seconds",
            s.preempt_grace_seconds,
            s.preempt_grace_seconds.is_finite()
                && (0.0..=3600.0).contains(&s.preempt_grace_seconds),
            "give 0 to 3600",
        ),
        (
            "sidecar.restart_seconds",
            s.restart_seconds,
            s.restart_seconds.is_finite() && s.restart_seconds >= 0.0,
            "give 0 or more",
        ),
        (
            "sidecar.command_timeout_seconds",
            s.command_timeout_seconds,
            s.command_timeout_seconds.is_finite()
                && (0.1..=600.0).contains(&s.command_timeout_seconds),
            "give 0.1 to 600",
        ),
        (
            "sidecar.full_read_seconds",
            s.full_read_seconds,
            s.full_read_seconds.is_finite() && (0.0..=86_400.0).contains(&s.full_read_seconds),
            "give 0 to 86400",
        ),
        (
            "sidecar.site_read_seconds",
            s.site_read_seconds,
            s.site_read_seconds.is_finite() && (0.0..=3600.0).contains(&s.site_read_seconds),
            "give 0 to 3600",
        ),
    ]
}

/// The `[sidecar]` table's other numeric checks, in the order they are checked.
fn sidecar_checks(s: &SidecarConfig) -> [Check; 10] {
    [
        (
            "sidecar.default_steps",
            s.default_steps as f64,
            s.default_steps > 0,
            "give at least 1",
        ),
        (
            "sidecar.default_rate_per_gpu",
            s.default_rate_per_gpu,
            s.default_rate_per_gpu.is_finite() && s.default_rate_per_gpu > 0.0,
            "give a positive number",
        ),
        (
            "sidecar.throughput_scale",
            s.throughput_scale,
            s.throughput_scale.is_finite() && s.throughput_scale > 0.0,
            "give a positive number",
        ),
        (
            "sidecar.rate_learning_weight",
            s.rate_learning_weight,
            s.rate_learning_weight > 0.0 && s.rate_learning_weight <= 1.0,
            "give a number in (0, 1]",
        ),
        (
            "sidecar.keep_days",
            s.keep_days,
            s.keep_days.is_finite() && s.keep_days > 0.0,
            "give a positive number of days",
        ),
        (
            "sidecar.keep_rounds",
            s.keep_rounds as f64,
            s.keep_rounds >= 1,
            "give at least 1",
        ),
        (
            "sidecar.keep_snapshot_rounds",
            s.keep_snapshot_rounds as f64,
            s.keep_snapshot_rounds >= 1,
            "give at least 1",
        ),
        // A round that takes its whole period plus a slow Slurm must not look like a dead
        // daemon: the limit is at least two rounds.
        (
            "sidecar.fail_open_after",
            s.fail_open_after,
            s.fail_open_after.is_finite() && s.fail_open_after >= 2.0 * s.round_seconds,
            "give at least twice sidecar.round_seconds",
        ),
        // Between two renewals a leader waits at most one command (no round waits out a
        // preemption's grace time).
        (
            "sidecar.lease_seconds",
            s.lease_seconds,
            s.lease_seconds.is_finite() && s.lease_seconds > s.command_timeout_seconds,
            "give more than command_timeout_seconds",
        ),
        (
            "sidecar.max_clock_skew_seconds",
            s.max_clock_skew_seconds,
            s.max_clock_skew_seconds.is_finite() && s.max_clock_skew_seconds >= 0.0,
            "give 0 or more",
        ),
    ]
}

/// The `[fork]` table's ranges and `[hadar]` `priority_strength`, `overdue_factor` and
/// `tail_jobs`.
fn check_fork_and_hadar(path: &str, file: &File) -> Result<(), ConfigError> {
    let s = &file.sidecar;
    let f = &file.fork;
    let priority_strength = file.hadar.priority_strength;
    // The margin only matters when jobs are forked; other daemons may keep short rounds.
    range(
        path,
        "fork.deadline_margin_seconds",
        f.deadline_margin_seconds,
        f.deadline_margin_seconds.is_finite()
            && f.deadline_margin_seconds >= 0.0
            && (!s.policy.forks() || f.deadline_margin_seconds < s.round_seconds),
        "give 0 or more, below sidecar.round_seconds",
    )?;
    non_negative(path, "hadar.priority_strength", priority_strength)?;
    let efficiency = file.hadare.progress_efficiency;
    range(
        path,
        "hadare.progress_efficiency",
        efficiency,
        efficiency > 0.0 && efficiency <= 1.0,
        "give a share above 0 and at most 1",
    )?;
    let quiet = file.hadar.guard_quiet_rounds;
    non_negative(path, "hadar.guard_quiet_rounds", quiet)?;
    let overdue_factor = file.hadar.overdue_factor;
    non_negative(path, "hadar.overdue_factor", overdue_factor)?;
    let tail_jobs = file.hadar.tail_jobs;
    range(
        path,
        "hadar.tail_jobs",
        tail_jobs as f64,
        tail_jobs <= hadar_core::policies::hadar::MAX_TAIL_JOBS,
        "give a whole number from 0 to 6",
    )?;
    range(
        path,
        "fork.max_failed_rounds",
        f.max_failed_rounds as f64,
        f.max_failed_rounds >= 1,
        "give at least 1",
    )?;
    if Outer::parse(&f.outer).is_none() {
        return Err(ConfigError::Range {
            path: path.to_string(),
            key: "fork.outer",
            value: hadar_request::excerpt(&f.outer),
            expected: "give mean, nesterov, or nesterov:LR:MU with LR in (0, 10] and MU in [0, 1)",
        });
    }
    Ok(())
}

/// The site's `[gpu_types]` names and rates.
fn check_gpu_types(path: &str, text: &str, file: &File) -> Result<(), ConfigError> {
    if let Err((name, e)) = GpuCatalog::with_site(&file.gpu_types.0) {
        return Err(ConfigError::Parse {
            path: path.to_string(),
            reason: format!(
                "gpu_types.{} (line {}): {e}",
                hadar_request::excerpt(&name),
                crate::key_lines::Lines::new(text)
                    .key(&["gpu_types", &name])
                    .unwrap_or(0)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c = DaemonConfig::parse("h.toml", "").unwrap();
        assert_eq!(c.sidecar, SidecarConfig::default());
        assert!(c.partitions.is_empty());
        assert_eq!(
            c.hadar.max_nodes_per_job,
            Some(1),
            "the daemon keeps jobs on one node by default"
        );
        let c = DaemonConfig::parse("h.toml", "[hadar]\nmax_nodes_per_job = 2\n").unwrap();
        assert_eq!(c.hadar.max_nodes_per_job, Some(2));
        let c = DaemonConfig::parse(
            "h.toml",
            "[slurm]\nmanaged_partitions = [\"gpu\"]\n[sidecar]\nround_seconds = 2\nstate = \"/tmp/s.db\"\n[hadar]\nstickiness = false\n",
        )
        .unwrap();
        assert_eq!(c.sidecar.round_seconds, 2.0);
        assert_eq!(c.sidecar.state, PathBuf::from("/tmp/s.db"));
        assert!(!c.hadar.stickiness);
        assert_eq!(c.partitions, vec!["gpu"]);
        assert!(c.sidecar.earliest_finish_types, "on by default");
        let c =
            DaemonConfig::parse("h.toml", "[sidecar]\nearliest_finish_types = false\n").unwrap();
        assert!(!c.sidecar.earliest_finish_types);
    }

    #[test]
    fn shadow_mode_is_off_unless_asked_for() {
        assert!(!DaemonConfig::parse("h.toml", "").unwrap().sidecar.shadow);
        let c = DaemonConfig::parse("h.toml", "[sidecar]\nshadow = true\n").unwrap();
        assert!(c.sidecar.shadow);
    }

    #[test]
    fn the_documented_example_file_parses_and_states_the_defaults() {
        let c =
            DaemonConfig::parse("etc/hadar.toml", include_str!("../../../etc/hadar.toml")).unwrap();
        assert_eq!(c.sidecar, SidecarConfig::default());
        assert_eq!(
            c.hadar,
            HadarConfig {
                max_nodes_per_job: Some(1),
                uniform_gangs: true,
                guard_quiet_rounds: DAEMON_GUARD_QUIET_ROUNDS,
                order: DAEMON_ORDER,
                ..HadarConfig::default()
            }
        );
        assert_eq!(c.partitions, vec!["gpu"]);
        assert_eq!(c.hadare, HadarEConfig::default());
        assert_eq!(c.fork, ForkConfig::default());
    }

    #[test]
    fn fail_open_settings_are_read_and_checked() {
        let c = DaemonConfig::parse("h.toml", "[sidecar]\nstate = \"/v/s.db\"\n").unwrap();
        assert_eq!(c.sidecar.fail_open_after, 900.0);
        assert_eq!(
            c.sidecar.heartbeat_path(),
            PathBuf::from("/v/s.db.heartbeat")
        );
        let c = DaemonConfig::parse(
            "h.toml",
            "[sidecar]\nround_seconds = 2\nfail_open_after = 6\nheartbeat = \"/run/hb\"\n",
        )
        .unwrap();
        assert_eq!(c.sidecar.fail_open_after, 6.0);
        assert_eq!(c.sidecar.heartbeat_path(), PathBuf::from("/run/hb"));
        // Shorter than two rounds would fail a live daemon open.
        let e = DaemonConfig::parse(
            "h.toml",
            "[sidecar]\nround_seconds = 10\nfail_open_after = 15\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("sidecar.fail_open_after") && e.contains("twice sidecar.round_seconds"),
            "{e}"
        );
    }

    #[test]
    fn the_policy_and_fork_settings_are_read_and_checked() {
        let c = DaemonConfig::parse(
            "h.toml",
            "[sidecar]\npolicy = \"hadare\"\nround_seconds = 10\n[fork]\nspool = \"/s\"\ndeadline_margin_seconds = 3\n[hadare]\nmax_copies = 2\n",
        )
        .unwrap();
        assert_eq!(c.sidecar.policy, PolicyChoice::HADARE);
        assert_eq!(c.fork.spool, PathBuf::from("/s"));
        assert_eq!(c.fork.deadline_margin_seconds, 3.0);
        assert_eq!(
            c.fork.default_outer(),
            hadar_request::directive::DEFAULT_NESTEROV
        );
        let mean = DaemonConfig::parse("t", "[fork]\nouter = \"mean\"\n").unwrap();
        assert_eq!(mean.fork.default_outer(), Outer::Mean);
        let e = DaemonConfig::parse("t", "[fork]\nouter = \"nesterov:1:1\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("fork.outer") && e.contains("nesterov:1:1"),
            "{e}"
        );
        assert_eq!(c.hadare.max_copies, 2);
        let c = DaemonConfig::parse("h.toml", "[sidecar]\npolicy = \"gavel\"\n").unwrap();
        assert_eq!(c.sidecar.policy.name(), PolicyName::Gavel);
        assert!(!c.sidecar.policy.forks() && !c.sidecar.policy.is_hadar());
        let e = DaemonConfig::parse("h.toml", "[sidecar]\npolicy = \"gavell\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("gavell") && e.contains("tiresias"), "{e}");
        let e = DaemonConfig::parse("h.toml", "[sidecar]\npolicy = \"lower-bound\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot be served") && e.contains("hadare"),
            "{e}"
        );
        let e = DaemonConfig::parse(
            "h.toml",
            "[sidecar]\npolicy = \"hadare\"\nround_seconds = 10\n[fork]\ndeadline_margin_seconds = 10\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("fork.deadline_margin_seconds"), "{e}");
        let e = DaemonConfig::parse("h.toml", "[fork]\nspoool = \"/s\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("spoool"), "{e}");
    }

    #[test]
    fn the_tail_plans_job_count_is_read_and_bounded() {
        let tail_jobs = |value: &str| {
            DaemonConfig::parse("h.toml", &format!("[hadar]\ntail_jobs = {value}\n"))
                .map(|c| c.hadar.tail_jobs)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            DaemonConfig::parse("h.toml", "").unwrap().hadar.tail_jobs,
            hadar_core::policies::hadar::DEFAULT_TAIL_JOBS
        );
        assert_eq!(tail_jobs("0"), Ok(0));
        let e = tail_jobs("7").unwrap_err();
        assert!(
            e.contains("hadar.tail_jobs") && e.contains('7') && e.contains("0 to 6"),
            "{e}"
        );
        let e = tail_jobs("-1").unwrap_err();
        assert!(e.contains("tail_jobs") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn the_overdue_factor_and_the_guards_quiet_rounds_are_read_and_refused_below_zero() {
        let factor = |value: &str| {
            DaemonConfig::parse("h.toml", &format!("[hadar]\noverdue_factor = {value}\n"))
                .map(|c| c.hadar.overdue_factor)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            DaemonConfig::parse("h.toml", "")
                .unwrap()
                .hadar
                .overdue_factor,
            hadar_core::policies::hadar::overdue::DEFAULT_OVERDUE_FACTOR
        );
        assert_eq!(factor("0"), Ok(0.0));
        assert_eq!(factor("1.5"), Ok(1.5));
        // The guard's quiet rounds: the daemon's own default unless the file sets them.
        let quiet =
            |text: &str| DaemonConfig::parse("h.toml", text).map(|c| c.hadar.guard_quiet_rounds);
        assert_eq!(quiet(""), Ok(DAEMON_GUARD_QUIET_ROUNDS));
        assert_eq!(quiet("[hadar]\nguard_quiet_rounds = 0\n"), Ok(0.0));
        let order = |text: &str| DaemonConfig::parse("h.toml", text).map(|c| c.hadar.order);
        assert_eq!(order(""), Ok(DAEMON_ORDER));
        assert_eq!(
            order("[hadar]\norder = \"utility-per-gpu\"\n"),
            Ok(JobOrder::UtilityPerGpu)
        );
        let e = quiet("[hadar]\nguard_quiet_rounds = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("hadar.guard_quiet_rounds"), "{e}");
        let e = factor("-2").unwrap_err();
        assert!(
            e.contains("hadar.overdue_factor") && e.contains("-2"),
            "{e}"
        );
        let e = factor("nan").unwrap_err();
        assert!(e.contains("hadar.overdue_factor"), "{e}");
    }

    #[test]
    fn unknown_keys_and_tables_and_bad_values_are_refused() {
        let e = DaemonConfig::parse("h.toml", "[sidecar]\nround_second = 2\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("h.toml: ") && e.contains("round_second") && e.contains("line 2"),
            "{e}"
        );
        let e = DaemonConfig::parse("h.toml", "[sidekar]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sidekar"), "{e}");
        let e = DaemonConfig::parse("h.toml", "[sidecar]\nround_seconds = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "h.toml: sidecar.round_seconds = 0 is out of range; give at least 0.5"
        );
        let e = DaemonConfig::parse(
            "h.toml",
            "[sidecar]\nround_seconds = 3\nwake_settle_seconds = 4\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "h.toml: sidecar.wake_settle_seconds = 4 is out of range; give 0 or more, at most round_seconds"
        );
        let e = DaemonConfig::parse("h.toml", "[sidecar]\npreempt_signal = \"USR1;reboot\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("preempt_signal"), "{e}");
        let e = DaemonConfig::parse("h.toml", "[hadar]\nstickyness = true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stickyness"), "{e}");
        let e =
            DaemonConfig::parse("h.toml", "[slurm]\nmanaged_partition = [\"gpu\"]\n").unwrap_err();
        assert!(
            matches!(e, ConfigError::Parse { .. }) && e.to_string().contains("managed_partition"),
            "{e}"
        );
        let e = DaemonConfig::parse("h.toml", "[plugin]\nnotify_timeout_ms = 0\n").unwrap_err();
        assert!(e.to_string().contains("notify_timeout_ms"), "{e}");
    }

    #[test]
    fn gpu_types_are_read_and_checked() {
        let c = DaemonConfig::parse(
            "h.toml",
            "[gpu_types]\ngx7 = \"v100\"\nzq = { model = \"a100\", speed = 2.0 }\n",
        )
        .unwrap();
        let catalog = c.gpu_catalog();
        assert_eq!(catalog.lookup("gx7").map(|s| s.name.as_str()), Some("v100"));
        assert_eq!(catalog.lookup("zq").map(|s| s.fp32_tflops), Some(39.0));
        let e = DaemonConfig::parse("h.toml", "[gpu_types]\nzq = { modle = \"a100\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("modle") && e.contains("line 2"), "{e}");
        let e = DaemonConfig::parse("h.toml", "[gpu_types]\nzq = \"rtx9090\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gpu_types.zq (line 2)") && e.contains("rtx9090"),
            "{e}"
        );
    }

    #[test]
    fn the_gpu_types_examples_of_the_documented_file_parse() {
        let doc = include_str!("../../../etc/hadar.toml");
        let examples: String = doc
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| ["gx7 =", "gx9 =", "zq1 ="].iter().any(|k| l.starts_with(k)))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(examples.lines().count(), 3, "{examples}");
        let c = DaemonConfig::parse("ex.toml", &format!("[gpu_types]\n{examples}")).unwrap();
        let catalog = c.gpu_catalog();
        for name in ["gx7", "gx9", "zq1"] {
            assert!(catalog.lookup(name).is_some(), "{name}");
        }
    }
}
