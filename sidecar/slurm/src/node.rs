//! Nodes as `scontrol show node` reports them: GPUs per type and whether the node is usable.

use crate::SlurmError;
use crate::text_records::{self, Record};
use serde::{Deserialize, Serialize};

/// A node's scheduling state, reduced to what hadar needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// No job on it.
    Idle,
    /// Some of it allocated.
    Mixed,
    /// All of it allocated.
    Allocated,
    /// Being drained (jobs still running, no new ones).
    Draining,
    /// Drained: no jobs, none accepted.
    Drained,
    /// Down or not responding.
    Down,
    /// Any other state (future, reserved, powering, ...), as Slurm spelled it; not usable.
    Other(String),
}

impl NodeState {
    /// Parses Slurm's `State=` value such as `IDLE`, `MIXED+DRAIN`, `DOWN*+NOT_RESPONDING`.
    pub fn parse(text: &str) -> NodeState {
        let upper = text.to_ascii_uppercase();
        let mut parts = upper.split('+');
        let base = parts.next().unwrap_or("");
        let flags: Vec<&str> = parts.collect();
        let not_responding = base.ends_with('*') || flags.contains(&"NOT_RESPONDING");
        let base = base.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
        let drain = flags
            .iter()
            .any(|f| *f == "DRAIN" || *f == "DRAINING" || *f == "DRAINED");
        if base == "DOWN" || base == "FAIL" || flags.contains(&"FAIL") || not_responding {
            return NodeState::Down;
        }
        if drain || base == "DRAINED" || base == "DRAINING" {
            return if base == "IDLE" || base == "DRAINED" {
                NodeState::Drained
            } else {
                NodeState::Draining
            };
        }
        // `RESERVED` and `MAINT` (a node in an active reservation) are not blocking: which
        // jobs a reserved node is offered to is the reservation rule's (see
        // `crate::reservation` and `hadar_core::site::reservations`). Nor is `PLANNED` (23.02
        // and later): backfill has planned the node for a pending job, often the managed job
        // hadar just released there, and Slurm itself keeps lower-priority jobs from delaying
        // that plan, so reading the node as unusable only cost hadar the node for a round.
        // Nor are `POWERED_DOWN` and `POWERING_UP` (power saving): slurmctld schedules jobs
        // onto such nodes and resumes them for the job (preferring nodes already up, then
        // those booting), so a site whose idle GPU nodes were all powered down would start no
        // managed job again if hadar shunned them. A node being powered down, or asked to be,
        // takes no new job until it is down.
        let blocking = [
            "REBOOT_REQUESTED",
            "REBOOT_ISSUED",
            "POWERING_DOWN",
            "POWER_DOWN",
            "FUTURE",
        ];
        if let Some(f) = flags.iter().find(|f| blocking.contains(f)) {
            return NodeState::Other(format!("{base}+{f}"));
        }
        match base {
            "IDLE" => NodeState::Idle,
            "MIXED" => NodeState::Mixed,
            "ALLOCATED" | "ALLOC" | "COMPLETING" => NodeState::Allocated,
            other => NodeState::Other(other.to_string()),
        }
    }

    /// True when new jobs may be placed on the node.
    pub fn usable(&self) -> bool {
        matches!(
            self,
            NodeState::Idle | NodeState::Mixed | NodeState::Allocated
        )
    }

    /// The state as a lower-case word for reports.
    pub fn as_str(&self) -> &str {
        match self {
            NodeState::Idle => "idle",
            NodeState::Mixed => "mixed",
            NodeState::Allocated => "allocated",
            NodeState::Draining => "draining",
            NodeState::Drained => "drained",
            NodeState::Down => "down",
            NodeState::Other(s) => s,
        }
    }
}

/// One node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// `NodeName`.
    pub name: String,
    /// Its state.
    pub state: NodeState,
    /// GPUs per type, in the order Slurm lists them (`Gres=gpu:v100:2,gpu:k80:2`).
    pub gpus: Vec<(String, u32)>,
    /// The partitions it belongs to.
    pub partitions: Vec<String>,
    /// The features a job's `--constraint` can ask of it (`AvailableFeatures`; a changeable
    /// feature not yet active is one Slurm makes active for such a job).
    #[serde(default)]
    pub features: Vec<String>,
    /// Its CPUs and memory no job holds.
    #[serde(default)]
    pub free: NodeFree,
}

/// What of a node's CPUs and memory no job holds: a job Slurm cannot give a CPU (or the
/// memory it asks for) there pends with `Reason=Resources`, whatever GPUs are free. Where
/// the GPU nodes are shared with CPU jobs, those can take every CPU of a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFree {
    /// `CPUEfctv` (`CPUTot` before it existed) less `CPUAlloc`; `None` when not shown.
    pub cpus: Option<u32>,
    /// `RealMemory` less `AllocMem`, MiB (allocated only where memory is a consumable
    /// resource, `SelectTypeParameters=CR_*_Memory`); `None` when not shown.
    pub mem_mb: Option<u64>,
}

impl NodeFree {
    /// From the node's CPU and memory counts (`effective` falling back to `total`).
    pub fn of(
        effective: Option<u64>,
        total: Option<u64>,
        alloc_cpus: Option<u64>,
        real_mem: Option<u64>,
        alloc_mem: Option<u64>,
    ) -> NodeFree {
        let cpus = effective
            .or(total)
            .zip(alloc_cpus)
            .map(|(n, used)| u32::try_from(n.saturating_sub(used)).unwrap_or(u32::MAX));
        let mem_mb = real_mem
            .zip(alloc_mem)
            .map(|(n, used)| n.saturating_sub(used));
        NodeFree { cpus, mem_mb }
    }
}

/// Parses `scontrol show node` output (multi-line form).
pub fn parse_nodes(text: &str) -> Result<Vec<NodeInfo>, SlurmError> {
    text_records::parse(text, "NodeName")
        .iter()
        .map(node_from_record)
        .collect()
}

fn node_from_record(r: &Record) -> Result<NodeInfo, SlurmError> {
    let bad = |detail: String| SlurmError::Parse {
        what: "scontrol show node",
        detail,
    };
    let name = r
        .value("NodeName")
        .ok_or_else(|| bad("a record without NodeName".into()))?
        .to_string();
    let state = NodeState::parse(
        r.value("State")
            .ok_or_else(|| bad(format!("node {name} has no State")))?,
    );
    let gpus = match r.value("Gres") {
        Some(g) => parse_gres(g).ok_or_else(|| bad(format!("node {name}: Gres={g}")))?,
        None => Vec::new(),
    };
    let list = |key: &str| -> Vec<String> {
        r.value(key)
            .map(|p| p.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    };
    Ok(NodeInfo {
        name,
        state,
        gpus,
        partitions: list("Partitions"),
        features: list("AvailableFeatures"),
        free: {
            let n = |key: &str| r.value(key).and_then(|v| v.parse::<u64>().ok());
            NodeFree::of(
                n("CPUEfctv"),
                n("CPUTot"),
                n("CPUAlloc"),
                n("RealMemory"),
                n("AllocMem"),
            )
        },
    })
}

/// Parses a GRES list such as `gpu:v100:2,gpu:k80:2(S:0)` or `gpu:v100:2(IDX:0-1)` into typed
/// GPU counts (other GRES are skipped; a typeless `gpu:4` becomes type `gpu`). `None` when
/// a GPU item is malformed.
pub fn parse_gres(text: &str) -> Option<Vec<(String, u32)>> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for item in split_top(text) {
        let item = item.strip_prefix("gres/").unwrap_or(item);
        let core = item.split('(').next().unwrap_or("");
        let mut parts = core.split(':');
        if parts.next() != Some("gpu") {
            continue;
        }
        let rest: Vec<&str> = parts.collect();
        let (gpu_type, count) = match rest.as_slice() {
            [count] => ("gpu", *count),
            [t, count] => (*t, *count),
            _ => return None,
        };
        let count: u32 = count.parse().ok()?;
        match out.iter_mut().find(|(t, _)| t == gpu_type) {
            Some(e) => e.1 += count,
            None => out.push((gpu_type.to_string(), count)),
        }
    }
    // A job that runs on one type of a node with several lists the others at zero
    // (`gpu:v100:1(IDX:0),gpu:k80:0(IDX:)`): it holds none of them.
    out.retain(|(_, c)| *c > 0);
    Some(out)
}

/// Splits at commas outside parentheses (`gpu:v100:2(IDX:0,2),gpu:k80:1(IDX:3)`).
fn split_top(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_reduce_to_usable_or_not() {
        assert_eq!(NodeState::parse("IDLE"), NodeState::Idle);
        assert_eq!(NodeState::parse("MIXED"), NodeState::Mixed);
        assert_eq!(NodeState::parse("ALLOCATED"), NodeState::Allocated);
        assert_eq!(NodeState::parse("IDLE+DRAIN"), NodeState::Drained);
        assert_eq!(NodeState::parse("MIXED+DRAIN"), NodeState::Draining);
        assert_eq!(NodeState::parse("DOWN*"), NodeState::Down);
        assert_eq!(NodeState::parse("IDLE*"), NodeState::Down);
        assert_eq!(NodeState::parse("DOWN+NOT_RESPONDING"), NodeState::Down);
        assert!(!NodeState::parse("IDLE+REBOOT_REQUESTED").usable());
        // Reserved nodes are usable; the reservation rule decides for which jobs.
        assert_eq!(NodeState::parse("IDLE+MAINT+RESERVED"), NodeState::Idle);
        assert_eq!(NodeState::parse("MIXED+RESERVED"), NodeState::Mixed);
        assert_eq!(NodeState::parse("IDLE+PLANNED"), NodeState::Idle);
        assert_eq!(NodeState::parse("MIXED+PLANNED"), NodeState::Mixed);
        // Power saving: a powered-down or booting node is scheduled on (Slurm resumes it for
        // the job); one being powered down, or asked to be, is not.
        assert_eq!(NodeState::parse("IDLE+POWERED_DOWN"), NodeState::Idle);
        assert_eq!(NodeState::parse("IDLE~"), NodeState::Idle);
        assert_eq!(NodeState::parse("IDLE+POWERING_UP"), NodeState::Idle);
        assert_eq!(NodeState::parse("MIXED+POWERING_UP"), NodeState::Mixed);
        assert!(!NodeState::parse("IDLE+POWERING_DOWN").usable());
        assert!(!NodeState::parse("IDLE+POWER_DOWN").usable());
        assert!(!NodeState::parse("IDLE+POWERED_DOWN+DRAIN").usable());
        assert!(NodeState::parse("MIXED").usable());
    }

    #[test]
    fn gres_lists_parse_with_indices_and_sockets() {
        assert_eq!(
            parse_gres("gpu:v100:2,gpu:k80:2").unwrap(),
            vec![("v100".into(), 2), ("k80".into(), 2)]
        );
        assert_eq!(
            parse_gres("gpu:v100:2(IDX:0-1),gpu:k80:1(IDX:2)").unwrap(),
            vec![("v100".into(), 2), ("k80".into(), 1)]
        );
        assert_eq!(
            parse_gres("gpu:v100:1(IDX:0),gpu:k80:0(IDX:)").unwrap(),
            vec![("v100".to_string(), 1)]
        );
        assert_eq!(
            parse_gres("gpu:v100:4(S:0-1),mps:100").unwrap(),
            vec![("v100".into(), 4)]
        );
        assert_eq!(
            parse_gres("gres/gpu:k80:3").unwrap(),
            vec![("k80".into(), 3)]
        );
        assert_eq!(parse_gres("gpu:4").unwrap(), vec![("gpu".into(), 4)]);
        assert!(parse_gres("gpu:v100:x").is_none());
    }
}
