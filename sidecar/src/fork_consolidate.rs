//! `hadar fork-consolidate ROUND_JSON`: a forked job's round consolidated inside its copy
//! job, on a compute node, as the job's user (see `hadar_daemon::fork_consolidate`). Prints
//! the round's report, one word, for the copy job's `Comment`; exits 0 whenever it printed
//! one (a failed averaging is in the report), 2 when the plan cannot be read.

use crate::Failure;
use crate::cli::ForkConsolidateArgs;
use anyhow::Context;
use hadar_core::tracker::consolidation_weights;
use hadar_daemon::fork::outer_args;
use hadar_daemon::fork_consolidate::{RoundPlan, append_tracker_line, collect, report};
use std::path::Path;

/// Runs the command.
pub fn run(a: ForkConsolidateArgs) -> Result<(), Failure> {
    let text = std::fs::read_to_string(&a.plan)
        .with_context(|| format!("cannot read the round plan {}", a.plan.display()))
        .map_err(Failure::input)?;
    let plan: RoundPlan = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a round plan", a.plan.display()))
        .map_err(Failure::input)?;
    let mut round = plan.round;
    for e in collect(&mut round) {
        eprintln!("hadar fork-consolidate: round {}: {e}", round.round);
    }
    let good: Vec<usize> = (0..round.copies.len())
        .filter(|k| round.copies[*k].ok == Some(true))
        .collect();
    let steps: Vec<f64> = good
        .iter()
        .map(|k| round.copies[*k].steps.unwrap_or(0.0))
        .collect();
    for (k, w) in good.iter().zip(consolidation_weights(&steps)) {
        round.copies[*k].weight = Some(w);
    }
    let averaged = !good.is_empty() && average(&round, &good);
    if averaged {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        round.ended_s = Some(now - plan.epoch);
        let done: f64 = steps.iter().sum();
        let remaining = (plan.total_steps - plan.steps_done - done).max(0.0);
        let tracker = Path::new(&round.consolidated).with_file_name("tracker.jsonl");
        if let Err(e) = append_tracker_line(&tracker, &round, remaining) {
            eprintln!(
                "hadar fork-consolidate: cannot append to {}: {e}",
                tracker.display()
            );
        }
    }
    println!("{}", report(&round, averaged).encode());
    Ok(())
}

/// Runs `hadar average --out OUT [OUTER STEP] INPUTS...` (this binary), its messages going
/// to the copy job's output. The outer step's files were fixed when the round was planned.
fn average(round: &hadar_store::ForkRound, good: &[usize]) -> bool {
    let inputs: Vec<String> = good
        .iter()
        .map(|k| {
            let c = &round.copies[*k];
            format!("{}:{}", c.checkpoint, c.steps.unwrap_or(0.0) as u64)
        })
        .collect();
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("hadar fork-consolidate: cannot find the hadar binary: {e}");
            return false;
        }
    };
    let status = std::process::Command::new(&exe)
        .arg("average")
        .arg("--out")
        .arg(&round.consolidated)
        .args(outer_args(round))
        .args(&inputs)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => true,
        Ok(s) => {
            eprintln!("hadar fork-consolidate: hadar average failed ({s})");
            false
        }
        Err(e) => {
            eprintln!("hadar fork-consolidate: cannot run {}: {e}", exe.display());
            false
        }
    }
}
