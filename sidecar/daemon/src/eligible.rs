//! Which waiting managed jobs Slurm itself would not start yet, whatever their GPUs: a job
//! its user submitted held (`sbatch --hold`), a job whose dependency is unmet, a job whose
//! `--begin` time is ahead, a job whose licenses are not free ([`short_of_licenses`]; a
//! job submitted with `--licenses` is left to Slurm by the plugin, but its user may add
//! them later), a job none of whose partitions starts jobs ([`partition_closed`]). A
//! released job Slurm keeps pending for the last two reasons is held again. hadar does not
//! plan them (as the site's Slurm would keep them pending), and says why in the job's
//! `Comment`, where `squeue -o %k` shows it. A dependency the jobs the daemon sees already
//! meet does not block ([`crate::dependency`]). Pure.

use crate::dependency;
use hadar_core::gate::{self, Hold};
use hadar_slurm::license::{License, LicenseRequest};
use hadar_slurm::site::PartitionState;
use hadar_slurm::{JobStatus, SlurmJob};
use std::collections::{BTreeMap, HashMap};

/// Each listed job's state by id: what [`blocked`] looks a dependency's jobs up in.
pub fn states(jobs: &[SlurmJob]) -> HashMap<u64, &JobStatus> {
    jobs.iter().map(|j| (j.id, &j.status)).collect()
}

/// Why Slurm would not start `job` at `now_unix` whatever GPUs it had, if it would not;
/// `status_of` gives the state of the jobs a dependency names, where the daemon sees them.
///
/// A user hold is the record's `hold=user` with Slurm still showing the user's hold
/// (`JobHeldUser`) on a job never run (the daemon's own holds are an operator's,
/// `JobHeldAdmin`; a requeue-hold of the daemon's counts a restart).
pub fn blocked<'a>(
    job: &SlurmJob,
    now_unix: f64,
    status_of: impl Fn(u64) -> Option<&'a JobStatus>,
) -> Option<Hold> {
    if job.status != JobStatus::Pending {
        return None;
    }
    let user_hold = job.admin_comment.as_deref().is_some_and(|c| {
        c.split_whitespace()
            .any(|w| w == hadar_request::record::USER_HOLD)
    });
    if user_hold && job.restarts == 0 && job.reason.as_deref() == Some("JobHeldUser") {
        return Some(Hold::UserHold);
    }
    if let Some(d) = job
        .site
        .dependency
        .as_deref()
        .filter(|d| !dependency::met(d, &status_of))
    {
        return Some(Hold::Dependency(d.to_string()));
    }
    // A requeued job's eligible time is Slurm's own delay after the requeue (the daemon
    // starts it at once when it places it); only a never-run job's is its user's `--begin`.
    match job.site.eligible_time {
        Some(t) if job.restarts == 0 && t as f64 > now_unix => Some(Hold::Begin(t)),
        _ => None,
    }
}

/// A released job Slurm keeps pending for its licenses (`Reason=Licenses`: taken by
/// another job after hadar placed it), with what it asks for. It would hold its planned
/// GPUs idle until they are free, so it is held again and waits like any job short of its
/// licenses.
pub fn pending_for_licenses(job: &SlurmJob) -> Option<Hold> {
    let waits = job.status == JobStatus::Pending
        && !job.is_held()
        && job.reason.as_deref() == Some(SLURM_LICENSES_REASON);
    waits.then(|| {
        Hold::Licenses(
            job.site
                .licenses
                .clone()
                .unwrap_or_else(|| "(as Slurm shows them)".into()),
        )
    })
}

/// A job none of whose partitions starts jobs (`DOWN` or `INACTIVE`; `state_of` gives a
/// partition's state, `None` for one Slurm did not list, which blocks nothing): Slurm would
/// keep it pending (`Reason=PartitionDown`), so it is not planned, and a released one is
/// held again rather than hold GPUs it cannot start on.
pub fn partition_closed(
    job: &SlurmJob,
    state_of: impl Fn(&str) -> Option<PartitionState>,
) -> Option<Hold> {
    if job.status != JobStatus::Pending {
        return None;
    }
    closed_partitions(job.partition.as_deref()?, state_of)
}

/// The hold of a job in the comma-separated `partitions` when none of them starts jobs
/// (`state_of` as for [`partition_closed`]): the daemon's gate on Slurm's records and the
/// simulated gate on a site file judge a job's partitions by this one rule.
pub fn closed_partitions(
    partitions: &str,
    state_of: impl Fn(&str) -> Option<PartitionState>,
) -> Option<Hold> {
    let states: Vec<(&str, PartitionState)> = partitions
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| Some((p, state_of(p)?)))
        .collect::<Option<_>>()?;
    gate::partition_closed(
        states
            .iter()
            .map(|(p, s)| (*p, s.as_str(), s.starts_jobs())),
    )
}

/// Slurm's `Reason` for a job waiting for licenses (`WAIT_LICENSES` in
/// `src/common/job_state_reason.c`, the same in 22.05, 24.11 and 26.05).
const SLURM_LICENSES_REASON: &str = "Licenses";

/// The waiting jobs whose licenses are not free, with what they ask for. The cluster's
/// free licenses (`free`) go first to the released jobs Slurm has not started yet
/// (`starting`, which take theirs when they start), then to the `waiting` jobs in
/// submission order (job id: hadar holds them, so Slurm shows them all at priority 0); a
/// job takes all it asks for or none. A request hadar cannot read blocks nothing (Slurm
/// judges it).
pub fn short_of_licenses<'a>(
    waiting: impl IntoIterator<Item = &'a SlurmJob>,
    starting: impl IntoIterator<Item = &'a SlurmJob>,
    free: &[License],
) -> BTreeMap<u64, String> {
    let mut free: Vec<License> = free.to_vec();
    let mut take = |job: &SlurmJob| -> Option<bool> {
        let text = job.site.licenses.as_deref()?;
        let request = LicenseRequest::parse(text)?;
        let Some(taken) = request.take_from(&free) else {
            return Some(false);
        };
        for (name, n) in taken {
            if let Some(l) = free.iter_mut().find(|l| l.name == name) {
                l.free -= n;
            }
        }
        Some(true)
    };
    for job in starting {
        take(job);
    }
    let mut waiting: Vec<&SlurmJob> = waiting.into_iter().collect();
    waiting.sort_by_key(|j| j.id);
    waiting
        .into_iter()
        .filter(|j| take(j) == Some(false))
        .map(|j| (j.id, j.site.licenses.clone().unwrap_or_default()))
        .collect()
}

/// The words a waiting job's `Comment` carries: why it is blocked, or what it waits for
/// (`workers` GPUs, `types` when restricted) and its place among the waiting jobs.
pub fn reason_words(
    blocked: Option<&Hold>,
    workers: u32,
    types: Option<&[String]>,
    position: usize,
) -> String {
    match blocked {
        Some(b) => format!("hadar: {b}"),
        None => {
            let of = types
                .map(|t| format!(" of {}", t.join("/")))
                .unwrap_or_default();
            let s = if workers == 1 { "" } else { "s" };
            let place = match position {
                1..=EXACT_POSITIONS => format!("queue position {position}"),
                _ => format!("queue position over {EXACT_POSITIONS}"),
            };
            format!("hadar: waiting for {workers} GPU{s}{of} ({place})")
        }
    }
}

/// The queue positions a waiting job's comment names exactly; further back it says "over"
/// this. Each change of a comment is one `scontrol update` RPC, and every start moves each
/// job behind it up one place: with exact positions throughout, a queue of 1,000 waiting
/// jobs cost 751 updates in a round (`hadar-scale`, docs/operations.md). `hadar explain`
/// gives the exact place.
pub const EXACT_POSITIONS: usize = 10;

/// The words for a job the site's rules keep waiting (a limit, a reservation, its time
/// limit), as the plan gives the reason; `None` for the other reasons, which
/// [`reason_words`] puts as the GPUs it waits for.
pub fn site_words(reason: &hadar_core::WaitReason) -> Option<String> {
    use hadar_core::WaitReason;
    match reason {
        WaitReason::SiteLimit { limit } => {
            Some(format!("hadar: waiting for the site's limit {limit}"))
        }
        WaitReason::NodeChoice { choice, .. } => Some(node_choice_words(choice)),
        WaitReason::Reservation { .. }
        | WaitReason::TimeLimit { .. }
        | WaitReason::SlurmHolds { .. } => Some(format!("hadar: {reason}")),
        _ => None,
    }
}

/// The comment of a job the nodes it may use leave waiting: the user's own options as they
/// wrote them, not the nodes they allow nor those short of the CPUs and memory it asks for,
/// which change as jobs start and end and would rewrite thousands of comments a round
/// (seen at 10,000 jobs); `hadar explain` names the nodes.
fn node_choice_words(choice: &str) -> String {
    const SHORT: &str = "need for CPUs and memory";
    let (options, short) = match choice.find(SHORT) {
        Some(at) => (choice[..at].trim(), true),
        None => (choice.trim(), false),
    };
    let free = if short {
        " with the CPUs and memory it asks for free"
    } else {
        ""
    };
    match options {
        "" => format!("hadar: waiting for a node{free} where enough GPUs it can use are free"),
        o => format!(
            "hadar: waiting for a node its {o} allows{free} where enough GPUs it can use are free"
        ),
    }
}

/// Whether hadar may write `words` over a job's current `Comment`: it has none, or one of
/// hadar's own (`hadar: ...`, also the form of a directive comment the plugin already read
/// into the record), and it differs.
pub fn may_write(current: Option<&str>, words: &str) -> bool {
    match current {
        None => true,
        Some(c) => c.starts_with("hadar:") && c != words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_choice_comment_names_the_users_options_not_the_nodes() {
        let words = |choice: &str| {
            site_words(&hadar_core::WaitReason::NodeChoice {
                choice: choice.into(),
                nodes: "every node but n1".into(),
            })
            .unwrap()
        };
        assert_eq!(
            words("--exclude=n1"),
            "hadar: waiting for a node its --exclude=n1 allows where enough GPUs it can use are free"
        );
        assert_eq!(
            words("--exclude=n3 need for CPUs and memory (none free for it on n1,n2,n4)"),
            "hadar: waiting for a node its --exclude=n3 allows with the CPUs and memory it asks for free where enough GPUs it can use are free"
        );
        // The nodes short of CPUs and memory change every round; the comment does not.
        assert_eq!(
            words("need for CPUs and memory (none free for it on n1,n2)"),
            words("need for CPUs and memory (none free for it on n7)")
        );
    }

    fn job(reason: &str, comment: &str) -> SlurmJob {
        let text = format!(
            "JobId=7 JobName=a\n   Priority=0 JobState=PENDING Reason={reason} Dependency=(null)\n   AdminComment={comment}\n"
        );
        hadar_slurm::job::parse_jobs(&text).0.remove(0)
    }

    /// No other job in sight.
    fn none(_: u64) -> Option<&'static JobStatus> {
        None
    }

    #[test]
    fn a_user_hold_blocks_only_while_the_user_holds_it() {
        let held = job("JobHeldUser", "hadar:v1 gpus=1 hold=user");
        assert_eq!(blocked(&held, 0.0, none), Some(Hold::UserHold));
        // Released by its user and held again by the daemon (an operator's hold).
        let admin = job("JobHeldAdmin", "hadar:v1 gpus=1 hold=user");
        assert_eq!(blocked(&admin, 0.0, none), None);
        // The plugin's own hold of a job submitted without --hold.
        let plain = job("JobHeldUser", "hadar:v1 gpus=1");
        assert_eq!(blocked(&plain, 0.0, none), None);
        let mut requeued = held.clone();
        requeued.restarts = 1;
        assert_eq!(blocked(&requeued, 0.0, none), None);
    }

    #[test]
    fn dependencies_and_begin_times_block() {
        let mut j = job("JobHeldAdmin", "hadar:v1 gpus=1");
        j.site.dependency = Some("afterok:5(unfulfilled)".into());
        assert_eq!(
            blocked(&j, 0.0, none),
            Some(Hold::Dependency("afterok:5(unfulfilled)".into()))
        );
        // Job 5 completed: met, whatever Slurm has not cleared yet.
        let done = JobStatus::Completed;
        assert_eq!(blocked(&j, 0.0, |id| (id == 5).then_some(&done)), None);
        let running = JobStatus::Running;
        assert!(blocked(&j, 0.0, |id| (id == 5).then_some(&running)).is_some());
        j.site.dependency = None;
        j.site.eligible_time = Some(1000);
        assert_eq!(blocked(&j, 999.0, none), Some(Hold::Begin(1000)));
        assert_eq!(blocked(&j, 1000.0, none), None);
        j.restarts = 1;
        assert_eq!(blocked(&j, 999.0, none), None);
    }

    #[test]
    fn words_and_when_they_may_be_written() {
        let types = vec!["a100".to_string()];
        assert_eq!(
            reason_words(None, 2, Some(&types), 3),
            "hadar: waiting for 2 GPUs of a100 (queue position 3)"
        );
        assert_eq!(
            reason_words(None, 1, None, 11),
            "hadar: waiting for 1 GPU (queue position over 10)"
        );
        assert!(reason_words(Some(&Hold::UserHold), 1, None, 1).contains("held by its user"));
        assert!(may_write(None, "hadar: x"));
        assert!(may_write(Some("hadar: type=resnet50"), "hadar: x"));
        assert!(!may_write(Some("hadar: x"), "hadar: x"));
        assert!(!may_write(Some("my own note"), "hadar: x"));
    }

    #[test]
    fn site_reasons_are_named_and_others_left_to_the_gpu_words() {
        use hadar_core::WaitReason;
        let limit = WaitReason::SiteLimit {
            limit: "QOS gpu4 MaxTRESPerUser=gres/gpu=4 (QOSMaxGRESPerUser)".into(),
        };
        assert_eq!(
            site_words(&limit).as_deref(),
            Some(
                "hadar: waiting for the site's limit QOS gpu4 MaxTRESPerUser=gres/gpu=4 (QOSMaxGRESPerUser)"
            )
        );
        let resv = WaitReason::Reservation {
            name: "resv_n2".into(),
            why: "it is not active yet".into(),
        };
        assert_eq!(
            site_words(&resv).as_deref(),
            Some("hadar: reservation resv_n2: it is not active yet")
        );
        assert_eq!(site_words(&WaitReason::DoesNotFit), None);
    }

    #[test]
    fn a_job_whose_partitions_all_stopped_starting_jobs_is_blocked() {
        let state = |p: &str| match p {
            "gpu" => Some(PartitionState::Down),
            "old" => Some(PartitionState::Inactive),
            "maint" => Some(PartitionState::Drain),
            "up" => Some(PartitionState::Up),
            _ => None,
        };
        let job = |partition: &str| {
            let mut j = SlurmJob::held_with_record(1, "hadar:v1 gpus=1");
            j.partition = Some(partition.into());
            j
        };
        assert_eq!(
            partition_closed(&job("gpu"), state),
            Some(Hold::PartitionClosed("gpu (DOWN)".into()))
        );
        assert_eq!(
            partition_closed(&job("gpu,old"), state),
            Some(Hold::PartitionClosed("gpu (DOWN), old (INACTIVE)".into()))
        );
        // One partition that starts jobs is enough; a draining one still starts its queue.
        assert_eq!(partition_closed(&job("gpu,up"), state), None);
        assert_eq!(partition_closed(&job("maint"), state), None);
        // A partition Slurm did not list blocks nothing (Slurm judges).
        assert_eq!(partition_closed(&job("gpu,gone"), state), None);
        let mut running = job("gpu");
        running.status = JobStatus::Running;
        assert_eq!(partition_closed(&running, state), None);
        assert_eq!(
            Hold::PartitionClosed("gpu (DOWN)".into()).to_string(),
            "waiting for its partition to start jobs again: gpu (DOWN)"
        );
    }

    #[test]
    fn licenses_go_to_starting_jobs_then_waiting_ones_in_submission_order() {
        let with = |id: u64, licenses: &str| {
            let mut j = job("JobHeldUser", "hadar:v1 gpus=1");
            j.id = id;
            j.site.licenses = Some(licenses.into());
            j
        };
        let free = [License {
            name: "matlab".into(),
            total: 3,
            free: 2,
        }];
        // A released job about to start takes one; of the waiting jobs, the earliest takes
        // the other; the later ones wait, whole (job 9 asks for two of one and none fit).
        let starting = [with(3, "matlab:1")];
        let waiting = [with(9, "matlab:2"), with(5, "matlab:1"), with(6, "matlab")];
        let short = short_of_licenses(&waiting, &starting, &free);
        assert_eq!(
            short.into_iter().collect::<Vec<_>>(),
            [(6, "matlab".to_string()), (9, "matlab:2".to_string())]
        );
        // Nothing starting: both matlab:1 jobs fit, the two-license one does not.
        let short = short_of_licenses(&waiting, &[], &free);
        assert_eq!(short.keys().copied().collect::<Vec<_>>(), [9]);
        // A license the cluster does not list is never free; one hadar cannot read is
        // Slurm's to judge; a job without licenses is never blocked by them.
        let short = short_of_licenses(
            &[
                with(1, "ansys:1"),
                with(2, "matlab:lots"),
                job("JobHeldUser", "x"),
            ],
            &[],
            &free,
        );
        assert_eq!(short.keys().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(
            reason_words(Some(&Hold::Licenses("matlab:1".into())), 1, None, 1),
            "hadar: waiting for its licenses matlab:1"
        );
    }
}
