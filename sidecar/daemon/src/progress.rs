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
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn decode_never_panics(s in "(hadar-progress:v1 )?[a-z=0-9. e+-]{0,40}") {
            let _ = Progress::decode(&s);
        }

        /// A comment is the job owner's free text: arbitrary bytes (read lossily), oversized
        /// or truncated reports are either ignored or read as finite, non-negative numbers.
        #[test]
        fn arbitrary_comments_are_ignored_or_sane(
            b in proptest::collection::vec(any::<u8>(), 0..300),
            cut in 0usize..60,
            big in "[0-9]{300,400}",
        ) {
            let text = String::from_utf8_lossy(&b);
            for c in [
                text.to_string(),
                format!("{TAG} {text}"),
                format!("{TAG} steps={big} rate=1"),
                format!("{TAG} steps=1e308 rate=1e308"),
                "hadar-progress:v1 steps=120 rate=4.5".chars().take(cut).collect::<String>(),
            ] {
                if let Some(p) = Progress::decode(&c) {
                    prop_assert!(p.steps.is_finite() && p.steps >= 0.0);
                    prop_assert!(p.rate.is_finite() && p.rate >= 0.0);
                }
            }
        }

        #[test]
        fn encode_decode(steps in 0u32..1_000_000, rate in 0.0f64..1e4) {
            let p = Progress::decode(&Progress { steps: steps as f64, rate }.encode()).unwrap();
            prop_assert_eq!(p.steps, steps as f64);
            prop_assert!((p.rate - rate).abs() < 1e-5);
        }
    }
}
