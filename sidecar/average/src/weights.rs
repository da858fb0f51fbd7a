//! Where the averaging weights come from: `FILE:STEPS` arguments, or a Job Tracker record
//! (the JSON lines `hadar simulate --trace-out` and the daemon write; see
//! `hadar_core::tracker::TrackerRecord`). Weights are the copies' steps normalised to sum
//! to 1; when no copy did any step, every copy weighs the same.

use serde::Deserialize;
use std::path::PathBuf;

/// Bad weights or a bad tracker file.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WeightsError {
    /// A `FILE:STEPS` argument whose steps are negative or not finite.
    #[error("`{0}`: steps must be a finite non-negative number")]
    BadSteps(String),
    /// A tracker line that is not a record.
    #[error("line {line}: not a Job Tracker record: {reason}")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// Why.
        reason: String,
    },
    /// A copy with neither steps nor weight.
    #[error("line {line}: copy {copy} has neither `steps` nor `weight`")]
    CopyWithoutSteps {
        /// 1-based line number.
        line: usize,
        /// 0-based copy index.
        copy: usize,
    },
    /// No forked record matches the selection.
    #[error("no forked-job record matches{0}")]
    NoRecord(String),
    /// Several records match.
    #[error(
        "{count} forked-job records match{filter}; choose one with --job and --round (and --policy for simulator output)"
    )]
    Ambiguous {
        /// How many matched.
        count: usize,
        /// The filter as text.
        filter: String,
    },
}

/// Splits `PATH:STEPS` at its last colon when what follows is a number; otherwise the whole
/// argument is a path with no steps (so paths containing colons still work).
pub fn parse_input_spec(arg: &str) -> Result<(PathBuf, Option<f64>), WeightsError> {
    if let Some((path, steps)) = arg.rsplit_once(':')
        && !path.is_empty()
        && let Ok(s) = steps.trim().parse::<f64>()
    {
        if !(s.is_finite() && s >= 0.0) {
            return Err(WeightsError::BadSteps(arg.to_string()));
        }
        return Ok((PathBuf::from(path), Some(s)));
    }
    Ok((PathBuf::from(arg), None))
}

/// Normalises steps to weights summing to 1 (equal weights when all are zero).
pub fn normalise_weights(steps: &[f64]) -> Result<Vec<f64>, WeightsError> {
    if let Some(bad) = steps.iter().find(|s| !(s.is_finite() && **s >= 0.0)) {
        return Err(WeightsError::BadSteps(bad.to_string()));
    }
    Ok(hadar_consolidation::consolidation_weights(steps))
}

/// The copies of one tracker record, in copy order.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackerCopies {
    /// The job.
    pub job: u64,
    /// The round.
    pub round: u64,
    /// Each copy's steps (or, when a record carries only weights, its weight).
    pub steps: Vec<f64>,
    /// Each copy's checkpoint path, when the record carries one.
    pub checkpoints: Vec<Option<PathBuf>>,
}

#[derive(Deserialize)]
struct Line {
    round: u64,
    job: u64,
    kind: String,
    copies: Vec<CopyLine>,
    #[serde(default)]
    policy: Option<String>,
}

#[derive(Deserialize)]
struct CopyLine {
    #[serde(default)]
    steps: Option<f64>,
    #[serde(default)]
    weight: Option<f64>,
    #[serde(default)]
    checkpoint: Option<PathBuf>,
}

/// Picks one forked-job record from Job Tracker JSON lines: the one matching `job`,
/// `round` and `policy` where given; exactly one must match.
pub fn read_tracker(
    text: &str,
    job: Option<u64>,
    round: Option<u64>,
    policy: Option<&str>,
) -> Result<TrackerCopies, WeightsError> {
    let mut found = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).map_err(|e| WeightsError::BadLine {
            line: i + 1,
            reason: e.to_string(),
        })?;
        if line.kind != "forked"
            || job.is_some_and(|j| j != line.job)
            || round.is_some_and(|r| r != line.round)
            || policy.is_some_and(|p| line.policy.as_deref() != Some(p))
        {
            continue;
        }
        let mut steps = Vec::with_capacity(line.copies.len());
        for (k, c) in line.copies.iter().enumerate() {
            let s = c.steps.or(c.weight).ok_or(WeightsError::CopyWithoutSteps {
                line: i + 1,
                copy: k,
            })?;
            if !(s.is_finite() && s >= 0.0) {
                return Err(WeightsError::BadLine {
                    line: i + 1,
                    reason: format!("copy {k}: steps {s} is not a finite non-negative number"),
                });
            }
            steps.push(s);
        }
        let checkpoints = line.copies.into_iter().map(|c| c.checkpoint).collect();
        found.push(TrackerCopies {
            job: line.job,
            round: line.round,
            steps,
            checkpoints,
        });
    }
    let filter = describe(job, round, policy);
    match found.len() {
        0 => Err(WeightsError::NoRecord(filter)),
        1 => Ok(found.remove(0)),
        count => Err(WeightsError::Ambiguous { count, filter }),
    }
}

fn describe(job: Option<u64>, round: Option<u64>, policy: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(j) = job {
        parts.push(format!("job {j}"));
    }
    if let Some(r) = round {
        parts.push(format!("round {r}"));
    }
    if let Some(p) = policy {
        parts.push(format!("policy {p}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_specs_split_at_the_last_numeric_colon() {
        assert_eq!(
            parse_input_spec("a.safetensors:1200").unwrap(),
            (PathBuf::from("a.safetensors"), Some(1200.0))
        );
        assert_eq!(
            parse_input_spec("dir:x/a.safetensors:8").unwrap(),
            (PathBuf::from("dir:x/a.safetensors"), Some(8.0))
        );
        assert_eq!(
            parse_input_spec("dir:x/a.safetensors").unwrap(),
            (PathBuf::from("dir:x/a.safetensors"), None)
        );
        assert_eq!(
            parse_input_spec("a:-3"),
            Err(WeightsError::BadSteps("a:-3".into()))
        );
        assert_eq!(
            parse_input_spec("a:NaN"),
            Err(WeightsError::BadSteps("a:NaN".into()))
        );
    }

    #[test]
    fn weights_are_normalised_steps() {
        assert_eq!(normalise_weights(&[1200.0, 800.0]).unwrap(), vec![0.6, 0.4]);
        assert_eq!(
            normalise_weights(&[0.0, 0.0, 0.0]).unwrap(),
            vec![1.0 / 3.0; 3]
        );
        assert!(normalise_weights(&[1.0, -1.0]).is_err());
    }

    const TRACE: &str = r#"{"round":0,"job":1,"start_s":0,"end_s":360,"kind":"forked","copies":[{"node":"v100-0","gpu_type":"v100","gpus":1,"steps":1200,"weight":0.6},{"node":"k80-0","gpu_type":"k80","gpus":1,"steps":800,"weight":0.4}],"aggregated_steps":2000,"remaining_steps":0,"policy":"hadare"}
{"round":0,"job":2,"start_s":0,"end_s":360,"kind":"gang","copies":[{"node":"p100-0","gpu_type":"p100","gpus":1}],"aggregated_steps":100,"remaining_steps":0,"policy":"hadare"}

{"round":1,"job":1,"start_s":360,"end_s":720,"kind":"forked","copies":[{"node":"v100-0","gpu_type":"v100","gpus":1,"weight":0.25,"checkpoint":"/c/a"},{"node":"k80-0","gpu_type":"k80","gpus":1,"weight":0.75,"checkpoint":"/c/b"}],"aggregated_steps":10,"remaining_steps":0,"policy":"hadare"}
"#;

    #[test]
    fn a_record_is_selected_by_job_and_round() {
        let r = read_tracker(TRACE, Some(1), Some(0), None).unwrap();
        assert_eq!(r.steps, vec![1200.0, 800.0]);
        assert_eq!(r.checkpoints, vec![None, None]);
        let r = read_tracker(TRACE, None, Some(1), Some("hadare")).unwrap();
        assert_eq!(r.steps, vec![0.25, 0.75]);
        assert_eq!(r.checkpoints[1], Some(PathBuf::from("/c/b")));
    }

    #[test]
    fn selection_must_be_unique_and_forked() {
        assert!(matches!(
            read_tracker(TRACE, Some(1), None, None),
            Err(WeightsError::Ambiguous { count: 2, .. })
        ));
        assert!(matches!(
            read_tracker(TRACE, Some(2), None, None),
            Err(WeightsError::NoRecord(_))
        ));
        assert!(matches!(
            read_tracker(TRACE, None, None, Some("gavel")),
            Err(WeightsError::NoRecord(_))
        ));
        assert!(matches!(
            read_tracker("{\"round\":0}\n", None, None, None),
            Err(WeightsError::BadLine { line: 1, .. })
        ));
        let no_steps = r#"{"round":0,"job":1,"kind":"forked","copies":[{"node":"a"}]}"#;
        assert_eq!(
            read_tracker(no_steps, None, None, None),
            Err(WeightsError::CopyWithoutSteps { line: 1, copy: 0 })
        );
    }
}
