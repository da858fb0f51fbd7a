//! Crash points for the fault tests: the daemon can be told to SIGKILL itself at a named
//! point of its round, so that a test can show that a crash exactly there loses no job,
//! starts none twice and counts no progress twice.
//!
//! `HADAR_FAULT_KILL_AT=POINT[:N]` in the daemon's environment kills it (SIGKILL, as the
//! kernel's OOM killer or a power cut would: no destructor, no flush beyond what is already
//! written) the Nth time (default: the first) it reaches POINT, one of [`POINTS`] or [`FORK_POINTS`]. Unset, the
//! check is one relaxed atomic load per point. An admin never sets it; an unknown point name
//! is refused when the daemon starts rather than silently never firing.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every crash point, in the order a round reaches them.
pub const POINTS: &[&str] = &[
    // After reading Slurm, before the store is brought in line with it.
    "round-read",
    // After the reconciled jobs are written, before planning.
    "round-reconciled",
    // After planning, before any action.
    "round-planned",
    // A hold: after its intent is written, before Slurm is asked.
    "hold-intent",
    // A hold: after Slurm held the job, before the intent is closed.
    "hold-done",
    // A preemption: after its intent is written, before the checkpoint signal.
    "preempt-intent",
    // A preemption: after the checkpoint signal, during the grace time.
    "preempt-signalled",
    // A preemption: after Slurm requeued the job held, before the intent is closed.
    "preempt-requeued",
    // A start: after its intent is written, before Slurm is told the placement.
    "start-intent",
    // A start: after Slurm has the placement, before the job is released.
    "start-placed",
    // A start: after the release, before the intent is closed.
    "start-released",
    // After the round's record is written.
    "round-recorded",
];

/// The crash points of the fork pass (`policy = "hadare"`), reached only by rounds that fork
/// jobs; kept apart from [`POINTS`], which every round reaches.
pub const FORK_POINTS: &[&str] = &[
    // A forked job's round: after it is written (submitting), before its copy job is submitted.
    "fork-round-written",
    // A forked job's round: after its copy job is submitted, before its id is recorded.
    "fork-copies-submitted",
    // A forked job's round: after its copies are averaged, before the round is counted.
    "fork-averaged",
    // A forked job's round: after the round is counted.
    "fork-counted",
];

/// The variable that arms a crash point.
pub const ENV: &str = "HADAR_FAULT_KILL_AT";

struct Armed {
    point: &'static str,
    nth: u64,
    seen: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

/// Why `HADAR_FAULT_KILL_AT` was refused.
#[derive(Debug, thiserror::Error)]
#[error("{ENV}={value}: {why}; points: {points}", points = [POINTS, FORK_POINTS].concat().join(", "))]
pub struct FaultSpecError {
    value: String,
    why: &'static str,
}

fn parse(value: &str) -> Result<Armed, FaultSpecError> {
    let err = |why| FaultSpecError {
        value: value.to_string(),
        why,
    };
    let (name, nth) = match value.split_once(':') {
        Some((n, k)) => (
            n,
            k.trim()
                .parse::<u64>()
                .map_err(|_| err("N must be a positive whole number"))?,
        ),
        None => (value, 1),
    };
    if nth == 0 {
        return Err(err("N must be a positive whole number"));
    }
    let point = POINTS
        .iter()
        .chain(FORK_POINTS)
        .find(|p| **p == name.trim())
        .ok_or_else(|| err("not a crash point"))?;
    Ok(Armed {
        point,
        nth,
        seen: AtomicU64::new(0),
    })
}

/// Reads `HADAR_FAULT_KILL_AT` once; call at start-up so a mistyped point is an error then.
pub fn arm_from_env() -> Result<Option<&'static str>, FaultSpecError> {
    let armed = match std::env::var(ENV) {
        Ok(v) if !v.trim().is_empty() => Some(parse(&v)?),
        _ => None,
    };
    let armed = ARMED.get_or_init(|| armed);
    Ok(armed.as_ref().map(|a| a.point))
}

/// Marks that the daemon reached `point`; kills the process if this is the armed visit.
pub fn reached(point: &'static str) {
    debug_assert!(
        POINTS.contains(&point) || FORK_POINTS.contains(&point),
        "unknown crash point {point}"
    );
    let Some(Some(armed)) = ARMED.get() else {
        return;
    };
    if armed.point != point {
        return;
    }
    let visit = armed.seen.fetch_add(1, Ordering::Relaxed) + 1;
    if visit == armed.nth {
        // stderr is unbuffered: the line is out before the signal lands.
        eprintln!("hadar serve: fault injection: killing the daemon at {point} (visit {visit})");
        // SAFETY: kill(2) on our own pid.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_mistakes_are_named() {
        let a = parse("start-placed:3").unwrap();
        assert_eq!((a.point, a.nth), ("start-placed", 3));
        assert_eq!(parse("round-read").unwrap().nth, 1);
        let e = parse("start-plaed").err().unwrap().to_string();
        assert!(
            e.contains("start-plaed: not a crash point; points: round-read"),
            "{e}"
        );
        assert!(parse("round-read:0").is_err());
        assert_eq!(parse("fork-averaged").unwrap().point, "fork-averaged");
        assert!(parse("round-read:x").is_err());
    }
}
