//! Whether a waiting job's dependency, as Slurm shows it (`afterok:12(unfulfilled)`), is
//! already met by the jobs the daemon sees. slurmctld does not test a held job's dependency
//! when its scheduler runs, only in its periodic purge of old jobs (every 60 s unless
//! `MinJobAge` is shorter), so a dependent job hadar holds would wait up to a minute after
//! the job it waits for ends. Where this reading is certain, the daemon plans the job at
//! once; releasing it lets slurmctld test the dependency on its next pass, as it does for
//! any job it does not hold. Anything this reading does not know (`singleton`, `after` with
//! a delay, array elements, `aftercorr`, a job it cannot see) stays Slurm's to decide.
//! Pure.

use hadar_slurm::JobStatus;

/// True when every condition of `dependency` (or, for a `?`-separated list, one of them) is
/// met by the states `status_of` gives, as slurmctld would test it: `afterok` once the job
/// completed, `afternotok` once it ended otherwise, `afterany` once it ended at all (a job
/// still completing has not), `after` once it started, and a condition Slurm marked
/// `(fulfilled)`. False whenever a condition is one this reading does not know.
pub fn met<'a>(dependency: &str, status_of: impl Fn(u64) -> Option<&'a JobStatus>) -> bool {
    let dependency = dependency.trim();
    if dependency.is_empty() {
        return true;
    }
    let any = dependency.contains('?');
    let mut conditions = dependency.split([',', '?']).map(str::trim);
    if any {
        conditions.any(|c| condition_met(c, &status_of))
    } else {
        conditions.all(|c| condition_met(c, &status_of))
    }
}

/// One condition, `kind:id[:id...](state)`: met when Slurm says so or every id's state
/// meets `kind`.
fn condition_met<'a>(condition: &str, status_of: &impl Fn(u64) -> Option<&'a JobStatus>) -> bool {
    let (body, state) = match condition.split_once('(') {
        Some((body, rest)) => (body, rest.strip_suffix(')').unwrap_or(rest)),
        None => (condition, ""),
    };
    if state == "fulfilled" {
        return true;
    }
    if !state.is_empty() && state != "unfulfilled" {
        // `failed`: Slurm knows it will never be met.
        return false;
    }
    let Some((kind, ids)) = body.split_once(':') else {
        return false;
    };
    let test: fn(&JobStatus) -> bool = match kind {
        "afterok" => |s| *s == JobStatus::Completed,
        "afternotok" => |s| s.is_terminal() && *s != JobStatus::Completed,
        "afterany" => JobStatus::is_terminal,
        "after" => |s| *s != JobStatus::Pending,
        _ => return false,
    };
    ids.split(':')
        .all(|id| id.parse::<u64>().ok().and_then(status_of).is_some_and(test))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn met_with(dependency: &str, jobs: &[(u64, JobStatus)]) -> bool {
        let jobs: HashMap<u64, JobStatus> = jobs.iter().cloned().collect();
        met(dependency, |id| jobs.get(&id))
    }

    #[test]
    fn each_kind_is_met_as_slurm_tests_it() {
        use JobStatus::*;
        for (kind, state, expected) in [
            ("afterok", Completed, true),
            ("afterok", Failed, false),
            ("afterok", Running, false),
            ("afterok", Completing, false),
            ("afternotok", Failed, true),
            ("afternotok", Timeout, true),
            ("afternotok", Cancelled, true),
            ("afternotok", Completed, false),
            ("afternotok", Running, false),
            ("afterany", Completed, true),
            ("afterany", NodeFail, true),
            ("afterany", Completing, false),
            ("afterany", Pending, false),
            ("after", Running, true),
            ("after", Pending, false),
        ] {
            let dep = format!("{kind}:8(unfulfilled)");
            assert_eq!(
                met_with(&dep, &[(8, state.clone())]),
                expected,
                "{dep} with job 8 {state:?}"
            );
        }
    }

    #[test]
    fn lists_need_all_or_with_a_question_mark_one() {
        use JobStatus::*;
        let jobs = [(1, Completed), (2, Running)];
        assert!(!met_with(
            "afterok:1(unfulfilled),afterok:2(unfulfilled)",
            &jobs
        ));
        assert!(met_with(
            "afterok:1(unfulfilled)?afterok:2(unfulfilled)",
            &jobs
        ));
        assert!(!met_with("afterok:1:2(unfulfilled)", &jobs));
        assert!(met_with(
            "afterok:1(fulfilled),afterany:1(unfulfilled)",
            &jobs
        ));
        assert!(met_with("", &jobs));
    }

    #[test]
    fn what_this_reading_does_not_know_is_never_met() {
        use JobStatus::*;
        let jobs = [(1, Completed)];
        for dep in [
            "singleton(unfulfilled)",
            "after:1+5(unfulfilled)",
            "afterok:1_3(unfulfilled)",
            "afterok:1_*(unfulfilled)",
            "aftercorr:1(unfulfilled)",
            "afterburstbuffer:1(unfulfilled)",
            "afterok:9(unfulfilled)",
            "afterok:1(failed)",
            "afterok",
            "nonsense",
        ] {
            assert!(!met_with(dep, &jobs), "{dep}");
        }
        assert!(!met_with(
            "afterok:1(unfulfilled)",
            &[(1, Other("BOOT_FAIL".into()))]
        ));
    }
}
