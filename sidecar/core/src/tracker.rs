//! The Job Tracker: per job and round, where its copies ran, the steps each did, the steps
//! aggregated over copies, and the weights used to consolidate them.
//!
//! HadarE consolidates a forked job at every round end by averaging its copies' parameters
//! with weights `steps_k / sum(steps)`: a copy that trained more moves the model more. The
//! tracker is pure bookkeeping; the simulator writes it out (`hadar simulate --trace-out`)
//! and the daemon persists it.

use crate::cluster::Cluster;
use crate::job::JobId;
use crate::placement::{Placement, PlacementKind};
use serde::{Deserialize, Serialize};

/// One copy's (or, for a gang job, one part's) share of a round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyRecord {
    /// The node.
    pub node: String,
    /// The GPU type.
    pub gpu_type: String,
    /// GPUs used.
    pub gpus: u32,
    /// Steps this copy did (a gang part has none of its own: the job's steps are shared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<f64>,
    /// Its consolidation weight, `steps / aggregated steps` (forked jobs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

/// One job's round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrackerRecord {
    /// 0-based round index.
    pub round: u64,
    /// The job.
    pub job: JobId,
    /// Round start, seconds.
    pub start_s: f64,
    /// When the job stopped in this round, seconds.
    pub end_s: f64,
    /// Gang or forked.
    pub kind: PlacementKind,
    /// Its copies (forked) or parts (gang).
    pub copies: Vec<CopyRecord>,
    /// Steps done this round, summed over copies.
    pub aggregated_steps: f64,
    /// Steps still to do after the round.
    pub remaining_steps: f64,
}

/// The consolidation weights, `steps_k / sum(steps)` (the rule lives in its own crate so that
/// `hadar-average`, run as the job's user, shares it without linking the scheduling core).
pub use hadar_consolidation::consolidation_weights;

impl TrackerRecord {
    /// Builds a record from a placement and the steps each of its parts did (for a forked
    /// placement, one entry per copy; for a gang placement, `copy_steps` is ignored).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cluster: &Cluster,
        round: u64,
        job: JobId,
        start_s: f64,
        end_s: f64,
        placement: &Placement,
        steps: f64,
        copy_steps: &[f64],
        remaining_steps: f64,
    ) -> Self {
        let forked = placement.kind() == PlacementKind::Forked;
        let weights = if forked {
            consolidation_weights(copy_steps)
        } else {
            Vec::new()
        };
        let copies = placement
            .parts()
            .iter()
            .enumerate()
            .map(|(k, p)| CopyRecord {
                node: cluster.node(p.node).name.clone(),
                gpu_type: cluster.type_name(p.gpu_type).to_string(),
                gpus: p.gpus,
                steps: if forked {
                    copy_steps.get(k).copied()
                } else {
                    None
                },
                weight: weights.get(k).copied(),
            })
            .collect();
        TrackerRecord {
            round,
            job,
            start_s,
            end_s,
            kind: placement.kind(),
            copies,
            aggregated_steps: steps,
            remaining_steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{GpuType, NodeId};
    use crate::placement::Part;

    #[test]
    fn a_forked_record_names_nodes_and_types() {
        let c = Cluster::from_type_counts(&[("v100".into(), 2), ("k80".into(), 1)], 1).unwrap();
        let p = Placement::forked([
            Part {
                node: NodeId(0),
                gpu_type: GpuType(0),
                gpus: 1,
            },
            Part {
                node: NodeId(2),
                gpu_type: GpuType(1),
                gpus: 1,
            },
        ]);
        let r = TrackerRecord::new(
            &c,
            3,
            JobId(7),
            0.0,
            360.0,
            &p,
            400.0,
            &[300.0, 100.0],
            600.0,
        );
        assert_eq!(r.copies[0].node, "v100-0");
        assert_eq!(r.copies[1].gpu_type, "k80");
        assert_eq!(r.copies[1].weight, Some(0.25));
    }
}
