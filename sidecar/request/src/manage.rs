//! The plugin's decision for one submitted job (or one heterogeneous job component): leave it
//! alone, refuse it with a message, or manage it (record its request, strip its GPUs, hold it).
//!
//! Everything here is a pure function of the job description's fields, the configuration and
//! the inventory, so the whole decision is unit-tested without Slurm.

use crate::config::Config;
use crate::constraint::Unread;
use crate::directive::{self, DirectiveError, Directives, OptChoice};
use crate::gpu::{self, GpuRequest, GpuRequestError, Scope, TresFields};
use crate::inventory::Inventory;
use crate::record::Record;

/// The fields of a Slurm job description the decision reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct Submission<'a> {
    /// `--partition` (possibly a comma-separated list), `None` if not given.
    pub partition: Option<&'a str>,
    /// `--comment`.
    pub comment: Option<&'a str>,
    /// The batch script; for a heterogeneous component after the first, the leader's script.
    pub script: Option<&'a str>,
    /// The GPU-related TRES fields.
    pub tres: TresFields<'a>,
    /// `-N` minimum node count, if given.
    pub min_nodes: Option<u32>,
    /// The heterogeneous job offset, `None` for an ordinary job.
    pub het_offset: Option<u32>,
    /// Whether this is an interactive allocation (`salloc`, `srun` without `sbatch`): it has
    /// no batch script (nor has its het leader).
    pub interactive: bool,
    /// `--ntasks`, if given.
    pub num_tasks: Option<u32>,
    /// Whether this is a job array (`--array`).
    pub array: bool,
    /// The array's `%N` throttle (the `%N` suffix of `--array`), if any.
    pub array_throttle: Option<u32>,
    /// Whether the user submitted the job held (`--hold`: priority 0 before the plugin).
    pub user_hold: bool,
    /// Whether the job asks for whole nodes to itself (`--exclusive`).
    pub exclusive: bool,
    /// Whether this Slurm would lose CPUs and memory per GPU (`--cpus-per-gpu`,
    /// `--mem-per-gpu`) given back to a held job with its placement (`scontrol update ...
    /// CpusPerTres=`): 22.05 accepts the update but starts the job with one CPU; 24.11 and
    /// 26.05 honour it. Where they would be lost, a job asking for them is left to Slurm.
    pub per_gpu_lost_at_placement: bool,
    /// `--nodelist` (`-w`), if given.
    pub node_list: Option<&'a str>,
    /// `--constraint` (`-C`), if given.
    pub constraint: Option<&'a str>,
    /// Whether the job has a `--deadline`.
    pub deadline: bool,
    /// Whether the job may not be requeued (`--no-requeue`).
    pub no_requeue: bool,
    /// `--licenses` (`-L`), if given.
    pub licenses: Option<&'a str>,
}

/// How a user chose a job's nodes in a way hadar leaves to Slurm. An `--exclude` list and
/// a `--constraint` hadar reads ([`crate::constraint`]) are honoured by the daemon, which
/// offers such a job only the nodes they allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeChoice {
    /// `--nodelist` (`-w`): the job must have these nodes, so it has its placement already.
    Nodelist,
    /// A `--constraint` with what hadar does not read.
    Constraint(Unread),
}

impl std::fmt::Display for NodeChoice {
    /// Completes "it chose its nodes with ...".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeChoice::Nodelist => f.write_str("--nodelist"),
            NodeChoice::Constraint(why) => {
                write!(f, "a --constraint hadar does not read ({why})")
            }
        }
    }
}

/// Whether an option's value is given (slurmctld passes an unset one as NULL; an empty or
/// blank one chooses nothing).
fn given(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.trim().is_empty())
}

/// How `sub` chose its nodes in a way hadar leaves to Slurm, if it did.
fn node_choice(sub: &Submission<'_>) -> Option<NodeChoice> {
    if given(sub.node_list).is_some() {
        return Some(NodeChoice::Nodelist);
    }
    let unread = crate::constraint::parse(given(sub.constraint)?).err()?;
    Some(NodeChoice::Constraint(unread))
}

/// What to do with a valid managed job.
#[derive(Clone, Debug, PartialEq)]
pub struct Managed {
    /// The record to store in the job's admin comment.
    pub record: Record,
    /// The new `tres_per_job` (GPU entries removed).
    pub tres_per_job: Option<String>,
    /// The new `tres_per_node` (GPU entries removed).
    pub tres_per_node: Option<String>,
    /// The new `tres_per_task` (GPU entries removed; the daemon gives them back with the
    /// placement).
    pub tres_per_task: Option<String>,
}

/// Why a job is left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmanaged {
    /// The job opted out with `off`.
    OptedOut,
    /// The job is not in a managed partition and did not opt in.
    NotSelected,
    /// An interactive allocation: someone is waiting at a terminal for it, and Hadar can
    /// neither hold it for a round nor preempt it, so it is always left to Slurm.
    Interactive,
    /// The job asks for CPUs or memory per GPU, which this Slurm would not honour if the
    /// daemon gave them back with a placement ([`Submission::per_gpu_lost_at_placement`]): left to
    /// Slurm, it gets them.
    PerGpuResources,
    /// The job chose its nodes in a way hadar does not honour ([`NodeChoice`]). hadar's
    /// placement names the nodes itself; left to Slurm, the job runs where its user said.
    NodeChoice(NodeChoice),
    /// The job has a `--deadline`. hadar does not plan for deadlines, and slurmctld tests a
    /// held job's deadline only in its purge pass, so a job hadar held could be cancelled
    /// for a deadline Slurm's own scheduler would have met; left to Slurm, it is scheduled
    /// as its user expects.
    Deadline,
    /// The job may not be requeued (`--no-requeue`), and hadar preempts a job by requeueing
    /// it; left to Slurm, it runs once, where Slurm starts it.
    NoRequeue,
    /// The job asks for licenses (`--licenses`). hadar does not see them: a job it placed
    /// would wait for a license on GPUs held idle for it; left to Slurm, it starts when its
    /// licenses and GPUs are both free.
    Licenses,
}

impl Unmanaged {
    /// Why the job is left to Slurm, for slurmctld's log (completing "left to Slurm: "),
    /// when its user may not expect it; `None` for opting out, not being selected and
    /// interactive allocations, which are left to Slurm by design.
    pub fn logged_reason(self) -> Option<String> {
        Some(match self {
            Unmanaged::OptedOut | Unmanaged::NotSelected | Unmanaged::Interactive => return None,
            Unmanaged::PerGpuResources => "its CPUs or memory per GPU would be lost if given \
                back with a placement on Slurm before 24.11"
                .into(),
            Unmanaged::NodeChoice(choice) => format!("it chose its nodes with {choice}"),
            Unmanaged::Deadline => "it has a --deadline, which Slurm's own scheduler meets".into(),
            Unmanaged::NoRequeue => "it asked not to be requeued (--no-requeue), and hadar \
                preempts jobs by requeueing them"
                .into(),
            Unmanaged::Licenses => {
                "it asks for licenses (--licenses), which hadar does not plan".into()
            }
        })
    }
}

/// The decision for one job.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Leave the job exactly as submitted.
    Unmanaged(Unmanaged),
    /// Manage the job (boxed: it is much larger than the other variant).
    Managed(Box<Managed>),
}

/// Why a managed job was refused. The message is shown by `sbatch`; it says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A directive error.
    #[error(transparent)]
    Directive(#[from] DirectiveError),
    /// A GPU request error.
    #[error(transparent)]
    Gpu(#[from] GpuRequestError),
    /// A managed job without GPUs.
    #[error(
        "this job is Hadar-managed but requests no GPUs; add --gres=gpu:N or --gpus=N (or `#HADAR off` to opt out)"
    )]
    NoGpus,
    /// A GPU type no node has.
    #[error(
        "GPU type `{gpu_type}` in {place} does not exist in this cluster; known types: {known}"
    )]
    UnknownType {
        /// The type.
        gpu_type: String,
        /// Where it was written.
        place: &'static str,
        /// The cluster's types.
        known: String,
    },
    /// A typed request outside the job's own `gpu-types=`.
    #[error("GPU type `{gpu_type}` is requested but not in gpu-types={allowed}; make them agree")]
    TypeNotAllowed {
        /// The type.
        gpu_type: String,
        /// The allowed list.
        allowed: String,
    },
    /// A per-job request larger than what the job's partitions (or the cluster) have.
    #[error(
        "no set of nodes can provide {wanted} {what} GPUs: {scope} has {have}; ask for at most {have}"
    )]
    TooManyForCluster {
        /// `partition NAME[,NAME]` or `the whole cluster`.
        scope: String,
        /// Requested.
        wanted: u64,
        /// The type, or "usable" for untyped requests.
        what: String,
        /// Available in the cluster.
        have: u64,
    },
    /// A per-node request no set of nodes can satisfy.
    #[error(
        "no {nodes} node(s) in {scope} have {spec} GPUs each (only {have} node(s) do); lower the GPUs per node or the node count"
    )]
    TooManyPerNode {
        /// `partition NAME[,NAME]` or `the whole cluster`.
        scope: String,
        /// Nodes wanted.
        nodes: u32,
        /// The per-node request.
        spec: String,
        /// Nodes that qualify.
        have: usize,
    },
    /// `--gpus-per-task` without a task count.
    #[error("--gpus-per-task needs --ntasks (-n) for a Hadar-managed job; add --ntasks=N")]
    PerTaskWithoutTasks,
    /// A partition list mixing managed and unmanaged partitions.
    #[error(
        "partitions `{partitions}` mix Hadar-managed and other partitions; submit to managed partitions only, or add `#HADAR off`"
    )]
    MixedPartitions {
        /// The list.
        partitions: String,
    },
}

/// Decides what to do with one submitted job.
pub fn decide(
    sub: &Submission<'_>,
    config: &Config,
    inventory: &Inventory,
) -> Result<Decision, RequestError> {
    if sub.interactive {
        return Ok(Decision::Unmanaged(Unmanaged::Interactive));
    }
    let mut directives = Directives::default();
    if let Some(script) = sub.script {
        directive::read_script(script, &mut directives)?;
    }
    if let Some(comment) = sub.comment {
        directive::read_comment(comment, &mut directives)?;
    }
    match directives.choice {
        Some(OptChoice::Out) => return Ok(Decision::Unmanaged(Unmanaged::OptedOut)),
        Some(OptChoice::In) => {}
        None => {
            if !in_managed_partition(sub.partition, config)? {
                return Ok(Decision::Unmanaged(Unmanaged::NotSelected));
            }
        }
    }

    if sub.per_gpu_lost_at_placement
        && (sub.tres.cpus_per_tres.is_some() || sub.tres.mem_per_tres.is_some())
    {
        return Ok(Decision::Unmanaged(Unmanaged::PerGpuResources));
    }
    if let Some(choice) = node_choice(sub) {
        return Ok(Decision::Unmanaged(Unmanaged::NodeChoice(choice)));
    }
    if sub.deadline {
        return Ok(Decision::Unmanaged(Unmanaged::Deadline));
    }
    if sub.no_requeue {
        return Ok(Decision::Unmanaged(Unmanaged::NoRequeue));
    }
    if given(sub.licenses).is_some() {
        return Ok(Decision::Unmanaged(Unmanaged::Licenses));
    }
    let per_task = per_task_request(sub, config.plugin.max_gpus_per_job)?;
    let mut tres = sub.tres;
    if per_task.is_some() {
        tres.per_task = None;
    }
    // CPUs and memory per GPU are given back to the job with its placement (the plugin
    // takes them out with its GPU request, which Slurm would refuse them without).
    let cpus_per_gpu = gpu::per_gpu_amount(tres.cpus_per_tres, gpu::CPUS_PER_GPU_OPTION)?;
    let mem_per_gpu_mb = gpu::per_gpu_amount(tres.mem_per_tres, gpu::MEM_PER_GPU_OPTION)?;
    if cpus_per_gpu.is_some() {
        tres.cpus_per_tres = None;
    }
    if mem_per_gpu_mb.is_some() {
        tres.mem_per_tres = None;
    }
    let extracted = gpu::extract(&tres, config.plugin.max_gpus_per_job)?;
    let (request, gpus_per_task, tres_per_task) = match (extracted.request, per_task) {
        (Some(_), Some(_)) => return Err(gpu::GpuRequestError::BothScopes.into()),
        (Some(r), None) => (r, None, None),
        (None, Some(p)) => (p.request, Some(p.per_task), p.rest),
        (None, None) => return Err(RequestError::NoGpus),
    };
    directives.job.tasks = sub.num_tasks;
    directives.job.gpus_per_task = gpus_per_task;
    directives.job.cpus_per_gpu = cpus_per_gpu;
    directives.job.mem_per_gpu_mb = mem_per_gpu_mb;
    directives.job.user_hold = sub.user_hold;
    directives.job.array = sub.array;
    directives.job.array_throttle = sub.array_throttle.filter(|_| sub.array);
    directives.job.exclusive = sub.exclusive;
    let partitions = job_partitions(sub.partition, config);
    check_against_inventory(&request, sub.min_nodes, &directives, inventory, &partitions)?;
    Ok(Decision::Managed(Box::new(Managed {
        record: Record {
            gpus: request,
            nodes: sub.min_nodes,
            het_offset: sub.het_offset,
            directives: directives.job,
        },
        tres_per_job: extracted.per_job_rest,
        tres_per_node: extracted.per_node_rest,
        tres_per_task,
    })))
}

/// A `--gpus-per-task` request read as the job's whole request.
struct PerTask {
    /// GPUs per task times the task count, per job.
    request: GpuRequest,
    /// GPUs per task.
    per_task: u32,
    /// `tres_per_task` without its GPU entry.
    rest: Option<String>,
}

/// Reads `--gpus-per-task=N` (with `--ntasks=T`) as a per-job request of N x T GPUs; `None`
/// when the job gives no GPUs per task. One untyped or typed count only.
fn per_task_request(sub: &Submission<'_>, max_gpus: u32) -> Result<Option<PerTask>, RequestError> {
    let field = sub.tres.per_task;
    if !field.is_some_and(gpu::mentions_gpu) {
        return Ok(None);
    }
    // Newer releases write `gres/gpu=N` (and `cpu=N` beside it) where older ones write
    // `gres:gpu:N`; both read as the same count.
    let normal: Option<String> = field.map(|f| {
        f.split(',')
            .map(|e| match e.trim().strip_prefix("gres/gpu=") {
                Some(n) => format!("gres/gpu:{n}"),
                None => e.trim().to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    });
    let (counts, rest) = gpu::split_field(normal.as_deref(), gpu::PER_TASK_OPTION, max_gpus)?;
    let tasks = sub.num_tasks.ok_or(RequestError::PerTaskWithoutTasks)?;
    let [count] = counts.as_slice() else {
        return Err(gpu::GpuRequestError::Unsupported {
            option: gpu::PER_TASK_OPTION,
        }
        .into());
    };
    let total = u64::from(count.count) * u64::from(tasks);
    if total > u64::from(max_gpus) {
        return Err(gpu::GpuRequestError::Absurd {
            option: gpu::PER_TASK_OPTION,
            count: total,
            limit: max_gpus,
        }
        .into());
    }
    Ok(Some(PerTask {
        request: GpuRequest {
            scope: Scope::PerJob,
            counts: vec![gpu::GpuCount {
                gpu_type: count.gpu_type.clone(),
                count: total as u32,
            }],
        },
        per_task: count.count,
        rest,
    }))
}

/// Whether the job's partitions are all managed (an error if only some are).
fn in_managed_partition(partition: Option<&str>, config: &Config) -> Result<bool, RequestError> {
    let parts = job_partitions(partition, config);
    if parts.is_empty() {
        return Ok(false);
    }
    let list = parts.join(",");
    let managed = parts
        .iter()
        .filter(|p| config.slurm.managed_partitions.iter().any(|m| m == *p))
        .count();
    match managed {
        0 => Ok(false),
        n if n == parts.len() => Ok(true),
        _ => Err(RequestError::MixedPartitions { partitions: list }),
    }
}

/// The partitions a job will run in: its `--partition` list, else the configured default
/// partition; empty if neither is known.
fn job_partitions<'a>(partition: Option<&'a str>, config: &'a Config) -> Vec<&'a str> {
    let list = match partition.filter(|p| !p.trim().is_empty()) {
        Some(p) => p,
        None => match &config.slurm.default_partition {
            Some(d) => d.as_str(),
            None => return Vec::new(),
        },
    };
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// Checks that the named types exist in the cluster and that some set of nodes of the job's
/// partitions can hold the request.
fn check_against_inventory(
    request: &GpuRequest,
    min_nodes: Option<u32>,
    directives: &Directives,
    inventory: &Inventory,
    partitions: &[&str],
) -> Result<(), RequestError> {
    let usable_nodes = inventory.nodes_in(partitions);
    let known_partitions = !partitions.is_empty()
        && partitions
            .iter()
            .all(|p| inventory.partitions.iter().any(|q| q.name == *p));
    let scope = if known_partitions {
        format!("partition {}", partitions.join(","))
    } else {
        "the whole cluster".to_string()
    };
    check_type_names(request, directives, inventory)?;
    check_capacity(
        request,
        min_nodes,
        directives.job.gpu_types.as_deref(),
        &usable_nodes,
        scope,
    )
}

/// Checks that every GPU type the request and its directives name exists in the cluster,
/// and that the request's types are among the job's `gpu-types=`, if it limits them.
fn check_type_names(
    request: &GpuRequest,
    directives: &Directives,
    inventory: &Inventory,
) -> Result<(), RequestError> {
    let known = || inventory.type_names().join(", ");
    let unknown = |t: &str, place| RequestError::UnknownType {
        gpu_type: t.to_string(),
        place,
        known: known(),
    };
    let allowed = directives.job.gpu_types.as_deref();
    if let Some(types) = allowed {
        if let Some(t) = types.iter().find(|t| !inventory.has_type(t)) {
            return Err(unknown(t, "gpu-types="));
        }
    }
    if let Some(h) = directives
        .job
        .throughput
        .iter()
        .find(|h| !inventory.has_type(&h.gpu_type))
    {
        return Err(unknown(&h.gpu_type, "throughput="));
    }
    let place = match request.scope {
        Scope::PerJob => gpu::PER_JOB_OPTION,
        Scope::PerNode => gpu::PER_NODE_OPTION,
    };
    for t in request.counts.iter().filter_map(|c| c.gpu_type.as_deref()) {
        if !inventory.has_type(t) {
            return Err(unknown(t, place));
        }
        if let Some(types) = allowed
            && !types.iter().any(|a| a == t)
        {
            return Err(RequestError::TypeNotAllowed {
                gpu_type: t.to_string(),
                allowed: types.join(","),
            });
        }
    }
    Ok(())
}

/// Checks that `usable_nodes` (those of the job's partitions, `scope` naming them in an
/// error) can hold the request: a per-job request in their sum, a per-node one on enough of
/// them. `allowed` limits the types an untyped count may use.
fn check_capacity(
    request: &GpuRequest,
    min_nodes: Option<u32>,
    allowed: Option<&[String]>,
    usable_nodes: &[&crate::inventory::NodeGpus],
    scope: String,
) -> Result<(), RequestError> {
    let per_node_need = |node: &crate::inventory::NodeGpus| {
        request.counts.iter().all(|c| match &c.gpu_type {
            Some(t) => u64::from(node.typed.get(t).copied().unwrap_or(0)) >= u64::from(c.count),
            None => node.usable(allowed) >= u64::from(c.count),
        })
    };
    match request.scope {
        Scope::PerJob => {
            for c in &request.counts {
                let (have, what) = match &c.gpu_type {
                    Some(t) => (
                        usable_nodes
                            .iter()
                            .map(|n| u64::from(n.typed.get(t).copied().unwrap_or(0)))
                            .sum(),
                        t.clone(),
                    ),
                    None => (
                        usable_nodes.iter().map(|n| n.usable(allowed)).sum(),
                        "usable".to_string(),
                    ),
                };
                if u64::from(c.count) > have {
                    return Err(RequestError::TooManyForCluster {
                        scope,
                        wanted: u64::from(c.count),
                        what,
                        have,
                    });
                }
            }
        }
        Scope::PerNode => {
            let nodes = min_nodes.unwrap_or(1).max(1);
            let have = usable_nodes.iter().filter(|n| per_node_need(n)).count();
            if have < nodes as usize {
                return Err(RequestError::TooManyPerNode {
                    scope,
                    nodes,
                    spec: request.to_string(),
                    have,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuCount;
    use proptest::prelude::*;

    fn inventory() -> Inventory {
        let conf = "NodeName=n1 Gres=gpu:v100:4\nNodeName=n2 Gres=gpu:p100:4\nNodeName=n3 Gres=gpu:k80:4\nNodeName=n4 Gres=gpu:v100:2,gpu:k80:2\n";
        Inventory::from_slurm_conf("slurm.conf", conf, &mut |_: &str| Err(String::new())).unwrap()
    }

    fn config() -> Config {
        Config::parse(
            "h.toml",
            "[slurm]\nmanaged_partitions=[\"gpu\"]\ndefault_partition=\"gpu\"\n",
        )
        .unwrap()
    }

    fn node_gres(field: &'static str) -> Submission<'static> {
        Submission {
            tres: TresFields {
                per_node: Some(field),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Why `sub` is left to Slurm, `None` when it is not (managed or refused).
    fn left(sub: &Submission<'_>) -> Option<Unmanaged> {
        match decide(sub, &config(), &inventory()) {
            Ok(Decision::Unmanaged(u)) => Some(u),
            _ => None,
        }
    }

    fn managed(sub: &Submission<'_>) -> Managed {
        match decide(sub, &config(), &inventory()) {
            Ok(Decision::Managed(m)) => *m,
            other => panic!("expected a managed job, got {other:?}"),
        }
    }

    fn refused(sub: &Submission<'_>) -> String {
        match decide(sub, &config(), &inventory()) {
            Err(e) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn default_partition_job_is_managed_recorded_and_stripped() {
        let m = managed(&node_gres("gres:gpu:2"));
        assert_eq!(m.record.encode(), "hadar:v1 gpus-per-node=2");
        assert_eq!(m.tres_per_node, None);
        assert_eq!(m.tres_per_job, None);
    }

    #[test]
    fn other_partitions_are_left_alone_unless_opted_in() {
        let mut sub = node_gres("gres:gpu:2");
        sub.partition = Some("cpu");
        assert_eq!(
            decide(&sub, &config(), &inventory()),
            Ok(Decision::Unmanaged(Unmanaged::NotSelected))
        );
        sub.comment = Some("hadar");
        assert!(matches!(
            decide(&sub, &config(), &inventory()),
            Ok(Decision::Managed(_))
        ));
        sub.partition = Some("gpu,cpu");
        sub.comment = None;
        assert!(refused(&sub).contains("mix Hadar-managed and other partitions"));
    }

    #[test]
    fn gpus_per_task_is_the_tasks_times_the_gpus_and_keeps_the_tasks() {
        let mut sub = Submission {
            tres: TresFields {
                per_task: Some("cpu=2,gres/gpu=1"),
                ..Default::default()
            },
            num_tasks: Some(2),
            ..Default::default()
        };
        let m = managed(&sub);
        assert_eq!(m.record.gpus.to_string(), "2");
        assert_eq!(m.record.gpus.scope, Scope::PerJob);
        assert_eq!(m.record.directives.tasks, Some(2));
        assert_eq!(m.record.directives.gpus_per_task, Some(1));
        assert_eq!(m.tres_per_task.as_deref(), Some("cpu=2"));
        assert!(m.record.encode().ends_with(" tasks=2 gpus-per-task=1"));
        sub.tres.per_task = Some("gres:gpu:v100:2");
        assert_eq!(managed(&sub).record.gpus.to_string(), "v100:4");
        sub.num_tasks = None;
        assert!(refused(&sub).contains("--gpus-per-task needs --ntasks"));
        sub.num_tasks = Some(2);
        sub.tres.per_node = Some("gres:gpu:1");
        assert!(refused(&sub).contains("use only one of them"));
    }

    #[test]
    fn cpus_and_memory_per_gpu_are_recorded_and_taken_out() {
        let mut sub = node_gres("gres:gpu:2");
        sub.tres.cpus_per_tres = Some("gres/gpu:2");
        sub.tres.mem_per_tres = Some("gres:gpu:1500");
        let m = managed(&sub);
        assert_eq!(m.record.directives.cpus_per_gpu, Some(2));
        assert_eq!(m.record.directives.mem_per_gpu_mb, Some(1500));
        assert!(
            m.record
                .encode()
                .ends_with(" cpus-per-gpu=2 mem-per-gpu=1500")
        );
        sub.tres.cpus_per_tres = Some("gres:gpu:v100:2");
        assert!(refused(&sub).contains("--cpus-per-gpu is not supported"));
    }

    #[test]
    fn a_job_with_a_node_list_or_an_unread_constraint_is_left_to_slurm() {
        let mut sub = node_gres("gres:gpu:2");
        sub.node_list = Some("n3");
        assert_eq!(
            left(&sub),
            Some(Unmanaged::NodeChoice(NodeChoice::Nodelist))
        );
        sub.node_list = None;
        sub.constraint = Some("[rack1|rack2]");
        let bracketed = Ok(Decision::Unmanaged(Unmanaged::NodeChoice(
            NodeChoice::Constraint(Unread::Brackets),
        )));
        assert_eq!(decide(&sub, &config(), &inventory()), bracketed);
        // Even with a request hadar would refuse: Slurm alone judges it.
        let mut wide = node_gres("gres:gpu:a100:99");
        wide.constraint = sub.constraint;
        assert_eq!(decide(&wide, &config(), &inventory()), bracketed);
        // An opted-out job stays opted out (the daemon's copy jobs name their node).
        sub.comment = Some("hadar: off");
        sub.node_list = Some("n3");
        assert_eq!(left(&sub), Some(Unmanaged::OptedOut));
        assert_eq!(
            Unmanaged::NodeChoice(NodeChoice::Constraint(Unread::NodeCount)).logged_reason(),
            Some(
                "it chose its nodes with a --constraint hadar does not read (a node count (`*`))"
                    .into()
            )
        );
        assert_eq!(Unmanaged::OptedOut.logged_reason(), None);
    }

    #[test]
    fn a_job_with_a_deadline_licenses_or_no_requeue_is_left_to_slurm() {
        let mut sub = node_gres("gres:gpu:2");
        sub.no_requeue = true;
        assert_eq!(left(&sub), Some(Unmanaged::NoRequeue));
        sub.no_requeue = false;
        sub.licenses = Some("matlab:1");
        assert_eq!(left(&sub), Some(Unmanaged::Licenses));
        sub.licenses = Some(" ");
        assert_eq!(left(&sub), None, "a blank license list asks for none");
        sub.deadline = true;
        assert_eq!(left(&sub), Some(Unmanaged::Deadline));
        sub.comment = Some("hadar: off");
        assert_eq!(left(&sub), Some(Unmanaged::OptedOut));
    }

    #[test]
    fn a_constraint_hadar_reads_or_a_blank_node_list_leaves_the_job_managed() {
        let mut sub = node_gres("gres:gpu:2");
        for (list, constraint) in [
            (None, Some("v100|p100")),
            (None, Some("a&b")),
            (Some(" "), None),
            (None, Some("")),
        ] {
            sub.node_list = list;
            sub.constraint = constraint;
            assert!(
                matches!(
                    decide(&sub, &config(), &inventory()),
                    Ok(Decision::Managed(_))
                ),
                "{list:?} {constraint:?}"
            );
        }
    }

    #[test]
    fn cpus_or_memory_per_gpu_a_slurm_would_lose_leave_the_job_to_slurm() {
        let mut sub = node_gres("gres:gpu:2");
        sub.per_gpu_lost_at_placement = true;
        assert!(matches!(
            decide(&sub, &config(), &inventory()),
            Ok(Decision::Managed(_))
        ));
        for (cpus, mem) in [(Some("gres/gpu:2"), None), (None, Some("gres/gpu:1500"))] {
            sub.tres.cpus_per_tres = cpus;
            sub.tres.mem_per_tres = mem;
            assert_eq!(left(&sub), Some(Unmanaged::PerGpuResources));
        }
        // An opted-out job stays opted out, and nothing is refused for it.
        sub.comment = Some("hadar: off");
        assert_eq!(left(&sub), Some(Unmanaged::OptedOut));
    }

    #[test]
    fn arrays_and_exclusive_jobs_are_managed_and_recorded() {
        let mut sub = node_gres("gres:gpu:1");
        sub.array = true;
        sub.array_throttle = Some(2);
        assert_eq!(
            managed(&sub).record.encode(),
            "hadar:v1 gpus-per-node=1 array=yes array-throttle=2"
        );
        sub.array = false;
        sub.exclusive = true;
        assert_eq!(
            managed(&sub).record.encode(),
            "hadar:v1 gpus-per-node=1 exclusive=yes"
        );
        sub.script = Some("#!/bin/sh\n#HADAR off\n");
        assert!(matches!(
            decide(&sub, &config(), &inventory()),
            Ok(Decision::Unmanaged(Unmanaged::OptedOut))
        ));
    }

    #[test]
    fn interactive_allocations_are_left_to_slurm() {
        let mut sub = node_gres("gres:gpu:a100:99");
        sub.interactive = true;
        sub.comment = Some("hadar");
        assert_eq!(
            decide(&sub, &config(), &inventory()),
            Ok(Decision::Unmanaged(Unmanaged::Interactive))
        );
    }

    #[test]
    fn opt_out_wins_over_a_managed_partition() {
        let mut sub = node_gres("gres:gpu:2");
        sub.script = Some("#!/bin/sh\n#HADAR off\n");
        assert_eq!(
            decide(&sub, &config(), &inventory()),
            Ok(Decision::Unmanaged(Unmanaged::OptedOut))
        );
    }

    #[test]
    fn directives_land_in_the_record() {
        let mut sub = Submission {
            tres: TresFields {
                per_job: Some("gres:gpu:v100:3,gres:gpu:k80:1"),
                ..Default::default()
            },
            min_nodes: Some(2),
            het_offset: Some(1),
            ..Default::default()
        };
        sub.script = Some("#!/bin/sh\n#HADAR type=resnet50 steps=500 fork=no\n");
        let m = managed(&sub);
        assert_eq!(
            m.record.encode(),
            "hadar:v1 gpus=v100:3,k80:1 nodes=2 het=1 type=resnet50 steps=500 fork=no"
        );
    }

    #[test]
    fn each_kind_of_bad_request_has_its_message() {
        assert_eq!(
            refused(&Submission::default()),
            "this job is Hadar-managed but requests no GPUs; add --gres=gpu:N or --gpus=N (or `#HADAR off` to opt out)"
        );
        assert_eq!(
            refused(&node_gres("gres:gpu:a100:1")),
            "GPU type `a100` in --gres/--gpus-per-node does not exist in this cluster; known types: k80, p100, v100"
        );
        assert_eq!(
            refused(&node_gres("gres:gpu:8")),
            "no 1 node(s) in the whole cluster have 8 GPUs each (only 0 node(s) do); lower the GPUs per node or the node count"
        );
        let mut three_v100_nodes = node_gres("gres:gpu:v100:2");
        three_v100_nodes.min_nodes = Some(3);
        assert!(refused(&three_v100_nodes).starts_with(
            "no 3 node(s) in the whole cluster have v100:2 GPUs each (only 2 node(s) do)"
        ));
        let per_job = Submission {
            tres: TresFields {
                per_job: Some("gres:gpu:p100:5"),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            refused(&per_job),
            "no set of nodes can provide 5 p100 GPUs: the whole cluster has 4; ask for at most 4"
        );
        let mut restricted = node_gres("gres:gpu:p100:1");
        restricted.script = Some("#HADAR gpu-types=v100,k80");
        assert_eq!(
            refused(&restricted),
            "GPU type `p100` is requested but not in gpu-types=v100,k80; make them agree"
        );
        let mut hint = node_gres("gres:gpu:1");
        hint.comment = Some("hadar: throughput=h100:3");
        assert!(refused(&hint).starts_with("GPU type `h100` in throughput= does not exist"));
        assert!(refused(&node_gres("gres:gpu:0")).starts_with("zero GPUs requested"));
        assert!(refused(&node_gres("gres:gpu:5000")).starts_with("5000 GPUs requested"));
    }

    #[test]
    fn capacity_is_judged_within_the_jobs_partitions() {
        let conf = "NodeName=n1 Gres=gpu:v100:4\nNodeName=n2 Gres=gpu:p100:4\nNodeName=n3 Gres=gpu:k80:4\nNodeName=n4 Gres=gpu:v100:2,gpu:k80:2\nPartitionName=gpu Nodes=ALL Default=YES\nPartitionName=old Nodes=n3,n4\n";
        let inv = Inventory::from_slurm_conf("slurm.conf", conf, &mut |_: &str| Err(String::new()))
            .unwrap();
        let config =
            Config::parse("h.toml", "[slurm]\nmanaged_partitions=[\"gpu\",\"old\"]\n").unwrap();
        let mut sub = node_gres("gres:gpu:v100:4");
        sub.partition = Some("gpu");
        assert!(matches!(
            decide(&sub, &config, &inv),
            Ok(Decision::Managed(_))
        ));
        sub.partition = Some("old");
        assert_eq!(
            decide(&sub, &config, &inv).unwrap_err().to_string(),
            "no 1 node(s) in partition old have v100:4 GPUs each (only 0 node(s) do); lower the GPUs per node or the node count"
        );
        let per_job = Submission {
            partition: Some("old"),
            tres: TresFields {
                per_job: Some("gres:gpu:k80:7"),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            decide(&per_job, &config, &inv).unwrap_err().to_string(),
            "no set of nodes can provide 7 k80 GPUs: partition old has 6; ask for at most 6"
        );
    }

    #[test]
    fn untyped_per_node_respects_allowed_types() {
        let mut sub = node_gres("gres:gpu:3");
        sub.script = Some("#HADAR gpu-types=k80");
        assert_eq!(
            managed(&sub).record.gpus.counts,
            vec![GpuCount {
                gpu_type: None,
                count: 3
            }]
        );
        sub.min_nodes = Some(2);
        assert!(
            refused(&sub).starts_with(
                "no 2 node(s) in the whole cluster have 3 GPUs each (only 1 node(s) do)"
            )
        );
    }

    proptest! {
        #[test]
        fn decide_never_panics(
            partition in proptest::option::of("[a-z,]{0,8}"),
            comment in proptest::option::of("(hadar:? ?)?[a-z=0-9:, ]{0,20}"),
            script in proptest::option::of("#!/bin/sh\n(#HADAR [a-z=0-9:,\\- ]{0,20}\n){0,3}"),
            per_node in proptest::option::of("(gres:gpu(:[a-z0-9]{1,5}){0,2},?){0,3}"),
            per_job in proptest::option::of("(gres:gpu(:[a-z0-9]{1,5}){0,2},?){0,3}"),
            min_nodes in proptest::option::of(0u32..10),
        ) {
            let sub = Submission {
                partition: partition.as_deref(),
                comment: comment.as_deref(),
                script: script.as_deref(),
                tres: TresFields { per_node: per_node.as_deref(), per_job: per_job.as_deref(), ..Default::default() },
                min_nodes,
                het_offset: None,
                interactive: false,
                ..Default::default()
            };
            if let Ok(Decision::Managed(m)) = decide(&sub, &config(), &inventory()) {
                // Whatever is accepted must be recorded faithfully and stripped of GPUs.
                prop_assert_eq!(Record::decode(&m.record.encode()).unwrap(), m.record.clone());
                prop_assert!(!gpu::mentions_gpu(&m.tres_per_node.unwrap_or_default()));
                prop_assert!(!gpu::mentions_gpu(&m.tres_per_job.unwrap_or_default()));
            }
        }
    }
}
