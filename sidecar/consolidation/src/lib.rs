//! HadarE's consolidation rule: at a round's end a forked job's copies are averaged with
//! weights `steps_k / sum(steps)`, so a copy that trained more moves the model more.
//!
//! Its own crate because two sides need the same rule and must not share more: the
//! scheduling core (the Job Tracker records each copy's weight, `hadar_core::tracker`) and
//! `hadar-average`, which runs as the job's user on compute nodes and so links nothing of
//! the scheduler. Pure: no IO, no dependencies.

/// Consolidation weights `steps_k / sum(steps)`. Steps that are not finite or not positive
/// count as none. When no copy did any step (a round cut short before the first step), every
/// copy gets an equal weight, so averaging is still defined and leaves identical copies
/// unchanged.
pub fn consolidation_weights(steps: &[f64]) -> Vec<f64> {
    let total: f64 = steps.iter().filter(|s| s.is_finite() && **s > 0.0).sum();
    if total <= 0.0 {
        let n = steps.len().max(1) as f64;
        return vec![1.0 / n; steps.len()];
    }
    steps
        .iter()
        .map(|s| {
            if s.is_finite() && *s > 0.0 {
                s / total
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn weights_follow_steps() {
        assert_eq!(consolidation_weights(&[1200.0, 800.0]), vec![0.6, 0.4]);
        assert_eq!(consolidation_weights(&[0.0, 0.0]), vec![0.5, 0.5]);
        assert_eq!(consolidation_weights(&[]), Vec::<f64>::new());
    }

    #[test]
    fn steps_that_are_not_positive_and_finite_weigh_nothing() {
        assert_eq!(
            consolidation_weights(&[f64::NAN, 300.0, -5.0, 100.0, f64::INFINITY]),
            vec![0.0, 0.75, 0.0, 0.25, 0.0]
        );
    }

    proptest! {
        #[test]
        fn weights_sum_to_one(steps in prop::collection::vec(0.0f64..1e6, 1..16)) {
            let w = consolidation_weights(&steps);
            let sum: f64 = w.iter().sum();
            prop_assert!((sum - 1.0).abs() < 1e-9);
            prop_assert!(w.iter().all(|x| (0.0..=1.0).contains(x)));
        }
    }
}
