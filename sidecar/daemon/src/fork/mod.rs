//! Forked (HadarE) jobs on Slurm: each round, a `fork=yes` job runs as its copies, one
//! heterogeneous Slurm job with one component per node (that node's GPU type and count),
//! submitted as the job's own user; after the round its copies' checkpoints are averaged
//! (weighted by steps) by the copy job itself, on its node, as the job's user, which reports
//! the round in its `Comment` ([`crate::fork_consolidate`]); the daemon reads that report and
//! updates the persisted Job Tracker ([`hadar_store::fork`]). The daemon never reads or writes
//! the spool: its host need not mount it.
//!
//! The user sees one logical job: the job they submitted stays in Slurm's queue, held, while
//! its copies run; its `Comment` shows its progress
//! (`hadar-fork:v1;state=running;round=R;copies=N;steps=S/T;pct=P`). When the aggregated
//! steps reach the total, the daemon sets `state=done` and releases it: its batch script
//! runs once more, and the fork runner (`hadar-fork-run -- PROGRAM`) sees `state=done` and
//! exits 0 without training, so `afterok` dependents start. When copies fail round after
//! round, it sets `state=failed` and releases it, and the runner exits 1. When the logical
//! job is cancelled, its running copy job is cancelled and the open round counts nothing.
//!
//! Sharing the cluster: jobs without `fork=yes` are planned by Hadar first; forked jobs are
//! then planned by HadarE over the GPUs nothing else holds or is about to hold: the core's
//! mixed round ([`hadar_core::passes::mixed`]), which the simulator runs too. Both are part
//! of the round's pure decision ([`plan`], from the trackers in the snapshot); this pass
//! moves open rounds on before it and submits the planned rounds after it. A copy job holds its
//! GPUs from its submission until its deadline, a little before the next regular round, so
//! that round both policies see the whole cluster again; a round woken sooner (by a
//! submission) plans around the copies still open: queued in Slurm, running, or ending
//! without their GPUs listed.
//!
//! Crash safety: a round is written to the store (state `submitting`) before its copy job
//! is submitted, and its steps are added to the job's aggregate only in the transaction that
//! marks it consolidated. A restarted daemon adopts a copy job it submitted but did not
//! record (found by name), completes a round whose copies ran while it was down, and gives
//! up (redoes from the last consolidated checkpoint) a round it cannot account for,
//! including one whose ended copy job Slurm no longer shows. The averaging runs once, in the
//! copy job, whatever happens to the daemon; a restarted daemon reads the same report.

use crate::config::{DaemonConfig, ForkConfig};
use crate::fork_consolidate::{RoundPlan, RoundReport, apply};
use crate::spec::{self, JobSpec, Priors};
use hadar_core::passes::mixed::plan_mixed;
use hadar_core::tracker::consolidation_weights;
use hadar_core::{Job, JobId, JobState, Part, Placement, RoundInput};
use hadar_formats::ThroughputTable;
use hadar_request::Outer;
use hadar_slurm::{JobStatus, Slurm, SlurmError, SlurmJob};
use hadar_store::{
    ForkCopy, ForkJob, ForkRound, ForkState, JobRow, NodeGpus, OuterStep, Phase, RoundState, Store,
    StoreError,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tag of the progress comment the daemon keeps on a forked logical job.
pub const COMMENT_TAG: &str = "hadar-fork:v1";

/// What the fork pass needs from Slurm beyond [`crate::SlurmApi`]; implemented by [`Slurm`].
pub trait ForkSlurm {
    /// Submits a batch script as user `uid`/group `gid`; returns the job id.
    fn submit_as(
        &self,
        uid: u32,
        gid: u32,
        script: &Path,
        workdir: &Path,
    ) -> Result<u64, SlurmError>;
    /// Cancels a job.
    fn cancel(&self, id: u64) -> Result<(), SlurmError>;
    /// The batch script a job was submitted with.
    fn batch_script(&self, id: u64) -> Result<String, SlurmError>;
    /// Sets a job's `Comment`.
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError>;
    /// Releases a held job.
    fn release(&self, id: u64) -> Result<(), SlurmError>;
}

impl ForkSlurm for Slurm {
    fn submit_as(
        &self,
        uid: u32,
        gid: u32,
        script: &Path,
        workdir: &Path,
    ) -> Result<u64, SlurmError> {
        Slurm::submit_as(self, uid, gid, script, workdir)
    }
    fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::cancel(self, id)
    }
    fn batch_script(&self, id: u64) -> Result<String, SlurmError> {
        Slurm::batch_script(self, id)
    }
    fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        Slurm::set_comment(self, id, text)
    }
    fn release(&self, id: u64) -> Result<(), SlurmError> {
        Slurm::release(self, id)
    }
}

/// Why a step of the fork pass failed for one job (the job is retried next round).
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// Slurm refused or failed a command.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file in the spool could not be written or read.
    #[error("spool {path}: {reason}")]
    Spool {
        /// The file or folder.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// The logical job's owner is unknown (Slurm did not show a user and group id).
    #[error("job {0}: Slurm shows no user or group id, so its copies cannot run as its owner")]
    NoOwner(u64),
    /// The job's tracker is no longer where the round's decision found it.
    #[error("job {0}: its tracker moved on since round {1} was planned; planned again next round")]
    Moved(u64, u64),
}

pub use crate::action_log::ActionLog;
use crate::action_log::{ActionDone, ActionKind, ActionOutcome};

/// What the fork pass says about one forked job, for `hadar explain`.
#[derive(Clone, Debug, PartialEq)]
pub struct ForkDecision {
    /// Its copies this round, when it has some.
    pub placement: Option<NodeGpus>,
    /// The explanation in words.
    pub text: String,
}

/// The fork pass: runs forked jobs as rounds of copies.
pub struct Forker {
    api: Box<dyn ForkSlurm + Send>,
    config: ForkConfig,
    round_s: f64,
    /// `[sidecar] rate_learning_weight`: how much a new measurement moves a learned rate.
    learn_weight: f64,
    hadar_bin: PathBuf,
}

impl Forker {
    /// A fork pass over this Slurm with the daemon's settings; `hadar_bin` is the `hadar`
    /// binary that averages copies when `[fork].hadar_bin` is unset.
    pub fn new(api: Box<dyn ForkSlurm + Send>, config: &DaemonConfig, hadar_bin: PathBuf) -> Self {
        Forker {
            api,
            hadar_bin: config.fork.hadar_bin.clone().unwrap_or(hadar_bin),
            config: config.fork.clone(),
            round_s: config.sidecar.round_seconds,
            learn_weight: config.sidecar.rate_learning_weight,
        }
    }
}

mod advance;
pub mod plan;
mod progress;
mod script;
mod sizing;
mod start;
#[cfg(test)]
mod tests;

pub use plan::{ForkStart, ForkView, ForkedRound, PlainSide, PlannedCopy, plan_forks};
use progress::*;
pub use progress::{comment, copies_gpus};
pub use script::outer_args;

/// The Slurm name of logical job `job`'s copy job for round `round`.
pub fn copy_job_name(job: u64, round: u64) -> String {
    format!("hadar-fork-{job}-r{round}")
}

/// The logical job and round a copy job's name ([`copy_job_name`]) gives; `None` for any
/// other name.
pub fn copy_job_of(name: &str) -> Option<(u64, u64)> {
    let (job, round) = name.strip_prefix("hadar-fork-")?.split_once("-r")?;
    Some((job.parse().ok()?, round.parse().ok()?))
}
use script::*;
pub use sizing::{fork_profile, split_budget};
