//! What watches the daemon's rounds from outside the round: one small interface, so the
//! operational parts (metrics, systemd's notifications, in `hadar-ops`) plug into the loop
//! without the loop knowing them.

use crate::error::DaemonError;
use crate::summary::RoundReport;
use hadar_store::Store;

/// How a round ended.
pub enum RoundEnd<'a> {
    /// It completed at `now_unix`; `store` has it recorded.
    Done {
        report: &'a RoundReport,
        store: &'a Store,
        now_unix: f64,
    },
    /// Another daemon leads: this one stands by, up and doing its job.
    Standby,
    /// It failed; the next round starts again from Slurm's state.
    Failed(&'a DaemonError),
}

/// Told of the daemon's life and of each round's end. Every method does nothing by
/// default; none can fail the round (an observer logs its own errors).
pub trait RoundObserver: Send {
    /// A round ended.
    fn round_end(&mut self, end: &RoundEnd<'_>) {
        let _ = end;
    }

    /// The daemon is alive (called between rounds, several times a second).
    fn tick(&mut self) {}

    /// The daemon is stopping.
    fn stopping(&mut self) {}
}
