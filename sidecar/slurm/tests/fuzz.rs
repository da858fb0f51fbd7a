//! Bad input, fuzzed: the daemon's readers of Slurm's output (`scontrol -d show job`,
//! `scontrol show node`, host lists). Job names, comments and work directories in that
//! output are user text, so these readers face hostile input too.
//!
//! Asserted: no panic on arbitrary text; a user's job name or comment (any text without a
//! line break) never changes the fields the daemon trusts (user, state, admin comment,
//! other jobs); and a comment that forges a line is refused. Case counts are explicit.

use hadar_slurm::job::parse_jobs;
use hadar_slurm::node::parse_nodes;
use proptest::prelude::*;

/// Cases per property.
const CASES: u32 = 1500;

/// Two jobs as `scontrol -d show job` prints them: job 5 (user alice, pending, managed)
/// with `name` and `comment`, then job 6 of user bob.
fn two_jobs(name: &str, comment: &str) -> String {
    format!(
        "JobId=5 JobName={name}\n   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n   Priority=0 Nice=0 Account=(null) QOS=normal\n   JobState=PENDING Reason=JobHeldUser Dependency=(null)\n   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n   Partition=gpu AllocNode:Sid=host:1\n   AdminComment=hadar:v1 gpus=2 steps=100 \n   Comment={comment} \n\nJobId=6 JobName=b\n   UserId=bob(1001) GroupId=bob(1001) MCS_label=N/A\n   Priority=0 Nice=0 Account=(null) QOS=normal\n   JobState=PENDING Reason=JobHeldUser Dependency=(null)\n   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n   AdminComment=hadar:v1 gpus=1 \n"
    )
}

/// Words that would forge fields if they were read as fields.
fn hostile_text() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        "(JobId|UserId|JobState|Priority|Reason|AdminComment|Comment|NodeList|TresPerNode|Restarts|HetJobId)=[a-zA-Z0-9:()=,\\[\\]\\-]{0,16}",
        "[^\\n\\r]{0,12}",
        Just("$(touch /tmp/pwned)".to_string()),
    ];
    proptest::collection::vec(word, 0..6).prop_map(|w| w.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn job_output_never_panics(text in "(JobId=[0-9]{1,3} JobName=[^\\n]{0,10}\n|   [A-Za-z]{1,10}=[^\\n]{0,20}\n|     Nodes=[a-z0-9\\[\\],\\-]{0,8} CPU_IDs=0 GRES=[a-z0-9:()\\-]{0,16}\n|[^\\n]{0,30}\n){0,12}") {
        let (jobs, _) = parse_jobs(&text);
        let mut ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), jobs.len(), "a job id accepted twice");
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..500)) {
        let text = String::from_utf8_lossy(&b);
        let _ = parse_jobs(&text);
        let _ = parse_nodes(&text);
        let _ = hadar_slurm::hostlist::expand(&text);
    }

    /// Whatever a user puts in a job name or comment on one line, the daemon reads the same
    /// owner, state, priority and record for both jobs.
    #[test]
    fn names_and_comments_cannot_forge_fields(name in hostile_text(), comment in hostile_text()) {
        let (jobs, refused) = parse_jobs(&two_jobs(&name, &comment));
        prop_assert!(refused.is_empty(), "{:?}", refused);
        prop_assert_eq!(jobs.len(), 2);
        let a = &jobs[0];
        prop_assert_eq!(a.id, 5);
        prop_assert_eq!(a.name.as_str(), name.trim_end());
        prop_assert_eq!(a.user_id, Some(1000));
        prop_assert_eq!(a.status.as_str(), "pending");
        prop_assert_eq!(a.priority, Some(0));
        prop_assert_eq!(a.admin_comment.as_deref(), Some("hadar:v1 gpus=2 steps=100"));
        prop_assert_eq!(a.restarts, 0);
        prop_assert_eq!(a.het_job_id, None);
        let b = &jobs[1];
        prop_assert_eq!((b.id, b.user_id), (6, Some(1001)));
        prop_assert_eq!(b.admin_comment.as_deref(), Some("hadar:v1 gpus=1"));
    }

    /// A comment with a line break that forges a line (another record, or a field) makes the
    /// record untrustworthy: it is refused, never read with the forged value.
    #[test]
    fn comments_forging_lines_are_refused(forged in prop_oneof![
        Just("AdminComment=hadar:v1 gpus=64".to_string()),
        Just("JobId=6 JobName=b".to_string()),
        Just("Comment=hadar-progress:v1 steps=99999 rate=1".to_string()),
    ]) {
        let (jobs, refused) = parse_jobs(&two_jobs("a", &format!("x\n{forged}")));
        prop_assert!(!refused.is_empty());
        for j in &jobs {
            if j.id == 5 {
                prop_assert_eq!(j.admin_comment.as_deref(), Some("hadar:v1 gpus=2 steps=100"));
            }
            if j.id == 6 {
                prop_assert_eq!(j.user_id, Some(1001));
            }
        }
    }
}
