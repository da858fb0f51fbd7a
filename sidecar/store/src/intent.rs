//! What an intent does and how it ended, as types. The store keeps them as the words it has
//! always kept (`start`, `requeue-hold`; `ok`, `skipped: WHY`, `error: WHY`,
//! `interrupted`), so state files written before these types still open.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// An action the daemon takes on a job, written as an intent before it is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntentKind {
    /// Give a held job its GPUs and release it.
    Start,
    /// Checkpoint a running job and requeue it held.
    Preempt,
    /// Hold a pending job.
    Hold,
    /// Requeue a running job held (it left hold without the daemon).
    RequeueHold,
    /// Take back a job `hadar fail-open` handed to Slurm before it started.
    TakeBack,
    /// Adopt a job that started while failed open.
    Adopt,
}

impl IntentKind {
    /// Every kind.
    pub const ALL: [IntentKind; 6] = [
        IntentKind::Start,
        IntentKind::Preempt,
        IntentKind::Hold,
        IntentKind::RequeueHold,
        IntentKind::TakeBack,
        IntentKind::Adopt,
    ];

    /// The word stored for it.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentKind::Start => "start",
            IntentKind::Preempt => "preempt",
            IntentKind::Hold => "hold",
            IntentKind::RequeueHold => "requeue-hold",
            IntentKind::TakeBack => "take-back",
            IntentKind::Adopt => "adopt",
        }
    }

    /// Whether it left the job held after a requeue or a hold by the daemon (what a start
    /// soon after must wait out, and what tells the daemon's own release from another's).
    pub fn requeues_or_holds(self) -> bool {
        matches!(
            self,
            IntentKind::Preempt | IntentKind::RequeueHold | IntentKind::Hold
        )
    }
}

impl fmt::Display for IntentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored word that names no intent kind or outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown intent {what} `{text}`")]
pub struct UnknownWord {
    /// `action` or `outcome`.
    pub what: &'static str,
    /// The word.
    pub text: String,
}

impl FromStr for IntentKind {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IntentKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownWord {
                what: "action",
                text: s.to_string(),
            })
    }
}

/// How a carried-out intent ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done.
    Ok,
    /// Not needed any more: Slurm showed the job in another state (why).
    Skipped(String),
    /// Slurm refused or failed (its message).
    Error(String),
    /// An earlier run left it unfinished; Slurm's state decided what happened next.
    Interrupted,
}

impl Outcome {
    /// Whether it was done.
    pub fn is_ok(&self) -> bool {
        *self == Outcome::Ok
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Skipped(why) => write!(f, "skipped: {why}"),
            Outcome::Error(why) => write!(f, "error: {why}"),
            Outcome::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl FromStr for Outcome {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ok" => Ok(Outcome::Ok),
            "interrupted" => Ok(Outcome::Interrupted),
            _ => {
                if let Some(why) = s.strip_prefix("skipped: ") {
                    Ok(Outcome::Skipped(why.to_string()))
                } else if let Some(why) = s.strip_prefix("error: ") {
                    Ok(Outcome::Error(why.to_string()))
                } else {
                    Err(UnknownWord {
                        what: "outcome",
                        text: s.to_string(),
                    })
                }
            }
        }
    }
}

macro_rules! serde_as_words {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_as_words!(IntentKind);
serde_as_words!(Outcome);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_their_stored_words() {
        let words: Vec<&str> = IntentKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            words,
            [
                "start",
                "preempt",
                "hold",
                "requeue-hold",
                "take-back",
                "adopt"
            ]
        );
        for k in IntentKind::ALL {
            assert_eq!(k.to_string().parse::<IntentKind>(), Ok(k));
        }
        assert!("requeue".parse::<IntentKind>().is_err());
    }

    #[test]
    fn outcomes_read_back_as_written() {
        for o in [
            Outcome::Ok,
            Outcome::Interrupted,
            Outcome::Skipped("no longer running".into()),
            Outcome::Error("scontrol: Invalid job id specified".into()),
        ] {
            assert_eq!(o.to_string().parse::<Outcome>(), Ok(o));
        }
        assert_eq!(
            "skipped: job is RUNNING and not held".parse::<Outcome>(),
            Ok(Outcome::Skipped("job is RUNNING and not held".into()))
        );
        assert!("fine".parse::<Outcome>().is_err());
        assert_eq!(
            serde_json::to_string(&Outcome::Error("x".into())).unwrap(),
            "\"error: x\""
        );
    }
}
