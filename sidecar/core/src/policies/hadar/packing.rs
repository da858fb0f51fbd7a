//! Gang packing: GPUs left idle because every waiting gang is larger than what is free.
//!
//! On one-GPU nodes a 4-worker gang needs four nodes at once. After the priced pass and
//! work conservation, GPUs may idle (say 3 free) while only 4-worker jobs wait, and the
//! round loses that capacity, which the fluid bound (and Gavel, by time-sharing) do not.
//! Packing frees room for one waiting gang by making smaller admitted jobs with slack
//! yield this round, longest remaining first, when that raises the GPUs in use: the
//! yielding jobs give up fewer GPUs than the gang takes. Urgent jobs never yield, and
//! with [`Packing::Shorter`] only jobs with more remaining time than the gang yield to
//! it, so the order stays shortest first. A yielding job waits one round (reason
//! [`WaitReason::TimeShare`]), as in Gavel's time-sharing.
//!
//! A yield costs the job a restart next round. Packing runs only when a restart costs
//! under half a round (the simulator's 6-minute rounds with a 30 s restart), never on the
//! daemon's short rounds where a restart costs about a round. Pure: no clock, no IO.

use super::dual::{DualJob, DualOutcome, Offer, best_offer};
use super::{Prepared, dual_job};
use crate::job::JobId;
use crate::market::PriceBook;
use crate::plan::{Assignment, WaitReason, Waiting};
use crate::policy::RoundInput;
use serde::{Deserialize, Serialize};

/// Whether, and to whom, smaller admitted jobs yield so that a waiting gang fits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Packing {
    /// No packing: idle GPUs stay idle when no waiting job fits.
    Off,
    /// Jobs yield only to a gang with less remaining time than theirs.
    Shorter,
    /// Jobs with slack yield to any waiting gang (the default: measured in
    /// docs/results-gavel.md).
    #[default]
    Any,
}

impl Packing {
    /// The CLI and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Packing::Off => "off",
            Packing::Shorter => "shorter",
            Packing::Any => "any",
        }
    }
}

impl std::str::FromStr for Packing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(Packing::Off),
            "shorter" => Ok(Packing::Shorter),
            "any" => Ok(Packing::Any),
            other => Err(format!(
                "unknown packing `{other}`; known: off, shorter, any"
            )),
        }
    }
}

/// The round's plan so far: assignments, the prepared job of each, and the waiting list.
pub(super) struct Admitted<'p> {
    pub assignments: &'p mut Vec<Assignment>,
    pub owners: &'p mut Vec<usize>,
    pub waiting: &'p mut Vec<Waiting>,
}

/// Makes room for waiting gangs while that raises the GPUs in use; returns how many
/// gangs it placed. `admit` records a placed job (as the primal-dual's admit does).
pub(super) fn pack(
    mode: Packing,
    input: &RoundInput<'_>,
    ready: &[Prepared<'_>],
    book: &mut PriceBook,
    plan: Admitted<'_>,
    mut admit: impl FnMut(&mut PriceBook, &mut Vec<Assignment>, usize, Offer),
) -> usize {
    if mode == Packing::Off || input.max_restart_s() * 2.0 >= input.round_s {
        return 0;
    }
    let Admitted {
        assignments,
        owners,
        waiting,
    } = plan;
    let mut placed = 0;
    let mut is_placed = vec![false; ready.len()];
    for &k in owners.iter() {
        is_placed[k] = true;
    }
    for k in 0..ready.len() {
        let free = book.free_total();
        if free == 0 {
            break;
        }
        let p = &ready[k];
        if is_placed[k] || p.workers <= free {
            continue;
        }
        let Some((victims, offer)) = make_room(mode, ready, book, assignments, owners, k) else {
            continue;
        };
        // Remove the yielding jobs, highest index first so the others keep theirs.
        let mut victims = victims;
        victims.sort_unstable_by(|a, b| b.cmp(a));
        let mut yielded = Vec::with_capacity(victims.len());
        for i in victims {
            assignments.remove(i);
            yielded.push(owners.remove(i));
        }
        let id: JobId = input.jobs[p.index].id();
        waiting.retain(|w| w.job != id);
        is_placed[k] = true;
        owners.push(k);
        admit(book, assignments, k, offer);
        placed += 1;
        // A yielding job that still fits in what the gang left runs after all.
        for v in yielded {
            if let DualOutcome::Offer(o) = best_offer(book, &dual_job(&ready[v])) {
                owners.push(v);
                admit(book, assignments, v, o);
            } else {
                is_placed[v] = false;
                waiting.push(Waiting {
                    job: input.jobs[ready[v].index].id(),
                    reason: WaitReason::TimeShare,
                });
            }
        }
    }
    placed
}

/// Releases admitted jobs smaller than job `k`, longest remaining first, until `k` fits;
/// keeps the change only when they hold fewer GPUs than `k` takes. Returns the
/// assignments to remove and `k`'s placement.
fn make_room(
    mode: Packing,
    ready: &[Prepared<'_>],
    book: &mut PriceBook,
    assignments: &[Assignment],
    owners: &[usize],
    k: usize,
) -> Option<(Vec<usize>, Offer)> {
    let p = &ready[k];
    let mine = p.utility.remaining_best_s();
    let mut candidates: Vec<usize> = (0..assignments.len())
        .filter(|&i| {
            let q = &ready[owners[i]];
            !q.urgency.is_urgent()
                && q.workers < p.workers
                && (mode == Packing::Any || q.utility.remaining_best_s() > mine)
        })
        .collect();
    let left = |i: usize| ready[owners[i]].utility.remaining_best_s();
    candidates.sort_by(|&a, &b| left(b).total_cmp(&left(a)));
    let mut taken = Vec::new();
    let mut freed = 0;
    for i in candidates {
        if freed + ready[owners[i]].workers >= p.workers {
            // Releasing this one would give up as many GPUs as the gang takes.
            continue;
        }
        book.release(&assignments[i].placement);
        taken.push(i);
        freed += ready[owners[i]].workers;
        if book.free_total() < p.workers {
            continue;
        }
        let efficient = DualJob {
            rates: p.priced_rates.as_deref().unwrap_or(&p.rates),
            ..dual_job(p)
        };
        if let DualOutcome::Offer(o) = best_offer(book, &efficient) {
            return Some((taken, o));
        }
    }
    for &i in &taken {
        book.charge(&assignments[i].placement);
    }
    None
}
