//! What one round plans from: a [`RoundSnapshot`] of Slurm and the store, taken once by
//! the round's reading ([`crate::read`]) and decided from without further IO
//! ([`crate::decide`]).

use crate::fork::ForkView;
use crate::site::Site;
use crate::spec::JobSpec;
use hadar_core::site::reservations::Chosen;
use hadar_slurm::{NodeInfo, SlurmJob};
use hadar_store::{JobRow, LearnedRate};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What one round plans from: Slurm's nodes and jobs and the store's jobs, rates and the
/// fork pass's ownership, as they stand after the round's upkeep.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RoundSnapshot {
    /// The round number.
    pub round: u64,
    /// The round's wall-clock time, Unix seconds.
    pub now_unix: f64,
    /// The round's time, seconds since the store's epoch.
    pub now_s: f64,
    /// Slurm's nodes.
    pub nodes: Vec<NodeInfo>,
    /// Slurm's jobs (without the records of arrays' pending elements).
    pub slurm_jobs: Vec<SlurmJob>,
    /// The managed jobs, reconciled with Slurm.
    pub rows: BTreeMap<u64, JobRow>,
    /// The managed jobs as the store had them before this round.
    pub before: BTreeMap<u64, JobRow>,
    /// The active jobs' specs, decoded from their records.
    pub specs: BTreeMap<u64, JobSpec>,
    /// The jobs the fork pass runs as copies (not planned by Hadar).
    pub owned: BTreeSet<u64>,
    /// The owned jobs' trackers, open rounds and last copies (the forked plan's input).
    #[serde(default)]
    pub forks: BTreeMap<u64, ForkView>,
    /// The active jobs' learned rates.
    pub learned: BTreeMap<u64, Vec<LearnedRate>>,
    /// The site's priority settings, accounts and limits.
    pub site: Site,
    /// Whether updating a pending job's GPU types replaces them (see
    /// [`crate::slurm_api::SlurmApi::retypes_pending_jobs`]).
    pub retypes: bool,
    /// The Slurm release answering, when known.
    pub slurm_release: Option<String>,
    /// [`RoundSnapshot::chosen_nodes`], derived once from `slurm_jobs` and `nodes` (the
    /// round's decision, its forked plan and its look-ahead all read it); not kept.
    #[serde(skip)]
    pub chosen: std::sync::OnceLock<HashMap<u64, Chosen>>,
}

impl RoundSnapshot {
    /// The nodes each job's user chose for it ([`crate::site::node_choice`]).
    pub fn chosen_nodes(&self) -> &HashMap<u64, Chosen> {
        self.chosen
            .get_or_init(|| crate::site::node_choice::chosen(&self.slurm_jobs, &self.nodes))
    }
}
