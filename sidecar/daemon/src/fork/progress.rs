//! What the user sees of a forked job: its progress comment, its copies' GPUs, and its
//! decision in words for `hadar explain`.

use super::*;
/// The GPUs of a round's copies, in Slurm's names.
pub fn copies_gpus(copies: &[ForkCopy]) -> NodeGpus {
    copies
        .iter()
        .map(|c| (c.node.clone(), vec![(c.gpu_type.clone(), c.gpus)]))
        .collect()
}

/// The logical job's progress comment: one word with no spaces, so that `scontrol show job`
/// prints it unambiguously and a shell reads it with one pattern.
pub fn comment(fj: &ForkJob, open: Option<&ForkRound>) -> String {
    let (round, copies) = match open {
        Some(r) => (r.round, r.copies.len()),
        None => (fj.next_round, 0),
    };
    format!(
        "{COMMENT_TAG};state={};round={round};copies={copies};steps={}/{};pct={:.0}",
        fj.state.as_str(),
        fj.steps_done as u64,
        fj.total_steps as u64,
        fj.percent().floor()
    )
}

/// A forked job's progress in words.
fn progress_words(fj: &ForkJob) -> String {
    format!(
        "{} of {} steps ({:.0}%)",
        fj.steps_done as u64,
        fj.total_steps as u64,
        fj.percent().floor()
    )
}

/// The words for a job whose round `round` runs `copies` copies on `gpus`.
pub(crate) fn running_words(fj: &ForkJob, round: u64, copies: usize, gpus: &NodeGpus) -> String {
    format!(
        "runs forked (HadarE): round {round}, {copies} copies on {}; {}",
        crate::explain::placement_words(gpus),
        progress_words(fj)
    )
}

/// A forked job's decision from its tracker and open round.
pub(crate) fn describe(fj: &ForkJob, open: Option<&ForkRound>) -> ForkDecision {
    let progress = progress_words(fj);
    match (fj.state, open) {
        (ForkState::Active, Some(r)) => {
            let gpus = copies_gpus(&r.copies);
            ForkDecision {
                text: running_words(fj, r.round, r.copies.len(), &gpus),
                placement: Some(gpus),
            }
        }
        (ForkState::Active, None) => ForkDecision {
            placement: None,
            text: format!("forked (HadarE), between rounds; {progress}"),
        },
        (state, _) => ForkDecision {
            placement: None,
            text: format!(
                "forked (HadarE), {}; {progress}{}",
                state.as_str(),
                fj.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        },
    }
}
