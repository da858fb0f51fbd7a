//! What the round's actions did, typed: the job, the kind of action and its outcome. The
//! round's record (`hadar status`) shows them in words ([`ActionDone`]'s `Display`); the
//! metrics count them by kind and outcome without reading the words back.

use hadar_store::{IntentKind, Outcome};
use std::fmt;

/// The actions of a round (or of its reading, for forked jobs' open rounds), in order.
pub type ActionLog = Vec<ActionDone>;

/// One action the daemon carried out.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionDone {
    /// The job.
    pub job: u64,
    /// What was done to it.
    pub action: ActionKind,
    /// How it ended.
    pub outcome: ActionOutcome,
}

impl ActionDone {
    /// `action` on `job`, ended `outcome`.
    pub fn new(job: u64, action: ActionKind, outcome: ActionOutcome) -> Self {
        ActionDone {
            job,
            action,
            outcome,
        }
    }
}

/// The kinds of action, as the round's record names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionKind {
    /// A held job given its GPUs and released.
    Start,
    /// A running job checkpointed and requeued held.
    Preempt,
    /// A running job signalled to checkpoint (its preemption's first half: it is requeued
    /// once its grace time is over).
    Checkpoint,
    /// A pending job held.
    Hold,
    /// A forked job's open round could not be moved on.
    Fork,
    /// A forked job's copy job cancelled (the job left Slurm).
    ForkCancel,
    /// A forked job's round abandoned and done again.
    ForkRedo,
    /// A forked job released to end (its steps done, or failed).
    ForkRelease,
    /// A forked job's round ended without a usable copy.
    ForkRoundFailed,
    /// A forked job's round consolidated and counted.
    ForkConsolidate,
    /// A copy job found in Slurm taken as the open round's.
    ForkAdopt,
    /// A forked job's round of copies submitted.
    ForkStart,
}

impl ActionKind {
    /// The word the round's record uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Start => IntentKind::Start.as_str(),
            ActionKind::Preempt => IntentKind::Preempt.as_str(),
            ActionKind::Hold => IntentKind::Hold.as_str(),
            ActionKind::Checkpoint => "checkpoint",
            ActionKind::Fork => "fork",
            ActionKind::ForkCancel => "fork-cancel",
            ActionKind::ForkRedo => "fork-redo",
            ActionKind::ForkRelease => "fork-release",
            ActionKind::ForkRoundFailed => "fork-round-failed",
            ActionKind::ForkConsolidate => "fork-consolidate",
            ActionKind::ForkAdopt => "fork-adopt",
            ActionKind::ForkStart => "fork-start",
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an action ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionOutcome {
    /// An intent's outcome, as the store closed it.
    Intent(Outcome),
    /// Done; what it did, in words (`round 3: copy job 812 with 2 copies on ...`).
    Done(String),
    /// Slurm or the store refused it (the message).
    Failed(String),
}

impl ActionOutcome {
    /// Whether Slurm (or the store) refused or failed it.
    pub fn failed(&self) -> bool {
        matches!(
            self,
            ActionOutcome::Failed(_) | ActionOutcome::Intent(Outcome::Error(_))
        )
    }

    /// Whether it was not needed any more (Slurm showed the job in another state).
    pub fn skipped(&self) -> bool {
        matches!(self, ActionOutcome::Intent(Outcome::Skipped(_)))
    }
}

impl fmt::Display for ActionOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionOutcome::Intent(o) => o.fmt(f),
            ActionOutcome::Done(text) => f.write_str(text),
            ActionOutcome::Failed(why) => write!(f, "error: {why}"),
        }
    }
}

impl fmt::Display for ActionDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.action, self.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_read_as_the_round_record_words_them() {
        let start = ActionDone::new(7, ActionKind::Start, ActionOutcome::Intent(Outcome::Ok));
        assert_eq!(start.to_string(), "start: ok");
        let skipped = ActionOutcome::Intent(Outcome::Skipped("it ended".into()));
        assert!(skipped.skipped() && !skipped.failed());
        assert_eq!(skipped.to_string(), "skipped: it ended");
        let failed = ActionDone::new(8, ActionKind::ForkStart, ActionOutcome::Failed("no".into()));
        assert!(failed.outcome.failed());
        assert_eq!(failed.to_string(), "fork-start: error: no");
        assert!(ActionOutcome::Intent(Outcome::Error("x".into())).failed());
        assert!(!ActionOutcome::Done("round 2".into()).failed());
    }
}
