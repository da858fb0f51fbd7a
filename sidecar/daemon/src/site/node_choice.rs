//! The nodes a managed job's user chose for it, read from Slurm's records each round: its
//! `--exclude` list (`ExcNodeList`) and its `--constraint` (`Features`) matched against
//! the nodes' features. The plan offers the job only those nodes
//! ([`hadar_core::site::reservations::Offer::and_chosen`]), so a choice made after
//! submission (`scontrol update JobId=.. ExcNodeList=..`) counts from the next round.
//!
//! A `--nodelist`, and a constraint hadar does not read, make the plugin leave the job to
//! Slurm. A managed job given such a constraint later is offered no node, and its wait
//! reason says why.

use hadar_core::site::reservations::{Chosen, Nodes};
use hadar_request::constraint;
use hadar_slurm::{NodeInfo, SlurmJob};
use std::collections::{BTreeSet, HashMap};

/// The choice of each job of `jobs` that made one, by job id.
pub fn chosen(jobs: &[SlurmJob], nodes: &[NodeInfo]) -> HashMap<u64, Chosen> {
    let features: Vec<(&str, BTreeSet<String>)> = nodes
        .iter()
        .map(|n| (n.name.as_str(), n.features.iter().cloned().collect()))
        .collect();
    jobs.iter()
        .filter_map(|j| Some((j.id, of_job(j, &features)?)))
        .collect()
}

/// The nodes `job` chose among `nodes` (each node's name and features), `None` when it
/// chose none.
fn of_job(job: &SlurmJob, nodes: &[(&str, BTreeSet<String>)]) -> Option<Chosen> {
    let features = job
        .features
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    if job.exc_nodes.is_empty() && features.is_none() {
        return None;
    }
    let mut allowed = Nodes::All;
    let mut options = Vec::new();
    if !job.exc_nodes.is_empty() {
        allowed = Nodes::Except(job.exc_nodes.iter().cloned().collect());
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
}
