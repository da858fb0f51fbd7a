//! What a simulation reports: per-job outcomes and the summary metrics computed from them.

use hadar_core::JobId;
use serde::Serialize;

/// How one job fared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobOutcome {
    /// The job.
    pub id: JobId,
    /// Its kind (job type).
    pub kind: String,
    /// Workers it asked for.
    pub workers: u32,
    /// When it arrived.
    pub arrival_s: f64,
    /// When it first ran.
    pub first_start_s: f64,
    /// When it finished.
    pub finish_s: f64,
    /// Times its placement changed between rounds in which it ran (or it resumed).
    pub restarts: u32,
    /// Its time alone on its fastest type with its own workers.
    pub isolated_s: f64,
    /// Average number of active jobs while it was in the system (Themis' contention).
    pub mean_contention: f64,
}

impl JobOutcome {
    /// Job completion time: finish minus arrival.
    pub fn jct_s(&self) -> f64 {
        self.finish_s - self.arrival_s
    }

    /// Time from arrival to first start.
    pub fn queueing_s(&self) -> f64 {
        self.first_start_s - self.arrival_s
    }

    /// Finish-time fairness (Themis' rho): JCT over the time the job would take with a
    /// 1/n share of the cluster, `isolated time x mean contention`. Below 1 is fair.
    pub fn finish_time_fairness(&self) -> f64 {
        self.jct_s() / (self.isolated_s * self.mean_contention.max(1.0))
    }
}

/// Busy fraction of one GPU type over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TypeUtilisation {
    /// The GPU type.
    pub gpu_type: String,
    /// Busy GPU-seconds over the type's GPU-seconds during the TTD.
    pub utilisation: f64,
}

/// Summary of one policy's run. Field names are part of `hadar simulate --format json`'s
/// stable output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metrics {
    /// Total time duration: first arrival to last completion.
    pub ttd_s: f64,
    /// Mean job completion time.
    pub avg_jct_s: f64,
    /// Median job completion time.
    pub p50_jct_s: f64,
    /// 95th-percentile job completion time (nearest rank).
    pub p95_jct_s: f64,
    /// Cluster resource utilisation: busy GPU-seconds over all GPU-seconds during the TTD.
    pub cru: f64,
    /// Utilisation per GPU type.
    pub utilisation_by_type: Vec<TypeUtilisation>,
    /// Mean time from arrival to first start.
    pub avg_queueing_s: f64,
    /// Total restarts (placement changes and resumptions).
    pub restarts: u64,
    /// Mean finish-time fairness rho.
    pub ftf_mean: f64,
    /// Worst finish-time fairness rho.
    pub ftf_max: f64,
    /// Mean wall time of the policy's decision per round, milliseconds.
    pub decision_ms_mean: f64,
    /// Longest decision, milliseconds.
    pub decision_ms_max: f64,
    /// Rounds played.
    pub rounds: u64,
    /// Jobs in the workload.
    pub jobs: usize,
    /// Jobs that completed (all of them, or the simulation reports an error).
    pub jobs_completed: usize,
}

/// One policy's simulation result.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// The policy's name.
    pub policy: String,
    /// The summary.
    pub metrics: Metrics,
    /// Per-job outcomes, by job id.
    pub jobs: Vec<JobOutcome>,
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1).
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Mean, zero for no values.
pub(crate) fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 { 0.0 } else { sum / n as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 10.0);
        assert_eq!(percentile(&v, 0.95), 19.0);
        assert_eq!(percentile(&v, 1.0), 20.0);
        assert_eq!(percentile(&[3.0], 0.95), 3.0);
    }
}
