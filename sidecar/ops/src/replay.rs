//! Replay: each round's snapshot is kept with what its decision came out as, so that the
//! decision can be computed again later ([`replay`], `hadar replay`) and compared.
//!
//! What a kept round holds and how the loop keeps it is [`hadar_daemon::kept`].
//!
//! The forked jobs' rounds are part of the decision ([`hadar_daemon::fork::plan`]) and compared
//! like the plain jobs' actions; the snapshot holds each forked job's tracker for them.
//! What actions and copy jobs came to (their outcomes) is not compared: that is Slurm's.
//!
//! Kept rounds carry a format number ([`FORMAT`]). Rounds kept before format 2 have no
//! forked jobs' trackers: those without forked jobs replay as before; one with forked jobs
//! is refused as recorded with an older format ([`ReplayError::OlderFormat`]).

use hadar_daemon::actions::Action;
use hadar_daemon::config::DaemonConfig;
use hadar_daemon::daemon::DaemonError;
use hadar_daemon::decide::decide;
use hadar_daemon::kept::{FORMAT, Kept, Outcome, RoundInputs};
use hadar_daemon::snapshot::RoundSnapshot;
use hadar_store::{Decision, Store, StoreError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Why a round could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The round is not kept.
    #[error("round {round}: {why}")]
    NotKept {
        /// The round asked for.
        round: u64,
        /// Why it is not there.
        why: String,
    },
    /// A kept round could not be read back.
    #[error("round {round}: the kept {what} cannot be read: {reason}")]
    Corrupt {
        /// The round.
        round: u64,
        /// `snapshot` or `inputs`.
        what: &'static str,
        /// The parser's message.
        reason: String,
    },
    /// The round was kept by an older hadar, without what deciding it again needs.
    #[error(
        "round {round}: recorded with an older format ({found}, this hadar reads {FORMAT}): it has forked jobs and keeps no fork trackers, so its decision cannot be recomputed"
    )]
    OlderFormat {
        /// The round.
        round: u64,
        /// Its format.
        found: u32,
    },
    /// Deciding again failed.
    #[error("round {round}: deciding again failed: {source}")]
    Decide {
        /// The round.
        round: u64,
        /// The error.
        source: DaemonError,
    },
}

/// The first place where a recomputed decision differs from the recorded one.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// The job, when the difference is about one.
    pub job: Option<u64>,
    /// What differs (`planned`, `action 2`, `decision.text`, ...).
    pub field: String,
    /// The recorded value, as JSON.
    pub recorded: String,
    /// The recomputed value, as JSON.
    pub recomputed: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(j) = self.job {
            write!(f, "job {j}: ")?;
        }
        write!(
            f,
            "{}: recorded {}, recomputed {}",
            self.field,
            short(&self.recorded),
            short(&self.recomputed)
        )
    }
}

/// A value shortened for one line.
fn short(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// What replaying a round found.
#[derive(Clone, Debug, PartialEq)]
pub enum Replayed {
    /// The same decision.
    Identical,
    /// The first difference.
    Differs(Difference),
}

/// Round `round`'s snapshot, inputs and recorded outcome.
fn load(store: &Store, round: u64) -> Result<(Kept, RoundInputs), ReplayError> {
    let Some(k) = store.kept_round(round)? else {
        return Err(ReplayError::NotKept {
            round,
            why: not_kept_why(store, round)?,
        });
    };
    let corrupt = |what, e: serde_json::Error| ReplayError::Corrupt {
        round,
        what,
        reason: e.to_string(),
    };
    let kept: Kept = serde_json::from_str(&k.data).map_err(|e| corrupt("snapshot", e))?;
    let inputs: RoundInputs = serde_json::from_str(&k.inputs).map_err(|e| corrupt("inputs", e))?;
    Ok((kept, inputs))
}

/// Why round `round` is not kept, in words.
fn not_kept_why(store: &Store, round: u64) -> Result<String, StoreError> {
    let kept = store.kept_rounds()?;
    let range = match (kept.first(), kept.last()) {
        (Some(a), Some(b)) => format!("kept rounds are {a} to {b}"),
        _ => "no round is kept".to_string(),
    };
    Ok(match store.recorded_rounds()? {
        None => "the state database has no rounds".to_string(),
        Some((_, last)) if round > last => format!("not run yet; the last round is {last}"),
        _ if kept.first().is_some_and(|a| round < *a) => {
            format!("pruned ({range}; [sidecar] keep_rounds and keep_days bound them)")
        }
        _ => format!(
            "no snapshot was kept ({range}; recorded by a hadar without replay, or its snapshot could not be written)"
        ),
    })
}

/// Decides round `round` again from its kept snapshot, with its kept configuration or
/// `config`, and compares the outcome with the recorded one. The round policy is built
/// afresh: Hadar keeps nothing between rounds, but a policy that does (Gavel's, Tiresias')
/// replays without the books the daemon had, so its rounds may differ.
pub fn replay(
    store: &Store,
    round: u64,
    config: Option<&DaemonConfig>,
) -> Result<Replayed, ReplayError> {
    let (kept, inputs) = load(store, round)?;
    if kept.format < 2 && kept.snapshot.has_forked_jobs() {
        return Err(ReplayError::OlderFormat {
            round,
            found: kept.format,
        });
    }
    let config = config.unwrap_or(&inputs.config);
    let snapshot = RoundSnapshot::from(kept.snapshot);
    // A kept table is kept without its GPU catalog: the configuration gives it again.
    let table = inputs.table.with_catalog(config.gpu_catalog());
    let d = decide(&snapshot, config, &table, config.round_policy().as_mut())
        .map_err(|source| ReplayError::Decide { round, source })?;
    let again = Outcome::of(&d);
    Ok(match first_difference(&kept.outcome, &again) {
        None => Replayed::Identical,
        Some(diff) => Replayed::Differs(diff),
    })
}

fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// The first difference between two outcomes: placements by job, then the actions in
/// order, then the forked jobs' rounds in order, then each job's decision field by field.
pub fn first_difference(recorded: &Outcome, again: &Outcome) -> Option<Difference> {
    if recorded == again {
        return None;
    }
    let diff = |job, field: &str, a: serde_json::Value, b: serde_json::Value| Difference {
        job,
        field: field.to_string(),
        recorded: a.to_string(),
        recomputed: b.to_string(),
    };
    let jobs: std::collections::BTreeSet<u64> = recorded
        .planned
        .keys()
        .chain(again.planned.keys())
        .copied()
        .collect();
    for j in jobs {
        let (a, b) = (recorded.planned.get(&j), again.planned.get(&j));
        if a != b {
            return Some(diff(Some(j), "planned", json(&a), json(&b)));
        }
    }
    let n = recorded.actions.len().max(again.actions.len());
    for i in 0..n {
        let (a, b) = (recorded.actions.get(i), again.actions.get(i));
        if a != b {
            let job = a.or(b).map(Action::job);
            return Some(diff(job, &format!("action {}", i + 1), json(&a), json(&b)));
        }
    }
    let n = recorded.forks.len().max(again.forks.len());
    for i in 0..n {
        let (a, b) = (recorded.forks.get(i), again.forks.get(i));
        if a != b {
            let job = a.or(b).map(|f| f.job);
            return Some(diff(
                job,
                &format!("fork start {}", i + 1),
                json(&a),
                json(&b),
            ));
        }
    }
    let by_job = |ds: &[Decision]| -> BTreeMap<u64, Decision> {
        ds.iter().map(|d| (d.job, d.clone())).collect()
    };
    let (ra, rb) = (by_job(&recorded.decisions), by_job(&again.decisions));
    let jobs: std::collections::BTreeSet<u64> = ra.keys().chain(rb.keys()).copied().collect();
    for j in jobs {
        let (Some(a), Some(b)) = (ra.get(&j), rb.get(&j)) else {
            return Some(diff(
                Some(j),
                "decision",
                json(&ra.get(&j)),
                json(&rb.get(&j)),
            ));
        };
        if a == b {
            continue;
        }
        let (va, vb) = (json(a), json(b));
        for field in [
            "runs",
            "placement",
            "rate",
            "payoff",
            "wait_reason",
            "text",
            "round",
        ] {
            if va.get(field) != vb.get(field) {
                let none = serde_json::Value::Null;
                return Some(diff(
                    Some(j),
                    &format!("decision.{field}"),
                    va.get(field).unwrap_or(&none).clone(),
                    vb.get(field).unwrap_or(&none).clone(),
                ));
            }
        }
        // Equal as JSON but not as values: a NaN, which JSON writes as null.
        return Some(diff(Some(j), "decision", va, vb));
    }
    // Same placements, actions and decisions, in another order.
    Some(diff(
        None,
        "decisions' order",
        json(&recorded.decisions.iter().map(|d| d.job).collect::<Vec<_>>()),
        json(&again.decisions.iter().map(|d| d.job).collect::<Vec<_>>()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        let mut d = Decision::new(7, 3);
        d.runs = true;
        d.rate = Some(0.1 + 0.2);
        d.text = "runs".into();
        Outcome {
            planned: [(7, vec![("n1".to_string(), vec![("v100".to_string(), 2)])])].into(),
            actions: vec![Action::Hold { job: 9 }],
            forks: Vec::new(),
            decisions: vec![d, Decision::new(9, 3)],
        }
    }

    #[test]
    fn an_outcome_round_trips_through_json_exactly() {
        let o = outcome();
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(back, o);
        assert_eq!(first_difference(&o, &back), None);
    }

    #[test]
    fn the_first_difference_names_the_job_and_the_field() {
        let a = outcome();
        let mut b = outcome();
        b.decisions[0].rate = Some(0.3);
        let d = first_difference(&a, &b).unwrap();
        assert_eq!((d.job, d.field.as_str()), (Some(7), "decision.rate"));
        assert_eq!(
            d.to_string(),
            "job 7: decision.rate: recorded 0.30000000000000004, recomputed 0.3"
        );
        let mut c = outcome();
        c.actions.push(Action::Preempt { job: 4 });
        let d = first_difference(&a, &c).unwrap();
        assert_eq!(
            (d.job, d.field.as_str(), d.recorded.as_str()),
            (Some(4), "action 2", "null")
        );
        let mut e = outcome();
        e.planned.clear();
        let d = first_difference(&a, &e).unwrap();
        assert_eq!((d.job, d.field.as_str()), (Some(7), "planned"));
    }
}
