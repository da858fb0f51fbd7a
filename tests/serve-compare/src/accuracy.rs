//! How far a prediction is from a measurement: the makespan's signed error and the mean
//! absolute error of the per-job completion times, in percent of the measured figures, per
//! run and over several runs.

/// One run's errors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunErrors {
    /// `(predicted - measured) / measured` of the makespan, in percent (signed).
    pub makespan_pct: f64,
    /// Mean over jobs of `|predicted JCT - measured JCT| / measured JCT`, in percent.
    pub mean_abs_jct_pct: f64,
}

/// Why errors cannot be computed.
#[derive(Clone, Debug, PartialEq)]
pub enum AccuracyError {
    /// The two lists of jobs differ in length.
    Lengths { predicted: usize, measured: usize },
    /// No job at all.
    Empty,
    /// A measured figure is not a positive number of seconds (job index, or `None` for the
    /// makespan).
    NotPositive(Option<usize>, f64),
}

impl std::fmt::Display for AccuracyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccuracyError::Lengths {
                predicted,
                measured,
            } => write!(f, "{predicted} predicted jobs against {measured} measured"),
            AccuracyError::Empty => write!(f, "no jobs to compare"),
            AccuracyError::NotPositive(None, v) => {
                write!(f, "measured makespan {v} s is not positive")
            }
            AccuracyError::NotPositive(Some(i), v) => {
                write!(f, "job {i}: measured JCT {v} s is not positive")
            }
        }
    }
}

/// The errors of one run: `predicted_jct[i]` and `measured_jct[i]` are the same job.
pub fn run_errors(
    predicted_makespan: f64,
    measured_makespan: f64,
    predicted_jct: &[f64],
    measured_jct: &[f64],
) -> Result<RunErrors, AccuracyError> {
    if predicted_jct.len() != measured_jct.len() {
        return Err(AccuracyError::Lengths {
            predicted: predicted_jct.len(),
            measured: measured_jct.len(),
        });
    }
    if measured_jct.is_empty() {
        return Err(AccuracyError::Empty);
    }
    if !(measured_makespan.is_finite() && measured_makespan > 0.0) {
        return Err(AccuracyError::NotPositive(None, measured_makespan));
    }
    let mut sum = 0.0;
    for (i, (p, m)) in predicted_jct.iter().zip(measured_jct).enumerate() {
        if !(m.is_finite() && *m > 0.0) {
            return Err(AccuracyError::NotPositive(Some(i), *m));
        }
        sum += (p - m).abs() / m;
    }
    Ok(RunErrors {
        makespan_pct: 100.0 * (predicted_makespan - measured_makespan) / measured_makespan,
        mean_abs_jct_pct: 100.0 * sum / measured_jct.len() as f64,
    })
}

/// Errors over several runs of one scheduler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Mean of the runs' absolute makespan errors, percent.
    pub mean_abs_makespan_pct: f64,
    /// The largest absolute makespan error of a run, percent.
    pub max_abs_makespan_pct: f64,
    /// Mean of the runs' mean absolute JCT errors, percent.
    pub mean_abs_jct_pct: f64,
}

/// Sums up runs; `None` when there are none.
pub fn summarise(runs: &[RunErrors]) -> Option<Summary> {
    if runs.is_empty() {
        return None;
    }
    let n = runs.len() as f64;
    Some(Summary {
        mean_abs_makespan_pct: runs.iter().map(|r| r.makespan_pct.abs()).sum::<f64>() / n,
        max_abs_makespan_pct: runs
            .iter()
            .map(|r| r.makespan_pct.abs())
            .fold(0.0, f64::max),
        mean_abs_jct_pct: runs.iter().map(|r| r.mean_abs_jct_pct).sum::<f64>() / n,
    })
}

/// The aim: makespan within 10% and mean absolute JCT error within 15%.
pub fn meets_aim(s: &Summary) -> bool {
    s.max_abs_makespan_pct <= 10.0 && s.mean_abs_jct_pct <= 15.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_relative_to_the_measurement() {
        let e = run_errors(110.0, 100.0, &[12.0, 45.0], &[10.0, 50.0]).unwrap();
        assert!((e.makespan_pct - 10.0).abs() < 1e-12);
        // |12-10|/10 = 20%, |45-50|/50 = 10%: mean 15%.
        assert!((e.mean_abs_jct_pct - 15.0).abs() < 1e-12);
        let under = run_errors(90.0, 100.0, &[10.0], &[10.0]).unwrap();
        assert!((under.makespan_pct + 10.0).abs() < 1e-12);
        assert_eq!(under.mean_abs_jct_pct, 0.0);
    }

    #[test]
    fn bad_inputs_are_refused_with_what_is_wrong() {
        assert_eq!(
            run_errors(1.0, 1.0, &[1.0], &[1.0, 2.0]),
            Err(AccuracyError::Lengths {
                predicted: 1,
                measured: 2
            })
        );
        assert_eq!(run_errors(1.0, 1.0, &[], &[]), Err(AccuracyError::Empty));
        assert_eq!(
            run_errors(1.0, 0.0, &[1.0], &[1.0]),
            Err(AccuracyError::NotPositive(None, 0.0))
        );
        let e = run_errors(1.0, 1.0, &[1.0, 1.0], &[1.0, f64::NAN]).unwrap_err();
        assert!(e.to_string().contains("job 1"), "{e}");
    }

    #[test]
    fn summaries_take_absolute_makespan_errors() {
        let runs = [
            RunErrors {
                makespan_pct: -8.0,
                mean_abs_jct_pct: 10.0,
            },
            RunErrors {
                makespan_pct: 4.0,
                mean_abs_jct_pct: 20.0,
            },
        ];
        let s = summarise(&runs).unwrap();
        assert_eq!(s.mean_abs_makespan_pct, 6.0);
        assert_eq!(s.max_abs_makespan_pct, 8.0);
        assert_eq!(s.mean_abs_jct_pct, 15.0);
        assert!(meets_aim(&s));
        assert!(!meets_aim(&Summary {
            max_abs_makespan_pct: 10.5,
            ..s
        }));
        assert!(summarise(&[]).is_none());
    }
}
