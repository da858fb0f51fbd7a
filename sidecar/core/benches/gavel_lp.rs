//! How long Gavel's allocation LPs take for a 300-job workload (release build):
//! `cargo bench -p hadar-core --bench gavel_lp`.
//!
//! The throughputs are synthetic but shaped like Gavel's table: a V100 rate per job, P100
//! and K80 slower by random factors, a few jobs unable to run on K80, scale factors 1, 2, 4
//! and 8 in Gavel's multi-GPU proportions. Prints the median and worst of several solves.

use hadar_core::policies::gavel::allocation::{
    AllocationProblem, max_min_fairness_perf, min_total_duration_perf,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let jobs = 300;
    let mut rng = SmallRng::seed_from_u64(42);
    let mut throughputs = Vec::with_capacity(jobs);
    let mut scale_factors = Vec::with_capacity(jobs);
    let mut steps = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let v100: f64 = rng.random_range(1.0..100.0);
        let p100 = v100 * rng.random_range(0.3..0.9);
        let k80 = if rng.random_bool(0.05) {
            0.0
        } else {
            v100 * rng.random_range(0.1..0.5)
        };
        throughputs.push(vec![v100, p100, k80]);
        let r: f64 = rng.random();
        scale_factors.push(if r < 0.7 {
            1
        } else if r < 0.8 {
            2
        } else if r < 0.95 {
            4
        } else {
            8
        });
        steps.push(v100 * rng.random_range(3600.0..4.0 * 3600.0));
    }
    let capacity = [16, 16, 16];
    let problem = AllocationProblem {
        throughputs: &throughputs,
        scale_factors: &scale_factors,
        capacity: &capacity,
    };
    let weights = vec![1.0; jobs];

    let time = |label: &str, f: &dyn Fn()| {
        let mut ms: Vec<f64> = (0..7)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        println!(
            "{label}: {jobs} jobs x 3 types on 48 GPUs: median {:.1} ms, max {:.1} ms",
            ms[ms.len() / 2],
            ms[ms.len() - 1]
        );
    };
    time("max_min_fairness_perf", &|| {
        max_min_fairness_perf(&problem, &weights).expect("max-min LP solves");
    });
    time("min_total_duration_perf", &|| {
        min_total_duration_perf(&problem, &steps).expect("makespan LP solves");
    });
}
