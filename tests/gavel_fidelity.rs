//! Fidelity of our Gavel baseline against Gavel's own simulator.
//!
//! For every trace in `data/gavel/traces/`, on Gavel's reference cluster (4 V100 +
//! 4 P100 + 4 K80, one GPU per node, 360 s rounds), `gavel` must land within 5% of the
//! makespan and within 10% of the average JCT that Gavel's `max_min_fairness_perf` reached
//! (`reference-results.json`), `gavel-makespan` likewise against `min_total_duration_perf`,
//! and `lower-bound` must stay below every policy's makespan (ours and Gavel's).

use hadar_core::policies::{self, PolicyName, PolicyOptions};
use hadar_formats::{ThroughputTable, load_trace, parse_cluster_spec};
use hadar_sim::{SimConfig, Workload, simulate};
use std::path::{Path, PathBuf};

const MAKESPAN_TOLERANCE: f64 = 0.05;
const JCT_TOLERANCE: f64 = 0.10;

fn gavel_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gavel")
}

/// One reference result.
struct Reference {
    trace: String,
    policy: String,
    makespan_s: f64,
    avg_jct_s: f64,
}

fn references() -> Vec<Reference> {
    let path = gavel_data().join("reference-results.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("reference-results.json is JSON");
    v["results"]
        .as_array()
        .expect("a results array")
        .iter()
        .map(|r| {
            assert_eq!(r["cluster"], "v100:4,p100:4,k80:4");
            assert_eq!(r["gpus_per_node"], 1);
            assert_eq!(r["round_s"], 360);
            Reference {
                trace: r["trace"].as_str().expect("trace").to_string(),
                policy: r["policy"].as_str().expect("policy").to_string(),
                makespan_s: r["makespan_s"].as_f64().expect("makespan_s"),
                avg_jct_s: r["avg_jct_s"].as_f64().expect("avg_jct_s"),
            }
        })
        .collect()
}

#[test]
fn gavel_matches_gavels_own_simulator_on_every_trace() {
    let data = gavel_data();
    let table =
        ThroughputTable::load(&data.join("simulation_throughputs.json")).expect("throughput table");
    let cluster = parse_cluster_spec("v100:4,p100:4,k80:4", 1).expect("cluster");
    let refs = references();
    let mut traces: Vec<PathBuf> = std::fs::read_dir(data.join("traces"))
        .expect("traces directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    traces.sort();
    assert!(
        !traces.is_empty(),
        "no traces found in {}",
        data.join("traces").display()
    );

    let cfg = SimConfig {
        round_s: 360.0,
        ..SimConfig::default()
    };
    let pairs = [
        (PolicyName::Gavel, "max_min_fairness_perf"),
        (PolicyName::GavelMakespan, "min_total_duration_perf"),
    ];
    let mut failures = Vec::new();
    let mut lines = vec![format!(
        "{:<44} {:<15} {:>12} {:>12} {:>7} {:>11} {:>11} {:>7}",
        "trace", "policy", "TTD s", "Gavel TTD s", "ratio", "JCT s", "Gavel JCT", "ratio"
    )];
    for trace in &traces {
        let name = format!(
            "traces/{}",
            trace
                .file_name()
                .and_then(|f| f.to_str())
                .expect("file name")
        );
        let jobs = load_trace(trace, &table, &cluster).unwrap_or_else(|e| panic!("{name}: {e}"));
        let workload = Workload {
            cluster: cluster.clone(),
            jobs,
        };
        let bound = policies::bound(PolicyName::LowerBound, &workload.cluster, &workload.jobs)
            .expect("lower bound");
        for r in refs.iter().filter(|r| r.trace == name) {
            if bound >= r.makespan_s {
                failures.push(format!(
                    "{name}: lower bound {bound:.0} s is not below Gavel's {} ({:.0} s)",
                    r.policy, r.makespan_s
                ));
            }
        }
        for (ours, theirs) in pairs {
            let reference = refs
                .iter()
                .find(|r| r.trace == name && r.policy == theirs)
                .unwrap_or_else(|| panic!("no reference for {name} / {theirs}"));
            let mut policy =
                policies::build(ours, &PolicyOptions::default()).expect("gavel is built");
            let report = simulate(&workload, policy.as_mut(), &cfg)
                .unwrap_or_else(|e| panic!("{name} / {ours}: {e}"));
            let m = &report.metrics;
            assert_eq!(
                m.jobs_completed, m.jobs,
                "{name} / {ours}: every job completes"
            );
            let ttd_ratio = m.ttd_s / reference.makespan_s;
            let jct_ratio = m.avg_jct_s / reference.avg_jct_s;
            lines.push(format!(
                "{:<44} {:<15} {:>12.0} {:>12.0} {:>7.3} {:>11.0} {:>11.0} {:>7.3}",
                name,
                ours.as_str(),
                m.ttd_s,
                reference.makespan_s,
                ttd_ratio,
                m.avg_jct_s,
                reference.avg_jct_s,
                jct_ratio
            ));
            if (ttd_ratio - 1.0).abs() > MAKESPAN_TOLERANCE {
                failures.push(format!("{name} / {ours}: makespan ratio {ttd_ratio:.3} is outside 1 +- {MAKESPAN_TOLERANCE}"));
            }
            if (jct_ratio - 1.0).abs() > JCT_TOLERANCE {
                failures.push(format!("{name} / {ours}: average JCT ratio {jct_ratio:.3} is outside 1 +- {JCT_TOLERANCE}"));
            }
            if bound >= m.ttd_s {
                failures.push(format!(
                    "{name}: lower bound {bound:.0} s is not below {ours}'s {:.0} s",
                    m.ttd_s
                ));
            }
        }
        lines.push(format!(
            "{:<44} {:<15} {:>12.0}",
            name, "lower-bound", bound
        ));
    }
    eprintln!("{}", lines.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
