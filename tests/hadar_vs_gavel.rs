//! Issue 15's aim, checked on Gavel's six traces on both cluster shapes (4+4+4 V100/P100/K80
//! with one GPU per node, 16+16+16 with four per node), restart cost 0 as in Gavel: Hadar
//! (the policy `hadar simulate --policy hadar` and `hadar serve` run, default settings)
//! against Gavel's max-min fairness policy.
//!
//! * Hadar's TTD is no longer than Gavel's on every run, except the runs listed in
//!   [`KNOWN_LATE`], each held to the ratio measured when it was listed (a regression there
//!   fails too). Those runs are where the aim is not met yet (docs/results-gavel.md).
//! * Hadar's average JCT is lower than Gavel's on every run except [`KNOWN_SLOWER`] (held
//!   the same way), and at least 1.25x lower on average over the 13 runs (the 12 here and
//!   the few-jobs scenario).
//! * Hadar's mean TTD over the fluid bound stays at most [`MEAN_TTD_OVER_BOUND`].
//!
//! A second test plays the 18 held-out traces of `data/heldout/` (drawn like Gavel's from
//! other seeds by docs/heldout-traces.py; no setting was tuned on them) on the same two
//! shapes. The aims are not met there yet, so it holds each figure at what was measured
//! when the traces were added ([`HELD_OUT`]). A change that helps the 13 runs above by
//! costing the held-out ones fails it.
//!
//! About 3.5 s in a debug build (26 simulations and 13 bounds) for the first test and
//! about 10 s for the second, once compiled.

#[path = "support/gavel.rs"]
mod gavel;

use hadar_core::policies::{self, PolicyName, PolicyOptions};
use hadar_formats::{ThroughputTable, load_cluster, load_trace, parse_cluster_spec};
use hadar_sim::{SimConfig, Workload, simulate};
use std::path::{Path, PathBuf};

/// Runs where Hadar's TTD is still above Gavel's: (trace, GPUs per node, the most
/// Hadar TTD / Gavel TTD may be). Static multi-GPU 40 on 4+4+4 measured 1.0075
/// (docs/results-gavel.md has the history).
const KNOWN_LATE: &[(&str, u32, f64)] = &[("static_multigpu_40jobs_seed10", 1, 1.01)];

/// Runs where Hadar's average JCT is not yet below Gavel's: (trace, GPUs per node, the
/// least Gavel JCT / Hadar JCT may be). Static multi-GPU 40 on 16+16+16 measured 0.975
/// (docs/results-gavel.md has the history).
const KNOWN_SLOWER: &[(&str, u32, f64)] = &[("static_multigpu_40jobs_seed10", 4, 0.97)];

/// The most Hadar's mean TTD over the fluid bound may be: the aim, measured 1.0493 over the
/// 13 runs since the tail plan (docs/results-gavel.md has the history).
const MEAN_TTD_OVER_BOUND: f64 = 1.05;

/// The held-out runs' figures, each with a little room over what was measured when the
/// traces were added (docs/results-gavel.md, nineteenth step): a ceiling or a floor, not
/// the aim.
struct HeldOut {
    /// Mean Hadar TTD over the fluid bound: measured 1.0619 (the aim is 1.05).
    mean_ttd_over_bound: f64,
    /// The largest Hadar TTD over Gavel's: measured 1.0373 (the aim is 1).
    most_late: f64,
    /// Runs where Hadar's TTD is above Gavel's: measured 7 of 36 (the aim is none).
    late_runs: usize,
    /// Mean JCT gain over Gavel: measured 1.2506 (the aim is 1.25).
    mean_gain: f64,
    /// The lowest JCT gain: measured 0.894 (the aim is above 1).
    least_gain: f64,
    /// Runs where Hadar's average JCT is not below Gavel's: measured 3 (the aim is none).
    slower_runs: usize,
}

const HELD_OUT: HeldOut = HeldOut {
    mean_ttd_over_bound: 1.065,
    most_late: 1.04,
    late_runs: 7,
    mean_gain: 1.245,
    least_gain: 0.885,
    slower_runs: 3,
};

struct Run {
    name: String,
    gpus_per_node: u32,
    bound_s: f64,
    gavel: (f64, f64),
    hadar: (f64, f64),
}

fn play(name: String, gpus_per_node: u32, w: &Workload) -> Run {
    // (TTD, average JCT) of one policy.
    let result = |p: PolicyName| {
        let mut policy = policies::build(p, &PolicyOptions::default()).expect("a round policy");
        let r = simulate(w, policy.as_mut(), &SimConfig::default())
            .unwrap_or_else(|e| panic!("{p} on {name}: {e}"));
        assert_eq!(r.metrics.jobs_completed, w.jobs.len(), "{p} on {name}");
        (r.metrics.ttd_s, r.metrics.avg_jct_s)
    };
    Run {
        bound_s: policies::bound(PolicyName::LowerBound, &w.cluster, &w.jobs).expect("bound"),
        gavel: result(PolicyName::Gavel),
        hadar: result(PolicyName::Hadar),
        name,
        gpus_per_node,
    }
}

fn table() -> ThroughputTable {
    ThroughputTable::load(&gavel::gavel_data().join("simulation_throughputs.json")).unwrap()
}

/// Each trace on both cluster shapes.
fn trace_runs(traces: &[PathBuf], table: &ThroughputTable) -> Vec<Run> {
    let mut out = Vec::new();
    for trace in traces {
        let name = trace.file_stem().unwrap().to_string_lossy().into_owned();
        for (spec, per_node) in [("v100:4,p100:4,k80:4", 1), ("v100:16,p100:16,k80:16", 4)] {
            let cluster = parse_cluster_spec(spec, per_node).unwrap();
            let jobs = load_trace(trace, table, &cluster).unwrap();
            out.push(play(name.clone(), per_node, &Workload { cluster, jobs }));
        }
    }
    out
}

/// The 13 runs the aim is judged on: Gavel's six traces on both shapes, and few-jobs.
fn runs() -> Vec<Run> {
    let table = table();
    let mut out = trace_runs(&gavel::traces(), &table);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let cluster = load_cluster(root.join("physical-cluster.toml").to_str().unwrap(), 1).unwrap();
    let jobs = load_trace(&root.join("few-jobs.trace"), &table, &cluster).unwrap();
    out.push(play("few-jobs".into(), 6, &Workload { cluster, jobs }));
    out
}

fn known(list: &[(&str, u32, f64)], r: &Run) -> Option<f64> {
    list.iter()
        .find(|(n, g, _)| *n == r.name && *g == r.gpus_per_node)
        .map(|k| k.2)
}

#[test]
fn hadar_ends_no_later_than_gavel_and_its_jobs_complete_sooner() {
    let runs = runs();
    let mut failures = Vec::new();
    let mut gains = Vec::new();
    let mut over_bound = Vec::new();
    for r in &runs {
        let late = r.hadar.0 / r.gavel.0;
        let gain = r.gavel.1 / r.hadar.1;
        gains.push(gain);
        over_bound.push(r.hadar.0 / r.bound_s);
        eprintln!(
            "{} ({} GPU/node): TTD hadar/gavel {late:.3}, over bound {:.3}; JCT gain {gain:.3}",
            r.name,
            r.gpus_per_node,
            r.hadar.0 / r.bound_s
        );
        let late_cap = known(KNOWN_LATE, r).unwrap_or(1.0 + 1e-9);
        if late > late_cap {
            failures.push(format!(
                "{} ({}): TTD {late:.3}x Gavel's, allowed {late_cap}",
                r.name, r.gpus_per_node
            ));
        }
        let gain_floor = known(KNOWN_SLOWER, r).unwrap_or(1.0 + 1e-9);
        if gain < gain_floor {
            failures.push(format!(
                "{} ({}): JCT gain {gain:.3}x, at least {gain_floor} needed",
                r.name, r.gpus_per_node
            ));
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    if mean(&gains) < 1.25 {
        failures.push(format!("mean JCT gain {:.3}x, below 1.25x", mean(&gains)));
    }
    if mean(&over_bound) > MEAN_TTD_OVER_BOUND {
        failures.push(format!(
            "mean TTD over the bound {:.3}, above {MEAN_TTD_OVER_BOUND}",
            mean(&over_bound)
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn on_held_out_traces_hadar_holds_its_measured_figures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/heldout");
    let traces = gavel::traces_in(&dir, 18);
    let runs = trace_runs(&traces, &table());
    let late: Vec<f64> = runs.iter().map(|r| r.hadar.0 / r.gavel.0).collect();
    let gains: Vec<f64> = runs.iter().map(|r| r.gavel.1 / r.hadar.1).collect();
    let over_bound: Vec<f64> = runs.iter().map(|r| r.hadar.0 / r.bound_s).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let most = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    let least = |v: &[f64]| v.iter().copied().fold(f64::MAX, f64::min);
    let late_runs = late.iter().filter(|x| **x > 1.0 + 1e-9).count();
    let slower_runs = gains.iter().filter(|x| **x <= 1.0).count();
    let figures = format!(
        "mean TTD / bound {:.4}, largest TTD / Gavel {:.4}, {late_runs} runs after Gavel, \
         mean JCT gain {:.4}, lowest {:.4}, {slower_runs} runs with a JCT not below Gavel's",
        mean(&over_bound),
        most(&late),
        mean(&gains),
        least(&gains)
    );
    eprintln!("held out: {figures}");
    let h = HELD_OUT;
    let held = mean(&over_bound) <= h.mean_ttd_over_bound
        && most(&late) <= h.most_late
        && late_runs <= h.late_runs
        && mean(&gains) >= h.mean_gain
        && least(&gains) >= h.least_gain
        && slower_runs <= h.slower_runs;
    assert!(
        held,
        "the held-out runs got worse than when they were added: {figures}"
    );
}
