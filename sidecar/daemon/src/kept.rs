//! Each round's snapshot kept for `hadar replay` (in `hadar-ops`): what the round loop
//! writes after every round, in the format replay reads back. A kept round holds the
//! [`RoundSnapshot`] (less what no decision reads, see [`SnapshotRef`]), the comparable
//! part of the [`RoundDecision`] ([`Outcome`]: the enforceable placements, the actions and
//! each job's decision as [`crate::decide::decide`] made them) and, stored once per
//! distinct content under a digest, the [`RoundInputs`]: the configuration as the daemon
//! used it (parsed, defaults filled in) and the throughput table. Those are kept in full
//! rather than as a digest alone so that a round replays after `hadar.toml` was edited or
//! hadar upgraded; they change rarely, so the digest keeps them from costing space each
//! round.
//!
//! Kept rounds carry a format number ([`FORMAT`]). Rounds kept before format 2 have no
//! forked jobs' trackers.

use crate::actions::Action;
use crate::config::DaemonConfig;
use crate::daemon::{Daemon, SlurmApi};
use crate::decide::RoundDecision;
use crate::fork::{ForkStart, ForkView};
use crate::snapshot::RoundSnapshot;
use hadar_formats::ThroughputTable;
use hadar_store::{Decision, JobRow, NodeGpus, Phase, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
pub struct SnapshotKept {
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

impl SnapshotKept {
    /// Whether forked jobs were in the round (their copies owned by the daemon).
    pub fn has_forked_jobs(&self) -> bool {
        !self.owned.is_empty()
    }
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
pub struct Kept {
    /// Its format ([`FORMAT`] now).
    #[serde(default = "format_one")]
    pub format: u32,
    /// Its snapshot, which becomes a [`RoundSnapshot`] again.
    pub snapshot: SnapshotKept,
    /// Its decision's comparable part.
    pub outcome: Outcome,
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

/// Why a round could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// The state database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Encoding the round failed.
    #[error("encoding round {round}: {reason}")]
    Encode {
        /// The round.
        round: u64,
        /// The encoder's message.
        reason: String,
    },
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
) -> Result<KeptCost, KeepError> {
    let started = Instant::now();
    let encode = |e: serde_json::Error| KeepError::Encode {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_stable_and_tell_texts_apart() {
        assert_eq!(digest(""), "cbf29ce484222325");
        assert_eq!(digest("a"), "af63dc4c8601ec8c");
        assert_ne!(digest("{\"x\":1}"), digest("{\"x\":2}"));
    }
}
