//! The progress channel: a running job writes its progress into its own Slurm `Comment`
//! (`scontrol update JobId=$SLURM_JOB_ID Comment=...`), which only the job's owner and Slurm's
//! administrators may change, and the daemon reads it back with the job's other fields. No
//! network port is involved, and it works wherever `scontrol` works.
//!
//! Format: `hadar-progress:v1 steps=S rate=R`, with `S` the steps done so far (whole run,
//! including before any restart) and `R` the job's current steps/s; both non-negative
//! numbers.

/// The tag a progress comment starts with.
pub const TAG: &str = "hadar-progress:v1";

/// One progress report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Steps done so far.
    pub steps: f64,
    /// Current steps/s.
    pub rate: f64,
}

impl Progress {
    /// The report as the comment text.
    pub fn encode(&self) -> String {
        format!("{TAG} steps={} rate={:.6}", self.steps, self.rate)
    }

    /// Reads a comment; `None` when it is not a well-formed report (a user's ordinary
    /// comment, or garbage: the daemon then simply has no new progress).
    pub fn decode(comment: &str) -> Option<Progress> {
        let mut words = comment.split_whitespace();
        if words.next() != Some(TAG) {
            return None;
        }
        let (mut steps, mut rate) = (None, None);
        for w in words {
            let (k, v) = w.split_once('=')?;
            let x: f64 = v
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)?;
            let slot = match k {
                "steps" => &mut steps,
                "rate" => &mut rate,
                _ => return None,
            };
            if slot.replace(x).is_some() {
                return None;
            }
        }
        Some(Progress {
            steps: steps?,
            rate: rate?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reports_round_trip_and_junk_is_ignored() {
        let p = Progress {
            steps: 120.0,
            rate: 4.5,
        };
        assert_eq!(Progress::decode(&p.encode()), Some(p));
        assert_eq!(Progress::decode("hello"), None);
        assert_eq!(Progress::decode("hadar-progress:v1 steps=1"), None);
        assert_eq!(Progress::decode("hadar-progress:v1 steps=-1 rate=2"), None);
        assert_eq!(
            Progress::decode("hadar-progress:v1 steps=1 rate=2 steps=3"),
            None
        );
        assert_eq!(Progress::decode("hadar-progress:v1 steps=nan rate=2"), None);
    }

    proptest! {
        #[test]
        fn decode_never_panics(s in "(hadar-progress:v1 )?[a-z=0-9. e+-]{0,40}") {
            let _ = Progress::decode(&s);
        }

        #[test]
        fn encode_decode(steps in 0u32..1_000_000, rate in 0.0f64..1e4) {
            let p = Progress::decode(&Progress { steps: steps as f64, rate }.encode()).unwrap();
            prop_assert_eq!(p.steps, steps as f64);
            prop_assert!((p.rate - rate).abs() < 1e-5);
        }
    }
}
