//! Managed jobs hadar can no longer move. hadar preempts a job by requeueing it, and
//! slurmctld refuses to requeue a job that may not be requeued (`Requeue=0`). The plugin
//! submits every managed job requeueable, so a managed job showing `Requeue=0` had it set
//! after submission (`scontrol update JobId=N Requeue=0`). Once such a job runs, preempting
//! it would signal it to checkpoint and then fail to requeue it, leaving it waiting to be
//! requeued on its GPUs; so it runs where it is to its end. Its GPUs are held as an
//! unmanaged job's are, and the plan has no say over it. A waiting one is placed as any
//! other; only once started does it stay put. Pure.

use hadar_slurm::{JobStatus, SlurmJob};
use hadar_store::{Decision, JobRow, Phase};
use std::collections::{BTreeMap, BTreeSet};

/// The running managed jobs (among `rows`) that Slurm shows may not be requeued.
pub fn unmovable(rows: &BTreeMap<u64, JobRow>, slurm_jobs: &[SlurmJob]) -> BTreeSet<u64> {
    slurm_jobs
        .iter()
        .filter(|j| j.site.requeue == Some(false) && holds_its_gpus(&j.status))
        .filter(|j| rows.get(&j.id).is_some_and(|r| r.phase == Phase::Running))
        .map(|j| j.id)
        .collect()
}

fn holds_its_gpus(status: &JobStatus) -> bool {
    matches!(
        status,
        JobStatus::Running | JobStatus::Completing | JobStatus::Suspended
    )
}

/// The decisions of the `unmovable` jobs: each runs where it is (its placement in `rows`),
/// and says why the plan has no say over it.
pub fn explain(
    rows: &BTreeMap<u64, JobRow>,
    unmovable: &BTreeSet<u64>,
    decisions: &mut [Decision],
) {
    for d in decisions.iter_mut().filter(|d| unmovable.contains(&d.job)) {
        let here = rows
            .get(&d.job)
            .and_then(|r| r.placement.clone())
            .unwrap_or_default();
        d.text = format!(
            "runs on {} to its end: it may no longer be requeued (Requeue=0, set after submission), and hadar moves a job only by requeueing it, so its GPUs are not planned",
            crate::explain::placement_words(&here)
        );
        d.runs = true;
        d.placement = Some(here);
        d.wait_reason = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, phase: Phase) -> JobRow {
        JobRow {
            phase,
            ..JobRow::new(id, "j".into(), "hadar:v1".into(), 1, 100.0, 0.0)
        }
    }

    #[test]
    fn only_running_managed_jobs_that_may_not_be_requeued_stay_put() {
        let rows: BTreeMap<u64, JobRow> = [
            (1, row(1, Phase::Running)),
            (2, row(2, Phase::Running)),
            (3, row(3, Phase::Waiting)),
            (4, row(4, Phase::Running)),
        ]
        .into_iter()
        .collect();
        let job = |id: u64, status: JobStatus, requeue: Option<bool>| {
            let mut j = SlurmJob::held_with_record(id, "hadar:v1 gpus=1");
            j.status = status;
            j.site.requeue = requeue;
            j
        };
        let jobs = [
            job(1, JobStatus::Running, Some(false)),
            job(2, JobStatus::Running, Some(true)),
            job(3, JobStatus::Pending, Some(false)),
            job(4, JobStatus::Running, None),
            // Not a managed job the store knows.
            job(5, JobStatus::Running, Some(false)),
        ];
        assert_eq!(unmovable(&rows, &jobs), BTreeSet::from([1]));
    }
}
