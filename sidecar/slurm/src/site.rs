//! A site's own rules as Slurm reports them: the multifactor priority settings
//! (`scontrol show config`), each job's user, account, QOS, partition and time limit
//! (`squeue`), fair-share (`sshare`), QOS and association limits (`sacctmgr`) and partition
//! limits and priorities (`scontrol show partition`). Read once per round by the daemon,
//! which turns them into the scheduling core's priority weights and limits. Every parser is
//! a pure function of the command's text.

use crate::{JobStatus, Slurm, SlurmError, SlurmJob};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The priority and enforcement settings of `scontrol show config` (a key a site file leaves
/// out is Slurm's default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteConfig {
    /// `PriorityType=priority/multifactor`.
    pub multifactor: bool,
    /// `PriorityWeightFairshare`, `QOS`, `Age`, `Partition`, `JobSize`.
    pub weight_fairshare: f64,
    /// `PriorityWeightQOS`.
    pub weight_qos: f64,
    /// `PriorityWeightAge`.
    pub weight_age: f64,
    /// `PriorityWeightPartition`.
    pub weight_partition: f64,
    /// `PriorityWeightJobSize`.
    pub weight_job_size: f64,
    /// `PriorityMaxAge`, seconds.
    pub max_age_s: f64,
    /// `PriorityFavorSmall=Yes`.
    pub favor_small: bool,
    /// `AccountingStorageEnforce` includes `limits` (or `safe`): Slurm enforces limits.
    pub enforce_limits: bool,
    /// `JobRequeue=1` (Slurm's default): a batch job is requeueable unless it says
    /// `--no-requeue`.
    #[serde(default = "requeue_by_default")]
    pub job_requeue: bool,
}

/// Slurm's `JobRequeue` when not set.
fn requeue_by_default() -> bool {
    true
}

/// Slurm's defaults: basic priority, no weights, limits not enforced, jobs requeueable.
impl Default for SiteConfig {
    fn default() -> Self {
        SiteConfig {
            multifactor: false,
            weight_fairshare: 0.0,
            weight_qos: 0.0,
            weight_age: 0.0,
            weight_partition: 0.0,
            weight_job_size: 0.0,
            max_age_s: 0.0,
            favor_small: false,
            enforce_limits: false,
            job_requeue: requeue_by_default(),
        }
    }
}

/// What a limit needs to know of one job (`squeue`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobAccount {
    /// User name.
    pub user: String,
    /// Account.
    pub account: String,
    /// QOS.
    pub qos: String,
    /// Partition.
    pub partition: String,
    /// Time limit in seconds; `None`: unlimited.
    pub time_limit_s: Option<f64>,
    /// The reservation it asked for (`--reservation`, squeue's `%v`), if any.
    pub reservation: Option<String>,
    /// Time left in seconds (`%L`: a running job's limit minus its run time, a pending
    /// job's whole limit); `None`: unlimited or not set.
    pub time_left_s: Option<f64>,
}

/// The limits of one `*TRES*` list (`cpu=8,mem=16G,gres/gpu=4,gres/gpu:v100=2`) that hadar
/// honours.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TresLimits {
    /// `gres/gpu`: GPUs of any type.
    pub gpus: Option<u32>,
    /// `gres/gpu:TYPE`: GPUs of one type, per type name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub typed_gpus: Vec<(String, u32)>,
    /// `cpu`.
    pub cpus: Option<u64>,
    /// `mem`, MB.
    pub mem_mb: Option<u64>,
}

impl TresLimits {
    /// True when it limits nothing hadar honours.
    pub fn is_empty(&self) -> bool {
        self == &TresLimits::default()
    }
}

/// A QOS's priority and GPU and job limits (`sacctmgr show qos`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QosFigures {
    /// Name.
    pub name: String,
    /// `Priority`.
    pub priority: f64,
    /// `MaxTRESPerUser`.
    #[serde(skip_serializing_if = "TresLimits::is_empty")]
    pub max_tres_per_user: TresLimits,
    /// `MaxTRESPerAccount`.
    #[serde(skip_serializing_if = "TresLimits::is_empty")]
    pub max_tres_per_account: TresLimits,
    /// `GrpTRES`.
    #[serde(skip_serializing_if = "TresLimits::is_empty")]
    pub grp_tres: TresLimits,
    /// `MaxTRES` (per job).
    #[serde(skip_serializing_if = "TresLimits::is_empty")]
    pub max_tres_per_job: TresLimits,
    /// `GrpTRESRunMins` on `gres/gpu`.
    pub grp_gpu_run_mins: Option<u64>,
    /// `MaxJobsPerUser`.
    pub max_jobs_per_user: Option<u32>,
    /// `MaxWall`, seconds.
    pub max_wall_s: Option<f64>,
}

/// An association's limits (`sacctmgr show assoc`): an account's when `user` is `None`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AssocFigures {
    /// Account.
    pub account: String,
    /// User, for a user's association.
    pub user: Option<String>,
    /// `GrpTRES`.
    #[serde(skip_serializing_if = "TresLimits::is_empty")]
    pub grp_tres: TresLimits,
    /// `MaxTRES` (per job).
    #[serde(skip_serializing_if = "TresLimits::is_empty")]
    pub max_tres_per_job: TresLimits,
    /// `GrpTRESMins` on `gres/gpu`.
    pub grp_gpu_mins: Option<u64>,
    /// `GrpTRESRunMins` on `gres/gpu`.
    pub grp_gpu_run_mins: Option<u64>,
    /// GPU-minutes the association has used (`sshare`'s `GrpTRESRaw` on `gres/gpu`; its
    /// account's and children's jobs for an account), read only when it has a
    /// `GrpTRESMins`.
    pub used_gpu_mins: u64,
    /// `GrpJobs`.
    pub grp_jobs: Option<u32>,
    /// `MaxJobs`.
    pub max_jobs: Option<u32>,
    /// `MaxWall`, seconds.
    pub max_wall_s: Option<f64>,
}

/// A partition's priority factor and time limit (`scontrol show partition`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionFigures {
    /// Name.
    pub name: String,
    /// `PriorityJobFactor`.
    pub priority_job_factor: f64,
    /// `MaxTime`, seconds; `None`: unlimited.
    pub max_time_s: Option<f64>,
    /// `State`: whether its jobs may start.
    #[serde(default)]
    pub state: PartitionState,
}

/// A partition's `State`, as `scontrol update PartitionName=P State=...` sets it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionState {
    /// `UP`: jobs are queued and started.
    #[default]
    Up,
    /// `DRAIN`: no new jobs are queued; those queued still start.
    Drain,
    /// `DOWN`: jobs are queued, none is started (a pending job shows `Reason=PartitionDown`).
    Down,
    /// `INACTIVE`: jobs are neither queued nor started (`Reason=PartitionInactive`).
    Inactive,
}

impl PartitionState {
    /// Reads Slurm's word; `None` for one this adapter does not know.
    pub fn parse(text: &str) -> Option<PartitionState> {
        match text {
            "UP" => Some(PartitionState::Up),
            "DRAIN" => Some(PartitionState::Drain),
            "DOWN" => Some(PartitionState::Down),
            "INACTIVE" => Some(PartitionState::Inactive),
            _ => None,
        }
    }

    /// Whether Slurm starts the partition's queued jobs.
    pub fn starts_jobs(self) -> bool {
        matches!(self, PartitionState::Up | PartitionState::Drain)
    }

    /// Slurm's word.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionState::Up => "UP",
            PartitionState::Drain => "DRAIN",
            PartitionState::Down => "DOWN",
            PartitionState::Inactive => "INACTIVE",
        }
    }
}

/// Everything of the site's rules that hadar reads in a round (a part a site file leaves out
/// is empty).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteFigures {
    /// Priority and enforcement settings.
    pub config: SiteConfig,
    /// Per job id.
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub jobs: HashMap<u64, JobAccount>,
    /// `sshare`'s FairShare per (account, user); empty without multifactor.
    #[serde(with = "pairs")]
    pub fairshare: HashMap<(String, String), f64>,
    /// QOS; empty without accounting.
    pub qos: Vec<QosFigures>,
    /// Associations with a limit; empty without enforced limits.
    pub assocs: Vec<AssocFigures>,
    /// Each account's parent account (`ParentName`); empty without enforced limits.
    pub parents: HashMap<String, String>,
    /// Partitions.
    pub partitions: Vec<PartitionFigures>,
    /// Advance reservations (`scontrol show reservation`).
    pub reservations: Vec<crate::reservation::Reservation>,
    /// The cluster's licenses (`scontrol show licenses`).
    #[serde(default)]
    pub licenses: Vec<crate::license::License>,
}

/// A map keyed by `(account, user)` as JSON writes it: a list of `[[account, user], value]`
/// (a JSON object's keys are strings only), sorted so the same map reads the same.
mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::HashMap;

    type Key = (String, String);

    pub fn serialize<S: Serializer>(map: &HashMap<Key, f64>, s: S) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<(&Key, &f64)> = map.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HashMap<Key, f64>, D::Error> {
        Ok(Vec::<(Key, f64)>::deserialize(d)?.into_iter().collect())
    }
}

fn bad(what: &'static str, detail: String) -> SlurmError {
    SlurmError::Parse { what, detail }
}

/// A Slurm duration (`UNLIMITED`, `5:00`, `01:00:00`, `1-00:00:00`, `30`) in seconds;
/// `Ok(None)` for unlimited or unset.
pub fn parse_duration(text: &str) -> Result<Option<f64>, String> {
    let t = text.trim();
    if t.is_empty()
        || matches!(
            t,
            "UNLIMITED" | "INFINITE" | "NOT_SET" | "Partition_Limit" | "NONE"
        )
    {
        return Ok(None);
    }
    let err = || format!("not a Slurm duration: {t:?}");
    let (days, rest) = match t.split_once('-') {
        Some((d, r)) => (d.parse::<f64>().map_err(|_| err())?, r),
        None => (0.0, t),
    };
    let parts: Vec<f64> = rest
        .split(':')
        .map(|p| p.parse::<f64>().map_err(|_| err()))
        .collect::<Result<_, _>>()?;
    let s = match (parts.as_slice(), t.contains('-')) {
        ([h], true) => h * 3600.0,
        ([m], false) => m * 60.0,
        ([m, s], false) => m * 60.0 + s,
        ([h, m], true) => h * 3600.0 + m * 60.0,
        ([h, m, s], _) => h * 3600.0 + m * 60.0 + s,
        _ => return Err(err()),
    };
    Ok(Some(days * 86400.0 + s))
}

/// The `gres/gpu` count of a TRES list (`cpu=4,gres/gpu=8`); typed GPUs are not counted.
pub fn tres_gpus(text: &str) -> Option<u32> {
    parse_tres(text).gpus
}

/// The GPU, typed GPU, CPU and memory limits of a TRES list
/// (`cpu=8,mem=16G,gres/gpu=4,gres/gpu:v100=2`); other TRES are ignored. Memory is in MB
/// unless suffixed (`K`, `M`, `G`, `T`).
pub fn parse_tres(text: &str) -> TresLimits {
    let mut out = TresLimits::default();
    for (k, v) in text.split(',').filter_map(|kv| kv.split_once('=')) {
        let (k, v) = (k.trim(), v.trim());
        match k {
            "gres/gpu" => out.gpus = v.parse().ok(),
            "cpu" => out.cpus = v.parse().ok(),
            "mem" => out.mem_mb = crate::job::parse_mb(v),
            _ => {
                if let (Some(t), Ok(n)) = (k.strip_prefix("gres/gpu:"), v.parse()) {
                    out.typed_gpus.push((t.to_string(), n));
                }
            }
        }
    }
    out
}

/// The `gres/gpu` value of a TRES list as a `u64` (GPU-minutes in `GrpTRESMins`,
/// `GrpTRESRunMins` and `sshare`'s `GrpTRESRaw`).
pub fn tres_gpu_u64(text: &str) -> Option<u64> {
    text.split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == "gres/gpu")
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// `scontrol show config`'s `Key = Value` lines.
pub fn parse_config(text: &str) -> Result<SiteConfig, SlurmError> {
    let map: HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let num = |k: &str| -> Result<f64, SlurmError> {
        match map.get(k) {
            None => Ok(0.0),
            Some(v) => v
                .parse()
                .map_err(|_| bad("scontrol show config", format!("{k} = {v}"))),
        }
    };
    let enforce = map.get("AccountingStorageEnforce").copied().unwrap_or("");
    Ok(SiteConfig {
        multifactor: map
            .get("PriorityType")
            .is_some_and(|v| *v == "priority/multifactor"),
        weight_fairshare: num("PriorityWeightFairShare")?,
        weight_qos: num("PriorityWeightQOS")?,
        weight_age: num("PriorityWeightAge")?,
        weight_partition: num("PriorityWeightPartition")?,
        weight_job_size: num("PriorityWeightJobSize")?,
        max_age_s: match map.get("PriorityMaxAge") {
            Some(v) => parse_duration(v)
                .map_err(|e| bad("scontrol show config", format!("PriorityMaxAge: {e}")))?
                .unwrap_or(0.0),
            None => 0.0,
        },
        favor_small: map
            .get("PriorityFavorSmall")
            .is_some_and(|v| v.eq_ignore_ascii_case("yes")),
        enforce_limits: enforce
            .split(',')
            .any(|e| matches!(e.trim(), "limits" | "safe")),
        job_requeue: map.get("JobRequeue").is_none_or(|v| v.trim() != "0"),
    })
}

/// What a limit needs to know of each of `jobs` at `now_unix`, from the jobs' own records
/// (the figures `squeue`'s `%u %a %q %P %l %v %L` show): [`SiteFigures::jobs`], which
/// [`Slurm::site_figures`] leaves to its caller, who has read the jobs already.
pub fn job_accounts(jobs: &[SlurmJob], now_unix: f64) -> HashMap<u64, JobAccount> {
    jobs.iter()
        .map(|j| (j.id, job_account(j, now_unix)))
        .collect()
}

fn job_account(j: &SlurmJob, now_unix: f64) -> JobAccount {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let time_limit_s = j.site.time_limit_min.map(|m| m as f64 * 60.0);
    let running = matches!(
        j.status,
        JobStatus::Running | JobStatus::Suspended | JobStatus::Completing
    );
    // A running job's limit less its time so far (none left once past it), as `%L` shows.
    let time_left_s = match (time_limit_s, j.start_time) {
        (Some(limit), Some(start)) if running => Some((limit - (now_unix - start as f64)).max(0.0)),
        (limit, _) => limit,
    };
    JobAccount {
        user: text(&j.site.user),
        account: text(&j.site.account),
        qos: text(&j.site.qos),
        partition: text(&j.partition),
        time_limit_s,
        reservation: j.site.reservation.clone(),
        time_left_s,
    }
}

/// `sshare -n -P -a -o Account,User,FairShare` rows (rows are indented by depth).
pub fn parse_fairshare(text: &str) -> HashMap<(String, String), f64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            let [account, user, fs] = f[..] else {
                return None;
            };
            Some(((account.to_string(), user.to_string()), fs.parse().ok()?))
        })
        .collect()
}

fn opt_u32(v: &str) -> Option<u32> {
    v.trim().parse().ok()
}

/// `sacctmgr -n -P show qos format=Name,Priority,MaxTRESPU,MaxTRESPA,GrpTRES,MaxTRES,MaxJobsPU,MaxWall,GrpTRESRunMins`.
pub fn parse_qos(text: &str) -> Result<Vec<QosFigures>, SlurmError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            let [name, prio, pu, pa, grp, per_job, jobs, wall, run_mins] = f[..] else {
                return Err(bad(
                    "sacctmgr show qos",
                    format!("expected 9 fields: {l:?}"),
                ));
            };
            Ok(QosFigures {
                name: name.into(),
                priority: prio.parse().unwrap_or(0.0),
                max_tres_per_user: parse_tres(pu),
                max_tres_per_account: parse_tres(pa),
                grp_tres: parse_tres(grp),
                max_tres_per_job: parse_tres(per_job),
                grp_gpu_run_mins: tres_gpu_u64(run_mins),
                max_jobs_per_user: opt_u32(jobs),
                max_wall_s: parse_duration(wall)
                    .map_err(|e| bad("sacctmgr show qos", format!("QOS {name}: {e}")))?,
            })
        })
        .collect()
}

/// The `sacctmgr show assoc` format [`parse_assocs`] reads.
pub const ASSOC_FORMAT: &str = "format=Account,User,ParentName,GrpTRES,MaxTRES,GrpJobs,MaxJobs,MaxWall,GrpTRESMins,GrpTRESRunMins";

/// `sacctmgr -n -P show assoc` rows in [`ASSOC_FORMAT`]: the associations with a limit, and
/// each account's parent account (from the account associations' `ParentName`).
pub fn parse_assocs(
    text: &str,
) -> Result<(Vec<AssocFigures>, HashMap<String, String>), SlurmError> {
    let mut out = Vec::new();
    let mut parents = HashMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = l.split('|').map(str::trim).collect();
        let [
            account,
            user,
            parent,
            grp,
            per_job,
            grp_jobs,
            max_jobs,
            wall,
            mins,
            run_mins,
        ] = f[..]
        else {
            return Err(bad(
                "sacctmgr show assoc",
                format!("expected 10 fields: {l:?}"),
            ));
        };
        if user.is_empty() && !parent.is_empty() && parent != account {
            parents.insert(account.to_string(), parent.to_string());
        }
        let a = AssocFigures {
            account: account.into(),
            user: (!user.is_empty()).then(|| user.to_string()),
            grp_tres: parse_tres(grp),
            max_tres_per_job: parse_tres(per_job),
            grp_gpu_mins: tres_gpu_u64(mins),
            grp_gpu_run_mins: tres_gpu_u64(run_mins),
            used_gpu_mins: 0,
            grp_jobs: opt_u32(grp_jobs),
            max_jobs: opt_u32(max_jobs),
            max_wall_s: parse_duration(wall)
                .map_err(|e| bad("sacctmgr show assoc", format!("{account}/{user}: {e}")))?,
        };
        let limited = !a.grp_tres.is_empty()
            || !a.max_tres_per_job.is_empty()
            || a.grp_gpu_mins.is_some()
            || a.grp_gpu_run_mins.is_some()
            || a.grp_jobs.is_some()
            || a.max_jobs.is_some()
            || a.max_wall_s.is_some();
        if limited {
            out.push(a);
        }
    }
    Ok((out, parents))
}

/// `sshare -n -P -a -o Account,User,GrpTRESRaw` rows: GPU-minutes used per (account,
/// user); the user is empty for an account's row (which counts its children too).
pub fn parse_gpu_usage(text: &str) -> HashMap<(String, String), u64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            let [account, user, raw] = f[..] else {
                return None;
            };
            Some(((account.to_string(), user.to_string()), tres_gpu_u64(raw)?))
        })
        .collect()
}

/// `scontrol show partition --oneliner` records.
pub fn parse_partitions(text: &str) -> Result<Vec<PartitionFigures>, SlurmError> {
    crate::text_records::parse(text, "PartitionName")
        .iter()
        .map(|r| {
            let name = r.get("PartitionName").unwrap_or("").to_string();
            let max_time_s = parse_duration(r.get("MaxTime").unwrap_or("UNLIMITED"))
                .map_err(|e| bad("scontrol show partition", format!("{name}: {e}")))?;
            let state = match r.get("State") {
                None => PartitionState::Up,
                Some(s) => PartitionState::parse(s)
                    .ok_or_else(|| bad("scontrol show partition", format!("{name}: State={s}")))?,
            };
            Ok(PartitionFigures {
                priority_job_factor: r
                    .get("PriorityJobFactor")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1.0),
                name,
                max_time_s,
                state,
            })
        })
        .collect()
}

impl Slurm {
    fn text(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Ok(self.run(program, &args)?)
    }

    /// The priority and enforcement settings of `scontrol show config`.
    pub fn site_config(&self) -> Result<SiteConfig, SlurmError> {
        parse_config(&self.text("scontrol", &["show", "config"])?)
    }

    /// The site's rules as Slurm reports them (without [`SiteFigures::jobs`]: see
    /// [`job_accounts`]). Read afresh at most every [`crate::SlurmConfig::site_read_every`]
    /// and kept in between, but for the licenses, whose free counts move with every job:
    /// those are read each time the site has any, unless no job changed since (see
    /// [`Slurm::unchanged_since`]).
    pub fn site_figures(&self) -> Result<SiteFigures, SlurmError> {
        let every = self.config().site_read_every;
        let mut kept = self.kept_site().lock().unwrap_or_else(|e| e.into_inner());
        match kept.as_mut() {
            Some((read_at, figures)) if read_at.elapsed() < every => {
                // Licenses change hands as jobs start and end: read again unless none did.
                if !figures.licenses.is_empty() && !self.unchanged_since(*read_at) {
                    figures.licenses = self.licenses()?;
                }
                Ok(figures.clone())
            }
            _ => {
                let figures = self.read_site_figures();
                *kept = match (&figures, every.is_zero()) {
                    (Ok(f), false) => Some((std::time::Instant::now(), f.clone())),
                    _ => None,
                };
                figures
            }
        }
    }

    /// The site's rules, read now. Fair-share is read only under `priority/multifactor`;
    /// QOS and associations only with accounting (when the site enforces limits, or for QOS
    /// priorities under multifactor).
    fn read_site_figures(&self) -> Result<SiteFigures, SlurmError> {
        let config = self.site_config()?;
        let partitions =
            parse_partitions(&self.text("scontrol", &["show", "partition", "--oneliner"])?)?;
        let fairshare = if config.multifactor && config.weight_fairshare > 0.0 {
            parse_fairshare(&self.text(
                "sshare",
                &["-n", "-P", "-a", "-o", "Account,User,FairShare"],
            )?)
        } else {
            HashMap::new()
        };
        let qos = if config.enforce_limits || (config.multifactor && config.weight_qos > 0.0) {
            parse_qos(&self.text(
                "sacctmgr",
                &[
                    "-n",
                    "-P",
                    "show",
                    "qos",
                    "format=Name,Priority,MaxTRESPU,MaxTRESPA,GrpTRES,MaxTRES,MaxJobsPU,MaxWall,GrpTRESRunMins",
                ],
            )?)?
        } else {
            Vec::new()
        };
        let (mut assocs, parents) = if config.enforce_limits {
            parse_assocs(&self.text("sacctmgr", &["-n", "-P", "show", "assoc", ASSOC_FORMAT])?)?
        } else {
            (Vec::new(), HashMap::new())
        };
        let reservations = self.reservations()?;
        let licenses = self.licenses()?;
        if assocs.iter().any(|a| a.grp_gpu_mins.is_some()) {
            let used = parse_gpu_usage(&self.text(
                "sshare",
                &["-n", "-P", "-a", "-o", "Account,User,GrpTRESRaw"],
            )?);
            for a in &mut assocs {
                let key = (a.account.clone(), a.user.clone().unwrap_or_default());
                a.used_gpu_mins = used.get(&key).copied().unwrap_or(0);
            }
        }
        Ok(SiteFigures {
            reservations,
            licenses,
            config,
            jobs: HashMap::new(),
            fairshare,
            qos,
            assocs,
            parents,
            partitions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("UNLIMITED"), Ok(None));
        assert_eq!(parse_duration("1:00"), Ok(Some(60.0)));
        assert_eq!(parse_duration("01:00:00"), Ok(Some(3600.0)));
        assert_eq!(parse_duration("1-00:00:00"), Ok(Some(86400.0)));
        assert_eq!(
            parse_duration("2-3"),
            Ok(Some(2.0 * 86400.0 + 3.0 * 3600.0))
        );
        assert_eq!(parse_duration("30"), Ok(Some(1800.0)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn config_lines() {
        let c = parse_config(
            "PriorityType            = priority/multifactor\nPriorityWeightFairShare = 10000\nPriorityWeightQOS       = 5000\nPriorityMaxAge          = 1-00:00:00\nAccountingStorageEnforce = associations,limits,qos\nPriorityFavorSmall      = No\n",
        )
        .unwrap();
        assert!(c.multifactor && c.enforce_limits && !c.favor_small);
        assert_eq!(
            (c.weight_fairshare, c.weight_qos, c.weight_age),
            (10000.0, 5000.0, 0.0)
        );
        assert_eq!(c.max_age_s, 86400.0);
        assert!(parse_config("PriorityWeightQOS = lots\n").is_err());
        // JobRequeue: Slurm's default is 1, shown or not.
        assert!(c.job_requeue);
        assert!(
            !parse_config("JobRequeue              = 0\n")
                .unwrap()
                .job_requeue
        );
        assert!(
            parse_config("JobRequeue              = 1\n")
                .unwrap()
                .job_requeue
        );
    }

    #[test]
    fn tables() {
        let mut running = SlurmJob::held_with_record(12, "r");
        running.status = JobStatus::Running;
        running.start_time = Some(1_000);
        running.site.time_limit_min = Some(1);
        running.site.user = Some("alice".into());
        let mut pending = SlurmJob::held_with_record(14, "r");
        pending.site.time_limit_min = Some(5);
        pending.site.reservation = Some("r1".into());
        let late = SlurmJob {
            id: 15,
            start_time: Some(900),
            ..running.clone()
        };
        let j = job_accounts(&[running, pending, late], 1_020.0);
        assert_eq!(j[&12].user, "alice");
        assert_eq!(j[&12].partition, "gpu");
        assert_eq!(j[&12].time_limit_s, Some(60.0));
        assert_eq!(j[&12].time_left_s, Some(40.0));
        assert_eq!(j[&12].reservation, None);
        assert_eq!(j[&14].reservation.as_deref(), Some("r1"));
        assert_eq!(j[&14].time_left_s, Some(300.0));
        assert_eq!(j[&15].time_left_s, Some(0.0), "past its limit: none left");
        let f = parse_fairshare("root||1.000000\n fs_a||0.5\n  fs_a|root|0.250000\n");
        assert_eq!(f[&("fs_a".to_string(), "root".to_string())], 0.25);
        let q = parse_qos(
            "normal|0|||||||\ngpu4|10|gres/gpu=4,gres/gpu:v100=2|||cpu=2,gres/gpu=8|3|01:00:00|gres/gpu=600\n",
        )
        .unwrap();
        assert_eq!(q[1].max_tres_per_user.gpus, Some(4));
        assert_eq!(
            q[1].max_tres_per_user.typed_gpus,
            vec![("v100".to_string(), 2)]
        );
        assert_eq!(q[1].max_tres_per_job.gpus, Some(8));
        assert_eq!(q[1].max_tres_per_job.cpus, Some(2));
        assert_eq!(q[1].grp_gpu_run_mins, Some(600));
        assert_eq!(q[1].max_jobs_per_user, Some(3));
        assert_eq!(q[1].max_wall_s, Some(3600.0));
        let (a, parents) = parse_assocs(
            "root||root|||||||\nphys||root|gres/gpu=6||||||\nphys|alice||||||2||\nlab||phys|cpu=8,mem=2G|||||gres/gpu=100|gres/gpu=50\n",
        )
        .unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[0].grp_tres.gpus, Some(6));
        assert_eq!(a[1].user.as_deref(), Some("alice"));
        assert_eq!(a[2].grp_tres.cpus, Some(8));
        assert_eq!(a[2].grp_tres.mem_mb, Some(2048));
        assert_eq!(
            (a[2].grp_gpu_mins, a[2].grp_gpu_run_mins),
            (Some(100), Some(50))
        );
        assert_eq!(parents.get("lab").map(String::as_str), Some("phys"));
        assert_eq!(parents.get("phys").map(String::as_str), Some("root"));
        assert!(!parents.contains_key("root"));
        assert!(parse_assocs("phys|alice|\n").is_err());
        let u = parse_gpu_usage(
            "root||cpu=10,gres/gpu=7\n lab||cpu=3,gres/gpu=5,gres/gpu:v100=5\n  lab|alice|gres/gpu=2\n",
        );
        assert_eq!(u[&("lab".to_string(), String::new())], 5);
        assert_eq!(u[&("lab".to_string(), "alice".to_string())], 2);
        let p = parse_partitions(
            "PartitionName=gpu AllowGroups=ALL PriorityJobFactor=2 MaxTime=01:00:00 State=UP\n",
        )
        .unwrap();
        assert_eq!(p[0].priority_job_factor, 2.0);
        assert_eq!(p[0].max_time_s, Some(3600.0));
        assert_eq!(p[0].state, PartitionState::Up);
        let p = parse_partitions(
            "PartitionName=a State=DOWN\nPartitionName=b State=INACTIVE\nPartitionName=c State=DRAIN\n",
        )
        .unwrap();
        let states: Vec<(PartitionState, bool)> =
            p.iter().map(|p| (p.state, p.state.starts_jobs())).collect();
        assert_eq!(
            states,
            [
                (PartitionState::Down, false),
                (PartitionState::Inactive, false),
                (PartitionState::Drain, true)
            ]
        );
        let e = parse_partitions("PartitionName=gpu State=SIDEWAYS\n").unwrap_err();
        assert!(e.to_string().contains("gpu: State=SIDEWAYS"), "{e}");
    }
}
