//! The nodes a managed job may be placed on, read from Slurm's records each round. First
//! those its user chose: its partition (`--partition`; several for `-p a,b`), which holds
//! some of the GPU nodes only where the site splits them (a job in partition `old` runs on
//! `old`'s nodes alone: slurmctld keeps a job placed elsewhere pending), its `--exclude`
//! list (`ExcNodeList`) and its `--constraint` (`Features`) matched against the nodes'
//! features. Then, though nobody chose it, the GPU nodes where Slurm could give it a CPU
//! and the memory it asks for: CPU jobs sharing the GPU nodes can take them all, and a job
//! placed there pends with `Reason=Resources` on GPUs held for it. The plan offers the job
//! only those nodes ([`hadar_core::site::reservations::Offer::and_chosen`]), so a choice
//! made after submission (`scontrol update JobId=.. ExcNodeList=..`) counts from the next
//! round.
//!
//! A `--nodelist`, and a constraint hadar does not read, make the plugin leave the job to
//! Slurm. A managed job given such a constraint later is offered no node, and its wait
//! reason says why.

use hadar_core::site::reservations::{Chosen, Nodes};
use hadar_request::{Record, constraint};
use hadar_slurm::{NodeInfo, SlurmJob};
use std::collections::{BTreeSet, HashMap};

/// The choice of each job of `jobs` that made one, by job id.
pub fn chosen(jobs: &[SlurmJob], nodes: &[NodeInfo]) -> HashMap<u64, Chosen> {
    let features: Vec<(&str, BTreeSet<String>)> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.features.iter().cloned().collect()))
        .collect();
    let gpu_nodes: Vec<&NodeInfo> = nodes.iter().filter(|n| !n.gpus.is_empty()).collect();
    jobs.iter()
        .filter_map(|j| Some((j.id, of_job(j, &gpu_nodes, &features)?)))
        .collect()
}

/// The GPU nodes of `job`'s partitions, `None` when they are all of them (or Slurm names no
/// partition).
fn partition_nodes(job: &SlurmJob, gpu_nodes: &[&NodeInfo]) -> Option<BTreeSet<String>> {
    let partitions: Vec<&str> = job
        .partition
        .as_deref()?
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if partitions.is_empty() {
        return None;
    }
    let inside = |n: &&&NodeInfo| {
        n.partitions
            .iter()
            .any(|p| partitions.contains(&p.as_str()))
    };
    if gpu_nodes.iter().all(|n| inside(&n)) {
        return None;
    }
    Some(
        gpu_nodes
            .iter()
            .filter(inside)
            .map(|n| n.name.clone())
            .collect(),
    )
}

/// The GPU nodes where Slurm could not give `job` the least it needs on a node it runs on,
/// as their free CPUs and memory stand: a CPU, or the CPUs and memory of one GPU where its
/// record has `cpus-per-gpu=`/`mem-per-gpu=` (given back with its placement), and the
/// memory per node it asks for (`MinMemoryNode`). What it needs beyond that depends on the
/// GPUs it is given there.
fn short_of_cpus_or_memory(job: &SlurmJob, gpu_nodes: &[&NodeInfo]) -> BTreeSet<String> {
    let per_gpu = job
        .admin_comment
        .as_deref()
        .and_then(|text| Record::decode(text).ok())
        .map(|r| (r.directives.cpus_per_gpu, r.directives.mem_per_gpu_mb))
        .unwrap_or_default();
    let cpus = u32::try_from(per_gpu.0.unwrap_or(1).max(1)).unwrap_or(u32::MAX);
    let mem_mb = per_gpu
        .1
        .unwrap_or(0)
        .max(job.site.mem_per_node_mb.unwrap_or(0))
        .max(1);
    gpu_nodes
        .iter()
        .filter(|n| {
            n.free.cpus.is_some_and(|c| c < cpus) || n.free.mem_mb.is_some_and(|m| m < mem_mb)
        })
        .map(|n| n.name.clone())
        .collect()
}

/// The nodes `job` chose among `gpu_nodes` (with `nodes`, each node's name and features),
/// `None` when it chose none.
fn of_job(
    job: &SlurmJob,
    gpu_nodes: &[&NodeInfo],
    nodes: &[(&str, BTreeSet<String>)],
) -> Option<Chosen> {
    let features = job
        .features
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    let in_partition = partition_nodes(job, gpu_nodes);
    let short = short_of_cpus_or_memory(job, gpu_nodes);
    if job.exc_nodes.is_empty() && features.is_none() && in_partition.is_none() && short.is_empty()
    {
        return None;
    }
    let mut allowed = Nodes::All;
    let mut options = Vec::new();
    if let Some(inside) = in_partition {
        allowed = Nodes::Only(inside);
        options.push(format!(
            "--partition={}",
            job.partition.as_deref().unwrap_or_default()
        ));
    }
    if !job.exc_nodes.is_empty() {
        allowed = allowed.and(&Nodes::Except(job.exc_nodes.iter().cloned().collect()));
        options.push(format!("--exclude={}", job.exc_nodes.join(",")));
    }
    if let Some(text) = features {
        let matching: BTreeSet<String> = match constraint::parse(text) {
            Ok(c) => nodes
                .iter()
                .filter(|(_, features)| c.matches(features))
                .map(|(name, _)| name.to_string())
                .collect(),
            Err(unread) => {
                options.push(format!(
                    "--constraint={text} (with {unread}, which hadar does not read)"
                ));
                return Some(Chosen {
                    nodes: Nodes::Only(BTreeSet::new()),
                    options: options.join(" "),
                });
            }
        };
        allowed = allowed.and(&Nodes::Only(matching));
        options.push(format!("--constraint={text}"));
    }
    if !short.is_empty() {
        options.push(format!(
            "need for CPUs and memory (none free for it on {})",
            short.iter().cloned().collect::<Vec<_>>().join(",")
        ));
        allowed = allowed.and(&Nodes::Except(short));
    }
    Some(Chosen {
        nodes: allowed,
        options: options.join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeState;

    fn node(name: &str, features: &[&str]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            state: NodeState::parse("IDLE"),
            gpus: vec![("v100".into(), 4)],
            partitions: vec!["gpu".into()],
            features: features.iter().map(|f| f.to_string()).collect(),
            free: Default::default(),
        }
    }

    fn job(id: u64, exclude: &[&str], features: Option<&str>) -> SlurmJob {
        let mut j = SlurmJob::held_with_record(id, "");
        j.exc_nodes = exclude.iter().map(|n| n.to_string()).collect();
        j.features = features.map(String::from);
        j
    }

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exclusions_and_constraints_become_the_nodes_a_job_is_offered() {
        let nodes = [
            node("n1", &["v100", "nvlink"]),
            node("n2", &["p100"]),
            node("n3", &["k80"]),
            node("n4", &["v100", "k80"]),
        ];
        let jobs = [
            job(1, &[], None),
            job(2, &["n1", "n4"], None),
            job(3, &[], Some("v100|p100")),
            job(4, &["n1"], Some("v100")),
            job(5, &[], Some("v100&k80")),
            job(6, &[], Some("[v100|k80]")),
            job(7, &[], Some("  ")),
        ];
        let c = chosen(&jobs, &nodes);
        assert!(!c.contains_key(&1) && !c.contains_key(&7), "{c:?}");
        assert_eq!(c[&2].nodes, Nodes::Except(names(&["n1", "n4"])));
        assert_eq!(c[&2].options, "--exclude=n1,n4");
        assert_eq!(c[&3].nodes, Nodes::Only(names(&["n1", "n2", "n4"])));
        assert_eq!(c[&4].nodes, Nodes::Only(names(&["n4"])));
        assert_eq!(c[&4].options, "--exclude=n1 --constraint=v100");
        assert_eq!(c[&5].nodes, Nodes::Only(names(&["n4"])));
        // A constraint hadar does not read (set after submission) offers no node, and says why.
        assert_eq!(c[&6].nodes, Nodes::Only(BTreeSet::new()));
        assert!(c[&6].options.contains("brackets"), "{}", c[&6].options);
    }

    #[test]
    fn a_partition_of_some_gpu_nodes_is_the_nodes_a_job_is_offered() {
        let in_parts = |name: &str, parts: &[&str], gpus: u32| NodeInfo {
            partitions: parts.iter().map(|p| p.to_string()).collect(),
            gpus: if gpus == 0 {
                vec![]
            } else {
                vec![("v100".into(), gpus)]
            },
            ..node(name, &[])
        };
        let nodes = [
            in_parts("n1", &["gpu"], 4),
            in_parts("n2", &["gpu"], 4),
            in_parts("n3", &["gpu", "old"], 4),
            in_parts("n4", &["gpu", "old"], 4),
            // A node without GPUs outside `gpu` restricts nobody.
            in_parts("c1", &["cpu"], 0),
        ];
        let in_partition = |id: u64, p: Option<&str>, exclude: &[&str]| {
            let mut j = job(id, exclude, None);
            j.partition = p.map(String::from);
            j
        };
        let jobs = [
            in_partition(1, Some("gpu"), &[]),
            in_partition(2, Some("old"), &[]),
            in_partition(3, Some("old"), &["n4"]),
            in_partition(4, Some("cpu,old"), &[]),
            in_partition(5, None, &[]),
            in_partition(6, Some("gpu,old"), &[]),
        ];
        let c = chosen(&jobs, &nodes);
        assert!(
            [1, 5, 6].iter().all(|id| !c.contains_key(id)),
            "their partitions hold every GPU node: {c:?}"
        );
        assert_eq!(c[&2].nodes, Nodes::Only(names(&["n3", "n4"])));
        assert_eq!(c[&2].options, "--partition=old");
        assert_eq!(c[&3].nodes, Nodes::Only(names(&["n3"])));
        assert_eq!(c[&3].options, "--partition=old --exclude=n4");
        assert_eq!(c[&4].nodes, Nodes::Only(names(&["n3", "n4"])));
    }

    #[test]
    fn gpu_nodes_without_a_free_cpu_or_the_memory_asked_are_not_offered() {
        let with_free = |name: &str, cpus: Option<u32>, mem_mb: Option<u64>| NodeInfo {
            free: hadar_slurm::NodeFree { cpus, mem_mb },
            ..node(name, &[])
        };
        let nodes = [
            with_free("n1", Some(0), Some(4000)),
            with_free("n2", Some(2), Some(1000)),
            with_free("n3", None, None),
            with_free("n4", Some(8), Some(0)),
        ];
        let mut big = job(2, &["n3"], None);
        big.site.mem_per_node_mb = Some(2000);
        let c = chosen(&[job(1, &[], None), big], &nodes);
        assert_eq!(c[&1].nodes, Nodes::Except(names(&["n1", "n4"])));
        assert_eq!(
            c[&1].options,
            "need for CPUs and memory (none free for it on n1,n4)"
        );
        assert_eq!(c[&2].nodes, Nodes::Except(names(&["n1", "n2", "n3", "n4"])));
        assert_eq!(
            c[&2].options,
            "--exclude=n3 need for CPUs and memory (none free for it on n1,n2,n4)"
        );
        // Two CPUs and 500 MiB per GPU: n2 has the CPUs and the memory for one GPU.
        let per_gpu =
            SlurmJob::held_with_record(3, "hadar:v1 gpus=2 cpus-per-gpu=2 mem-per-gpu=500");
        let c = chosen(&[per_gpu], &nodes);
        assert_eq!(c[&3].nodes, Nodes::Except(names(&["n1", "n4"])));
        let three = SlurmJob::held_with_record(4, "hadar:v1 gpus=1 cpus-per-gpu=3");
        let c = chosen(&[three], &nodes);
        assert_eq!(c[&4].nodes, Nodes::Except(names(&["n1", "n2", "n4"])));
        // Nothing short anywhere: no choice at all.
        let roomy = [
            with_free("n1", Some(1), Some(1)),
            with_free("n2", None, None),
        ];
        assert!(chosen(&[job(1, &[], None)], &roomy).is_empty());
    }
}
