//! The round's record for `hadar status`: capacity, planned and busy GPUs per type, the
//! planner's prices, the nodes' use and the actions, from the snapshot and the decision
//! (pure).

use crate::action_log::ActionLog;
use crate::decide::RoundDecision;
use crate::snapshot::RoundSnapshot;
use crate::view;
use hadar_core::market::PriceBook;
use hadar_slurm::JobStatus;
use hadar_store::RoundRow;

/// What one round did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundReport {
    /// The round number.
    pub round: u64,
    /// Active managed jobs.
    pub active: usize,
    /// Actions carried out.
    pub actions: ActionLog,
    /// Milliseconds the policy took.
    pub decision_ms: f64,
    /// Milliseconds spent reading Slurm's nodes and jobs.
    pub read_ms: f64,
    /// Milliseconds spent carrying out the actions.
    pub enforce_ms: f64,
    /// Milliseconds of the whole round: read, reconcile, decide, enforce, record.
    pub total_ms: f64,
    /// The Slurm commands the round ran (reads and actions) and the bytes they answered.
    pub slurm_io: hadar_slurm::SlurmIo,
}

/// The round's summary; the caller adds the policy's name, its time and the actions.
pub fn summary(snap: &RoundSnapshot, decision: &RoundDecision, partitions: &[String]) -> RoundRow {
    let cv = &decision.cv;
    let mut summary = RoundRow {
        round: snap.round,
        started_s: snap.now_s,
        slurm_release: snap.slurm_release.clone(),
        ..Default::default()
    };
    summary.unusable_nodes = cv.unusable.clone();
    if let Some(cluster) = &cv.cluster {
        for t in cluster.types() {
            summary
                .capacity
                .insert(cluster.type_name(t).to_string(), cluster.total_of_type(t));
        }
        for p in decision.planned.values() {
            for (t, c) in view::per_type(p) {
                *summary.planned_use.entry(t).or_default() += c;
            }
        }
        if let (Some(stats), Some(plan)) = (&decision.stats, &decision.plan)
            && let Some(bounds) = stats.price_bounds
        {
            summary.price_bounds = Some((bounds.low, bounds.high));
            let mut book = PriceBook::new(cluster, &vec![bounds; cluster.type_count()]);
            for a in &plan.assignments {
                book.charge(&a.placement);
            }
            for n in cluster.node_ids() {
                for t in cluster.types() {
                    if cluster.capacity(n, t) > 0 {
                        summary.prices.push((
                            cluster.node(n).name.clone(),
                            cluster.type_name(t).to_string(),
                            book.next_price(n, t),
                        ));
                    }
                }
            }
        }
    }
    let held: Vec<(String, String, u32)> = snap
        .slurm_jobs
        .iter()
        .filter(|j| j.status == JobStatus::Running)
        .flat_map(|j| j.gpu_parts())
        .collect();
    for (_, t, c) in &held {
        *summary.busy.entry(t.clone()).or_default() += c;
    }
    summary.nodes = view::node_rows(&snap.nodes, partitions, decision.planned.values(), &held);
    summary
}

/// The actions as the record shows them, `(job, "action: outcome")`.
pub fn action_texts(done: &ActionLog) -> Vec<(u64, String)> {
    done.iter().map(|a| (a.job, a.to_string())).collect()
}
