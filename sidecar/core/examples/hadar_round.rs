//! Times Hadar rounds on the synthetic workload (a quick check while developing; the
//! product's benchmark is `hadar bench round`).
use hadar_core::policies::hadar::{HadarConfig, plan_round, synthetic};
use std::time::Instant;

fn main() {
    let w = synthetic::generate(&synthetic::SyntheticSpec::default()).expect("valid spec");
    for (name, cfg) in [
        ("default", HadarConfig::default()),
        ("max 2 nodes", HadarConfig { max_nodes_per_job: Some(2), ..HadarConfig::default() }),
    ] {
        let mut times = Vec::new();
        let mut stats = None;
        for _ in 0..15 {
            let t = Instant::now();
            let (plan, s) = plan_round(&cfg, &w.input());
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            stats = Some((plan.assignments.len(), s));
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.2} ms max {:.2} ms {:?}",
            times[times.len() / 2],
            times[times.len() - 1],
            stats
        );
    }
}
