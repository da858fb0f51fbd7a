//! `hadar replay`: past rounds decided again from their kept snapshots
//! ([`hadar_ops::replay`]), one line per round.

use crate::Failure;
use crate::cli::ReplayArgs;
use anyhow::anyhow;
use hadar_daemon::DaemonConfig;
use hadar_ops::replay::{self, ReplayError, Replayed};
use hadar_store::Store;

/// Runs `hadar replay`: exit 0 when every round asked for is identical, 1 when one differs
/// (or cannot be decided again), 2 when a round or the database is not there.
pub fn run(a: ReplayArgs) -> Result<(), Failure> {
    if !a.state.exists() {
        return Err(Failure::input(anyhow!(
            "no state database at {}",
            a.state.display()
        )));
    }
    let store = Store::open_read_only(&a.state).map_err(Failure::input)?;
    let config = a
        .config
        .as_deref()
        .map(DaemonConfig::load)
        .transpose()
        .map_err(Failure::input)?;
    let rounds = match a.round {
        Some(n) => vec![n],
        None => store.kept_rounds().map_err(Failure::input)?,
    };
    if rounds.is_empty() {
        return Err(Failure::input(anyhow!(
            "{} keeps no rounds (none has run, or they were recorded by a hadar without replay)",
            a.state.display()
        )));
    }
    let (mut differ, mut older) = (0, 0);
    for n in &rounds {
        match replay::replay(&store, *n, config.as_ref()) {
            Ok(Replayed::Identical) => println!("round {n}: identical"),
            Ok(Replayed::Differs(d)) => {
                differ += 1;
                println!("round {n}: differs: {d}");
            }
            // Among all kept rounds, those an older hadar kept are named and skipped: they
            // are not a difference.
            Err(e @ ReplayError::OlderFormat { .. }) if a.all => {
                older += 1;
                println!("round {n}: not replayed: {e}");
            }
            Err(
                e @ (ReplayError::NotKept { .. }
                | ReplayError::Store(_)
                | ReplayError::OlderFormat { .. }),
            ) => {
                return Err(Failure::input(e));
            }
            Err(e) => {
                differ += 1;
                println!("round {n}: not replayed: {e}");
            }
        }
    }
    if a.all {
        println!(
            "replayed {} rounds ({} to {}): {}",
            rounds.len(),
            rounds[0],
            rounds[rounds.len() - 1],
            match (differ, older) {
                (0, 0) => "all identical".to_string(),
                (0, k) => format!("{k} recorded with an older format, the others identical"),
                (d, 0) => format!("{d} not identical"),
                (d, k) => format!("{d} not identical, {k} recorded with an older format"),
            }
        );
    }
    if differ > 0 {
        return Err(Failure::runtime(anyhow!(
            "{differ} of {} rounds did not replay identically",
            rounds.len()
        )));
    }
    Ok(())
}
