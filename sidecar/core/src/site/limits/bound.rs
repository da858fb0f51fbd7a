//! What one limit bounds, how much of it a job uses, and when adding a job goes over it:
//! GPUs (all, or of one type), CPUs and memory held at once or per job, running jobs,
//! time limits, and GPU-minutes (running: `GrpTRESRunMins`; accumulated: `GrpTRESMins`).

use super::SiteJob;
use serde::{Deserialize, Serialize};

/// What a limit bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Bound {
    /// GPUs held at once by the scope's jobs (`gres/gpu` in a `*TRES*` limit).
    Gpus(u32),
    /// GPUs one job may ask for (`MaxTRESPerJob`, `MaxTRES`).
    GpusPerJob(u32),
    /// GPUs of one type (by name) held at once (`gres/gpu:v100=2`): a job counts the GPUs
    /// of that type the plan gives it.
    TypedGpus(String, u32),
    /// GPUs of one type one job may be given (`MaxTRES=gres/gpu:v100=2`).
    TypedGpusPerJob(String, u32),
    /// CPUs held at once (`cpu=N`).
    Cpus(u64),
    /// CPUs one job may ask for.
    CpusPerJob(u64),
    /// Memory held at once, MB (`mem=M`).
    MemMb(u64),
    /// Memory one job may ask for, MB.
    MemMbPerJob(u64),
    /// Running jobs at once (`MaxJobs*`, `GrpJobs`).
    Jobs(u32),
    /// A job's time limit (`MaxWall`, a partition's `MaxTime`), seconds.
    WallSeconds(f64),
    /// GPU-minutes of the running jobs' time left (`GrpTRESRunMins=gres/gpu=N`): a job
    /// starting adds its GPUs times its time limit in minutes, as Slurm checks it.
    GpuRunMinutes(u64),
    /// Accumulated GPU-minutes (`GrpTRESMins=gres/gpu=N`): `used` is the usage Slurm has
    /// recorded (`sshare`'s `GrpTRESRaw`); once it reaches `limit` no job with GPUs starts
    /// (Slurm without `AccountingStorageEnforce=safe`).
    GpuMinutes {
        /// The limit, GPU-minutes.
        limit: u64,
        /// Used so far, GPU-minutes.
        used: u64,
    },
}

/// A job with no time limit counts this many minutes against `GrpTRESRunMins` (more than
/// any limit).
const UNLIMITED_MINUTES: u64 = u64::MAX / 1024;

/// Whole minutes of `s` seconds, rounded up; unlimited when `None`.
fn minutes(s: Option<f64>) -> u64 {
    match s {
        Some(s) if s.is_finite() => (s.max(0.0) / 60.0).ceil() as u64,
        _ => UNLIMITED_MINUTES,
    }
}

impl Bound {
    /// What `job` adds to the scope's usage under this bound (0 for per-job bounds).
    pub fn amount(&self, job: &SiteJob) -> u64 {
        match self {
            Bound::Gpus(_) => job.gpus.into(),
            Bound::TypedGpus(t, _) => job.gpus_of(t).into(),
            Bound::Cpus(_) => job.cpus.into(),
            Bound::MemMb(_) => job.mem_mb,
            Bound::Jobs(_) => 1,
            Bound::GpuRunMinutes(_) => {
                u64::from(job.gpus).saturating_mul(minutes(job.time_left_s.or(job.time_limit_s)))
            }
            Bound::GpusPerJob(_)
            | Bound::TypedGpusPerJob(..)
            | Bound::CpusPerJob(_)
            | Bound::MemMbPerJob(_)
            | Bound::WallSeconds(_)
            | Bound::GpuMinutes { .. } => 0,
        }
    }

    /// The limit of a bound on usage held at once, if this is one.
    fn cap(&self) -> Option<u64> {
        match self {
            Bound::Gpus(n) | Bound::TypedGpus(_, n) | Bound::Jobs(n) => Some((*n).into()),
            Bound::Cpus(n) | Bound::MemMb(n) | Bound::GpuRunMinutes(n) => Some(*n),
            _ => None,
        }
    }

    /// True when `job` alone goes over this bound, whatever else runs.
    pub fn forbids(&self, job: &SiteJob) -> bool {
        match self {
            Bound::GpusPerJob(n) => job.gpus > *n,
            Bound::TypedGpusPerJob(t, n) => job.gpus_of(t) > *n,
            Bound::CpusPerJob(n) => u64::from(job.cpus) > *n,
            Bound::MemMbPerJob(n) => job.mem_mb > *n,
            Bound::WallSeconds(s) => job.time_limit_s.is_none_or(|t| t > *s),
            Bound::GpuMinutes { limit, used } => job.gpus > 0 && used >= limit,
            // Untyped GPUs: a job asking for more than the limit never runs; a typed
            // limit is left to the placement (the job may run on another type).
            Bound::Gpus(n) => job.gpus > *n,
            Bound::Jobs(n) => *n == 0,
            Bound::Cpus(n) => u64::from(job.cpus) > *n,
            Bound::MemMb(n) => job.mem_mb > *n,
            Bound::GpuRunMinutes(n) => {
                u64::from(job.gpus).saturating_mul(minutes(job.time_limit_s)) > *n
            }
            Bound::TypedGpus(..) => false,
        }
    }

    /// True when adding `job` to a scope that uses `used` goes over this bound. As in
    /// Slurm, a job that asks for none of what a bound counts is not held by it.
    pub fn over(&self, used: u64, job: &SiteJob) -> bool {
        match self.cap() {
            Some(n) => {
                let a = self.amount(job);
                a > 0 && used.saturating_add(a) > n
            }
            None => self.forbids(job),
        }
    }

    /// The GPU type a bound on one type names.
    pub fn gpu_type(&self) -> Option<&str> {
        match self {
            Bound::TypedGpus(t, _) | Bound::TypedGpusPerJob(t, _) => Some(t),
            _ => None,
        }
    }
}
