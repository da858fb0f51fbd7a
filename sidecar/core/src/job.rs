//! Jobs: what a job is (fixed at submission) and where it stands at a round boundary.

use crate::cluster::GpuType;
use crate::placement::Placement;
use crate::throughput::ThroughputProfile;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// A job's identifier (a trace line number in simulation, a Slurm job id on a cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The fixed description of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Its identifier.
    pub id: JobId,
    /// A human-readable kind, such as `ResNet-18 (batch size 32)`.
    pub kind: String,
    /// When it arrived, in seconds from the start of the workload.
    pub arrival_s: f64,
    /// Number of workers (GPUs) it trains with: `N_j`. Gang jobs get all or none.
    pub workers: u32,
    /// Training steps to complete.
    pub total_steps: f64,
    /// Priority weight (1 is normal; larger means more important).
    pub weight: f64,
    /// Steps/s on each type by worker count.
    pub throughput: ThroughputProfile,
    /// Seconds this job loses to a checkpoint and reload when it moves or resumes, where it
    /// differs from the workload's (an application's own cost: Sia measured 15-250 s);
    /// `None`: the round's [`crate::RoundInput::restart_s`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_s: Option<f64>,
}

impl Job {
    /// Steps/s with all `workers` on type `t`, if it can run so.
    pub fn rate_on(&self, t: GpuType) -> Option<f64> {
        self.throughput.rate(t, self.workers)
    }

    /// The online order of jobs: by arrival time, ties broken by id. Every policy that
    /// serves jobs "in arrival order" uses this one ordering.
    pub fn arrival_order(&self, other: &Job) -> std::cmp::Ordering {
        self.arrival_s
            .total_cmp(&other.arrival_s)
            .then(self.id.cmp(&other.id))
    }

    /// Seconds it loses when it moves or resumes: its own cost, else `default_s`.
    pub fn restart_or(&self, default_s: f64) -> f64 {
        self.restart_s.unwrap_or(default_s)
    }

    /// True when the job can run on at least one type with its own worker count.
    pub fn can_run_somewhere(&self, types: impl IntoIterator<Item = GpuType>) -> bool {
        types.into_iter().any(|t| self.rate_on(t).is_some())
    }
}

/// A job as a policy sees it at a round boundary: its description plus its progress and
/// the service it has received so far. Built by the simulator or the daemon.
#[derive(Clone, Debug)]
pub struct JobState {
    /// The job's fixed description.
    pub job: Arc<Job>,
    /// Steps still to run.
    pub remaining_steps: f64,
    /// Where it ran in the round that just ended (`None` when it was not running).
    pub placement: Option<Placement>,
    /// Wall-clock seconds it has run with at least one worker on each type, indexed by
    /// [`GpuType::index`]. A gang job on several types accrues on each of them.
    pub run_s_by_type: Vec<f64>,
    /// Wall-clock seconds it has run, on any types.
    pub run_s: f64,
    /// GPU-seconds of service received so far (workers x seconds run), as Tiresias counts.
    pub attained_gpu_s: f64,
    /// Number of rounds in which it ran.
    pub rounds_run: u32,
    /// When it first started running, if it has.
    pub first_start_s: Option<f64>,
}

impl JobState {
    /// A job that has just arrived: nothing run, nothing received.
    pub fn arrived(job: Arc<Job>, types: usize) -> Self {
        JobState {
            remaining_steps: job.total_steps,
            job,
            placement: None,
            run_s_by_type: vec![0.0; types],
            run_s: 0.0,
            attained_gpu_s: 0.0,
            rounds_run: 0,
            first_start_s: None,
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.job.id
    }
}
