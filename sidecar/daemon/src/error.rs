//! Why a round fails.

use hadar_slurm::SlurmError;
use hadar_store::StoreError;

/// Why a round failed (the next round starts again from Slurm's state).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Slurm could not be read.
    #[error("reading Slurm: {0}")]
    Slurm(#[from] SlurmError),
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another daemon holds the leader's lease: this one stands by and does nothing.
    #[error("standing by: {holder} leads until {expires_unix:.0}")]
    Standby {
        /// The leader.
        holder: String,
        /// Its lease's expiry, Unix seconds.
        expires_unix: f64,
    },
    /// The policy produced a plan that breaks capacity or gang rules (a bug; nothing enforced).
    #[error("the plan is invalid, nothing was enforced: {0}")]
    InvalidPlan(String),
}
