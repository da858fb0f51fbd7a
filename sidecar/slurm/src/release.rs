//! Which Slurm release hadar talks to, and so how it reads that release's answers.
//!
//! Releases with data_parser v0.0.40 or later (23.11 on; tested: 24.11 and 26.05) answer
//! `scontrol ... --json` in the form [`crate::json`] reads. Older ones (Debian 12's 22.05)
//! are read from `scontrol`'s text, the one form they have that carries everything hadar
//! needs.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A Slurm release, as `scontrol --version` names it (`slurm 26.05.3`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SlurmRelease {
    /// The year-based major number (26 for 26.05.3).
    pub major: u32,
    /// The month (5 for 26.05.3).
    pub minor: u32,
    /// The maintenance release (3 for 26.05.3).
    pub micro: u32,
}

/// How a release's answers are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadForm {
    /// `scontrol ... --json`, data_parser v0.0.40 or later.
    Json,
    /// `scontrol`'s multi-line text.
    Text,
}

impl SlurmRelease {
    /// Parses `scontrol --version` output (`slurm 26.05.3`, `slurm-wlm 22.05.8`), or a bare
    /// release (`24.11.7`).
    pub fn parse(text: &str) -> Option<SlurmRelease> {
        let word = text.split_whitespace().last()?;
        let mut parts = word.split(['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let micro = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
        Some(SlurmRelease {
            major,
            minor,
            micro,
        })
    }

    /// How this release's answers are read: JSON from 23.11 on, when data_parser v0.0.40
    /// (the first whose form [`crate::json`] reads) came.
    pub fn read_form(&self) -> ReadForm {
        if (self.major, self.minor) >= (23, 11) {
            ReadForm::Json
        } else {
            ReadForm::Text
        }
    }

    /// True where a pending job's GPU request may be changed to other GPU types (the old
    /// types are dropped): seen on 24.11.7 and 26.05.3 (`docs/slurm-releases.md`); 22.05
    /// keeps every type a job was ever given (see `GpuSpec::update_fields`). Releases
    /// between were not tested and are treated as 22.05 is.
    pub fn retypes_pending_jobs(&self) -> bool {
        (self.major, self.minor) >= (24, 11)
    }
}

impl fmt::Display for SlurmRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.major, self.minor, self.micro)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_in_their_spellings() {
        let r = SlurmRelease::parse("slurm 26.05.3\n").unwrap();
        assert_eq!((r.major, r.minor, r.micro), (26, 5, 3));
        assert_eq!(r.to_string(), "26.05.3");
        assert_eq!(
            SlurmRelease::parse("slurm-wlm 22.05.8")
                .unwrap()
                .read_form(),
            ReadForm::Text
        );
        assert_eq!(
            SlurmRelease::parse("24.11.7").unwrap().read_form(),
            ReadForm::Json
        );
        assert!(SlurmRelease::parse("slurm").is_none());
        assert!(SlurmRelease::parse("").is_none());
    }

    #[test]
    fn retyping_came_after_22_05() {
        assert!(
            !SlurmRelease::parse("22.05.8")
                .unwrap()
                .retypes_pending_jobs()
        );
        assert!(
            SlurmRelease::parse("24.11.7")
                .unwrap()
                .retypes_pending_jobs()
        );
    }
}
