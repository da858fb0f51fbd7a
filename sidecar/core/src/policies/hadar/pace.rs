//! The pace boost: long jobs that have started are kept up to an even pace to the horizon.
//!
//! The makespan guard starts a long job by its latest start time, but once started, a job
//! with slack competes with short ones on utility alone and can be held back for many
//! rounds or run on slow types, so the long jobs reach the end behind and the makespan
//! slips (docs/results-gavel.md, seventh step). This is a stateless form of Gavel's
//! makespan rule (allocation over what was received): a started job's share of its steps
//! done is compared with the share it would have done running evenly from its first start
//! to the guard's horizon, and a job behind that pace bids more in the primal-dual (its
//! makespan-aware factor is scaled up). It changes only utilities: prices, the per-job DP
//! and the order of the priced pass are untouched. Pure: no clock, no IO.

/// The factor on a job's makespan-aware utility weight: `1 + weight * behind * share`,
/// where `behind` is how far its share of steps done lags `life / (life + horizon)`
/// (`life`: seconds since its first start) and `share` its remaining best time over the
/// horizon (at most 1), so short jobs, which can still wait, are hardly boosted. 1 for a
/// job that has not started, whose best time is under `min_share` of the horizon, or when
/// any input is unusable.
pub fn pace_factor(
    weight: f64,
    min_share: f64,
    life_s: Option<f64>,
    remaining_steps: f64,
    total_steps: f64,
    best_time_s: f64,
    horizon_s: f64,
) -> f64 {
    let Some(life_s) = life_s else {
        return 1.0;
    };
    let usable = weight > 0.0
        && weight.is_finite()
        && horizon_s > 0.0
        && horizon_s.is_finite()
        && total_steps > 0.0
        && best_time_s.is_finite();
    if !usable {
        return 1.0;
    }
    let share = (best_time_s / horizon_s).min(1.0);
    if share < min_share {
        return 1.0;
    }
    let life_s = life_s.max(0.0);
    let even = life_s / (life_s + horizon_s);
    let done = (1.0 - remaining_steps / total_steps).clamp(0.0, 1.0);
    1.0 + weight * (even - done).max(0.0) * share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_long_job_behind_its_pace_is_boosted() {
        // Started 1,000 s ago, 10% done, 1,000 s of horizon left: an even pace would have
        // done half, so it is 0.4 behind; its best time is the whole horizon.
        let f = pace_factor(3.0, 0.3, Some(1000.0), 90.0, 100.0, 1000.0, 1000.0);
        assert!((f - (1.0 + 3.0 * 0.4)).abs() < 1e-12, "{f}");
        // Half as long a job gets half the boost.
        let f = pace_factor(3.0, 0.3, Some(1000.0), 90.0, 100.0, 500.0, 1000.0);
        assert!((f - (1.0 + 3.0 * 0.4 * 0.5)).abs() < 1e-12, "{f}");
    }

    #[test]
    fn jobs_on_pace_short_or_not_started_are_left_alone() {
        // (weight, seconds since the first start, remaining steps of 100, best time, horizon)
        let cases = [
            (
                "ahead of its pace",
                (3.0, Some(1000.0), 40.0, 1000.0, 1000.0),
            ),
            (
                "too short a share of the horizon",
                (3.0, Some(1000.0), 90.0, 200.0, 1000.0),
            ),
            // The guard's latest start time covers a job not started yet.
            ("not started", (3.0, None, 100.0, 1000.0, 1000.0)),
            ("turned off", (0.0, Some(1000.0), 90.0, 1000.0, 1000.0)),
            ("no horizon", (3.0, Some(1000.0), 90.0, 1000.0, 0.0)),
        ];
        for (what, (weight, started, remaining, best, horizon)) in cases {
            let f = pace_factor(weight, 0.3, started, remaining, 100.0, best, horizon);
            assert_eq!(f, 1.0, "{what}");
        }
    }
}
