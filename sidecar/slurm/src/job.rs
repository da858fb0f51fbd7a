//! Jobs as `scontrol -d show job` reports them: state, comments, and where their GPUs are.

use crate::node::parse_gres;
use crate::text_records::{self, Record};
use crate::{SlurmError, hostlist};
use serde::{Deserialize, Serialize};

/// A job's state (Slurm's `JobState`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting (held or eligible).
    Pending,
    /// Running.
    Running,
    /// Suspended.
    Suspended,
    /// Finishing: processes being cleaned up.
    Completing,
    /// Exited with status 0.
    Completed,
    /// Cancelled.
    Cancelled,
    /// Exited with a failure, or could not start.
    Failed,
    /// Ran out of time.
    Timeout,
    /// A node it ran on failed.
    NodeFail,
    /// Preempted by Slurm itself.
    Preempted,
    /// Killed for memory.
    OutOfMemory,
    /// Requeued, or requeued and held; about to be pending again.
    Requeued,
    /// Any other state, as Slurm spelled it.
    Other(String),
}

impl JobStatus {
    /// Parses `JobState=`.
    pub fn parse(text: &str) -> JobStatus {
        match text {
            "PENDING" => JobStatus::Pending,
            "RUNNING" => JobStatus::Running,
            "SUSPENDED" => JobStatus::Suspended,
            "COMPLETING" => JobStatus::Completing,
            "COMPLETED" => JobStatus::Completed,
            "CANCELLED" => JobStatus::Cancelled,
            "FAILED" | "BOOT_FAIL" | "DEADLINE" | "SPECIAL_EXIT" => JobStatus::Failed,
            "TIMEOUT" => JobStatus::Timeout,
            "NODE_FAIL" => JobStatus::NodeFail,
            "PREEMPTED" => JobStatus::Preempted,
            "OUT_OF_MEMORY" => JobStatus::OutOfMemory,
            "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" => JobStatus::Requeued,
            other => JobStatus::Other(other.to_string()),
        }
    }

    /// True when the job will not run again (unless an admin requeues it).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            JobStatus::Completed
                | JobStatus::Cancelled
                | JobStatus::Failed
                | JobStatus::Timeout
                | JobStatus::NodeFail
                | JobStatus::Preempted
                | JobStatus::OutOfMemory
        )
    }

    /// The state as a lower-case word.
    pub fn as_str(&self) -> &str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Suspended => "suspended",
            JobStatus::Completing => "completing",
            JobStatus::Completed => "completed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Failed => "failed",
            JobStatus::Timeout => "timeout",
            JobStatus::NodeFail => "node_fail",
            JobStatus::Preempted => "preempted",
            JobStatus::OutOfMemory => "out_of_memory",
            JobStatus::Requeued => "requeued",
            JobStatus::Other(s) => s,
        }
    }
}

/// The GPUs a job holds on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAlloc {
    /// The node.
    pub node: String,
    /// GPUs per type there.
    pub gpus: Vec<(String, u32)>,
}

/// One job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// `JobId`.
    pub id: u64,
    /// `JobName`.
    pub name: String,
    /// The numeric user id (from `UserId=name(uid)`).
    pub user_id: Option<u32>,
    /// The numeric group id (from `GroupId=name(gid)`).
    pub group_id: Option<u32>,
    /// `JobState`.
    pub status: JobStatus,
    /// `Reason` (`JobHeldUser`, `Resources`, `None`, ...).
    pub reason: Option<String>,
    /// `Priority` (0 while held).
    pub priority: Option<u64>,
    /// `AdminComment`, where the plugin keeps the hadar record.
    pub admin_comment: Option<String>,
    /// `Comment`, where a running job reports progress.
    pub comment: Option<String>,
    /// `Partition`.
    pub partition: Option<String>,
    /// The allocated nodes (`NodeList`, expanded).
    pub nodes: Vec<String>,
    /// The requested nodes (`ReqNodeList`, expanded).
    pub req_nodes: Vec<String>,
    /// The nodes its user excluded (`ExcNodeList`, `--exclude`), expanded.
    pub exc_nodes: Vec<String>,
    /// The node features it requires (`Features`, `--constraint`), as Slurm shows them.
    pub features: Option<String>,
    /// `TresPerNode` (`gres:gpu:v100:2`), if set.
    pub tres_per_node: Option<String>,
    /// `TresPerJob`, if set.
    pub tres_per_job: Option<String>,
    /// GPUs held per node (from the `-d` detail lines), empty when not running.
    pub alloc: Vec<NodeAlloc>,
    /// `Restarts`: how often the job was requeued.
    pub restarts: u32,
    /// `HetJobId`, for components of heterogeneous jobs.
    pub het_job_id: Option<u64>,
    /// `SubmitTime` as seconds since 1970 (epoch seconds in JSON; in text, printed in UTC
    /// because the adapter runs every command with `TZ=UTC`).
    pub submit_time: Option<i64>,
    /// `StartTime`, when known.
    pub start_time: Option<i64>,
    /// `EndTime`, when known.
    pub end_time: Option<i64>,
    /// `ExitCode` (`0:0`).
    pub exit_code: Option<String>,
    /// What the site's Slurm knows of the job besides its placement: eligibility and
    /// accounting (see [`JobSite`]).
    #[serde(default)]
    pub site: JobSite,
    /// Where the job stands in a job array, `None` for a job that is not part of one.
    #[serde(default)]
    pub array: Option<ArrayPart>,
}

/// A job array's record: one element, or the array's pending elements that Slurm keeps in
/// one record until each is started or split off (`scontrol update JobId=A_I ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayPart {
    /// `ArrayJobId`: the array's id.
    pub array_id: u64,
    /// The element's index (`ArrayTaskId=3`); `None` for a record of several pending elements.
    pub task: Option<u32>,
    /// The indices a record of several pending elements holds (`ArrayTaskId=2-7%2`), in order.
    pub pending: Vec<u32>,
    /// `ArrayTaskThrottle`: at most this many elements run at once; `None` when unlimited.
    pub throttle: Option<u32>,
}

impl ArrayPart {
    /// Reads `ArrayJobId`, `ArrayTaskId` (an index, or a list such as `2-7%2`, `1,3,5-7`)
    /// and `ArrayTaskThrottle` (0 or absent: unlimited). A list of one index is that element.
    pub fn parse(array_id: u64, task: &str, throttle: Option<u32>) -> Option<ArrayPart> {
        let list = task.split('%').next()?.trim_matches(['[', ']']);
        let mut pending = Vec::new();
        for part in list.split(',').filter(|p| !p.is_empty()) {
            let (range, step) = match part.split_once(':') {
                Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
                None => (part, 1),
            };
            let (first, last) = match range.split_once('-') {
                Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
                None => (range.parse::<u32>().ok()?, range.parse::<u32>().ok()?),
            };
            // Slurm's MaxArraySize is at most 4000001; anything larger is not an array.
            if last < first || last - first > 4_000_001 {
                return None;
            }
            pending.extend((first..=last).step_by(step as usize));
        }
        let task = match pending.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
        if task.is_some() {
            pending.clear();
        }
        Some(ArrayPart {
            array_id,
            task,
            pending,
            throttle: throttle.filter(|t| *t > 0),
        })
    }

    /// The element's name as Slurm prints it (`12_3`), or its pending elements' (`12_[2-4,7]`).
    pub fn label(&self) -> String {
        match self.task {
            Some(t) => format!("{}_{t}", self.array_id),
            None => {
                let mut ranges: Vec<(u32, u32)> = Vec::new();
                for &i in &self.pending {
                    match ranges.last_mut() {
                        Some((_, last)) if i == *last + 1 => *last = i,
                        _ => ranges.push((i, i)),
                    }
                }
                let list: Vec<String> = ranges
                    .iter()
                    .map(|(a, b)| {
                        if a == b {
                            a.to_string()
                        } else {
                            format!("{a}-{b}")
                        }
                    })
                    .collect();
                format!("{}_[{}]", self.array_id, list.join(","))
            }
        }
    }
}

/// A job's eligibility and accounting fields, as Slurm reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobSite {
    /// `Dependency` (`afterok:12(unfulfilled)`), `None` when it has none left.
    pub dependency: Option<String>,
    /// `EligibleTime` (seconds since 1970): a `--begin` time, or when it became eligible.
    pub eligible_time: Option<i64>,
    /// `Account`.
    pub account: Option<String>,
    /// `QOS`.
    pub qos: Option<String>,
    /// `TimeLimit` in minutes, `None` when unlimited or unknown.
    pub time_limit_min: Option<u64>,
    /// `NumCPUs`.
    pub cpus: Option<u32>,
    /// `MinMemoryNode` in MiB, `None` when not set per node (0 counts as not set).
    pub mem_per_node_mb: Option<u64>,
    /// `NumTasks`.
    pub tasks: Option<u32>,
    /// `Deadline` (seconds since 1970, `--deadline`), `None` when it has none.
    #[serde(default)]
    pub deadline: Option<i64>,
    /// `Licenses` (`matlab:1`, `--licenses`), `None` when it asks for none.
    #[serde(default)]
    pub licenses: Option<String>,
    /// `Requeue`: whether Slurm may requeue the job (`--requeue`, `--no-requeue`, or the
    /// site's `JobRequeue`); `None` when not shown.
    #[serde(default)]
    pub requeue: Option<bool>,
    /// The user's name (`UserId=name(uid)`'s name).
    #[serde(default)]
    pub user: Option<String>,
    /// `Reservation` (`--reservation`), `None` when it asks for none.
    #[serde(default)]
    pub reservation: Option<String>,
}

/// Minutes of a Slurm duration `[D-]HH:MM:SS` (or `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, ...).
pub fn parse_minutes(text: &str) -> Option<u64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, text),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = match (text.contains('-'), parts.as_slice()) {
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (_, [h, m, s]) => (*h, *m, *s),
        (false, [m]) => (0, *m, 0),
        (false, [m, s]) => (0, *m, *s),
        _ => return None,
    };
    Some(days * 1440 + h * 60 + m + s.div_ceil(60))
}

/// MiB of a Slurm memory amount (`1000M`, `2G`, `512`, `1T`).
pub fn parse_mb(text: &str) -> Option<u64> {
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = digits.parse().ok()?;
    match unit {
        "" | "M" => Some(n),
        "K" => Some(n.div_ceil(1024)),
        "G" => Some(n * 1024),
        "T" => Some(n * 1024 * 1024),
        _ => None,
    }
}

impl SlurmJob {
    /// A job just submitted to the `gpu` partition as Slurm lists it before anything ran:
    /// pending, held by hadar (`JobHeldUser`, priority 0) with `record` in its AdminComment,
    /// user 1000, submitted at Unix second 1,000,000, no GPUs asked of Slurm. The starting
    /// point tests and benchmarks change the fields they are about.
    pub fn held_with_record(id: u64, record: &str) -> SlurmJob {
        SlurmJob {
            id,
            name: format!("job{id}"),
            user_id: Some(1000),
            group_id: None,
            status: JobStatus::Pending,
            reason: Some("JobHeldUser".into()),
            priority: Some(0),
            admin_comment: Some(record.into()),
            comment: None,
            partition: Some("gpu".into()),
            nodes: vec![],
            req_nodes: vec![],
            exc_nodes: vec![],
            features: None,
            tres_per_node: None,
            tres_per_job: None,
            alloc: vec![],
            restarts: 0,
            het_job_id: None,
            submit_time: Some(1_000_000),
            start_time: None,
            end_time: None,
            exit_code: None,
            site: Default::default(),
            array: None,
        }
    }

    /// True when Slurm holds the job (priority 0 or a held reason).
    pub fn is_held(&self) -> bool {
        self.status == JobStatus::Pending
            && (self.priority == Some(0)
                || self
                    .reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with("JobHeld")))
    }

    /// The GPU types the job's request names (`TresPerNode`/`TresPerJob`, e.g.
    /// `gres:gpu:v100:2,gres:gpu:k80:2` or `gres/gpu:v100=2`), sorted and without repeats;
    /// empty for a typeless or GPU-less request. Slurm 22.05 keeps these types for the job's
    /// life (see `GpuSpec::update_fields`).
    pub fn requested_gpu_types(&self) -> Vec<String> {
        let mut types: Vec<String> = [&self.tres_per_node, &self.tres_per_job]
            .into_iter()
            .flatten()
            .flat_map(|spec| spec.split(','))
            .filter_map(|part| {
                let part = part.trim();
                let rest = part
                    .strip_prefix("gres:gpu:")
                    .or_else(|| part.strip_prefix("gres/gpu:"))?;
                // `TYPE:N` or `TYPE=N`; a bare `N` has no type.
                let t = rest.split([':', '=']).next()?;
                (!t.is_empty() && !t.chars().all(|c| c.is_ascii_digit())).then(|| t.to_string())
            })
            .collect();
        types.sort();
        types.dedup();
        types
    }

    /// The task count the plugin recorded for the job (`tasks=N` in its hadar record): the
    /// `--ntasks` its user gave, which a placement keeps.
    pub fn recorded_tasks(&self) -> Option<u32> {
        self.recorded("tasks")?.parse().ok()
    }

    /// The CPUs and memory (MB) per GPU the plugin recorded for the job (`cpus-per-gpu=N`,
    /// `mem-per-gpu=M`: its `--cpus-per-gpu` and `--mem-per-gpu`), which a placement gives
    /// back.
    pub fn recorded_per_gpu(&self) -> (Option<u64>, Option<u64>) {
        let number = |key| self.recorded(key).and_then(|v| v.parse().ok());
        (number("cpus-per-gpu"), number("mem-per-gpu"))
    }

    /// The value of `key=` in the job's hadar record.
    fn recorded(&self, key: &str) -> Option<&str> {
        let record = self.admin_comment.as_deref()?;
        if !record.starts_with("hadar:v1 ") {
            return None;
        }
        record
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
    }

    /// GPUs held by the job, by node and type, as `(node, type, count)`.
    pub fn gpu_parts(&self) -> Vec<(String, String, u32)> {
        let mut out = Vec::new();
        for a in &self.alloc {
            for (t, n) in &a.gpus {
                out.push((a.node.clone(), t.clone(), *n));
            }
        }
        out
    }
}

/// Records refused as untrustworthy: `(job id or "?", why)`.
pub type Refused = Vec<(String, String)>;

/// The records of `scontrol -d show job`, parsed. Records that cannot be trusted (a free-text
/// field spanning lines, or two records with one job id) are dropped and reported in the
/// second list as `(job id or "?", why)`.
pub fn parse_jobs(text: &str) -> (Vec<SlurmJob>, Refused) {
    let records = text_records::parse(text, "JobId");
    let mut jobs: Vec<SlurmJob> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut duplicate_ids: Vec<u64> = Vec::new();
    // Ids seen so far: a scan of the accepted jobs per record was quadratic in the queue.
    let mut seen_ids: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for r in &records {
        let id = r.value("JobId").unwrap_or("?").to_string();
        if r.is_ambiguous() {
            refused.push((id, "a free-text field spans several lines".into()));
            continue;
        }
        match job_from_record(r) {
            Ok(j) => {
                if !seen_ids.insert(j.id) {
                    duplicate_ids.push(j.id);
                } else {
                    jobs.push(j);
                }
            }
            Err(e) => refused.push((id, e.to_string())),
        }
    }
    for id in duplicate_ids {
        jobs.retain(|j| j.id != id);
        refused.push((
            id.to_string(),
            "the job appears twice in scontrol's output".into(),
        ));
    }
    (jobs, refused)
}

fn job_from_record(r: &Record) -> Result<SlurmJob, SlurmError> {
    let bad = job_parse_error;
    let id_text = r
        .value("JobId")
        .ok_or_else(|| bad("a record without JobId".into()))?;
    let id: u64 = id_text
        .parse()
        .map_err(|_| bad(format!("JobId={id_text}")))?;
    let status = JobStatus::parse(
        r.value("JobState")
            .ok_or_else(|| bad(format!("job {id} has no JobState")))?,
    );
    let user_id = r
        .value("UserId")
        .and_then(|u| u.rsplit_once('('))
        .and_then(|(_, n)| n.trim_end_matches(')').parse().ok());
    let group_id = r
        .value("GroupId")
        .and_then(|u| u.rsplit_once('('))
        .and_then(|(_, n)| n.trim_end_matches(')').parse().ok());
    let node_list = |key: &str| match r.value(key) {
        Some(l) => hostlist::expand(l).map_err(|e| bad(format!("job {id}: {e}"))),
        None => Ok(Vec::new()),
    };
    let nodes = node_list("NodeList")?;
    let req_nodes = node_list("ReqNodeList")?;
    let exc_nodes = node_list("ExcNodeList")?;
    let alloc = allocation_from_record(r, id)?;
    let array = array_from_record(r, id)?;
    Ok(SlurmJob {
        id,
        name: r.get("JobName").unwrap_or("").to_string(),
        user_id,
        group_id,
        status,
        reason: r.value("Reason").map(str::to_string),
        priority: r.value("Priority").and_then(|p| p.parse().ok()),
        admin_comment: r.value("AdminComment").map(str::to_string),
        comment: r.value("Comment").map(str::to_string),
        partition: r.value("Partition").map(str::to_string),
        nodes,
        req_nodes,
        exc_nodes,
        features: r.value("Features").map(str::to_string),
        tres_per_node: r.value("TresPerNode").map(str::to_string),
        tres_per_job: r.value("TresPerJob").map(str::to_string),
        alloc,
        restarts: r
            .value("Restarts")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        het_job_id: r.value("HetJobId").and_then(|v| v.parse().ok()),
        submit_time: r.value("SubmitTime").and_then(parse_time),
        start_time: r.value("StartTime").and_then(parse_time),
        end_time: r.value("EndTime").and_then(parse_time),
        exit_code: r.value("ExitCode").map(str::to_string),
        site: site_from_record(r),
        array,
    })
}

/// Why a record of `scontrol show job` could not be read.
fn job_parse_error(detail: String) -> SlurmError {
    SlurmError::Parse {
        what: "scontrol show job",
        detail,
    }
}

/// The allocation of job `id` from its record's detail lines: each names nodes and the GRES
/// each of them holds.
fn allocation_from_record(r: &Record, id: u64) -> Result<Vec<NodeAlloc>, SlurmError> {
    let bad = job_parse_error;
    let mut alloc: Vec<NodeAlloc> = Vec::new();
    for d in &r.details {
        let get = |k: &str| d.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let names = hostlist::expand(get("Nodes").unwrap_or(""))
            .map_err(|e| bad(format!("job {id}: {e}")))?;
        let gpus = match get("GRES").filter(|g| !g.is_empty() && *g != "(null)") {
            Some(g) => parse_gres(g).ok_or_else(|| bad(format!("job {id}: GRES={g}")))?,
            None => Vec::new(),
        };
        for node in names {
            alloc.push(NodeAlloc {
                node,
                gpus: gpus.clone(),
            });
        }
    }
    Ok(alloc)
}

/// The array part of job `id`, `None` when its record is not an array's.
fn array_from_record(r: &Record, id: u64) -> Result<Option<ArrayPart>, SlurmError> {
    let bad = job_parse_error;
    Ok(match (r.value("ArrayJobId"), r.value("ArrayTaskId")) {
        (Some(a), Some(t)) => {
            let a = a.parse().map_err(|_| bad(format!("ArrayJobId={a}")))?;
            let throttle = r.value("ArrayTaskThrottle").and_then(|v| v.parse().ok());
            Some(
                ArrayPart::parse(a, t, throttle)
                    .ok_or_else(|| bad(format!("job {id}: ArrayTaskId={t}")))?,
            )
        }
        _ => None,
    })
}

/// The job's eligibility and accounting fields, as its record shows them.
fn site_from_record(r: &Record) -> JobSite {
    JobSite {
        dependency: r.value("Dependency").map(str::to_string),
        eligible_time: r.value("EligibleTime").and_then(parse_time),
        account: r.value("Account").map(str::to_string),
        qos: r.value("QOS").map(str::to_string),
        time_limit_min: r.value("TimeLimit").and_then(parse_minutes),
        cpus: r.value("NumCPUs").and_then(|v| v.parse().ok()),
        mem_per_node_mb: r
            .value("MinMemoryNode")
            .and_then(parse_mb)
            .filter(|m| *m > 0),
        tasks: r.value("NumTasks").and_then(|v| v.parse().ok()),
        deadline: r.value("Deadline").and_then(parse_time),
        licenses: r.value("Licenses").map(str::to_string),
        requeue: match r.value("Requeue") {
            Some("1") => Some(true),
            Some("0") => Some(false),
            _ => None,
        },
        user: r
            .value("UserId")
            .map(|u| u.split_once('(').map_or(u, |(name, _)| name).to_string()),
        reservation: r.value("Reservation").map(str::to_string),
    }
}

/// Parses Slurm's `YYYY-MM-DDTHH:MM:SS` into seconds since 1970, reading it as UTC: Slurm's
/// commands print times in their own time zone, so a caller runs them with `TZ=UTC` (as
/// [`crate::Slurm`] does for every command) before reading their times with this.
pub fn parse_time(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<i64> = time
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, m, day], [hh, mm, ss]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    if !(1..=12).contains(m) || !(1..=31).contains(day) || *hh > 23 || *mm > 59 || *ss > 60 {
        return None;
    }
    Some(days_from_civil(*y, *m, *day) * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_written_in_utc_read_back_the_same() {
        use hadar_core::gate::format_time_utc;
        for t in (-5_000_000_000i64..5_000_000_000).step_by(7_777_777) {
            let text = format_time_utc(t);
            let back = parse_time(text.trim_end_matches(" UTC"));
            assert_eq!(back, Some(t), "{text}");
        }
    }

    #[test]
    fn site_fields_durations_and_amounts_are_read() {
        assert_eq!(parse_minutes("1-02:00:00"), Some(1560));
        assert_eq!(parse_minutes("00:30:30"), Some(31));
        assert_eq!(parse_minutes("45"), Some(45));
        assert_eq!(parse_minutes("UNLIMITED"), None);
        assert_eq!(parse_mb("4G"), Some(4096));
        assert_eq!(parse_mb("1000M"), Some(1000));
        assert_eq!(parse_mb("12X"), None);
        let text = "JobId=9 JobName=a\n   Priority=0 Account=proj QOS=high JobState=PENDING Reason=JobHeldUser Dependency=afterok:8(unfulfilled)\n   TimeLimit=02:00:00\n   SubmitTime=2026-12-01T10:00:00 EligibleTime=2026-12-01T11:00:00\n   NumNodes=1 NumCPUs=4 NumTasks=2 CPUs/Task=1\n   MinCPUsNode=4 MinMemoryNode=0\n   AdminComment=hadar:v1 gpus=2 tasks=2 gpus-per-task=1\n";
        let j = parse_jobs(text).0.remove(0);
        assert_eq!(j.site.dependency.as_deref(), Some("afterok:8(unfulfilled)"));
        assert_eq!(j.site.account.as_deref(), Some("proj"));
        assert_eq!(j.site.qos.as_deref(), Some("high"));
        assert_eq!(j.site.time_limit_min, Some(120));
        assert_eq!(j.site.cpus, Some(4));
        assert_eq!(j.site.mem_per_node_mb, None);
        assert_eq!(j.site.tasks, Some(2));
        assert_eq!(j.site.eligible_time, parse_time("2026-12-01T11:00:00"));
        assert_eq!(j.recorded_tasks(), Some(2));
        assert_eq!(j.recorded_per_gpu(), (None, None));
    }

    #[test]
    fn array_records_are_read() {
        let text = "JobId=20 ArrayJobId=12 ArrayTaskId=2-4,7%2 ArrayTaskThrottle=2 JobName=a\n   JobState=PENDING Reason=None\n\
                    JobId=12 ArrayJobId=12 ArrayTaskId=0 ArrayTaskThrottle=2 JobName=a\n   JobState=RUNNING Reason=None\n\
                    JobId=21 ArrayJobId=21 ArrayTaskId=5 JobName=b\n   JobState=PENDING Reason=None\n";
        let (jobs, refused) = parse_jobs(text);
        assert!(refused.is_empty(), "{refused:?}");
        let arrays: Vec<ArrayPart> = jobs.iter().filter_map(|j| j.array.clone()).collect();
        assert_eq!(arrays[0].pending, vec![2, 3, 4, 7]);
        assert_eq!(arrays[0].label(), "12_[2-4,7]");
        assert_eq!((arrays[0].task, arrays[0].throttle), (None, Some(2)));
        assert_eq!(
            (arrays[1].task, arrays[1].label()),
            (Some(0), "12_0".into())
        );
        assert_eq!((arrays[2].task, arrays[2].throttle), (Some(5), None));
        assert_eq!(
            ArrayPart::parse(1, "0-15:4", None).unwrap().pending,
            vec![0, 4, 8, 12]
        );
        assert!(ArrayPart::parse(1, "7-3", None).is_none());
        assert!(
            parse_jobs("JobId=3 ArrayJobId=3 ArrayTaskId=x JobName=a\n   JobState=PENDING\n")
                .0
                .is_empty()
        );
    }

    #[test]
    fn times_parse_as_utc_seconds() {
        assert_eq!(parse_time("1970-01-01T00:00:00"), Some(0));
        assert_eq!(parse_time("2000-03-01T00:00:01"), Some(951_868_801));
        assert_eq!(parse_time("Unknown"), None);
        assert_eq!(parse_time("2026-13-01T00:00:00"), None);
    }

    #[test]
    fn states_and_terminality() {
        assert!(JobStatus::parse("COMPLETED").is_terminal());
        assert!(JobStatus::parse("CANCELLED").is_terminal());
        assert!(!JobStatus::parse("PENDING").is_terminal());
        assert!(!JobStatus::parse("REQUEUE_HOLD").is_terminal());
        assert_eq!(JobStatus::parse("WEIRD"), JobStatus::Other("WEIRD".into()));
    }

    #[test]
    fn forged_duplicate_job_ids_are_dropped() {
        let text = "JobId=5 JobName=a\n   JobState=RUNNING Reason=None\n   Comment=x\nJobId=5 JobName=b\n   JobState=PENDING Reason=None\n";
        let (jobs, refused) = parse_jobs(text);
        assert!(jobs.is_empty());
        assert_eq!(refused.len(), 1);
    }

    #[test]
    fn requested_gpu_types_in_both_spellings() {
        let (jobs, _) = parse_jobs(
            "JobId=7 JobName=a\n   JobState=PENDING Reason=None\n   TresPerNode=gres:gpu:v100:2,gres:gpu:k80:2\n\
             JobId=8 JobName=b\n   JobState=PENDING Reason=None\n   TresPerJob=gres/gpu:p100=3\n\
             JobId=9 JobName=c\n   JobState=PENDING Reason=None\n   TresPerNode=gres:gpu:2\n",
        );
        let types: Vec<Vec<String>> = jobs.iter().map(SlurmJob::requested_gpu_types).collect();
        assert_eq!(
            types,
            vec![
                vec!["k80".to_string(), "v100".to_string()],
                vec!["p100".to_string()],
                vec![]
            ]
        );
    }
}
