//! Hadar's utility: what a job gains from running at a given rate this round.
//!
//! Every objective gives a utility that is positive and non-increasing in the job's
//! estimated completion time `now + remaining_steps / rate`, so a faster placement is never
//! worth less. They differ in how they rank jobs against each other:
//!
//! * [`Objective::AvgJct`] (default): `k * w * T / (T + t_rem)`, with `T` the round length
//!   and `t_rem = remaining_steps / rate` the remaining time at this rate. It is the share
//!   of the job's remaining life that this round covers; for long jobs it is about `w * T *
//!   rate / remaining_steps`, the shortest-remaining-time-first ranking that minimises
//!   average completion time, while a faster type is worth proportionally more. `k = 1 +
//!   c * t_best / t_max` is the makespan-aware factor (see [`JobUtility::set_criticality`]):
//!   it narrows the gap between long and short jobs so long ones start early instead of
//!   forming an idle tail, and ranks the longest first once little time remains.
//! * [`Objective::Makespan`]: `w * (t_best / T) * (rate / best_rate)`, with `t_best` the
//!   remaining time at the job's fastest type: the longest remaining jobs rank first (they
//!   set the makespan), and each prefers faster types in proportion to their speed.
//! * [`Objective::Fairness`]: `w * ((age + t_best) / t_alone) * (rate / best_rate)`, with
//!   `age` the time since arrival and `t_alone` the whole job's time alone at its fastest
//!   type: the finish-time-fairness ratio it is heading for, so jobs that have waited long
//!   relative to their size rank first.
//!
//! A running job that would move (its placement changes) loses `restart_s` of the round to
//! checkpoint and reload when stickiness is on; its utility is then computed at the rate
//! scaled by `(T - restart_s) / T`.

use crate::job::JobState;
use serde::{Deserialize, Serialize};

/// What Hadar's utility rewards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Average job completion time (shortest remaining time ranks first).
    #[default]
    AvgJct,
    /// Makespan (longest remaining time ranks first).
    Makespan,
    /// Finish-time fairness (jobs furthest behind their fair finish rank first).
    Fairness,
}

impl Objective {
    /// The CLI and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::AvgJct => "avg-jct",
            Objective::Makespan => "makespan",
            Objective::Fairness => "fairness",
        }
    }
}

impl std::str::FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "avg-jct" | "jct" => Ok(Objective::AvgJct),
            "makespan" => Ok(Objective::Makespan),
            "fairness" => Ok(Objective::Fairness),
            other => Err(format!(
                "unknown Hadar objective `{other}`; known: avg-jct, makespan, fairness"
            )),
        }
    }
}

/// The default weight of the makespan-aware utility factor
/// ([`JobUtility::set_criticality`]), for Hadar and HadarE alike (measured in
/// docs/algorithms.md).
pub const DEFAULT_CRITICALITY: f64 = 30.0;

/// A floor for rates and times, which keeps the formulas finite for degenerate jobs.
const MIN_RATE: f64 = 1e-12;

/// One job's utility as a function of its rate this round.
#[derive(Clone, Copy, Debug)]
pub struct JobUtility {
    objective: Objective,
    weight: f64,
    round_s: f64,
    remaining_steps: f64,
    best_rate: f64,
    age_s: f64,
    alone_s: f64,
    move_factor: f64,
    criticality: f64,
}

impl JobUtility {
    /// The utility of `job` this round. `best_rate` is its fastest rate with all its
    /// workers on one type the cluster has; `restart_s` is charged to moved placements
    /// only when `sticky`.
    pub fn new(
        objective: Objective,
        job: &JobState,
        best_rate: f64,
        now_s: f64,
        round_s: f64,
        restart_s: f64,
        sticky: bool,
    ) -> Self {
        let weight = if job.job.weight.is_finite() && job.job.weight > 0.0 {
            job.job.weight
        } else {
            1.0
        };
        let round_s = if round_s.is_finite() && round_s > 0.0 {
            round_s
        } else {
            1.0
        };
        let best_rate = best_rate.max(MIN_RATE);
        let move_factor = if sticky && job.placement.is_some() {
            moved_share(round_s, restart_s)
        } else {
            1.0
        };
        JobUtility {
            objective,
            weight,
            round_s,
            remaining_steps: job.remaining_steps.max(0.0),
            best_rate,
            age_s: (now_s - job.job.arrival_s).max(0.0),
            alone_s: (job.job.total_steps.max(0.0) / best_rate).max(MIN_RATE),
            move_factor,
            criticality: 1.0,
        }
    }

    /// The job's remaining time at its fastest rate, in seconds.
    pub fn remaining_best_s(&self) -> f64 {
        self.remaining_steps / self.best_rate
    }

    /// The job's remaining time at `rate` steps per second, in seconds.
    pub fn remaining_at_s(&self, rate: f64) -> f64 {
        self.remaining_steps / rate.max(MIN_RATE)
    }

    /// Scales the makespan-aware factor set by [`JobUtility::set_criticality`] by
    /// `factor` (Hadar's pace boost); ignored unless finite and positive.
    pub fn scale_criticality(&mut self, factor: f64) {
        if factor.is_finite() && factor > 0.0 {
            self.criticality *= factor;
        }
    }

    /// Weights the [`Objective::AvgJct`] utility by `1 + weight * t_best / horizon_s`, with
    /// `t_best` the job's remaining time at its fastest rate and `horizon_s` the round's
    /// largest such time. For a long job the utility becomes about `w * T * (1 / t_rem +
    /// weight / horizon_s)`: while the horizon is longer than `weight` rounds, shorter jobs
    /// still rank first, but the gap between long and short ones shrinks, so prices no longer
    /// turn long jobs away in favour of an ever-renewed crowd of short ones and they start
    /// early instead of forming a tail in which GPUs idle. Once the horizon is shorter than
    /// `weight` rounds (the end game), the order flips to longest first, the makespan rule.
    /// The factor does not depend on the rate, so the utility stays non-increasing in the
    /// completion time. Other objectives ignore it (makespan and fairness already rank long
    /// jobs high); weight 0 turns it off.
    pub fn set_criticality(&mut self, horizon_s: f64, weight: f64) {
        // NaN weights or horizons fail `> 0.0` and turn the factor off.
        let usable = weight > 0.0 && weight.is_finite() && horizon_s > 0.0;
        if self.objective != Objective::AvgJct || !usable {
            self.criticality = 1.0;
            return;
        }
        let share = (self.remaining_best_s() / horizon_s).clamp(0.0, 1.0);
        self.criticality = 1.0 + weight * share;
    }

    /// Utility at `rate` steps/s, for a placement that keeps the job where it ran
    /// (`moved == false`) or not.
    pub fn at(&self, rate: f64, moved: bool) -> f64 {
        let rate = if moved { rate * self.move_factor } else { rate };
        if rate.is_nan() || rate <= 0.0 {
            return 0.0;
        }
        let t = self.round_s;
        match self.objective {
            Objective::AvgJct => {
                self.criticality * self.weight * t / (t + self.remaining_steps / rate)
            }
            Objective::Makespan => {
                let t_best = self.remaining_steps / self.best_rate;
                self.weight * (t_best / t).max(MIN_RATE) * (rate / self.best_rate)
            }
            Objective::Fairness => {
                let t_best = self.remaining_steps / self.best_rate;
                self.weight
                    * ((self.age_s + t_best) / self.alone_s).max(MIN_RATE)
                    * (rate / self.best_rate)
            }
        }
    }

    /// The utility at the job's fastest rate, not moved: the most it can gain this round.
    pub fn best(&self) -> f64 {
        self.at(self.best_rate, false)
    }
}

/// The share of a round's work a job moved to other GPUs still does when a move costs
/// `restart_s` (0 when the round is not positive). A moved placement's utility is taken at
/// its rate times this share, so the plan moves a running job only when the faster rate
/// outweighs the restart; the commitment look-ahead reasons with the same share.
pub fn moved_share(round_s: f64, restart_s: f64) -> f64 {
    if round_s > 0.0 {
        ((round_s - restart_s.max(0.0)) / round_s).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;
    use crate::throughput::{RateCurve, ThroughputProfile};
    use std::sync::Arc;

    fn state(remaining: f64, running: bool) -> JobState {
        let job = Job {
            restart_s: None,
            id: crate::job::JobId(1),
            kind: "test".into(),
            arrival_s: 0.0,
            workers: 1,
            total_steps: 1000.0,
            weight: 1.0,
            throughput: ThroughputProfile::new(vec![RateCurve::new([(1, 1.0)])]),
        };
        let mut s = JobState::arrived(Arc::new(job), 1);
        s.remaining_steps = remaining;
        if running {
            s.placement = Some(crate::placement::Placement::gang([
                crate::placement::Part {
                    node: crate::cluster::NodeId(0),
                    gpu_type: crate::cluster::GpuType(0),
                    gpus: 1,
                },
            ]));
        }
        s
    }

    #[test]
    fn utility_never_falls_as_the_rate_rises() {
        for obj in [Objective::AvgJct, Objective::Makespan, Objective::Fairness] {
            let u = JobUtility::new(obj, &state(500.0, false), 4.0, 100.0, 360.0, 30.0, true);
            let mut last = 0.0;
            for r in [0.1, 0.5, 1.0, 2.0, 4.0] {
                let v = u.at(r, false);
                assert!(v > last, "{obj:?} at rate {r}: {v} <= {last}");
                last = v;
            }
        }
    }

    #[test]
    fn avg_jct_ranks_shorter_remaining_work_higher() {
        let short = JobUtility::new(
            Objective::AvgJct,
            &state(100.0, false),
            1.0,
            0.0,
            360.0,
            0.0,
            false,
        );
        let long = JobUtility::new(
            Objective::AvgJct,
            &state(900.0, false),
            1.0,
            0.0,
            360.0,
            0.0,
            false,
        );
        assert!(short.best() > long.best());
        let short = JobUtility::new(
            Objective::Makespan,
            &state(100.0, false),
            1.0,
            0.0,
            360.0,
            0.0,
            false,
        );
        let long = JobUtility::new(
            Objective::Makespan,
            &state(900.0, false),
            1.0,
            0.0,
            360.0,
            0.0,
            false,
        );
        assert!(short.best() < long.best());
    }

    #[test]
    fn criticality_narrows_srpt_and_ranks_longest_first_near_the_end() {
        let mk = |remaining: f64, horizon: f64| {
            let mut u = JobUtility::new(
                Objective::AvgJct,
                &state(remaining, false),
                1.0,
                0.0,
                360.0,
                0.0,
                false,
            );
            u.set_criticality(horizon, 30.0);
            u
        };
        let plain = |r: f64| {
            JobUtility::new(
                Objective::AvgJct,
                &state(r, false),
                1.0,
                0.0,
                360.0,
                0.0,
                false,
            )
            .best()
        };
        // Horizon of ~2,800 rounds, far beyond 30: shorter still ranks first, by less.
        let (short, long) = (mk(1e5, 1e6).best(), mk(1e6, 1e6).best());
        assert!(short > long);
        assert!(short / long < plain(1e5) / plain(1e6));
        // Horizon of 10 rounds: the longest job ranks first.
        assert!(mk(3600.0, 3600.0).best() > mk(1800.0, 3600.0).best());
        assert!(plain(1800.0) > plain(3600.0));
        // Still increasing in the rate for one job.
        let u = mk(5e5, 1e6);
        assert!(u.at(2.0, false) > u.at(1.0, false));
        // Other objectives ignore it.
        let mut m = JobUtility::new(
            Objective::Makespan,
            &state(100.0, false),
            1.0,
            0.0,
            360.0,
            0.0,
            false,
        );
        let before = m.best();
        m.set_criticality(1e6, 30.0);
        assert_eq!(m.best(), before);
    }

    #[test]
    fn moving_a_running_job_costs_its_restart_when_sticky() {
        let u = JobUtility::new(
            Objective::AvgJct,
            &state(500.0, true),
            1.0,
            0.0,
            360.0,
            36.0,
            true,
        );
        assert!(u.at(1.0, true) < u.at(1.0, false));
        assert_eq!(u.at(1.0, true), u.at(0.9, false));
        let not_sticky = JobUtility::new(
            Objective::AvgJct,
            &state(500.0, true),
            1.0,
            0.0,
            360.0,
            36.0,
            false,
        );
        assert_eq!(not_sticky.at(1.0, true), not_sticky.at(1.0, false));
    }
}
