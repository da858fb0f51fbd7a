//! `hadar bench snapshot`: what keeping a round for `hadar replay` costs, in bytes and
//! milliseconds, for a queue of `--jobs` managed jobs read from Slurm's own answers.

use crate::Failure;
use crate::cli::BenchSnapshotArgs;
use hadar_daemon::DaemonConfig;
use hadar_daemon::snapshot::RoundSnapshot;
use hadar_daemon::spec::JobSpec;
use hadar_ops::replay::{self, Replayed};
use hadar_slurm::JobStatus;
use hadar_store::{JobRow, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Nodes captured on the 26.05 test cluster (four nodes of V100, P100 and K80).
const CAPTURED_NODES_JSON: &str = include_str!("../slurm/tests/data/26.05/nodes.json");

/// Records of the managed jobs, in turn: sizes and kinds a queue mixes.
const RECORDS: [&str; 4] = [
    "hadar:v1 gpus=1 type=resnet50-b64 steps=20000",
    "hadar:v1 gpus=2 type=transformer-b64 steps=50000",
    "hadar:v1 gpus=4 type=lm-b20 steps=10000 gpu-types=v100,p100",
    "hadar:v1 gpus=1 type=a3c steps=5000",
];

/// The round a daemon would keep with `jobs` waiting managed jobs on `nodes` copies of the
/// captured nodes (as the daemon reads them: Slurm's JSON answers, reconciled into rows).
fn snapshot(jobs: u32, nodes: u32) -> anyhow::Result<RoundSnapshot> {
    let captured = hadar_slurm::json::parse_nodes(CAPTURED_NODES_JSON)?;
    let mut node_list = Vec::new();
    for i in 0..nodes as usize {
        let mut n = captured[i % captured.len()].clone();
        n.name = format!("node{i:04}");
        node_list.push(n);
    }
    let (answer, _) = crate::bench_answers::scaled_answers(jobs)?;
    let mut slurm_jobs = hadar_slurm::json::parse_jobs(&answer)?;
    for (i, j) in slurm_jobs.iter_mut().enumerate() {
        j.admin_comment = Some(RECORDS[i % RECORDS.len()].to_string());
        j.status = JobStatus::Pending;
        j.priority = Some(0);
        j.reason = Some("JobHeldUser".into());
        j.alloc.clear();
        j.nodes.clear();
    }
    let now_unix = 1_800_000_000.0;
    let epoch = now_unix - 86_400.0;
    let config = DaemonConfig::parse("<defaults>", "")?;
    let mut rows: BTreeMap<u64, JobRow> = BTreeMap::new();
    hadar_daemon::reconcile::reconcile(
        &mut rows,
        &slurm_jobs,
        now_unix - epoch,
        epoch,
        config.sidecar.default_steps,
        &JobSpec::from_record,
        &BTreeSet::new(),
    );
    let specs = rows
        .values()
        .filter_map(|r| Some((r.id, JobSpec::from_record(&r.record).ok()?)))
        .collect();
    Ok(RoundSnapshot {
        round: 1,
        now_unix,
        now_s: now_unix - epoch,
        nodes: node_list,
        slurm_jobs,
        before: rows.clone(),
        rows,
        specs,
        owned: BTreeSet::new(),
        forks: Default::default(),
        learned: BTreeMap::new(),
        site: Default::default(),
        retypes: true,
        slurm_release: Some("26.05.3".into()),
        chosen: Default::default(),
    })
}

/// Runs `hadar bench snapshot`.
pub fn run(a: BenchSnapshotArgs) -> Result<(), Failure> {
    if a.jobs == 0 || a.repetitions == 0 || a.nodes == 0 {
        return Err(Failure::input(anyhow::anyhow!(
            "--jobs, --nodes and --repetitions must be at least 1"
        )));
    }
    let snap = snapshot(a.jobs, a.nodes).map_err(Failure::runtime)?;
    let config = DaemonConfig::parse("<defaults>", "").map_err(Failure::runtime)?;
    let table = hadar_formats::embedded::throughputs().map_err(Failure::runtime)?;
    let decision =
        hadar_daemon::decide::decide(&snap, &config, &table, config.round_policy().as_mut())
            .map_err(Failure::runtime)?;
    let dir = tempfile::tempdir().map_err(Failure::runtime)?;
    let mut store = Store::open(&dir.path().join("state.db")).map_err(Failure::runtime)?;
    let mut costs = Vec::new();
    for _ in 0..=a.repetitions {
        costs.push(
            hadar_daemon::kept::keep(&mut store, &snap, &decision, &config, &table)
                .map_err(Failure::runtime)?,
        );
    }
    // The first keep also writes the inputs: it is the warm-up, left out.
    let bytes = costs[0].bytes;
    let input_bytes = costs[0].input_bytes;
    let mut ms: Vec<f64> = costs[1..].iter().map(|c| c.ms).collect();
    ms.sort_by(f64::total_cmp);
    let started = Instant::now();
    let again = replay::replay(&store, 1, None).map_err(Failure::runtime)?;
    let replay_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "{} jobs ({} planned, {} actions) on {} nodes; build: {}",
        a.jobs,
        decision.planned.len(),
        decision.actions.len(),
        a.nodes,
        if cfg!(debug_assertions) {
            "debug (use --release for figures)"
        } else {
            "release"
        }
    );
    println!(
        "  kept round: {:.2} MB (inputs, stored once: {:.1} kB)",
        bytes as f64 / 1e6,
        input_bytes as f64 / 1e3
    );
    println!(
        "  encode and write: median {:.1} ms, max {:.1} ms over {} runs",
        ms[ms.len() / 2],
        ms[ms.len() - 1],
        ms.len()
    );
    println!(
        "  replay (read, decide, compare): {replay_ms:.1} ms, {}",
        match again {
            Replayed::Identical => "identical".to_string(),
            Replayed::Differs(d) => format!("differs: {d}"),
        }
    );
    Ok(())
}
