//! Slurm's own JSON (`scontrol show node --json`, `scontrol -d show job --json`), for the
//! releases that have it in the form hadar reads (24.11 and later: data_parser v0.0.40 to
//! v0.0.45).
//!
//! JSON carries what the text form cannot: times as epoch seconds (no time zone to guess),
//! and free text (comments, job names) as strings that cannot imitate other fields or
//! records. The reader checks the data_parser version in the answer's `meta` and refuses one
//! it does not know, naming it, rather than guessing at fields that may have moved.

use crate::job::{JobStatus, NodeAlloc, SlurmJob};
use crate::node::{NodeFree, NodeInfo, NodeState, parse_gres};
use crate::{SlurmError, hostlist};
use serde::Deserialize;
use serde::de::Deserializer;

/// The data_parser versions this reader knows (the `meta.plugin.data_parser` of an answer).
/// The fields hadar reads have the same names and shapes in all of them.
pub const KNOWN_DATA_PARSERS: [&str; 6] = [
    "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45",
];

/// A number as data_parser v0.0.40+ writes it: plain, or `{"set", "infinite", "number"}`
/// where unset and infinite mean "no value" to hadar.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Number(pub(crate) Option<i64>);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped {
            #[serde(default)]
            set: bool,
            #[serde(default)]
            infinite: bool,
            #[serde(default)]
            number: Option<serde_json::Number>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Plain(serde_json::Number),
            Wrapped(Wrapped),
            Null(()),
        }
        let whole = |n: &serde_json::Number| {
            n.as_i64()
                .or_else(|| n.as_u64().map(|u| u.min(i64::MAX as u64) as i64))
                .or_else(|| n.as_f64().map(|f| f as i64))
        };
        match Either::deserialize(d)? {
            Either::Plain(n) => Ok(Number(whole(&n))),
            Either::Wrapped(w) if w.set && !w.infinite => {
                Ok(Number(w.number.as_ref().and_then(whole)))
            }
            Either::Wrapped(_) | Either::Null(()) => Ok(Number(None)),
        }
    }
}

/// A string that Slurm may also write as `null`, or (for some list fields in some
/// versions) as an array of strings, joined with commas.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Text(pub(crate) Option<String>);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            One(String),
            Many(Vec<String>),
            Null(()),
        }
        Ok(Text(match Either::deserialize(d)? {
            Either::One(s) => Some(s),
            Either::Many(v) => Some(v.join(",")),
            Either::Null(()) => None,
        }))
    }
}

impl Text {
    /// The text, `None` when absent or empty.
    pub(crate) fn get(self) -> Option<String> {
        self.0.filter(|s| !s.is_empty())
    }
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    plugin: Option<MetaPlugin>,
}

#[derive(Deserialize)]
struct MetaPlugin {
    #[serde(default)]
    data_parser: Option<String>,
}

/// Only the `meta` of an answer, read first so that an unknown version is named before its
/// body is interpreted.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    meta: Option<Meta>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

/// Checks an answer's data_parser version and returns it.
pub(crate) fn check_version(what: &'static str, text: &str) -> Result<String, SlurmError> {
    let bad = |detail: String| SlurmError::Parse { what, detail };
    let envelope: Envelope =
        serde_json::from_str(text).map_err(|e| bad(describe_json_error(text, &e)))?;
    if let Some(first) = envelope.errors.first() {
        return Err(bad(format!("Slurm answered with an error: {first}")));
    }
    let version = envelope
        .meta
        .and_then(|m| m.plugin)
        .and_then(|p| p.data_parser)
        .ok_or_else(|| {
            bad("the answer names no data_parser version (meta.plugin.data_parser)".into())
        })?;
    let short = version.trim_start_matches("data_parser/").to_string();
    if !KNOWN_DATA_PARSERS.contains(&short.as_str()) {
        return Err(bad(format!(
            "data_parser {short} is not one hadar reads (it reads {}); upgrade hadar or ask Slurm for a known version",
            KNOWN_DATA_PARSERS.join(", ")
        )));
    }
    Ok(short)
}

/// A serde_json error with where it happened and whether the text was cut short.
pub(crate) fn describe_json_error(text: &str, e: &serde_json::Error) -> String {
    if text.trim().is_empty() {
        return "the answer is empty, not JSON".into();
    }
    match e.classify() {
        serde_json::error::Category::Eof => format!(
            "the JSON ends early after {} bytes (truncated answer?)",
            text.len()
        ),
        serde_json::error::Category::Syntax if !text.trim_start().starts_with(['{', '[']) => {
            let start: String = text.trim_start().chars().take(60).collect();
            format!("the answer is not JSON: it starts with {start:?}")
        }
        _ => format!("line {} column {}: {e}", e.line(), e.column()),
    }
}

#[derive(Deserialize)]
struct NodesAnswer {
    nodes: Vec<JsonNode>,
}

#[derive(Deserialize)]
struct JsonNode {
    name: String,
    #[serde(default)]
    state: Vec<String>,
    #[serde(default)]
    gres: Text,
    #[serde(default)]
    partitions: Vec<String>,
    /// A list in the releases seen; read as [`Text`] so a comma-joined string or `null`
    /// reads too.
    #[serde(default)]
    features: Text,
    #[serde(default)]
    cpus: Option<u64>,
    #[serde(default)]
    effective_cpus: Option<u64>,
    #[serde(default)]
    alloc_cpus: Option<u64>,
    #[serde(default)]
    real_memory: Option<u64>,
    #[serde(default)]
    alloc_memory: Option<u64>,
}

/// Parses `scontrol show node --json`.
pub fn parse_nodes(text: &str) -> Result<Vec<NodeInfo>, SlurmError> {
    const WHAT: &str = "scontrol show node --json";
    check_version(WHAT, text)?;
    let bad = |detail: String| SlurmError::Parse { what: WHAT, detail };
    let answer: NodesAnswer =
        serde_json::from_str(text).map_err(|e| bad(describe_json_error(text, &e)))?;
    answer
        .nodes
        .into_iter()
        .map(|n| {
            let gpus = match n.gres.get() {
                Some(g) => {
                    parse_gres(&g).ok_or_else(|| bad(format!("node {}: gres {g:?}", n.name)))?
                }
                None => Vec::new(),
            };
            Ok(NodeInfo {
                state: NodeState::parse(&node_state_text(&n.state)),
                name: n.name,
                gpus,
                partitions: n.partitions,
                features: n
                    .features
                    .get()
                    .map(|f| f.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
                free: NodeFree::of(
                    n.effective_cpus,
                    n.cpus,
                    n.alloc_cpus,
                    n.real_memory,
                    n.alloc_memory,
                ),
            })
        })
        .collect()
}

/// A node's state array (`["IDLE", "DRAIN"]`) in the text form `IDLE+DRAIN` that
/// [`NodeState::parse`] reads.
fn node_state_text(state: &[String]) -> String {
    state.join("+")
}

#[derive(Deserialize)]
struct JobsAnswer {
    jobs: Vec<JsonJob>,
}

#[derive(Deserialize)]
struct JsonJob {
    job_id: Number,
    #[serde(default)]
    name: Text,
    #[serde(default)]
    user_id: Number,
    #[serde(default)]
    group_id: Number,
    #[serde(default)]
    job_state: Vec<String>,
    #[serde(default)]
    state_reason: Text,
    #[serde(default)]
    priority: Number,
    #[serde(default)]
    admin_comment: Text,
    #[serde(default)]
    comment: Text,
    #[serde(default)]
    partition: Text,
    #[serde(default)]
    nodes: Text,
    #[serde(default)]
    required_nodes: Text,
    #[serde(default)]
    excluded_nodes: Text,
    #[serde(default)]
    features: Text,
    #[serde(default)]
    tres_per_node: Text,
    #[serde(default)]
    tres_per_job: Text,
    #[serde(default)]
    gres_detail: Vec<String>,
    #[serde(default)]
    job_resources: Option<JobResources>,
    #[serde(default)]
    restart_cnt: Number,
    #[serde(default)]
    het_job_id: Number,
    #[serde(default)]
    submit_time: Number,
    #[serde(default)]
    start_time: Number,
    #[serde(default)]
    end_time: Number,
    #[serde(default)]
    exit_code: Option<ExitCode>,
    #[serde(default)]
    dependency: Text,
    #[serde(default)]
    eligible_time: Number,
    #[serde(default)]
    account: Text,
    #[serde(default)]
    qos: Text,
    #[serde(default)]
    time_limit: Number,
    #[serde(default)]
    cpus: Number,
    #[serde(default)]
    memory_per_node: Number,
    #[serde(default)]
    tasks: Number,
    #[serde(default)]
    deadline: Number,
    #[serde(default)]
    licenses: Text,
    #[serde(default)]
    user_name: Text,
    #[serde(default)]
    resv_name: Text,
    #[serde(default)]
    requeue: Option<bool>,
    #[serde(default)]
    array_job_id: Number,
    #[serde(default)]
    array_task_id: Number,
    #[serde(default)]
    array_task_string: Text,
    #[serde(default)]
    array_max_tasks: Number,
}

#[derive(Deserialize)]
struct JobResources {
    #[serde(default)]
    nodes: Option<ResourceNodes>,
}

#[derive(Deserialize)]
struct ResourceNodes {
    #[serde(default)]
    allocation: Vec<AllocatedNode>,
}

#[derive(Deserialize)]
struct AllocatedNode {
    name: String,
}

#[derive(Deserialize)]
struct ExitCode {
    #[serde(default)]
    return_code: Number,
    #[serde(default)]
    signal: Option<ExitSignal>,
}

#[derive(Deserialize)]
struct ExitSignal {
    #[serde(default)]
    id: Number,
}

/// The state text scontrol's text form shows for a state array: a flag that
/// `job_state_string` puts before the base state wins, in its order.
fn job_state_text(state: &[String]) -> String {
    const FLAGS_FIRST: [&str; 13] = [
        "COMPLETING",
        "STAGE_OUT",
        "CONFIGURING",
        "EXPEDITING",
        "RESIZING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "STOPPED",
        "REVOKED",
        "RESV_DEL_HOLD",
        "SIGNALING",
    ];
    FLAGS_FIRST
        .iter()
        .find(|f| state.iter().any(|s| s == *f))
        .map(|f| f.to_string())
        .or_else(|| state.first().cloned())
        .unwrap_or_default()
}

/// Parses `scontrol -d show job --json`. Unlike the text form, no field can imitate another
/// record, so every well-formed job is kept.
pub fn parse_jobs(text: &str) -> Result<Vec<SlurmJob>, SlurmError> {
    const WHAT: &str = "scontrol show job --json";
    check_version(WHAT, text)?;
    let bad = |detail: String| SlurmError::Parse { what: WHAT, detail };
    let answer: JobsAnswer =
        serde_json::from_str(text).map_err(|e| bad(describe_json_error(text, &e)))?;
    answer
        .jobs
        .into_iter()
        .map(|j| job_from_json(j).map_err(bad))
        .collect()
}

fn job_from_json(j: JsonJob) -> Result<SlurmJob, String> {
    let id = j
        .job_id
        .0
        .filter(|id| *id > 0)
        .ok_or("a job without a job_id")? as u64;
    let expand = |field: &str, list: Option<String>| match list {
        Some(l) => hostlist::expand(&l).map_err(|e| format!("job {id}: {field}: {e}")),
        None => Ok(Vec::new()),
    };
    let nodes = expand("nodes", j.nodes.get())?;
    let req_nodes = expand("required_nodes", j.required_nodes.get())?;
    let exc_nodes = expand("excluded_nodes", j.excluded_nodes.get())?;
    let alloc = allocation_from_json(id, j.job_resources.as_ref(), &j.gres_detail)?;
    let status = JobStatus::parse(&job_state_text(&j.job_state));
    let array = array_from_json(
        id,
        j.array_job_id,
        j.array_task_id,
        j.array_task_string,
        j.array_max_tasks,
    )?;
    let exit_code = j.exit_code.map(|e| {
        format!(
            "{}:{}",
            e.return_code.0.unwrap_or(0),
            e.signal.and_then(|s| s.id.0).unwrap_or(0)
        )
    });
    Ok(SlurmJob {
        id,
        name: j.name.0.unwrap_or_default(),
        user_id: j.user_id.0.and_then(|u| u32::try_from(u).ok()),
        group_id: j.group_id.0.and_then(|g| u32::try_from(g).ok()),
        status,
        // The text form's placeholder for no reason is "None"; JSON spells it the same way.
        reason: j.state_reason.get().filter(|r| r != "None"),
        priority: j.priority.0.and_then(|p| u64::try_from(p).ok()),
        admin_comment: j.admin_comment.get(),
        comment: j.comment.get(),
        partition: j.partition.get(),
        nodes,
        req_nodes,
        exc_nodes,
        features: j.features.get(),
        tres_per_node: j.tres_per_node.get(),
        tres_per_job: j.tres_per_job.get(),
        alloc,
        restarts: j
            .restart_cnt
            .0
            .and_then(|r| u32::try_from(r).ok())
            .unwrap_or(0),
        het_job_id: j.het_job_id.0.filter(|h| *h > 0).map(|h| h as u64),
        submit_time: j.submit_time.0.filter(|t| *t > 0),
        start_time: j.start_time.0.filter(|t| *t > 0),
        end_time: j.end_time.0.filter(|t| *t > 0),
        exit_code,
        site: crate::job::JobSite {
            dependency: j.dependency.get(),
            eligible_time: j.eligible_time.0.filter(|t| *t > 0),
            account: j.account.get(),
            qos: j.qos.get(),
            time_limit_min: j.time_limit.0.and_then(|t| u64::try_from(t).ok()),
            cpus: j.cpus.0.and_then(|c| u32::try_from(c).ok()),
            mem_per_node_mb: j
                .memory_per_node
                .0
                .and_then(|m| u64::try_from(m).ok())
                .filter(|m| *m > 0),
            tasks: j.tasks.0.and_then(|t| u32::try_from(t).ok()),
            deadline: j.deadline.0.filter(|t| *t > 0),
            licenses: j.licenses.get(),
            requeue: j.requeue,
            user: j.user_name.get(),
            reservation: j.resv_name.get(),
        },
        array,
    })
}

/// The allocation of job `id`: one entry per node of job_resources (as the text form's
/// detail lines), with the GPUs of gres_detail, which lists them in the same node order (and
/// is empty once the job has ended).
fn allocation_from_json(
    id: u64,
    job_resources: Option<&JobResources>,
    gres_detail: &[String],
) -> Result<Vec<NodeAlloc>, String> {
    let alloc_nodes: Vec<String> = match job_resources {
        Some(JobResources { nodes: Some(r) }) => {
            r.allocation.iter().map(|a| a.name.clone()).collect()
        }
        _ => Vec::new(),
    };
    if gres_detail.len() > alloc_nodes.len() {
        return Err(format!(
            "job {id}: gres_detail has {} entries for {} allocated nodes",
            gres_detail.len(),
            alloc_nodes.len()
        ));
    }
    let mut alloc = Vec::new();
    for (i, node) in alloc_nodes.into_iter().enumerate() {
        let gpus = match gres_detail.get(i).map(String::as_str) {
            None | Some("") | Some("(null)") => Vec::new(),
            Some(detail) => {
                parse_gres(detail).ok_or_else(|| format!("job {id}: gres_detail {detail:?}"))?
            }
        };
        alloc.push(NodeAlloc { node, gpus });
    }
    Ok(alloc)
}

/// The array part of job `id` from its array fields, `None` when it is not an array's.
fn array_from_json(
    id: u64,
    array_job_id: Number,
    array_task_id: Number,
    array_task_string: Text,
    array_max_tasks: Number,
) -> Result<Option<crate::job::ArrayPart>, String> {
    let Some(a) = array_job_id.0.filter(|a| *a > 0) else {
        return Ok(None);
    };
    let task = match (array_task_id.0, array_task_string.get()) {
        (Some(t), _) => t.to_string(),
        (None, Some(s)) => s,
        (None, None) => return Err(format!("job {id}: an array record without tasks")),
    };
    let throttle = array_max_tasks.0.and_then(|t| u32::try_from(t).ok());
    Ok(Some(
        crate::job::ArrayPart::parse(a as u64, &task, throttle)
            .ok_or_else(|| format!("job {id}: array_task_string {task:?}"))?,
    ))
}
