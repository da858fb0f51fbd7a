//! The weight of a job in Hadar's and HadarE's utility, from the site's multifactor priority.
//!
//! Slurm's `priority/multifactor` gives a pending job the priority
//! `Σ PriorityWeightX × factor_X` over the factors fair-share, QOS, age, partition and job
//! size, each in [0, 1]. A job hadar holds has priority 0 in Slurm, so the factors are
//! computed here from Slurm's own figures (`sshare`'s FairShare, the QOS's and partition's
//! priorities, the job's age and size) with the site's weights. The job's *priority
//! fraction* is that priority over the sum of the weights (0 to 1), and its weight in the
//! utility is `exp(strength × fraction)`: `strength` (`[hadar] priority_strength`) 0 ignores
//! priority (throughput alone decides); with strength `s`, a job whose fraction is higher by
//! `Δ` counts `exp(s·Δ)` times as much, so Hadar gives a contested GPU to the lower-priority
//! job only when it gains more than that factor more from it.

use serde::{Deserialize, Serialize};

/// The site's `PriorityWeight*` and the settings the factors depend on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityWeights {
    /// `PriorityWeightFairshare`.
    pub fairshare: f64,
    /// `PriorityWeightQOS`.
    pub qos: f64,
    /// `PriorityWeightAge`.
    pub age: f64,
    /// `PriorityWeightPartition`.
    pub partition: f64,
    /// `PriorityWeightJobSize`.
    pub job_size: f64,
    /// `PriorityMaxAge` in seconds: the age at which the age factor reaches 1.
    pub max_age_s: f64,
    /// `PriorityFavorSmall`: small jobs get the larger job-size factor.
    pub favor_small: bool,
}

impl PriorityWeights {
    /// The sum of the weights: the highest priority a job can have.
    pub fn total(&self) -> f64 {
        [
            self.fairshare,
            self.qos,
            self.age,
            self.partition,
            self.job_size,
        ]
        .iter()
        .filter(|w| w.is_finite() && **w > 0.0)
        .sum()
    }
}

/// Slurm's figures for one job, from which its factors follow.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityInputs {
    /// `sshare`'s FairShare of the job's (account, user) association, 0 to 1.
    pub fairshare: f64,
    /// The priority of the job's QOS.
    pub qos_priority: f64,
    /// The highest priority of any QOS (Slurm normalises by it).
    pub max_qos_priority: f64,
    /// Seconds since the job was submitted (it would have been eligible since, without hadar).
    pub age_s: f64,
    /// The `PriorityJobFactor` of the job's partition.
    pub partition_factor: f64,
    /// The highest `PriorityJobFactor` of any partition.
    pub max_partition_factor: f64,
    /// GPUs the job asks for.
    pub gpus: u32,
    /// GPUs in the cluster.
    pub total_gpus: u32,
}

/// A job's factors, each in [0, 1].
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Factors {
    /// Fair-share.
    pub fairshare: f64,
    /// QOS.
    pub qos: f64,
    /// Age.
    pub age: f64,
    /// Partition.
    pub partition: f64,
    /// Job size.
    pub job_size: f64,
}

fn unit(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

fn ratio(x: f64, of: f64) -> f64 {
    if of > 0.0 { unit(x / of) } else { 0.0 }
}

impl Factors {
    /// The factors as `priority/multifactor` computes them. Job size counts GPUs (Slurm
    /// counts nodes or CPUs; on a GPU cluster a job's size is its GPUs).
    pub fn from_inputs(w: &PriorityWeights, i: &PriorityInputs) -> Factors {
        let size = ratio(f64::from(i.gpus), f64::from(i.total_gpus));
        let job_size = if w.favor_small && i.total_gpus > 0 {
            unit(1.0 - f64::from(i.gpus.saturating_sub(1)) / f64::from(i.total_gpus))
        } else {
            size
        };
        Factors {
            fairshare: unit(i.fairshare),
            qos: ratio(i.qos_priority, i.max_qos_priority),
            age: if w.max_age_s > 0.0 {
                ratio(i.age_s, w.max_age_s)
            } else {
                0.0
            },
            partition: ratio(i.partition_factor, i.max_partition_factor),
            job_size,
        }
    }

    /// Slurm's priority number: `Σ weight × factor` (without nice and site factors).
    pub fn priority(&self, w: &PriorityWeights) -> f64 {
        let pos = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
        pos(w.fairshare) * self.fairshare
            + pos(w.qos) * self.qos
            + pos(w.age) * self.age
            + pos(w.partition) * self.partition
            + pos(w.job_size) * self.job_size
    }

    /// The priority over the highest possible (0 to 1); 0 when every weight is 0.
    pub fn fraction(&self, w: &PriorityWeights) -> f64 {
        ratio(self.priority(w), w.total())
    }

    /// The job's weight in the utility: `exp(strength × fraction)`; 1 when `strength` is 0
    /// or not a positive finite number.
    pub fn weight(&self, w: &PriorityWeights, strength: f64) -> f64 {
        if strength.is_finite() && strength > 0.0 {
            (strength * self.fraction(w)).exp()
        } else {
            1.0
        }
    }

    /// The factors in words, each with its weight, and the weight they give.
    pub fn describe(&self, w: &PriorityWeights, strength: f64) -> String {
        format!(
            "site priority {:.0} of {:.0} (fair-share {:.3} x {:.0}, QOS {:.3} x {:.0}, age {:.3} x {:.0}, partition {:.3} x {:.0}, job size {:.3} x {:.0}): weight {:.3} in the utility at priority_strength {strength}",
            self.priority(w),
            w.total(),
            self.fairshare,
            w.fairshare,
            self.qos,
            w.qos,
            self.age,
            w.age,
            self.partition,
            w.partition,
            self.job_size,
            w.job_size,
            self.weight(w, strength),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn site() -> PriorityWeights {
        PriorityWeights {
            fairshare: 10000.0,
            qos: 5000.0,
            age: 1000.0,
            partition: 1000.0,
            job_size: 500.0,
            max_age_s: 86400.0,
            favor_small: false,
        }
    }

    #[test]
    fn an_under_served_account_weighs_more() {
        let w = site();
        let busy = PriorityInputs {
            fairshare: 0.25,
            gpus: 1,
            total_gpus: 16,
            ..Default::default()
        };
        let idle = PriorityInputs {
            fairshare: 1.0,
            ..busy.clone()
        };
        let fb = Factors::from_inputs(&w, &busy);
        let fi = Factors::from_inputs(&w, &idle);
        assert!(fi.weight(&w, 1.0) > fb.weight(&w, 1.0));
        assert_eq!(fi.weight(&w, 0.0), 1.0);
        assert!((fi.priority(&w) - 10000.0 - 500.0 / 16.0).abs() < 1e-9);
        assert!(fi.describe(&w, 1.0).contains("fair-share 1.000 x 10000"));
    }

    #[test]
    fn factors_follow_slurm() {
        let w = PriorityWeights {
            favor_small: true,
            ..site()
        };
        let f = Factors::from_inputs(
            &w,
            &PriorityInputs {
                fairshare: 0.5,
                qos_priority: 10.0,
                max_qos_priority: 40.0,
                age_s: 43200.0,
                partition_factor: 1.0,
                max_partition_factor: 2.0,
                gpus: 4,
                total_gpus: 16,
            },
        );
        assert_eq!(f.qos, 0.25);
        assert_eq!(f.age, 0.5);
        assert_eq!(f.partition, 0.5);
        assert_eq!(f.job_size, 1.0 - 3.0 / 16.0);
        assert_eq!(f.fraction(&PriorityWeights::default()), 0.0);
    }

    /// Two equal jobs, one GPU: Hadar's plan gives it to the job of higher weight, whichever
    /// arrived first.
    #[test]
    fn hadar_gives_a_contested_gpu_to_the_higher_weight() {
        use crate::cluster::{Cluster, Node};
        use crate::job::{Job, JobId, JobState};
        use crate::policies::hadar::{HadarConfig, plan_round};
        use crate::policy::RoundInput;
        use crate::throughput::{RateCurve, ThroughputProfile};
        use std::sync::Arc;
        let cluster = Cluster::new(
            vec!["p100".into()],
            vec![Node {
                name: "n".into(),
                gpus: vec![1],
            }],
        )
        .unwrap();
        let w = site();
        let weight = |fs: f64| {
            Factors::from_inputs(
                &w,
                &PriorityInputs {
                    fairshare: fs,
                    gpus: 1,
                    total_gpus: 1,
                    ..Default::default()
                },
            )
            .weight(&w, 1.0)
        };
        for (first, second) in [(0.25, 1.0), (1.0, 0.25)] {
            let jobs: Vec<JobState> = [(1, first), (2, second)]
                .into_iter()
                .map(|(id, fs)| {
                    JobState::arrived(
                        Arc::new(Job {
                            restart_s: None,
                            id: JobId(id),
                            kind: "t".into(),
                            arrival_s: id as f64,
                            workers: 1,
                            total_steps: 600.0,
                            weight: weight(fs),
                            throughput: ThroughputProfile::new(vec![RateCurve::new([(1, 100.0)])]),
                        }),
                        1,
                    )
                })
                .collect();
            let input = RoundInput {
                now_s: 10.0,
                round_s: 2.0,
                restart_s: 2.0,
                cluster: &cluster,
                jobs: &jobs,
            };
            let (plan, _) = plan_round(&HadarConfig::default(), &input);
            let winner = if first > second { 1 } else { 2 };
            assert_eq!(plan.assignments.len(), 1);
            assert_eq!(plan.assignments[0].job, JobId(winner));
        }
    }

    proptest! {
        #[test]
        fn weights_are_finite_at_least_one_and_monotone_in_fairshare(
            a in -1.0f64..2.0, b in -1.0f64..2.0, s in 0.0f64..10.0, age in -10.0f64..1e6,
        ) {
            let w = site();
            let i = |fs: f64| PriorityInputs { fairshare: fs, age_s: age, gpus: 2, total_gpus: 8, ..Default::default() };
            let (fa, fb) = (Factors::from_inputs(&w, &i(a)), Factors::from_inputs(&w, &i(b)));
            let (wa, wb) = (fa.weight(&w, s), fb.weight(&w, s));
            prop_assert!(wa.is_finite() && wa >= 1.0 && wa <= s.exp() + 1e-9);
            prop_assert!((0.0..=1.0).contains(&fa.fraction(&w)));
            if a < b { prop_assert!(wa <= wb); }
        }
    }
}
