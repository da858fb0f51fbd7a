//! Enforcement planning: the difference between the round's plan and where the jobs stand,
//! as a list of actions. Pure; the daemon carries the actions out.

use crate::view::{same_counts, same_gpus};
use hadar_store::{JobRow, NodeGpus, Phase};
use std::collections::BTreeMap;

/// One thing to do to one job.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Action {
    /// Give a held job these GPUs and release it.
    Start {
        /// The job.
        job: u64,
        /// Its GPUs.
        placement: NodeGpus,
    },
    /// Checkpoint a running job and requeue it held.
    Preempt {
        /// The job.
        job: u64,
    },
    /// Hold a released job that has not started (its plan changed).
    Hold {
        /// The job.
        job: u64,
    },
}

impl Action {
    /// The job acted on.
    pub fn job(&self) -> u64 {
        match self {
            Action::Start { job, .. } | Action::Preempt { job } | Action::Hold { job } => *job,
        }
    }

    /// The action's name as stored in intents.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Start { .. } => "start",
            Action::Preempt { .. } => "preempt",
            Action::Hold { .. } => "hold",
        }
    }
}

/// The actions that turn the current state into the plan (`planned`: job -> GPUs). A
/// running job on the planned GPUs is left alone; a released job waiting for its planned
/// GPUs is left alone; a running job that is moved is preempted this round and placed again
/// in a later round (once Slurm shows it held). Holds come first, then preemptions, then
/// starts, each in job order.
pub fn plan(rows: &BTreeMap<u64, JobRow>, planned: &BTreeMap<u64, NodeGpus>) -> Vec<Action> {
    let mut holds = Vec::new();
    let mut preempts = Vec::new();
    let mut starts = Vec::new();
    for row in rows.values() {
        let want = planned.get(&row.id);
        let here = row.placement.as_ref();
        // A job with a typeless request (no types bound) holds the same request whatever
        // types a node with several gave it: moving it between types of one node would
        // only restart it on the same request.
        let same_gpus = |w: &NodeGpus, h: &NodeGpus| {
            same_gpus(w, h) || (row.bound_types.is_none() && same_counts(w, h))
        };
        match row.phase {
            Phase::Finished => {}
            Phase::Running => {
                if !matches!((want, here), (Some(w), Some(h)) if same_gpus(w, h)) {
                    preempts.push(Action::Preempt { job: row.id });
                }
            }
            // A job that was signalled to checkpoint has stopped training and waits to be
            // requeued (a daemon that crashed during the grace time never requeued it):
            // finish the preemption whatever the plan says; it is placed again later.
            Phase::Preempting => preempts.push(Action::Preempt { job: row.id }),
            Phase::Starting => match (want, here) {
                (Some(w), Some(h)) if same_gpus(w, h) => {}
                (Some(w), _) => {
                    holds.push(Action::Hold { job: row.id });
                    starts.push(Action::Start {
                        job: row.id,
                        placement: w.clone(),
                    });
                }
                (None, _) => holds.push(Action::Hold { job: row.id }),
            },
            Phase::Waiting => {
                if let Some(w) = want {
                    starts.push(Action::Start {
                        job: row.id,
                        placement: w.clone(),
                    });
                }
            }
        }
    }
    holds.into_iter().chain(preempts).chain(starts).collect()
}

/// Orders the starts (they come last) so that on a node with several GPU types, jobs
/// planned on the type listed first in the node's GRES start first. A typeless request
/// (see `GpuSpec::update_fields`) gets the lowest free GPU indices of its node, which follow
/// the node's GRES order, so starting in that order gives each job the type it was planned
/// on. `rank(node, type)` is the type's position on the node.
pub fn order_starts_by_gres(actions: &mut [Action], rank: &dyn Fn(&str, &str) -> usize) {
    let first = actions
        .iter()
        .position(|a| matches!(a, Action::Start { .. }))
        .unwrap_or(actions.len());
    actions[first..].sort_by_key(|a| match a {
        Action::Start { placement, .. } => placement
            .iter()
            .flat_map(|(node, gpus)| gpus.iter().map(move |(t, _)| rank(node, t)))
            .min()
            .unwrap_or(usize::MAX),
        _ => usize::MAX,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, phase: Phase, placement: Option<&str>) -> JobRow {
        let mut r = JobRow::new(id, String::new(), String::new(), 1, 10.0, 0.0);
        r.phase = phase;
        r.placement = placement.map(|n| vec![(n.to_string(), vec![("v100".to_string(), 1)])]);
        r
    }

    fn on(n: &str) -> NodeGpus {
        vec![(n.to_string(), vec![("v100".to_string(), 1)])]
    }

    #[test]
    fn keep_move_start_stop_and_hold() {
        let rows: BTreeMap<u64, JobRow> = [
            row(1, Phase::Running, Some("n1")),  // kept
            row(2, Phase::Running, Some("n1")),  // moved -> preempt
            row(3, Phase::Running, Some("n4")),  // not planned -> preempt
            row(4, Phase::Waiting, None),        // planned -> start
            row(5, Phase::Waiting, None),        // not planned -> nothing
            row(6, Phase::Starting, Some("n4")), // same -> nothing
            row(7, Phase::Starting, Some("n4")), // changed -> hold + start
            row(8, Phase::Starting, Some("n4")), // dropped -> hold
            row(9, Phase::Finished, Some("n4")), // nothing
        ]
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
        let planned: BTreeMap<u64, NodeGpus> = [
            (1, on("n1")),
            (2, on("n4")),
            (4, on("n2")),
            (6, on("n4")),
            (7, on("n1")),
        ]
        .into_iter()
        .collect();
        let acts = plan(&rows, &planned);
        assert_eq!(
            acts,
            vec![
                Action::Hold { job: 7 },
                Action::Hold { job: 8 },
                Action::Preempt { job: 2 },
                Action::Preempt { job: 3 },
                Action::Start {
                    job: 4,
                    placement: on("n2")
                },
                Action::Start {
                    job: 7,
                    placement: on("n1")
                },
            ]
        );
    }

    #[test]
    fn a_plan_equal_to_the_state_needs_no_action() {
        let rows: BTreeMap<u64, JobRow> = [
            row(1, Phase::Running, Some("n1")),
            row(2, Phase::Starting, Some("n2")),
        ]
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
        let planned: BTreeMap<u64, NodeGpus> = [(1, on("n1")), (2, on("n2"))].into_iter().collect();
        assert!(plan(&rows, &planned).is_empty());
    }

    #[test]
    fn a_signalled_job_is_requeued_even_where_the_plan_keeps_it() {
        let rows: BTreeMap<u64, JobRow> = [row(1, Phase::Preempting, Some("n1"))]
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let planned: BTreeMap<u64, NodeGpus> = [(1, on("n1"))].into_iter().collect();
        assert_eq!(plan(&rows, &planned), vec![Action::Preempt { job: 1 }]);
    }

    #[test]
    fn starts_on_a_mixed_node_follow_its_gres_order() {
        let k80 = vec![("n4".to_string(), vec![("k80".to_string(), 2)])];
        let v100 = vec![("n4".to_string(), vec![("v100".to_string(), 2)])];
        let mut acts = vec![
            Action::Preempt { job: 9 },
            Action::Start {
                job: 1,
                placement: k80.clone(),
            },
            Action::Start {
                job: 2,
                placement: v100.clone(),
            },
        ];
        order_starts_by_gres(&mut acts, &|_, t| if t == "v100" { 0 } else { 1 });
        assert_eq!(
            acts,
            vec![
                Action::Preempt { job: 9 },
                Action::Start {
                    job: 2,
                    placement: v100
                },
                Action::Start {
                    job: 1,
                    placement: k80
                },
            ]
        );
    }

    #[test]
    fn a_typeless_job_is_not_moved_between_types_of_one_node() {
        let k80 = vec![("n4".to_string(), vec![("k80".to_string(), 2)])];
        let v100 = vec![("n4".to_string(), vec![("v100".to_string(), 2)])];
        let mut free = row(1, Phase::Running, None);
        free.placement = Some(v100.clone());
        let mut bound = row(2, Phase::Running, None);
        bound.placement = Some(v100);
        bound.bound_types = Some(vec!["v100".into()]);
        let rows: BTreeMap<u64, JobRow> = [(1, free), (2, bound)].into_iter().collect();
        let planned: BTreeMap<u64, NodeGpus> = [(1, k80.clone()), (2, k80)].into_iter().collect();
        assert_eq!(plan(&rows, &planned), vec![Action::Preempt { job: 2 }]);
    }
}
