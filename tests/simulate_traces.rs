//! Every policy on every trace of Gavel's data: no job is silently dropped (Gavel's own
//! simulator drops some), and no policy beats its fluid lower bound (the forking one for
//! HadarE, the non-forking one for every other policy).

use hadar_core::policies::{self, PolicyName, PolicyOptions};
use hadar_formats::{ThroughputTable, load_trace, parse_cluster_spec};
use hadar_sim::{SimConfig, Workload, simulate};

#[path = "support/gavel.rs"]
mod gavel;
use gavel::{gavel_data, traces};

#[test]
fn every_policy_completes_every_job_and_no_policy_beats_the_bound() {
    let table = ThroughputTable::load(&gavel_data().join("simulation_throughputs.json")).unwrap();
    let cluster = parse_cluster_spec("v100:4,p100:4,k80:4", 1).unwrap();
    for trace in traces() {
        let jobs = load_trace(&trace, &table, &cluster).unwrap();
        let w = Workload {
            cluster: cluster.clone(),
            jobs,
        };
        let lb = policies::bound(PolicyName::LowerBound, &w.cluster, &w.jobs).unwrap();
        let lb_fork = policies::bound(PolicyName::LowerBoundFork, &w.cluster, &w.jobs).unwrap();
        assert!(
            lb_fork <= lb * (1.0 + 1e-9),
            "forking can only lower the bound"
        );
        for &name in PolicyName::ALL.iter().filter(|p| !p.is_bound()) {
            // HadarE forks, so only the forking bound applies to it.
            let bound = if name == PolicyName::HadarE {
                lb_fork
            } else {
                lb
            };
            let mut p = policies::build(name, &PolicyOptions::default()).unwrap();
            let r = simulate(&w, p.as_mut(), &SimConfig::default())
                .unwrap_or_else(|e| panic!("{name} on {}: {e}", trace.display()));
            assert_eq!(
                r.metrics.jobs_completed,
                w.jobs.len(),
                "{name} on {}",
                trace.display()
            );
            assert!(
                bound <= r.metrics.ttd_s * (1.0 + 1e-9),
                "{name} on {}: TTD {} below its lower bound {bound}",
                trace.display(),
                r.metrics.ttd_s
            );
        }
    }
}
