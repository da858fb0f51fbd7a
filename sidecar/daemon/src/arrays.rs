//! Job arrays. Slurm keeps an array's pending elements in one job record until each starts,
//! so hadar cannot give them GPUs one by one there. The plugin holds the whole array (one
//! record, `array=yes` in it); each round the daemon splits pending elements off into job
//! records of their own (`scontrol update JobId=A_I ...`, which gives the element a new job
//! id), and each split-off element is then an ordinary held managed job, placed through the
//! usual path. An array's `%N` throttle is honoured by never having more than N of its
//! elements split off and not ended (waiting for hadar, placed or running) at once. The
//! record of the still-pending elements is never planned itself. Pure.

use crate::eligible;
use hadar_slurm::{JobStatus, SlurmJob};

/// The most elements of one unthrottled array split off in one round (each is one
/// `scontrol update`); the rest follow in the next rounds.
pub const SPLIT_PER_ROUND: usize = 16;

/// One pending element to split off its array's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The array's id.
    pub array_id: u64,
    /// The element's index.
    pub task: u32,
    /// The record (admin comment) it carries, written back unchanged.
    pub record: String,
}

/// Whether `job` is the record of several pending elements of an array (not a job hadar
/// plans: its elements are split off first).
pub fn is_pending_group(job: &SlurmJob) -> bool {
    job.array.as_ref().is_some_and(|a| a.task.is_none())
}

/// The elements to split off this round: for each held managed array record that Slurm
/// would let start (no user hold, dependency or begin time ahead), as many of its lowest
/// pending indices as its throttle leaves room for beside its elements not yet ended.
pub fn splits(jobs: &[SlurmJob], now_unix: f64) -> Vec<Split> {
    let mut out = Vec::new();
    let status = eligible::states(jobs);
    for group in jobs.iter().filter(|j| is_pending_group(j)) {
        let Some(a) = &group.array else { continue };
        let record = group.admin_comment.clone().unwrap_or_default();
        let managed = record.starts_with(hadar_request::record::TAG);
        if !managed
            || group.status != JobStatus::Pending
            || !group.is_held()
            || hadar_request::FailOpenMark::of(&record).is_some()
            || eligible::blocked(group, now_unix, |id| status.get(&id).copied()).is_some()
        {
            continue;
        }
        let live = jobs
            .iter()
            .filter(|e| {
                e.array
                    .as_ref()
                    .is_some_and(|x| x.array_id == a.array_id && x.task.is_some())
                    && !e.status.is_terminal()
            })
            .count();
        let room = match a.throttle {
            Some(n) => (n as usize).saturating_sub(live),
            None => SPLIT_PER_ROUND,
        };
        out.extend(a.pending.iter().take(room).map(|&task| Split {
            array_id: a.array_id,
            task,
            record: record.clone(),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::job::parse_jobs;

    fn jobs(text: &str) -> Vec<SlurmJob> {
        let (jobs, refused) = parse_jobs(text);
        assert!(refused.is_empty(), "{refused:?}");
        jobs
    }

    const GROUP: &str = "JobId=12 ArrayJobId=12 ArrayTaskId=2-7%2 ArrayTaskThrottle=2 JobName=a\n   Priority=0 JobState=PENDING Reason=JobHeldUser\n   AdminComment=hadar:v1 gpus=1 array=yes array-throttle=2\n";

    #[test]
    fn the_throttle_leaves_room_for_running_and_split_elements_only() {
        let none_live = jobs(GROUP);
        let s = splits(&none_live, 0.0);
        assert_eq!(s.iter().map(|s| s.task).collect::<Vec<_>>(), vec![2, 3]);
        assert!(s[0].record.ends_with("array-throttle=2"));
        let one_running = format!(
            "{GROUP}JobId=13 ArrayJobId=12 ArrayTaskId=0 JobName=a\n   JobState=RUNNING Reason=None\n\
             JobId=14 ArrayJobId=12 ArrayTaskId=1 JobName=a\n   JobState=COMPLETED Reason=None\n"
        );
        let s = splits(&jobs(&one_running), 0.0);
        assert_eq!(s.iter().map(|s| s.task).collect::<Vec<_>>(), vec![2]);
        let two_live = format!(
            "{one_running}JobId=15 ArrayJobId=12 ArrayTaskId=1 JobName=a\n   Priority=0 JobState=PENDING Reason=JobHeldAdmin\n"
        );
        assert!(splits(&jobs(&two_live), 0.0).is_empty());
    }

    #[test]
    fn unmanaged_released_and_blocked_arrays_are_left_whole() {
        let unmanaged = GROUP.replace("AdminComment=hadar:v1", "AdminComment=other");
        assert!(splits(&jobs(&unmanaged), 0.0).is_empty());
        let released = GROUP
            .replace("Priority=0 ", "Priority=100 ")
            .replace("JobHeldUser", "None");
        assert!(splits(&jobs(&released), 0.0).is_empty());
        let user_held = GROUP.replace("array-throttle=2", "array-throttle=2 hold=user");
        assert!(splits(&jobs(&user_held), 0.0).is_empty());
        let unthrottled = "JobId=12 ArrayJobId=12 ArrayTaskId=0-99 JobName=a\n   Priority=0 JobState=PENDING Reason=JobHeldUser\n   AdminComment=hadar:v1 gpus=1 array=yes\n";
        assert_eq!(splits(&jobs(unthrottled), 0.0).len(), SPLIT_PER_ROUND);
        assert!(is_pending_group(&jobs(unthrottled)[0]));
    }
}
