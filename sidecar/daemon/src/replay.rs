//! Replay: each round's snapshot is kept with what its decision came out as, so that the
//! decision can be computed again later ([`replay`], `hadar replay`) and compared.
//!
//! A kept round holds the [`RoundSnapshot`] (less what no decision reads, see
//! [`SnapshotRef`]), the comparable part of the [`RoundDecision`]
//! ([`Outcome`]: the enforceable placements, the actions and each job's decision as
//! [`decide`] made them) and, stored once per distinct content under a digest, the
//! [`RoundInputs`]: the configuration as the daemon used it (parsed, defaults filled in) and
//! the throughput table. Those are kept in full rather than as a digest alone so that a round
//! replays after `hadar.toml` was edited or hadar upgraded; they change rarely, so the
//! digest keeps them from costing space each round.
//!
//! The forked jobs' rounds are part of the decision ([`crate::fork::plan`]) and compared
//! like the plain jobs' actions; the snapshot holds each forked job's tracker for them.
//! What actions and copy jobs came to (their outcomes) is not compared: that is Slurm's.
//!
//! Kept rounds carry a format number ([`FORMAT`]). Rounds kept before format 2 have no
//! forked jobs' trackers: those without forked jobs replay as before; one with forked jobs
//! is refused as recorded with an older format ([`ReplayError::OlderFormat`]).

use crate::actions::Action;
use crate::config::DaemonConfig;
use crate::daemon::{Daemon, DaemonError, SlurmApi};
use crate::decide::{RoundDecision, decide};
use crate::fork::{ForkStart, ForkView};
use crate::snapshot::RoundSnapshot;
use hadar_formats::ThroughputTable;
use hadar_store::{Decision, JobRow, NodeGpus, Phase, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

/// The format of kept rounds this build writes: 2 added the forked jobs' trackers to the
/// snapshot and their rounds to the outcome (rounds kept without a format are format 1).
pub const FORMAT: u32 = 2;

/// What a round was decided with besides its snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundInputs {
    /// The configuration as the daemon used it.
    pub config: DaemonConfig,
    /// The throughput table.
    pub table: ThroughputTable,
}

/// The part of a round's decision that replay compares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The enforceable placements, job to GPUs.
    pub planned: BTreeMap<u64, NodeGpus>,
    /// The actions that carry them out, in order.
    pub actions: Vec<Action>,
    /// The forked jobs' rounds to start (none in format 1).
    #[serde(default)]
    pub forks: Vec<ForkStart>,
    /// Each active job's decision.
    pub decisions: Vec<Decision>,
}

impl Outcome {
    /// The comparable part of `d`.
    pub fn of(d: &RoundDecision) -> Outcome {
        Outcome {
            planned: d.planned.clone(),
            actions: d.actions.clone(),
            forks: d.forks.clone(),
            decisions: d.decisions.clone(),
        }
    }
}

/// A kept round as written (borrowing the round's own values: nothing is copied).
#[derive(Serialize)]
struct KeptRef<'a> {
    format: u32,
    snapshot: SnapshotRef<'a>,
    outcome: OutcomeRef<'a>,
}

/// A [`RoundSnapshot`] as kept: without the finished jobs Slurm no longer lists (a round
/// keeps those for `keep_days`, and nothing [`decide`] reads depends on them), and with the
/// jobs as they were before the round only where they differ from after it.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    round: u64,
    now_unix: f64,
    now_s: f64,
    nodes: &'a [hadar_slurm::NodeInfo],
    slurm_jobs: &'a [hadar_slurm::SlurmJob],
    rows: BTreeMap<u64, &'a JobRow>,
    /// The jobs whose row before the round differs from `rows`.
    before_changed: BTreeMap<u64, &'a JobRow>,
    /// The jobs of `rows` the store did not have before the round.
    before_absent: Vec<u64>,
    specs: &'a BTreeMap<u64, crate::spec::JobSpec>,
    owned: &'a std::collections::BTreeSet<u64>,
    forks: &'a BTreeMap<u64, ForkView>,
    learned: &'a BTreeMap<u64, Vec<hadar_store::LearnedRate>>,
    site: &'a crate::site::Site,
    retypes: bool,
    slurm_release: &'a Option<String>,
}

impl<'a> SnapshotRef<'a> {
    fn of(s: &'a RoundSnapshot) -> SnapshotRef<'a> {
        let listed: std::collections::HashSet<u64> = s.slurm_jobs.iter().map(|j| j.id).collect();
        let wanted = |r: &JobRow| r.phase != Phase::Finished || listed.contains(&r.id);
        let rows: BTreeMap<u64, &JobRow> = s
            .rows
            .iter()
            .filter(|(_, r)| wanted(r))
            .map(|(id, r)| (*id, r))
            .collect();
        let before_changed = s
            .before
            .iter()
            .filter(|(id, b)| wanted(b) && rows.get(*id).is_none_or(|r| *r != *b))
            .map(|(id, b)| (*id, b))
            .collect();
        let before_absent = rows
            .keys()
            .filter(|id| !s.before.contains_key(*id))
            .copied()
            .collect();
        SnapshotRef {
            round: s.round,
            now_unix: s.now_unix,
            now_s: s.now_s,
            nodes: &s.nodes,
            slurm_jobs: &s.slurm_jobs,
            rows,
            before_changed,
            before_absent,
            specs: &s.specs,
            owned: &s.owned,
            forks: &s.forks,
            learned: &s.learned,
            site: &s.site,
            retypes: s.retypes,
            slurm_release: &s.slurm_release,
        }
    }
}

/// [`SnapshotRef`] as read back.
#[derive(Deserialize)]
struct SnapshotKept {
    round: u64,
    now_unix: f64,
    now_s: f64,
    nodes: Vec<hadar_slurm::NodeInfo>,
    slurm_jobs: Vec<hadar_slurm::SlurmJob>,
    rows: BTreeMap<u64, JobRow>,
    before_changed: BTreeMap<u64, JobRow>,
    before_absent: Vec<u64>,
    specs: BTreeMap<u64, crate::spec::JobSpec>,
    owned: std::collections::BTreeSet<u64>,
    #[serde(default)]
    forks: BTreeMap<u64, ForkView>,
    learned: BTreeMap<u64, Vec<hadar_store::LearnedRate>>,
    site: crate::site::Site,
    retypes: bool,
    slurm_release: Option<String>,
}

impl From<SnapshotKept> for RoundSnapshot {
    fn from(k: SnapshotKept) -> RoundSnapshot {
        let absent: std::collections::BTreeSet<u64> = k.before_absent.into_iter().collect();
        let mut before: BTreeMap<u64, JobRow> = k
            .rows
            .iter()
            .filter(|(id, _)| !absent.contains(*id))
            .map(|(id, r)| (*id, r.clone()))
            .collect();
        before.extend(k.before_changed);
        RoundSnapshot {
            round: k.round,
            now_unix: k.now_unix,
            now_s: k.now_s,
            nodes: k.nodes,
            slurm_jobs: k.slurm_jobs,
            rows: k.rows,
            before,
            specs: k.specs,
            owned: k.owned,
            forks: k.forks,
            learned: k.learned,
            site: k.site,
            retypes: k.retypes,
            slurm_release: k.slurm_release,
            chosen: Default::default(),
        }
    }
}

/// [`Outcome`] borrowed; serialized the same.
#[derive(Serialize)]
struct OutcomeRef<'a> {
    planned: &'a BTreeMap<u64, NodeGpus>,
    actions: &'a [Action],
    forks: &'a [ForkStart],
    decisions: &'a [Decision],
}

/// A kept round as read.
#[derive(Deserialize)]
struct Kept {
    #[serde(default = "format_one")]
    format: u32,
    snapshot: SnapshotKept,
    outcome: Outcome,
}

/// The format of rounds kept without one.
fn format_one() -> u32 {
    1
}

/// What keeping one round cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeptCost {
    /// Bytes of the snapshot and decision.
    pub bytes: usize,
    /// Bytes of the inputs (stored once per distinct content).
    pub input_bytes: usize,
    /// Milliseconds to encode and write it.
    pub ms: f64,
}

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
    /// Encoding the round to keep it failed.
    #[error("encoding round {round}: {reason}")]
    Encode {
        /// The round.
        round: u64,
        /// The encoder's message.
        reason: String,
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

/// A stable 64-bit digest (FNV-1a) of `text`, in hex: it names a kept round's inputs. Not a
/// security measure; equal texts must give equal names across builds, which std's hasher
/// does not promise.
fn digest(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Keeps round `snap.round`: its snapshot and decision, and the inputs it was decided with.
pub fn keep(
    store: &mut Store,
    snap: &RoundSnapshot,
    decision: &RoundDecision,
    config: &DaemonConfig,
    table: &ThroughputTable,
) -> Result<KeptCost, ReplayError> {
    let started = Instant::now();
    let encode = |e: serde_json::Error| ReplayError::Encode {
        round: snap.round,
        reason: e.to_string(),
    };
    let inputs = serde_json::to_string(&InputsRef { config, table }).map_err(encode)?;
    let data = serde_json::to_string(&KeptRef {
        format: FORMAT,
        snapshot: SnapshotRef::of(snap),
        outcome: OutcomeRef {
            planned: &decision.planned,
            actions: &decision.actions,
            forks: &decision.forks,
            decisions: &decision.decisions,
        },
    })
    .map_err(encode)?;
    store.write(|w| {
        w.put_round_snapshot(snap.round, snap.now_s, &digest(&inputs), &inputs, &data)
    })?;
    Ok(KeptCost {
        bytes: data.len(),
        input_bytes: inputs.len(),
        ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// [`RoundInputs`] borrowed; serialized the same.
#[derive(Serialize)]
struct InputsRef<'a> {
    config: &'a DaemonConfig,
    table: &'a ThroughputTable,
}

impl<S: SlurmApi> Daemon<S> {
    /// Keeps this round for `hadar replay` ([`keep`]). A failure costs only the replay of
    /// this round: it is logged and the round goes on.
    pub(crate) fn keep_round(&mut self, snap: &RoundSnapshot, decision: &RoundDecision) {
        match keep(&mut self.store, snap, decision, &self.config, &self.table) {
            Ok(c) => tracing::debug!(
                round = snap.round,
                bytes = c.bytes,
                ms = c.ms,
                "kept the round's snapshot"
            ),
            Err(e) => tracing::warn!("not kept for replay: {e}"),
        }
    }
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
    if kept.format < 2 && !kept.snapshot.owned.is_empty() {
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

    #[test]
    fn digests_are_stable_and_tell_texts_apart() {
        assert_eq!(digest(""), "cbf29ce484222325");
        assert_eq!(digest("a"), "af63dc4c8601ec8c");
        assert_ne!(digest("{\"x\":1}"), digest("{\"x\":2}"));
    }
}
