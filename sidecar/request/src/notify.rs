//! The notice the plugin sends the sidecar for each new managed job (component).
//!
//! The job id does not exist yet when `job_submit` runs (Slurm assigns it afterwards), so the
//! notice is a wake-up hint, not the record of truth: it tells the sidecar that a managed job
//! arrived, from which user and with which request; the sidecar then reads the held jobs and
//! their recorded requests from Slurm. One notice is one line:
//! `hadar-notice v1 uid=UID RECORD`, where RECORD is [`Record::encode`]'s text.

use crate::record::{Record, RecordError};

/// The first word and version of every notice.
pub const NOTICE_TAG: &str = "hadar-notice v1";

/// A new managed job, as announced to the sidecar.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The submitting user's id.
    pub uid: u32,
    /// The job's recorded request.
    pub record: Record,
}

/// Why a notice line could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoticeError {
    /// Not a notice of this version.
    #[error("not a hadar notice: `{0}`")]
    NotANotice(String),
    /// The record part is broken.
    #[error(transparent)]
    Record(#[from] RecordError),
}

impl Notice {
    /// The notice as one line, newline included.
    pub fn encode(&self) -> String {
        format!("{NOTICE_TAG} uid={} {}\n", self.uid, self.record.encode())
    }

    /// Reads a notice line (with or without its newline).
    pub fn decode(line: &str) -> Result<Notice, NoticeError> {
        let not = || NoticeError::NotANotice(crate::excerpt(line));
        let rest = line
            .trim_end_matches('\n')
            .strip_prefix(NOTICE_TAG)
            .ok_or_else(not)?;
        let rest = rest.strip_prefix(" uid=").ok_or_else(not)?;
        let (uid, record) = rest.split_once(' ').ok_or_else(not)?;
        let uid: u32 = uid.parse().map_err(|_| not())?;
        Ok(Notice {
            uid,
            record: Record::decode(record)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notice_round_trips() {
        let record = Record::decode("hadar:v1 gpus=v100:2 steps=10").unwrap();
        let notice = Notice { uid: 1000, record };
        let line = notice.encode();
        assert_eq!(
            line,
            "hadar-notice v1 uid=1000 hadar:v1 gpus=v100:2 steps=10\n"
        );
        assert_eq!(Notice::decode(&line).unwrap(), notice);
        assert!(matches!(
            Notice::decode("hello"),
            Err(NoticeError::NotANotice(_))
        ));
        assert!(matches!(
            Notice::decode("hadar-notice v1 uid=x hadar:v1 gpus=1"),
            Err(NoticeError::NotANotice(_))
        ));
    }
}
