//! Synthetic traces in the spirit of Gavel's generator, for benchmarks and what-if runs.
//!
//! Each job's type is drawn uniformly from the throughput table's job types; types that the
//! table lists with several worker counts are distributed (1 worker with probability 0.7,
//! 2 with 0.1, 4 with 0.2, the mix seen in Gavel's multi-GPU traces); each job's duration
//! alone on the reference type (`v100` when present) is uniform in 1-4 hours, and its steps
//! are that duration times its reference rate, as Gavel's generator sets them. Arrivals are
//! all at 0 (static) or Poisson with a given mean gap. The generator is seeded and uses its
//! own SplitMix64 stream, so a trace is the same on every platform and version.

use crate::ThroughputTable;
use hadar_core::{Cluster, Job, JobId};

/// How jobs arrive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arrivals {
    /// Everything at t = 0.
    Static,
    /// Exponential gaps with this mean, in seconds.
    Poisson {
        /// Mean gap between arrivals.
        mean_gap_s: f64,
    },
}

/// Settings of a synthetic trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceSpec {
    /// Number of jobs.
    pub jobs: usize,
    /// Allow distributed (multi-worker) jobs.
    pub multi_gpu: bool,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Seed.
    pub seed: u64,
}

/// A job line, as it would be written to a `.trace` file.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceLine {
    /// Job type.
    pub job_type: String,
    /// Steps.
    pub total_steps: u64,
    /// Workers.
    pub workers: u32,
    /// Arrival time, seconds.
    pub arrival_s: f64,
}

impl TraceLine {
    /// The line in Gavel's 10-column format (command and directory are informative only).
    pub fn to_gavel(&self) -> String {
        format!(
            "{}\tpython3 train.py\t.\t--num_steps\t0\t{}\t{}\t1\t-1.000000\t{:.6}",
            self.job_type, self.total_steps, self.workers, self.arrival_s
        )
    }
}

/// A small, fast, well-mixed 64-bit generator (Steele et al.'s SplitMix64).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// Generates trace lines from a table. Job types whose reference rate is missing are skipped.
pub fn generate_lines(table: &ThroughputTable, spec: &TraceSpec) -> Vec<TraceLine> {
    let reference = if table.gpu_types().iter().any(|t| t == "v100") {
        "v100".to_string()
    } else {
        table.gpu_types()[0].clone()
    };
    let types: Vec<&str> = table
        .job_types()
        .filter(|t| table.rate(t, &reference, 1).is_some_and(|r| r > 0.0))
        .collect();
    let mut rng = SplitMix64::new(spec.seed);
    let mut t = 0.0;
    let mut lines = Vec::with_capacity(spec.jobs);
    for _ in 0..spec.jobs {
        let job_type = types[rng.below(types.len())];
        let mut workers = 1;
        if spec.multi_gpu && table.rate(job_type, &reference, 2).is_some() {
            let r = rng.unit();
            workers = if r < 0.7 {
                1
            } else if r < 0.8 {
                2
            } else {
                4
            };
            if table
                .rate(job_type, &reference, workers)
                .is_none_or(|r| r <= 0.0)
            {
                workers = 1;
            }
        }
        let rate = table.rate(job_type, &reference, workers).unwrap_or(1.0);
        let duration_s = 3600.0 * (1.0 + 3.0 * rng.unit());
        if let Arrivals::Poisson { mean_gap_s } = spec.arrivals
            && !lines.is_empty()
        {
            t += -mean_gap_s * (1.0 - rng.unit()).ln();
        }
        lines.push(TraceLine {
            job_type: job_type.to_string(),
            total_steps: (duration_s * rate).round().max(1.0) as u64,
            workers,
            arrival_s: t,
        });
    }
    lines
}

/// Generates jobs for a cluster (jobs that could run nowhere on it are dropped, since a
/// synthetic trace has no user to tell).
pub fn generate_jobs(table: &ThroughputTable, cluster: &Cluster, spec: &TraceSpec) -> Vec<Job> {
    generate_lines(table, spec)
        .into_iter()
        .filter_map(|l| {
            let throughput = table.profile(&l.job_type, cluster)?;
            Some(Job {
                restart_s: None,
                id: JobId(0),
                kind: l.job_type,
                arrival_s: l.arrival_s,
                workers: l.workers,
                total_steps: l.total_steps as f64,
                weight: 1.0,
                throughput,
            })
        })
        .filter(|j| j.can_run_somewhere(cluster.types()))
        .enumerate()
        .map(|(i, mut j)| {
            j.id = JobId(i as u64);
            j
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{embedded, parse_trace};

    #[test]
    fn generated_traces_are_reproducible_and_readable() {
        let table = embedded::throughputs().unwrap();
        let cluster = embedded::cluster().unwrap();
        let spec = TraceSpec {
            jobs: 300,
            multi_gpu: true,
            arrivals: Arrivals::Poisson { mean_gap_s: 900.0 },
            seed: 7,
        };
        let a = generate_lines(&table, &spec);
        assert_eq!(a, generate_lines(&table, &spec));
        assert_ne!(
            a,
            generate_lines(
                &table,
                &TraceSpec {
                    seed: 8,
                    ..spec.clone()
                }
            )
        );
        let text: String = a.iter().map(|l| l.to_gavel() + "\n").collect();
        let jobs = parse_trace(&text, "gen", &table, &cluster).unwrap();
        assert_eq!(jobs.len(), 300);
        let multi = jobs.iter().filter(|j| j.workers > 1).count();
        assert!((30..150).contains(&multi), "{multi} multi-GPU jobs");
        assert!(jobs.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    }
}
