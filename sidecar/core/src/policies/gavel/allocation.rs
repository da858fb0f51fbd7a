//! Gavel's allocation LPs: the time fraction each job should receive on each GPU type.
//!
//! Both policies work on a throughput matrix `T[i][j]` (steps/s of job `i` with all its
//! `sf_i` workers on type `j`; 0 when it cannot run there), the jobs' scale factors and the
//! number of GPUs of each type `N_j`. The result `X[i][j]` is the fraction of wall-clock time
//! job `i` should run on type `j`, under Gavel's base constraints: `X >= 0`,
//! `sum_i sf_i X[i][j] <= N_j` and `sum_j X[i][j] <= 1`. Values are clipped to [0, 1] as
//! Gavel clips the solver's output.
//!
//! Rows that are all zero (a job that can run on no type) are left out of the LP and get a
//! zero allocation: Gavel would divide by zero (max-min) or never find a feasible horizon
//! (makespan) for them.

use crate::lp::{LinearProgram, LpError, Var};

/// Gavel's bisection on the makespan horizon starts with this interval, in seconds.
const HORIZON_MIN_S: f64 = 100.0;
/// Upper end of the first bisection interval, in seconds.
const HORIZON_MAX_S: f64 = 1_000_000.0;
/// The bisection stops once `max < 1.05 * min`.
const HORIZON_RATIO: f64 = 1.05;
/// The bisection widens its interval tenfold at most this many times before giving up.
const HORIZON_WIDENINGS: u32 = 12;

/// The fixed inputs of an allocation problem.
#[derive(Clone, Copy, Debug)]
pub struct AllocationProblem<'a> {
    /// `T[i][j]`, steps/s of job `i` on type `j` with all its workers; 0 means cannot run.
    pub throughputs: &'a [Vec<f64>],
    /// `sf_i`, GPUs each job uses.
    pub scale_factors: &'a [u32],
    /// `N_j`, GPUs of each type.
    pub capacity: &'a [u32],
}

impl AllocationProblem<'_> {
    fn types(&self) -> usize {
        self.capacity.len()
    }

    /// Checks that every per-job slice has one entry per job and every row one per type.
    fn check(&self, per_job: &[(&str, usize)]) -> Result<(), LpError> {
        let m = self.throughputs.len();
        if self.scale_factors.len() != m {
            return Err(LpError::InvalidInput(format!(
                "{m} throughput rows but {} scale factors",
                self.scale_factors.len()
            )));
        }
        for &(what, len) in per_job {
            if len != m {
                return Err(LpError::InvalidInput(format!(
                    "{m} throughput rows but {len} {what}"
                )));
            }
        }
        if let Some((i, row)) = self
            .throughputs
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() != self.types())
        {
            return Err(LpError::InvalidInput(format!(
                "throughput row {i} has {} entries for {} types",
                row.len(),
                self.types()
            )));
        }
        Ok(())
    }

    fn runnable(&self, i: usize) -> bool {
        self.throughputs[i].iter().any(|&t| t > 0.0)
    }

    /// Adds `X` for the runnable jobs with Gavel's base constraints; returns the variables
    /// (`None` rows for jobs left out).
    fn base_lp(&self, lp: &mut LinearProgram) -> Vec<Option<Vec<Var>>> {
        let n = self.types();
        let x: Vec<Option<Vec<Var>>> = (0..self.throughputs.len())
            .map(|i| {
                self.runnable(i)
                    .then(|| (0..n).map(|_| lp.add_nonneg()).collect())
            })
            .collect();
        for j in 0..n {
            let terms = x
                .iter()
                .zip(self.scale_factors)
                .filter_map(|(row, &sf)| row.as_ref().map(|r| (r[j], f64::from(sf))));
            lp.at_most(terms, f64::from(self.capacity[j]));
        }
        for row in x.iter().flatten() {
            lp.at_most(row.iter().map(|&v| (v, 1.0)), 1.0);
        }
        x
    }

    fn read(&self, x: &[Option<Vec<Var>>], sol: &crate::lp::Solution) -> Vec<Vec<f64>> {
        x.iter()
            .map(|row| match row {
                Some(r) => r.iter().map(|&v| sol.value(v).clamp(0.0, 1.0)).collect(),
                None => vec![0.0; self.types()],
            })
            .collect()
    }
}

/// Gavel's `max_min_fairness_perf`: maximise the smallest weighted, normalised effective
/// throughput `sum_j T[i][j] sf_i X[i][j] / (w_i T_i^eq)`, where `T_i^eq` is the job's
/// throughput when its time is split over the types in proportion to their GPU counts
/// (Gavel's `ProportionalPolicy`).
pub fn max_min_fairness_perf(
    p: &AllocationProblem<'_>,
    weights: &[f64],
) -> Result<Vec<Vec<f64>>, LpError> {
    p.check(&[("weights", weights.len())])?;
    let n = p.types();
    let total: f64 = p.capacity.iter().map(|&c| f64::from(c)).sum();
    let mut lp = LinearProgram::new();
    let x = p.base_lp(&mut lp);
    if x.iter().all(Option::is_none) {
        return Ok(vec![vec![0.0; n]; p.throughputs.len()]);
    }
    let t = lp.add_var(f64::NEG_INFINITY, f64::INFINITY);
    for (i, row) in x.iter().enumerate() {
        let Some(row) = row else { continue };
        let tp = &p.throughputs[i];
        let proportional: f64 = (0..n)
            .map(|j| tp[j] * f64::from(p.capacity[j]) / total)
            .sum();
        let w = if weights[i] > 0.0 { weights[i] } else { 1.0 };
        let scale = f64::from(p.scale_factors[i]) / (w * proportional);
        let mut terms: Vec<(Var, f64)> = vec![(t, 1.0)];
        terms.extend(row.iter().enumerate().map(|(j, &v)| (v, -tp[j] * scale)));
        lp.at_most(terms, 0.0);
    }
    lp.maximize([(t, 1.0)]);
    let sol = lp.solve()?;
    Ok(p.read(&x, &sol))
}

/// The outcome of [`min_total_duration_perf`].
#[derive(Clone, Debug, PartialEq)]
pub struct MakespanAllocation {
    /// The allocation, `X[i][j]`.
    pub allocation: Vec<Vec<f64>>,
    /// The horizon the bisection settled on, in seconds (the smallest feasible horizon it
    /// probed, within 5% above the optimum).
    pub horizon_s: f64,
    /// The smallest feasible horizon, in seconds.
    pub optimal_horizon_s: f64,
}

/// Gavel's `min_total_duration_perf`: the smallest horizon `H` such that every job can
/// finish its remaining steps within `H` (`sum_j T[i][j] X[i][j] >= steps_i / H`), found by
/// Gavel's bisection, and the allocation at that horizon.
///
/// Gavel bisects over `H` in [100 s, 10^6 s] (widening tenfold if nothing is feasible)
/// until the interval is within 5%, solving one feasibility LP per probe, and keeps the
/// solver's point for the last feasible probe. That point matters (the feasibility LP has
/// no objective, so the interior-point solver returns a central feasible point, not a
/// vertex), but the probes themselves only decide "is `H` at least the optimum". So this
/// solves one LP for the optimal horizon, replays Gavel's probe sequence against it, and
/// solves one feasibility LP at the horizon Gavel would have ended on: the same answer
/// with two solves instead of about twenty.
pub fn min_total_duration_perf(
    p: &AllocationProblem<'_>,
    remaining_steps: &[f64],
) -> Result<MakespanAllocation, LpError> {
    p.check(&[("remaining step counts", remaining_steps.len())])?;
    let n = p.types();
    let optimal = optimal_horizon(p, remaining_steps)?;
    let Some(optimal) = optimal else {
        return Ok(MakespanAllocation {
            allocation: vec![vec![0.0; n]; p.throughputs.len()],
            horizon_s: 0.0,
            optimal_horizon_s: 0.0,
        });
    };
    let horizon = gavel_bisection(optimal).ok_or(LpError::Infeasible)?;
    let mut lp = LinearProgram::new();
    let x = p.base_lp(&mut lp);
    for (i, row) in x.iter().enumerate() {
        let Some(row) = row else { continue };
        let tp = &p.throughputs[i];
        lp.at_least(
            row.iter().enumerate().map(|(j, &v)| (v, tp[j])),
            remaining_steps[i].max(0.0) / horizon,
        );
    }
    let sol = lp.solve()?;
    Ok(MakespanAllocation {
        allocation: p.read(&x, &sol),
        horizon_s: horizon,
        optimal_horizon_s: optimal,
    })
}

/// The smallest horizon in which every runnable job can finish, or `None` when there is no
/// runnable job with steps left.
fn optimal_horizon(
    p: &AllocationProblem<'_>,
    remaining_steps: &[f64],
) -> Result<Option<f64>, LpError> {
    // Maximise r = SCALE / H. Each job's row is divided by its remaining steps so that the
    // coefficients are rates of progress (fraction of the job per second), then scaled so
    // that r is of order one for horizons of hours.
    const SCALE_S: f64 = 10_000.0;
    let mut lp = LinearProgram::new();
    let x = p.base_lp(&mut lp);
    let r = lp.add_nonneg();
    let mut any = false;
    for (i, row) in x.iter().enumerate() {
        let Some(row) = row else { continue };
        let steps = remaining_steps[i];
        if steps <= 0.0 {
            continue;
        }
        any = true;
        let tp = &p.throughputs[i];
        let mut terms: Vec<(Var, f64)> = vec![(r, 1.0)];
        terms.extend(
            row.iter()
                .enumerate()
                .map(|(j, &v)| (v, -tp[j] * SCALE_S / steps)),
        );
        lp.at_most(terms, 0.0);
    }
    if !any {
        return Ok(None);
    }
    lp.maximize([(r, 1.0)]);
    let sol = lp.solve()?;
    let rate = sol.value(r);
    if rate <= 0.0 {
        return Err(LpError::Infeasible);
    }
    Ok(Some(SCALE_S / rate))
}

/// Replays Gavel's bisection over the horizon given the optimum: returns the last
/// feasible probe, or `None` if the optimum lies beyond every interval tried.
fn gavel_bisection(optimal: f64) -> Option<f64> {
    let (mut lo, mut hi) = (HORIZON_MIN_S, HORIZON_MAX_S);
    let mut last_hi = hi;
    let mut feasible = None;
    for _ in 0..HORIZON_WIDENINGS {
        while HORIZON_RATIO * lo < hi {
            let mid = (lo + hi) / 2.0;
            if mid >= optimal {
                feasible = Some(mid);
                hi = mid;
            } else {
                lo = mid;
            }
        }
        if feasible.is_some() {
            return feasible;
        }
        hi = last_hi * 10.0;
        lo = last_hi;
        last_hi *= 10.0;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn identical_jobs_share_equally() {
        // Two identical 1-GPU jobs, one type with one GPU: each gets half the time.
        let tp = vec![vec![2.0], vec![2.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1, 1],
            capacity: &[1],
        };
        let x = max_min_fairness_perf(&p, &[1.0, 1.0]).unwrap();
        assert!(
            close(x[0][0], 0.5, 1e-5) && close(x[1][0], 0.5, 1e-5),
            "{x:?}"
        );
    }

    #[test]
    fn weights_and_scale_factors_shift_time() {
        // Weight 3 vs 1 on one GPU: the heavier job gets 3/4 of the time.
        let tp = vec![vec![1.0], vec![1.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1, 1],
            capacity: &[1],
        };
        let x = max_min_fairness_perf(&p, &[3.0, 1.0]).unwrap();
        assert!(close(x[0][0], 0.75, 1e-5), "{x:?}");
        // A 2-GPU job and a 1-GPU job with equal rates on 2 GPUs: max-min equalises
        // sf * T * X, so the 1-GPU job gets twice the time: 2a = b and 2a + b <= 2.
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[2, 1],
            capacity: &[2],
        };
        let x = max_min_fairness_perf(&p, &[1.0, 1.0]).unwrap();
        assert!(
            close(x[0][0], 0.5, 1e-5) && close(x[1][0], 1.0, 1e-5),
            "{x:?}"
        );
    }

    #[test]
    fn heterogeneity_steers_jobs_to_their_fast_type() {
        // Job 0 is 4x faster on type 0, job 1 equally fast on both: the optimum gives
        // job 0 more of type 0 than job 1 gets. One GPU of each type.
        let tp = vec![vec![4.0, 1.0], vec![1.0, 1.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1, 1],
            capacity: &[1, 1],
        };
        let x = max_min_fairness_perf(&p, &[1.0, 1.0]).unwrap();
        assert!(x[0][0] > x[1][0], "{x:?}");
        for (a, b) in x[0].iter().zip(&x[1]) {
            assert!(a + b <= 1.0 + 1e-6);
        }
        for row in &x {
            assert!(row.iter().sum::<f64>() <= 1.0 + 1e-6);
        }
    }

    #[test]
    fn mismatched_lengths_are_refused() {
        let tp = vec![vec![1.0, 2.0], vec![1.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1, 1],
            capacity: &[1, 1],
        };
        assert!(matches!(
            max_min_fairness_perf(&p, &[1.0, 1.0]),
            Err(LpError::InvalidInput(_))
        ));
        let tp = vec![vec![1.0, 2.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1],
            capacity: &[1, 1],
        };
        assert!(matches!(
            min_total_duration_perf(&p, &[1.0, 2.0]),
            Err(LpError::InvalidInput(_))
        ));
        assert!(matches!(
            max_min_fairness_perf(&p, &[]),
            Err(LpError::InvalidInput(_))
        ));
    }

    #[test]
    fn unrunnable_jobs_get_nothing() {
        let tp = vec![vec![0.0, 0.0], vec![1.0, 2.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1, 1],
            capacity: &[1, 1],
        };
        let x = max_min_fairness_perf(&p, &[1.0, 1.0]).unwrap();
        assert_eq!(x[0], vec![0.0, 0.0]);
        let m = min_total_duration_perf(&p, &[100.0, 100.0]).unwrap();
        assert_eq!(m.allocation[0], vec![0.0, 0.0]);
    }

    #[test]
    fn makespan_horizon_matches_hand_computation() {
        // Two 1-GPU jobs of 3600 steps at 1 step/s on one GPU: the optimal horizon is 7200 s.
        let tp = vec![vec![1.0], vec![1.0]];
        let p = AllocationProblem {
            throughputs: &tp,
            scale_factors: &[1, 1],
            capacity: &[1],
        };
        let m = min_total_duration_perf(&p, &[3600.0, 3600.0]).unwrap();
        assert!(close(m.optimal_horizon_s, 7200.0, 1e-3), "{m:?}");
        assert!(m.horizon_s >= m.optimal_horizon_s && m.horizon_s <= 1.06 * m.optimal_horizon_s);
        // At that horizon each job needs at least 3600 / H of the GPU.
        for row in &m.allocation {
            assert!(row[0] >= 3600.0 / m.horizon_s - 1e-6, "{m:?}");
        }
        assert!(m.allocation[0][0] + m.allocation[1][0] <= 1.0 + 1e-6);
    }

    #[test]
    fn bisection_replays_gavels_probe_sequence() {
        // Gavel stops once its interval is within 5%, on a probe at or above the optimum.
        let h = gavel_bisection(7200.0).unwrap();
        assert!((7200.0..=7200.0 * 1.06).contains(&h), "{h}");
        // The same replay by explicit simulation of Gavel's loop.
        let (mut lo, mut hi, mut last) = (100.0f64, 1e6f64, None);
        while 1.05 * lo < hi {
            let mid = (lo + hi) / 2.0;
            if mid >= 7200.0 {
                last = Some(mid);
                hi = mid;
            } else {
                lo = mid;
            }
        }
        assert_eq!(Some(h), last);
        // Beyond 10^6 s the interval widens tenfold.
        let far = gavel_bisection(2.5e6).unwrap();
        assert!((2.5e6..=2.5e6 * 1.06).contains(&far), "{far}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, .. Default::default() })]

        /// Both allocations respect Gavel's base constraints, and the max-min optimum is at
        /// least as good as a feasible proportional split.
        #[test]
        fn allocations_respect_the_base_constraints(
            rows in proptest::collection::vec((0u32..3, 0.0f64..50.0, 0.0f64..50.0, 0.0f64..50.0, 1.0f64..1e5), 1..25),
            caps in (1u32..9, 1u32..9, 0u32..9),
        ) {
            let capacity = [caps.0, caps.1, caps.2];
            let tp: Vec<Vec<f64>> = rows.iter().map(|r| vec![r.1, r.2, r.3]).collect();
            let sf: Vec<u32> = rows.iter().map(|r| 1 << r.0).collect();
            let steps: Vec<f64> = rows.iter().map(|r| r.4).collect();
            let p = AllocationProblem { throughputs: &tp, scale_factors: &sf, capacity: &capacity };
            let weights = vec![1.0; tp.len()];
            let check = |x: &Vec<Vec<f64>>| -> Result<(), proptest::test_runner::TestCaseError> {
                for j in 0..3 {
                    let used: f64 = x.iter().zip(&sf).map(|(row, &s)| row[j] * f64::from(s)).sum();
                    proptest::prop_assert!(used <= f64::from(capacity[j]) + 1e-5, "type {} used {}", j, used);
                }
                for row in x {
                    proptest::prop_assert!(row.iter().sum::<f64>() <= 1.0 + 1e-5);
                    proptest::prop_assert!(row.iter().all(|&v| (0.0..=1.0).contains(&v)));
                }
                Ok(())
            };
            let x = max_min_fairness_perf(&p, &weights).unwrap();
            check(&x)?;
            let total: f64 = capacity.iter().map(|&c| f64::from(c)).sum();
            let score = |x: &Vec<Vec<f64>>| -> f64 {
                (0..tp.len())
                    .filter(|&i| tp[i].iter().any(|&t| t > 0.0))
                    .map(|i| {
                        let prop: f64 = (0..3).map(|j| tp[i][j] * f64::from(capacity[j]) / total).sum();
                        (0..3).map(|j| tp[i][j] * f64::from(sf[i]) * x[i][j]).sum::<f64>() / prop
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let baseline = crate::policies::gavel::proportional_split(&p);
            check(&baseline)?;
            proptest::prop_assert!(score(&x) >= score(&baseline) * (1.0 - 1e-5) - 1e-7, "{} < {}", score(&x), score(&baseline));
            let m = min_total_duration_perf(&p, &steps).unwrap();
            check(&m.allocation)?;
            proptest::prop_assert!(m.horizon_s >= m.optimal_horizon_s);
        }
    }
}
