//! The gate stage's vocabulary: why Slurm itself would not start a waiting job yet,
//! whatever GPUs it had. The round leaves such a job out of the plan and it waits with
//! [`crate::WaitReason::SlurmHolds`]. Whoever knows the site decides the holds (the daemon
//! from Slurm's records, the simulator from a site file); the words and the rule for
//! partitions are here, once, so that both say the same.

use serde::{Deserialize, Serialize};

/// What holds a job back in Slurm. Its JSON (in a decision's `wait_reason`, as
/// `{"reason": "slurm_holds", "hold": ...}`) is `"user_hold"`, `{"dependency":
/// "afterok:8"}`, `{"begin": UNIX}`, `{"licenses": "matlab:1"}` or
/// `{"partition_closed": "gpu (DOWN)"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// Submitted held by its user and not released since.
    UserHold,
    /// Its dependency (as Slurm shows it) is not satisfied.
    Dependency(String),
    /// Not eligible before this Unix time (`--begin`).
    Begin(i64),
    /// The licenses it asks for (its `Licenses=`) are not free.
    Licenses(String),
    /// None of its partitions starts jobs (`State=DOWN` or `INACTIVE`, as an admin sets
    /// for maintenance): `gpu (DOWN)`.
    PartitionClosed(String),
}

impl std::fmt::Display for Hold {
    /// What the job waits for, in words: `waiting for its dependency afterok:8`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hold::UserHold => f.write_str("held by its user; `scontrol release` it to queue it"),
            Hold::Dependency(d) => write!(f, "waiting for its dependency {d}"),
            Hold::Begin(t) => write!(f, "not before its begin time, {}", format_time_utc(*t)),
            Hold::Licenses(l) => write!(f, "waiting for its licenses {l}"),
            Hold::PartitionClosed(p) => {
                write!(f, "waiting for its partition to start jobs again: {p}")
            }
        }
    }
}

/// A job in `partitions` (each its name, its state as Slurm writes it, and whether that
/// state starts jobs) when none of them starts jobs: Slurm keeps it pending
/// (`Reason=PartitionDown`). No partition listed holds nothing.
pub fn partition_closed<'a>(
    partitions: impl IntoIterator<Item = (&'a str, &'a str, bool)>,
) -> Option<Hold> {
    let mut words = Vec::new();
    for (name, state, starts_jobs) in partitions {
        if starts_jobs {
            return None;
        }
        words.push(format!("{name} ({state})"));
    }
    (!words.is_empty()).then(|| Hold::PartitionClosed(words.join(", ")))
}

/// Seconds since 1970 as Slurm writes a time, in UTC and saying so:
/// `2026-12-06T15:20:55 UTC`. A user reading it on a controller in another time zone is
/// not left to guess which one it is.
pub fn format_time_utc(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_in_utc() {
        assert_eq!(format_time_utc(0), "1970-01-01T00:00:00 UTC");
        assert_eq!(format_time_utc(1_796_570_455), "2026-12-06T15:20:55 UTC");
        assert_eq!(format_time_utc(951_782_400), "2000-02-29T00:00:00 UTC");
        assert_eq!(format_time_utc(-1), "1969-12-31T23:59:59 UTC");
    }

    #[test]
    fn a_job_is_held_only_when_none_of_its_partitions_starts_jobs() {
        assert_eq!(
            partition_closed([("gpu", "DOWN", false), ("old", "INACTIVE", false)]),
            Some(Hold::PartitionClosed("gpu (DOWN), old (INACTIVE)".into()))
        );
        assert_eq!(
            partition_closed([("gpu", "DOWN", false), ("old", "UP", true)]),
            None
        );
        assert_eq!(partition_closed([]), None);
    }

    #[test]
    fn holds_keep_their_json_and_words() {
        let json = |h: &Hold| serde_json::to_value(h).unwrap();
        assert_eq!(json(&Hold::UserHold), serde_json::json!("user_hold"));
        assert_eq!(
            json(&Hold::Dependency("afterok:3".into())),
            serde_json::json!({"dependency": "afterok:3"})
        );
        assert_eq!(
            Hold::Begin(0).to_string(),
            "not before its begin time, 1970-01-01T00:00:00 UTC"
        );
        let back: Hold = serde_json::from_value(json(&Hold::Licenses("m:1".into()))).unwrap();
        assert_eq!(back, Hold::Licenses("m:1".into()));
    }
}
