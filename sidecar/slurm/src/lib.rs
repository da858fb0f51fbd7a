//! The Slurm adapter: the only code in hadar that runs Slurm's commands.
//!
//! Every command runs as a child process with an argument vector (never through a shell)
//! and a hard timeout; user-controlled text only ever travels as one separate argument.
//! Nodes and jobs are read from Slurm's own JSON where the release has it (24.11 and later)
//! and from `scontrol`'s multi-line text on older ones (22.05), into the same typed records,
//! so the daemon sees nodes, jobs and allocations, not text. Every command runs with `TZ=UTC`
//! so that times in text answers are read exactly, whatever zone the daemon runs in.
//!
//! * [`command`]: running a program with a timeout.
//! * [`hostlist`]: Slurm's compressed host lists (`n[1-3,7]`).
//! * [`record`]: splitting `scontrol show` output into records of `Key=value` fields.
//! * [`node`]: nodes, their GPUs per type and their state.
//! * [`job`]: jobs, their state, comments and per-node GPU allocations.
//! * [`job_cache`]: reading only the jobs that changed since the last full read.
//! * [`json`]: nodes and jobs from Slurm's JSON (data_parser v0.0.40 to v0.0.45).
//! * [`reservation`]: advance reservations: their nodes, times, users and accounts.
//! * [`release`]: which release answers, and so which form is read.
//! * [`client`]: the [`Slurm`] handle with the reads and the enforcement actions.

pub mod client;
pub mod command;
pub mod hostlist;
pub mod job;
pub mod job_cache;
pub mod json;
pub mod license;
pub mod node;
pub mod release;
pub mod reservation;
pub mod site;
pub mod text_records;

pub use client::{GpuSpec, Slurm, SlurmConfig, SlurmIo};
pub use command::CommandError;
pub use job::{JobStatus, NodeAlloc, SlurmJob};
pub use node::{NodeFree, NodeInfo, NodeState};
pub use release::{ReadForm, SlurmRelease};

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
