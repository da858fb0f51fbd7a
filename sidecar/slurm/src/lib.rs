//! The Slurm adapter: the only code in hadar that runs Slurm's commands.
//!
//! Every command runs as a child process with an argument vector (never through a shell)
//! and a hard timeout; user-controlled text only ever travels as one separate argument.
//! Output of `scontrol show node` / `scontrol -d show job` (Slurm 22.05, multi-line form) is
//! parsed into typed records here, so the daemon sees nodes, jobs and allocations, not text.
//!
//! * [`command`]: running a program with a timeout.
//! * [`hostlist`]: Slurm's compressed host lists (`n[1-3,7]`).
//! * [`record`]: splitting `scontrol show` output into records of `Key=value` fields.
//! * [`node`]: nodes, their GPUs per type and their state.
//! * [`job`]: jobs, their state, comments and per-node GPU allocations.
//! * [`client`]: the [`Slurm`] handle with the reads and the enforcement actions.

pub mod client;
pub mod command;
pub mod hostlist;
pub mod job;
pub mod node;
pub mod record;

pub use client::{GpuSpec, Slurm, SlurmConfig};
pub use command::CommandError;
pub use job::{JobStatus, NodeAlloc, SlurmJob};
pub use node::{NodeInfo, NodeState};

/// Everything that can go wrong talking to Slurm.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// A command could not run, timed out or failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A command's output could not be understood.
    #[error("cannot parse {what}: {detail}")]
    Parse {
        /// What was being read (`scontrol show node`, ...).
        what: &'static str,
        /// What was wrong, with the offending text.
        detail: String,
    },
}
